package sim

import (
	"flag"
	"testing"
	"time"
)

// BenchmarkSRDS09 runs the slides' setup without failures (a shorter
// stream) and reports the simulation speed as virtual seconds per wall
// second (x_realtime). The full experiment: deltapub sim srds09.
func BenchmarkSRDS09(b *testing.B) {
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
		b.ReportMetric(float64(r.Virtual)/float64(r.Wall), "x_realtime")
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
