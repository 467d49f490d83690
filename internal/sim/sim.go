// Package sim is the deterministic simulator of deltapub: many protocol
// nodes over a seeded in-memory network in virtual time, with faults
// (crash, crash and restart, freeze and resume, cut and heal a link),
// publishers and subscribers, a trace, and checkers for the guarantees of
// PROTOCOL.md section 1 (exactly once, per-source FIFO, no loss within δ,
// no silent loss beyond δ, queues bounded and drained).
//
// Everything runs in one goroutine from one seed: no wall clock, no
// goroutines, no global randomness. A run is replayed exactly from its seed;
// many runs go in parallel as many Sims (FuzzUntil). See docs/simulator.md.
package sim

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/deltapub/deltapub/internal/traffic"
	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// Config is the simulated environment and the protocol parameters given to
// every node. Durations are virtual time.
type Config struct {
	Seed int64
	// Core is the protocol core's configuration, the same for every node
	// but for ID, Addr, Epoch and Seed, which each broker's incarnation
	// gets of its own (the seed drawn from Seed), and MaxFrame (below).
	// Core.Delta is the overlay's δ; Core.MaxQueue is also the bound the
	// sampled queues are checked against (0: not checked).
	Core overlay.Config
	// Tick is the virtual time between two Tick() calls of one node.
	Tick time.Duration
	// TickPhases offsets each broker's ticks by a random fraction of Tick,
	// so that brokers do not act in lock step (as real ones do not).
	TickPhases bool

	// LinkDelay is the one-way delay of every link; each message adds a
	// uniform jitter in [0, LinkJitter). FIFO per link is kept regardless.
	LinkDelay  time.Duration
	LinkJitter time.Duration
	// A dial takes one round trip (2 × LinkDelay) to succeed; a dial to a
	// crashed, frozen or cut-off peer fails after DialTimeout.
	DialTimeout time.Duration
	// LinkDownAfter is how long after a crash or cut the surviving end is
	// told LinkDown (an idle timeout). Negative: never; the core must
	// detect the failure by its heartbeats.
	LinkDownAfter time.Duration
	// What real processes do that an ideal network does not, drawn by the
	// fuzzer (the zero values are the ideal network of the scenario files).
	// DialFailDraw: a dial to a crashed broker fails after a delay drawn
	// from [one round trip, DialTimeout] (a real dial fails at any point
	// of its handshake, not exactly at the timeout).
	DialFailDraw bool
	// DialFailLive is the chance, per thousand, that a dial to a live,
	// reachable broker fails anyway (a lost handshake), after a drawn
	// delay as above.
	DialFailLive int
	// SlowHandshake is the chance, per thousand, that a dial to a live,
	// reachable broker outlasts DialTimeout (a starved machine): the core
	// is told DialFailed at DialTimeout, as the runtime does, and the
	// handshake goes on; the link comes up after a drawn delay up to
	// DialPatience, unless the peer is gone by then. A dial the core asks
	// for meanwhile is answered by that handshake's outcome.
	SlowHandshake int
	DialPatience  time.Duration
	// AcceptDelay: the accepting end of a new link is told LinkUp after
	// a delay drawn from [0, AcceptDelay] (its handshake completes after
	// the dialler's). What the dialler sends meanwhile arrives right
	// after that LinkUp, in order (the runtime steps a link's messages
	// only after its PeerUp); what the acceptor would send on the link
	// before its LinkUp is lost (it does not hold that link yet).
	AcceptDelay time.Duration
	// ReplacedDown: an end that still holds a link a new one replaces
	// (never told it went down) is told LinkDown before LinkUp, as the
	// runtime does (runtime.Runtime.linkUp).
	ReplacedDown bool
	// ClientDelay is the one-way delay between a client and its edge.
	ClientDelay time.Duration
	// SampleEvery is how often queue lengths are sampled for the bound
	// check and the statistics (0: never).
	SampleEvery time.Duration
	// ControlEvery is how often every broker's control-message counters
	// are read for the storm rule (traffic.go; 0: never).
	ControlEvery time.Duration
	// MaxEvents bounds a run: past it the run stops with ErrEventBound.
	MaxEvents int64
	// Wire sends every broker message through the wire format (encoded
	// when sent, decoded when it arrives), as the real transport does: a
	// receiver never shares memory with the sender, and every message
	// must round-trip. Costs CPU; off for the large experiments.
	Wire bool
	// MaxFrame (with Wire) is the largest frame (type and body, bytes) a
	// receiver accepts, as limits.max_frame on a real broker: a larger
	// frame is an error of the run. The nodes are told the limit
	// (Core.MaxFrame: the overlay core sends a large state transfer in
	// parts). 0: no limit (and Core.MaxFrame as it is).
	MaxFrame int

	NewNode NodeFactory
	// Trace, when set, receives one readable line per message, fault,
	// delivery and notice.
	Trace io.Writer
}

// DefaultConfig is a LAN-like setup with testbed-speed failure detection:
// 10 ms ticks, heartbeats every 20 ms, suspicion after 100 ms of silence.
func DefaultConfig() Config {
	core := overlay.DefaultConfig() // for 10 ms ticks, faster failure detection:
	core.Delta = 2
	core.HeartbeatTicks = 2   // 20 ms: several heartbeats per failure timeout
	core.FailureTicks = 10    // 100 ms: 5 missed heartbeats before suspicion
	core.DACKTicks = 5        // 50 ms: purging lags publishing by a few DACK periods
	core.GoneAfterTicks = 300 // 3 s: 30 × the failure timeout (PROTOCOL §6 "gone_after")
	core.MaxQueue = 100000
	return Config{
		Seed:          1,
		Core:          core,
		Tick:          10 * time.Millisecond,
		TickPhases:    true,
		LinkDelay:     2 * time.Millisecond,
		LinkJitter:    time.Millisecond,
		DialTimeout:   50 * time.Millisecond,
		LinkDownAfter: -1,
		ClientDelay:   100 * time.Microsecond,
		SampleEvery:   50 * time.Millisecond,
		ControlEvery:  time.Second, // traffic.DefaultBound's window
		MaxEvents:     50_000_000,
	}
}

func (c *Config) validate() error {
	switch {
	case c.Core.Delta < 1:
		return fmt.Errorf("sim: Core.Delta must be ≥ 1, got %d", c.Core.Delta)
	case c.Tick <= 0:
		return fmt.Errorf("sim: Tick must be > 0, got %v", c.Tick)
	case c.LinkDelay < 0 || c.LinkJitter < 0 || c.ClientDelay < 0:
		return errors.New("sim: LinkDelay, LinkJitter and ClientDelay must be ≥ 0")
	case c.SlowHandshake > 0 && c.DialPatience < c.DialTimeout:
		return fmt.Errorf("sim: DialPatience %v shorter than DialTimeout %v", c.DialPatience, c.DialTimeout)
	case c.DialTimeout < 2*c.LinkDelay:
		return fmt.Errorf("sim: DialTimeout %v shorter than a round trip %v", c.DialTimeout, 2*c.LinkDelay)
	case c.NewNode == nil:
		return errors.New("sim: NewNode is nil")
	case c.MaxEvents <= 0:
		return errors.New("sim: MaxEvents must be > 0")
	case c.MaxFrame < 0:
		return fmt.Errorf("sim: MaxFrame must be ≥ 0, got %d", c.MaxFrame)
	}
	return nil
}

// ErrEventBound is returned when a run exceeds Config.MaxEvents.
var ErrEventBound = errors.New("sim: event bound reached (livelock or run too long)")

// Stats counts what happened in a run.
type Stats struct {
	Events        int64
	Messages      map[string]int64 // broker-to-broker messages sent, by type name
	NoLinkDrops   int64            // messages a node sent to a peer without an up link
	InFlightLost  int64            // messages lost with a crashed broker or a cut link
	Notices       map[string]int64
	ClientMisses  int64 // client messages for an unknown or foreign client
	MaxQueueSeen  int
	QueueSamples  int64
	Dials         int64
	DialsFailed   int64
	VirtualTime   time.Duration
	PublishErrors int64
}

// Sim is one simulated overlay. It is not safe for concurrent use; run
// many Sims in parallel instead.
type Sim struct {
	cfg      Config
	rng      *rand.Rand
	slowRng  *rand.Rand                            // SlowHandshake's draws: a stream of their own
	slowNext map[[2]message.BrokerID]time.Duration // SlowDial: the next dial from→to, its handshake's duration
	now      time.Duration
	seq      uint64
	q        eventHeap
	ticks    tickQueue // the brokers' ticks after their first (see tickQueue)
	brokers  map[message.BrokerID]*broker
	order    []*broker // creation order, for deterministic iteration
	links    map[linkKey]*link
	cuts     map[linkKey]bool
	nextLink uint64
	clients  []*client     // by ClientID (IDs are 1, 2, ...; [0] is nil)
	routes   []clientRoute // by ClientID, as clients
	nextCID  message.ClientID
	log      *Log
	stats    Stats
	err      error
	enc      *wire.Encoder // for Config.Wire
	// freeDeliv recycles the records of messages in flight.
	freeDeliv []*delivery
	// typeNames caches message.Type.String (a map look-up) and msgCount
	// counts the messages sent by type; Stats builds Stats.Messages.
	typeNames []string
	msgCount  []int64
	online    []online               // by source index (srcIdx), see online
	srcIdx    map[message.Source]int // numbers the sources for online
	// lastSrc and lastSrcIdx cache the last source numbered (the
	// deliveries of one publication come in a row).
	lastSrc    message.Source
	lastSrcIdx int
	// lastDelPub and lastDelPi (valid if lastDelOK) cache the index in
	// the log of the last publication delivered (recordDelivery): the
	// deliveries of one publication come in a row.
	lastDelPub message.PubID
	lastDelPi  int
	lastDelOK  bool
	// lastDelAttrs is the array of the attributes the last publication
	// delivered carried, if equal to its record's (else nil).
	lastDelAttrs    *matching.Attr
	lastDelAttrsLen int
	// settled counts the subscriptions known to be settled (AllConfirmed).
	settled int
	// durables: the durable subscribers by name, in creation order
	// (dursub.go).
	durables   map[string]*durSub
	durableSeq []*durSub
	// onlineDone counts the deliveries of the log the online check has
	// seen (all of them with a trace; otherwise caught up on demand).
	onlineDone int
	// firstViolation is the first duplicate or reorder seen online, or -1.
	firstViolation time.Duration
	// onNotice, when set, sees every notice (scenario and fuzz drivers).
	onNotice func(b message.BrokerID, n overlay.Notice)

	// The liveness rules (traffic.go): the control readings, the restarts,
	// the instants of the first and the last fault (-1: none).
	readings              []traffic.Reading
	restarts              []restartRec
	firstFault, lastFault time.Duration
	steadyUntil           time.Duration // SetSteadyUntil (-1: the first fault)
}

// New creates an empty simulator.
func New(cfg Config) (*Sim, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sim{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)),
		slowRng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5105d1a1)),
		brokers: map[message.BrokerID]*broker{},
		links:   map[linkKey]*link{},
		cuts:    map[linkKey]bool{},
		clients: []*client{nil},
		routes:  []clientRoute{{sub: -1}},
		log:     newLog(),

		firstViolation: -1,
		firstFault:     -1,
		lastFault:      -1,
		steadyUntil:    -1,
	}
	s.stats.Notices = map[string]int64{}
	if cfg.SampleEvery > 0 {
		s.schedule(cfg.SampleEvery, s.sample)
	}
	if cfg.ControlEvery > 0 {
		s.schedule(cfg.ControlEvery, s.readControl)
	}
	return s, nil
}

// Now is the current virtual time.
func (s *Sim) Now() time.Duration { return s.now }

// Err is the first fatal error of the run (node creation failed, event
// bound reached), or nil.
func (s *Sim) Err() error { return s.err }

// Stats returns the counters of the run so far.
func (s *Sim) Stats() Stats {
	st := s.stats
	st.VirtualTime = s.now
	st.Messages = make(map[string]int64, len(s.msgCount))
	for t, n := range s.msgCount {
		if n > 0 {
			st.Messages[s.typeNames[t]] = n
		}
	}
	return st
}

// countType returns t.String() (cached) and makes room to count type t.
func (s *Sim) countType(t message.Type) string {
	if int(t) >= len(s.typeNames) {
		s.typeNames = append(s.typeNames, make([]string, int(t)+1-len(s.typeNames))...)
		s.msgCount = append(s.msgCount, make([]int64, int(t)+1-len(s.msgCount))...)
	}
	if s.typeNames[t] == "" {
		s.typeNames[t] = t.String()
	}
	return s.typeNames[t]
}

// Log is the record of publications, subscriptions and deliveries.
func (s *Sim) Log() *Log { return s.log }

// Rand is the run's random source (for drivers that must stay
// deterministic from the same seed).
func (s *Sim) Rand() *rand.Rand { return s.rng }

// Config returns the configuration of the run.
func (s *Sim) Config() Config { return s.cfg }

func (s *Sim) tracef(format string, args ...any) {
	if s.cfg.Trace == nil {
		return
	}
	fmt.Fprintf(s.cfg.Trace, "%12s ", fmtTime(s.now))
	fmt.Fprintf(s.cfg.Trace, format, args...)
	io.WriteString(s.cfg.Trace, "\n")
}

func fmtTime(d time.Duration) string {
	return fmt.Sprintf("%d.%06ds", d/time.Second, (d%time.Second)/time.Microsecond)
}

// At runs fn at virtual time t (a driver's action: a fault, a client
// request, a check).
func (s *Sim) At(t time.Duration, fn func()) { s.schedule(t, fn) }

// RunUntil processes events up to and including virtual time t, then sets
// the clock to t. It stops early on a fatal error.
func (s *Sim) RunUntil(t time.Duration) error {
	for s.err == nil && (len(s.q) > 0 && s.q[0].at <= t || s.ticks.n > 0 && s.ticks.buf[s.ticks.head].at <= t) {
		s.stepOne()
	}
	if s.err == nil && s.now < t {
		s.now = t
	}
	return s.err
}

// RunFor advances virtual time by d.
func (s *Sim) RunFor(d time.Duration) error { return s.RunUntil(s.now + d) }

// RunUntilCond runs until cond holds (checked every tick of virtual time)
// or max elapses; it reports whether cond held.
func (s *Sim) RunUntilCond(max time.Duration, cond func() bool) (bool, error) {
	end := s.now + max
	for s.now < end {
		if cond() {
			return true, nil
		}
		next := s.now + s.cfg.Tick
		if next > end {
			next = end
		}
		if err := s.RunUntil(next); err != nil {
			return false, err
		}
	}
	return cond(), s.err
}

func (s *Sim) stepOne() {
	if s.ticks.n > 0 && (len(s.q) == 0 || s.ticks.before(&s.q[0])) {
		s.stepTick()
		return
	}
	e := s.next()
	if s.advance(e.at) {
		s.run(&e)
	}
}

// stepTick is stepOne for the first tick of s.ticks.
func (s *Sim) stepTick() {
	t := s.ticks.pop()
	if s.advance(t.at) {
		s.tick(t.b, t.inc)
	}
}

// advance sets the clock to an event's time and counts the event; past
// Config.MaxEvents it sets ErrEventBound and reports false (the event is
// not run).
func (s *Sim) advance(at time.Duration) bool {
	s.now = at
	s.stats.Events++
	if s.stats.Events > s.cfg.MaxEvents {
		s.err = ErrEventBound
		return false
	}
	return true
}

// run executes one event: a global action, or an input to a broker's node
// followed by the processing of the node's outputs.
func (s *Sim) run(e *event) {
	b := e.target
	if b == nil {
		e.fn()
		return
	}
	if b.inc != e.inc || b.state == stateCrashed {
		if e.d != nil {
			s.releaseDelivery(e.d)
		}
		return // the incarnation this input was meant for is gone
	}
	if b.state == stateFrozen {
		b.pending = append(b.pending, *e)
		return
	}
	if e.d != nil {
		s.deliver(b, e.d)
	} else {
		e.fn()
	}
	s.flush(b)
}

// flush takes the outputs of b's node and acts on them, in order.
func (s *Sim) flush(b *broker) {
	n := b.node
	if n != nil {
		s.checkPhase(b)
	}
	if n == nil || !n.Pending() {
		return // a quarter of the events (ticks, most acks) output nothing
	}
	r := n.Ready()
	if len(r.Notices)+len(r.Dials)+len(r.Closes) > 0 { // rare
		for _, x := range r.Notices {
			s.notice(b, x)
		}
		for _, p := range r.Dials {
			s.dial(b, p.ID)
		}
		for _, p := range r.Closes {
			s.closeLink(b, p)
		}
	}
	for _, m := range r.Messages {
		s.send(b, m)
	}
	if len(r.Appends)+len(r.Released) > 0 || !r.Held.Empty() {
		s.persist(b, &r) // before the PubAcks (durable.go)
	}
	for _, c := range r.ToClients {
		s.toClient(b, c)
	}
}

func (s *Sim) notice(b *broker, n overlay.Notice) {
	s.stats.Notices[string(n.Kind)]++
	if n.Kind == "joined" {
		b.joined, b.everJoined = true, true
		s.noteJoined(b)
	}
	s.tracef("%s notice %s %s %s", b.id, n.Kind, n.Peer, n.Detail)
	if n.Kind == overlay.NoticeRemoved {
		s.restartRemoved(b)
	}
	if s.onNotice != nil {
		s.onNotice(b.id, n)
	}
}

// restartRemoved does what the runtime does on NoticeRemoved (a broker
// removed from the tree while alive): it restarts the broker at once, a
// crash and a restart with its data directory, rejoining through the
// place it had. Its clients are disconnected, as by a crash.
func (s *Sim) restartRemoved(b *broker) {
	var jps []message.BrokerID
	for _, p := range b.node.Place() {
		jps = append(jps, p.ID)
	}
	inc := b.inc
	s.schedule(s.now, func() {
		if b.inc != inc || b.state == stateCrashed {
			return // crashed meanwhile
		}
		s.tracef("%s restarts: removed from the tree while alive", b.id)
		_ = s.Crash(b.id)
		_ = s.RestartWith(b.id, RestartOptions{Joinpoints: s.existing(jps), StaleLink: -1, Place: true, Log: true})
	})
}

// input schedules fn as an input of b's current incarnation after delay.
func (s *Sim) input(b *broker, delay time.Duration, fn func()) {
	s.scheduleFor(s.now+delay, b, fn)
}

// --- brokers and faults ---

// --- network ---

// sample records queue lengths for the bound check and the statistics.
func (s *Sim) sample() {
	for _, b := range s.order {
		if b.state == stateCrashed || b.node == nil {
			continue
		}
		q := b.node.QueueLen()
		s.stats.QueueSamples++
		if q > b.maxQueue {
			b.maxQueue = q
		}
		if q > s.stats.MaxQueueSeen {
			s.stats.MaxQueueSeen = q
		}
		if s.cfg.Core.MaxQueue > 0 && q > s.cfg.Core.MaxQueue {
			s.log.problem(&s.log.QueueOverBound, "queue of %s is %d > bound %d at %s", b.id, q, s.cfg.Core.MaxQueue, fmtTime(s.now))
		}
	}
	s.schedule(s.now+s.cfg.SampleEvery, s.sample)
}

// QueueLens returns the current queue length of every live broker.
func (s *Sim) QueueLens() map[message.BrokerID]int {
	out := map[message.BrokerID]int{}
	for _, b := range s.order {
		if b.state != stateCrashed && b.node != nil {
			out[b.id] = b.node.QueueLen()
		}
	}
	return out
}

// drained reports whether every live broker's queue is empty.
func (s *Sim) drained() bool {
	for _, b := range s.order {
		if b.state != stateCrashed && b.node != nil && b.node.QueueLen() != 0 {
			return false
		}
	}
	return true
}

// CheckDrained records an undrained-queue problem for every live broker
// whose queue is not empty (call after quiescence).
func (s *Sim) CheckDrained() {
	for _, b := range s.order {
		if b.state == stateCrashed || b.node == nil {
			continue
		}
		if q := b.node.QueueLen(); q != 0 {
			s.log.problem(&s.log.Undrained, "queue of %s not drained: %d messages after quiescence", b.id, q)
		}
	}
}
