package overlay

import (
	"slices"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/checkpoint"
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
