package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deltapub/deltapub/internal/sim"
)

const simFuzzAbout = `Runs --runs random scenarios (random tree, δ, filters, clients, faults placed
adversarially), run i from seed --seed + i, --workers at once, and checks every
guarantee; prints one line per failing run (with the replay command), then
  runs=N failed=F lost=L duplicates=D reordered=R undrained=U storms=S
and exits 0 only if all are 0 (a storm: a broker's control traffic far above
its steady state; a run within δ also fails when a restarted broker does not
rejoin within the bound).
`

const simReplayAbout = `Replays one fuzz run from its --seed (pass the same --brokers, --delta,
--faults, --quick, --no-leaves, --ideal and --node as the fuzz run: its
failing line prints them) and prints its plan, report and verdict.
`

const simRunAbout = `Runs a scenario file (internal/sim/testdata/*.txt) and prints its outcome,
and whether it matches the outcome expected in the file.
`

// parseRange reads "MIN-MAX" or "N".
func parseRange(name, v string) (int, int, error) {
	lo, hi, found := strings.Cut(v, "-")
	a, err1 := strconv.Atoi(lo)
	b := a
	var err2 error
	if found {
		b, err2 = strconv.Atoi(hi)
	}
	if err1 != nil || err2 != nil || a > b {
		return 0, 0, fmt.Errorf("--%s %q: want MIN-MAX or N (e.g. 10-100)", name, v)
	}
	return a, b, nil
}

type fuzzFlags struct {
	brokers, delta, node string
	faults               int
	quick, noLeaves      bool
	durable, noDurable   bool
	ideal                bool
}

func (f *fuzzFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.brokers, "brokers", "10-100", "broker count per run: MIN-MAX or N")
	fs.StringVar(&f.delta, "delta", "1-3", "δ per run: MIN-MAX or N")
	fs.StringVar(&f.node, "node", "overlay", "protocol under test: overlay (the core) or flood (the simulator's no-fault-tolerance reference)")
	fs.BoolVar(&f.quick, "quick", false, "shorter runs (downtimes, gone_after, settling), as the fuzz in go test")
	fs.IntVar(&f.faults, "faults", -1, "concurrent faults per run; -1: random from 0 to the run's δ; above δ: judged by the beyond-δ rules")
	fs.BoolVar(&f.noDurable, "no-durable", false, "never draw durable subscribers (by default half of the runs log at the edges and have durable subscribers that disconnect and reconnect elsewhere)")
	fs.BoolVar(&f.durable, "durable", false, "draw durable subscribers (the default; kept for older replay commands, --no-durable wins)")
	fs.BoolVar(&f.noLeaves, "no-leaves", false, "never add a graceful leave (by default one run in four with room within δ has one)")
	fs.BoolVar(&f.ideal, "ideal", false, "no draws of what real processes do (dial failures, accept delays, stale links, stalls, restarts together, the testbed's joinpoints): the fuzzer before them, to replay seeds found then")
}

func (f *fuzzFlags) options() (sim.FuzzOptions, error) {
	o := sim.DefaultFuzzOptions()
	var err error
	if o.BrokersMin, o.BrokersMax, err = parseRange("brokers", f.brokers); err != nil {
		return o, err
	}
	if o.DeltaMin, o.DeltaMax, err = parseRange("delta", f.delta); err != nil {
		return o, err
	}
	o.Faults = f.faults
	o.Quick = f.quick
	o.Ideal = f.ideal
	if o.Factory, err = nodeFactory(f.node); err != nil {
		return o, err
	}
	o.NoWire = f.node == "flood" // its messages are not in the wire registry
	o.NoLeaves = f.noLeaves || f.node == "flood"
	o.NoDurable = f.noDurable || f.node == "flood"
	return o, o.Validate()
}

func (f *fuzzFlags) replayFlags() string {
	s := fmt.Sprintf("--brokers %s --delta %s", f.brokers, f.delta)
	if f.faults >= 0 {
		s += fmt.Sprintf(" --faults %d", f.faults)
	}
	if f.quick {
		s += " --quick"
	}
	if f.noLeaves {
		s += " --no-leaves"
	}
	if f.noDurable {
		s += " --no-durable"
	}
	if f.ideal {
		s += " --ideal"
	}
	if f.node != "overlay" {
		s += " --node " + f.node
	}
	return s
}

func simFuzzCmd(fs *flag.FlagSet) func([]string) int {
	runs := fs.Int("runs", 100, "number of random runs")
	seed := fs.Int64("seed", 0, "seed of the first run (run i uses seed+i); 0: pick one and print it")
	workers := fs.Int("workers", goruntime.GOMAXPROCS(0), "parallel runs (each run stays deterministic from its seed)")
	maxTime := fs.Duration("max-time", 0, "stop starting runs after this wall time and report the runs completed (0: no limit)")
	var ff fuzzFlags
	ff.register(fs)
	return func([]string) int {
		o, err := ff.options()
		if err == nil && (*runs < 1 || *runs > 10_000_000) {
			err = fmt.Errorf("--runs %d: want 1..10000000", *runs)
		}
		if err == nil && *workers < 1 {
			err = fmt.Errorf("--workers %d: want ≥ 1", *workers)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sim fuzz:", err)
			return 2
		}
		if *seed == 0 {
			*seed = time.Now().UnixNano()%1_000_000_000 + 1
		}
		fmt.Printf("seed=%d runs=%d brokers=%s delta=%s faults=%d workers=%d\n", *seed, *runs, ff.brokers, ff.delta, ff.faults, *workers)
		// Runs allocate many short-lived objects; trading memory (a few MB
		// per run) for less GC work speeds large fuzz campaigns up.
		debug.SetGCPercent(400)
		start := time.Now()
		lastProgress := start
		done := 0
		var mu sync.Mutex
		var stop func() bool
		if *maxTime > 0 {
			stop = func() bool { return time.Since(start) >= *maxTime }
		}
		sum := sim.FuzzUntil(*seed, *runs, o, *workers, stop, func(r sim.FuzzResult) {
			mu.Lock()
			defer mu.Unlock()
			done++
			if r.Failed() {
				first := ""
				if len(r.Report.Details) > 0 {
					first = " first: " + r.Report.Details[0]
				}
				fmt.Printf("FAIL %s%s | replay: deltapub sim replay --seed %d %s\n", r.Summary(), first, r.Seed, ff.replayFlags())
			}
			if now := time.Now(); now.Sub(lastProgress) >= 5*time.Second {
				lastProgress = now
				fmt.Fprintf(os.Stderr, "fuzz: %d/%d runs in %v\n", done, *runs, now.Sub(start).Round(time.Second))
			}
		})
		wall := time.Since(start)
		if sum.Runs < *runs {
			fmt.Printf("stopped by --max-time %v after %d of %d runs\n", *maxTime, sum.Runs, *runs)
		}
		if sum.BeyondRuns > 0 {
			fmt.Printf("beyond δ (reported apart; only duplicates, reordering and silent loss fail): runs=%d failed=%d gap_covered=%d silent_lost=%d\n",
				sum.BeyondRuns, sum.BeyondFailed, sum.BeyondGapCovered, sum.BeyondSilentLost)
		}
		fmt.Fprintf(os.Stderr, "fuzz: %d runs in %v (%d workers)\n", sum.Runs, wall.Round(time.Millisecond), *workers)
		fmt.Println(sum.Line())
		if !sum.OK() {
			return 1
		}
		return 0
	}
}

func simReplayCmd(fs *flag.FlagSet) func([]string) int {
	seed := fs.Int64("seed", 0, "the seed of the run to replay (required)")
	trace := fs.Bool("trace", false, "print every message, fault, delivery and notice")
	var ff fuzzFlags
	ff.register(fs)
	return func([]string) int {
		o, err := ff.options()
		if err == nil && *seed == 0 {
			err = errors.New("--seed is required")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sim replay:", err)
			return 2
		}
		if *trace {
			o.Trace = os.Stdout
		}
		r := sim.FuzzRun(*seed, o)
		fmt.Print("plan:\n" + indent(r.PlanText()))
		printReport(os.Stdout, r.Report)
		fmt.Println(r.Summary())
		if r.Failed() {
			fmt.Println("verdict: FAIL")
			return 1
		}
		fmt.Println("verdict: PASS")
		return 0
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

func printReport(w io.Writer, r sim.Report) {
	fmt.Fprintf(w, "published=%d guaranteed=%d delivered=%d lost=%d gap_covered=%d silent_lost=%d duplicates=%d reordered=%d spurious=%d undrained=%d stuck=%d over_bound=%d storms=%d not_rejoined=%d\n",
		r.Published, r.Guaranteed, r.Delivered, r.Lost, r.GapCovered, r.SilentLost, r.Duplicates, r.Reordered, r.Spurious, r.Undrained, r.Stuck, r.QueueOverBound, r.Storms, r.NotRejoined)
	for _, d := range r.Details {
		fmt.Fprintf(w, "  %s\n", d)
	}
}

func simRunCmd(fs *flag.FlagSet) func([]string) int {
	trace := fs.Bool("trace", false, "print every message, fault, delivery and notice before the outcome")
	return func(args []string) int {
		file := args[0]
		text, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sim run:", err)
			return 2
		}
		sc, err := sim.ParseScenario(file, string(text))
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sim run:", err)
			return 2
		}
		var tw io.Writer
		if *trace {
			tw = os.Stdout
		}
		res, err := sim.RunScenario(sc, sim.NewOverlayNode, tw)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sim run:", err)
			return 2
		}
		fmt.Print(res.Details)
		switch {
		case sc.Expected == "":
		case sc.Expected != res.Outcome:
			fmt.Printf("(differs from the expected outcome in the file; expected:)\n%s(got:)\n%s", sc.Expected, res.Outcome)
		default:
			fmt.Println("(matches the expected outcome in the file)")
		}
		if res.Report.Failed(res.Beyond) {
			return 1
		}
		return 0
	}
}
