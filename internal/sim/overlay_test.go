package sim

import (
	"flag"
	"runtime"
	"testing"
)

var fuzzRuns = flag.Int("fuzzruns", 200, "random runs of TestFuzzOverlay (0: skip; -short: a tenth)")

// The scenario files of testdata/ on the protocol core: each must keep its
// guarantees and produce exactly its expected outcome.
func TestScenarios(t *testing.T) { runScenarioFiles(t, "testdata", NewOverlayNode) }

// TestFuzzOverlay runs seeded random runs on small trees with faults
// within δ; every one must pass. A failure prints the seed and the command
// that replays it. It runs the ideal fuzzer (FuzzOptions.Ideal), which
// the core passes; TestFuzzOverlayReal adds the draws of real processes.
func TestFuzzOverlay(t *testing.T) {
	o := FuzzOptions{BrokersMin: 4, BrokersMax: 10, DeltaMin: 1, DeltaMax: 3, Faults: -1, Quick: true, Ideal: true}
	fuzzOverlay(t, o, "--ideal")
}

// TestFuzzOverlayReal is TestFuzzOverlay with the draws of what real
// processes do (dial failures, accept delays, stale links, stalls, rows
// from the root, restarts together, the testbed's joinpoints).
func TestFuzzOverlayReal(t *testing.T) {
	o := FuzzOptions{BrokersMin: 4, BrokersMax: 10, DeltaMin: 1, DeltaMax: 3, Faults: -1, Quick: true}
	fuzzOverlay(t, o, "")
}

func fuzzOverlay(t *testing.T, o FuzzOptions, flags string) {
	runs := *fuzzRuns
	if runs == 0 {
		t.Skip("enable with -fuzzruns N")
	}
	if testing.Short() {
		runs /= 10
	}
	fs := Fuzz(1, runs, o, runtime.GOMAXPROCS(0), func(r FuzzResult) {
		if r.Failed() {
			t.Errorf("%s\nreplay: deltapub sim replay --seed %d --brokers 4-10 --delta 1-3 --quick %s\n%sdetails: %v", r.Summary(), r.Seed, flags, r.PlanText(), r.Report.Details)
		}
	})
	t.Log(fs.Line())
}
