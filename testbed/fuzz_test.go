package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fuzzLine is the shape of a run's line of output.
var fuzzLine = regexp.MustCompile(`^seed=\d+ brokers=\d+ delta=\d topology=(balanced|random|chain|star) faults=\[[^]]*\] verdict=(PASS|FAIL) expected=\d+ deliveries=\d+ lost=\d+ duplicates=\d+ reordered=\d+ storms=\d+ not_rejoined=\d+ wall=[0-9.]+s`)

var fuzzTotals = regexp.MustCompile(`^runs=\d+ failed=\d+ lost=\d+ duplicates=\d+ reordered=\d+ storms=\d+$`)

// TestFuzzPlansStayWithinDelta draws many plans and checks what the
// fuzzer promises: every plan validates, at no time are more than δ
// brokers down (a cut counting as one), the anchors (the first
// publisher's and subscriber's edges) are never hit (a durable subscriber
// may come back at one), the same seed draws the same file, and durable
// subscribers come back at their restarted edge in some plans.
func TestFuzzPlansStayWithinDelta(t *testing.T) {
	o := DefaultFuzzOptions()
	o.Mode = "sim"
	kinds := map[string]int{}
	backAtRestarted := 0
	for seed := int64(1); seed <= 300; seed++ {
		fp, err := DrawFuzzPlan(seed, o)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := DrawFuzzPlan(seed, o)
		if again.TOML != fp.TOML {
			t.Fatalf("seed %d: two draws differ", seed)
		}
		p, err := Parse("f.toml", []byte(fp.TOML))
		if err != nil {
			t.Fatal(err)
		}
		tl := newTimeline(p, nil, nil)
		if m := tl.maxDown(0, p.Spec.End()); m > p.Spec.Overlay.Delta {
			t.Fatalf("seed %d: %d failures at once, δ = %d:\n%s", seed, m, p.Spec.Overlay.Delta, fp.TOML)
		}
		anchors := map[string]bool{p.Publishers[0].Broker: true, p.Subscribers[0].Broker: true}
		restarted := map[string]bool{}
		for _, f := range p.Faults {
			for _, a := range f.Actions {
				kinds[a.Kind]++
				restarted[a.Broker] = restarted[a.Broker] || a.Kind == ActRestart
				if a.Kind == ActReconnect && restarted[a.Broker] {
					backAtRestarted++
				}
				if a.Kind == ActDisconnect || a.Kind == ActReconnect {
					continue
				}
				if anchors[a.Broker] || anchors[a.Peer] {
					t.Fatalf("seed %d: %s hits an anchor:\n%s", seed, a, fp.TOML)
				}
			}
		}
	}
	// Every kind of fault is drawn.
	for _, k := range []string{ActCrash, ActRestart, ActFreeze, ActResume, ActCut, ActHeal, ActLeave, ActDisconnect, ActReconnect} {
		if kinds[k] == 0 {
			t.Errorf("no %s in 300 plans", k)
		}
	}
	if backAtRestarted == 0 {
		t.Errorf("no durable subscriber comes back at its restarted edge in 300 plans")
	}
	t.Logf("%d disconnects, %d reconnects (%d at a restarted edge) in 300 plans", kinds[ActDisconnect], kinds[ActReconnect], backAtRestarted)
	// The shortest runs draw valid plans too (no room for some episodes).
	o.RunTime = 3 * time.Second
	for seed := int64(1); seed <= 200; seed++ {
		if _, err := DrawFuzzPlan(seed, o); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFuzzSim runs two fuzz runs in sim mode: one line each in the
// documented format, the totals line, and the TOML each wrote replays to
// the same verdict and counts through Load and Run, as `deltapub testbed
// run DIR/run-SEED/testbed.toml --mode sim` does.
func TestFuzzSim(t *testing.T) {
	o := DefaultFuzzOptions()
	o.Mode, o.Out, o.Keep = "sim", t.TempDir(), true
	var results []FuzzResult
	sum, err := Fuzz(context.Background(), 11, 2, o, func(r FuzzResult) { results = append(results, r) })
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || sum.Runs != 2 {
		t.Fatalf("%d results, totals %+v", len(results), sum)
	}
	if !fuzzTotals.MatchString(sum.Line()) {
		t.Fatalf("totals line %q", sum.Line())
	}
	for _, r := range results {
		if !fuzzLine.MatchString(r.Line()) {
			t.Fatalf("line %q", r.Line())
		}
		if r.Summary == nil || r.Err != nil {
			t.Fatalf("seed %d not judged: %v", r.Plan.Seed, r.Err)
		}
		if r.Failed() {
			t.Errorf("seed %d failed in sim mode: %s", r.Plan.Seed, r.Line())
		}
		file := filepath.Join(o.Out, fmt.Sprintf("run-%d", r.Plan.Seed), "testbed.toml")
		p, err := Load(file)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Run(context.Background(), p, "sim", t.TempDir(), Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, b := r.Summary.Verdict, again.Verdict
		if a.Verdict != b.Verdict || a.ExpectedDeliveries != b.ExpectedDeliveries || a.Deliveries != b.Deliveries || a.Lost != b.Lost {
			t.Errorf("seed %d: replay of %s differs: %s %d/%d/%d, then %s %d/%d/%d", r.Plan.Seed, file,
				a.Verdict, a.ExpectedDeliveries, a.Deliveries, a.Lost, b.Verdict, b.ExpectedDeliveries, b.Deliveries, b.Lost)
		}
	}
	// Passing runs are deleted without Keep.
	o.Keep, o.Out = false, t.TempDir()
	if _, err := Fuzz(context.Background(), 11, 1, o, nil); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(o.Out); len(ents) != 0 {
		t.Errorf("a passing run's directory was kept: %v", ents)
	}
}

// TestFuzzProcess is what CI runs of the fuzzer: one short process-mode
// run to its end, and a second interrupted half-way (as by Ctrl-C). Both
// are judged, their TOML is written, and no broker outlives them (checked
// in needBinary's Cleanup).
func TestFuzzProcess(t *testing.T) {
	bin := needBinary(t)
	o := DefaultFuzzOptions()
	o.Mode, o.Out, o.Keep, o.Binary = "process", t.TempDir(), true, bin
	o.BrokersMin, o.BrokersMax, o.RunTime = 8, 10, 5*time.Second
	r := FuzzOne(context.Background(), 2, o)
	if r.Summary == nil || r.Err != nil || r.Timeout {
		t.Fatalf("run not judged: %v (timeout %v)", r.Err, r.Timeout)
	}
	if !fuzzLine.MatchString(r.Line()) {
		t.Fatalf("line %q", r.Line())
	}
	dir := filepath.Join(o.Out, "run-2")
	for _, f := range []string{"testbed.toml", "summary.json", "logs/B1.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if r.Failed() {
		t.Errorf("process run failed: %s (results kept in %s)", r.Line(), dir)
	}
	if n := killBrokersOf(bin); n > 0 {
		t.Fatalf("%d brokers still running after the run", n)
	}

	// Interrupted: cancelled once the brokers are up; the run is counted
	// failed, Fuzz reports the interruption, and nothing is left running.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		ctl := filepath.Join(o.Out, "run-3", "control.addr")
		for i := 0; i < 600; i++ { // at most 30 s
			if b, err := os.ReadFile(ctl); err == nil && len(b) > 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
	}()
	var got []FuzzResult
	sum, err := Fuzz(ctx, 3, 5, o, func(r FuzzResult) { got = append(got, r) })
	if err == nil || len(got) != 1 || sum.Runs != 1 || sum.Failed != 1 {
		t.Fatalf("interrupted campaign: err %v, %d results, totals %s", err, len(got), sum.Line())
	}
	if got[0].Summary == nil || !got[0].Interrupted || !strings.Contains(got[0].Line(), "reason: interrupted") {
		t.Fatalf("interrupted run: %s", got[0].Line())
	}
	if n := killBrokersOf(bin); n > 0 {
		t.Fatalf("%d brokers still running after the interrupted run", n)
	}
}
