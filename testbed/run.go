package testbed

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/deltapub/deltapub/internal/sim"
)

// Backend runs a plan: it starts the brokers and the clients, applies the
// faults at their times, samples the brokers, and reports everything into
// the recorder. Run returns when the run is over (Spec.End()) or ctx is
// cancelled; in both cases every broker it started is gone when it returns.
type Backend interface {
	Run(ctx context.Context, p *Plan, rec *Recorder) error
}

// Modes lists the backends, in the order of the docs.
var Modes = []string{"process", "inproc", "sim"}

var (
	backendsMu sync.Mutex
	backends   = map[string]func(Options) Backend{}
)

// RegisterBackend makes a mode available; backends register from init.
func RegisterBackend(mode string, f func(Options) Backend) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	backends[mode] = f
}

// Options configure a run beyond the file.
type Options struct {
	// Binary is the deltapub executable used for broker processes (process
	// mode); empty = the spec's process.binary, else this executable.
	Binary string
	// Log receives backend diagnostics (broker logs go to files in Out).
	Log io.Writer
	// Out is the results directory (process mode keeps broker logs there).
	Out string
}

func init() {
	RegisterBackend("process", func(o Options) Backend { return processBackend{o} })
	RegisterBackend("inproc", func(o Options) Backend { return inprocBackend{o} })
	RegisterBackend("sim", func(Options) Backend { return simBackend{factory: sim.NewOverlayNode} })
}

// NewBackend returns the backend of a mode.
func NewBackend(mode string, o Options) (Backend, error) {
	backendsMu.Lock()
	f, ok := backends[mode]
	backendsMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("testbed: unknown mode %q (want %s)", mode, strings.Join(Modes, " | "))
	}
	return f(o), nil
}

// Run executes plan on the backend of mode, shows a live progress line on
// progress (nil: none), writes the results into out and returns the
// summary. An interrupted run (ctx cancelled) still writes what it has,
// with verdict FAIL and the reason.
func Run(ctx context.Context, p *Plan, mode, out string, o Options, progress io.Writer) (*Summary, error) {
	if o.Out == "" {
		o.Out = out
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: %v", err)
	}
	be, err := NewBackend(mode, o)
	if err != nil {
		return nil, err
	}
	if err := checkMode(p, mode); err != nil {
		return nil, err
	}
	rec := NewRecorder()
	started := time.Now()
	rec.startWall = started
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			showProgress(progress, p, rec, stop)
		}()
	}
	runErr := be.Run(ctx, p, rec)
	close(stop)
	wg.Wait()
	if ctx.Err() != nil && runErr == nil {
		runErr = ctx.Err()
	}
	if runErr != nil {
		rec.Note("run ended early: " + runErr.Error())
	}
	sum, err := WriteResults(out, p, rec, mode, started, time.Since(started))
	if err != nil {
		return nil, err
	}
	if runErr != nil && sum.Verdict.Verdict == "PASS" {
		sum.Verdict.Verdict = "FAIL"
		sum.Verdict.Reasons = append(sum.Verdict.Reasons, "run ended early: "+runErr.Error())
		_ = writeJSON(out+"/summary.json", sum)
	}
	return sum, runErr
}

// showProgress prints one line every half second: on a terminal it is
// rewritten in place, otherwise a new line every 5 s keeps logs short.
func showProgress(w io.Writer, p *Plan, rec *Recorder, stop <-chan struct{}) {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	period := 500 * time.Millisecond
	if !tty {
		period = 5 * time.Second
	}
	t := time.NewTicker(period)
	defer t.Stop()
	line := func() string {
		pr := rec.Progress()
		verdict := "ok so far"
		if pr.Anomalies > 0 {
			verdict = fmt.Sprintf("FAIL so far (%d duplicates/reorderings)", pr.Anomalies)
		}
		if ph := rec.Phase(); ph != "" {
			return fmt.Sprintf("setup: %s  (%.1fs)", ph, time.Since(rec.startWall).Seconds())
		}
		return fmt.Sprintf("t=%5.1fs/%.0fs  publications=%d  deliveries=%d  faults=%d/%d  %s",
			rec.Elapsed().Seconds(), p.Spec.End().Seconds(), pr.Publications, pr.Deliveries, pr.Faults, len(p.Faults), verdict)
	}
	for {
		select {
		case <-stop:
			if tty {
				fmt.Fprintf(w, "\r%s\x1b[K\n", line())
			} else {
				fmt.Fprintln(w, line())
			}
			return
		case <-t.C:
			if tty {
				fmt.Fprintf(w, "\r%s\x1b[K", line())
			} else {
				fmt.Fprintln(w, line())
			}
		}
	}
}

// SetElapsed lets a backend with its own clock (the simulator's virtual
// time) drive the elapsed time of the progress line.
func (r *Recorder) SetElapsed(d time.Duration) { r.virtual.Store(int64(d)); r.hasVirtual.Store(true) }

// SetPhase names what a backend is doing before t = 0 (building the
// overlay, connecting clients), for the progress line; "" once running.
func (r *Recorder) SetPhase(s string) {
	r.mu.Lock()
	r.phase = s
	r.mu.Unlock()
}

// Phase is the current setup phase, "" once the run is under way.
func (r *Recorder) Phase() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

// Elapsed is the run's time so far: virtual if the backend set it, else
// wall time since the start.
func (r *Recorder) Elapsed() time.Duration {
	if r.hasVirtual.Load() {
		return time.Duration(r.virtual.Load())
	}
	if r.startWall.IsZero() {
		return 0
	}
	return time.Since(r.startWall)
}

// FormatSummary is the human-readable end of a run: the verdict and its
// counts, the delays around each fault, and the files written.
func FormatSummary(sum *Summary, dir string) string {
	var b strings.Builder
	v := sum.Verdict
	fmt.Fprintf(&b, "%s (%s mode, %d brokers, %s, seed %d, %.1fs wall)\n", sum.Name, sum.Mode, sum.Brokers, faultModel(sum.Delta, sum.Replicas), sum.Seed, sum.WallSeconds)
	fmt.Fprintf(&b, "  publications %d (acked %d), subscriptions %d (confirmed %d)\n", v.Publications, v.Acked, v.Subscriptions, v.Confirmed)
	fmt.Fprintf(&b, "  deliveries %d, expected %d, lost %d, duplicates %d, reordered %d, spurious %d, extra %d\n",
		v.Deliveries, v.ExpectedDeliveries, v.Lost, v.Duplicates, v.Reordered, v.Spurious, v.Extra)
	if v.LostBeyondDelta > 0 {
		fmt.Fprintf(&b, "  beyond δ: %d lost (%d without a gap notice)\n", v.LostBeyondDelta, v.SilentBeyondDelta)
	}
	for _, f := range sum.Faults {
		for _, l := range f.Leaves {
			if l.Err != "" {
				fmt.Fprintf(&b, "  leave %s at %.1fs: %s\n", l.Broker, f.AppliedMs/1000, l.Err)
			} else {
				fmt.Fprintf(&b, "  leave %s at %.1fs: gone after %.0f ms\n", l.Broker, f.AppliedMs/1000, l.TookMs)
			}
		}
	}
	if v.LeftSubscriptions > 0 || v.RefusedPublications > 0 {
		fmt.Fprintf(&b, "  leaves: %d subscriptions ended by their edge's leave, %d publications refused by a leaving broker (not required)\n", v.LeftSubscriptions, v.RefusedPublications)
	}
	o := sum.DelayMs.Overall
	fmt.Fprintf(&b, "  delay ms: p50 %.2f  p99 %.2f  max %.2f  (n=%d)\n", o.P50, o.P99, o.Max, o.N)
	for _, f := range sum.DelayMs.Faults {
		fmt.Fprintf(&b, "  at %.1fs %s: p99 before %.2f, during %.2f, after %.2f (max during %.2f)\n",
			f.AtMs/1000, f.Fault, f.Before.P99, f.During.P99, f.After.P99, f.During.Max)
	}
	for _, l := range sum.LoadAfterRestart {
		b.WriteString(formatLoadAfterRestart(l))
		b.WriteByte('\n')
	}
	if sum.ControlMessages != nil {
		fmt.Fprintf(&b, "  control messages %d", *sum.ControlMessages)
		if sum.ControlPerDelivery != nil {
			fmt.Fprintf(&b, " (%.2f per delivery)", *sum.ControlPerDelivery)
		}
		b.WriteByte('\n')
	}
	if sum.MemoryTotalMB != nil {
		fmt.Fprintf(&b, "  broker memory (sum of peak RSS): %.1f MB\n", *sum.MemoryTotalMB)
	}
	for _, n := range sum.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	for _, r := range v.Reasons {
		fmt.Fprintf(&b, "  FAIL: %s\n", r)
	}
	for _, l := range v.LostExamples {
		fmt.Fprintf(&b, "  lost: %s\n", l)
	}
	if dir != "" {
		fmt.Fprintf(&b, "  results: %s/summary.json\n", dir)
		for _, p := range sum.Plots {
			if strings.HasPrefix(p, "delay.png") {
				fmt.Fprintf(&b, "  delay plot: %s/%s\n", dir, p)
			}
		}
	}
	fmt.Fprintf(&b, "verdict: %s\n", v.Verdict)
	return b.String()
}

// Compare sets two runs side by side.
func Compare(a, b *Summary, da, db string) string {
	var s strings.Builder
	row := func(name string, x, y any) { fmt.Fprintf(&s, "%-28s %-22v %-22v\n", name, x, y) }
	row("", da, db)
	row("name / mode", a.Name+" / "+a.Mode, b.Name+" / "+b.Mode)
	row("verdict", a.Verdict.Verdict, b.Verdict.Verdict)
	row("brokers, δ", fmt.Sprintf("%d, %d", a.Brokers, a.Delta), fmt.Sprintf("%d, %d", b.Brokers, b.Delta))
	row("publications", a.Publications, b.Publications)
	row("expected deliveries", a.ExpectedDeliveries, b.ExpectedDeliveries)
	row("deliveries", a.Deliveries, b.Deliveries)
	row("lost", a.Lost, b.Lost)
	row("duplicates", a.Duplicates, b.Duplicates)
	row("reordered", a.Reordered, b.Reordered)
	row("delay p50 ms", a.DelayMs.Overall.P50, b.DelayMs.Overall.P50)
	row("delay p99 ms", a.DelayMs.Overall.P99, b.DelayMs.Overall.P99)
	row("delay max ms", a.DelayMs.Overall.Max, b.DelayMs.Overall.Max)
	n := len(a.DelayMs.Faults)
	if len(b.DelayMs.Faults) > n {
		n = len(b.DelayMs.Faults)
	}
	for i := 0; i < n; i++ {
		f := func(x *Summary) string {
			if i >= len(x.DelayMs.Faults) {
				return "-"
			}
			p := x.DelayMs.Faults[i]
			return fmt.Sprintf("%.1f/%.1f/%.1f", p.Before.P99, p.During.P99, p.After.P99)
		}
		row(fmt.Sprintf("fault %d p99 before/dur/aft", i+1), f(a), f(b))
	}
	ctl := func(x *Summary) string {
		if x.ControlMessages == nil {
			return "n/a"
		}
		return fmt.Sprint(*x.ControlMessages)
	}
	row("control messages", ctl(a), ctl(b))
	mem := func(x *Summary) string {
		if x.MemoryTotalMB == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.1f MB", *x.MemoryTotalMB)
	}
	row("broker memory (sum)", mem(a), mem(b))
	cpu := func(x *Summary) string {
		names := make([]string, 0, len(x.BrokerStats))
		tot := 0.0
		for n, bs := range x.BrokerStats {
			names = append(names, n)
			tot += bs.CPUMeanPct
		}
		sort.Strings(names)
		if len(names) == 0 || !x.CPUMeasured {
			return "n/a"
		}
		return fmt.Sprintf("%.1f%%", tot)
	}
	row("broker CPU (sum of means)", cpu(a), cpu(b))
	row("wall seconds", a.WallSeconds, b.WallSeconds)
	return s.String()
}
