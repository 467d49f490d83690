package overlay

import (
	"testing"

	"github.com/deltapub/deltapub/message"
)

// TestFalseSuspicionMakesTheNextOneSlower: B2 freezes for longer than the
// failure timeout again and again (a starved process). Each suspicion it
// refutes doubles the silence B1 waits before suspecting it again, up to
// four failure timeouts; a calm period takes a doubling back; a crash is
// still detected.
func TestFalseSuspicionMakesTheNextOneSlower(t *testing.T) {
	h := newHarness(t, 1)
	h.buildTree("B1", [][2]message.BrokerID{{"B2", "B1"}, {"B3", "B2"}})
	h.run(20)
	ft := h.cfg.FailureTicks
	suspicions := func() int {
		c := 0
		for _, nt := range h.notices {
			if nt.Kind == NoticeSuspected && nt.Peer == "B2" {
				c++
			}
		}
		return c
	}
	// stall freezes B2 for rounds, resumes it and lets everything heal;
	// it reports whether B1 (or B3) suspected B2 meanwhile.
	stall := func(rounds int) bool {
		before := suspicions()
		nb := len(h.notices)
		h.freeze("B2")
		h.run(rounds)
		h.resume("B2")
		h.runUntil(200, "B2 unsuspected", func() bool {
			return !h.nodes["B1"].peers["B2"].suspected && !h.nodes["B3"].peers["B2"].suspected
		})
		h.run(10)
		if testing.Verbose() {
			for _, nt := range h.notices[nb:] {
				t.Logf("  %v", nt)
			}
		}
		return suspicions() > before
	}
	steps := []struct {
		rounds int
		want   bool
	}{
		{ft + 3, true},    // the first stall past the timeout: suspected
		{2*ft - 4, false}, // now twice the timeout is needed
		{2*ft + 3, true},  // past it: suspected, refuted again
		{4*ft - 4, false}, // four timeouts now
		{4*ft + 3, true},  // the bound: four timeouts, no more
		{4*ft + 3, true},  // still four
	}
	for i, s := range steps {
		if got := stall(s.rounds); got != s.want {
			t.Fatalf("stall %d (%d rounds, failure timeout %d): suspected=%v, want %v", i, s.rounds, ft, got, s.want)
		}
	}
	// Calm for gone_after takes one doubling back: past two timeouts is
	// suspected again (and refuted: four again); twice as long calm, and
	// one timeout is enough.
	h.run(h.cfg.GoneAfterTicks + 5)
	if !stall(2*ft + 3) {
		t.Fatal("after a calm period: a stall past two failure timeouts was not suspected")
	}
	h.run(2*h.cfg.GoneAfterTicks + 5)
	if !stall(ft + 3) {
		t.Fatal("after two calm periods: a stall past one failure timeout was not suspected")
	}
	// A crash is detected (later, never missed).
	before := suspicions()
	h.crash("B2")
	h.run(4*ft + 5)
	if suspicions() == before {
		t.Fatal("B2 crashed and nobody suspected it within four failure timeouts")
	}
}
