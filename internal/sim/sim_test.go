package sim

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// floodRun builds a random tree of flood nodes with random clients and
// runs it; crash, when not empty, is crashed half-way.
func floodRun(t *testing.T, seed int64, crash message.BrokerID, trace *bytes.Buffer) (*Sim, Report) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.NewNode = NewFloodNode
	if trace != nil {
		cfg.Trace = trace
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tree := RandomTree(s.Rand(), 12, 3)
	if err := s.BuildTree(tree, time.Second); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	w := DefaultWorkload()
	for i := 1; i <= 10; i++ {
		if err := s.AddSubscriber(fmt.Sprintf("S%d", i), tree.Order[s.Rand().IntN(12)], w.Filter(s.Rand())); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.RunUntilCond(time.Second, s.AllConfirmed); !ok || err != nil {
		t.Fatalf("seed %d: not confirmed: %v", seed, err)
	}
	for i := 1; i <= 3; i++ {
		if err := s.AddPublisher(fmt.Sprintf("P%d", i), tree.Order[s.Rand().IntN(12)], 10*time.Millisecond, s.Now()+time.Second, func() []matching.Attr { return w.Publication(s.Rand()) }); err != nil {
			t.Fatal(err)
		}
	}
	if crash != "" {
		if err := s.RunFor(500 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := s.Crash(crash); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RunFor(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.CheckDrained()
	return s, s.Log().Check()
}

func TestFloodNoFaultsPasses(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		_, r := floodRun(t, seed, "", nil)
		if r.Failed(false) || r.Guaranteed == 0 || r.Published < 250 {
			t.Fatalf("seed %d: %+v", seed, r)
		}
	}
}

// A crash in a flood overlay loses publications: the checker must see it.
func TestFloodCrashIsCaughtAsLoss(t *testing.T) {
	caught := 0
	for seed := int64(1); seed <= 5; seed++ {
		_, r := floodRun(t, seed, "B2", nil)
		if r.Duplicates+r.Reordered+r.Spurious != 0 {
			t.Fatalf("seed %d: flood cannot duplicate or reorder: %+v", seed, r)
		}
		if r.Lost > 0 {
			caught++
		}
	}
	if caught == 0 {
		t.Fatal("no loss detected in 5 runs with a crashed inner broker")
	}
}

func TestRunIsDeterministic(t *testing.T) {
	var h [2][32]byte
	for i := range h {
		var buf bytes.Buffer
		floodRun(t, 42, "B3", &buf)
		h[i] = sha256.Sum256(buf.Bytes())
		if buf.Len() < 1000 {
			t.Fatalf("trace too short: %q", buf.String())
		}
	}
	if h[0] != h[1] {
		t.Fatal("two runs from seed 42 produced different traces")
	}
}
