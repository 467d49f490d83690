package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/internal/storage"
	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Transport is what the runtime needs from a broker transport: dialling.
// Links and sessions, dialled or accepted, are reported to the runtime
// through its Handler methods (PeerUp, PeerMessages, ... below). Two
// transports implement both sides: QUIC (internal/quic, adapted in quic.go:
// ListenQUIC) and its in-memory twin (memnet.go: MemNetwork), for tests and
// the testbed's inproc mode.
type Transport interface {
	// Dial establishes an authenticated link to the broker peer at addr
	// (peer may be empty when only the address is known: a joinpoint). A
	// successful dial is also reported through PeerUp; reporting it twice
	// is harmless.
	Dial(ctx context.Context, peer message.BrokerID, addr string) (PeerLink, error)
}

// PeerLink is one up link to a broker.
type PeerLink interface {
	Peer() message.BrokerID
	// TrySend enqueues m without blocking; false when the link's send
	// queue is full (or the link is closed).
	TrySend(m message.Message) bool
	// Send enqueues m, waiting while the queue is full; it fails once the
	// link is closed.
	Send(m message.Message) error
	// Queued is the number of frames waiting to be written.
	Queued() int
	Close(reason string)
}

// ClientSession is one client connection, whatever carries it (QUIC today,
// WebSocket next): the runtime maps it to a message.ClientID of its own.
type ClientSession interface {
	TrySend(m message.Message) bool
	Close(reason string)
}

// Handler is what a transport reports to; *Runtime implements it. For one
// link (or session) the calls come from one goroutine, in this order: PeerUp,
// PeerMessages in arrival order, PeerDown. A call may block while the
// runtime's input queue is full: that is the backpressure on the sender.
// The slice of a batch may be reused once the call returns.
type Handler interface {
	PeerUp(l PeerLink)
	PeerMessages(l PeerLink, ms []message.Message)
	PeerDown(l PeerLink, err error)
	ClientUp(s ClientSession)
	ClientMessages(s ClientSession, ms []message.Message)
	ClientDown(s ClientSession, err error)
}

var _ Handler = (*Runtime)(nil)

// Runtime drives one Node: a single goroutine (Run) owns it, feeds it the
// transport's inputs and a tick every BrokerConfig.Tick, and carries out
// what it asks after every batch of inputs.
//
// Bounds and what happens at them:
//   - inputs wait in a channel of Limits.InputQueue; when it is full the
//     transport's reader goroutines block, which pushes back on the senders
//     through QUIC flow control;
//   - a broker link more than half full is congested: for a tick, new
//     Publish requests from local clients are answered
//     PubAck{Err:"backpressure"} (the client library retries them), so
//     publishers slow down before links fill up;
//   - a broker link whose send queue is full gets up to Limits.LinkBlock of
//     waiting for room (the whole runtime waits: everything slows down);
//     a link that frees no room in that time is stuck (its peer is frozen
//     or overwhelmed): it is closed as failed and the core is told
//     LinkDown (it bypasses the peer if it stays silent, and retransmits
//     what may have been lost);
//   - a client whose send queue is full is disconnected ("slow consumer"),
//     logged and counted, and the core is told ClientClose;
//   - sessions beyond Limits.MaxClients and subscriptions beyond
//     Limits.MaxSubsPerClient are refused.
//
// Nothing the core outputs is dropped silently: an output with no link or
// session to carry it (the link just went down; the core learns it from the
// next input) is logged at debug level and counted in
// deltapub_unroutable_messages_total.
type Runtime struct {
	cfg   BrokerConfig
	epoch uint64 // this incarnation's, the core's Config.Epoch
	node  Core   // *overlay.Node, or *replicas.Node in replicas mode (core.go)
	// conflating counts the conflated subscriptions of all sessions
	// (conflate.go): zero keeps the delivery path free of the check.
	conflating int
	log        zerolog.Logger
	m          *runtimeMetrics
	now        func() time.Time

	in   chan event
	done chan struct{} // closed when Run returns
	kill chan struct{} // closed by Kill
	once sync.Once     // closes kill
	tr   Transport

	// State below is owned by the Run goroutine.
	started    bool                            // Bootstrap or Join called
	links      map[message.BrokerID]*linkState // current link per peer
	dialing    map[message.BrokerID]dialState  // dials in flight
	sessions   map[message.ClientID]*sessionState
	sessionIDs map[ClientSession]message.ClientID
	nextClient message.ClientID
	congested  time.Time                 // until then, Publish is answered "backpressure"
	highWater  int                       // a link with more frames queued is congested
	trace      bool                      // trace logging on: log every peer message
	answers    []overlay.ClientEnvelope  // the runtime's own answers, sent after the core's outputs
	laterAck   map[message.ClientID]bool // scratch of coalesceAcks
	denc       wire.DeliveryEncoder      // the publication being delivered (sendClients)
	runBuf     []overlay.ClientEnvelope  // scratch of sendDeliveries
	subsBuf    []uint64                  // scratch of sendDeliveries
	held       []heldQueue               // links and sessions to flush at the end of the drain
	leaving    bool
	left       bool
	removed    bool // NoticeRemoved: Run returns ErrRemoved
	joinFailed string
	// store keeps the place (nil: no data directory); placed is the
	// place last saved.
	store  storage.Store
	placed []storage.Joinpoint
	plog   *pubLog  // the publication log (nil: durability none; durable.go)
	hlog   *heldLog // the held log (nil: off; durable.go)

	joined       atomic.Bool // for /healthz, read by other goroutines
	logHasFailed atomic.Bool // the publication log failed (Health)
	cuts         linkCuts    // failure injection: links refused until healed (cut.go)
	dialCtx      context.Context
	stopDialing  context.CancelFunc
}

type evKind uint8

const (
	evPeerUp evKind = iota
	evPeerMsg
	evPeerDown
	evClientUp
	evClientMsg
	evClientDown
	evDialFailed
	evDialSlow // a dial's handshake outlasted dialTimeout; it goes on
	evDialed
	evJoinpoints // the joinpoints are known (resolveJoinpoints): start
	evCall
)

type event struct {
	kind  evKind
	link  PeerLink
	sess  ClientSession
	peer  message.BrokerID
	msg   message.Message
	msgs  []message.Message // a batch (evPeerMsg, evClientMsg) when msg is nil
	err   error
	peers []overlay.Peer // evJoinpoints
	call  func()
}

// ErrRemoved is Run's error when the overlay removed this broker from the
// tree as gone while it was alive (stalled or starved for gone_after; see
// overlay.NoticeRemoved). Its incarnation is dead to the overlay: the
// caller starts the broker again, as a new incarnation (RunBroker does).
var ErrRemoved = errors.New("runtime: removed from the overlay while alive (its neighbours declared it gone): restart it as a new incarnation")

// NewRuntime builds the core for cfg (which must be valid) with the given
// epoch. reg receives the metrics (nil: a fresh registry, see Registry).
func NewRuntime(cfg BrokerConfig, epoch uint64, log zerolog.Logger, reg *prometheus.Registry) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	node, err := newCore(&cfg, epoch)
	if err != nil {
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	r := &Runtime{
		cfg:        cfg,
		epoch:      epoch,
		node:       node,
		log:        log,
		now:        time.Now,
		in:         make(chan event, cfg.Limits.InputQueue),
		done:       make(chan struct{}),
		kill:       make(chan struct{}),
		links:      map[message.BrokerID]*linkState{},
		dialing:    map[message.BrokerID]dialState{},
		sessions:   map[message.ClientID]*sessionState{},
		sessionIDs: map[ClientSession]message.ClientID{},
		laterAck:   map[message.ClientID]bool{},
	}
	r.highWater = max(1, cfg.Limits.SendQueue/2)
	r.trace = log.GetLevel() <= zerolog.TraceLevel
	r.m = newRuntimeMetrics(reg, func() float64 { return float64(len(r.in)) })
	return r, nil
}

// Registry is where the runtime's metrics are registered.
func (r *Runtime) Registry() *prometheus.Registry { return r.m.reg }

// Joined reports whether the broker is a full member of the overlay (and
// has not left): what /healthz answers.
func (r *Runtime) Joined() bool { return r.joined.Load() }

// Do runs f on the runtime goroutine with the core, and waits for it. f
// must not block. It fails when ctx ends first or the runtime has stopped.
func (r *Runtime) Do(ctx context.Context, f func(n Core)) error {
	finished := make(chan struct{})
	ev := event{kind: evCall, call: func() { f(r.node); close(finished) }}
	select {
	case r.in <- ev:
	case <-r.done:
		return errors.New("runtime: stopped")
	case <-ctx.Done():
		return fmt.Errorf("runtime: busy: %w", ctx.Err())
	}
	select {
	case <-finished:
		return nil
	case <-r.done:
		return errors.New("runtime: stopped")
	case <-ctx.Done():
		return fmt.Errorf("runtime: busy: %w", ctx.Err())
	}
}

// put hands an event to the runtime goroutine, waiting while the input
// queue is full (backpressure on the caller, a transport reader). After Run
// returned, events are discarded: the broker is gone.
func (r *Runtime) put(ev event) {
	select {
	case r.in <- ev:
	case <-r.done:
	}
}

// Transport callbacks (Handler). They may be called from any goroutine;
// messages of one link (or session) must be reported from one goroutine, in
// order. Cuts (cut.go) are applied here, whatever the transport: a link to
// a cut peer is closed as it comes up, and what still arrives from a cut
// peer is dropped.

// PeerUp reports an authenticated broker link, dialled or accepted.
func (r *Runtime) PeerUp(l PeerLink) {
	if r.cuts.up(l) {
		r.put(event{kind: evPeerUp, link: l})
	}
}

// PeerMessage reports a message received on l.
func (r *Runtime) PeerMessage(l PeerLink, m message.Message) {
	if !r.cuts.isBlocked(l.Peer()) {
		r.put(event{kind: evPeerMsg, link: l, msg: m})
	}
}

// PeerMessages reports a batch of messages received on l, in order (one
// channel operation for the batch). ms is not kept.
func (r *Runtime) PeerMessages(l PeerLink, ms []message.Message) {
	if !r.cuts.isBlocked(l.Peer()) {
		r.put(event{kind: evPeerMsg, link: l, msgs: slices.Clone(ms)})
	}
}

// PeerDown reports that l is gone. It always reaches the runtime goroutine,
// which ignores a link it never saw (one closed by a cut as it came up).
func (r *Runtime) PeerDown(l PeerLink, err error) {
	r.cuts.down(l)
	r.put(event{kind: evPeerDown, link: l, err: err})
}

// ClientUp reports a new client session.
func (r *Runtime) ClientUp(s ClientSession) { r.put(event{kind: evClientUp, sess: s}) }

// ClientMessage reports a request of a client session.
func (r *Runtime) ClientMessage(s ClientSession, m message.Message) {
	r.put(event{kind: evClientMsg, sess: s, msg: m})
}

// ClientMessages reports a batch of requests of a client session, in
// order. ms is not kept.
func (r *Runtime) ClientMessages(s ClientSession, ms []message.Message) {
	r.put(event{kind: evClientMsg, sess: s, msgs: slices.Clone(ms)})
}

// ClientDown reports the end of a client session.
func (r *Runtime) ClientDown(s ClientSession, err error) {
	r.put(event{kind: evClientDown, sess: s, err: err})
}

// Run drives the core until ctx ends, then leaves the overlay gracefully
// (bounded by leaveTimeout) and returns. tr dials links (its dials honour
// cuts: see cutTransport). Run bootstraps a new overlay when no joinpoint is
// configured, and otherwise joins through the first joinpoint that answers.
func (r *Runtime) Run(ctx context.Context, tr Transport) error {
	defer close(r.done)
	r.tr = cutTransport{tr, &r.cuts}
	r.dialCtx, r.stopDialing = context.WithCancel(context.Background())
	defer r.stopDialing()

	if len(r.joinList()) == 0 {
		r.start(nil)
	} else {
		go r.resolveJoinpoints(r.dialCtx)
	}

	ticker := time.NewTicker(r.cfg.Tick)
	defer ticker.Stop()
	// The status snapshot (metrics, /state) once a second: scrapes come no
	// oftener, and the joined flag follows the core's notices at once.
	// Built ten times a second it was a twentieth of an idle overlay's CPU.
	statusEvery := max(1, int(time.Second/r.cfg.Tick))
	ticks := 0
	lastTick := time.Now()
	// A quarter of the failure timeout: enough to absorb scheduling delays,
	// far from turning a stall into a suspicion.
	maxCatchUp := max(1, r.cfg.FailureTicks()/4)
	var leaveDeadline <-chan time.Time
	ctxDone := ctx.Done()
	for {
		select {
		case ev := <-r.in:
			t0 := r.now()
			r.handle(ev)
			// Take what else is waiting, up to a batch, before carrying
			// out the outputs: one drain per batch instead of per message.
			r.handleWaiting(inputBatch - 1)
			r.drain()
			r.m.stepSeconds.Observe(r.now().Sub(t0).Seconds())
		case now := <-ticker.C:
			// What has arrived is stepped before time moves on: a tick
			// must not find a peer silent whose heartbeat waits in the
			// queue (a busy machine delivers both at once).
			r.handleWaiting(inputBatch)
			// The ticker drops ticks when the process was not scheduled in
			// time (a busy machine): catch up on them, so the core's time
			// keeps pace with the wall clock and timeouts mean what they
			// say. But a long stall (SIGSTOP, a long GC pause) counts for
			// at most maxCatchUp ticks: a broker that was itself frozen must
			// not suspect every peer the moment it resumes, before it has
			// read what they sent meanwhile.
			due := int(now.Sub(lastTick) / r.cfg.Tick)
			switch {
			case due < 1:
				due = 1
				lastTick = now
			case due > maxCatchUp:
				due = maxCatchUp
				lastTick = now
			default:
				lastTick = lastTick.Add(time.Duration(due) * r.cfg.Tick)
			}
			for range due {
				r.node.Tick()
				ticks++
				if ticks%statusEvery == 0 {
					r.refreshStatus()
					r.savePlace()
				}
			}
			r.flushConflated(now)
			r.drain()
		case <-ctxDone:
			ctxDone = nil
			// The replica baseline has no graceful leave: it stops as
			// crashed (its siblings carry on).
			if !r.started || r.left || r.cfg.IsReplicas() {
				r.shutdown()
				return nil
			}
			r.log.Info().Msg("leaving the overlay")
			r.leaving = true
			wait := r.leaveTimeout()
			if !r.node.Joined() {
				// The core leaves once it has joined (recovery is bounded
				// by gone_after).
				wait += r.cfg.GoneAfter
			}
			r.node.Leave()
			r.drain()
			leaveDeadline = time.After(wait)
		case <-r.kill:
			r.shutdown()
			return nil
		case <-leaveDeadline:
			r.log.Warn().Str("after", r.leaveTimeout().String()).Msg("leave not confirmed in time; exiting anyway (the overlay will treat this broker as crashed)")
			r.shutdown()
			return nil
		}
		if r.leaving && r.left {
			r.log.Info().Msg("left the overlay")
			r.shutdown()
			return nil
		}
		if r.removed {
			r.shutdown()
			return ErrRemoved
		}
	}
}

// inputBatch bounds the events handled before the outputs are carried out.
const inputBatch = 256

// handleWaiting handles the events already waiting, at most limit of them.
func (r *Runtime) handleWaiting(limit int) {
	for range limit {
		select {
		case ev := <-r.in:
			r.handle(ev)
		default:
			return
		}
	}
}

// Kill makes Run return at once, without leaving the overlay: a crash as
// seen from inside the process. Cut the runtime off its transport first
// (the testbed's inproc mode crashes a broker so), or its peers see its
// links close. Safe from any goroutine, and more than once.
func (r *Runtime) Kill() { r.once.Do(func() { close(r.kill) }) }

// leaveTimeout bounds a graceful leave: long enough for the neighbourhood
// to confirm, short enough for a supervisor waiting on SIGTERM.
func (r *Runtime) leaveTimeout() time.Duration {
	return min(max(4*r.cfg.FailureTimeout, time.Second), 10*time.Second)
}

func (r *Runtime) shutdown() {
	r.stopDialing()
	for peer, ls := range r.links {
		ls.l.Close("broker shutting down")
		delete(r.links, peer)
	}
	for c, ss := range r.sessions {
		ss.s.Close("broker shutting down")
		delete(r.sessions, c)
	}
	r.joined.Store(false)
	r.refreshStatus()
	r.closeLog()
}

// start calls Bootstrap (no joinpoints) or Join, then announces the links
// that came up before the core existed as a member.
func (r *Runtime) start(jps []overlay.Peer) {
	r.started = true
	if len(jps) == 0 {
		r.log.Info().Msg("bootstrapping a new overlay")
		r.node.Bootstrap()
	} else {
		ids := make([]string, len(jps))
		for i, jp := range jps {
			ids[i] = string(jp.ID) + "@" + jp.Addr
		}
		r.log.Info().Strs("joinpoints", ids).Msg("joining")
		r.node.Join(jps)
	}
	r.drain() // the joinpoint's Dial is answered from the link already up
	for _, peer := range sortedKeys(r.links) {
		if ls := r.links[peer]; ls != nil && !ls.announced {
			r.announce(peer, ls)
		}
	}
	r.refreshStatus()
}

// handle feeds one event to the core. Run takes a batch of events before
// it carries out the core's outputs (drain), except around a link event:
// what the core sent while it saw a link up is carried out before it
// hears that the link went down or was replaced. Carried out after, a
// publication the core sent to a peer while the old link was up went out
// on the new one ahead of the retransmission that LinkUp makes in stamp
// order, and the peer, having seen the newer one, dropped the older ones
// as duplicates (real processes: a hub frozen past the failure timeout,
// its peers redialling it; 16 lost to one subscriber).
func (r *Runtime) handle(ev event) {
	switch ev.kind {
	case evPeerUp, evDialed:
		r.drain()
		r.linkUp(ev.link)
	case evPeerMsg:
		if ev.msg != nil {
			r.peerMessages(ev.link, []message.Message{ev.msg})
		} else {
			r.peerMessages(ev.link, ev.msgs)
		}
	case evPeerDown:
		peer := ev.link.Peer()
		if ls := r.links[peer]; ls != nil && ls.l == ev.link {
			r.drain() // on the link it was meant for (see above)
		}
		ls := r.links[peer]
		if ls == nil || ls.l != ev.link {
			return // a link already replaced or closed on the core's request
		}
		delete(r.links, peer)
		reason := "down"
		if ev.err != nil {
			reason = ev.err.Error()
		}
		r.log.Info().Str("peer", string(peer)).Str("reason", reason).Msg("link down")
		r.m.linkCloses.WithLabelValues("down").Inc()
		if ls.announced {
			r.node.LinkDown(peer)
		}
	case evDialSlow:
		if r.dialing[ev.peer] != dialActive {
			return
		}
		r.dialing[ev.peer] = dialSlow
		r.dialFailed(ev.peer, errors.New("no answer within the dial timeout; the handshake goes on"))
	case evDialFailed:
		st := r.dialing[ev.peer]
		delete(r.dialing, ev.peer)
		if st == dialSlow {
			return // the core was told already and did not ask again
		}
		r.dialFailed(ev.peer, ev.err)
	case evJoinpoints:
		if !r.started {
			r.start(ev.peers)
		}
	case evClientUp:
		r.clientUp(ev.sess)
	case evClientMsg:
		c, ok := r.sessionIDs[ev.sess]
		if !ok {
			// A session closed by the runtime (slow consumer, limit):
			// what it still sends is ignored.
			return
		}
		if ev.msg != nil {
			r.clientMessage(c, r.sessions[c], ev.msg)
			return
		}
		for _, m := range ev.msgs {
			ss := r.sessions[c]
			if ss == nil {
				return // disconnected while answering an earlier message
			}
			r.clientMessage(c, ss, m)
		}
	case evClientDown:
		c, ok := r.sessionIDs[ev.sess]
		if !ok {
			return
		}
		r.dropSession(c)
		r.node.ClientClose(c)
	case evCall:
		ev.call()
	}
}

// drain carries out everything the core asked for since the last call.
func (r *Runtime) drain() {
	defer func() {
		// The runtime's own answers, after the core's: see answer.
		answers := r.answers
		r.answers = nil
		for i := range answers {
			r.sendClient(answers[i].To, answers[i].Msg)
		}
		r.flushHeld()
		// A slow consumer disconnected here told the core ClientClose;
		// what that produced is carried out at the next drain.
	}()
	for round := 0; round < 8; round++ {
		rd := r.node.Ready()
		if len(rd.Dials)+len(rd.Closes)+len(rd.Messages)+len(rd.ToClients)+len(rd.Notices)+len(rd.Appends)+len(rd.Released) == 0 && rd.Held.Empty() {
			r.node.Recycle(rd)
			return
		}
		for _, n := range rd.Notices {
			r.notice(n)
		}
		for _, peer := range rd.Closes {
			if ls := r.links[peer]; ls != nil {
				ls.l.Close("closed by the protocol")
				delete(r.links, peer)
				r.m.linkCloses.WithLabelValues("protocol").Inc()
			}
		}
		for _, p := range rd.Dials {
			r.dial(p)
		}
		for i := range rd.Messages {
			r.sendPeer(rd.Messages[i].To, rd.Messages[i].Msg)
		}
		r.persist(&rd) // the log before the PubAcks (durable.go)
		r.coalesceAcks(rd.ToClients)
		r.sendClients(rd.ToClients)
		r.node.Recycle(rd) // nothing above keeps rd's slices
		// Inputs fed to the core while carrying out (LinkUp of a link
		// already there, LinkDown of a slow link, ClientClose of a slow
		// client) produced more outputs: another round, bounded because
		// each round can only be caused by the previous one's failures.
	}
}

func (r *Runtime) notice(n overlay.Notice) {
	r.m.notices.WithLabelValues(string(n.Kind)).Inc()
	ev := r.log.Info()
	switch n.Kind {
	case overlay.NoticeSuspected, overlay.NoticeGone, overlay.NoticeJoinFailed, overlay.NoticeGap, overlay.NoticeLinkRefused, overlay.NoticeRemoved:
		ev = r.log.Warn()
	}
	ev = ev.Str("notice", string(n.Kind))
	if n.Peer != "" {
		ev = ev.Str("peer", string(n.Peer))
	}
	if n.Detail != "" {
		ev = ev.Str("detail", n.Detail)
	}
	ev.Msg("overlay " + string(n.Kind))
	switch n.Kind {
	case overlay.NoticeJoined:
		r.joined.Store(true)
		r.joinFailed = ""
		// The snapshot (deltapub_joined, /state) at once, not at the next
		// second: whoever waits for the join (a testbed starting brokers
		// one after another, an operator's script) sees it now.
		r.refreshStatus()
	case overlay.NoticeLeft:
		r.left = true
		r.joined.Store(false)
		r.refreshStatus()
		r.savePlace() // none: a broker that left rejoins as a new member
	case overlay.NoticeJoinFailed:
		r.joinFailed = n.Detail
	case overlay.NoticeRemoved:
		r.removed = true
	}
}

// holder is a link or session whose writer can be woken once per batch
// (internal/quic's Link and Session): during a drain the runtime queues
// with Hold (TrySend without waking the writer) and flushes every link and
// session it queued on at the end of the drain, so each writer takes all
// of the drain's frames in one stream write instead of one frame at a time
// while the runtime is still producing them.
type holder interface {
	Hold(m message.Message) bool
	Flush()
}

// markHeld records that h has held frames to flush at the end of the drain.
func (r *Runtime) markHeld(h holder, flag *bool) {
	if !*flag {
		*flag = true
		r.held = append(r.held, heldQueue{h: h, flag: flag})
	}
}

// flushHeld wakes the writer of every link and session queued on during
// the drain.
func (r *Runtime) flushHeld() {
	for i := range r.held {
		*r.held[i].flag = false
		r.held[i].h.Flush()
		r.held[i] = heldQueue{}
	}
	r.held = r.held[:0]
}

type heldQueue struct {
	h    holder
	flag *bool // the link's or session's held mark
}

func sortedKeys[V any](m map[message.BrokerID]V) []message.BrokerID {
	out := make([]message.BrokerID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
