package overlay

import (
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

// Without a publication log nothing is retained: a recovery is honest
// about it (the whole missed range), instead of silently plain.
func TestRecoverWithoutRetentionReportsTheGap(t *testing.T) {
	h := newHarness(t, 2)
	h.cfg.Durable = true
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
	ack := h.recoverSub("S2", 11, "x", pos)
	if ack.Recovered || len(ack.Missed) != 1 || ack.Missed[0].From != 2 || ack.Missed[0].To != 3 {
		t.Fatalf("confirmation %+v, want recovered: false, missed [2, 3]", ack)
	}
}

// A stream no publisher's edge answers for (its edge keeps no log) is
// unknown, not recovered: the confirmation lists it with no end.
func TestRecoverOfAStreamNobodyAnswersForIsUnknown(t *testing.T) {
	h := newHarness(t, 2)
	h.buildTree("P1", chainEdges) // Durable off: no broker keeps a log
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 7}) })
	h.subscribe("S1", 10, classFilter("x"))
	h.publish("P1", 1, 1, "x")
	h.run(20)
	pos := h.lastPositions(10)
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	h.publish("P1", 1, 2, "x")
	h.run(20)
	ack := h.recoverSub("S2", 11, "x", pos)
	if ack.Recovered || len(ack.Missed) != 1 || ack.Missed[0].From != 2 || ack.Missed[0].To != 0 {
		t.Fatalf("confirmation %+v, want recovered: false, missed from 2 with no end", ack)
	}
	h.publish("P1", 1, 3, "x")
	h.run(20)
	if got := h.deliveries(11); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("got %v, want [3] (live)", got)
	}
}
