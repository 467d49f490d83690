package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/message"
)

// The parallel engine (Config.Workers > 0): conservative, window-based
// parallel discrete-event simulation.
//
// A message between brokers arrives no earlier than LinkDelay after it is
// sent (jitter and FIFO clamping only delay it). Within a window [T, T+L),
// L = LinkDelay, no broker therefore receives anything another broker
// sends in that window: the brokers, split into partitions, process their
// own events of the window (ticks, client traffic, messages sent in
// earlier windows) in parallel, one goroutine per partition, and exchange
// what they sent at the barrier that ends the window. A broker's clients
// live in its partition (they talk to no other broker). Global events
// (driver callbacks such as faults, dial completions that touch two
// brokers, samples) run alone between windows, the window ending before
// them.
//
// The results do not depend on the number of partitions: every event is
// ordered by (time, key) where the key names the broker that scheduled it
// and that broker's own counter (events scheduled by global events: a
// global counter, which sorts first), not by a global sequence number;
// the jitter of a broker's messages comes from its own random stream; what
// partitions record in the shared log (publications, deliveries, gaps) is
// buffered and merged at the barrier in (time, key) order of the events
// that recorded it; counters are summed. A close of a link takes effect
// at once for the closing end and for both ends one link delay later
// (closeLinkPar).
//
// Each partition is a Sim of its own (Sim.shard set) sharing the brokers,
// links and log with the main Sim; closures that run in a partition use
// that partition's Sim (execFor).

// parEngine is the main Sim's part of the parallel engine.
type parEngine struct {
	shards []*Sim
	// The barrier: the main goroutine publishes a window's end and bumps
	// epoch; each worker runs its partition's window and counts itself
	// in done. A waiting goroutine spins (a window carries ~15 µs of work
	// per partition: parking goroutines at every window would cost more
	// than it saves), then yields, and parks only after a long wait (a
	// loaded machine took its thread away, or a long serial phase).
	epoch atomic.Uint64
	done  atomic.Int64
	stop  atomic.Bool
	// inWindow: the workers may be running a window (set by window until
	// they are all done; a panic on the main goroutine leaves it set, and
	// stopWorkers then waits for them first). fault is the first panic
	// of a worker, raised again on the main goroutine after the window,
	// where the drivers report a panic as an error (as in the serial
	// engine) instead of the process dying.
	inWindow bool
	fault    atomic.Pointer[workerFault]
	end      atomic.Int64
	running  bool
	adapt    adapt
	// parked[i] is set by a parked goroutine (0: the main one, i: worker
	// i) whose wake channel the other side then signals.
	parked  []atomic.Bool
	wake    []chan struct{}
	windows int64
	events  int64 // the partitions' events so far
	// cursors of the merge of the partitions' buffers (reused).
	cur []int
}

// shardState is a partition's part of the parallel engine.
type shardState struct {
	part int
	end  time.Duration // end of the current window (exclusive)
	out  [][]event     // events for other partitions, by partition
	outG []event       // global events
	// The current event's time and key: they order what it records.
	curAt  time.Duration
	curSeq uint64
	pubs   []bufPub
	dels   []bufDel
	gaps   []bufGap
	// brokers are the partition's brokers, in creation order; head is
	// no later than the first of their events (kept by every push and by
	// runWindow), so that finding the next window reads one value per
	// partition instead of every broker's heap.
	brokers []*broker
	head    time.Duration
	// Scratch of sortRecords.
	keys    []recKey
	pubsTmp []bufPub
	delsTmp []bufDel
	gapsTmp []bufGap
}

type bufPub struct {
	at  time.Duration
	seq uint64
	rec *PubRecord
}

type bufDel struct {
	at    time.Duration
	seq   uint64
	r     clientRoute
	d     message.Deliver
	recvd time.Duration
}

type bufGap struct {
	at  time.Duration
	seq uint64
	g   GapRecord
}

func (s *Sim) initPar() {
	w := s.cfg.Workers
	p := &parEngine{shards: make([]*Sim, w), cur: make([]int, w), parked: make([]atomic.Bool, w), wake: make([]chan struct{}, w)}
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
	}
	for i := range p.shards {
		// Padded: the partitions' Sims are written all the time by
		// different threads, and must not share cache lines.
		ps := &struct {
			_ [128]byte
			s Sim
			_ [128]byte
		}{}
		sh := &ps.s
		*sh = Sim{
			cfg: s.cfg, brokers: s.brokers, links: s.links, cuts: s.cuts, log: s.log,
			clients: s.clients, routes: s.routes,
			shard:          &shardState{part: i, out: make([][]event, w), head: math.MaxInt64},
			pmode:          true,
			main:           s,
			firstViolation: -1,
		}
		sh.stats.Notices = map[string]int64{}
		p.shards[i] = sh
	}
	s.par = p
	s.pmode = true
}

// place puts a new broker in its partition and gives it its random stream.
func (p *parEngine) place(b *broker) {
	w := len(p.shards)
	s := p.shards[0]
	part := b.idx % w
	if f := s.cfg.Partition; f != nil {
		part = ((f(b.id) % w) + w) % w
	}
	b.part = part
	p.shards[part].shard.brokers = append(p.shards[part].shard.brokers, b)
	b.rng = rand.New(rand.NewPCG(uint64(s.cfg.Seed), 0x6a09e667f3bcc908^uint64(b.idx)))
}

// execFor returns the Sim that runs b's events: s in the serial engine,
// b's partition in the parallel one.
func (s *Sim) execFor(b *broker) *Sim {
	if p := s.main.par; p != nil {
		return p.shards[b.part]
	}
	return s
}

// enqueuePar queues an event in the parallel engine: for b's partition
// (own: an event of b's own, not an input, see scheduleOn), or global if b
// is nil. A partition queues its own events in its heap and the others'
// (never within the current window: they are at least a link delay away)
// in its out-boxes, handed over at the barrier.
func (s *Sim) enqueuePar(at time.Duration, b *broker, fn func(), d *delivery, own bool) {
	if at < s.now {
		at = s.now
	}
	var seq uint64
	if c := s.cur; c != nil {
		c.ctr++
		seq = uint64(c.idx+1)<<40 | c.ctr
	} else {
		s.seq++
		seq = s.seq
	}
	e := event{at: at, seq: seq, target: b, fn: fn, d: d}
	if b != nil {
		e.inc = b.inc
		if own {
			e.inc = -1
		}
	}
	sh := s.shard
	if sh == nil { // the main Sim, between windows
		if b == nil {
			s.q.push(e)
		} else {
			b.q.pushEvent(e)
			bs := s.par.shards[b.part].shard
			bs.head = min(bs.head, at)
		}
		return
	}
	switch {
	case b == nil:
		if at < sh.end {
			panic("sim: parallel engine: a global event inside the window")
		}
		sh.outG = append(sh.outG, e)
	case b.part == sh.part:
		if at < sh.end && b != s.cur {
			// runWindow runs a window broker by broker: an input for
			// another broker within the window would come too late.
			panic("sim: parallel engine: an event for another broker inside the window")
		}
		b.q.pushEvent(e)
		sh.head = min(sh.head, at)
	default:
		if at < sh.end {
			panic("sim: parallel engine: an event for another partition inside the window")
		}
		sh.out[b.part] = append(sh.out[b.part], e)
	}
}

// pushEvent queues e; a message waits behind the earlier ones of its link
// direction (fifo, as in enqueue). The messages of a link between two
// partitions are handed over at the barrier (the receiving partition
// alone touches the fifo during a window); those of a link within a
// partition are queued at once.
func (q *eventHeap) pushEvent(e event) {
	if d := e.d; d != nil {
		f := &d.l.q[d.dir]
		if p := f.tail; p != nil {
			p.next, p.nextAt, p.nextSeq, p.nextInc = d, e.at, e.seq, int32(e.inc)
			f.tail = d
			return
		}
		f.tail = d
	}
	q.push(e)
}

// closeLinkPar is closeLink in the parallel engine: b stops sending and
// receiving on l at once (l.shut), and the link breaks for both ends one
// link delay later, when the peer would learn of the close (a global
// event: the peer may be in another partition). Messages b sent before
// the close still arrive (as over a real connection).
func (s *Sim) closeLinkPar(b *broker, to message.BrokerID, l *link) {
	end := 0
	if l.bA != b {
		end = 1
	}
	if l.shut[end] {
		return
	}
	l.shut[end] = true
	m := s.main
	k := l.k
	s.schedule(s.now+s.cfg.LinkDelay, func() {
		if !l.up {
			return // broken meanwhile (crash) or closed by the peer too
		}
		wasAlive := m.alive(l)
		l.broken = true
		l.up = false
		if t := m.brokers[to]; wasAlive {
			m.input(t, 0, func() {
				if m.links[k] == l {
					t.node.LinkDown(b.id)
				}
			})
		}
	})
}

// addPub records a new publication (Log.AddPub): buffered in a partition.
func (s *Sim) addPub(p PubRecord) *PubRecord {
	sh := s.shard
	if sh == nil {
		return s.log.AddPub(p)
	}
	rec := new(PubRecord)
	*rec = p
	sh.pubs = append(sh.pubs, bufPub{sh.curAt, sh.curSeq, rec})
	return rec
}

func (sh *shardState) addDelivery(r *clientRoute, d *message.Deliver, at time.Duration) {
	sh.dels = append(sh.dels, bufDel{at: sh.curAt, seq: sh.curSeq, r: *r, d: *d, recvd: at})
}

func (sh *shardState) addGap(g GapRecord) {
	sh.gaps = append(sh.gaps, bufGap{sh.curAt, sh.curSeq, g})
}

var errParHook = errors.New("sim: the parallel engine (Workers > 0) runs without a notice hook")

// runUntilPar is RunUntil in the parallel engine.
func (s *Sim) runUntilPar(t time.Duration) error {
	p := s.par
	if s.onNotice != nil && s.err == nil {
		s.err = errParHook
	}
	for s.err == nil {
		tg := time.Duration(math.MaxInt64)
		if len(s.q) > 0 {
			tg = s.q[0].at
		}
		tp := time.Duration(math.MaxInt64)
		for _, sh := range p.shards {
			tp = min(tp, sh.shard.head)
		}
		if tg <= tp { // global events first at the same instant
			if tg > t {
				break
			}
			e := s.q.pop()
			if !s.advance(e.at) {
				break
			}
			s.run(&e)
			continue
		}
		if tp > t {
			break
		}
		end := min(tp+s.cfg.LinkDelay, tg, t+1)
		s.window(end)
		s.barrier()
	}
	if s.err == nil && s.now < t {
		s.now = t
	}
	return s.err
}

// Close ends the parallel engine's worker goroutines, which otherwise
// wait (parked) for the next RunUntil between calls. A Sim may be used
// again after Close (the workers start again). Nothing to do for the serial
// engine.
func (s *Sim) Close() {
	if s.par != nil {
		s.par.stopWorkers()
	}
}

// window runs every partition's events before end, in parallel.
func (s *Sim) window(end time.Duration) {
	p := s.par
	p.windows++
	for _, sh := range p.shards {
		sh.clients, sh.routes = s.clients, s.routes // appended between windows
	}
	if len(p.shards) == 1 {
		p.shards[0].runWindow(end)
		return
	}
	var par bool
	switch p.shards[0].cfg.parMode {
	case parAlways:
		par = true
	case parNever:
	default:
		par = p.adapt.step(p)
	}
	t0 := time.Now()
	if par {
		if !p.running {
			p.startWorkers()
		}
		p.end.Store(int64(end))
		p.done.Store(0)
		p.inWindow = true
		p.epoch.Add(1)
		p.wakeWorkers()
		p.shards[0].runWindow(end)
		p.waitWorkers()
		p.inWindow = false
		if f := p.fault.Load(); f != nil {
			panic(fmt.Sprintf("sim: parallel engine, partition %d: %v\n%s", f.part, f.v, f.stack))
		}
	} else {
		// One goroutine runs the partitions one after the other: the same
		// results (they do not depend on the order of the partitions).
		// The workers, if any, park after a while.
		for _, sh := range p.shards {
			sh.runWindow(end)
		}
	}
	p.adapt.spent += time.Since(t0)
}

// adapt chooses, from the wall time per event, between running the
// partitions' windows in parallel and one after the other on the main
// goroutine (on a machine whose cores other jobs take, waiting for a
// worker that has no core costs more than parallelism gains). It alternates
// short trials of both with long runs of the faster. The choice changes
// the speed only, never a result.
type adapt struct {
	seq     bool  // the mode of the current window
	trial   bool  // in a trial (else running the better mode)
	left    int64 // events left in the run of the better mode
	chunk   int64 // events left before the trial switches modes
	started bool
	warm    bool          // the last window is the first after a switch: not counted if small
	trialN  int64         // events of the trial so far
	spent   time.Duration // in the last window (window adds it)
	ev0     int64         // events before the last window
	// The trial's wall time and events by mode (0: parallel, 1: one
	// after the other).
	accT [2]time.Duration
	accN [2]int64
	// exploit is the length of the next run of the better mode: doubled
	// (up to adaptMaxExploit) each time a trial confirms the last choice.
	exploit int64
	last    bool
}

// Config.parMode values.
const (
	parAdaptive = iota
	parAlways
	parNever
)

// The adaptive choice's periods, in events (windows carry from a few
// events, while brokers join, to thousands, in subscription floods): a
// trial alternates the modes every adaptSwitch events until each ran
// adaptTrial/2, so that both see the same phase of the run.
const (
	adaptTrial      = 24000
	adaptSwitch     = 4000
	adaptExploit    = 200000  // events between trials, at first
	adaptMaxExploit = 1600000 // events between trials when the choice holds
)

// step accounts for the previous window and tells whether the next one
// runs in parallel.
func (a *adapt) step(p *parEngine) bool {
	if !a.started {
		a.started, a.trial, a.chunk, a.seq = true, true, adaptSwitch, false
		a.spent, a.ev0 = 0, p.events
		return true
	}
	n := p.events - a.ev0
	if a.trial {
		a.trialN += n
	}
	if a.trial && !(a.warm && n < adaptSwitch/8) {
		m := 0
		if a.seq {
			m = 1
		}
		a.accT[m] += a.spent
		a.accN[m] += n
	}
	a.warm = false
	a.spent, a.ev0 = 0, p.events
	if a.trial {
		// Until each mode has run half the trial's events (or the trial
		// ran long: windows of thousands of events in floods).
		if (a.accN[0] < adaptTrial/2 || a.accN[1] < adaptTrial/2) && a.trialN < 4*adaptTrial {
			if a.chunk -= n; a.chunk <= 0 {
				// The first window after a switch is not counted if
				// small: the workers wake up, the caches warm up.
				a.chunk, a.seq, a.warm = adaptSwitch, !a.seq, true
			}
			return !a.seq
		}
	} else if a.left -= n; a.left > 0 {
		return !a.seq
	}
	if !a.trial {
		a.trial, a.chunk, a.seq, a.warm = true, adaptSwitch, false, true
		a.accT, a.accN, a.trialN = [2]time.Duration{}, [2]int64{}, 0
		return true
	}
	// The cost per event of each mode: the faster runs next (parallel if
	// either is unknown).
	seq := a.accN[0] > 0 && a.accN[1] > 0 &&
		float64(a.accT[1])*float64(a.accN[0]) < float64(a.accT[0])*float64(a.accN[1])
	if a.exploit == 0 || seq != a.last {
		a.exploit = adaptExploit
	} else {
		a.exploit = min(2*a.exploit, adaptMaxExploit)
	}
	a.last = seq
	a.trial, a.left, a.seq = false, a.exploit, seq
	return !a.seq
}

// spinLimit is how many times a waiting goroutine polls before it yields
// its thread between polls; parkAfter, how long it waits so before it
// parks (longer than a window's work: parking and waking cost ~10 µs).
const (
	spinLimit = 1000
	parkAfter = 200 * time.Microsecond
)

// await waits until cond holds: spinning, yielding, then parked (parked
// flag i, woken through p.wake[i] by whoever makes cond true). A wake-up
// can be stale (a waker that saw the flag of an earlier wait late): cond
// is checked again after each.
func (p *parEngine) await(i int, cond func() bool) {
	var since time.Time
	for n := 0; !cond(); n++ {
		if n < spinLimit {
			continue
		}
		if n&31 == 0 { // read the clock now and then only
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) > parkAfter {
				p.park(i, cond)
				n, since = 0, time.Time{}
				continue
			}
		}
		runtime.Gosched()
	}
}

// park blocks goroutine i until cond holds or a waker signals: whoever
// clears the flag set here (with a compare-and-swap) signals the channel.
func (p *parEngine) park(i int, cond func() bool) {
	p.parked[i].Store(true)
	if cond() && p.parked[i].CompareAndSwap(true, false) {
		return
	}
	<-p.wake[i] // the waker cleared the flag
}

// wakeUp wakes goroutine i if it is parked.
func (p *parEngine) wakeUp(i int) {
	if p.parked[i].Load() && p.parked[i].CompareAndSwap(true, false) {
		p.wake[i] <- struct{}{}
	}
}

func (p *parEngine) wakeWorkers() {
	for i := 1; i < len(p.shards); i++ {
		p.wakeUp(i)
	}
}

// waitWorkers waits until every worker is done with the window.
func (p *parEngine) waitWorkers() {
	want := int64(len(p.shards) - 1)
	p.await(0, func() bool { return p.done.Load() == want })
}

// workerDone counts a worker in done and wakes the main goroutine if it
// was the last.
func (p *parEngine) workerDone() {
	if p.done.Add(1) == int64(len(p.shards)-1) {
		p.wakeUp(0)
	}
}

func (p *parEngine) startWorkers() {
	p.running = true
	p.stop.Store(false)
	seen := p.epoch.Load()
	for i := 1; i < len(p.shards); i++ {
		go p.worker(i, seen)
	}
}

func (p *parEngine) worker(i int, seen uint64) {
	sh := p.shards[i]
	for {
		p.await(i, func() bool { return p.epoch.Load() != seen })
		seen = p.epoch.Load()
		if p.stop.Load() {
			p.workerDone()
			return
		}
		p.runWorkerWindow(i, sh)
		p.workerDone()
	}
}

// workerFault is a panic of a worker's window.
type workerFault struct {
	part  int
	v     any
	stack []byte
}

func (p *parEngine) runWorkerWindow(i int, sh *Sim) {
	defer func() {
		if v := recover(); v != nil {
			p.fault.CompareAndSwap(nil, &workerFault{part: i, v: v, stack: debug.Stack()})
		}
	}()
	sh.runWindow(time.Duration(p.end.Load()))
}

// stopWorkers ends the workers (at the end of RunUntil) and waits for them.
func (p *parEngine) stopWorkers() {
	if !p.running {
		return
	}
	if p.inWindow { // the main goroutine panicked in a window
		p.waitWorkers()
		p.inWindow = false
	}
	p.running = false
	p.stop.Store(true)
	p.done.Store(0)
	p.epoch.Add(1)
	p.wakeWorkers()
	p.waitWorkers()
}

// runWindow runs the partition's events before end.
//
// It runs them broker by broker, each broker's in (time, key) order: within
// a window no broker hears from another, so only each broker's own order
// matters (the results are those of time order), and a broker's state
// stays in the cache for all its events of the window (the subscription
// floods of the setup bring hundreds per broker and window). What the
// events recorded is put back in (time, key) order for the merge.
func (s *Sim) runWindow(end time.Duration) {
	sh := s.shard
	sh.end = end
	last := s.now
	sh.head = math.MaxInt64 // pushes while the window runs lower it too
	for _, b := range sh.brokers {
		q := &b.q
		for len(*q) > 0 && (*q)[0].at < end {
			e := q.popNext()
			s.now = e.at
			s.stats.Events++
			s.cur = e.target
			sh.curAt, sh.curSeq = e.at, e.seq
			s.run(&e)
		}
		if len(*q) > 0 {
			sh.head = min(sh.head, (*q)[0].at)
		}
		last = max(last, s.now)
	}
	s.now = last
	s.cur = nil
	sh.sortRecords()
}

// sortRecords puts the records of a window in (time, key) order, those
// of one event in the order it made them.
func (sh *shardState) sortRecords() {
	sh.pubs, sh.pubsTmp = sortByKey(sh.pubs, sh.pubsTmp, &sh.keys, pubKey)
	sh.dels, sh.delsTmp = sortByKey(sh.dels, sh.delsTmp, &sh.keys, delKey)
	sh.gaps, sh.gapsTmp = sortByKey(sh.gaps, sh.gapsTmp, &sh.keys, gapKey)
}

// The (time, key) of the event that made a record.
func pubKey(r *bufPub) (time.Duration, uint64) { return r.at, r.seq }
func delKey(r *bufDel) (time.Duration, uint64) { return r.at, r.seq }
func gapKey(r *bufGap) (time.Duration, uint64) { return r.at, r.seq }

// recKey is a record's place in sortByKey.
type recKey struct {
	at  time.Duration
	seq uint64
	i   int
}

// sortByKey returns rs in (time, key) order, stable, and the scratch
// slice to use next time (the records are large: a sorted list of keys
// is applied once, by copying into tmp, which then becomes rs).
func sortByKey[T any](rs, tmp []T, keys *[]recKey, key func(*T) (time.Duration, uint64)) ([]T, []T) {
	sorted := true
	ks := (*keys)[:0]
	for i := range rs {
		at, seq := key(&rs[i])
		if n := len(ks); n > 0 && (at < ks[n-1].at || at == ks[n-1].at && seq < ks[n-1].seq) {
			sorted = false
		}
		ks = append(ks, recKey{at, seq, i})
	}
	*keys = ks
	if sorted {
		return rs, tmp
	}
	slices.SortStableFunc(ks, func(x, y recKey) int {
		if x.at != y.at {
			return cmp.Compare(x.at, y.at)
		}
		return cmp.Compare(x.seq, y.seq)
	})
	tmp = tmp[:0]
	for _, k := range ks {
		tmp = append(tmp, rs[k.i])
	}
	clear(rs)
	return tmp, rs[:0]
}

// barrier hands the events the partitions scheduled for others over and
// merges what they recorded into the log, in (time, key) order.
func (s *Sim) barrier() {
	p := s.par
	var events int64
	for _, sh := range p.shards {
		st := sh.shard
		for j, out := range st.out {
			if len(out) == 0 {
				continue
			}
			ts := p.shards[j].shard
			for i := range out {
				out[i].target.q.pushEvent(out[i])
				ts.head = min(ts.head, out[i].at)
				out[i] = event{}
			}
			st.out[j] = out[:0]
		}
		for i := range st.outG {
			s.q.push(st.outG[i])
			st.outG[i] = event{}
		}
		st.outG = st.outG[:0]
		if sh.now > s.now {
			s.now = sh.now
		}
		// A message's record is taken from its sender's free list and
		// returned to its receiver's: a list that only grows (more
		// traffic into the partition than out of it) is cut back.
		if n := len(sh.freeDeliv); n > maxFreeDeliv {
			clear(sh.freeDeliv[maxFreeDeliv/2:])
			sh.freeDeliv = sh.freeDeliv[:maxFreeDeliv/2]
		}
		events += sh.stats.Events
	}
	p.events = events
	if s.stats.Events+events > s.cfg.MaxEvents {
		s.err = ErrEventBound
	}
	s.mergePubs()
	s.mergeDels()
	s.mergeGaps()
}

// maxFreeDeliv bounds a partition's free list of message records.
const maxFreeDeliv = 1 << 15

// mergePubs, mergeDels and mergeGaps record in the log what the
// partitions buffered in the window, in (time, key) order across them.
func (s *Sim) mergePubs() {
	l := s.log
	mergeRecords(s.par, func(sh *shardState) *[]bufPub { return &sh.pubs }, pubKey, func(r *bufPub) {
		if _, dup := l.pubIdx[r.rec.ID]; !dup {
			l.pubIdx[r.rec.ID] = len(l.Pubs)
			l.Pubs = append(l.Pubs, r.rec)
		}
	})
}

func (s *Sim) mergeDels() {
	mergeRecords(s.par, func(sh *shardState) *[]bufDel { return &sh.dels }, delKey, func(r *bufDel) {
		s.recordDelivery(&r.r, &r.d, r.recvd)
	})
}

func (s *Sim) mergeGaps() {
	mergeRecords(s.par, func(sh *shardState) *[]bufGap { return &sh.gaps }, gapKey, func(r *bufGap) {
		s.log.Gaps = append(s.log.Gaps, r.g)
	})
}

// mergeRecords hands the records of every partition's buffer (each in
// (time, key) order: sortRecords) to apply in (time, key) order across
// the partitions, then empties the buffers. Two partitions never share
// a key (it names the scheduling broker); a partition's records of one
// event keep their order.
func mergeRecords[T any](p *parEngine, buf func(*shardState) *[]T, key func(*T) (time.Duration, uint64), apply func(*T)) {
	clear(p.cur)
	for {
		best := -1
		var ba time.Duration
		var bs uint64
		for j, sh := range p.shards {
			b := *buf(sh.shard)
			if p.cur[j] >= len(b) {
				continue
			}
			if a, q := key(&b[p.cur[j]]); best < 0 || a < ba || a == ba && q < bs {
				best, ba, bs = j, a, q
			}
		}
		if best < 0 {
			break
		}
		apply(&(*buf(p.shards[best].shard))[p.cur[best]])
		p.cur[best]++
	}
	for _, sh := range p.shards {
		b := buf(sh.shard)
		clear(*b)
		*b = (*b)[:0]
	}
}

// addStats adds the partitions' counters to st.
func (p *parEngine) addStats(st *Stats) {
	notices := make(map[string]int64, len(st.Notices))
	for k, v := range st.Notices {
		notices[k] = v
	}
	st.Notices = notices
	for _, sh := range p.shards {
		x := &sh.stats
		st.Events += x.Events
		st.NoLinkDrops += x.NoLinkDrops
		st.InFlightLost += x.InFlightLost
		st.ClientMisses += x.ClientMisses
		st.Dials += x.Dials
		st.DialsFailed += x.DialsFailed
		st.PublishErrors += x.PublishErrors
		for k, v := range x.Notices {
			st.Notices[k] += v
		}
		for t, n := range sh.msgCount {
			if n > 0 {
				st.Messages[sh.typeNames[t]] += n
			}
		}
	}
}
