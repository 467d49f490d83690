package overlay

import (
	"slices"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

func newDurableHarness(t *testing.T) *harness {
	h := newHarness(t, 2)
	h.cfg.Durable = true
	h.cfg.RetainTicks = 10_000
	h.buildTree("P1", chainEdges)
	return h
}

// durableSub subscribes client c of broker b durably with tok (nil: a new
// subscription) and waits for the switch to live.
func (h *harness) durableSub(b message.BrokerID, c message.ClientID, name string, f string, tok []byte) message.SubID {
	h.t.Helper()
	return h.subscribeWith(b, c, &message.Subscribe{Req: uint64(c), Filter: classFilter(f), Durable: name, Token: tok}).Sub
}

// clientToken is the token a client of c computes from what it got.
func (h *harness) clientToken(c message.ClientID, tok checkpoint.Token) checkpoint.Token {
	for _, m := range h.got[c] {
		switch m := m.(type) {
		case *message.Deliver:
			_ = tok.Consume(m.Pub.Source(), m.Pub.Seq)
		case *message.Silence:
			for _, s := range m.Sources {
				_ = tok.Advance(s.Source, s.Seq)
			}
		case *message.Gap:
			_ = tok.Advance(m.Source, m.To)
		}
	}
	return tok
}

func pubClass(seq uint64) string {
	if seq%3 == 0 {
		return "y"
	}
	return "x"
}

func matchingSeqs(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		if pubClass(s) == "x" {
			out = append(out, s)
		}
	}
	return out
}

func TestDurableReconnectElsewhere(t *testing.T) {
	h := newDurableHarness(t)
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 7}) })
	h.publish("P1", 1, 1, "x") // before the subscription: never delivered
	h.run(5)
	h.durableSub("S1", 10, "d1", "x", nil)
	for s := uint64(2); s <= 10; s++ {
		h.publish("P1", 1, s, pubClass(s))
	}
	h.run(40)
	if got, want := h.deliveries(10), matchingSeqs(2, 10); !slices.Equal(got, want) {
		t.Fatalf("first session got %v, want %v", got, want)
	}
	tok := h.clientToken(10, checkpoint.Token{Name: "d1"})
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	for s := uint64(11); s <= 20; s++ {
		h.publish("P1", 1, s, pubClass(s))
	}
	h.run(40)
	// Elsewhere, with the token: exactly what was missed, then live.
	h.durableSub("S2", 11, "d1", "x", tok.Encode())
	for s := uint64(21); s <= 24; s++ {
		h.publish("P1", 1, s, pubClass(s))
	}
	h.run(40)
	if got, want := h.deliveries(11), matchingSeqs(11, 24); !slices.Equal(got, want) {
		t.Fatalf("resumed at S2 got %v, want %v", got, want)
	}
	// A new subscription under another name starts now: no history.
	h.durableSub("X", 12, "d2", "x", nil)
	h.publish("P1", 1, 25, "x")
	h.run(40)
	if got := h.deliveries(12); !slices.Equal(got, []uint64{25}) {
		t.Fatalf("fresh durable subscription got %v, want [25]", got)
	}
}

func TestDurableResumeAfterSilence(t *testing.T) {
	h := newDurableHarness(t)
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 7}) })
	h.durableSub("S1", 10, "d", "x", nil)
	for s := uint64(1); s <= 30; s++ {
		h.publish("P1", 1, s, "y") // nothing matches
	}
	h.subscribe("S1", 20, classFilter("y")) // (brings the source's publications to S1)
	h.publish("P1", 1, 31, "y")
	h.run(40)
	tok := h.clientToken(10, checkpoint.Token{Name: "d"})
	src := message.Source{Publisher: "pub", Epoch: 7}
	if e := tok.Get(src); e.From() != 31 {
		t.Fatalf("token's position %d after a quiet stretch, want 31 (silence)", e.From())
	}
}

func TestDurableGapAfterRetention(t *testing.T) {
	h := newHarness(t, 2)
	h.cfg.Durable = true
	h.cfg.RetainTicks = 30
	h.buildTree("P1", chainEdges)
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 7}) })
	h.durableSub("S1", 10, "d", "x", nil)
	h.publish("P1", 1, 1, "x")
	h.run(20)
	tok := h.clientToken(10, checkpoint.Token{Name: "d"})
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	for s := uint64(2); s <= 4; s++ {
		h.publish("P1", 1, s, "x")
	}
	h.run(100) // longer than the retention: 2..4 released
	h.publish("P1", 1, 5, "x")
	h.run(5)
	h.durableSub("S2", 11, "d", "x", tok.Encode())
	h.run(20)
	var gap *message.Gap
	for _, m := range h.got[11] {
		if g, ok := m.(*message.Gap); ok {
			gap = g
		}
		if d, ok := m.(*message.Deliver); ok && gap == nil {
			t.Fatalf("delivery %d before the gap", d.Pub.Seq)
		}
	}
	if gap == nil || gap.From != 2 || gap.To != 4 {
		t.Fatalf("gap %+v, want [2, 4]", gap)
	}
	if got := h.deliveries(11); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("got %v after the gap, want [5]", got)
	}
}

func TestDurableRefusesBadTokens(t *testing.T) {
	h := newDurableHarness(t)
	other := checkpoint.Token{Name: "other"}
	for _, c := range []struct {
		tok  []byte
		want string
	}{
		{[]byte("garbage"), "bad checkpoint token"},
		{other.Encode(), "foreign checkpoint token"},
	} {
		h.do("S1", func(n *Node) {
			n.ClientOpen(30)
			n.Client(30, &message.Subscribe{Req: 1, Filter: classFilter("x"), Durable: "mine", Token: c.tok})
		})
		var err string
		for _, m := range h.got[30] {
			if a, ok := m.(*message.SubAck); ok {
				err = a.Err
			}
		}
		if !strings.Contains(err, c.want) {
			t.Fatalf("SubAck error %q, want %q", err, c.want)
		}
		h.got[30] = nil
	}
}

// A joined publisher's edge that learns a durable subscription from a
// resync answers it itself, toward the subscriber, from the position the
// subscription carried. Its flood never came here (the subscriber's edge
// restarted beyond δ without this side in its map); flooded on, only the
// edges behind got to answer, and what this edge logged after the
// position was lost to the subscriber without a Gap.
func TestResyncTeachesAPublisherEdgeToAnswer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.Addr, cfg.Delta, cfg.Durable, cfg.MemoryLog, cfg.RetainTicks = "A", "addr-A", 1, true, true, 10_000
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Bootstrap()
	n.topo.Put(message.MapNode{ID: "B", Addr: "addr-B", Epoch: 1, Parent: "A"})
	n.topo.Put(message.MapNode{ID: "F", Addr: "addr-F", Epoch: 2, Parent: "B"})
	linked(n, "B")
	n.ClientOpen(1)
	n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 7})
	for q := uint64(1); q <= 5; q++ {
		n.Client(1, &message.Publish{Seq: q, Attrs: []matching.Attr{{Name: "class", Value: matching.Str(pubClass(q))}}})
	}
	n.Ready()
	src := message.Source{Publisher: "pub", Epoch: 7}
	sub := message.SubID{Edge: "F", Epoch: 2, N: 1}
	pos := &message.DurableFlood{Name: "D1", From: []message.SourceSeq{{Source: src, Seq: 1}}}
	n.Step("B", &message.StateReply{
		Map:  n.topo.Within("A", 2),
		Subs: []message.SubState{{Sub: sub, Filter: classFilter("x"), From: "F", Durable: pos}},
	})
	var got []uint64
	answered := false
	for _, e := range n.Ready().Messages {
		if c, ok := e.Msg.(*message.Catchup); ok && c.Sub == sub && e.To == "B" {
			answered = true
			for _, p := range c.Pubs {
				got = append(got, p.ID.Seq)
			}
		}
	}
	if !answered {
		t.Fatal("the publisher's edge did not answer the durable subscription the resync taught it")
	}
	if want := matchingSeqs(2, 5); !slices.Equal(got, want) {
		t.Errorf("answered with %v, want %v", got, want)
	}
}

// A source its token names whose publisher's edge did not answer at the
// switch is not silenced by what passes here for others: its matching
// publications may not be routed here yet. An answer lifts that.
func TestUnansweredSourceIsNotSilenced(t *testing.T) {
	src := message.Source{Publisher: "P", Epoch: 1}
	n := &Node{}
	n.cfg.ID, n.cfg.Epoch, n.cfg.DACKTicks = "B", 1, 1
	sub := message.SubID{Edge: "B", Epoch: 1, N: 1}
	d := &dsub{name: "d", client: 7, tok: checkpoint.Token{Name: "d", Entries: []checkpoint.Entry{{Source: src, Seq: 10}}},
		buf: map[message.Source][]message.Pub{}, last: map[message.Source]uint64{}, ans: map[message.Source][][2]uint64{}}
	n.dsub.subs = map[message.SubID]*dsub{sub: d}
	n.switchLive(sub, d)
	n.dsub.touch(src, 30)
	n.durableSilenceTick()
	n.dsub.touch(src, 31)
	n.durableSilenceTick()
	if got := d.tok.Get(src).From(); got != 10 {
		t.Fatalf("an unanswered source was silenced to %d", got)
	}
	n.onCatchup("A", &message.Catchup{Sub: sub, Source: src, From: 10, First: 1, Last: 31})
	n.dsub.touch(src, 40)
	n.durableSilenceTick()
	if got := d.tok.Get(src).From(); got != 40 {
		t.Errorf("after its answer the source is at %d, want 40", got)
	}
}

// When a source unanswered at the switch answers only after publications
// of it that reached here anyway were delivered, the subscriber gets a Gap
// for the range they passed: the matching ones not routed here in time
// can no longer be delivered in order, and dropped as consumed they were
// lost without a Gap.
func TestLateAnswerAfterDeliveriesGivesAGap(t *testing.T) {
	src := message.Source{Publisher: "P", Epoch: 1}
	n := &Node{}
	n.cfg.ID, n.cfg.Epoch = "B", 1
	sub := message.SubID{Edge: "B", Epoch: 1, N: 1}
	d := &dsub{name: "d", client: 7, tok: checkpoint.Token{Name: "d", Entries: []checkpoint.Entry{{Source: src, Seq: 36}}},
		buf: map[message.Source][]message.Pub{}, last: map[message.Source]uint64{}, ans: map[message.Source][][2]uint64{}}
	n.dsub.subs = map[message.SubID]*dsub{sub: d}
	n.switchLive(sub, d)
	n.durLive(sub, d, &message.Pub{ID: message.PubID{Publisher: "P", Epoch: 1, Seq: 151}})
	n.out.ToClients = nil
	n.onCatchup("A", &message.Catchup{Sub: sub, Source: src, From: 36, First: 1, Last: 160,
		Pubs: []message.Pub{{ID: message.PubID{Publisher: "P", Epoch: 1, Seq: 134}}, {ID: message.PubID{Publisher: "P", Epoch: 1, Seq: 155}}}})
	var gaps []message.Gap
	var got []uint64
	for _, e := range n.out.ToClients {
		switch m := e.Msg.(type) {
		case *message.Gap:
			gaps = append(gaps, *m)
		case *message.Deliver:
			got = append(got, m.Pub.Seq)
		}
	}
	if len(gaps) != 1 || gaps[0].From != 37 || gaps[0].To != 151 {
		t.Fatalf("gaps %+v, want one from 37 to 151", gaps)
	}
	if !slices.Equal(got, []uint64{155}) {
		t.Errorf("delivered %v, want 155 (134 is behind the token, in the Gap)", got)
	}
}
