package sim

import (
	"flag"
	"runtime"
	"testing"
)

var fuzzRuns = flag.Int("fuzzruns", 200, "random runs of TestFuzzOverlay (0: skip; -short: a tenth)")

// The scenario files of testdata/ on the protocol core: each must keep its
// guarantees and produce exactly its expected outcome.
func TestScenarios(t *testing.T) { runScenarioFiles(t, "testdata", DefaultFactory) }

// TestFuzzOverlay runs seeded random runs on small trees with faults
// within δ; every one must pass. A failure prints the seed and the command
// that replays it. It runs the ideal fuzzer (FuzzOptions.Ideal), which
// the core passes; TestFuzzOverlayReal adds the draws of real processes.
func TestFuzzOverlay(t *testing.T) {
	o := FuzzOptions{BrokersMin: 4, BrokersMax: 10, DeltaMin: 1, DeltaMax: 3, Faults: -1, Quick: true, Ideal: true}
	fuzzOverlay(t, o, "--ideal", nil)
}

// knownRealFailures are the seeds of TestFuzzOverlayReal the core fails
// (issue 14: an unpaced join retry storms, restarted brokers that only
// know each other as joinpoints never rejoin). They are logged, not
// failed, until the core is fixed; one that passes is reported, to be
// removed from the list.
var knownRealFailures = map[int64]string{
	// The root B1 and its only child B2 crashed and restarted, each the
	// other's only joinpoint: JoinRequest/JoinReply at ~9,000/s between
	// them, neither rejoins.
	124: "root and child restarted, each the other's joinpoint: join storm",
	96:  "root and child restarted, each the other's joinpoint: join storm",
	105: "root and child restarted, each the other's joinpoint: join storm",
}

// TestFuzzOverlayReal is TestFuzzOverlay with the draws of what real
// processes do (dial failures, accept delays, stale links, stalls, rows
// from the root, restarts together, the testbed's joinpoints).
func TestFuzzOverlayReal(t *testing.T) {
	o := FuzzOptions{BrokersMin: 4, BrokersMax: 10, DeltaMin: 1, DeltaMax: 3, Faults: -1, Quick: true}
	fuzzOverlay(t, o, "", knownRealFailures)
}

func fuzzOverlay(t *testing.T, o FuzzOptions, flags string, known map[int64]string) {
	runs := *fuzzRuns
	if runs == 0 {
		t.Skip("enable with -fuzzruns N")
	}
	if testing.Short() {
		runs /= 10
	}
	fs := Fuzz(1, runs, o, runtime.GOMAXPROCS(0), func(r FuzzResult) {
		why, isKnown := known[r.Seed]
		switch {
		case r.Failed() && isKnown:
			t.Logf("seed %d fails as known (%s): %s", r.Seed, why, r.Summary())
		case r.Failed():
			t.Errorf("%s\nreplay: deltapub sim replay --seed %d --brokers 4-10 --delta 1-3 --quick %s\n%sdetails: %v", r.Summary(), r.Seed, flags, r.PlanText(), r.Report.Details)
		case isKnown:
			t.Logf("seed %d, a known failure (%s), passes now: remove it from the list", r.Seed, why)
		}
	})
	t.Log(fs.Line())
}
