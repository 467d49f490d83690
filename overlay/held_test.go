package overlay

import (
	"slices"
	"testing"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/message"
)

// Two durable subscriptions at one edge hold the same publications: the
// held log is told each publication once, each subscription's records
// and position, and, once both acknowledged everything, every publication
// dropped once.
func TestHeldChangesKeepEachPublicationOnce(t *testing.T) {
	h := newResumeHarness(t, 1000, 0)
	h.cfg.PersistHeld = true
	for _, n := range h.nodes {
		n.cfg.PersistHeld = true
	}
	subD := h.durableSub("S1", 10, "d", "x", nil)
	subE := h.durableSub("S1", 11, "e", "x", nil)
	h.publishRange(1, 12)
	h.run(40)
	want := len(h.deliveries(10))
	if want == 0 || len(h.deliveries(11)) != want {
		t.Fatalf("deliveries %d and %d", want, len(h.deliveries(11)))
	}
	events := map[message.PubID]int{}
	records := map[string]int{}
	starts, tokens := map[string]int{}, map[string]int{}
	tally := func() {
		for _, c := range h.heldLog["S1"] {
			for _, p := range c.Events {
				events[p.ID]++
			}
			for _, ch := range c.Subs {
				records[ch.Name] += len(ch.Records)
				if ch.Start != nil {
					starts[ch.Name]++
				}
				if ch.Token != nil {
					tokens[ch.Name]++
				}
			}
			for _, id := range c.Dropped {
				events[id]--
			}
		}
		h.heldLog["S1"] = nil
	}
	tally()
	for id, k := range events {
		if k != 1 {
			t.Errorf("publication %s told %d times", id, k)
		}
	}
	if len(events) != want || records["d"] != want || records["e"] != want || starts["d"] != 1 || starts["e"] != 1 || tokens["d"] == 0 {
		t.Fatalf("%d publications, records %v, starts %v, tokens %v; want %d each, one start each", len(events), records, starts, tokens, want)
	}
	ack := func(c message.ClientID, sub message.SubID, name string) {
		tok := h.clientToken(c, checkpoint.Token{Name: name})
		h.do("S1", func(n *Node) { n.Client(c, &message.DurableAck{Sub: sub, Token: tok.Encode()}) })
	}
	ack(10, subD, "d")
	tally()
	for id, k := range events {
		if k != 1 {
			t.Fatalf("after one subscription acknowledged, %s is %d (dropped while the other holds it)", id, k)
		}
	}
	ack(11, subE, "e")
	tally()
	for id, k := range events {
		if k != 0 {
			t.Errorf("after both acknowledged, %s is %d, want dropped", id, k)
		}
	}
}

// A restarted edge given a held subscription whose subscriber resumed at
// another edge while it was down forgets it (one home per name) and tells
// the held log so; one whose subscriber did not is installed again, away.
func TestRestoredHeldSubscriptionHostedElsewhereIsForgotten(t *testing.T) {
	h := newResumeHarness(t, 1000, 0)
	h.durableSub("S1", 10, "d", "x", nil)
	h.publishRange(1, 6)
	h.run(40)
	tok := h.clientToken(10, checkpoint.Token{Name: "d"})
	h.crash("S1")
	h.run(450)                                     // gone: floods no longer wait for it
	h.durableSub("S2", 11, "d", "x", tok.Encode()) // resumed elsewhere
	h.run(40)
	kept := checkpoint.Token{Name: "k"}
	h.restartLate("S1", 2)
	h.do("S1", func(n *Node) {
		n.cfg.PersistHeld = true
		n.RestoreHeld([]HeldSub{
			{Name: "d", Filter: classFilter("x"), Token: tok.Encode()},
			{Name: "k", Filter: classFilter("x"), Token: kept.Encode()},
		})
	})
	h.startLate("S1", "D")
	h.run(80)
	n := h.nodes["S1"]
	if n.counters.HeldDropped != 1 || n.counters.HeldRestored != 1 {
		t.Fatalf("restored %d, dropped %d; want 1 and 1", n.counters.HeldRestored, n.counters.HeldDropped)
	}
	if _, ok := n.dsub.names["d"]; ok {
		t.Errorf("S1 still hosts d, which S2 hosts")
	}
	if sub, ok := n.dsub.names["k"]; !ok || !n.dsub.subs[sub].away || !n.dsub.subs[sub].live {
		t.Errorf("S1 does not host k away and live")
	}
	dropped := false
	for _, c := range h.heldLog["S1"] {
		for _, ch := range c.Subs {
			dropped = dropped || (ch.Name == "d" && ch.Drop)
		}
	}
	if !dropped {
		t.Errorf("the held log was not told to drop d")
	}
	h.publishRange(7, 12)
	h.run(40)
	if got, want := h.deliveries(11), matchingSeqs(1, 12); len(got) == 0 || got[len(got)-1] != want[len(want)-1] {
		t.Errorf("S2's subscriber got %v, want through %v", got, want)
	}
}

// A Catchup answered after live publications were buffered is merged
// before them, in seq order, once each.
func TestCatchupMergedBeforeBufferedLive(t *testing.T) {
	src := message.Source{Publisher: "P", Epoch: 1}
	pubs := func(seqs ...uint64) []message.Pub {
		var out []message.Pub
		for _, q := range seqs {
			out = append(out, message.Pub{ID: message.PubID{Publisher: src.Publisher, Epoch: src.Epoch, Seq: q}})
		}
		return out
	}
	n := &Node{}
	sub := message.SubID{Edge: "B", Epoch: 1, N: 1}
	d := &dsub{buf: map[message.Source][]message.Pub{src: pubs(10, 11, 12)}}
	n.dsub.subs = map[message.SubID]*dsub{sub: d}
	n.durBufferAll(sub, d, src, pubs(5, 6, 6, 10, 11, 13))
	var got []uint64
	for _, p := range d.buf[src] {
		got = append(got, p.ID.Seq)
	}
	if want := []uint64{5, 6, 10, 11, 12, 13}; !slices.Equal(got, want) {
		t.Fatalf("buffered %v, want %v", got, want)
	}
}

// A late answer to a live durable subscription that starts after the
// token's position (a restarted publisher's edge answering a fresh flood
// from its last seq) does not silence what lies between: the publication
// the edge offers again is delivered when it comes.
func TestLateAnswerFromBeyondTheTokenDoesNotSilenceTheGap(t *testing.T) {
	src := message.Source{Publisher: "P", Epoch: 1}
	pub := func(q uint64) *message.Pub {
		return &message.Pub{ID: message.PubID{Publisher: src.Publisher, Epoch: src.Epoch, Seq: q}}
	}
	n := &Node{}
	n.cfg.ID, n.cfg.Epoch = "B", 1
	sub := message.SubID{Edge: "B", Epoch: 1, N: 1}
	d := &dsub{name: "d", live: true, client: 7}
	n.dsub.subs = map[message.SubID]*dsub{sub: d}
	for q := uint64(1); q <= 51; q++ {
		n.durDeliver(sub, d, pub(q))
	}
	n.onCatchup("A", &message.Catchup{Sub: sub, Source: src, From: 52, First: 52, Last: 52})
	if got := d.tok.Get(src).From(); got != 51 {
		t.Fatalf("the answer moved the token to %d, want 51", got)
	}
	n.durLive(sub, d, pub(52))
	if n.counters.DurableDuplicates != 0 || d.tok.Get(src).From() != 52 {
		t.Fatalf("publication 52 not delivered: %d dropped as consumed, token at %d", n.counters.DurableDuplicates, d.tok.Get(src).From())
	}
	// An answer that covers everything after the token still silences.
	n.onCatchup("A", &message.Catchup{Sub: sub, Source: src, From: 52, First: 53, Last: 60})
	if got := d.tok.Get(src).From(); got != 60 {
		t.Errorf("a covering answer moved the token to %d, want 60", got)
	}
}
