package sim

import (
	"flag"
	"os"
	"runtime/debug"
	"testing"
	"time"
)

// BenchmarkSRDS09 runs the slides' setup without failures (a shorter
// stream) and reports the simulation speed as virtual seconds per wall
// second: the whole run (x_realtime: setup, publishing, drain; the
// checkers apart), the publishing phase and the setup alone. GOGC is 400
// as in deltapub sim srds09 (unless the GOGC variable is set). The full
// experiment: deltapub sim srds09.
func BenchmarkSRDS09(b *testing.B) {
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	for i := 0; i < b.N; i++ {
		o := DefaultSRDSOptions()
		o.Crashes = 0
		if s := *benchSubs; s > 0 {
			o.Subs = s
		}
		o.Warmup, o.After = 1500*time.Millisecond, time.Second
		o.Clock = time.Now
		r := RunSRDS09(o)
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		b.ReportMetric(ratio(r.Virtual, r.Wall), "x_realtime")
		b.ReportMetric(ratio(r.SteadyVirtual, r.SteadyWall), "x_realtime_publishing")
		b.ReportMetric(ratio(r.SetupVirtual, r.SetupWall), "x_realtime_setup")
	}
}

// benchSubs overrides the subscription count of BenchmarkSRDS09 (0: 2,600).
var benchSubs = flag.Int("benchsubs", 0, "subscriptions in BenchmarkSRDS09 (0: the slides' 2,600)")

// BenchmarkFuzzRun is one default-size fuzz run (seed 1017: 77 brokers).
func BenchmarkFuzzRun(b *testing.B) {
	for i := 0; i < b.N; i++ {
		FuzzRun(1017, DefaultFuzzOptions())
	}
}
