package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// The testbed's fuzzer (`deltapub testbed fuzz`): from a seed it draws a
// whole experiment file -- a tree, publishers and subscribers, and a fault
// schedule within δ -- writes it as TOML (so that `deltapub testbed run
// FILE` replays it in any mode), runs it on a backend and judges it with
// the oracle and the storm and rejoin rules. Fault episodes follow one
// another (one is over before the next starts), each touching at most δ
// brokers, so the oracle requires every delivery whose edges stay up:
//
//   - a row of up to δ adjacent brokers (sometimes the root and a child)
//     crashed together or staggered (ms to a second apart), restarted
//     together or staggered; sometimes crashed again shortly after its
//     restart (a crash during a recovery), or with its neighbour in the
//     row crashed while it joins through it (a crash during a join, for
//     δ ≥ 2: the restarted broker counts as down until it has rejoined);
//   - a row frozen and resumed before gone_after (a false suspicion);
//   - a tree link cut and healed;
//   - a graceful leave.
//
// One publisher's and one subscriber's edge broker are never touched, so a
// run always checks something.

// FuzzOptions are the ranges runs are drawn from and how they run.
type FuzzOptions struct {
	Mode                   string
	BrokersMin, BrokersMax int
	DeltaMin, DeltaMax     int
	// RunTime is each plan's duration (publishing); 0: 10s.
	RunTime time.Duration
	// Out holds a directory per run (run-SEED: testbed.toml and the
	// results); passing runs are removed unless Keep.
	Out  string
	Keep bool
	// Binary is the deltapub executable for process mode ("" = this one).
	Binary string
	// Log receives backend diagnostics (nil: discarded).
	Log io.Writer
}

// DefaultFuzzOptions: 8-20 brokers, δ 1-3, 10 s runs.
func DefaultFuzzOptions() FuzzOptions {
	return FuzzOptions{Mode: "process", BrokersMin: 8, BrokersMax: 20, DeltaMin: 1, DeltaMax: 3, RunTime: 10 * time.Second, Out: "results/fuzz"}
}

// Validate checks the ranges.
func (o FuzzOptions) Validate() error {
	switch {
	case o.BrokersMin < 3 || o.BrokersMax < o.BrokersMin || o.BrokersMax > 200:
		return fmt.Errorf("testbed: fuzz: brokers %d-%d: want 3 ≤ MIN ≤ MAX ≤ 200", o.BrokersMin, o.BrokersMax)
	case o.DeltaMin < 1 || o.DeltaMax < o.DeltaMin || o.DeltaMax > 5:
		return fmt.Errorf("testbed: fuzz: delta %d-%d: want 1 ≤ MIN ≤ MAX ≤ 5", o.DeltaMin, o.DeltaMax)
	case o.RunTime != 0 && (o.RunTime < 3*time.Second || o.RunTime > 10*time.Minute):
		return fmt.Errorf("testbed: fuzz: run time %v: want 3s to 10m", o.RunTime)
	case !slices.Contains(Modes, o.Mode):
		return fmt.Errorf("testbed: fuzz: unknown mode %q (want %s)", o.Mode, strings.Join(Modes, " | "))
	}
	return nil
}

// The timers of every fuzzed plan, the same in every mode (the same file
// must run anywhere): slow enough for 20 broker processes on a loaded
// 2-core machine not to suspect each other falsely, gone_after short enough
// that the rejoin bound (2 × gone_after + 10 failure timeouts = 11 s) is
// judged in a short run.
const (
	fuzzHeartbeat = 100 * time.Millisecond
	fuzzFailure   = 500 * time.Millisecond
	fuzzGoneAfter = 3 * time.Second
	fuzzWarmup    = time.Second
	fuzzDrain     = 2 * time.Second
	fuzzSample    = 500 * time.Millisecond
	// fuzzFirstFault leaves the storm rule steady windows before the
	// first fault.
	fuzzFirstFault = 2 * time.Second
)

// fuzzAction is one scheduled action of a drawn plan.
type fuzzAction struct {
	at   time.Duration
	kind string
	b    string
	peer string // cut and heal
}

// FuzzPlan is one drawn run: its TOML and a one-line description of its
// faults.
type FuzzPlan struct {
	Seed    int64
	Brokers int
	Delta   int
	Kind    string
	TOML    string
	Faults  string // summary of the episodes
}

// DrawFuzzPlan draws the plan of seed (deterministic in the seed and the
// options' ranges and run time) and checks that it parses.
func DrawFuzzPlan(seed int64, o FuzzOptions) (*FuzzPlan, error) {
	runTime := o.RunTime
	if runTime == 0 {
		runTime = 10 * time.Second
	}
	r := rand.New(rand.NewPCG(uint64(seed), 0x7e57bed))
	n := o.BrokersMin + r.IntN(o.BrokersMax-o.BrokersMin+1)
	delta := o.DeltaMin + r.IntN(o.DeltaMax-o.DeltaMin+1)
	kinds := []string{"balanced", "random", "chain", "star"}
	kind := kinds[r.IntN(len(kinds))]
	fanout := 0
	switch kind {
	case "balanced":
		fanout = 2 + r.IntN(3)
	case "random":
		fanout = r.IntN(5)
	}
	var b strings.Builder
	name := fmt.Sprintf("fuzz-%d", seed)
	fmt.Fprintf(&b, "# Drawn by `deltapub testbed fuzz --seed %d` (brokers %d-%d, delta %d-%d, run time %v).\n", seed, o.BrokersMin, o.BrokersMax, o.DeltaMin, o.DeltaMax, runTime)
	fmt.Fprintf(&b, "name = %q\nseed = %d\nduration = %q\nwarmup = %q\ndrain = %q\n\n", name, seed, runTime.String(), fuzzWarmup.String(), fuzzDrain.String())
	dz := drawFuzzDurable(seed) // fuzz_durable.go
	fmt.Fprintf(&b, "[overlay]\ndelta = %d\nheartbeat = %q\nfailure_timeout = %q\ngone_after = %q\n", delta, fuzzHeartbeat.String(), fuzzFailure.String(), fuzzGoneAfter.String())
	if dz != nil {
		b.WriteString(dz.overlay())
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "[topology]\nkind = %q\nbrokers = %d\n", kind, n)
	if fanout > 0 {
		fmt.Fprintf(&b, "fanout = %d\n", fanout)
	}
	fmt.Fprintf(&b, "\n[metrics]\nsample = %q\n", fuzzSample.String())
	// The tree, to place clients and faults on: parse the file so far
	// with a placeholder client pair.
	base := b.String()
	probe, err := Parse(name+".toml", []byte(base+"\n[[publishers]]\nbrokers = [\"B1\"]\nrate = 1\nattrs = { class = \"'X'\" }\n\n[[subscribers]]\nbrokers = [\"B1\"]\nfilter = \"[class,eq,'X']\"\n"))
	if err != nil {
		return nil, fmt.Errorf("testbed: fuzz: seed %d: %v", seed, err)
	}
	topo := probe.Topo
	names := topo.Names
	pick := func() string { return names[r.IntN(len(names))] }
	// Clients. The anchors (the first publisher's and subscriber's edges)
	// are never hit by a fault.
	nPub := 1 + r.IntN(3)
	pubAt := make([]string, nPub)
	for i := range pubAt {
		pubAt[i] = pick()
	}
	leaves := topo.Leaves()
	nSub := 3 + r.IntN(6)
	subAt := make([]string, nSub)
	for i := range subAt {
		if r.IntN(2) == 0 && len(leaves) > 0 {
			subAt[i] = leaves[r.IntN(len(leaves))]
		} else {
			subAt[i] = pick()
		}
	}
	rate := 20 + r.IntN(31)
	b.WriteString("\n")
	for i, at := range pubAt {
		fmt.Fprintf(&b, "[[publishers]]  # P%d\nbrokers = [%q]\nrate = %d\n", i+1, at, rate)
		b.WriteString("attrs = { class = \"'STOCK'\", symbol = \"choice(AAPL,MSFT,IBM,ORCL)\", price = \"uniform(0,100)\", n = \"seq()\" }\npayload = 64\n\n")
	}
	// Filters matching a fair share: one symbol in four, or about half
	// of the prices.
	for i, at := range subAt {
		filter := "[class,eq,'STOCK'],[symbol,eq,{choice(AAPL,MSFT,IBM,ORCL)}]"
		if r.IntN(2) == 0 {
			filter = "[class,eq,'STOCK'],[price,<,{uniform(30,70)}]"
		}
		fmt.Fprintf(&b, "[[subscribers]]  # S%d\nbrokers = [%q]\nfilter = %q\n\n", i+1, at, filter)
	}
	acts, desc := drawFaults(r, topo, delta, runTime, map[string]bool{pubAt[0]: true, subAt[0]: true})
	// One [[faults]] entry per time.
	for i := 0; i < len(acts); {
		j := i
		byKind := map[string][]string{}
		var order []string
		for ; j < len(acts) && acts[j].at == acts[i].at; j++ {
			a := acts[j]
			if _, ok := byKind[a.kind]; !ok {
				order = append(order, a.kind)
			}
			if a.kind == ActCut || a.kind == ActHeal {
				byKind[a.kind] = append(byKind[a.kind], fmt.Sprintf("[%q, %q]", a.b, a.peer))
			} else {
				byKind[a.kind] = append(byKind[a.kind], fmt.Sprintf("%q", a.b))
			}
		}
		fmt.Fprintf(&b, "[[faults]]\nat = %q\n", fmtMs(acts[i].at))
		for _, k := range order {
			fmt.Fprintf(&b, "%s = [%s]\n", k, strings.Join(byKind[k], ", "))
		}
		b.WriteString("\n")
		i = j
	}
	if dz != nil {
		if d := dz.subscribers(&b, nSub+1, names, acts, subAt[0], runTime-500*time.Millisecond); d != "" {
			desc += "; " + d
		}
	}
	src := b.String()
	if _, err := Parse(name+".toml", []byte(src)); err != nil {
		return nil, fmt.Errorf("testbed: fuzz: seed %d drew a plan that does not validate (a fuzzer bug): %v", seed, err)
	}
	return &FuzzPlan{Seed: seed, Brokers: n, Delta: delta, Kind: kind, TOML: src, Faults: desc}, nil
}

// fmtMs writes a duration as whole milliseconds ("2350ms"): exact, and
// what the plan parses.
func fmtMs(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// drawFaults draws fault episodes one after another from fuzzFirstFault
// until the end of publishing. Each episode touches at most δ brokers
// (a cut counts as one) and is over (restarted, resumed, healed) before
// the next begins; anchors are never touched.
func drawFaults(r *rand.Rand, t0 *Topology, delta int, runTime time.Duration, anchor map[string]bool) ([]fuzzAction, string) {
	t := t0.clone()
	var acts []fuzzAction
	var desc []string
	left := map[string]bool{}
	at := fuzzFirstFault + time.Duration(r.IntN(500))*time.Millisecond
	// The last action must come before the end of publishing (the plan
	// refuses faults after it), with time to see the recovery.
	last := runTime - 500*time.Millisecond
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond }
	free := func(b string) bool { return !anchor[b] && !left[b] }
	// row draws up to k adjacent brokers, none an anchor: from the root
	// one time in four (the root and a child), else from anywhere.
	row := func(k int) []string {
		var cands []string
		for _, b := range t.Names {
			if t.Has(b) && free(b) {
				cands = append(cands, b)
			}
		}
		if len(cands) == 0 {
			return nil
		}
		start := cands[r.IntN(len(cands))]
		if root := rootOf(t); free(root) && r.IntN(4) == 0 {
			start = root
		}
		out := []string{start}
		in := map[string]bool{start: true}
		for guard := 0; len(out) < k && guard < 100; guard++ {
			var nb []string
			for _, x := range out {
				for _, y := range t.Neighbours(x) {
					if !in[y] && free(y) {
						nb = append(nb, y)
					}
				}
			}
			if len(nb) == 0 {
				break
			}
			y := nb[r.IntN(len(nb))]
			in[y] = true
			out = append(out, y)
		}
		return out
	}
	for guard := 0; guard < 20 && at < last; guard++ {
		var ep []fuzzAction
		var d string
		switch x := r.IntN(100); {
		case x < 55: // crash a row, restart it
			rw := row(1 + r.IntN(delta))
			if len(rw) == 0 {
				break
			}
			stagger := r.IntN(2) == 0
			ct := at
			for _, b := range rw {
				ep = append(ep, fuzzAction{at: ct, kind: ActCrash, b: b})
				if stagger {
					ct += ms(5, 1000)
				}
			}
			d = "crash " + strings.Join(rw, "+")
			if stagger && len(rw) > 1 {
				d += " staggered"
			}
			rt := ct + ms(300, 2000)
			restartStagger := r.IntN(2) == 0
			order := slices.Clone(rw)
			r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			restartAt := map[string]time.Duration{}
			for _, b := range order {
				ep = append(ep, fuzzAction{at: rt, kind: ActRestart, b: b})
				restartAt[b] = rt
				if restartStagger {
					rt += ms(5, 1500)
				}
			}
			switch {
			case len(rw) == 1:
				d += ", restart"
			case restartStagger:
				d += ", restart staggered"
			default:
				d += ", restart together"
			}
			switch y := r.IntN(4); {
			case y == 0: // a second crash shortly after a restart: during its recovery
				b := order[r.IntN(len(order))]
				// Within δ still: b is one of the row, down again.
				c := restartAt[b] + ms(20, 600)
				ep = append(ep, fuzzAction{at: c, kind: ActCrash, b: b}, fuzzAction{at: c + ms(200, 1500), kind: ActRestart, b: b})
				d += ", " + b + " crashed again during its recovery"
			case y == 1 && len(rw) == 1 && delta >= 2:
				// A crash of the restarted broker's joinpoint while it
				// joins: its parent (or a child, for the root), if free.
				// Two adjacent brokers are then down, the restarted one
				// until it has rejoined (its peers still suspect it), so
				// only for δ ≥ 2.
				b := rw[0]
				jp := t.Parent[b]
				if jp == "" && len(t.Children[b]) > 0 {
					jp = t.Children[b][0]
				}
				if jp != "" && free(jp) {
					c := restartAt[b] + ms(1, 50)
					ep = append(ep, fuzzAction{at: c, kind: ActCrash, b: jp}, fuzzAction{at: c + ms(300, 1500), kind: ActRestart, b: jp})
					d += ", " + jp + " crashed during " + b + "'s join"
				}
			}
		case x < 72: // freeze a row: a false suspicion, resumed before gone_after
			rw := row(1 + r.IntN(delta))
			if len(rw) == 0 {
				break
			}
			for _, b := range rw {
				ep = append(ep, fuzzAction{at: at, kind: ActFreeze, b: b})
			}
			rs := at + fuzzFailure/2 + ms(0, int((fuzzGoneAfter/2)/time.Millisecond))
			for _, b := range rw {
				ep = append(ep, fuzzAction{at: rs, kind: ActResume, b: b})
			}
			d = "freeze " + strings.Join(rw, "+")
		case x < 88: // cut a tree link, heal it before gone_after/2
			rw := row(2)
			if len(rw) < 2 {
				break
			}
			ep = append(ep, fuzzAction{at: at, kind: ActCut, b: rw[0], peer: rw[1]},
				fuzzAction{at: at + ms(100, int((fuzzGoneAfter/2)/time.Millisecond)-100), kind: ActHeal, b: rw[0], peer: rw[1]})
			d = "cut " + rw[0] + "-" + rw[1]
		default: // a graceful leave (never the last brokers)
			if len(t.Names)-len(left) <= 3 {
				break
			}
			rw := row(1)
			if len(rw) == 0 {
				break
			}
			ep = append(ep, fuzzAction{at: at, kind: ActLeave, b: rw[0]})
			d = "leave " + rw[0]
		}
		if len(ep) == 0 {
			continue
		}
		end := ep[0].at
		for _, a := range ep {
			end = max(end, a.at)
		}
		if end >= last {
			break // does not fit before the end of publishing
		}
		if ep[0].kind == ActLeave {
			// Gone for good; the tree is repaired around it (the plan
			// does the same), later rows are drawn in the repaired tree.
			left[ep[0].b] = true
			t.detach(ep[0].b)
		}
		acts = append(acts, ep...)
		desc = append(desc, d)
		// The next episode after this one's recovery.
		at = end + 4*fuzzFailure + ms(0, 1000)
	}
	sort.SliceStable(acts, func(i, j int) bool { return acts[i].at < acts[j].at })
	if len(desc) == 0 {
		return acts, "none"
	}
	return acts, strings.Join(desc, "; ")
}

// rootOf is the root of t (the broker without a parent).
func rootOf(t *Topology) string {
	for _, b := range t.Names {
		if p, ok := t.Parent[b]; ok && p == "" {
			return b
		}
	}
	return ""
}

// FuzzResult is one fuzz run.
type FuzzResult struct {
	Plan    *FuzzPlan
	Summary *Summary // nil when the run could not start
	Err     error
	Timeout bool
	// Interrupted: the campaign was stopped (SIGINT, SIGTERM) during it.
	Interrupted bool
	Wall        time.Duration
	Dir         string
}

// Failed reports whether the run failed (a FAIL verdict, a timeout, or a
// run that could not start).
func (r FuzzResult) Failed() bool {
	return r.Err != nil || r.Timeout || r.Interrupted || r.Summary == nil || r.Summary.Verdict.Verdict != "PASS"
}

// Line is the run's line of the fuzzer's output.
func (r FuzzResult) Line() string {
	p := r.Plan
	verdict := "PASS"
	if r.Failed() {
		verdict = "FAIL"
	}
	s := fmt.Sprintf("seed=%d brokers=%d delta=%d topology=%s faults=[%s] verdict=%s", p.Seed, p.Brokers, p.Delta, p.Kind, p.Faults, verdict)
	if sum := r.Summary; sum != nil {
		v := sum.Verdict
		s += fmt.Sprintf(" expected=%d deliveries=%d lost=%d duplicates=%d reordered=%d storms=%d not_rejoined=%d", v.ExpectedDeliveries, v.Deliveries, v.Lost, v.Duplicates, v.Reordered, len(v.Storms), len(v.NotRejoined))
	}
	s += fmt.Sprintf(" wall=%.1fs", r.Wall.Seconds())
	var why []string
	switch {
	case r.Timeout:
		why = append(why, "timeout")
	case r.Interrupted:
		why = append(why, "interrupted")
	case r.Err != nil && r.Summary == nil:
		why = append(why, r.Err.Error())
	}
	if r.Summary != nil && r.Failed() && !r.Timeout && !r.Interrupted {
		why = append(why, r.Summary.Verdict.Reasons...)
	}
	if len(why) > 0 {
		const maxWhy = 3 // the rest is in the run's summary.json
		if len(why) > maxWhy {
			why = append(why[:maxWhy], fmt.Sprintf("%d more", len(why)-maxWhy))
		}
		s += " reason: " + strings.Join(why, "; ")
	}
	if r.Failed() && r.Dir != "" {
		s += " results: " + r.Dir
	}
	return s
}

// fuzzBound is how long one run may take in wall time: the plan's end,
// the longest the end may be extended (a drain still receiving, a
// restarted broker not yet rejoined), and the setup (a second a broker on
// a loaded machine, the subscriptions), plus a margin. In sim mode the
// same bound holds (virtual time runs much faster).
func fuzzBound(p *Plan) time.Duration {
	return p.Spec.End() + maxDrainExtension + rejoinBound(p).After + rejoinSlack +
		time.Duration(len(p.Topo.Names))*time.Second + 30*time.Second
}

// fuzzStopGrace is how long a run is given to stop after its bound (its
// backend stops every broker on the way out).
const fuzzStopGrace = 30 * time.Second

// errFuzzTimeout ends a run at its bound.
var errFuzzTimeout = errors.New("timeout")

// FuzzOne draws, writes, runs and judges the run of seed.
func FuzzOne(ctx context.Context, seed int64, o FuzzOptions) (res FuzzResult) {
	t0 := time.Now()
	defer func() { res.Wall = time.Since(t0) }()
	fp, err := DrawFuzzPlan(seed, o)
	if err != nil {
		return FuzzResult{Plan: &FuzzPlan{Seed: seed}, Err: err}
	}
	res = FuzzResult{Plan: fp, Dir: filepath.Join(o.Out, fmt.Sprintf("run-%d", seed))}
	if err := os.MkdirAll(res.Dir, 0o755); err != nil {
		res.Err = err
		return res
	}
	file := filepath.Join(res.Dir, "testbed.toml")
	if err := os.WriteFile(file, []byte(fp.TOML), 0o644); err != nil {
		res.Err = err
		return res
	}
	// Replayed from the file, as `deltapub testbed run FILE` would.
	plan, err := Load(file)
	if err != nil {
		res.Err = err
		return res
	}
	rctx, cancel := context.WithTimeoutCause(ctx, fuzzBound(plan), errFuzzTimeout)
	defer cancel()
	type done struct {
		sum *Summary
		err error
	}
	ch := make(chan done, 1)
	go func() {
		sum, err := Run(rctx, plan, o.Mode, res.Dir, Options{Binary: o.Binary, Log: o.Log}, nil)
		ch <- done{sum, err}
	}()
	var d done
	select {
	case d = <-ch:
	case <-rctx.Done():
		// The backend stops on the cancellation; wait for it (bounded).
		select {
		case d = <-ch:
		case <-time.After(fuzzStopGrace):
			d.err = fmt.Errorf("the run did not stop within %v of its bound", fuzzStopGrace)
		}
	}
	res.Summary, res.Err = d.sum, d.err
	switch {
	case ctx.Err() != nil:
		res.Interrupted = true
	case errors.Is(context.Cause(rctx), errFuzzTimeout):
		res.Timeout = true
	}
	if !res.Failed() && !o.Keep {
		if err := os.RemoveAll(res.Dir); err != nil {
			res.Err = err
		}
		res.Dir = ""
	}
	return res
}

// FuzzSummary totals a campaign.
type FuzzSummary struct {
	Runs, Failed, Lost, Duplicates, Reordered, Storms int
}

// Add counts one run.
func (s *FuzzSummary) Add(r FuzzResult) {
	s.Runs++
	if r.Failed() {
		s.Failed++
	}
	if r.Summary != nil {
		v := r.Summary.Verdict
		s.Lost += v.Lost
		s.Duplicates += v.Duplicates
		s.Reordered += v.Reordered
		s.Storms += len(v.Storms)
	}
}

// Line is the campaign's last line.
func (s FuzzSummary) Line() string {
	return fmt.Sprintf("runs=%d failed=%d lost=%d duplicates=%d reordered=%d storms=%d", s.Runs, s.Failed, s.Lost, s.Duplicates, s.Reordered, s.Storms)
}

// Fuzz runs seeds first, first+1, ... (runs of them) one after another,
// calling onResult after each, until done or ctx ends (the run under way
// is then stopped, its brokers with it, and counted). It returns the
// totals.
func Fuzz(ctx context.Context, first int64, runs int, o FuzzOptions, onResult func(FuzzResult)) (FuzzSummary, error) {
	var s FuzzSummary
	if err := o.Validate(); err != nil {
		return s, err
	}
	for i := 0; i < runs && ctx.Err() == nil; i++ {
		r := FuzzOne(ctx, first+int64(i), o)
		s.Add(r)
		if onResult != nil {
			onResult(r)
		}
	}
	return s, ctx.Err()
}
