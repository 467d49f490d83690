package sim

import (
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
	"github.com/deltapub/deltapub/message"
)

// SRDSOptions describe the slides' experiment (SRDS'09, PROTOCOL §7): 83
// brokers, δ = 3, 2,600 subscriptions, 26 publishers at 10 publications/s,
// and 0–3 simultaneous crashes of adjacent brokers R1..Rk in the middle of
// the overlay.
type SRDSOptions struct {
	Seed       int64
	Crashes    int
	Brokers    int
	Delta      int
	Subs       int
	Publishers int
	Rate       int           // publications per second per publisher
	Warmup     time.Duration // publishing before the crash
	After      time.Duration // publishing after the crash
	Bucket     time.Duration // timeline resolution
	Factory    NodeFactory
	Trace      io.Writer
	// Clock, when set, measures the wall time of the simulation (without
	// the checkers); the simulator itself never reads a clock.
	Clock func() time.Time
	// CPU, when set, returns the process CPU time used so far: it
	// measures the steady state (publishing) apart from the setup.
	CPU func() time.Duration
	// onLog, when set, sees the run's log after the checkers (tests).
	onLog func(*Log)
}

// DefaultSRDSOptions is the slides' setup.
func DefaultSRDSOptions() SRDSOptions {
	return SRDSOptions{Seed: 2009, Crashes: 1, Brokers: 83, Delta: 3, Subs: 2600, Publishers: 26, Rate: 10,
		Warmup: 3 * time.Second, After: 5 * time.Second, Bucket: 50 * time.Millisecond}
}

// TimelinePoint is the delivery delay of the publications published in one
// bucket of time (relative to the crash).
type TimelinePoint struct {
	At         time.Duration // bucket start, relative to the crash
	Deliveries int
	Mean, Max  time.Duration
}

// SRDSResult holds the figures of one experiment run.
type SRDSResult struct {
	Opts           SRDSOptions
	Crashed        []message.BrokerID
	LinkDelay      time.Duration
	FailureTimeout time.Duration
	DACKPeriod     time.Duration
	Timeline       []TimelinePoint
	PreMean        time.Duration // mean delay of deliveries before the crash
	PreMax         time.Duration // max delay of deliveries before the crash
	PeakMax        time.Duration // max delay of deliveries after the crash
	// Recovery is the time from the crash after which every publication is
	// delivered with a delay no higher than before the crash (+10%); -1
	// when nothing was delivered before the crash to set that level.
	Recovery time.Duration
	Bound    time.Duration // failure timeout + 2 × link delay

	Published       int
	Deliveries      int
	DataMsgs        int64            // Pub messages during publishing
	ControlMsgs     int64            // every other broker message during publishing
	ControlByType   map[string]int64 // during publishing
	ControlPerDeliv float64
	ControlPerPub   float64
	DrainTime       time.Duration // from the end of publishing until every queue is empty (-1: not within 5 s)
	MaxQueue        int
	Virtual         time.Duration
	Wall            time.Duration // simulation only (needs Opts.Clock)
	CheckWall       time.Duration // the checkers (needs Opts.Clock)
	// SteadyVirtual, SteadyWall and SteadyCPU measure the publishing phase
	// alone (after the tree and the 2,600 subscriptions are set up).
	SteadyVirtual time.Duration
	SteadyWall    time.Duration
	SteadyCPU     time.Duration
	// SetupVirtual and SetupWall measure building the tree and confirming
	// every subscription (before publishing).
	SetupVirtual time.Duration
	SetupWall    time.Duration
	Report       Report
	Err          error
}

// RunSRDS09 runs the experiment.
func RunSRDS09(o SRDSOptions) (res SRDSResult) {
	res.Opts = o
	if o.Factory == nil {
		o.Factory = NewOverlayNode
	}
	if o.Crashes < 0 || o.Crashes > o.Delta {
		res.Err = fmt.Errorf("sim: srds09: crashes %d: want 0..δ (%d)", o.Crashes, o.Delta)
		return res
	}
	if o.Brokers < 2*o.Delta+3 || o.Subs < 1 || o.Publishers < 1 || o.Rate < 1 || o.Bucket <= 0 || o.Warmup <= 0 || o.After <= 0 {
		res.Err = fmt.Errorf("sim: srds09: brokers must be ≥ 2δ+3, subs, publishers, rate, bucket, warmup and after > 0")
		return res
	}
	defer func() {
		if p := recover(); p != nil {
			res.Err = fmt.Errorf("panic: %v", p)
		}
	}()
	// A batch run allocating ~1 GB over its life with a small live heap:
	// collecting at 4× the live heap instead of 2× halves the collector's
	// work (~6 % of the run) for a heap of at most a few hundred MB. The
	// setting is the process's; it is restored when the run returns.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	var t0 time.Time
	if o.Clock != nil {
		t0 = o.Clock()
	}
	pr := rand.New(rand.NewPCG(uint64(o.Seed), 0x5d5))
	cfg := DefaultConfig()
	cfg.Seed, cfg.Core.Delta, cfg.NewNode, cfg.Trace = o.Seed, o.Delta, o.Factory, o.Trace
	// A cluster on Gigabit Ethernet: ~1 ms per hop including processing;
	// failure detection as the core's defaults (50 ms heartbeats, 200 ms).
	cfg.LinkDelay, cfg.LinkJitter = time.Millisecond, 200*time.Microsecond
	cfg.Core.HeartbeatTicks, cfg.Core.FailureTicks, cfg.Core.DACKTicks, cfg.Core.GoneAfterTicks = 5, 20, 5, 400
	cfg.SampleEvery = 100 * time.Millisecond
	res.LinkDelay = cfg.LinkDelay
	res.FailureTimeout = time.Duration(cfg.Core.FailureTicks) * cfg.Tick
	res.DACKPeriod = time.Duration(cfg.Core.DACKTicks) * cfg.Tick
	res.Bound = res.FailureTimeout + 2*cfg.LinkDelay

	tree := RandomTree(pr, o.Brokers, 4)
	s, err := New(cfg)
	if err != nil {
		res.Err = err
		return res
	}
	// R1..Rk: adjacent brokers in the middle of the longest path.
	var long []message.BrokerID
	for _, a := range tree.Order {
		if len(tree.Neighbours(a)) != 1 {
			continue
		}
		for _, b := range tree.Order {
			if p := tree.Path(a, b); len(p) > len(long) {
				long = p
			}
		}
	}
	mid := len(long)/2 - o.Crashes/2
	res.Crashed = append(res.Crashed, long[mid:mid+o.Crashes]...)
	isR := map[message.BrokerID]bool{}
	for _, r := range res.Crashed {
		isR[r] = true
	}
	var edges []message.BrokerID
	for _, b := range tree.Order {
		if !isR[b] {
			edges = append(edges, b)
		}
	}
	if err := s.BuildTree(tree, 3*time.Second); err != nil {
		res.Err = err
		return res
	}
	// One class per publisher (a stock symbol each, say); a subscription
	// picks a class and narrows it on x and y: ~40 matches per publication.
	w := srdsWorkload(pr, o.Publishers)
	for i := 1; i <= o.Subs; i++ {
		if err := s.AddSubscriber(fmt.Sprintf("S%d", i), edges[pr.IntN(len(edges))], w.Filter()); err != nil {
			res.Err = err
			return res
		}
	}
	if ok, err := s.RunUntilCond(10*time.Second, s.AllConfirmed); err != nil || !ok {
		res.Err = fmt.Errorf("sim: srds09: subscriptions not confirmed within 10 s (%v)", err)
		return res
	}
	start := s.Now()
	crashAt := start + o.Warmup
	end := crashAt + o.After
	every := time.Second / time.Duration(o.Rate)
	for i := 1; i <= o.Publishers; i++ {
		class := w.Classes[(i-1)%len(w.Classes)]
		name, edge := fmt.Sprintf("P%d", i), edges[pr.IntN(len(edges))]
		// Publishers start at random phases: not all in the same instant.
		s.At(start+time.Duration(pr.Int64N(int64(every))), func() {
			if err := s.AddPublisher(name, edge, every, end,
				func() []matching.Attr { a := w.Publication().Attrs; a[0].Value = matching.Str(class); return a }); err != nil && res.Err == nil {
				res.Err = err
			}
		})
	}
	// The delivery log grows by ~50 per publication: reserved up front
	// (bounded) instead of grown by doubling, which copied it ~twice.
	s.log.reserveDeliveries(min(1<<20, 64*o.Publishers*o.Rate*int((o.Warmup+o.After)/time.Second+1)))
	before := copyCounts(s.Stats().Messages)
	var w0 time.Time
	var c0 time.Duration
	if o.Clock != nil {
		w0 = o.Clock()
		res.SetupWall = w0.Sub(t0)
	}
	res.SetupVirtual = start
	if o.CPU != nil {
		c0 = o.CPU()
	}
	if err := s.RunUntil(crashAt); err != nil {
		res.Err = err
		return res
	}
	if res.Err != nil {
		return res
	}
	for _, r := range res.Crashed {
		_ = s.Crash(r)
	}
	if err := s.RunUntil(end); err != nil {
		res.Err = err
		return res
	}
	res.SteadyVirtual = end - start
	if o.Clock != nil {
		res.SteadyWall = o.Clock().Sub(w0)
	}
	if o.CPU != nil {
		res.SteadyCPU = o.CPU() - c0
	}
	after := s.Stats().Messages
	res.ControlByType = map[string]int64{}
	for k, v := range after {
		d := v - before[k]
		if k == "Pub" {
			res.DataMsgs += d
			continue
		}
		res.ControlByType[k] = d
		res.ControlMsgs += d
	}
	s.StopPublishers()
	// Drain: step one tick at a time until every live queue is empty.
	res.DrainTime = -1
	stop := s.Now()
	ok, err := s.RunUntilCond(5*time.Second, s.drained)
	if err != nil {
		res.Err = err
		return res
	}
	if ok {
		res.DrainTime = s.Now() - stop
	}
	if err := s.RunFor(time.Second); err != nil {
		res.Err = err
		return res
	}
	var t1 time.Time
	if o.Clock != nil {
		t1 = o.Clock()
		res.Wall = t1.Sub(t0)
	}
	s.CheckDrained()
	s.CheckLiveness()
	res.Report = s.Log().Check()
	if o.Clock != nil {
		res.CheckWall = o.Clock().Sub(t1)
	}
	if o.onLog != nil {
		o.onLog(s.Log())
	}
	res.Virtual = s.Now()
	res.MaxQueue = s.Stats().MaxQueueSeen
	res.Deliveries = s.Log().NumDeliveries()
	res.Published = res.Report.Published
	if res.Deliveries > 0 {
		res.ControlPerDeliv = float64(res.ControlMsgs) / float64(res.Deliveries)
	}
	if res.Published > 0 {
		res.ControlPerPub = float64(res.ControlMsgs) / float64(res.Published)
	}
	res.timeline(s.Log(), start, crashAt, o.Bucket)
	return res
}

func copyCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (res *SRDSResult) timeline(l *Log, start, crashAt time.Duration, bucket time.Duration) {
	ds := l.Delays()
	var preSum time.Duration
	var preN int
	pts := map[time.Duration]*TimelinePoint{}
	// Skip the first second of publishing (joins of publishers settle),
	// or the first half of a shorter warmup.
	settle := min(time.Second, (crashAt-start)/2)
	for _, d := range ds {
		if d.Published < start+settle {
			continue
		}
		// Before the crash: delivered before it (a publication published
		// just before the crash but delayed by it belongs to the crash).
		if d.Published+d.Delay < crashAt {
			preSum += d.Delay
			preN++
			if d.Delay > res.PreMax {
				res.PreMax = d.Delay
			}
		} else if d.Delay > res.PeakMax {
			res.PeakMax = d.Delay
		}
		rel := d.Published - crashAt
		b := rel - ((rel%bucket)+bucket)%bucket
		p := pts[b]
		if p == nil {
			p = &TimelinePoint{At: b}
			pts[b] = p
		}
		p.Deliveries++
		p.Mean += d.Delay // sum for now
		if d.Delay > p.Max {
			p.Max = d.Delay
		}
	}
	if preN > 0 {
		res.PreMean = preSum / time.Duration(preN)
	}
	for _, p := range pts {
		p.Mean /= time.Duration(p.Deliveries)
		res.Timeline = append(res.Timeline, *p)
	}
	sort.Slice(res.Timeline, func(i, j int) bool { return res.Timeline[i].At < res.Timeline[j].At })
	// Recovery: after the last publication whose delay exceeds the
	// pre-crash level (+10%), every later one is back to normal.
	level := res.PreMax + res.PreMax/10
	var last time.Duration = -1
	for _, d := range ds {
		if d.Published >= crashAt && d.Delay > level {
			last = d.Published - crashAt
		}
	}
	switch {
	case preN == 0:
		res.Recovery = -1 // no level to return to
	case last < 0:
		res.Recovery = 0
	default:
		res.Recovery = last + 1 // the first instant after it
	}
}

// Text is the human-readable report of the figures.
func (res SRDSResult) Text() string {
	var b strings.Builder
	o := res.Opts
	fmt.Fprintf(&b, "srds09: brokers=%d delta=%d subscriptions=%d publishers=%d rate=%d/s crashes=%d %v seed=%d\n",
		o.Brokers, o.Delta, o.Subs, o.Publishers, o.Rate, o.Crashes, res.Crashed, o.Seed)
	if res.Err != nil {
		fmt.Fprintf(&b, "error: %v\n", res.Err)
		return b.String()
	}
	fmt.Fprintf(&b, "link delay=%v failure timeout=%v dack period=%v\n", res.LinkDelay, res.FailureTimeout, res.DACKPeriod)
	fmt.Fprintf(&b, "published=%d deliveries=%d guaranteed=%d lost=%d duplicates=%d reordered=%d undrained=%d stuck=%d\n",
		res.Published, res.Deliveries, res.Report.Guaranteed, res.Report.Lost, res.Report.Duplicates, res.Report.Reordered, res.Report.Undrained, res.Report.Stuck)
	fmt.Fprintf(&b, "delay before crash: mean=%v max=%v; after crash: max=%v\n", res.PreMean.Round(time.Microsecond), res.PreMax.Round(time.Microsecond), res.PeakMax.Round(time.Microsecond))
	if o.Crashes > 0 && res.Recovery < 0 {
		fmt.Fprintf(&b, "recovery: not measured (no publication delivered before the crash after the warmup's settling time: use a longer --warmup)\n")
	} else if o.Crashes > 0 {
		verdict := "within"
		if res.Recovery > res.Bound {
			verdict = "EXCEEDS"
		}
		fmt.Fprintf(&b, "recovery: delay back to the pre-crash level %v after the crash; bound (failure timeout + 2 × link delay) %v: %s\n",
			res.Recovery.Round(time.Microsecond), res.Bound, verdict)
	}
	types := make([]string, 0, len(res.ControlByType))
	for k := range res.ControlByType {
		types = append(types, k)
	}
	sort.Strings(types)
	parts := make([]string, len(types))
	for i, k := range types {
		parts[i] = fmt.Sprintf("%s=%d", k, res.ControlByType[k])
	}
	fmt.Fprintf(&b, "messages while publishing: data(Pub)=%d control=%d [%s]\n", res.DataMsgs, res.ControlMsgs, strings.Join(parts, " "))
	fmt.Fprintf(&b, "control messages per delivered publication=%.3f per published publication=%.2f\n", res.ControlPerDeliv, res.ControlPerPub)
	drain := "not within 5s"
	if res.DrainTime >= 0 {
		drain = fmt.Sprintf("%v (%.1f DACK periods)", res.DrainTime, float64(res.DrainTime)/float64(res.DACKPeriod))
	}
	fmt.Fprintf(&b, "queues empty after publishing stops: %s; max queue seen=%d\n", drain, res.MaxQueue)
	if res.Wall > 0 {
		fmt.Fprintf(&b, "virtual=%v wall=%v (simulation; checkers %v) speed=%.1fx real time (%.1fx with the checkers)\n",
			res.Virtual.Round(time.Millisecond), res.Wall.Round(time.Millisecond), res.CheckWall.Round(time.Millisecond),
			ratio(res.Virtual, res.Wall), ratio(res.Virtual, res.Wall+res.CheckWall))
		fmt.Fprintf(&b, "setup (tree and %d subscriptions confirmed): virtual=%v wall=%v speed=%.1fx\n",
			o.Subs, res.SetupVirtual.Round(time.Millisecond), res.SetupWall.Round(time.Millisecond), ratio(res.SetupVirtual, res.SetupWall))
	}
	if res.SteadyWall > 0 || res.SteadyCPU > 0 {
		fmt.Fprintf(&b, "steady state (publishing, setup excluded): virtual=%v wall=%v cpu=%v speed=%.1fx (wall) %.1fx (cpu)\n",
			res.SteadyVirtual, res.SteadyWall.Round(time.Millisecond), res.SteadyCPU.Round(time.Millisecond),
			ratio(res.SteadyVirtual, res.SteadyWall), ratio(res.SteadyVirtual, res.SteadyCPU))
	}
	for _, d := range res.Report.Details {
		fmt.Fprintf(&b, "  %s\n", d)
	}
	return b.String()
}

// TimelineCSV writes the delay timeline: bucket start relative to the
// crash (ms), deliveries, mean and max delay (ms).
func (res SRDSResult) TimelineCSV(w io.Writer) error {
	if _, err := fmt.Fprintln(w, "t_ms,deliveries,mean_delay_ms,max_delay_ms"); err != nil {
		return err
	}
	for _, p := range res.Timeline {
		if _, err := fmt.Fprintf(w, "%.1f,%d,%.3f,%.3f\n", ms(p.At), p.Deliveries, ms(p.Mean), ms(p.Max)); err != nil {
			return err
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// srdsWorkload is the experiment's workload: workload.Small with one class
// per publisher (c0, c1, ...), x and y in [0, 10).
func srdsWorkload(r *rand.Rand, publishers int) *workload.Small {
	w := workload.NewSmall(r)
	w.Classes = nil
	for i := 0; i < publishers; i++ {
		w.Classes = append(w.Classes, fmt.Sprintf("c%d", i))
	}
	return w
}
