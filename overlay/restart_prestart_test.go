package overlay

import (
	"testing"

	"github.com/deltapub/deltapub/message"
)

// restartBeforeCoreStarted is the row-of-three restart in the chain
//
//	P1 - A - B - C - D (subscriber)
//
// (δ = 2): A and B crash together and restart together; A's core starts
// first (the runtime gives it one joinpoint, P1, which admits it) and,
// recovering, asks B for its state while B's runtime has not started B's
// core yet (it is still resolving its own first joinpoint, A). Then B's
// core starts and joins through A alone, which refuses it until A is
// joined. If A's StateRequest is lost (the runtime dropped what arrived
// on a link before its core started), nothing answers it: B, heard alive
// but not joined, is never suspected (so A does not ask behind it), A
// waits for it until GoneAfterTicks, completes its recovery without B's
// side, becomes routable and swallows what P1 now sends it for D: it
// reports those publications discarded (they never entered its queue), so
// P1 purges them, until B joined and A re-learned B's side. holds: the
// runtime keeps what arrives before the start and steps it after.
func restartBeforeCoreStarted(t *testing.T, holds bool) {
	h := newHarness(t, 2)
	h.prestartHolds = holds
	h.buildTree("P1", [][2]message.BrokerID{{"A", "P1"}, {"B", "A"}, {"C", "B"}, {"D", "C"}})
	h.subscribe("D", 101, classFilter("stock"))
	h.do("P1", func(n *Node) { n.ClientOpen(1) })
	seq := uint64(0)
	pub := func(rounds int) {
		for i := 0; i < rounds; i++ {
			seq++
			h.publish("P1", 1, seq, "stock")
			h.round()
		}
	}
	pub(5)
	h.crash("A")
	h.crash("B")
	pub(4 * h.cfg.FailureTicks)
	h.restartLate("B", 2)
	h.restart("A", 2, "P1") // the runtime's one joinpoint
	pub(3)                  // A rejoined and asked B: B's core not started
	h.startLate("B", "A")   // B's runtime resolved its first joinpoint, A
	pub(h.cfg.GoneAfterTicks + 60)
	h.runUntil(400, "queues drained"+h.queueReport(), h.queuesEmpty)
	got := map[uint64]bool{}
	for _, s := range h.deliveries(101) {
		got[s] = true
	}
	var lost []uint64
	for s := uint64(1); s <= seq; s++ {
		if !got[s] {
			lost = append(lost, s)
		}
	}
	for _, n := range h.notices {
		if n.Kind == NoticeGap {
			t.Errorf("gap notice within δ: %+v", n)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("D lost %d of %d publications: %v", len(lost), seq, lost)
	}
	h.checkExactFIFO(101, int(seq))
}

func TestRestartStateRequestBeforeCoreStartedHeld(t *testing.T) {
	restartBeforeCoreStarted(t, true)
}

// Dropped (a runtime that drops them): the core asks again
// (reaskState) and recovers within δ all the same.
func TestRestartStateRequestBeforeCoreStartedDropped(t *testing.T) {
	restartBeforeCoreStarted(t, false)
}
