package overlay

import (
	"fmt"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
)

// Config is the configuration of the pure protocol core of one broker. All
// durations are counted in ticks: the core never reads a clock.
type Config struct {
	// ID names this broker in the overlay. Required.
	ID message.BrokerID
	// Addr is this broker's address, carried in topology maps so that
	// others can dial it (opaque to the core).
	Addr string
	// Epoch is the incarnation; a restarted broker uses a larger epoch than
	// before, so that its old stamps and subscriptions are never confused
	// with new ones. Must be ≥ 1.
	Epoch uint64
	// Delta is δ ≥ 1: how many adjacent brokers may be down at once.
	Delta int
	// HeartbeatTicks: a heartbeat is sent on every link that carried
	// nothing else for this many ticks.
	HeartbeatTicks int
	// FailureTicks: a peer silent for this many ticks is suspected.
	FailureTicks int
	// DACKTicks: one aggregated DACK per link every this many ticks.
	DACKTicks int
	// GoneAfterTicks: a broker suspected this long is declared gone
	// (PROTOCOL §6): its subscriptions are withdrawn on its behalf.
	GoneAfterTicks int
	// MaxQueue bounds the message queue; at the bound Publish is refused
	// with PubAck{Err:"backpressure"} (publications routed through this
	// broker from peers are still accepted: dropping them would be a loss;
	// the bound is enforced at the edges).
	MaxQueue int
	// MaxSources bounds the per-source duplicate-suppression state. At the
	// bound the oldest-seen source is forgotten; a late retransmission of
	// that source could then be delivered twice, so keep it well above the
	// number of live publishers.
	MaxSources int
	// JoinRetryTicks: a join (or recovery) step not answered within this
	// many ticks is retried with the next joinpoint / peer.
	JoinRetryTicks int
	// RetryMaxTicks caps every backoff of the core (retry.go): a round of
	// joinpoints in vain, a peer's failed dials. 0: JoinRetryTicks (a round
	// costs a few messages; a restarted broker must not wait long for a
	// joinpoint that has recovered).
	RetryMaxTicks int
	// MaxFrame is the largest frame (type and body, bytes) a peer accepts:
	// limits.max_frame, the same on every broker. A state transfer or a
	// leave repair that would not fit is sent in parts (parts.go).
	MaxFrame int
	// Tick is the real time of one tick: it turns the milliseconds some
	// messages carry (DurableFlood.Window) into ticks.
	Tick time.Duration
	// Seed is the only source of randomness: the jitter of the backoffs
	// (retry.go).
	Seed int64
	// Durable: local publications are logged (Ready.Appends, before
	// their PubAcks) and released once safe (Ready.Released); see
	// durable.go.
	Durable bool
	// MemoryLog (with Durable): the log lives in this core only (the
	// runtime's durability memory), so Ready.Appends and Ready.Released
	// stay empty: nothing persists them.
	MemoryLog bool
	// MaxLogBytes bounds the log (message.LogSize of the publications
	// not yet released; 0: unbounded). At the bound Publish is refused
	// with ErrLogFull until downstream makes enough safe.
	MaxLogBytes int64
	// RetainTicks and RetainBytes (with Durable): publications stay in
	// the log after they are safe downstream, for durable subscriptions
	// (dursub.go), until older than RetainTicks or beyond RetainBytes of
	// such publications (0: no bound of that kind; both 0: released as
	// soon as safe).
	RetainTicks int
	RetainBytes int64
	// MaxCatchupBytes bounds what a durable subscription's edge buffers
	// before the switch to live (0: unbounded); beyond it the
	// subscription ends with an error (its token is unchanged).
	MaxCatchupBytes int64
	// KeepAwayTicks: a live durable subscription whose client's session
	// closes stays installed at its edge this long, holding what it
	// delivered that the client had not acknowledged and what arrives,
	// so that a resume at this edge needs no flood (resume.go). 0: not
	// kept (a resume anywhere floods).
	KeepAwayTicks int
	// MaxHeldBytes bounds what all durable subscriptions here hold for
	// such resumes (0: unbounded); a subscription that would pass it stops
	// holding (an away one is withdrawn), and its next resume floods.
	MaxHeldBytes int64
	// PersistHeld: what the durable subscriptions hold here is reported
	// in Ready.Held, for an environment that keeps it across a restart
	// and gives it back (RestoreHeld); see held.go.
	PersistHeld bool
}

// DefaultConfig returns the core's defaults for a 10 ms tick: the
// testbed-like timings of PROTOCOL §6 (50 ms heartbeat, 200 ms timeout).
func DefaultConfig() Config {
	return Config{
		Epoch:          1,
		Delta:          2,   // two adjacent crashes tolerated
		HeartbeatTicks: 5,   // 50 ms at 10 ms ticks
		FailureTicks:   20,  // 200 ms: four heartbeats lost in a row
		DACKTicks:      5,   // 50 ms: queues purge within ~(δ+2) periods
		GoneAfterTicks: 400, // 20 × the failure timeout (PROTOCOL §6)
		MaxQueue:       100_000,
		MaxSources:     1 << 20, // publishers remembered for duplicate suppression
		JoinRetryTicks: 40,      // 2 × the failure timeout
		MaxFrame:       wire.DefaultMaxFrame,
		Tick:           10 * time.Millisecond,
	}
}

// validate fills zero values from DefaultConfig and rejects nonsense with
// an error naming the field.
func (c *Config) validate() error {
	d := DefaultConfig()
	if c.ID == "" {
		return fmt.Errorf("overlay: config: ID is required")
	}
	if c.Epoch == 0 {
		return fmt.Errorf("overlay: config: Epoch must be ≥ 1")
	}
	if c.Delta == 0 {
		c.Delta = d.Delta
	}
	if c.Delta < 1 || c.Delta > 16 {
		return fmt.Errorf("overlay: config: Delta %d out of range [1, 16]", c.Delta)
	}
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	fill(&c.HeartbeatTicks, d.HeartbeatTicks)
	fill(&c.FailureTicks, d.FailureTicks)
	fill(&c.DACKTicks, d.DACKTicks)
	fill(&c.GoneAfterTicks, d.GoneAfterTicks)
	fill(&c.MaxQueue, d.MaxQueue)
	fill(&c.MaxSources, d.MaxSources)
	fill(&c.JoinRetryTicks, d.JoinRetryTicks)
	fill(&c.MaxFrame, d.MaxFrame)
	fill(&c.RetryMaxTicks, c.JoinRetryTicks)
	if c.Tick <= 0 {
		c.Tick = d.Tick
	}
	switch {
	case c.HeartbeatTicks < 1:
		return fmt.Errorf("overlay: config: HeartbeatTicks %d must be ≥ 1", c.HeartbeatTicks)
	case c.FailureTicks < 2*c.HeartbeatTicks:
		return fmt.Errorf("overlay: config: FailureTicks %d must be at least two heartbeats (2 × %d)", c.FailureTicks, c.HeartbeatTicks)
	case c.DACKTicks < 1:
		return fmt.Errorf("overlay: config: DACKTicks %d must be ≥ 1", c.DACKTicks)
	case c.GoneAfterTicks <= c.FailureTicks:
		return fmt.Errorf("overlay: config: GoneAfterTicks %d must exceed FailureTicks %d", c.GoneAfterTicks, c.FailureTicks)
	case c.MaxQueue < 1:
		return fmt.Errorf("overlay: config: MaxQueue %d must be ≥ 1", c.MaxQueue)
	case c.MaxSources < 1:
		return fmt.Errorf("overlay: config: MaxSources %d must be ≥ 1", c.MaxSources)
	case c.JoinRetryTicks < 1:
		return fmt.Errorf("overlay: config: JoinRetryTicks %d must be ≥ 1", c.JoinRetryTicks)
	case c.RetryMaxTicks < 1:
		return fmt.Errorf("overlay: config: RetryMaxTicks %d must be ≥ 1", c.RetryMaxTicks)
	case c.MaxFrame < minMaxFrame:
		return fmt.Errorf("overlay: config: MaxFrame %d must be ≥ %d", c.MaxFrame, minMaxFrame)
	}
	return nil
}

// Peer names a broker and its address.
type Peer struct {
	ID   message.BrokerID
	Addr string
}

// Envelope is a message to send on the up link to To.
type Envelope struct {
	To  message.BrokerID
	Msg message.Message
}

// ClientEnvelope is a message to a local client session: PubAck, SubAck,
// UnsubAck, Deliver or Gap.
type ClientEnvelope struct {
	To  message.ClientID
	Msg message.Message
}

// NoticeKind names an event reported for logs, metrics and checkers.
type NoticeKind string

const (
	NoticeSuspected   NoticeKind = "suspected"    // Peer has been silent for FailureTicks
	NoticeUnsuspected NoticeKind = "unsuspected"  // Peer spoke again after a suspicion
	NoticeBypassUp    NoticeKind = "bypass-up"    // a bypass link to Peer is now used
	NoticeBypassDown  NoticeKind = "bypass-down"  // the bypass link to Peer is no longer used
	NoticeJoined      NoticeKind = "joined"       // this broker is a full member (join or recovery confirmed)
	NoticeLeft        NoticeKind = "left"         // this broker's graceful leave is complete
	NoticeGone        NoticeKind = "gone"         // Peer was suspected for GoneAfterTicks: its subscriptions are withdrawn
	NoticeJoinFailed  NoticeKind = "join-failed"  // every joinpoint refused or failed; Detail says why
	NoticeLinkRefused NoticeKind = "link-refused" // a link from Peer was not expected (unknown broker); closed
	NoticeGap         NoticeKind = "gap"          // a loss beyond δ was detected; Detail describes it
	NoticeMemberLeft  NoticeKind = "member-left"  // Peer left the overlay gracefully
	NoticeRecovered   NoticeKind = "recovered"    // Peer (joining, or restarted under a new epoch) is routable again
	NoticeNotRoutable NoticeKind = "not-routable" // Peer is joining or recovering: bypassed until it is joined
	NoticeRemoved     NoticeKind = "removed"      // this broker was removed from the tree as gone while alive (Peer told it): restart it as a new incarnation
)

// Core is the method set of a protocol core that an environment drives:
// its inputs (Step, Tick, links, client sessions), its outputs (Ready) and
// where it stands (Joined, Place). *Node is one; the replica baseline
// (package replicas) and the simulator's reference node are others. The
// runtime (overlay/runtime.Core) and the simulator (sim.Node) each add what
// they read besides. Every method is called from one loop; none blocks.
type Core interface {
	Bootstrap()
	Join(joinpoints []Peer)
	Tick()
	Step(from message.BrokerID, m message.Message)
	LinkUp(peer message.BrokerID)
	LinkDown(peer message.BrokerID)
	DialFailed(peer message.BrokerID)
	ClientOpen(c message.ClientID)
	ClientClose(c message.ClientID)
	Client(c message.ClientID, m message.Message)
	// Leave starts a graceful leave (a core that cannot leave does
	// nothing).
	Leave()
	// Restore gives a restarted core its publication log before it joins
	// (a core without a log ignores it).
	Restore(last []message.PubID, pubs []message.Pub)
	// RestoreHeld gives a restarted core what its durable subscriptions
	// held, before it joins (a core that holds nothing ignores it).
	RestoreHeld(subs []HeldSub)
	// Ready returns the outputs produced since the last call and clears
	// them; the environment acts on them in order.
	Ready() Ready
	Joined() bool
	// Place is where a restart should rejoin: what the runtime keeps in
	// the broker's data directory. nil: none.
	Place() []Peer
}

var _ Core = (*Node)(nil)

// Notice is an event the core reports.
type Notice struct {
	Kind   NoticeKind
	Peer   message.BrokerID
	Detail string
}

// Ready is everything the core asks its environment to do, in order.
type Ready struct {
	Dials     []Peer             // establish a link to these peers (answer LinkUp or DialFailed)
	Closes    []message.BrokerID // close the link to these peers
	Messages  []Envelope         // send, in this order, each on the up link to To (FIFO per link)
	ToClients []ClientEnvelope
	Notices   []Notice
	// Appends are publications to persist in the log before ToClients is
	// sent (Config.Durable); Released the per-source seqs up to which
	// the log may drop them (safe downstream).
	Appends  []message.Pub
	Released []message.PubID
	// Held: what changed in what durable subscriptions hold here, to keep
	// across a restart (Config.PersistHeld, held.go).
	Held HeldChanges
}

// Ready returns everything produced since the last call, and clears it.
func (n *Node) Ready() Ready {
	n.takeHeld()
	r := n.out
	n.out = Ready{}
	return r
}

// Recycle hands back a Ready the environment has carried out and keeps no
// reference to: the outputs to come are appended to its slices.
func (n *Node) Recycle(done Ready) { n.out.Reuse(done) }

// Reuse makes r, empty so far, append to done's message slices instead of
// growing new ones. done is the caller's and must not be used again; it
// keeps nothing alive (its entries are cleared). Without it every batch of
// a broker fanning out to 100 subscribers grew its slices from nothing
// (growslice was 13 % of that broker's CPU).
func (r *Ready) Reuse(done Ready) {
	if r.Messages == nil {
		clear(done.Messages)
		r.Messages = done.Messages[:0]
	}
	if r.ToClients == nil {
		clear(done.ToClients)
		r.ToClients = done.ToClients[:0]
	}
}

// Pending reports whether Ready has anything to return.
func (n *Node) Pending() bool {
	o := &n.out
	return len(o.Messages)+len(o.ToClients)+len(o.Notices)+len(o.Dials)+len(o.Closes)+len(o.Appends)+len(o.Released) > 0 || n.held.pending()
}

// LinkStatus describes one link of the node.
type LinkStatus struct {
	Peer      message.BrokerID
	Up        bool // a link is established
	Tree      bool // Peer is a tree neighbour (false: a bypass peer)
	Suspected bool // Peer is currently suspected
	Silent    int  // ticks since anything arrived from Peer
}

// Status is a read-only snapshot for /state, metrics and checkers.
type Status struct {
	ID        message.BrokerID
	Epoch     uint64
	Joined    bool
	Leaving   bool
	Left      bool
	Parent    message.BrokerID
	Map       []message.MapNode  // the (δ+1)-neighbourhood map, sorted by ID
	Links     []LinkStatus       // sorted by peer
	Suspected []message.BrokerID // sorted
	Gone      []message.BrokerID // sorted
	Bypasses  []message.BrokerID // non-neighbour peers currently used as next hops, sorted
	Subs      int                // routing table size (entries)
	LocalSubs int                // subscriptions of local clients
	QueueLen  int                // publications in the message queue
	// Arrived and Discarded are this broker's own DACK watermarks, per
	// upstream broker (keyed "id/epoch").
	Arrived   map[string]uint64
	Discarded map[string]uint64
	Counters  Counters
	Log       LogStatus // the publication log (Config.Durable)
	Durable   DurableStatus
}

// Counters count what the node did since it started.
type Counters struct {
	PubsIn            uint64            // publications received from peers (duplicates included)
	Duplicates        uint64            // publications dropped as duplicates
	PubsOut           uint64            // publications sent to peers (retransmissions included)
	Retransmitted     uint64            // publications sent again over a new link
	Published         uint64            // publications accepted from local clients
	Delivered         uint64            // Deliver messages to local clients
	Purged            uint64            // publications purged from the queue
	Backpressure      uint64            // Publish refused at the queue bound
	Gaps              uint64            // Gap notices sent to local clients
	LogFull           uint64            // Publish refused at the log bound (ErrLogFull)
	Reoffered         uint64            // logged publications offered again after a restart
	DurableGaps       uint64            // Gaps to durable subscriptions (retention released what they had not consumed)
	DurableDuplicates uint64            // publications a durable subscription's token had consumed already: not delivered
	ResumedHere       uint64            // durable subscriptions resumed from what this edge held, without a flood
	HeldOver          uint64            // durable subscriptions that stopped holding at MaxHeldBytes
	AwayExpired       uint64            // away durable subscriptions withdrawn after KeepAwayTicks
	HeldRestored      uint64            // durable subscriptions installed again from their held records after a restart
	HeldDropped       uint64            // restored durable subscriptions forgotten (hosted elsewhere now, or refused)
	ZombiePubs        uint64            // publications dropped from a peer removed while alive (peer.isZombie)
	CatchupDropped    uint64            // Catchups with no way on toward their subscriber's edge
	Control           map[string]uint64 // control messages sent, by message type name
}
