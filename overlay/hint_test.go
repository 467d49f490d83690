package overlay

import (
	"testing"

	"github.com/deltapub/deltapub/message"
)

// dialsTo counts the dials requested of to, from any of from, since the
// index since of h.dials.
func (h *harness) dialsTo(to message.BrokerID, since int, from ...message.BrokerID) int {
	c := 0
	for _, d := range h.dials[since:] {
		for _, f := range from {
			if d[0] == f && d[1] == to {
				c++
			}
		}
	}
	return c
}

// A suspicion taken from a tree neighbour's heartbeat is that neighbour's to
// lift: the brokers that took it do not probe the suspect while the
// reporter is heard (each probe is a handshake, and on a starved machine a
// slow broker's neighbourhood probing it at once starved it further), and
// they lift it when the reporter's heartbeat no longer lists it. Once the
// reporter is unusable nobody is left to lift it, and they probe.
func TestReportedSuspicionIsLiftedByItsReporter(t *testing.T) {
	h := newHarness(t, 1)
	h.buildTree("B1", [][2]message.BrokerID{{"B2", "B1"}, {"B3", "B2"}, {"B4", "B2"}})
	h.run(20)
	ft := h.cfg.FailureTicks

	since := len(h.dials)
	h.freeze("B3")
	h.runUntil(3*ft, "B1 takes B2's report on B3", func() bool { return h.nodes["B1"].peers["B3"] != nil && h.nodes["B1"].peers["B3"].suspected })
	if !h.nodes["B4"].peer("B3").suspected {
		t.Fatal("B4 did not take B2's report on B3")
	}
	h.run(2 * ft)
	if n := h.dialsTo("B3", since, "B1", "B4"); n != 0 {
		t.Fatalf("B1 and B4 dialled B3 %d times while B2, which reported it, was heard", n)
	}
	h.resume("B3")
	h.runUntil(4*ft, "B2's report on B3 lifted at B1 and B4", func() bool {
		return !h.nodes["B1"].peers["B3"].suspected && !h.nodes["B4"].peers["B3"].suspected
	})
	if n := h.dialsTo("B3", since, "B1", "B4"); n != 0 {
		t.Fatalf("B1 and B4 dialled B3 %d times before the report was lifted", n)
	}

	// The reporter crashes while the suspect is frozen: the report stands
	// with nobody to lift it, and the brokers that took it probe.
	h.freeze("B3")
	h.runUntil(3*ft, "B1 takes B2's report on B3 again", func() bool { return h.nodes["B1"].peers["B3"].suspected })
	since = len(h.dials)
	h.crash("B2")
	h.run(3 * ft)
	if n := h.dialsTo("B3", since, "B1", "B4"); n == 0 {
		t.Fatal("B2, the reporter, crashed, and nobody probed B3, which it had reported")
	}
}

// A recovering broker that awaits the state of a broker it holds suspected
// on a report dials it once the reporter lifts the report: nobody probed
// it meanwhile, and the recovery asks for a state only on a link. (Without
// the dial, a restarted broker waited on its neighbourhood's state until
// its recovery gave up on it, and the subscriptions flooded meanwhile were
// never confirmed: a simulator fuzz run.)
func TestRecoveryDialsAPeerWhoseReportWasLifted(t *testing.T) {
	h := newHarness(t, 3)
	// B2 is a leaf beside B4's parent B3: nobody stands behind it whom
	// B4's recovery could ask instead of it.
	h.buildTree("B1", [][2]message.BrokerID{{"B3", "B1"}, {"B2", "B3"}, {"B4", "B3"}, {"B5", "B4"}})
	h.run(20)
	ft := h.cfg.FailureTicks
	h.crash("B2")
	h.crash("B4")
	h.runUntil(3*ft, "B3 suspects B2", func() bool { return h.nodes["B3"].peers["B2"].suspected })
	// B4 restarts with B2 among its joinpoints (as the runtime gives the
	// core its saved place), so its recovery awaits B2's state; its dial
	// of B2 stays pending until B3's report on B2 has reached it, then
	// fails.
	h.gated = map[[2]message.BrokerID]bool{pair("B4", "B2"): true}
	h.restart("B4", 2, "B3", "B2", "B5")
	h.runUntil(3*ft, "B4 takes B3's report on B2", func() bool {
		p := h.nodes["B4"].peers["B2"]
		return p != nil && p.suspected && p.reportedBy == "B3"
	})
	delete(h.gated, pair("B4", "B2"))
	h.do("B4", func(n *Node) { n.DialFailed("B2") })
	if !h.nodes["B4"].rec.stateWait["B2"] {
		t.Fatal("B4's recovery does not await B2's state: the case is not reached")
	}
	h.run(2 * ft)
	since := len(h.dials)
	h.restart("B2", 2, "B3")
	h.runUntil(6*ft, "B3's report on B2 lifted at B4", func() bool { return !h.nodes["B4"].peers["B2"].suspected })
	h.runUntil(4*ft, "B4 dials B2 for its state", func() bool { return h.dialsTo("B2", since, "B4") > 0 })
	h.runUntil(10*ft, "B4 recovered", func() bool { return h.nodes["B4"].Joined() })
}
