package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// TestLargeStateSmallFrames: with an 8 KiB frame limit enforced by every
// receiver (Config.MaxFrame) and 1,500 subscriptions, a crash and restart
// (recovery by StateReply), a new broker's join (JoinReply) and a graceful
// leave (TopoChange.Via) need more than one frame each: the core sends
// them in parts, the run has no wire error, no loss, no duplicate, and
// every broker recovers, joins or leaves.
func TestLargeStateSmallFrames(t *testing.T) {
	const seed = 11
	rep, st, errs := largeStateRun(t, seed, NewOverlayNode, true)
	t.Logf("seed %d: %d parts; messages by type %v", seed, st.Messages["Part"], st.Messages)
	if st.Messages["Part"] == 0 {
		t.Errorf("seed %d: no Part was sent: the test does not exercise large states", seed)
	}
	if rep.Failed(false) || rep.Errors > 0 || rep.Lost > 0 {
		t.Fatalf("seed %d: run failed: %+v\nerrors: %v", seed, rep, errs)
	}

	// Control: cores not told the limit send single frames, and the
	// receivers refuse them (the check above can fail).
	rep, _, errs = largeStateRun(t, seed, func(c overlay.Config) (Node, error) {
		c.MaxFrame = overlay.DefaultConfig().MaxFrame // not the receivers' limit
		return NewOverlayNode(c)
	}, false)
	if rep.Errors == 0 {
		t.Fatalf("seed %d: cores unaware of the 8 KiB limit caused no wire error", seed)
	}
	t.Logf("control run: %d wire errors, the first: %s", rep.Errors, errs[0])
}

// largeStateRun is the scenario of TestLargeStateSmallFrames with nodes
// from factory. Errors of the scenario's steps end the test, and so does a
// recovery, join or leave that does not complete if strict (else the run
// stops there); the run's outcome is returned.
func largeStateRun(t *testing.T, seed int64, factory NodeFactory, strict bool) (Report, Stats, []string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.NewNode = factory
	cfg.Wire = true
	cfg.MaxFrame = 8 << 10
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTree("B1")
	for _, e := range [][2]message.BrokerID{{"B1", "B2"}, {"B2", "B3"}, {"B3", "B4"}, {"B4", "B5"}, {"B3", "B6"}, {"B5", "B7"}, {"B6", "B8"}} {
		if err := tr.Add(e[0], e[1]); err != nil {
			t.Fatal(err)
		}
	}
	fail := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("seed %d: %s: %v", seed, what, err)
		}
	}
	fail("tree", s.BuildTree(tr, 2*time.Second))
	const subs = 1500
	w := workload.NewSmall(s.Rand())
	brokers := s.Brokers()
	for i := 1; i <= subs; i++ {
		fail("subscriber", s.AddSubscriber(fmt.Sprintf("S%d", i), brokers[s.Rand().IntN(len(brokers))], w.Filter()))
	}
	ok, err := s.RunUntilCond(10*time.Second, s.AllConfirmed)
	fail("confirm", err)
	if !ok {
		t.Fatalf("seed %d: %d subscriptions not confirmed in 10s", seed, subs)
	}
	fail("publisher", s.AddPublisher("P1", "B1", 20*time.Millisecond, s.Now()+4*time.Second, func() []matching.Attr { return w.Publication().Attrs }))
	fail("publisher", s.AddPublisher("P2", "B7", 30*time.Millisecond, s.Now()+4*time.Second, func() []matching.Attr { return w.Publication().Attrs }))
	fail("run", s.RunFor(300*time.Millisecond))

	fail("crash", s.Crash("B4"))
	fail("run", s.RunFor(300*time.Millisecond))
	fail("restart", s.Restart("B4", "B3", "B5"))
	ok, err = s.RunUntilCond(3*time.Second, func() bool { return s.Joined("B4") })
	fail("recovery", err)
	if !ok {
		if strict {
			t.Fatalf("seed %d: B4 did not recover in 3s", seed)
		}
		return s.Log().Check(), s.Stats(), s.Log().Errors
	}

	fail("add", s.AddBroker("B9"))
	fail("join", s.Join("B9", "B6"))
	ok, err = s.RunUntilCond(3*time.Second, func() bool { return s.Joined("B9") })
	fail("join", err)
	if !ok {
		if strict {
			t.Fatalf("seed %d: B9 did not join in 3s", seed)
		}
		return s.Log().Check(), s.Stats(), s.Log().Errors
	}

	fail("leave", s.Leave("B3"))
	ok, err = s.RunUntilCond(5*time.Second, func() bool { return s.HasLeft("B3") })
	fail("leave", err)
	if !ok {
		if strict {
			t.Fatalf("seed %d: B3 did not leave in 5s", seed)
		}
		return s.Log().Check(), s.Stats(), s.Log().Errors
	}

	s.StopPublishers()
	fail("settle", s.RunFor(2*time.Second))
	s.CheckDrained()
	s.CheckLiveness()
	return s.Log().Check(), s.Stats(), s.Log().Errors
}
