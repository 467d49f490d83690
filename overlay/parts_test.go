package overlay

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// partsFrame is the small frame limit of the parts tests: a few hundred
// subscriptions need a dozen parts per state transfer.
const partsFrame = 4 << 10

// partsRun drives the harness and checks every message the cores emit: it
// must be accepted by a real reader with the configured frame limit.
type partsRun struct {
	h        *harness
	maxFrame int
	largest  int                  // largest frame emitted (type and body)
	split    map[message.Type]int // heads sent with More > 0, by type
	parts    int                  // Part messages sent
}

func newPartsRun(t *testing.T, maxFrame int) *partsRun {
	h := newHarness(t, 2)
	h.cfg.MaxFrame = maxFrame
	h.cfg.GoneAfterTicks = 60
	return &partsRun{h: h, maxFrame: maxFrame, split: map[message.Type]int{}}
}

func (r *partsRun) check() {
	for _, f := range r.h.inflight {
		frame, err := wire.AppendFrame(nil, f.m)
		if err != nil {
			r.h.t.Fatalf("%s -> %s %v: encode: %v", f.from, f.to, f.m.Type(), err)
		}
		if _, _, err := wire.Decode(frame, r.maxFrame); err != nil {
			r.h.t.Fatalf("%s -> %s %v: a reader with limit %d refuses it: %v", f.from, f.to, f.m.Type(), r.maxFrame, err)
		}
		c, _ := wire.FrameCost(f.m)
		r.largest = max(r.largest, c.Bytes)
		switch m := f.m.(type) {
		case *message.JoinReply:
			if m.More > 0 {
				r.split[m.Type()]++
			}
		case *message.StateReply:
			if m.More > 0 {
				r.split[m.Type()]++
			}
		case *message.TopoChange:
			if m.More > 0 {
				r.split[m.Type()]++
			}
		case *message.Part:
			r.parts++
		}
	}
}

func (r *partsRun) run(rounds int) {
	for i := 0; i < rounds; i++ {
		r.h.round()
		r.check()
	}
}

func (r *partsRun) runUntil(max int, what string, cond func() bool) {
	for i := 0; i < max && !cond(); i++ {
		r.h.round()
		r.check()
	}
	if !cond() {
		r.h.t.Fatalf("after %d rounds: %s did not happen", max, what)
	}
}

// subscribeMany gives client c of broker b k subscriptions (two predicates
// each) and waits until all are confirmed.
func (r *partsRun) subscribeMany(b message.BrokerID, c message.ClientID, k int) {
	h := r.h
	h.do(b, func(n *Node) {
		n.ClientOpen(c)
		for i := 0; i < k; i++ {
			f := classFilter("stock")
			f.Preds = append(f.Preds, matching.Predicate{Attr: "sym", Op: matching.OpEq, Value: matching.Value{Kind: matching.KindString, Str: fmt.Sprintf("s%d", i)}})
			n.Client(c, &message.Subscribe{Req: uint64(i + 1), Filter: f})
		}
	})
	r.check()
	r.runUntil(400, fmt.Sprintf("%d subscriptions of client %d confirmed", k, c), func() bool {
		ok := 0
		for _, m := range h.got[c] {
			if a, is := m.(*message.SubAck); is && a.Confirmed && a.Err == "" {
				ok++
			}
		}
		return ok == k
	})
}

// routes is every live broker's routing table: sub → from-pointer and
// direction (and whether local).
func (r *partsRun) routes() map[message.BrokerID][]string {
	out := map[message.BrokerID][]string{}
	for _, id := range r.h.ids {
		if !r.h.alive(id) || r.h.nodes[id].Status().Left {
			continue
		}
		var es []string
		for _, e := range r.h.nodes[id].table.Entries() {
			es = append(es, fmt.Sprintf("%v from=%s dir=%s local=%v", e.Sub, e.From, e.Dir, e.Local))
		}
		sort.Strings(es)
		out[id] = es
	}
	return out
}

// bigOverlay runs one life of an overlay with 600 subscriptions: a join,
// a crash and recovery, a graceful leave and a gone broker's removal, and
// returns the routing tables after each step.
func bigOverlay(t *testing.T, maxFrame int) (*partsRun, []map[message.BrokerID][]string) {
	r := newPartsRun(t, maxFrame)
	h := r.h
	h.buildTree("P1", chainEdges)
	r.subscribeMany("S1", 101, 250)
	r.subscribeMany("X", 102, 250)
	r.subscribeMany("P1", 103, 100)
	var snaps []map[message.BrokerID][]string

	// A join: D's JoinReply holds every subscription.
	h.add("J", 1)
	h.do("J", func(n *Node) { n.Join([]Peer{{ID: "D", Addr: "addr-D"}}) })
	r.check()
	r.runUntil(200, "J joined", func() bool { return h.nodes["J"].Joined() })
	r.run(10)
	if got := h.nodes["J"].table.Len(); got != 600 {
		t.Fatalf("J joined with %d routing entries, want 600", got)
	}
	snaps = append(snaps, r.routes())

	// A crash and a restart: C recovers from B's and D's StateReplies.
	h.crash("C")
	r.run(20)
	h.restart("C", 2, "B", "D")
	r.check()
	r.runUntil(300, "C recovered", func() bool { return h.nodes["C"].Joined() })
	r.run(20)
	snaps = append(snaps, r.routes())

	// A graceful leave of D: its repair's Via lists every route it has.
	h.do("D", func(n *Node) { n.Leave() })
	r.check()
	r.runUntil(400, "D left", func() bool { return h.nodes["D"].Status().Left })
	h.dead["D"] = true
	r.run(20)
	snaps = append(snaps, r.routes())

	// A gone broker: B crashes for good; A, C and X remove it (their
	// repairs' Via list their sides' routes).
	h.crash("B")
	r.run(140)
	for _, id := range []message.BrokerID{"A", "C", "X"} {
		if h.nodes[id].topo.Has("B") {
			t.Fatalf("%s still has the gone B in its map", id)
		}
	}
	snaps = append(snaps, r.routes())
	return r, snaps
}

// TestPartsSameStateAsOneFrame: with a 4 KiB frame limit, a join, a
// recovery, a leave and a gone broker's removal send their state in parts,
// every message fits a 4 KiB reader, and every broker ends with exactly
// the routing entries (from-pointers and directions) it has when every
// state fits in one frame.
func TestPartsSameStateAsOneFrame(t *testing.T) {
	small, got := bigOverlay(t, partsFrame)
	ref, want := bigOverlay(t, 64<<20)
	t.Logf("frame limit %d: largest frame %d bytes, split heads %v, %d parts; unlimited: largest frame %d bytes",
		partsFrame, small.largest, small.split, small.parts, ref.largest)
	if len(ref.split) != 0 || ref.parts != 0 {
		t.Fatalf("with a 64 MiB frame nothing should be split: %v, %d parts", ref.split, ref.parts)
	}
	for _, typ := range []message.Type{message.TypeJoinReply, message.TypeStateReply, message.TypeTopoChange} {
		if small.split[typ] == 0 {
			t.Errorf("no %v was sent in parts: the test does not exercise it", typ)
		}
	}
	if ref.largest <= partsFrame {
		t.Errorf("unlimited run's largest frame %d fits %d anyway: the test does not need parts", ref.largest, partsFrame)
	}
	steps := []string{"join", "recovery", "leave", "gone"}
	for i := range want {
		for id, w := range want[i] {
			if g := got[i][id]; !reflect.DeepEqual(g, w) {
				t.Errorf("after the %s: %s has %d entries, want %d (first difference: %s)", steps[i], id, len(g), len(w), firstDiff(g, w))
			}
		}
		if len(got[i]) != len(want[i]) {
			t.Errorf("after the %s: %d live brokers, want %d", steps[i], len(got[i]), len(want[i]))
		}
	}
}

func firstDiff(a, b []string) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("%q vs %q", a[i], b[i])
		}
	}
	return "one is a prefix of the other"
}

// bigState is k subscriptions as a joinpoint would send them.
func bigState(k int) []message.SubState {
	out := make([]message.SubState, k)
	for i := range out {
		f := classFilter("stock")
		f.Preds = append(f.Preds, matching.Predicate{Attr: "sym", Op: matching.OpEq, Value: matching.Value{Kind: matching.KindString, Str: fmt.Sprintf("s%d", i)}})
		out[i] = message.SubState{Sub: message.SubID{Edge: "E", Epoch: 1764460000000, N: uint64(i + 1)}, Filter: f, From: "E"}
	}
	return out
}

// joiningNode is a node that asked joinpoint "D" to admit it.
func joiningNode(t *testing.T) *Node {
	cfg := DefaultConfig()
	cfg.ID, cfg.MaxFrame = "J", partsFrame
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Join([]Peer{{ID: "D", Addr: "addr-D"}})
	n.LinkUp("D")
	n.Ready()
	return n
}

// splitReply is what D sends J for k subscriptions (head, then parts).
func splitReply(t *testing.T, k int) []message.Message {
	cfg := DefaultConfig()
	cfg.ID, cfg.MaxFrame = "D", partsFrame
	d, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.LinkUp("J")
	d.Ready()
	d.send("J", &message.JoinReply{Parent: "D", Map: []message.MapNode{{ID: "D", Addr: "addr-D", Epoch: 1}, {ID: "J", Addr: "addr-J", Epoch: 1, Parent: "D"}}, Subs: bigState(k)})
	var out []message.Message
	for _, e := range d.Ready().Messages {
		out = append(out, e.Msg)
	}
	return out
}

// TestPartsNothingActsOnAPartialState: a joiner handles the JoinReply only
// once its last part arrived; a link that breaks in between drops the
// transfer (the join retry asks again), and so does a part out of order.
func TestPartsNothingActsOnAPartialState(t *testing.T) {
	msgs := splitReply(t, 1000)
	if len(msgs) < 3 {
		t.Fatalf("1000 subscriptions at a %d-byte frame: %d messages, want a head and at least 2 parts", partsFrame, len(msgs))
	}
	head := msgs[0].(*message.JoinReply)
	if head.More != len(msgs)-1 {
		t.Fatalf("head announces %d parts, %d follow", head.More, len(msgs)-1)
	}
	total := len(head.Subs)
	for i, m := range msgs[1:] {
		p := m.(*message.Part)
		if p.N != i+1 {
			t.Fatalf("part %d numbered %d", i+1, p.N)
		}
		total += len(p.Subs)
	}
	if total != 1000 {
		t.Fatalf("the parts hold %d subscriptions, want 1000", total)
	}

	// Complete: member with every entry.
	n := joiningNode(t)
	for i, m := range msgs {
		if n.mem.member {
			t.Fatalf("member after %d of %d messages", i, len(msgs))
		}
		n.Step("D", m)
	}
	if !n.mem.member || n.table.Len() != 1000 {
		t.Fatalf("after every part: member=%v with %d entries, want true with 1000", n.mem.member, n.table.Len())
	}

	// The link breaks after the first part: the rest, on the new link, is
	// not taken for the old transfer's end.
	n = joiningNode(t)
	n.Step("D", msgs[0])
	n.Step("D", msgs[1])
	n.LinkDown("D")
	n.LinkUp("D")
	for _, m := range msgs[2:] {
		n.Step("D", m)
	}
	if n.mem.member || n.table.Len() != 0 {
		t.Fatalf("after a link break mid-transfer: member=%v with %d entries, want nothing applied", n.mem.member, n.table.Len())
	}
	// The retry's complete transfer on the new link joins.
	for _, m := range msgs {
		n.Step("D", m)
	}
	if !n.mem.member || n.table.Len() != 1000 {
		t.Fatalf("after the retried transfer: member=%v with %d entries", n.mem.member, n.table.Len())
	}

	// A part out of order drops the transfer.
	n = joiningNode(t)
	n.Step("D", msgs[0])
	n.Step("D", msgs[2])
	for _, m := range msgs[1:] {
		n.Step("D", m)
	}
	if n.mem.member {
		t.Fatal("joined from a transfer with a part out of order")
	}

	// A head announcing more parts than the bound is refused with a notice.
	n = joiningNode(t)
	big := *head
	big.More = n.maxParts() + 1
	n.Step("D", &big)
	if _, pending := n.assembling["D"]; pending {
		t.Fatal("a head beyond the parts bound is kept")
	}
	if r := n.Ready(); len(r.Notices) == 0 || r.Notices[len(r.Notices)-1].Kind != NoticeJoinFailed {
		t.Fatalf("no join-failed notice for a head beyond the bound: %+v", r.Notices)
	}
}

// TestPartsSmallStateUnchanged: a state that fits is sent whole, without
// More, as before parts existed.
func TestPartsSmallStateUnchanged(t *testing.T) {
	msgs := splitReply(t, 20)
	if len(msgs) != 1 {
		t.Fatalf("20 subscriptions: %d messages, want 1", len(msgs))
	}
	if r := msgs[0].(*message.JoinReply); r.More != 0 || len(r.Subs) != 20 {
		t.Fatalf("small reply: More=%d, %d subs", r.More, len(r.Subs))
	}
}

// A repair's routes cut into parts (a route spanning several parts is
// repeated with its share) come back as the same route of every
// subscription, and each part fits.
func TestPartsViaRoundTrip(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.MaxFrame = "D", partsFrame
	d, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.LinkUp("J")
	d.Ready()
	var via []message.SubsVia
	want := map[message.SubID]string{}
	for g, k := range []int{3, 1500, 1, 700} {
		sv := message.SubsVia{Path: []message.BrokerID{"A", message.BrokerID(fmt.Sprint("F", g))}}
		for i := 0; i < k; i++ {
			s := message.SubID{Edge: message.BrokerID(fmt.Sprint("E", i%7)), Epoch: 1764460000000, N: uint64(g*10000 + i)}
			sv.Subs = append(sv.Subs, s)
			want[s] = fmt.Sprint(sv.Path)
		}
		via = append(via, sv)
	}
	d.send("J", &message.TopoChange{Origin: "D", Seq: 1, Hops: 3, Leaver: "D", Remove: []message.BrokerID{"D"}, Via: via})
	msgs := d.Ready().Messages
	if len(msgs) < 4 {
		t.Fatalf("%d messages for 2,204 routed subscriptions at %d bytes a frame", len(msgs), partsFrame)
	}
	cfg.ID = "J"
	j, _ := NewNode(cfg)
	var got message.Message
	for i, e := range msgs {
		frame, _ := wire.AppendFrame(nil, e.Msg)
		m, _, err := wire.Decode(frame, partsFrame)
		if err != nil {
			t.Fatalf("message %d (%v): %v", i, e.Msg.Type(), err)
		}
		if got = j.reassemble("D", m); got != nil && i != len(msgs)-1 {
			t.Fatalf("complete after %d of %d messages", i+1, len(msgs))
		}
	}
	tc, ok := got.(*message.TopoChange)
	if !ok || tc.More != 0 || tc.Leaver != "D" || tc.Seq != 1 {
		t.Fatalf("reassembled %#v", got)
	}
	have := map[message.SubID]string{}
	for _, g := range tc.Via {
		for _, s := range g.Subs {
			if _, dup := have[s]; dup {
				t.Fatalf("%v twice", s)
			}
			have[s] = fmt.Sprint(g.Path)
		}
	}
	if !reflect.DeepEqual(have, want) {
		t.Fatalf("reassembled routes differ: %d subscriptions, want %d", len(have), len(want))
	}
	// The sender's Via is untouched (floods send it again to other peers).
	if len(via[1].Subs) != 1500 || len(via) != 4 {
		t.Fatal("sending in parts changed the caller's Via")
	}
}

// The ranges of a hole's gap notice (one per source seen from that
// direction) are cut into GapFloods that each fit a frame, in order, with
// a sequence number each; a few ranges make one GapFlood.
func TestGapFloodsFitFrames(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.MaxFrame = "G", partsFrame
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ranges []message.GapRange
	for i := 0; i < 2000; i++ {
		ranges = append(ranges, message.GapRange{Source: message.Source{Publisher: fmt.Sprintf("publisher-%06d", i), Epoch: 1}, From: uint64(i + 1)})
	}
	ranges = append(ranges, message.GapRange{From: 1}) // every source
	gs := n.gapFloods(ranges, "more than 2 brokers failed in a row")
	if len(gs) < 2 {
		t.Fatalf("%d ranges with %d-byte frames: %d GapFlood, want several", len(ranges), partsFrame, len(gs))
	}
	var got []message.GapRange
	for i, g := range gs {
		if g.Seq != gs[0].Seq+uint64(i) || g.Origin != "G" || g.Reason == "" || len(g.Ranges) == 0 {
			t.Fatalf("GapFlood %d: seq %d origin %q reason %q, %d ranges", i, g.Seq, g.Origin, g.Reason, len(g.Ranges))
		}
		if c, err := wire.FrameCost(g); err != nil || !c.Fits(partsFrame) {
			t.Fatalf("GapFlood %d: cost %+v (%v) does not fit %d bytes", i, c, err, partsFrame)
		}
		got = append(got, g.Ranges...)
	}
	if !reflect.DeepEqual(got, ranges) {
		t.Fatalf("the GapFloods carry %d ranges, not the %d given in order", len(got), len(ranges))
	}
	if gs := n.gapFloods(ranges[:3], "r"); len(gs) != 1 || len(gs[0].Ranges) != 3 {
		t.Fatalf("3 ranges: %d GapFloods", len(gs))
	}
}
