package overlay

import (
	"strings"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// childOfUnknownParent returns node C, joined, whose map holds its own
// entry under parent B and its child D, but not B itself: the map of a
// broker that restarted after more than δ of its neighbours in a row and
// rebuilt it from the partial maps of brokers farther away (scenario
// beyond_restart_parent_not_child.txt). B's link is up.
func childOfUnknownParent(t *testing.T) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.Addr, cfg.Delta = "C", "addr-C", 1
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Bootstrap()
	n.self.Parent = "B"
	n.topo.Put(n.self)
	n.topo.Put(message.MapNode{ID: "D", Addr: "addr-D", Epoch: 1, Parent: "C"})
	linked(n, "D")
	p := n.peer("B")
	p.up, p.heardHB, p.heardAny, p.epoch = true, true, true, 2
	n.Ready()
	return n
}

// A restarted broker that our map names as our parent, without its entry,
// asks us to join: it is refused (its place is not ours to give), never
// admitted as our child (a cycle: it under us, we under it).
func TestJoinRequestFromParentNotInMapIsRefused(t *testing.T) {
	n := childOfUnknownParent(t)
	n.Step("B", &message.JoinRequest{Node: message.MapNode{ID: "B", Addr: "addr-B", Epoch: 2}})
	var reply *message.JoinReply
	for _, e := range n.Ready().Messages {
		if r, ok := e.Msg.(*message.JoinReply); ok && e.To == "B" {
			reply = r
		}
	}
	if reply == nil || reply.Err == "" || !strings.Contains(reply.Err, "does not hold the place") {
		t.Fatalf("JoinReply to B = %+v, want a refusal", reply)
	}
	if n.topo.Has("B") || n.topo.Parent("C") != "B" {
		t.Fatalf("map after the refusal: B present=%v, parent of C=%q", n.topo.Has("B"), n.topo.Parent("C"))
	}
	// A broker nobody names is still admitted as a new child.
	p := n.peer("X")
	p.up, p.heardHB, p.heardAny, p.epoch = true, true, true, 1
	n.Step("X", &message.JoinRequest{Node: message.MapNode{ID: "X", Addr: "addr-X", Epoch: 1}})
	if n.topo.Parent("X") != "C" {
		t.Fatalf("X not admitted as C's child: parent %q", n.topo.Parent("X"))
	}
}

// The same restarted parent, rejoined at its old place elsewhere, asks us
// for our state naming its own parent (A), unknown to us: we learn its
// place (the edge to it exists on our side again), answer with our side,
// and re-learn its side once it is joined.
func TestStateRequestFromParentNotInMapLearnsItsPlace(t *testing.T) {
	n := childOfUnknownParent(t)
	n.Step("B", &message.StateRequest{Node: message.MapNode{ID: "B", Addr: "addr-B", Epoch: 2, Parent: "A"}})
	if e, ok := n.topo.Get("B"); !ok || e.Parent != "A" || e.Epoch != 2 {
		t.Fatalf("B's entry after its StateRequest: %+v, %v", e, ok)
	}
	if d := n.direction("B"); d != "B" {
		t.Fatalf("direction of B = %q, want B (the edge C-B)", d)
	}
	if !n.gaps.resyncDirs["B"] {
		t.Error("B's side not marked for a resync")
	}
	var reply *message.StateReply
	for _, e := range n.Ready().Messages {
		if r, ok := e.Msg.(*message.StateReply); ok && e.To == "B" {
			reply = r
		}
	}
	if reply == nil || reply.NotMember {
		t.Fatalf("StateReply to B = %+v", reply)
	}
	has := map[message.BrokerID]message.BrokerID{}
	for _, e := range reply.Map {
		has[e.ID] = e.Parent
	}
	if has["C"] != "B" || has["D"] != "C" {
		t.Errorf("StateReply map %v: want C under B and D under C", reply.Map)
	}
}

// A subscription flood from a broker our map does not hold, with two
// neighbours unusable (either could hide it): held unanswered, neither
// installed nor sent on; once a resync's map places the sender, it is
// handled as from that side (not sent back there, the sender's broker as
// its from-pointer).
func TestFloodFromUnplacedSenderIsHeld(t *testing.T) {
	n := childWithTwoChildren(t, 2, 1, "B", "D", "E", "G")
	n.peer("B").suspected = true
	n.peer("D").suspected = true
	n.routesChanged()
	n.Ready()

	sub := message.SubID{Edge: "H", Epoch: 1, N: 1}
	n.Step("G", &message.SubFlood{Sub: sub, Filter: classFilter("stock"), From: "G"})
	if _, ok := n.table.Get(sub); ok {
		t.Fatal("the flood of an unplaced sender was installed")
	}
	for _, e := range n.Ready().Messages {
		if f, ok := e.Msg.(*message.SubFlood); ok {
			t.Fatalf("the flood of an unplaced sender was sent on to %s: %+v", e.To, f)
		}
		if _, ok := e.Msg.(*message.SubConfirm); ok {
			t.Fatalf("the flood of an unplaced sender was answered (to %s)", e.To)
		}
	}
	// G answers the resync: it is behind D (C-D-F-G).
	n.Step("G", &message.StateReply{Map: []message.MapNode{
		{ID: "C", Addr: "addr-C", Epoch: 1, Parent: "B"},
		{ID: "D", Addr: "addr-D", Epoch: 1, Parent: "C"},
		{ID: "F", Addr: "addr-F", Epoch: 1, Parent: "D"},
		{ID: "G", Addr: "addr-G", Epoch: 1, Parent: "F"},
	}})
	e, ok := n.table.Get(sub)
	if !ok {
		t.Fatal("the held flood was not handled once its sender was placed")
	}
	if e.Dir != "D" || e.From != "G" {
		t.Errorf("entry dir=%s from=%s, want dir=D from=G", e.Dir, e.From)
	}
	for _, m := range n.Ready().Messages {
		if f, ok := m.Msg.(*message.SubFlood); ok && f.Sub == sub && (m.To == "D" || m.To == "F" || m.To == "G") {
			t.Errorf("the flood went back toward its sender's side, to %s", m.To)
		}
	}
}

// A flood from a broker our map does not hold, with one neighbour unusable
// (recovering) and another one we have no link to, not yet suspected (our
// dial to it just failed): the sender may be behind either, so the flood is
// held, not placed behind the unusable one (beyond δ: sent on with that
// side as its from-pointer, it never reached the publishers there).
func TestFloodFromUnknownSenderBesideUnlinkedNeighbourIsHeld(t *testing.T) {
	n := childWithTwoChildren(t, 1, 2, "B", "E", "G")
	n.peer("B").joined = false // recovering: unusable
	n.peer("D")                // known, no link, not suspected yet
	n.routesChanged()
	n.Ready()

	sub := message.SubID{Edge: "H", Epoch: 1, N: 1}
	n.Step("G", &message.SubFlood{Sub: sub, Filter: classFilter("stock"), From: "G"})
	if e, ok := n.table.Get(sub); ok {
		t.Fatalf("the flood was placed: dir=%s from=%s", e.Dir, e.From)
	}
	for _, e := range n.Ready().Messages {
		switch e.Msg.(type) {
		case *message.SubFlood, *message.SubConfirm:
			t.Fatalf("the flood was sent on or answered: %T to %s", e.Msg, e.To)
		}
	}
	// G's state places it behind D (C-D-G): handled then, sent on to B.
	n.Step("G", &message.StateReply{Map: []message.MapNode{
		{ID: "C", Addr: "addr-C", Epoch: 1, Parent: "B"},
		{ID: "D", Addr: "addr-D", Epoch: 1, Parent: "C"},
		{ID: "G", Addr: "addr-G", Epoch: 1, Parent: "D"},
	}})
	if e, ok := n.table.Get(sub); !ok || e.Dir != "D" {
		t.Fatalf("entry %+v (known %v), want dir=D", e, ok)
	}
}

// A flood from a broker our map does not hold, with one neighbour unusable
// (recovering) and another one linked whose first heartbeat has not arrived
// yet (it restarted: that heartbeat says it is recovering): held, not placed
// behind the one known unusable (scenario restart_unplaced_unheard.txt:
// placed behind the recovering neighbour, the entry pointed away from the
// sender's side, the flood was confirmed and the publications from the
// other side were dropped). The sender is asked for a resync once, not again when the
// held flood is replayed without placing it, and again on a new link.
func TestFloodFromUnknownSenderBesideUnheardNeighbourIsHeld(t *testing.T) {
	n := childWithTwoChildren(t, 1, 2, "B", "E", "G")
	n.peer("B").joined = false // recovering: unusable
	n.LinkUp("D")              // linked, nothing heard on the new link yet
	n.routesChanged()
	n.Ready()

	sub := message.SubID{Edge: "H", Epoch: 1, N: 1}
	n.Step("G", &message.SubFlood{Sub: sub, Filter: classFilter("stock"), From: "G"})
	if e, ok := n.table.Get(sub); ok {
		t.Fatalf("the flood was placed: dir=%s from=%s", e.Dir, e.From)
	}
	resyncs := func() int {
		k := 0
		for _, e := range n.Ready().Messages {
			switch m := e.Msg.(type) {
			case *message.SubFlood, *message.SubConfirm:
				t.Fatalf("the flood was sent on or answered: %T to %s", e.Msg, e.To)
			case *message.StateRequest:
				if e.To == "G" && m.Resync {
					k++
				}
			}
		}
		return k
	}
	if k := resyncs(); k != 1 {
		t.Fatalf("%d resyncs asked of the sender, want 1", k)
	}
	// A StateReply that does not place G (E's, with nothing of G's side)
	// replays the held flood: held again, G not asked again.
	n.Step("E", &message.StateReply{Map: []message.MapNode{{ID: "E", Addr: "addr-E", Epoch: 1, Parent: "C"}}})
	if _, ok := n.table.Get(sub); ok {
		t.Fatal("the flood was placed by a reply that does not hold its sender")
	}
	if k := resyncs(); k != 0 {
		t.Fatalf("%d resyncs asked again of the sender, want 0", k)
	}
	// A new link to G: G sends the flood again and is asked again.
	n.LinkDown("G")
	n.LinkUp("G")
	n.Step("G", &message.Heartbeat{Epoch: 1, Joined: true})
	n.Step("G", &message.SubFlood{Sub: sub, Filter: classFilter("stock"), From: "G"})
	if k := resyncs(); k != 1 {
		t.Fatalf("%d resyncs asked of the sender on its new link, want 1", k)
	}
	// G's state places it behind D (C-D-G): handled then.
	n.Step("G", &message.StateReply{Map: []message.MapNode{
		{ID: "C", Addr: "addr-C", Epoch: 1, Parent: "B"},
		{ID: "D", Addr: "addr-D", Epoch: 1, Parent: "C"},
		{ID: "G", Addr: "addr-G", Epoch: 1, Parent: "D"},
	}})
	if e, ok := n.table.Get(sub); !ok || e.Dir != "D" {
		t.Fatalf("entry %+v (known %v), want dir=D", e, ok)
	}
}

// A broker removed from the tree as gone that restarts and joins us anew is
// routable again once it says it is joined (scenario gone_rejoin_anew.txt:
// it stayed marked gone, and what we queued for its side stayed queued).
func TestGoneBrokerJoiningAnewIsRoutable(t *testing.T) {
	n := rootWithGoneChild(t)
	n.peer("B").up = true
	n.Step("B", &message.Heartbeat{Epoch: 2})
	n.Step("B", &message.JoinRequest{Node: message.MapNode{ID: "B", Addr: "addr-B", Epoch: 2}})
	n.Step("B", &message.Heartbeat{Epoch: 2, Joined: true})
	if !n.topo.Has("B") || n.unusable("B") {
		t.Errorf("B joined anew: in map %v, unusable %v (gone %v)", n.topo.Has("B"), n.unusable("B"), n.peers["B"].gone)
	}
}

// The same broker joining anew elsewhere (a topology change adds it under a
// larger epoch) is not gone for us either.
func TestGoneBrokerAddedAnewIsNotGone(t *testing.T) {
	n := rootWithGoneChild(t, "C")
	n.Step("C", &message.TopoChange{Origin: "C", Seq: 1 << 40, Hops: 1,
		Add: []message.MapNode{{ID: "B", Addr: "addr-B", Epoch: 2, Parent: "C"}}})
	if !n.topo.Has("B") || n.unusable("B") {
		t.Errorf("B added anew: in map %v, unusable %v (gone %v)", n.topo.Has("B"), n.unusable("B"), n.peers["B"].gone)
	}
}

// childWithTwoChildren returns node C (δ delta), joined, under the root B
// (epoch epochB) with children D and E in its map, and links up to the
// brokers named in linkedTo: the setting of the unplaced-sender tests.
func childWithTwoChildren(t *testing.T, delta int, epochB uint64, linkedTo ...message.BrokerID) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.Addr, cfg.Delta = "C", "addr-C", delta
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Bootstrap()
	n.self.Parent = "B"
	n.topo.Put(n.self)
	n.topo.Put(message.MapNode{ID: "B", Addr: "addr-B", Epoch: epochB, Parent: ""})
	n.topo.Put(message.MapNode{ID: "D", Addr: "addr-D", Epoch: 1, Parent: "C"})
	n.topo.Put(message.MapNode{ID: "E", Addr: "addr-E", Epoch: 1, Parent: "C"})
	for _, id := range linkedTo {
		linked(n, id)
	}
	return n
}

// rootWithGoneChild returns the root A (δ = 1) with its child B removed
// from the tree as gone, and its other children (linked up) in its map.
func rootWithGoneChild(t *testing.T, others ...message.BrokerID) *Node {
	t.Helper()
	n := nodeA(t, 1)
	n.Bootstrap()
	for _, id := range append([]message.BrokerID{"B"}, others...) {
		n.topo.Put(message.MapNode{ID: id, Addr: "addr-" + string(id), Epoch: 1, Parent: "A"})
		linked(n, id)
	}
	n.routesChanged()
	n.Ready()
	p := n.peer("B")
	n.suspect(p, "test")
	n.declareGone(p)
	n.Ready()
	if !n.topo.Removed("B") {
		t.Fatal("setup: B was not removed from the tree")
	}
	return n
}

// A resync that teaches us a whole side at once floods those
// subscriptions on to our other side paced, at most onwardPerHeartbeat per
// heartbeat interval, and every one of them in the end (rule "a resync
// floods on, paced", docs/protocol.md §8).
func TestResyncFloodsOnPaced(t *testing.T) {
	n := childOfUnknownParent(t)
	p := n.peer("B")
	p.joined = true
	linked(n, "D")
	const total = 3*onwardPerHeartbeat + 7
	var subs []message.SubState
	for i := range total {
		subs = append(subs, message.SubState{Sub: message.SubID{Edge: "B", Epoch: 2, N: uint64(i + 1)}, Filter: classFilter("a"), From: "B"})
	}
	n.Step("B", &message.StateReply{Map: append(n.topo.Nodes(), message.MapNode{ID: "B", Addr: "addr-B", Epoch: 2}), Subs: subs})
	flooded := map[message.SubID]bool{}
	count := func() int {
		k := 0
		for _, e := range n.Ready().Messages {
			if f, ok := e.Msg.(*message.SubFlood); ok && e.To == "D" && !f.Unsub {
				flooded[f.Sub] = true
				k++
			}
		}
		return k
	}
	if k := count(); k != 0 {
		t.Fatalf("%d SubFloods to D on the resync's own step, want 0 (paced by the tick)", k)
	}
	perInterval := 0
	for tick := 1; tick <= 10*n.cfg.HeartbeatTicks; tick++ {
		n.Step("B", &message.Heartbeat{Epoch: 2, Joined: true})
		n.Step("D", &message.Heartbeat{Epoch: 1, Joined: true})
		n.Tick()
		perInterval += count()
		if tick%n.cfg.HeartbeatTicks == 0 {
			if perInterval > onwardPerHeartbeat {
				t.Fatalf("%d SubFloods to D in one heartbeat interval, bound %d", perInterval, onwardPerHeartbeat)
			}
			perInterval = 0
		}
	}
	if len(flooded) != total {
		t.Fatalf("%d of %d learned subscriptions flooded on to D", len(flooded), total)
	}
}
