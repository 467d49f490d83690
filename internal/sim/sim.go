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
	"slices"
	"sort"
	"time"

	"github.com/deltapub/deltapub/internal/storage"
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

type brokerState uint8

const (
	stateUp brokerState = iota
	stateFrozen
	stateCrashed
)

func (s brokerState) String() string {
	return [...]string{"up", "frozen", "crashed"}[s]
}

type broker struct {
	id    message.BrokerID
	addr  string
	node  Node
	inc   int // incarnation counter: bumped on crash, invalidates events
	epoch uint64
	state brokerState
	// pending holds the inputs that reached the broker while frozen, in
	// arrival order; they are processed when it resumes.
	pending     []event
	everCrashed bool
	joined      bool
	everJoined  bool // some incarnation was a member
	clients     []*client
	maxQueue    int
	// ctl counts the control messages b's core output, by type (over all
	// incarnations); restart is the index in Sim.restarts of b's restart
	// that has not joined yet (-1: none).
	ctl     []int64
	restart int
	// place is what the runtime keeps in the broker's data directory
	// (Node.Place, saved while it is a joined member): where a restart
	// with RestartOptions.Place rejoins first.
	place []message.BrokerID
	// linkTo mirrors Sim.links for the links of this broker, by peer
	// (send looks a link up per message: one small, hot map by name
	// instead of hashing the pair). Set where Sim.links is.
	linkTo map[message.BrokerID]*link
	// log is the broker's publication log (Config.Core.Durable), kept
	// across its crashes; durable lists the acknowledged publications of
	// its publishers when it crashed (durable.go).
	log     *storage.MemoryLog
	durable []*PubRecord
	// slowDials are this incarnation's slow handshakes in flight
	// (SlowHandshake), by peer: asked records that the core dialled again
	// after it was told the dial failed.
	slowDials map[message.BrokerID]*slowDial
}

type linkKey struct{ a, b message.BrokerID }

func keyOf(x, y message.BrokerID) linkKey {
	if x > y {
		x, y = y, x
	}
	return linkKey{x, y}
}

// link is one established connection between two broker incarnations.
type link struct {
	id     uint64
	k      linkKey
	incA   int
	incB   int
	bA, bB *broker // the brokers of k.a and k.b (brokers are never removed)
	since  time.Duration
	up     bool // not closed or reported down
	broken bool // cut or closed: nothing more arrives
	// replaced: a newer link took k's place in Sim.links (links are never
	// removed from it), i.e. s.links[l.k] != l, without hashing the key.
	replaced bool
	last     [2]time.Duration
	// upAt is when each direction's sender is told LinkUp (Config.AcceptDelay):
	// it sends nothing on the link before.
	upAt [2]time.Duration
	// told: the end (0: k.a, 1: k.b) was told LinkDown for this link.
	told [2]bool
	// q holds the messages in flight in each direction behind the one in
	// the event heap (see fifo).
	q [2]fifo
}

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
	if len(r.Appends)+len(r.Released) > 0 {
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
	if s.onNotice != nil {
		s.onNotice(b.id, n)
	}
}

// input schedules fn as an input of b's current incarnation after delay.
func (s *Sim) input(b *broker, delay time.Duration, fn func()) {
	s.scheduleFor(s.now+delay, b, fn)
}

// --- brokers and faults ---

// AddBroker creates broker id with a fresh node (epoch 1); it does nothing
// until Bootstrap or Join.
func (s *Sim) AddBroker(id message.BrokerID) error {
	if id == "" {
		return errors.New("sim: empty broker id")
	}
	if _, dup := s.brokers[id]; dup {
		return fmt.Errorf("sim: broker %s already exists", id)
	}
	b := &broker{id: id, addr: "sim://" + string(id), epoch: 0, restart: -1}
	s.brokers[id] = b
	s.order = append(s.order, b)
	return s.start(b)
}

// start creates a new node for b (a new incarnation, a larger epoch) and
// starts its ticks.
func (s *Sim) start(b *broker) error {
	b.epoch++
	c := s.cfg.Core
	c.ID, c.Addr, c.Epoch, c.Seed = b.id, b.addr, b.epoch, s.rng.Int64()
	if s.cfg.MaxFrame > 0 {
		c.MaxFrame = s.cfg.MaxFrame
	}
	n, err := s.cfg.NewNode(c)
	if err != nil {
		s.err = fmt.Errorf("sim: creating node %s: %w", b.id, err)
		return s.err
	}
	b.node = n
	b.state = stateUp
	b.joined = false
	b.pending = nil
	var phase time.Duration
	if s.cfg.TickPhases {
		phase = time.Duration(s.rng.Int64N(int64(s.cfg.Tick)))
	}
	inc := b.inc
	s.schedule(s.now+phase+s.cfg.Tick, func() { s.tick(b, inc) })
	return nil
}

// tick is a tick of incarnation inc of b: delivered to its node if b is
// up, then the next one is queued in s.ticks, Tick later, unless that
// incarnation crashed: its clock stops.
func (s *Sim) tick(b *broker, inc int) {
	if b.inc != inc {
		return
	}
	if b.state == stateUp {
		b.node.Tick()
		s.flush(b)
	}
	s.seq++
	s.ticks.push(tickEntry{at: s.now + s.cfg.Tick, seq: s.seq, b: b, inc: inc})
}

func (s *Sim) broker(id message.BrokerID) (*broker, error) {
	b, ok := s.brokers[id]
	if !ok {
		return nil, fmt.Errorf("sim: unknown broker %s", id)
	}
	return b, nil
}

// Bootstrap makes id the first broker of the overlay.
func (s *Sim) Bootstrap(id message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	s.tracef("%s bootstrap", id)
	s.input(b, 0, func() { b.node.Bootstrap() })
	return nil
}

// Join makes id join through the given joinpoints (the first that answers).
func (s *Sim) Join(id message.BrokerID, joinpoints ...message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	peers := make([]overlay.Peer, 0, len(joinpoints))
	for _, j := range joinpoints {
		jb, err := s.broker(j)
		if err != nil {
			return err
		}
		peers = append(peers, overlay.Peer{ID: jb.id, Addr: jb.addr})
	}
	s.tracef("%s join via %v", id, joinpoints)
	s.input(b, 0, func() { b.node.Join(peers) })
	return nil
}

// Joined reports whether id's current incarnation has announced "joined"
// or reports Joined.
func (s *Sim) Joined(id message.BrokerID) bool {
	b, ok := s.brokers[id]
	if !ok || !b.isJoined() {
		return false
	}
	s.noteJoined(b) // a node that reports Joined without a notice
	return true
}

// isJoined is Joined for a known broker (polled every tick while it joins).
func (b *broker) isJoined() bool {
	if b.state == stateCrashed {
		return false
	}
	if !b.joined && b.node.Joined() {
		b.joined, b.everJoined = true, true
	}
	return b.joined
}

// State is "up", "frozen" or "crashed".
func (s *Sim) State(id message.BrokerID) string {
	if b, ok := s.brokers[id]; ok {
		return b.state.String()
	}
	return "unknown"
}

// Brokers lists the brokers in creation order.
func (s *Sim) Brokers() []message.BrokerID {
	out := make([]message.BrokerID, len(s.order))
	for i, b := range s.order {
		out[i] = b.id
	}
	return out
}

// Crash kills a broker: its state and in-flight messages are lost, its
// clients are disconnected (and excluded from the guarantees), and its
// peers are told LinkDown only after Config.LinkDownAfter, if ever.
func (s *Sim) Crash(id message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	if b.state == stateCrashed {
		return fmt.Errorf("sim: crash %s: already crashed", id)
	}
	s.tracef("%s CRASH", id)
	s.noteFault()
	if b.restart >= 0 {
		// Crashed again before it rejoined: the next restart is judged.
		s.restarts[b.restart].dropped = true
		b.restart = -1
	}
	if b.node != nil {
		if p := b.node.Place(); p != nil {
			b.place = b.place[:0]
			for _, jp := range p {
				b.place = append(b.place, jp.ID)
			}
		}
	}
	s.crashDurable(b) // before its clients are excluded (durable.go)
	b.state = stateCrashed
	b.inc++
	b.node = nil
	b.pending = nil
	b.everCrashed = true
	for _, c := range b.clients {
		c.dead = true
		s.log.excludeClient(c)
	}
	b.clients = nil
	for _, l := range s.linksOf(b.id) {
		if l.broken {
			continue
		}
		l.broken = true
		s.reportDown(l, b.id)
	}
	return nil
}

// Restart starts a crashed broker again with its state lost and a larger
// epoch, rejoining through joinpoints (typically its former neighbours).
func (s *Sim) Restart(id message.BrokerID, joinpoints ...message.BrokerID) error {
	return s.RestartWith(id, RestartOptions{Joinpoints: joinpoints, StaleLink: -1})
}

// RestartOptions are how a broker restarts (RestartWith).
type RestartOptions struct {
	Joinpoints []message.BrokerID
	// StaleLink ≥ 0: the broker comes back on the same address while its
	// peers still hold links of its old incarnation not yet reported down;
	// each such peer is told LinkDown StaleLink after the restart (QUIC
	// notices by a stateless reset or the idle timeout), and what it sends
	// on the link until then is lost. < 0: only Config.LinkDownAfter, if
	// ever, tells them.
	StaleLink time.Duration
	// Resolve: the runtime's resolution of bare joinpoint addresses
	// (runtime.Runtime.resolveJoinpoints) before the core joins: every
	// joinpoint is dialled at once, and the core is given all that
	// answered, in order (a recovering broker answers a dial too); none
	// answering, the round is repeated after a pause that doubles up to
	// 5 s. Without it the joinpoints are known by name ("ID@addr", as the
	// testbed gives them) and the core dials them itself.
	Resolve bool
	// Place: the broker has a data directory: it rejoins through the place
	// it saved there first (broker.place), then through Joinpoints, as
	// the runtime does (runtime.Runtime.joinList).
	Place bool
	// Log: the broker finds its publication log again (Config.Core.Durable;
	// durable.go); otherwise the log is lost with the crash.
	Log bool
}

// RestartWith is Restart with options.
func (s *Sim) RestartWith(id message.BrokerID, o RestartOptions) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	if b.state != stateCrashed {
		return fmt.Errorf("sim: restart %s: it is %s, not crashed", id, b.state)
	}
	if o.StaleLink >= 0 {
		s.tracef("%s RESTART epoch %d (its old links stale for %v)", id, b.epoch+1, o.StaleLink)
	} else {
		s.tracef("%s RESTART epoch %d", id, b.epoch+1)
	}
	s.noteFault()
	var named []message.BrokerID // by name: not resolved (the runtime's ID@addr)
	if o.Place && len(b.place) > 0 {
		named = slices.Clone(b.place)
		o.Joinpoints = placeFirst(b.place, o.Joinpoints)[len(named):]
		s.tracef("%s rejoins through its place %v, then %v", id, named, o.Joinpoints)
	}
	if err := s.start(b); err != nil {
		return err
	}
	s.restoreDurable(b, o.Log)
	b.restart = len(s.restarts)
	s.restarts = append(s.restarts, restartRec{Restart: traffic.Restart{Broker: string(id), At: s.now, JoinedAt: -1}})
	if o.StaleLink >= 0 {
		for _, l := range s.linksOf(id) {
			p := l.bA
			if p == b {
				p = l.bB
			}
			if s.links[l.k] != l || !l.up || l.told[l.endOf(p.id)] || p.inc != l.incOf(p.id) {
				continue // replaced, closed, reported, or its peer restarted too
			}
			l := l
			s.input(p, o.StaleLink, func() { s.staleDown(l, p, id, "stale: the peer restarted") })
		}
	}
	if o.Resolve {
		for _, j := range o.Joinpoints {
			if _, err := s.broker(j); err != nil {
				return err
			}
		}
		s.resolveJoin(b, named, o.Joinpoints, 0, 0)
		return nil
	}
	return s.Join(id, append(named, o.Joinpoints...)...)
}

// placeFirst is the runtime's list of joinpoints for a broker with a
// saved place: the place, then the others not in it, at most 16.
func placeFirst(place, others []message.BrokerID) []message.BrokerID {
	out := slices.Clone(place)
	for _, j := range others {
		if !slices.Contains(place, j) {
			out = append(out, j)
		}
	}
	return out[:min(len(out), 16)]
}

// resolveJoin runs one round of b's runtime resolving its joinpoints
// (RestartOptions.Resolve): every one dialled at once, the core started
// with those that answered once every dial is answered, or another round
// after pause.
func (s *Sim) resolveJoin(b *broker, named, jps []message.BrokerID, round int, pause time.Duration) {
	inc := b.inc
	answered := make([]bool, len(jps))
	pending := len(jps)
	done := func() {
		if pending--; pending > 0 || b.inc != inc {
			return
		}
		var up []message.BrokerID
		for i, ok := range answered {
			if ok {
				up = append(up, jps[i])
			}
		}
		if len(named)+len(up) > 0 {
			s.tracef("%s: joinpoints %v answered (round %d)", b.id, up, round+1)
			_ = s.Join(b.id, append(slices.Clone(named), up...)...)
			return
		}
		s.tracef("%s: no joinpoint of %v answered (round %d); next round in %v", b.id, jps, round+1, pause)
		s.schedule(s.now+pause, func() {
			if b.inc == inc {
				s.resolveJoin(b, named, jps, round+1, min(2*pause, 5*time.Second))
			}
		})
	}
	if pause == 0 {
		failTimeout := time.Duration(s.cfg.Core.FailureTicks) * s.cfg.Tick
		pause = min(max(failTimeout, 200*time.Millisecond), 5*time.Second)
	}
	if len(jps) == 0 {
		if len(named) > 0 {
			_ = s.Join(b.id, named...)
		}
		return
	}
	reqAt := s.now
	for i, j := range jps {
		t := s.brokers[j]
		k := keyOf(b.id, t.id)
		s.stats.Dials++
		s.schedule(s.now+2*s.cfg.LinkDelay, func() {
			if b.inc != inc {
				return
			}
			// A broker that left has exited: nothing answers at its address.
			gone := t.state == stateCrashed || s.HasLeft(t.id)
			lost := t.state == stateUp && !gone && !s.cuts[k] && s.cfg.DialFailLive > 0 && s.rng.IntN(1000) < s.cfg.DialFailLive
			if t.state == stateUp && !gone && !s.cuts[k] && !lost && t != b {
				answered[i] = true
				done()
				return
			}
			s.stats.DialsFailed++
			failAt := reqAt + s.cfg.DialTimeout
			if s.cfg.DialFailDraw && gone || lost {
				failAt = s.now + time.Duration(s.rng.Int64N(int64(reqAt+s.cfg.DialTimeout-s.now)+1))
			}
			s.schedule(failAt, done)
		})
	}
}

// Stall freezes a broker for d (a scheduling stall of a slow process: it
// loses nothing, its peers see silence) and resumes it.
func (s *Sim) Stall(id message.BrokerID, d time.Duration) error {
	if err := s.Freeze(id); err != nil {
		return err
	}
	b := s.brokers[id]
	inc := b.inc
	s.At(s.now+d, func() {
		if b.inc == inc && b.state == stateFrozen {
			_ = s.Resume(id)
		}
	})
	return nil
}

// Freeze stops a broker without losing anything: inputs wait and are
// processed in order when it resumes; its peers see silence.
func (s *Sim) Freeze(id message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	if b.state != stateUp {
		return fmt.Errorf("sim: freeze %s: it is %s", id, b.state)
	}
	s.tracef("%s FREEZE", id)
	s.noteFault()
	b.state = stateFrozen
	return nil
}

// Resume unfreezes a broker and processes, in order, what reached it while
// it was frozen.
func (s *Sim) Resume(id message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	if b.state != stateFrozen {
		return fmt.Errorf("sim: resume %s: it is %s, not frozen", id, b.state)
	}
	s.tracef("%s RESUME (%d inputs waiting)", id, len(b.pending))
	s.noteFault()
	b.state = stateUp
	pending := b.pending
	b.pending = nil
	// Processed synchronously: an event already queued for this instant
	// must not overtake inputs that arrived earlier on the same link.
	for i := range pending {
		s.run(&pending[i])
	}
	return nil
}

// Cut breaks the link between a and b (both stay up): in-flight messages
// are lost, dials between them fail until Heal.
func (s *Sim) Cut(a, b message.BrokerID) error {
	if _, err := s.broker(a); err != nil {
		return err
	}
	if _, err := s.broker(b); err != nil {
		return err
	}
	k := keyOf(a, b)
	if s.cuts[k] {
		return fmt.Errorf("sim: cut %s-%s: already cut", a, b)
	}
	s.tracef("CUT %s-%s", a, b)
	s.noteFault()
	s.cuts[k] = true
	if l := s.links[k]; l != nil && !l.broken {
		l.broken = true
		s.reportDown(l, "")
	}
	return nil
}

// Heal ends a cut; the nodes must dial again to use the link.
func (s *Sim) Heal(a, b message.BrokerID) error {
	k := keyOf(a, b)
	if !s.cuts[k] {
		return fmt.Errorf("sim: heal %s-%s: not cut", a, b)
	}
	s.tracef("HEAL %s-%s", a, b)
	s.noteFault()
	delete(s.cuts, k)
	return nil
}

// linksOf lists b's links in a deterministic order.
func (s *Sim) linksOf(id message.BrokerID) []*link {
	var out []*link
	for k, l := range s.links {
		if k.a == id || k.b == id {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// reportDown tells the surviving end(s) of a broken link LinkDown after the
// idle timeout, unless the link has been replaced meanwhile. dead names the
// crashed end ("" for a cut).
func (s *Sim) reportDown(l *link, dead message.BrokerID) {
	if s.cfg.LinkDownAfter < 0 {
		return
	}
	for _, end := range []message.BrokerID{l.k.a, l.k.b} {
		if end == dead {
			continue
		}
		b := s.brokers[end]
		peer := l.k.a
		if peer == end {
			peer = l.k.b
		}
		s.input(b, s.cfg.LinkDownAfter, func() { s.staleDown(l, b, peer, "idle timeout") })
	}
}

// staleDown tells b, an end of the broken link l, LinkDown for it (at the
// idle timeout, or when a restarted peer resets it), unless the link was
// replaced, closed, or already reported to b.
func (s *Sim) staleDown(l *link, b *broker, peer message.BrokerID, why string) {
	end := l.endOf(b.id)
	if s.links[l.k] != l || !l.up || l.told[end] {
		return
	}
	l.told[end] = true
	s.tracef("%s linkdown %s (%s)", b.id, peer, why)
	b.node.LinkDown(peer)
}

// endOf is 0 for l.k.a, 1 for l.k.b.
func (l *link) endOf(id message.BrokerID) int {
	if id == l.k.a {
		return 0
	}
	return 1
}

// --- network ---

func (l *link) incOf(id message.BrokerID) int {
	if id == l.k.a {
		return l.incA
	}
	return l.incB
}

func (s *Sim) alive(l *link) bool {
	if l == nil || !l.up || l.broken || len(s.cuts) > 0 && s.cuts[l.k] {
		return false
	}
	a, b := l.bA, l.bB
	return a.inc == l.incA && b.inc == l.incB && a.state != stateCrashed && b.state != stateCrashed
}

func (s *Sim) delay() time.Duration {
	d := s.cfg.LinkDelay
	if s.cfg.LinkJitter > 0 {
		d += time.Duration(s.rng.Int64N(int64(s.cfg.LinkJitter)))
	}
	return d
}

type slowDial struct {
	inc   int // the incarnation that dialled
	asked bool
}

func (s *Sim) dial(b *broker, to message.BrokerID) {
	if sd := b.slowDials[to]; sd != nil && sd.inc == b.inc {
		sd.asked = true // the runtime's dial in flight answers (runtime.Runtime.dial)
		return
	}
	s.stats.Dials++
	inc := b.inc
	reqAt := s.now
	t, ok := s.brokers[to]
	if !ok || to == b.id {
		s.stats.DialsFailed++
		s.tracef("%s dial %s: no such broker", b.id, to)
		s.input(b, 0, func() { b.node.DialFailed(to) })
		return
	}
	k := keyOf(b.id, to)
	s.schedule(s.now+2*s.cfg.LinkDelay, s.dialDone(b, t, to, inc, reqAt, k))
}

// dialDone is the completion of b's dial to t (to) requested at reqAt.
func (s *Sim) dialDone(b, t *broker, to message.BrokerID, inc int, reqAt time.Duration, k linkKey) func() {
	return func() {
		if b.inc != inc {
			return
		}
		lostHandshake := t.state == stateUp && !s.cuts[k] && s.cfg.DialFailLive > 0 && s.rng.IntN(1000) < s.cfg.DialFailLive
		if t.state != stateUp || s.cuts[k] || lostHandshake {
			s.stats.DialsFailed++
			failAt := reqAt + s.cfg.DialTimeout // a frozen or cut-off peer: the timeout
			if s.cfg.DialFailDraw && t.state == stateCrashed || lostHandshake {
				failAt = s.now + time.Duration(s.rng.Int64N(int64(reqAt+s.cfg.DialTimeout-s.now)+1))
			}
			switch {
			case lostHandshake:
				s.tracef("%s dial %s: failed (lost handshake), answered at %s", b.id, to, fmtTime(failAt))
			case s.cfg.DialFailDraw:
				s.tracef("%s dial %s: failed (%s, cut=%v), answered at %s", b.id, to, t.state, s.cuts[k], fmtTime(failAt))
			default:
				s.tracef("%s dial %s: failed (%s, cut=%v)", b.id, to, t.state, s.cuts[k])
			}
			s.scheduleFor(failAt, b, func() { b.node.DialFailed(to) })
			return
		}
		if d, ok := s.slowNext[[2]message.BrokerID{b.id, to}]; ok {
			delete(s.slowNext, [2]message.BrokerID{b.id, to})
			if d > s.cfg.DialTimeout {
				s.slowHandshake(b, t, to, inc, reqAt, k, reqAt+d)
				return
			}
		}
		if s.cfg.SlowHandshake > 0 && s.slowRng.IntN(1000) < s.cfg.SlowHandshake {
			failAt := reqAt + s.cfg.DialTimeout
			s.slowHandshake(b, t, to, inc, reqAt, k, failAt+time.Duration(s.slowRng.Int64N(int64(s.cfg.DialPatience-s.cfg.DialTimeout)+1)))
			return
		}
		s.linkDialled(b, t, to, reqAt, k)
	}
}

// SlowDial makes the next dial from a to b a handshake that takes d (a
// starved machine): longer than the dial timeout, the core is told
// DialFailed at the timeout and the link comes up at d (as the runtime's
// slow handshakes, SlowHandshake), unless b is down or cut off by then.
func (s *Sim) SlowDial(a, b message.BrokerID, d time.Duration) {
	if s.slowNext == nil {
		s.slowNext = map[[2]message.BrokerID]time.Duration{}
	}
	s.slowNext[[2]message.BrokerID{a, b}] = d
}

// slowHandshake is a dial of a live peer whose handshake outlasts the dial
// timeout: DialFailed at the timeout, the link at upAt (SlowHandshake,
// SlowDial).
func (s *Sim) slowHandshake(b, t *broker, to message.BrokerID, inc int, reqAt time.Duration, k linkKey, upAt time.Duration) {
	failAt := reqAt + s.cfg.DialTimeout
	s.tracef("%s dial %s: slow handshake, answered at %s, up at %s", b.id, to, fmtTime(failAt), fmtTime(upAt))
	sd := &slowDial{inc: inc}
	if b.slowDials == nil {
		b.slowDials = map[message.BrokerID]*slowDial{}
	}
	b.slowDials[to] = sd
	s.scheduleFor(failAt, b, func() { b.node.DialFailed(to) })
	s.schedule(upAt, func() {
		if b.inc != inc {
			return
		}
		if b.slowDials[to] == sd {
			delete(b.slowDials, to)
		}
		if t.state != stateUp || s.cuts[k] {
			s.tracef("%s dial %s: slow handshake failed (%s, cut=%v; asked again: %v)", b.id, to, t.state, s.cuts[k], sd.asked)
			if sd.asked {
				s.scheduleFor(s.now, b, func() { b.node.DialFailed(to) })
			}
			return
		}
		s.linkDialled(b, t, to, reqAt, k)
	})
}

// linkDialled brings up the link b dialled to t at reqAt (unless one is
// up already) and tells both ends.
func (s *Sim) linkDialled(b, t *broker, to message.BrokerID, reqAt time.Duration, k linkKey) {
	{
		if l := s.links[k]; s.alive(l) {
			if l.since >= reqAt {
				// Both dialled at once: the transport keeps one link and
				// each side sees exactly one LinkUp for it.
				s.tracef("%s dial %s: merged with simultaneous dial", b.id, to)
				return
			}
			s.tracef("%s dial %s: already up", b.id, to)
			s.scheduleFor(s.now, b, func() { b.node.LinkUp(to) })
			return
		}
		s.nextLink++
		l := &link{id: s.nextLink, k: k, since: s.now, up: true}
		if k.a == b.id {
			l.incA, l.incB, l.bA, l.bB = b.inc, t.inc, b, t
		} else {
			l.incA, l.incB, l.bA, l.bB = t.inc, b.inc, t, b
		}
		var acc time.Duration // t, the acceptor, is told LinkUp acc later
		if s.cfg.AcceptDelay > 0 {
			acc = time.Duration(s.rng.Int64N(int64(s.cfg.AcceptDelay) + 1))
		}
		toT := l.endOf(b.id) // the direction from b to t
		l.last[toT] = s.now + acc
		l.upAt[1-toT] = s.now + acc
		old := s.links[k]
		if old != nil {
			old.replaced = true
		}
		s.links[k] = l
		for _, x := range [2]*broker{b, t} {
			if x.linkTo == nil {
				x.linkTo = map[message.BrokerID]*link{}
			}
		}
		b.linkTo[to] = l
		t.linkTo[b.id] = l
		if acc > 0 {
			s.tracef("link %s-%s up (#%d, dialled by %s, accepted %v later)", b.id, to, l.id, b.id, acc)
		} else {
			s.tracef("link %s-%s up (#%d, dialled by %s)", b.id, to, l.id, b.id)
		}
		// An end that still holds the link l replaces (of the same
		// incarnation, never told it went down) is told LinkDown first,
		// as the runtime does when a new link replaces an old one.
		for _, x := range [2]struct {
			b    *broker
			peer message.BrokerID
			at   time.Duration
		}{{b, to, s.now}, {t, b.id, s.now + acc}} {
			if e := old.endOfOrNeg(x.b.id); s.cfg.ReplacedDown && e >= 0 && old.up && !old.told[e] && old.incOf(x.b.id) == x.b.inc {
				old.told[e] = true
				x := x
				s.scheduleFor(x.at, x.b, func() {
					s.tracef("%s linkdown %s (replaced by a new link)", x.b.id, x.peer)
					x.b.node.LinkDown(x.peer)
				})
			}
		}
		s.scheduleFor(s.now, b, func() { b.node.LinkUp(to) })
		s.scheduleFor(s.now+acc, t, func() { t.node.LinkUp(b.id) })
	}
}

func (s *Sim) closeLink(b *broker, to message.BrokerID) {
	k := keyOf(b.id, to)
	l := s.links[k]
	if l == nil || !l.up || l.incOf(b.id) != b.inc {
		return
	}
	s.tracef("%s close %s", b.id, to)
	wasAlive := s.alive(l)
	l.broken = true
	l.up = false
	if t := s.brokers[to]; wasAlive {
		// The peer learns of a graceful close after one link delay.
		s.input(t, s.cfg.LinkDelay, func() {
			if s.links[k] == l {
				t.node.LinkDown(b.id)
			}
		})
	}
}

func (s *Sim) send(b *broker, env overlay.Envelope) {
	typ := env.Msg.Type()
	name := s.countType(typ)
	if typ != message.TypePub {
		b.countControl(typ) // what the core output, sent or not (as its own counters)
	}
	l := b.linkTo[env.To] // s.links[keyOf(b.id, env.To)]
	// dir 0: b is l.k.a (brokers are unique by id: pointers compare).
	dir, inc := 0, 0
	if l != nil {
		inc = l.incA
		if l.bA != b {
			dir, inc = 1, l.incB
		}
	}
	if l == nil || !l.up || inc != b.inc || s.now < l.upAt[dir] {
		s.stats.NoLinkDrops++
		s.tracef("%s -> %s DROPPED (no link) %s", b.id, env.To, name)
		return
	}
	s.msgCount[typ]++
	at := s.now + s.delay()
	if at < l.last[dir] {
		at = l.last[dir] // FIFO per link direction
	}
	l.last[dir] = at
	t := l.bB // the other end (brokers are never removed: s.brokers[env.To])
	if dir == 1 {
		t = l.bA
	}
	if s.cfg.Trace != nil {
		s.tracef("%s -> %s %s %+v", b.id, env.To, name, env.Msg)
	}
	msg := env.Msg
	var frame []byte
	if s.cfg.Wire {
		var err error
		if s.enc == nil {
			s.enc = wire.NewEncoder()
		}
		if frame, err = s.enc.AppendFrame(nil, msg); err != nil {
			s.log.problem(&s.log.Errors, "%s -> %s %s: cannot encode: %v", b.id, env.To, name, err)
			return
		}
	}
	d := s.newDelivery()
	d.l, d.dir, d.to, d.msg = l, int32(dir), t, msg
	if frame != nil {
		d.frame = frame
	}
	s.enqueue(at, t, nil, d)
}

// deliver hands a message in flight to its receiver t (an up broker of
// the incarnation it was sent to), unless its link broke meanwhile.
func (s *Sim) deliver(t *broker, d *delivery) {
	msg := d.msg
	from := d.l.k.a // the sender (see send)
	if d.dir == 1 {
		from = d.l.k.b
	}
	if d.l.replaced || !s.alive(d.l) { // d.l was s.links[keyOf(from, t.id)] when sent
		s.stats.InFlightLost++
		s.tracef("%s -> %s LOST in flight %s", from, t.id, s.countType(msg.Type()))
		s.releaseDelivery(d)
		return
	}
	if s.cfg.Wire { // (then send set d.frame; not read otherwise: its cache line stays cold)
		limit := len(d.frame) + 16
		if s.cfg.MaxFrame > 0 {
			limit = s.cfg.MaxFrame // a real reader refuses a larger frame
		}
		m, _, err := wire.Decode(d.frame, limit)
		if err != nil {
			s.log.problem(&s.log.Errors, "%s -> %s %s: cannot decode: %v", from, t.id, s.countType(msg.Type()), err)
			s.releaseDelivery(d)
			return
		}
		msg = m
	}
	s.releaseDelivery(d)
	t.node.Step(from, msg)
}

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

// endOfOrNeg is endOf for a possibly nil link (-1 when nil).
func (l *link) endOfOrNeg(id message.BrokerID) int {
	if l == nil {
		return -1
	}
	return l.endOf(id)
}
