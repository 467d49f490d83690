package sim

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/deltapub/deltapub/internal/traffic"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// FuzzOptions are the ranges random runs are drawn from.
type FuzzOptions struct {
	BrokersMin, BrokersMax int
	DeltaMin, DeltaMax     int
	// Faults is the number of brokers that fail concurrently in every run;
	// negative means a random number from 0 to the run's δ.
	Faults  int
	Factory NodeFactory
	Trace   io.Writer
	// Quick shortens every phase (downtimes, gone_after, publishing,
	// settling) about twofold: for the fuzz in the default test run.
	Quick bool
	// NoWire passes messages by reference instead of through the wire
	// format (for nodes whose messages are not registered, like FloodNode).
	NoWire bool
	// NoLeaves turns off the graceful leaves that runs within δ may add
	// (one in four runs with fewer than δ faults; the node must implement
	// the core's Leave).
	NoLeaves bool
	// Ideal turns off the draws of what real processes do (the dial,
	// link and restart behaviours of the runtime, stalls, rows from the
	// root, restarts together, the testbed's joinpoints): the fuzzer as
	// it was before them, for the seeds found then.
	Ideal bool
	// NoDurable turns off the durable draws (publication logs, retention,
	// durable subscribers that disconnect and reconnect;
	// fuzzdur.go): for nodes without durable subscriptions (FloodNode),
	// or `sim fuzz --no-durable`.
	NoDurable bool
}

// DefaultFuzzOptions: trees of 10–100 brokers, δ from 1 to 3, up to δ
// concurrent faults.
func DefaultFuzzOptions() FuzzOptions {
	return FuzzOptions{BrokersMin: 10, BrokersMax: 100, DeltaMin: 1, DeltaMax: 3, Faults: -1}
}

// Validate checks the ranges.
func (o FuzzOptions) Validate() error {
	switch {
	case o.BrokersMin < 2 || o.BrokersMax < o.BrokersMin || o.BrokersMax > 5000:
		return fmt.Errorf("sim: fuzz: brokers %d-%d: want 2 ≤ MIN ≤ MAX ≤ 5000", o.BrokersMin, o.BrokersMax)
	case o.DeltaMin < 1 || o.DeltaMax < o.DeltaMin || o.DeltaMax > 16:
		return fmt.Errorf("sim: fuzz: delta %d-%d: want 1 ≤ MIN ≤ MAX ≤ 16", o.DeltaMin, o.DeltaMax)
	case o.Faults > 64:
		return fmt.Errorf("sim: fuzz: faults %d: at most 64", o.Faults)
	}
	return nil
}

// FuzzResult is the outcome of one random run.
type FuzzResult struct {
	Seed    int64
	Brokers int
	Delta   int
	Faults  int
	Beyond  bool // more than δ concurrent faults in a row: beyond-δ rules
	Plan    []string
	Report  Report
	Stats   Stats
	Err     error // the run could not complete (counts as failed)
}

// Failed reports whether the run broke a guarantee or could not run.
func (r FuzzResult) Failed() bool { return r.Err != nil || r.Report.Failed(r.Beyond) }

// Summary is one line describing the run's verdict.
func (r FuzzResult) Summary() string {
	rule := "within"
	if r.Beyond {
		rule = "beyond"
	}
	rep := r.Report
	s := fmt.Sprintf("seed=%d brokers=%d delta=%d faults=%d (%s δ) guaranteed=%d lost=%d silent_lost=%d duplicates=%d reordered=%d spurious=%d undrained=%d stuck=%d over_bound=%d storms=%d not_rejoined=%d",
		r.Seed, r.Brokers, r.Delta, r.Faults, rule, rep.Guaranteed, rep.Lost, rep.SilentLost, rep.Duplicates, rep.Reordered, rep.Spurious, rep.Undrained, rep.Stuck, rep.QueueOverBound, rep.Storms, rep.NotRejoined)
	if r.Err != nil {
		s += " error=" + r.Err.Error()
	}
	return s
}

// FuzzRun draws one random scenario from seed and runs it. The same seed
// and options always give the same run.
func FuzzRun(seed int64, o FuzzOptions) (res FuzzResult) {
	res.Seed = seed
	if err := o.Validate(); err != nil {
		res.Err = err
		return res
	}
	if o.Factory == nil {
		o.Factory = NewOverlayNode
	}
	defer func() {
		// A panic in the core is a failed run with its seed, not a crash
		// of the whole fuzzer.
		if p := recover(); p != nil {
			res.Err = fmt.Errorf("panic: %v", p)
		}
	}()
	pr := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	n := o.BrokersMin + pr.IntN(o.BrokersMax-o.BrokersMin+1)
	delta := o.DeltaMin + pr.IntN(o.DeltaMax-o.DeltaMin+1)
	k := o.Faults
	if k < 0 {
		k = pr.IntN(delta + 1)
	}
	res.Brokers, res.Delta, res.Faults, res.Beyond = n, delta, k, k > delta

	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.Core.Delta = delta
	cfg.NewNode = o.Factory
	cfg.Trace = o.Trace
	cfg.Wire = !o.NoWire
	cfg.LinkDelay = time.Duration(1+pr.IntN(5)) * time.Millisecond
	cfg.LinkJitter = time.Duration(pr.IntN(3)) * time.Millisecond
	cfg.Core.HeartbeatTicks = 2 + pr.IntN(3)
	cfg.Core.FailureTicks = 5 * cfg.Core.HeartbeatTicks
	cfg.Core.DACKTicks = 2 + pr.IntN(6)
	cfg.Core.GoneAfterTicks = 30 * cfg.Core.FailureTicks
	if o.Quick {
		cfg.Core.GoneAfterTicks = 12 * cfg.Core.FailureTicks
	}
	if pr.IntN(2) == 0 {
		cfg.LinkDownAfter = time.Duration(50+pr.IntN(450)) * time.Millisecond
	}
	failTimeout := time.Duration(cfg.Core.FailureTicks) * cfg.Tick
	// Durable subscribers (fuzzdur.go), from a stream of their own: the
	// rest of every seed's plan stays as it was.
	var dz *durFuzz
	if !o.NoDurable {
		dz = drawDurable(seed, &cfg)
	}
	// What real processes do (ARCHITECTURE.md, "The simulator and the
	// runtime must agree"), drawn from a stream of its own so that the
	// rest of a seed's plan stays as it was: dials fail after any part of
	// the runtime's dial timeout (runtime.Runtime.dialTimeout), a few fail
	// to live brokers, the acceptor of a link is told LinkUp after the
	// dialler; restarts, stale links, stalls (planFaults).
	var rr *rand.Rand // nil: Ideal
	if !o.Ideal {
		rr = rand.New(rand.NewPCG(uint64(seed), 0x4ea1))
	}
	if rr != nil && rr.IntN(3) == 0 {
		// Brokers on one host or a LAN (the testbed): a round trip well
		// under a millisecond, at which an unpaced retry loop runs at
		// thousands per second (at the milliseconds above it cannot
		// exceed the storm bound).
		cfg.LinkDelay = time.Duration(50+rr.IntN(450)) * time.Microsecond
		cfg.LinkJitter = time.Duration(rr.IntN(100)) * time.Microsecond
	}
	if rr != nil {
		cfg.DialTimeout = overlay.DialTimeout(failTimeout)
		cfg.DialFailDraw = true
		cfg.DialFailLive = [...]int{0, 5, 20}[rr.IntN(3)]
		// Handshakes slower than the dial timeout, drawn from a stream
		// of their own (the plan's other draws stay as they were).
		sr := rand.New(rand.NewPCG(uint64(seed), 0x5105))
		cfg.SlowHandshake = [...]int{0, 0, 10, 50}[sr.IntN(4)]
		cfg.DialPatience = overlay.DialPatience(cfg.DialTimeout, time.Duration(cfg.Core.GoneAfterTicks)*cfg.Tick)
		cfg.AcceptDelay = [...]time.Duration{0, cfg.LinkDelay, 4 * cfg.LinkDelay}[rr.IntN(3)]
		cfg.ReplacedDown = true
	}
	plan := func(format string, args ...any) { res.Plan = append(res.Plan, fmt.Sprintf(format, args...)) }
	if dz != nil {
		if cfg.Core.MemoryLog {
			plan("durable: logs in memory at the edges (durability memory), retention %d ticks, restarts lose them", cfg.Core.RetainTicks)
		} else {
			plan("durable: logs at the edges, retention %d ticks, restarts keep their data", cfg.Core.RetainTicks)
		}
	}
	plan("brokers=%d delta=%d faults=%d link=%v+%v heartbeat=%d failure=%d dack=%d gone=%d linkdown=%v",
		n, delta, k, cfg.LinkDelay, cfg.LinkJitter, cfg.Core.HeartbeatTicks, cfg.Core.FailureTicks, cfg.Core.DACKTicks, cfg.Core.GoneAfterTicks, cfg.LinkDownAfter)
	if rr != nil {
		plan("dial timeout=%v failing live=%d/1000 slow handshakes=%d/1000 accept delay<=%v; restarts resolve their joinpoints as the runtime", cfg.DialTimeout, cfg.DialFailLive, cfg.SlowHandshake, cfg.AcceptDelay)
	}

	s, err := New(cfg)
	if err != nil {
		res.Err = err
		return res
	}
	defer func() { res.Stats = s.Stats() }()
	tree := RandomTree(pr, n, 2+pr.IntN(3))
	// Where a restarted broker rejoins: the testbed's policy, or (Ideal)
	// its tree neighbours.
	rejoinVia := func(b message.BrokerID) []message.BrokerID {
		if rr == nil {
			return tree.Neighbours(b)
		}
		return tree.RestartJoinpoints(b, delta)
	}
	w := workload.NewSmall(pr)

	// Build the tree, sometimes crashing an already joined broker while a
	// later one joins (a fault during a join), restarting it after a while.
	joinCrashAt := -1
	if k > 0 && k <= delta && n >= 4 && pr.IntN(4) == 0 {
		joinCrashAt = 2 + pr.IntN(n-2)
	}
	var joinCrashed message.BrokerID
	// A join takes a few round trips; a slow handshake (SlowHandshake)
	// can hold one back by up to DialPatience.
	joinBound := 3 * time.Second
	if cfg.SlowHandshake > 0 {
		joinBound += cfg.DialPatience
	}
	for i, id := range tree.Order {
		if err := s.AddBroker(id); err != nil {
			res.Err = err
			return res
		}
		if i == 0 {
			err = s.Bootstrap(id)
		} else {
			err = s.Join(id, tree.Ancestors(id, delta+1)...)
		}
		if err != nil {
			res.Err = err
			return res
		}
		if i == joinCrashAt {
			// Crash the joinpoint, or a neighbour of it, a moment into the join.
			victim := tree.Parent[id]
			if nb := tree.Neighbours(victim); pr.IntN(2) == 0 && len(nb) > 0 && nb[0] != id && s.State(nb[0]) == "up" {
				victim = nb[0]
			}
			if victim != tree.Order[0] || pr.IntN(2) == 0 {
				joinCrashed = victim
				after := time.Duration(pr.IntN(4)) * cfg.LinkDelay
				plan("join-fault: crash %s %v into the join of %s, restart after %v", victim, after, id, 3*failTimeout)
				_ = s.RunFor(after)
				if err := s.Crash(victim); err != nil {
					res.Err = err
					return res
				}
				s.At(s.Now()+3*failTimeout, func() {
					_ = s.RestartWith(victim, RestartOptions{Joinpoints: s.existing(rejoinVia(victim)), StaleLink: -1, Resolve: rr != nil, Place: true, Log: dz != nil})
				})
			}
		}
		ok, err := s.RunUntilCond(joinBound, func() bool { return s.Joined(id) || s.State(id) == "crashed" })
		if err != nil {
			res.Err = err
			return res
		}
		if !ok {
			res.Err = fmt.Errorf("%s did not join within %v (virtual)", id, joinBound)
			return res
		}
	}
	if joinCrashed != "" {
		ok, err := s.RunUntilCond(joinBound+2*time.Second, func() bool { return s.Joined(joinCrashed) })
		if err != nil || !ok {
			res.Err = fmt.Errorf("%s did not rejoin after its crash during a join (%v)", joinCrashed, err)
			return res
		}
	}
	// A join can place a broker under another of its joinpoints than
	// planned (its first joinpoint answered too late): the faults and the
	// restarts' joinpoints follow the tree as it was built, as a testbed
	// user's would.
	for _, id := range tree.Order[1:] {
		if p := s.brokers[id].node.Parent(); p != "" && p != tree.Parent[id] {
			plan("tree: %s joined under %s instead of %s", id, p, tree.Parent[id])
			tree.Parent[id] = p
		}
	}

	// Clients.
	np, ns := 1+pr.IntN(4), 3+pr.IntN(10)
	var pubEdges, subEdges []message.BrokerID
	for i := 1; i <= ns; i++ {
		e := tree.Order[pr.IntN(n)]
		subEdges = append(subEdges, e)
		if err := s.AddSubscriber(fmt.Sprintf("S%d", i), e, w.Filter()); err != nil {
			res.Err = err
			return res
		}
	}
	if ok, err := s.RunUntilCond(joinBound+2*time.Second, s.AllConfirmed); err != nil || !ok {
		s.CheckLiveness()
		res.Report = s.Log().Check()
		res.Err = fmt.Errorf("subscriptions not confirmed within %v without faults (%v)", joinBound+2*time.Second, err)
		return res
	}
	for i := 1; i <= np; i++ {
		pubEdges = append(pubEdges, tree.Order[pr.IntN(n)])
	}

	// The storm rule's steady state is the brokers' control traffic before
	// the wave, once the overlay is built and the subscriptions confirmed
	// (a crash during a join is part of the build). At least two whole
	// windows of it: a broker without a steady state is held to the floor
	// alone, which a broker heartbeating to many links may reach.
	if rr != nil {
		if w := 2 * traffic.DefaultBound().Window; s.Now() < w {
			if err := s.RunUntil(w); err != nil {
				res.Err = err
				return res
			}
		}
	}
	s.SetSteadyUntil(s.Now())

	// The fault wave.
	start := s.Now()
	waveAt := start + time.Duration(300+pr.IntN(1200))*time.Millisecond
	maxDown := 2500 * time.Millisecond
	if o.Quick {
		maxDown = time.Second
	}
	faults := planFaults(pr, rr, tree, k, delta, pubEdges, subEdges, waveAt, failTimeout, maxDown, cfg.Core.GoneAfterTicks, cfg.Tick)
	// A graceful leave during the wave, in one run of four with room for
	// it within δ (a draining leaver counts toward δ). Drawn from its own
	// stream, so that the rest of every seed's plan stays as it was.
	var leaver message.BrokerID
	var leaveAt time.Duration
	if k < delta && !o.NoLeaves && n > 3 {
		lr := rand.New(rand.NewPCG(uint64(seed), 0x1ea7e))
		if lr.IntN(4) == 0 {
			leaver, leaveAt = planLeave(lr, tree, faults, waveAt)
		}
	}
	if leaver != "" {
		// A crashed neighbour of the leaver restarts through the
		// leaver's other neighbours too: the leaver is gone by then.
		for i := range faults {
			if slices.Contains(faults[i].rejoin, leaver) {
				for _, nb := range tree.Neighbours(leaver) {
					if nb != faults[i].b && !slices.Contains(faults[i].rejoin, nb) {
						faults[i].rejoin = append(faults[i].rejoin, nb)
					}
				}
			}
		}
	}
	lastHeal := waveAt
	for _, f := range faults {
		if f.until > lastHeal {
			lastHeal = f.until
		}
		switch f.kind {
		case "crash":
			stale := ""
			if f.stale >= 0 {
				stale = fmt.Sprintf(", stale links %v", f.stale)
			}
			plan("crash %s at %s, restart at %s via %v%s", f.b, fmtTime(f.at), fmtTime(f.until), f.rejoin, stale)
			f := f
			s.At(f.at, func() { _ = s.Crash(f.b) })
			s.At(f.until, func() {
				_ = s.RestartWith(f.b, RestartOptions{Joinpoints: s.existing(f.rejoin), StaleLink: f.stale, Resolve: rr != nil, Place: true, Log: dz != nil})
			})
		case "slow":
			plan("slow %s from %s: stalls %v", f.b, fmtTime(f.at), f.stalls)
			f := f
			at := f.at
			for _, d := range f.stalls {
				d := d
				s.At(at, func() { _ = s.Stall(f.b, d) }) // not if it is down or frozen by then
				at += d + failTimeout
			}
		case "freeze":
			plan("freeze %s at %s, resume at %s", f.b, fmtTime(f.at), fmtTime(f.until))
			f := f
			s.At(f.at, func() { _ = s.Freeze(f.b) })
			s.At(f.until, func() { _ = s.Resume(f.b) })
		case "cut":
			plan("cut %s-%s at %s, heal at %s", f.b, f.b2, fmtTime(f.at), fmtTime(f.until))
			f := f
			s.At(f.at, func() { _ = s.Cut(f.b, f.b2) })
			s.At(f.until, func() { _ = s.Heal(f.b, f.b2) })
		}
	}
	if leaver != "" {
		plan("leave %s at %s", leaver, fmtTime(leaveAt))
		s.At(leaveAt, func() { _ = s.Leave(leaver) })
		lastHeal = max(lastHeal, leaveAt)
	}
	// Publishers run until well after the last fault is healed, so that
	// recovery and bypass tear-down happen under traffic.
	until := lastHeal + time.Duration(500+pr.IntN(1000))*time.Millisecond
	if o.Quick {
		until = lastHeal + time.Duration(300+pr.IntN(400))*time.Millisecond
	}
	for i, e := range pubEdges {
		every := time.Duration(10+pr.IntN(60)) * time.Millisecond
		plan("publisher P%d at %s every %v until %s", i+1, e, every, fmtTime(until))
		if err := s.AddPublisher(fmt.Sprintf("P%d", i+1), e, every, until, func() []matching.Attr { return w.Publication().Attrs }); err != nil {
			res.Err = err
			return res
		}
	}
	for i, e := range subEdges {
		plan("subscriber S%d at %s [%s]", i+1, e, fmtFilter(s.Log().Subs[i].Filter))
	}
	// Subscription changes during the failures: unsubscribe some, and
	// subscribe anew (propagation while brokers are down).
	if pr.IntN(3) == 0 {
		name := fmt.Sprintf("S%d", 1+pr.IntN(ns))
		at := waveAt + time.Duration(pr.IntN(300))*time.Millisecond
		plan("unsubscribe %s at %s", name, fmtTime(at))
		s.At(at, func() { _ = s.Unsubscribe(name) })
	}
	if pr.IntN(3) == 0 {
		e := tree.Order[pr.IntN(n)]
		f := w.Filter()
		at := waveAt + time.Duration(pr.IntN(300))*time.Millisecond
		plan("subscribe S%d at %s [%s] at %s", ns+1, e, fmtFilter(f), fmtTime(at))
		s.At(at, func() {
			if s.State(e) != "crashed" && !s.Leaving(e) {
				_ = s.AddSubscriber(fmt.Sprintf("S%d", ns+1), e, f)
			}
		})
	}
	if dz != nil {
		if err := dz.start(s, tree, faults, waveAt, until, plan); err != nil {
			res.Err = err
			return res
		}
	}
	if err := s.RunUntil(until); err != nil {
		res.Err = err
		return res
	}
	if dz != nil {
		dz.reconnectAll(s, tree) // every durable subscriber back for the settle period
	}
	// Quiescence: publishing stopped, every fault healed; let DACKs purge.
	settle := 2*time.Second + 10*time.Duration(cfg.Core.DACKTicks)*cfg.Tick + 3*failTimeout
	if o.Quick {
		settle = time.Second + 10*time.Duration(cfg.Core.DACKTicks)*cfg.Tick + 3*failTimeout
	}
	s.StopPublishers()
	if err := s.RunFor(settle); err != nil {
		res.Err = err
		return res
	}
	s.CheckDrained()
	s.CheckLiveness()
	// The rejoin rule is judged only once its bound has passed for every
	// restart still waiting: run on until then (or until all rejoined).
	if !res.Beyond {
		if d := s.RejoinDeadline(); d > s.Now() {
			if _, err := s.RunUntilCond(d-s.Now(), s.AllRejoined); err != nil {
				res.Err = err
				return res
			}
		}
	}
	s.CheckTraffic(!res.Beyond)
	res.Report = s.Log().Check()
	return res
}

// PlanText is the run's plan, one line per item.
func (r FuzzResult) PlanText() string { return strings.Join(r.Plan, "\n") + "\n" }

// existing keeps the brokers that have been members of the overlay at some
// point (a restarted broker's former neighbours; a planned neighbour that
// never joined is no joinpoint).
func (s *Sim) existing(ids []message.BrokerID) []message.BrokerID {
	var out []message.BrokerID
	for _, id := range ids {
		if b, ok := s.brokers[id]; ok && b.everJoined {
			out = append(out, id)
		}
	}
	return out
}

// FuzzSummary aggregates many runs. Lost counts every loss of runs within
// δ and the silent losses of runs beyond δ; Undrained counts only runs
// within δ (a partition may legitimately hold publications).
type FuzzSummary struct {
	Runs, Failed, Lost, Duplicates, Reordered, Undrained int
	Storms                                               int // storms (broker, type) of all runs
	Errors                                               int // runs that could not complete
	BeyondRuns, BeyondFailed, BeyondGapCovered           int
	BeyondSilentLost                                     int
}

// Add accounts for one run.
func (fs *FuzzSummary) Add(r FuzzResult) {
	fs.Runs++
	if r.Failed() {
		fs.Failed++
	}
	if r.Err != nil {
		fs.Errors++
	}
	rep := r.Report
	fs.Duplicates += rep.Duplicates
	fs.Storms += rep.Storms
	fs.Reordered += rep.Reordered
	if r.Beyond {
		fs.BeyondRuns++
		if r.Failed() {
			fs.BeyondFailed++
		}
		fs.BeyondGapCovered += rep.GapCovered
		fs.BeyondSilentLost += rep.SilentLost
		fs.Lost += rep.SilentLost
		return
	}
	fs.Lost += rep.Lost
	fs.Undrained += rep.Undrained
}

// OK reports whether every count that must be zero is.
func (fs FuzzSummary) OK() bool {
	return fs.Failed+fs.Lost+fs.Duplicates+fs.Reordered+fs.Undrained+fs.Storms == 0
}

// Line is the final line of `deltapub sim fuzz`.
func (fs FuzzSummary) Line() string {
	return fmt.Sprintf("runs=%d failed=%d lost=%d duplicates=%d reordered=%d undrained=%d storms=%d",
		fs.Runs, fs.Failed, fs.Lost, fs.Duplicates, fs.Reordered, fs.Undrained, fs.Storms)
}

// Fuzz runs runs random scenarios with seeds first, first+1, ... on
// workers goroutines (each run is single-threaded and deterministic from
// its own seed) and calls onResult, from one goroutine, for every run as it
// finishes.
func Fuzz(first int64, runs int, o FuzzOptions, workers int, onResult func(FuzzResult)) FuzzSummary {
	return FuzzUntil(first, runs, o, workers, nil, onResult)
}

// FuzzUntil is Fuzz that stops starting new runs once stop returns true
// (a time budget); the summary counts the runs that completed.
func FuzzUntil(first int64, runs int, o FuzzOptions, workers int, stop func() bool, onResult func(FuzzResult)) FuzzSummary {
	if workers < 1 {
		workers = 1
	}
	seeds := make(chan int64)
	results := make(chan FuzzResult)
	for w := 0; w < workers; w++ {
		go func() {
			for sd := range seeds {
				o := o
				o.Trace = nil
				results <- FuzzRun(sd, o)
			}
		}()
	}
	started := make(chan int, 1)
	go func() {
		n := 0
		for ; n < runs && (stop == nil || !stop()); n++ {
			seeds <- first + int64(n)
		}
		close(seeds)
		started <- n
	}()
	var fs FuzzSummary
	total := -1
	for done := 0; total < 0 || done < total; {
		select {
		case r := <-results:
			done++
			fs.Add(r)
			if onResult != nil {
				onResult(r)
			}
		case total = <-started:
		}
	}
	return fs
}
