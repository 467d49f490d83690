package sim

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
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
	w := workload.NewSmall(s.Rand())
	for i := 1; i <= 10; i++ {
		if err := s.AddSubscriber(fmt.Sprintf("S%d", i), tree.Order[s.Rand().IntN(12)], w.Filter()); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.RunUntilCond(time.Second, s.AllConfirmed); !ok || err != nil {
		t.Fatalf("seed %d: not confirmed: %v", seed, err)
	}
	for i := 1; i <= 3; i++ {
		if err := s.AddPublisher(fmt.Sprintf("P%d", i), tree.Order[s.Rand().IntN(12)], 10*time.Millisecond, s.Now()+time.Second, func() []matching.Attr { return w.Publication().Attrs }); err != nil {
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

// mangler wraps a node and corrupts its deliveries: every 7th Deliver is
// sent twice, every 11th is held back and sent after the next one.
type mangler struct {
	Node
	n    int
	held *overlay.ClientEnvelope
}

func (m *mangler) Ready() overlay.Ready {
	rd := m.Node.Ready()
	var out []overlay.ClientEnvelope
	for _, ce := range rd.ToClients {
		if _, ok := ce.Msg.(*message.Deliver); !ok {
			out = append(out, ce)
			continue
		}
		m.n++
		switch {
		case m.held != nil && m.held.To == ce.To:
			out = append(out, ce, *m.held)
			m.held = nil
		case m.n%11 == 0 && m.held == nil:
			c := ce
			m.held = &c
		case m.n%7 == 0:
			out = append(out, ce, ce)
		default:
			out = append(out, ce)
		}
	}
	rd.ToClients = out
	return rd
}

// Duplicates and reordering produced by a node are caught through the
// whole simulator, online (the trace) and after the run.
func TestCheckerCatchesManglingNode(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Seed = 3
	cfg.NewNode = func(c overlay.Config) (Node, error) { n, _ := NewFloodNode(c); return &mangler{Node: n}, nil }
	var trace bytes.Buffer
	s := startMangling(t, cfg, &trace)
	_ = s.RunFor(2 * time.Second)
	r := s.Log().Check()
	if r.Duplicates == 0 || r.Reordered == 0 || !r.Failed(false) {
		t.Fatalf("mangled deliveries not caught: %+v", r)
	}
	if s.FirstViolation() < 0 || !bytes.Contains(trace.Bytes(), []byte("CHECK duplicate")) || !bytes.Contains(trace.Bytes(), []byte("CHECK reorder")) {
		t.Fatalf("online check silent (first violation %v)", s.FirstViolation())
	}
	// Without a trace the online check runs when FirstViolation is asked
	// for: the same instant.
	first := firstViolationOf(t, cfg, nil)
	if v := firstViolationOf(t, cfg, &bytes.Buffer{}); first != s.FirstViolation() || v != first {
		t.Fatalf("first violation %v without a trace, %v and %v with one", first, v, s.FirstViolation())
	}
}

// firstViolationOf runs the mangling setup of TestCheckerCatchesManglingNode
// with trace (nil: none), asking for the first violation mid-run and at
// the end.
func firstViolationOf(t *testing.T, cfg Config, trace *bytes.Buffer) time.Duration {
	t.Helper()
	s := startMangling(t, cfg, trace)
	_ = s.RunFor(300 * time.Millisecond)
	mid := s.FirstViolation()
	_ = s.RunFor(2 * time.Second)
	if end := s.FirstViolation(); mid >= 0 && end != mid || end < 0 {
		t.Fatalf("first violation %v mid-run, %v at the end", mid, end)
	}
	return s.FirstViolation()
}

// startMangling builds the two-broker setup of the mangling tests with
// trace (nil: none): a subscriber at B2, then a publisher at B1 every
// 10 ms for a second, not yet run.
func startMangling(t *testing.T, cfg Config, trace *bytes.Buffer) *Sim {
	t.Helper()
	cfg.Trace = nil
	if trace != nil {
		cfg.Trace = trace
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tree := NewTree("B1")
	_ = tree.Add("B1", "B2")
	if err := s.BuildTree(tree, time.Second); err != nil {
		t.Fatal(err)
	}
	f, _ := parseFilter([]string{"class=a"})
	_ = s.AddSubscriber("S1", "B2", f)
	_ = s.RunFor(100 * time.Millisecond)
	_ = s.AddPublisher("P1", "B1", 10*time.Millisecond, s.Now()+time.Second, func() []matching.Attr {
		return []matching.Attr{{Name: "class", Value: matching.Str("a")}}
	})
	return s
}

func TestEventHeapOrder(t *testing.T) {
	var h eventHeap
	seq := uint64(0)
	for i := 0; i < 1000; i++ {
		seq++
		h.push(event{at: time.Duration((i * 7919) % 97), seq: seq})
	}
	var last *event
	n := 0
	for len(h) > 0 {
		e := h.pop()
		if last != nil && e.before(last) {
			t.Fatalf("out of order: %v/%d after %v/%d", e.at, e.seq, last.at, last.seq)
		}
		last = &e
		n++
	}
	if n != 1000 {
		t.Fatalf("popped %d events, pushed 1000", n)
	}
}
