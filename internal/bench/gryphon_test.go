package bench

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGryphonOptionsValidate(t *testing.T) {
	ok := DefaultGryphonOptions()
	ok.Binary = "deltapub"
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []struct {
		change func(*GryphonOptions)
		err    string
	}{
		{func(o *GryphonOptions) { o.Binary = "" }, "no deltapub binary"},
		{func(o *GryphonOptions) { o.Subscribers = 0 }, "subscribers 0 out of range"},
		{func(o *GryphonOptions) { o.Publishers = 17 }, "publishers 17 out of range"},
		{func(o *GryphonOptions) { o.AwayFor = o.AwayEvery }, "away-for 1m0s out of range [100ms, 59.999s]"},
		{func(o *GryphonOptions) { o.Outage = 0 }, "outage 0s out of range"},
		{func(o *GryphonOptions) { o.OutageRate, o.Outage = 100_000, 10*time.Minute }, "publications queued for the SHB during the outage (outage-rate × outage) 60000000 out of range"},
		{func(o *GryphonOptions) { o.Hops = 10 }, "hops 10 out of range"},
		{func(o *GryphonOptions) { o.LatencyCount, o.LatencyRate = 1_000_000, 1 }, "latency-count / latency-rate (seconds) 1000000 out of range [0, 600]"},
	} {
		o := ok
		c.change(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("Validate() = %v, want %q", err, c.err)
		}
	}
}

// TestGryphonQuick runs every figure at tiny sizes with broker processes
// of a deltapub built for the test: each must complete with every
// publication delivered exactly once and a non-zero rate (no timing is
// asserted: the machine may be busy).
func TestGryphonQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker processes")
	}
	bin := filepath.Join(t.TempDir(), "deltapub")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/deltapub/deltapub/cmd/deltapub").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o := QuickGryphonOptions()
	o.Binary, o.Progress = bin, t.Logf
	rep, err := Gryphon(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Failure(); err != nil {
		t.Fatal(err)
	}
	r := rep.Rate
	if r.Without.DeliveriesPerS <= 0 || r.With.DeliveriesPerS <= 0 || r.Fraction <= 0 {
		t.Errorf("figure 1: rates %v / %v, fraction %v", r.Without.DeliveriesPerS, r.With.DeliveriesPerS, r.Fraction)
	}
	if r.With.Reconnects == 0 {
		t.Errorf("figure 1 with disconnections: no subscriber reconnected")
	}
	if out := rep.Outage; out.CaughtUp != o.Subscribers || out.CaughtUpPubs <= 0 || out.Published <= 0 {
		t.Errorf("figure 2: %d of %d subscribers caught up, %d publications caught up of %d", out.CaughtUp, o.Subscribers, out.CaughtUpPubs, out.Published)
	}
	if len(rep.Latency) != 2 {
		t.Fatalf("figure 3: %d durabilities measured, want fsync and none", len(rep.Latency))
	}
	for _, l := range rep.Latency {
		if l.P50Ms <= 0 || l.P99Ms < l.P50Ms {
			t.Errorf("figure 3, %s: p50 %v ms, p99 %v ms", l.Durability, l.P50Ms, l.P99Ms)
		}
	}
	var text strings.Builder
	rep.WriteText(&text)
	for _, want := range []string{"1. delivery rate", "2. SHB outage", "3. latency over 2 hops", "4. filtering log", "--pfs"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
}

func TestGryphonPFSOptionsValidate(t *testing.T) {
	if err := DefaultGryphonPFSOptions().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []struct {
		change func(*GryphonPFSOptions)
		err    string
	}{
		{func(o *GryphonPFSOptions) { o.Matching = nil }, "no matching count"},
		{func(o *GryphonPFSOptions) { o.Matching = []int{1, 101} }, "matching 101 out of range [1, 100]"},
		{func(o *GryphonPFSOptions) { o.Batch = 0 }, "batch 0 out of range"},
		{func(o *GryphonPFSOptions) { o.Cell = time.Millisecond }, "cell 1ms out of range"},
		{func(o *GryphonPFSOptions) { o.Rounds = 0 }, "rounds 0 out of range"},
	} {
		o := DefaultGryphonPFSOptions()
		c.change(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("Validate() = %v, want %q", err, c.err)
		}
	}
}

// TestGryphonPFSQuick measures figure 4 for a moment: every row has both
// stores' rates (no timing is asserted: the machine may be busy).
func TestGryphonPFSQuick(t *testing.T) {
	o := QuickGryphonPFSOptions()
	o.Matching, o.Cell, o.Rounds, o.Dir = []int{1, 20}, 50*time.Millisecond, 2, t.TempDir()
	rep, err := GryphonPFS(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 4 {
		t.Fatalf("%d rows, want 2 matching counts × fsync and nosync", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.FilterLogPerS <= 0 || r.QueuesPerS <= 0 || r.Ratio <= 0 || len(r.FilterLogRounds) != 2 || r.RatioMin > r.RatioMax {
			t.Errorf("row %+v", r)
		}
	}
	var text strings.Builder
	rep.WriteText(&text)
	for _, want := range []string{"4. SHB filtering log", "20   nosync", "over 5x faster"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
}
