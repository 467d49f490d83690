package overlay

import (
	"slices"
	"testing"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/message"
)

// newResumeHarness is the durable harness with no retention at the
// publishers' edge (a flood gets a Gap for what was missed) and away
// subscriptions kept at their edge.
func newResumeHarness(t *testing.T, keep int, held int64) *harness {
	h := newHarness(t, 2)
	h.cfg.Durable = true
	h.cfg.KeepAwayTicks, h.cfg.MaxHeldBytes = keep, held
	h.buildTree("P1", chainEdges)
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 7}) })
	return h
}

func (h *harness) publishRange(from, to uint64) {
	for s := from; s <= to; s++ {
		h.publish("P1", 1, s, pubClass(s))
	}
}

func (h *harness) gaps(c message.ClientID) int {
	k := 0
	for _, m := range h.got[c] {
		if _, ok := m.(*message.Gap); ok {
			k++
		}
	}
	return k
}

// A durable subscriber that resumes at its edge with a token between what
// it acknowledged and what it was delivered gets, from what the edge held,
// exactly what it has not consumed (deliveries it lost in flight
// included), with no flood: the publishers' edge retains nothing, so a
// flood would have brought a Gap.
func TestResumeAtTheSameEdgeFromWhatItHeld(t *testing.T) {
	h := newResumeHarness(t, 1000, 0)
	h.durableSub("S1", 10, "d", "x", nil)
	h.publishRange(1, 10)
	h.run(40)
	acked := h.clientToken(10, checkpoint.Token{Name: "d"})
	h.do("S1", func(n *Node) {
		n.Client(10, &message.DurableAck{Sub: h.got[10][0].(*message.SubAck).Sub, Token: acked.Encode()})
	})
	// Delivered after the acknowledgement, lost with the session: the
	// client resumes from a token that has consumed up to 10 only.
	h.publishRange(11, 14)
	h.run(40)
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	h.publishRange(15, 20)
	h.run(40)
	floods := h.nodes["S1"].counters.Control["SubFlood"]
	h.durableSub("S1", 11, "d", "x", acked.Encode())
	h.publishRange(21, 24)
	h.run(40)
	if got, want := h.deliveries(11), matchingSeqs(11, 24); !slices.Equal(got, want) {
		t.Fatalf("resumed at S1 got %v, want %v", got, want)
	}
	n := h.nodes["S1"]
	if n.counters.ResumedHere != 1 || n.counters.Control["SubFlood"] != floods || h.gaps(11) != 0 {
		t.Errorf("resumed here %d, floods sent %d more, gaps %d; want 1, 0, 0",
			n.counters.ResumedHere, n.counters.Control["SubFlood"]-floods, h.gaps(11))
	}
}

// A resume the held record cannot serve floods as before: a token older
// than what the client acknowledged (released here), or one after what
// was delivered (not this subscriber's).
func TestResumeOutsideTheHeldRangeFloods(t *testing.T) {
	for _, c := range []struct {
		name string
		tok  func(acked checkpoint.Token) checkpoint.Token
	}{
		{"older than acknowledged", func(checkpoint.Token) checkpoint.Token { return checkpoint.Token{Name: "d"} }},
		{"after what was delivered", func(a checkpoint.Token) checkpoint.Token {
			_ = a.Advance(message.Source{Publisher: "pub", Epoch: 7}, 99)
			return a
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newResumeHarness(t, 1000, 0)
			sub := h.durableSub("S1", 10, "d", "x", nil)
			h.publishRange(1, 10)
			h.run(40)
			acked := h.clientToken(10, checkpoint.Token{Name: "d"})
			h.do("S1", func(n *Node) { n.Client(10, &message.DurableAck{Sub: sub, Token: acked.Encode()}) })
			h.do("S1", func(n *Node) { n.ClientClose(10) })
			h.run(10)
			tok := c.tok(acked)
			h.durableSub("S1", 11, "d", "x", tok.Encode())
			if n := h.nodes["S1"]; n.counters.ResumedHere != 0 {
				t.Fatalf("resumed here from a token outside the held range")
			}
		})
	}
}

// An away subscription is withdrawn after KeepAwayTicks, and one whose
// record passes MaxHeldBytes stops holding: both resume by a flood.
func TestAwayBounds(t *testing.T) {
	t.Run("kept too long", func(t *testing.T) {
		h := newResumeHarness(t, 30, 0)
		h.durableSub("S1", 10, "d", "x", nil)
		h.do("S1", func(n *Node) { n.ClientClose(10) })
		h.run(10)
		if st := h.nodes["S1"].durableStatus(); st.Away != 1 {
			t.Fatalf("away %d after the close, want 1", st.Away)
		}
		h.run(60)
		n := h.nodes["S1"]
		if st := n.durableStatus(); st.Subs != 0 || n.counters.AwayExpired != 1 {
			t.Fatalf("after KeepAwayTicks: %d subscriptions, %d expired; want 0, 1", st.Subs, n.counters.AwayExpired)
		}
		if _, ok := h.nodes["P1"].table.Get(message.SubID{Edge: "S1", Epoch: 1, N: 1}); ok {
			t.Error("the expired subscription is still routed at P1")
		}
	})
	t.Run("held bytes", func(t *testing.T) {
		h := newResumeHarness(t, 1000, 600)
		h.durableSub("S1", 10, "d", "x", nil)
		h.do("S1", func(n *Node) { n.ClientClose(10) })
		h.publishRange(1, 40)
		h.run(40)
		n := h.nodes["S1"]
		if st := n.durableStatus(); st.Subs != 0 || n.counters.HeldOver == 0 || st.HeldBytes != 0 {
			t.Fatalf("past MaxHeldBytes: %d subscriptions, held over %d, %d bytes held; want 0, >0, 0", st.Subs, n.counters.HeldOver, st.HeldBytes)
		}
	})
}

// A resume at another edge ends the away copy at the first edge when its
// flood passes there.
func TestResumeElsewhereEndsTheAwayCopy(t *testing.T) {
	h := newResumeHarness(t, 1000, 0)
	h.cfg.RetainTicks = 10_000
	h.durableSub("S1", 10, "d", "x", nil)
	tok := h.clientToken(10, checkpoint.Token{Name: "d"})
	h.do("S1", func(n *Node) { n.ClientClose(10) })
	h.run(10)
	h.durableSub("S2", 11, "d", "x", tok.Encode())
	h.run(20)
	if st := h.nodes["S1"].durableStatus(); st.Subs != 0 {
		t.Fatalf("S1 still keeps %d durable subscriptions after the resume at S2", st.Subs)
	}
}

// An open Gap (a hole beyond δ: everything from From may be missing) that
// an edge holds for a subscriber away is handed to it at its resume there,
// and an acknowledgement from before the hole does not release it. (Its
// To of 0 read as the last seq it covers: the first acknowledgement
// dropped it, and the resume skipped it; the subscriber lost what the hole
// swallowed without a Gap.)
func TestHeldOpenGapIsHandedOnAtTheResume(t *testing.T) {
	src := message.Source{Publisher: "P", Epoch: 1}
	n := &Node{}
	n.cfg.ID, n.cfg.Epoch, n.cfg.KeepAwayTicks = "B", 1, 100
	sub := message.SubID{Edge: "B", Epoch: 1, N: 1}
	d := &dsub{name: "d", live: true, client: 7, away: true,
		tok:  checkpoint.Token{Name: "d", Entries: []checkpoint.Entry{{Source: src, Seq: 44}}},
		held: map[message.Source][]message.Message{}, floor: map[message.Source]uint64{}}
	n.dsub.subs = map[message.SubID]*dsub{sub: d}
	n.durNotify(sub, d, &message.Gap{Sub: sub, Source: src, From: 45, Reason: "hole"})
	acked := checkpoint.Token{Name: "d", Entries: []checkpoint.Entry{{Source: src, Seq: 40}}}
	n.releaseHeld(d, acked)
	if len(d.held[src]) != 1 {
		t.Fatalf("an acknowledgement from before the hole released the open Gap (held %v)", d.held[src])
	}
	n.sendHeld(sub, d, 8, acked)
	var gap *message.Gap
	for _, e := range n.out.ToClients {
		if g, ok := e.Msg.(*message.Gap); ok && e.To == 8 {
			gap = g
		}
	}
	if gap == nil || gap.From != 45 || gap.To != 0 {
		t.Fatalf("the resumed session got %+v, want the open Gap from 45", gap)
	}
	d.tok = checkpoint.Token{Name: "d", Entries: []checkpoint.Entry{{Source: src, Seq: 44, Horizon: 50}}} // delivered on since
	n.releaseHeld(d, d.tok)
	if len(d.held[src]) != 0 {
		t.Errorf("a token past the Gap's start did not release it (held %v)", d.held[src])
	}
}
