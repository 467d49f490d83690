package sim

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// The parallel engine's results do not depend on the number of workers
// (partitions), on whether windows run in parallel or one partition after
// the other, nor on the run: a scaled-down srds09, without and with a
// crash, gives byte-identical reports and timelines for 1, 2 and 4
// workers (always in parallel, never, adaptive) and twice with 2, and
// keeps every guarantee. Run it under `go test -race` too: the partitions
// share the brokers, links and log.
func TestParallelDeterministic(t *testing.T) {
	type run struct{ workers, mode int }
	runs := []run{{1, parAdaptive}, {2, parAlways}, {4, parAlways}, {2, parAlways}, {2, parNever}, {4, parAdaptive}}
	for _, k := range []int{0, 1} {
		var want string
		for i, x := range runs {
			w := x.workers
			o := DefaultSRDSOptions()
			o.Brokers, o.Subs, o.Publishers, o.Crashes = 20, 200, 5, k
			o.Warmup, o.After = 1200*time.Millisecond, 600*time.Millisecond
			o.Workers, o.parMode = w, x.mode
			r := RunSRDS09(o)
			if r.Err != nil {
				t.Fatalf("crashes=%d workers=%d: %v", k, w, r.Err)
			}
			var b bytes.Buffer
			b.WriteString(r.Text())
			if err := r.TimelineCSV(&b); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				want = b.String()
				t.Log(r.Text())
				if r.Report.Failed(false) || r.Report.Guaranteed == 0 {
					t.Fatalf("crashes=%d workers=%d: %s", k, w, r.Text())
				}
				continue
			}
			if got := b.String(); got != want {
				t.Errorf("crashes=%d: workers=%d (mode %d) differs from workers=1:\n%s\nwant\n%s", k, w, x.mode, got, want)
			}
		}
	}
}

// The serial and parallel engines run the same experiment to the same
// verdicts (not the same figures: tie-breaking and random streams differ).
func TestParallelSRDS09Small(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	for _, k := range []int{0, 1} {
		o := DefaultSRDSOptions()
		o.Brokers, o.Subs, o.Publishers, o.Crashes = 20, 200, 5, k
		o.Warmup, o.After = 1500*time.Millisecond, time.Second
		o.Workers, o.parMode = 2, parAlways
		r := RunSRDS09(o)
		if r.Err != nil {
			t.Fatalf("crashes=%d: %v", k, r.Err)
		}
		if r.Report.Failed(false) || r.Report.Guaranteed == 0 {
			t.Fatalf("crashes=%d: %s", k, r.Text())
		}
		if k > 0 && r.Recovery > r.Bound+10*time.Millisecond {
			t.Errorf("crashes=%d: recovery %v > bound %v + a tick\n%s", k, r.Recovery, r.Bound, r.Text())
		}
		if k == 0 && (r.DrainTime < 0 || r.DrainTime > 3*r.DACKPeriod) {
			t.Errorf("queues drained in %v, want ≤ 3 DACK periods", r.DrainTime)
		}
	}
}

// The parallel engine refuses what it cannot do: a trace, the wire
// format, no link delay (it is the lookahead).
func TestParallelConfig(t *testing.T) {
	for _, f := range []func(*Config){
		func(c *Config) { c.Trace = &bytes.Buffer{} },
		func(c *Config) { c.Wire = true },
		func(c *Config) { c.LinkDelay, c.DialTimeout = 0, time.Second },
	} {
		c := DefaultConfig()
		c.NewNode, c.Workers = NewOverlayNode, 2
		f(&c)
		if _, err := New(c); err == nil {
			t.Errorf("New accepted %+v", c)
		}
	}
	c := DefaultConfig()
	c.NewNode, c.Workers = NewOverlayNode, 2
	if _, err := New(c); err != nil {
		t.Fatal(err)
	}
}

// panicky is a node that panics at its n-th tick.
type panicky struct {
	Node
	n int
}

func (p *panicky) Tick() {
	if p.n--; p.n == 0 {
		panic("boom")
	}
	p.Node.Tick()
}

// A panic in a partition's window, on a worker or on the main goroutine,
// ends the run with an error naming it, as in the serial engine, instead
// of killing the process or leaving the workers waiting.
func TestParallelPanicIsAnError(t *testing.T) {
	o := DefaultSRDSOptions()
	o.Brokers, o.Subs, o.Publishers = 20, 50, 2
	o.Warmup, o.After = 300*time.Millisecond, 300*time.Millisecond
	o.Workers, o.parMode = 2, parAlways
	// The tree and partitions RunSRDS09 makes (its random stream draws the
	// tree first).
	part := PartitionTree(RandomTree(rand.New(rand.NewPCG(uint64(o.Seed), 0x5d5)), o.Brokers, 4), 2)
	for p := 0; p < 2; p++ {
		var victim message.BrokerID
		for id, q := range part {
			if q == p && (victim == "" || id < victim) {
				victim = id
			}
		}
		o.Factory = func(c overlay.Config) (Node, error) {
			n, err := NewOverlayNode(c)
			if err != nil || c.ID != victim {
				return n, err
			}
			return &panicky{Node: n, n: 30}, nil
		}
		r := RunSRDS09(o)
		if r.Err == nil || !strings.Contains(r.Err.Error(), "boom") {
			t.Errorf("partition %d (%s panics): err %v, want the panic", p, victim, r.Err)
		}
	}
}
