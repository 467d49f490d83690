package sim

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
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

// The work no simulator can skip in the slides' setup, measured on the
// routing table alone (no messages, heartbeats, DACKs or simulator): every
// one of the 83 brokers inserts the 2,600 subscriptions (213,200 SubFloods
// in the setup, which takes 1.66 s of virtual time), and every publication
// hop matches the publication against a 2,600-entry table (131,353 Pub
// messages in the 8 s of publishing: 16,400 per virtual second). The
// reported ceilings are the simulation speeds this work alone would allow
// (x real time): the setup and the publishing phase cannot run faster than
// that whatever the rest costs.
const (
	srdsSetupVirtual   = 1660 * time.Millisecond
	srdsPubHopsPerSec  = 16400
	srdsFloorFromCount = 12 // distinct from-pointers in a table (the brokers within δ+1 hops)
)

// srdsEntries draws n entries from r, their filters from w (drawing from r).
func srdsEntries(r *rand.Rand, w *workload.Small, n int) []routing.Entry {
	es := make([]routing.Entry, n)
	for i := range es {
		from := r.IntN(srdsFloorFromCount)
		es[i] = routing.Entry{Sub: message.SubID{Edge: message.BrokerID(fmt.Sprint("B", r.IntN(83))), Epoch: 1, N: uint64(i)},
			Filter: w.Filter(), From: message.BrokerID(fmt.Sprint("F", from)),
			Dir: message.BrokerID(fmt.Sprint("N", from%3))} // a from-pointer lies in one direction
	}
	return es
}

func srdsTable(es []routing.Entry) (*routing.Table, error) {
	t := routing.New(matching.NewIndex())
	for _, e := range es {
		if _, err := t.Insert(e); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// BenchmarkSRDS09FloorSetup: one op is one broker's table filled with the
// 2,600 subscriptions.
func BenchmarkSRDS09FloorSetup(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	es := srdsEntries(r, srdsWorkload(r, 26), 2600)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := srdsTable(es); err != nil {
			b.Fatal(err)
		}
	}
	perTable := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(ratio(srdsSetupVirtual, 83*perTable), "max_x_setup")
}

// BenchmarkSRDS09FloorPublishing: one op is one publication hop's
// Recipients on a 2,600-entry table.
func BenchmarkSRDS09FloorPublishing(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	w := srdsWorkload(r, 26)
	t, err := srdsTable(srdsEntries(r, w, 2600))
	if err != nil {
		b.Fatal(err)
	}
	pubs := make([]matching.Publication, 1024)
	for i := range pubs {
		pubs[i] = w.Publication()
	}
	var dst []message.BrokerID
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		dst = t.Recipients(&pubs[i%len(pubs)], "N0", dst[:0], func(*routing.Entry) {})
	}
	perHop := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(ratio(time.Second, srdsPubHopsPerSec*perHop), "max_x_publishing")
}

// BenchmarkSRDS09Setup runs the slides' setup alone (a 10 ms stream) and
// reports, besides the setup's wall time, the CPU time (user and system)
// of the thread that ran it (the benchmark locks its goroutine to its
// thread; the collector's background workers run elsewhere): steadier
// than wall time on a shared machine. Linux only (RUSAGE_THREAD). GOGC is
// 400 as in deltapub sim srds09 (unless the GOGC variable is set).
func BenchmarkSRDS09Setup(b *testing.B) {
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rusageThread = 1 // RUSAGE_THREAD
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(rusageThread, &ru); err != nil {
			b.Skip("no RUSAGE_THREAD:", err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var used, wall time.Duration
	for i := 0; i < b.N; i++ {
		o := DefaultSRDSOptions()
		o.Crashes = 0
		o.Warmup, o.After = 10*time.Millisecond, 10*time.Millisecond
		o.Clock = time.Now
		c0 := cpu()
		r := RunSRDS09(o)
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		used += cpu() - c0
		wall += r.SetupWall
	}
	b.ReportMetric(float64(used.Milliseconds())/float64(b.N), "thread_cpu_ms")
	b.ReportMetric(float64(wall.Milliseconds())/float64(b.N), "setup_wall_ms")
}
