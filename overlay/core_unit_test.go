package overlay

import (
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
)

// nodeA returns a new node A (address addr-A) with δ = delta, not started.
func nodeA(t *testing.T, delta int) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.Addr, cfg.Delta = "A", "addr-A", delta
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// chainNode returns node A of the chain A-B-C-D-E-F (parent first), a
// joined member with every other broker in its map, and δ = delta.
func chainNode(t *testing.T, delta int) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.Addr, cfg.Delta, cfg.DACKTicks = "A", "addr-A", delta, 4
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Bootstrap()
	parent := message.BrokerID("A")
	for _, id := range []message.BrokerID{"B", "C", "D", "E", "F"} {
		n.topo.Put(message.MapNode{ID: id, Addr: "addr-" + string(id), Epoch: 1, Parent: parent})
		parent = id
	}
	return n
}

// linked marks peer id as linked with a heartbeat saying joined.
func linked(n *Node, id message.BrokerID) {
	p := n.peer(id)
	p.up, p.heardHB, p.heardAny, p.joined, p.epoch = true, true, true, true, 1
}

// computeHop: a bypass hop whose link is not up yet is passed over for a
// linked, joined broker further on the path (within δ+1 hops); never a
// tree neighbour merely not linked, never past the recipient or δ+1 hops.
func TestComputeHopPassesPendingBypassHop(t *testing.T) {
	cases := []struct {
		name      string
		delta     int
		suspected []message.BrokerID
		up        []message.BrokerID
		to        message.BrokerID
		want      message.BrokerID
		skipped   int
	}{
		{"neighbour alive and linked", 3, nil, []message.BrokerID{"B", "C", "D"}, "E", "B", 0},
		{"neighbour not linked: not skipped", 3, nil, []message.BrokerID{"C", "D"}, "E", "B", 0},
		{"bypass hop linked", 3, []message.BrokerID{"B"}, []message.BrokerID{"C", "D"}, "E", "C", 1},
		{"bypass hop pending, next linked", 3, []message.BrokerID{"B"}, []message.BrokerID{"D"}, "E", "D", 2},
		{"bypass hop pending, recipient linked", 3, []message.BrokerID{"B"}, []message.BrokerID{"E"}, "E", "E", 3},
		{"nothing linked behind: wait for the hop", 3, []message.BrokerID{"B"}, nil, "E", "C", 1},
		{"linked broker beyond δ+1 hops: not used", 2, []message.BrokerID{"B"}, []message.BrokerID{"E"}, "E", "C", 1},
		{"recipient is the pending hop", 3, []message.BrokerID{"B"}, []message.BrokerID{"D"}, "C", "C", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := chainNode(t, c.delta)
			for _, s := range c.suspected {
				n.peer(s).suspected = true
			}
			for _, u := range c.up {
				linked(n, u)
			}
			h := n.computeHop(c.to)
			if !h.ok || h.to != c.want || h.skipped != c.skipped {
				t.Errorf("hop toward %s = %+v, want %s skipping %d", c.to, h, c.want, c.skipped)
			}
		})
	}
}

// dackDue: never two DACKs on a link within a period; at the first
// allowed tick, held one tick while another neighbour's DACK, in phase
// with ours, is due.
func TestDackDue(t *testing.T) {
	const P = 4 // DACKTicks of chainNode
	cases := []struct {
		name   string
		now    int64
		last   int64 // our last DACK on the link to B
		otherC int64 // tick of C's last DACK to us (0: none)
		upC    bool
		want   bool
	}{
		{"within the period", 12, 10, 0, true, false},
		{"period over, no other input", 10 + P, 10, 0, true, true},
		{"input in phase, due now: hold", 10 + P, 10, 10, true, false},
		{"input in phase, held a tick already: send", 11 + P, 10, 10, true, true},
		{"input arrived since our last: send", 10 + P, 10, 11, true, true},
		{"input out of phase (earlier): send", 10 + P, 10, 9, true, true},
		{"input link down: send", 10 + P, 10, 10, false, true},
		{"late: send", 13 + P, 10, 10, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := chainNode(t, 3)
			n.now = c.now
			b, cc := n.peer("B"), n.peer("C")
			b.up, b.dackAt = true, c.last
			cc.up, cc.dackIn = c.upC, c.otherC
			if got := n.dackDue(b); got != c.want {
				t.Errorf("dackDue at %d (last %d, C's DACK at %d) = %v, want %v", c.now, c.last, cc.dackIn, got, c.want)
			}
		})
	}
}

// A recovering broker whose side toward B holds only restarted brokers
// (B and C both answer NotMember, each naming the other as a former
// neighbour) completes its recovery instead of asking them in turn
// forever (scenario restart_chain_stateless.txt).
func TestRecoveryStatelessChain(t *testing.T) {
	cases := []struct {
		name    string
		replies []message.BrokerID // NotMember answers, in order
		names   map[message.BrokerID][]message.BrokerID
		joined  bool
		waiting []message.BrokerID
	}{
		{"B then C, naming each other", []message.BrokerID{"B", "C"},
			map[message.BrokerID][]message.BrokerID{"B": {"C"}, "C": {"B", "A"}}, true, nil},
		{"B names C, C not answered yet", []message.BrokerID{"B"},
			map[message.BrokerID][]message.BrokerID{"B": {"C"}}, false, []message.BrokerID{"C"}},
		{"B again after C: ignored", []message.BrokerID{"B", "C", "B"},
			map[message.BrokerID][]message.BrokerID{"B": {"C"}, "C": {"B"}}, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := nodeA(t, 3)
			n.topo.Put(message.MapNode{ID: "A", Addr: "addr-A", Epoch: 2})
			n.topo.Put(message.MapNode{ID: "B", Addr: "addr-B", Epoch: 2, Parent: "A"})
			n.topo.Put(message.MapNode{ID: "C", Addr: "addr-C", Epoch: 2, Parent: "B"})
			for _, id := range []message.BrokerID{"B", "C"} {
				p := n.peer(id)
				p.up, p.heardHB, p.heardAny, p.joined, p.epoch = true, true, true, false, 2
			}
			n.mem.member = true
			n.rec.stateWait = map[message.BrokerID]bool{"B": true}
			for _, from := range c.replies {
				r := &message.StateReply{NotMember: true}
				for _, jp := range c.names[from] {
					r.Joinpoints = append(r.Joinpoints, message.MapNode{ID: jp, Addr: "addr-" + string(jp)})
				}
				n.onStateReply(from, r)
			}
			if n.mem.joined != c.joined {
				t.Errorf("joined = %v, want %v (still waiting for %v)", n.mem.joined, c.joined, n.rec.stateWait)
			}
			for _, w := range c.waiting {
				if !n.rec.stateWait[w] {
					t.Errorf("not waiting for %s: %v", w, n.rec.stateWait)
				}
			}
		})
	}
}

// A subscription flood from a broker whose answer this broker awaits for
// the same flood (crossed floods) is answered at once and that broker is
// still awaited; from any other broker it waits like before.
func TestCrossedFloodAnsweredAtOnce(t *testing.T) {
	sub := message.SubID{Edge: "F", Epoch: 1, N: 1}
	cases := []struct {
		name       string
		from       message.BrokerID
		wantAck    bool
		stillOut   bool
		wantWaiter bool
	}{
		{"from an awaited target", "C", true, true, false},
		{"from another broker", "D", false, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := chainNode(t, 3)
			for _, id := range []message.BrokerID{"B", "C", "D"} {
				linked(n, id)
			}
			k := floodKey{kind: fkSub, sub: sub}
			f := &flood{key: k, except: "B", budget: -1, waiters: []message.BrokerID{"B"}}
			f.targets = []ftarget{{id: "C", epoch: 1, out: true}}
			f.nOut = 1
			n.floods.pending[k] = f
			n.Ready()
			n.onSubFlood(c.from, &message.SubFlood{Sub: sub, From: "F"})
			acked := false
			for _, e := range n.Ready().Messages {
				if sc, ok := e.Msg.(*message.SubConfirm); ok && e.To == c.from && sc.Sub == sub {
					acked = true
				}
			}
			if acked != c.wantAck {
				t.Errorf("SubConfirm to %s sent = %v, want %v", c.from, acked, c.wantAck)
			}
			if g := n.floods.pending[k]; f.isOut("C") != c.stillOut || g != f {
				t.Errorf("C still awaited = %v, flood pending = %v; want %v, true", f.isOut("C"), g == f, c.stillOut)
			}
			waiter := false
			for _, w := range f.waiters {
				waiter = waiter || w == c.from
			}
			if waiter != c.wantWaiter {
				t.Errorf("%s among the waiters = %v, want %v", c.from, waiter, c.wantWaiter)
			}
		})
	}
}

// A duplicate of a publication still queued here holds the discarded
// watermark about its upstream stamps below them: discarded(U) means every
// publication received with a U-stamp up to it has left the queue, and
// this one has not (scenario restart_duplicate_holds_discarded.txt: a
// broker took a publication by bypass, then again through a restarted
// neighbour, reported discarded about that neighbour's stamp, and the
// neighbour purged the copy still held here toward a crashed broker). The
// hold goes when the queued copy leaves.
func TestDuplicateOfQueuedHoldsDiscarded(t *testing.T) {
	n := chainNode(t, 3)
	// G under A, H under G: the side away from the subscriber at D.
	n.topo.Put(message.MapNode{ID: "G", Addr: "addr-G", Epoch: 1, Parent: "A"})
	n.topo.Put(message.MapNode{ID: "H", Addr: "addr-H", Epoch: 2, Parent: "G"})
	for _, id := range []message.BrokerID{"B", "G", "H"} {
		linked(n, id)
	}
	f := classFilter("b")
	if _, err := n.table.Insert(routing.Entry{Sub: message.SubID{Edge: "D", Epoch: 1, N: 1}, Filter: f, From: "D", Dir: "B"}); err != nil {
		t.Fatal(err)
	}
	id := message.PubID{Publisher: "P", Epoch: 1, Seq: 8}
	attrs := []matching.Attr{strAttr("class", "b")}
	// First by G's bypass (G's stamp 22), then through H (restarted,
	// epoch 2: stamp 4) with the same G stamp.
	n.onPub("G", &message.Pub{ID: id, Attrs: attrs, Stamps: []message.Stamp{{B: "G", E: 1, S: 22}}})
	if n.fwd.queueLen != 1 {
		t.Fatalf("queue holds %d, want 1", n.fwd.queueLen)
	}
	n.onPub("H", &message.Pub{ID: id, Attrs: attrs, Stamps: []message.Stamp{{B: "H", E: 2, S: 4}, {B: "G", E: 1, S: 22}}})
	n.updateDiscarded()
	r, ok := n.store.Own("H", 2)
	if !ok || r.Arrived != 4 {
		t.Fatalf("own report about H = %+v, %v; want arrived 4", r, ok)
	}
	if r.Discarded >= 4 {
		t.Fatalf("discarded about H = %d while the copy is queued, want < 4", r.Discarded)
	}
	// The queued copy leaves: the hold is released.
	n.fwd.queue[0].purged = true
	n.updateDiscarded()
	if r, _ := n.store.Own("H", 2); r.Discarded != 4 {
		t.Fatalf("discarded about H = %d after the copy left, want 4", r.Discarded)
	}
}

// A heartbeat says whether the broker is routable (not while it leaves)
// and which of its tree neighbours it suspects (no other broker).
func TestHeartbeatSaysJoinedAndSuspects(t *testing.T) {
	n := chainNode(t, 3)
	linked(n, "B")
	linked(n, "C")
	if hb := n.heartbeat(); !hb.Joined || len(hb.Suspects) != 0 {
		t.Fatalf("heartbeat = %+v", hb)
	}
	n.peer("B").suspected = true
	n.peer("C").suspected = true // not a tree neighbour of A
	if hb := n.heartbeat(); !hb.Joined || len(hb.Suspects) != 1 || hb.Suspects[0] != "B" {
		t.Fatalf("after B's and C's suspicion: %+v", hb)
	}
	n.mem.leaving = true
	if hb := n.heartbeat(); hb.Joined || len(hb.Suspects) != 1 {
		t.Fatalf("leaving: %+v", hb)
	}
}

// "Removed while alive" concerns the incarnation that was removed: a
// broker that removed B from the tree tells B's old incarnation, if it
// speaks again, that it was removed, and never a new one. A restarted B
// links (its first heartbeats not joined) and joins through another
// broker: told Removed, it restarted again, and its restart found its
// address still bound and the broker stopped (a process-mode fuzz run).
func TestRemovedIsToldOnlyToTheRemovedIncarnation(t *testing.T) {
	removedB := func() *Node {
		n := chainNode(t, 2)
		linked(n, "B")
		n.Ready()
		n.applyLeave(&message.TopoChange{Origin: "A", Seq: 1, Remove: []message.BrokerID{"B"}, Leaver: "B",
			Reparent: []message.MapNode{{ID: "C", Addr: "addr-C", Epoch: 1, Parent: "A"}}})
		if n.topo.Has("B") || !n.peer("B").gone {
			t.Fatalf("B not removed: in map %v, gone %v", n.topo.Has("B"), n.peer("B").gone)
		}
		n.Ready()
		return n
	}
	told := func(n *Node) bool {
		for _, e := range n.Ready().Messages {
			if hb, ok := e.Msg.(*message.Heartbeat); ok && e.To == "B" && hb.Removed {
				return true
			}
		}
		return false
	}
	n := removedB()
	n.Step("B", &message.Heartbeat{Epoch: 1, Joined: true})
	if !told(n) {
		t.Error("B's removed incarnation spoke again and was not told it was removed")
	}
	n = removedB()
	n.Step("B", &message.Heartbeat{Epoch: 2})
	n.Step("B", &message.Heartbeat{Epoch: 2, Joined: true})
	if told(n) {
		t.Error("B's new incarnation was told it was removed")
	}
}

// A publication from an incarnation removed while alive (told so) is
// dropped: the zombie forwards on the tree it had, and its later
// publication, taken here through a neighbour it still took for its child,
// made the duplicate filter drop its earlier one offered again after its
// restart (a sim fuzz run within δ with publication logs: 1 lost). A
// publication from a leaver (never told: it says it is leaving) is taken.
func TestPublicationOfARemovedIncarnationIsDropped(t *testing.T) {
	for _, c := range []struct {
		name  string
		hb    *message.Heartbeat
		taken bool
	}{
		{"removed while alive", &message.Heartbeat{Epoch: 1, Joined: true}, false},
		{"leaver", &message.Heartbeat{Epoch: 1}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := chainNode(t, 2)
			n.mem.joined = true
			linked(n, "B")
			n.subscribe(1, &clientState{subs: map[message.SubID]uint64{}}, &message.Subscribe{Req: 1, Filter: classFilter("a")})
			n.applyLeave(&message.TopoChange{Origin: "A", Seq: 1, Remove: []message.BrokerID{"B"}, Leaver: "B",
				Reparent: []message.MapNode{{ID: "C", Addr: "addr-C", Epoch: 1, Parent: "A"}}})
			n.Ready()
			n.Step("B", c.hb)
			n.Step("B", &message.Pub{ID: message.PubID{Publisher: "P", Epoch: 1, Seq: 1},
				Attrs:  []matching.Attr{{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "a"}}},
				Stamps: []message.Stamp{{B: "B", E: 1, S: 1}}})
			delivered := false
			for _, e := range n.Ready().ToClients {
				_, ok := e.Msg.(*message.Deliver)
				delivered = delivered || ok
			}
			if delivered != c.taken {
				t.Errorf("publication delivered = %v, want %v", delivered, c.taken)
			}
		})
	}
}

// A far broker answering a recovering one (subsFor, x beyond its
// neighbours) leaves out a subscription whose pointer stops short of δ+1
// hops at a broker that is not its edge, on the way to x: the pointer was
// set while the map did not reach the edge, and the subscriber may be
// behind x. Named, x installed it toward us, the first answer won over its
// own child's, and x never forwarded to that child (a sim fuzz run, δ = 3:
// 7 deliveries lost). A pointer that is its edge is still named.
func TestFarStateReplyLeavesOutTruncatedPointers(t *testing.T) {
	n := chainNode(t, 3) // A-B-C-D-E-F; D is 3 hops away
	f := classFilter("a")
	truncated := message.SubID{Edge: "X", Epoch: 1, N: 1} // X behind D, not in A's map
	edge := message.SubID{Edge: "C", Epoch: 1, N: 1}      // C's own subscriber
	for _, e := range []routing.Entry{
		{Sub: truncated, Filter: f, From: "B", Dir: "B"},
		{Sub: edge, Filter: f, From: "C", Dir: "B"},
	} {
		if _, err := n.table.Insert(e); err != nil {
			t.Fatal(err)
		}
	}
	named := map[message.SubID]bool{}
	for _, s := range n.subsFor("D") {
		named[s.Sub] = true
	}
	if named[truncated] {
		t.Error("a subscription with a truncated pointer on the way to D was named to D")
	}
	if !named[edge] {
		t.Error("C's own subscription (its pointer is its edge, before D) was left out")
	}
}

// A recovering broker answers a restarted neighbour's StateRequest while
// it awaits only peers on that neighbour's side, also peers its map does
// not hold: one the map names as the parent of a broker on that side
// (Map.Dangling), or one named by a restarted broker on that side whose
// names cannot be our ancestors. Counted on no side, such a peer held the
// answer while the neighbour waited for ours: both waited until
// gone_after. A peer awaited on another side still holds the answer, and
// a requester the map does not place is answered once every awaited peer
// is unplaced too.
func TestRecoveringAnswersNeighbourWhileAwaitingItsSide(t *testing.T) {
	cases := []struct {
		name      string
		delta     int
		requester message.BrokerID
		awaited   message.BrokerID
		namedBy   message.BrokerID
		answer    bool
	}{
		{"unmapped parent of a broker on B's side", 2, "B", "X", "", true},
		{"unmapped peer named by our child D", 2, "D", "Y", "D", true},
		{"unmapped peer named by B, our parent", 2, "B", "Y", "B", true},
		{"named by D, but our ancestor 3 hops up is unknown: may be it", 3, "D", "Y", "D", false},
		{"a peer on our other side", 2, "B", "D", "", false},
		{"unplaced requester, unplaced awaited peer", 2, "Z", "Y", "", true},
		{"unplaced requester, awaited peer on a side", 2, "Z", "D", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := nodeA(t, c.delta)
			// X - C - B - A - D, X not in A's map. A broker on our child's
			// side names up to δ of our ancestors: with δ = 3, X may be Y.
			n.topo.Put(message.MapNode{ID: "C", Addr: "addr-C", Epoch: 2, Parent: "X"})
			n.topo.Put(message.MapNode{ID: "B", Addr: "addr-B", Epoch: 2, Parent: "C"})
			n.topo.Put(message.MapNode{ID: "A", Addr: "addr-A", Epoch: 2, Parent: "B"})
			n.topo.Put(message.MapNode{ID: "D", Addr: "addr-D", Epoch: 2, Parent: "A"})
			for _, id := range []message.BrokerID{"B", "D", "Z"} {
				p := n.peer(id)
				p.up, p.heardHB, p.heardAny, p.joined, p.epoch = true, true, true, false, 2
			}
			n.mem.member = true
			n.rec.stateWait = map[message.BrokerID]bool{c.awaited: true}
			if c.namedBy != "" {
				n.rec.namedBy[c.awaited] = c.namedBy
			}
			node, _ := n.topo.Get(c.requester)
			if c.requester == "Z" {
				node = message.MapNode{ID: "Z", Addr: "addr-Z", Epoch: 2}
			}
			n.Step(c.requester, &message.StateRequest{Node: node})
			answered := false
			for _, e := range n.Ready().Messages {
				if r, ok := e.Msg.(*message.StateReply); ok && e.To == c.requester && !r.NotMember {
					answered = true
				}
			}
			if answered != c.answer {
				t.Errorf("answered %s = %v, want %v (awaiting %v)", c.requester, answered, c.answer, n.rec.stateWait)
			}
		})
	}
}

// A durable subscription learned in a resync (a StateReply to a joined
// broker, after more than δ in a row failed) is flooded on as durable, with
// the position its flood carried: flooded on as a plain subscription, the
// brokers behind installed it as plain, the PHB there never answered its
// position, and what the subscriber missed from that publisher was lost
// without a Gap.
func TestResyncFloodsDurableSubscriptionOnAsDurable(t *testing.T) {
	n := chainNode(t, 1)
	n.topo.Put(message.MapNode{ID: "G", Addr: "addr-G", Epoch: 1, Parent: "A"})
	n.mem.joined = true
	for _, id := range []message.BrokerID{"B", "G"} {
		linked(n, id)
	}
	sub := message.SubID{Edge: "F", Epoch: 1, N: 1}
	pos := &message.DurableFlood{Name: "D1", From: []message.SourceSeq{{Source: message.Source{Publisher: "P1", Epoch: 1}, Seq: 20}}}
	n.Step("B", &message.StateReply{
		Map:  n.topo.Within("A", 2),
		Subs: []message.SubState{{Sub: sub, Filter: classFilter("a"), From: "B", Durable: pos}},
	})
	n.Ready()
	var flood *message.SubFlood
	for i := 0; i < 10*n.cfg.HeartbeatTicks && flood == nil; i++ {
		n.Tick()
		for _, e := range n.Ready().Messages {
			if f, ok := e.Msg.(*message.SubFlood); ok && e.To == "G" && f.Sub == sub {
				flood = f
			}
		}
	}
	if flood == nil {
		t.Fatal("the subscription learned in the resync was not flooded on to G")
	}
	if flood.Durable == nil || flood.Durable.Name != "D1" || len(flood.Durable.From) != 1 || flood.Durable.From[0].Seq != 20 {
		t.Errorf("flooded on as %+v, want durable D1 from P1/1/20", flood.Durable)
	}
}

// A recovery that awaits a peer its map does not hold (named by a
// restarted neighbour's NotMember) probes it at the address it was named
// with while it is suspected: not probed, a peer whose dial failed while it
// was down was awaited until gone_after after it had restarted, and the
// recovering broker held its neighbours' recoveries as long (more than δ
// in a row).
func TestRecoveryProbesAnAwaitedPeerItsMapDoesNotHold(t *testing.T) {
	n := nodeA(t, 1)
	n.topo.Put(message.MapNode{ID: "B", Addr: "addr-B", Epoch: 2})
	n.topo.Put(message.MapNode{ID: "A", Addr: "addr-A", Epoch: 2, Parent: "B"})
	p := n.peer("B")
	p.up, p.heardHB, p.heardAny, p.joined, p.epoch = true, true, true, false, 2
	n.mem.member = true
	n.rec.stateWait = map[message.BrokerID]bool{"B": true}
	n.Step("B", &message.StateReply{NotMember: true, Joinpoints: []message.MapNode{{ID: "Y", Addr: "addr-Y"}}})
	dialsToY := func() int {
		c := 0
		for _, d := range n.Ready().Dials {
			if d.ID == "Y" && d.Addr == "addr-Y" {
				c++
			}
		}
		return c
	}
	if dialsToY() != 1 || !n.rec.stateWait["Y"] {
		t.Fatalf("Y not asked: awaiting %v", n.rec.stateWait)
	}
	n.DialFailed("Y")
	if !n.peers["Y"].suspected {
		t.Fatal("Y not suspected after its dial failed")
	}
	probes := 0
	for i := 0; i < 4*n.cfg.FailureTicks; i++ {
		n.Tick()
		probes += dialsToY()
	}
	if !n.rec.stateWait["Y"] {
		t.Fatalf("Y no longer awaited (%v): the case is not reached", n.rec.stateWait)
	}
	if probes == 0 || probes > 4 {
		t.Errorf("%d probes of Y in 4 failure timeouts, want 1..4", probes)
	}
}

// A topology flood that found a peer's link closed (as unneeded) gives it
// up when the dial for it fails, which may be more than a failure timeout
// later (a slow handshake); when that peer speaks again, the flood is
// resent to it, although it was passed on before the suspicion's silence
// window. Not resent, the peer (within δ+1 hops of a joiner) never placed
// the joiner, pointed the joiner's subscriptions at the broker before it,
// and waited for that broker when it was cut off instead of bypassing it:
// silent losses within δ.
func TestTopologyFloodResentAfterAFailedDialOfAClosedLink(t *testing.T) {
	n := chainNode(t, 2)
	ft := int64(n.cfg.FailureTicks)
	join := &message.TopoChange{Origin: "A", Seq: 1, Hops: 2,
		Add: []message.MapNode{{ID: "N", Addr: "addr-N", Epoch: 1, Parent: "A"}}}
	x := n.peer("C")
	x.epoch, x.heardAny = 1, true
	n.now = 100
	x.upAt, x.upEpoch = n.now, 1 // its link closed as unneeded here
	n.now += 5
	n.recordTopo(&flood{key: floodKey{kind: fkTopo, origin: "A", seq: 1}, msg: func(message.BrokerID, int) message.Message { return join }})
	n.now += 2 * ft // the dial for the flood fails late
	n.suspect(x, "dial failed")
	n.now += 3 * ft
	n.Ready()
	x.up = true // its heartbeat arrives on a new link
	n.unsuspect(x)
	got := false
	for _, e := range n.Ready().Messages {
		if tc, ok := e.Msg.(*message.TopoChange); ok && e.To == "C" && len(tc.Add) == 1 && tc.Add[0].ID == "N" {
			got = true
		}
	}
	if !got {
		t.Error("C, back, was not sent the join of N it missed")
	}
}

// An answer to a durable subscription's first flood that arrives while its
// second (Again) flood is pending here does not answer the second: the
// broker behind had answered a copy of the first flood sent again when it
// said it was joined, and that late answer, taken for the second's,
// completed the second flood before the publishers' edges behind it had
// answered it (docs/durable.md, "The second flood"); the subscriber's edge
// switched to live early and lost a publication. The broker that answers
// says which flood it answers (SubConfirm.Round), and both are echoed as
// sent.
func TestLateAnswerToTheFirstFloodDoesNotAnswerTheSecond(t *testing.T) {
	sub := message.SubID{Edge: "F", Epoch: 1, N: 1}
	first := &message.DurableFlood{Name: "D1"}
	again := &message.DurableFlood{Name: "D1", Again: true}
	cases := []struct {
		name    string
		pending *message.DurableFlood
		round   uint8
		done    bool
	}{
		{"first answer, second flood pending", again, message.RoundFirst, false},
		{"second answer, second flood pending", again, message.RoundAgain, true},
		{"older broker's answer, second flood pending", again, 0, true},
		{"first answer, first flood pending", first, message.RoundFirst, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := chainNode(t, 3)
			for _, id := range []message.BrokerID{"B", "C"} {
				linked(n, id)
			}
			k := floodKey{kind: fkSub, sub: sub}
			f := &flood{key: k, except: "B", budget: -1, waiters: []message.BrokerID{"B"}}
			f.targets = []ftarget{{id: "C", epoch: 1, out: true}}
			f.nOut = 1
			n.floods.pending[k] = f
			n.durFloods()[sub] = c.pending
			n.Ready()
			n.Step("C", &message.SubConfirm{Sub: sub, Round: c.round})
			_, pending := n.floods.pending[k]
			if pending == c.done {
				t.Fatalf("flood completed = %v, want %v", !pending, c.done)
			}
			var confirm *message.SubConfirm
			for _, e := range n.Ready().Messages {
				if sc, ok := e.Msg.(*message.SubConfirm); ok && e.To == "B" {
					confirm = sc
				}
			}
			if c.done && (confirm == nil || confirm.Round != message.FloodRound(c.pending)) {
				t.Errorf("confirmation to B = %+v, want round %d", confirm, message.FloodRound(c.pending))
			}
		})
	}
}

// A broker that knows a durable subscription answers a copy of its first
// flood at once, saying it answers the first.
func TestKnownDurableFloodAnsweredWithItsRound(t *testing.T) {
	n := chainNode(t, 3)
	n.mem.joined = true
	for _, id := range []message.BrokerID{"B", "C"} {
		linked(n, id)
	}
	sub := message.SubID{Edge: "F", Epoch: 1, N: 1}
	df := &message.DurableFlood{Name: "D1"}
	n.durRecord(sub, df)
	if _, err := n.table.Insert(routing.Entry{Sub: sub, Filter: classFilter("a"), From: "F", Dir: "B"}); err != nil {
		t.Fatal(err)
	}
	n.Ready()
	n.Step("B", &message.SubFlood{Sub: sub, Filter: classFilter("a"), From: "F", Durable: df})
	for _, e := range n.Ready().Messages {
		if sc, ok := e.Msg.(*message.SubConfirm); ok && e.To == "B" {
			if sc.Round != message.RoundFirst {
				t.Errorf("answered with round %d, want %d", sc.Round, message.RoundFirst)
			}
			return
		}
	}
	t.Fatal("the known subscription's flood was not answered")
}
