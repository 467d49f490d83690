package overlay

import (
	"fmt"
	"slices"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// recoverSub subscribes client c of broker b plainly, recovering from
// positions, and returns its confirmation.
func (h *harness) recoverSub(b message.BrokerID, c message.ClientID, f string, from []message.SourceSeq) *message.SubAck {
	h.t.Helper()
	return h.subscribeWith(b, c, &message.Subscribe{Req: uint64(c), Filter: classFilter(f), Recover: &message.Recovery{From: from}})
}

// lastPositions is what a web client presents: the last seq it got per
// source.
func (h *harness) lastPositions(c message.ClientID) []message.SourceSeq {
	last := map[message.Source]uint64{}
	for _, m := range h.got[c] {
		if d, ok := m.(*message.Deliver); ok {
			last[d.Pub.Source()] = max(last[d.Pub.Source()], d.Pub.Seq)
		}
	}
	var out []message.SourceSeq
	for s, q := range last {
		out = append(out, message.SourceSeq{Source: s, Seq: q})
	}
	return out
}

// A plain subscription that moves to another broker with its positions
// gets exactly what it missed there (from the publisher's edge, over the
// overlay), in order and before its confirmation, then live.
func TestRecoverPlainSubscriptionOnAnotherBroker(t *testing.T) {
	h := newDurableHarness(t)
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 7}) })
	h.subscribe("S1", 10, classFilter("x"))
	for s := uint64(1); s <= 10; s++ {
		h.publish("P1", 1, s, pubClass(s))
	}
	h.run(40)
	if got, want := h.deliveries(10), matchingSeqs(1, 10); !slices.Equal(got, want) {
		t.Fatalf("first session got %v, want %v", got, want)
	}
	pos := h.lastPositions(10)
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	for s := uint64(11); s <= 20; s++ {
		h.publish("P1", 1, s, pubClass(s))
	}
	h.run(40)
	ack := h.recoverSub("S2", 11, "x", pos)
	if !ack.Recovery || !ack.Recovered || len(ack.Missed) > 0 {
		t.Fatalf("confirmation %+v, want recovered", ack)
	}
	if got, want := h.deliveries(11), matchingSeqs(11, 20); !slices.Equal(got, want) {
		t.Fatalf("before its confirmation S2 delivered %v, want the missed %v", got, want)
	}
	for s := uint64(21); s <= 24; s++ {
		h.publish("P1", 1, s, pubClass(s))
	}
	h.run(40)
	if got, want := h.deliveries(11), matchingSeqs(11, 24); !slices.Equal(got, want) {
		t.Fatalf("recovered at S2 got %v, want %v", got, want)
	}
	for _, m := range h.got[11] {
		if _, ok := m.(*message.Silence); ok {
			t.Fatal("a recovering plain subscription got a Silence (its token is the broker's)")
		}
	}
}

// What the publisher's edge no longer retains is listed in the
// confirmation (recovered: false with the range); the rest follows.
func TestRecoverReportsTheRangeNoHistoryHolds(t *testing.T) {
	h := newHarness(t, 2)
	h.cfg.Durable = true
	h.cfg.RetainTicks = 30
	h.buildTree("P1", chainEdges)
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 7}) })
	h.subscribe("S1", 10, classFilter("x"))
	h.publish("P1", 1, 1, "x")
	h.run(20)
	pos := h.lastPositions(10)
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	for s := uint64(2); s <= 4; s++ {
		h.publish("P1", 1, s, "x")
	}
	h.run(100) // longer than the retention: 2..4 released
	h.publish("P1", 1, 5, "x")
	h.run(5)
	ack := h.recoverSub("S2", 11, "x", pos)
	if !ack.Recovery || ack.Recovered || len(ack.Missed) != 1 || ack.Missed[0].From != 2 || ack.Missed[0].To != 4 {
		t.Fatalf("confirmation %+v, want recovered: false, missed [2, 4]", ack)
	}
	if got := h.deliveries(11); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("got %v, want [5]", got)
	}
	for _, m := range h.got[11] {
		if _, ok := m.(*message.Gap); ok {
			t.Fatal("the unrecovered range came as a Gap too, not only in the confirmation")
		}
	}
}

// awayThenRecover: a client of S1 gets pub's 1 and goes away; pub
// publishes 2 and 3; the client recovers at S2 from its position. With
// durable the publisher's edge keeps a log (retaining nothing after it
// is safe), without it none.
func awayThenRecover(t *testing.T, durable bool) (*harness, *message.SubAck) {
	h := newHarness(t, 2)
	h.cfg.Durable = durable
	h.buildTree("P1", chainEdges)
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 7}) })
	h.subscribe("S1", 10, classFilter("x"))
	h.publish("P1", 1, 1, "x")
	h.run(20)
	pos := h.lastPositions(10)
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	h.publish("P1", 1, 2, "x")
	h.publish("P1", 1, 3, "x")
	h.run(20)
	return h, h.recoverSub("S2", 11, "x", pos)
}

// Without retention a recovery is honest about it (the whole missed
// range), instead of silently plain.
func TestRecoverWithoutRetentionReportsTheGap(t *testing.T) {
	_, ack := awayThenRecover(t, true)
	if ack.Recovered || len(ack.Missed) != 1 || ack.Missed[0].From != 2 || ack.Missed[0].To != 3 {
		t.Fatalf("confirmation %+v, want recovered: false, missed [2, 3]", ack)
	}
}

// A stream no publisher's edge answers for (its edge keeps no log) is
// unknown, not recovered: the confirmation lists it with no end.
func TestRecoverOfAStreamNobodyAnswersForIsUnknown(t *testing.T) {
	h, ack := awayThenRecover(t, false)
	if ack.Recovered || len(ack.Missed) != 1 || ack.Missed[0].From != 2 || ack.Missed[0].To != 0 {
		t.Fatalf("confirmation %+v, want recovered: false, missed from 2 with no end", ack)
	}
	h.publish("P1", 1, 4, "x")
	h.run(20)
	if got := h.deliveries(11); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("got %v, want [4] (live)", got)
	}
}

// pubsOf returns what client c was delivered, as "publisher/seq".
func (h *harness) pubsOf(c message.ClientID) []string {
	var out []string
	for _, m := range h.got[c] {
		if d, ok := m.(*message.Deliver); ok {
			out = append(out, fmt.Sprintf("%s/%d", d.Pub.Publisher, d.Pub.Seq))
		}
	}
	return out
}

// retainingHarness: P1's publishers' publications are retained for
// ticks ticks.
func retainingHarness(t *testing.T, ticks int) *harness {
	h := newHarness(t, 2)
	h.cfg.Durable = true
	h.cfg.RetainTicks = ticks
	h.buildTree("P1", chainEdges)
	h.do("P1", func(n *Node) {
		n.ClientOpen(1)
		n.Client(1, &message.ClientHello{Publisher: "a", Epoch: 7})
		n.ClientOpen(2)
		n.Client(2, &message.ClientHello{Publisher: "b", Epoch: 8})
	})
	return h
}

// A new subscription (durable, or recovering with no position for a
// source) owes nothing published before it: what the retention released
// of that time is no Gap.
func TestNewSubscriptionGetsNoGapForWhatCameBeforeIt(t *testing.T) {
	h := retainingHarness(t, 30)
	for s := uint64(1); s <= 4; s++ {
		h.publish("P1", 1, s, "x")
	}
	h.run(100) // 1..4 released
	h.publish("P1", 1, 5, "x")
	h.run(5)
	h.durableSub("S1", 10, "d", "x", nil)
	ack := h.recoverSub("S2", 11, "x", nil)
	if !ack.Recovered || len(ack.Missed) > 0 {
		t.Fatalf("recovering with no position: %+v, want recovered and nothing missed", ack)
	}
	h.publish("P1", 1, 6, "x")
	h.run(20)
	for _, c := range []message.ClientID{10, 11} {
		for _, m := range h.got[c] {
			if g, ok := m.(*message.Gap); ok {
				t.Fatalf("client %d got %+v for what came before its subscription", c, g)
			}
		}
		if got := h.deliveries(c); !slices.Equal(got, []uint64{6}) {
			t.Fatalf("client %d got %v, want [6]", c, got)
		}
	}
}

// A recovering subscription that says how long ago it began (Since) gets
// what it missed of publishers it has no position for: one that started
// while it was away, and one that existed before it and first matched
// while it was away; nothing those published before it began.
func TestRecoverGetsPublishersWithNoPositionSinceItBegan(t *testing.T) {
	h := retainingHarness(t, 10_000)
	h.publish("P1", 2, 1, "x") // b, before the subscription: not owed
	h.run(100)
	h.subscribe("S1", 10, classFilter("x"))
	began := h.now()
	h.publish("P1", 1, 1, "x")
	h.publish("P1", 2, 2, "y")
	h.run(20)
	if got := h.pubsOf(10); !slices.Equal(got, []string{"a/1"}) {
		t.Fatalf("first session got %v, want [a/1]", got)
	}
	pos := h.lastPositions(10)
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	h.publish("P1", 1, 2, "x")
	h.publish("P1", 2, 3, "x") // b first matches while the client is away
	h.do("P1", func(n *Node) { n.ClientOpen(3); n.Client(3, &message.ClientHello{Publisher: "c", Epoch: 9}) })
	h.publish("P1", 3, 1, "x") // c starts while the client is away
	h.run(20)
	since := uint64((h.now() - began) * 10) // ms, at 10 ms ticks
	ack := h.subscribeWith("S2", 11, &message.Subscribe{Req: 11, Filter: classFilter("x"), Recover: &message.Recovery{From: pos, Since: since}})
	if !ack.Recovered || len(ack.Missed) > 0 {
		t.Fatalf("confirmation %+v, want recovered", ack)
	}
	got := h.pubsOf(11)
	slices.Sort(got)
	if want := []string{"a/2", "b/3", "c/1"}; !slices.Equal(got, want) {
		t.Fatalf("recovered %v, want %v", got, want)
	}
}

// When the retention released publications of a source the client has
// no position for, logged since its subscription began, what it missed
// there is not known: the confirmation says so with a Gap.
func TestRecoverSinceBeyondTheRetentionIsAGap(t *testing.T) {
	h := retainingHarness(t, 30)
	h.subscribe("S1", 10, classFilter("x"))
	began := h.now()
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	h.publish("P1", 2, 1, "x")
	h.publish("P1", 2, 2, "x")
	h.run(100) // released
	h.publish("P1", 2, 3, "x")
	h.run(10)
	since := uint64((h.now() - began) * 10)
	ack := h.subscribeWith("S2", 11, &message.Subscribe{Req: 11, Filter: classFilter("x"), Recover: &message.Recovery{Since: since}})
	if ack.Recovered || len(ack.Missed) != 1 || ack.Missed[0].From != 1 || ack.Missed[0].To != 2 {
		t.Fatalf("confirmation %+v, want recovered: false, missed b 1..2", ack)
	}
	if got := h.pubsOf(11); !slices.Equal(got, []string{"b/3"}) {
		t.Fatalf("got %v, want [b/3]", got)
	}
}

// now is the publishers' edge's tick.
func (h *harness) now() int64 { return h.nodes["P1"].now }
