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
	node  *overlay.Node
	log   zerolog.Logger
	m     *runtimeMetrics
	now   func() time.Time

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
	joinFailed string
	// store keeps the place (nil: no data directory); placed is the
	// place last saved.
	store  storage.Store
	placed []storage.Joinpoint
	plog   *pubLog // the publication log (nil: durability none; durable.go)

	joined       atomic.Bool // for /healthz, read by other goroutines
	logHasFailed atomic.Bool // the publication log failed (Health)
	cuts         linkCuts    // failure injection: links refused until healed (cut.go)
	dialCtx      context.Context
	stopDialing  context.CancelFunc
}

type linkState struct {
	l         PeerLink
	announced bool   // the core has been told LinkUp for this link
	sends     uint64 // messages sent, for sampling the queue length
	held      bool   // frames held for the end of the drain (holder)

	// early holds, in order, what arrived on the link before the core was
	// told of it (before start: the joinpoint not resolved yet); stepped
	// right after the LinkUp (announce). The peer's core was told the
	// link is up and relies on it being FIFO and reliable: a StateRequest
	// is sent once.
	early []message.Message
}

type sessionState struct {
	s    ClientSession
	subs map[message.SubID]bool // accepted subscriptions (with reqs, bounded by MaxSubsPerClient)
	reqs map[uint64]bool        // Subscribe requests not yet answered, by Req
	// Publisher backpressure. lastFwd is the highest sequence number
	// forwarded to the core. Once the runtime refused one (refusing), it
	// refuses every publication after resumeAt (lastFwd+1, or the first
	// refused one if nothing was forwarded on this session yet), so that
	// the core never sees a hole, and resumes with the first one at or
	// before it (the client sends everything again from the refused one).
	// Copies of publications already forwarded pass: the core acknowledges
	// them without publishing them twice.
	refusing bool
	resumeAt uint64
	lastFwd  uint64
	held     bool // frames held for the end of the drain (holder)
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

// NewRuntime builds the core for cfg (which must be valid) with the given
// epoch. reg receives the metrics (nil: a fresh registry, see Registry).
func NewRuntime(cfg BrokerConfig, epoch uint64, log zerolog.Logger, reg *prometheus.Registry) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	node, err := overlay.NewNode(cfg.NodeConfig(epoch))
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

// Health is nil when the broker is a full member, else why not.
func (r *Runtime) Health(ctx context.Context) error {
	if r.joined.Load() && !r.logHasFailed.Load() {
		return nil
	}
	var why error
	err := r.Do(ctx, func(n *overlay.Node) {
		st := n.Status()
		switch {
		case r.logFailed() != nil:
			why = fmt.Errorf("publication log failed (no publication is acknowledged until a restart): %w", r.logFailed())
		case st.Left:
			why = errors.New("left the overlay")
		case st.Leaving:
			why = errors.New("leaving the overlay")
		case st.Joined:
			why = nil
		case r.joinFailed != "":
			why = errors.New("join failed: " + r.joinFailed)
		default:
			why = errors.New("not joined yet")
		}
	})
	if err != nil {
		return err
	}
	return why
}

// Status returns the core's snapshot, taken on the runtime goroutine.
func (r *Runtime) Status(ctx context.Context) (overlay.Status, error) {
	var st overlay.Status
	err := r.Do(ctx, func(n *overlay.Node) { st = n.Status() })
	return st, err
}

// Do runs f on the runtime goroutine with the core, and waits for it. f
// must not block. It fails when ctx ends first or the runtime has stopped.
func (r *Runtime) Do(ctx context.Context, f func(n *overlay.Node)) error {
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
			r.drain()
		case <-ctxDone:
			ctxDone = nil
			if !r.started || r.left {
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

func (r *Runtime) refreshStatus() {
	st := r.node.Status()
	r.joined.Store(st.Joined && !st.Left && !st.Leaving)
	r.m.setSnapshot(st)
}

// dialTimeout and dialPatience are overlay's, at this broker's timers.
func (r *Runtime) dialTimeout() time.Duration { return overlay.DialTimeout(r.cfg.FailureTimeout) }

func (r *Runtime) dialPatience() time.Duration {
	return overlay.DialPatience(r.dialTimeout(), r.cfg.GoneAfter)
}

// resolveJoinpoints turns the configured joinpoints into the core's list:
// an "ID@addr" one as it is (the core dials it, paced by its own backoff);
// a bare address is dialled to learn which broker answers there (all at
// once, each bounded by dialTimeout), and left out if none does. Only when
// no joinpoint at all is left is the round repeated, after a backoff that
// doubles up to maxJoinPause, for as long as the broker runs: its
// joinpoints may be restarting too.
func (r *Runtime) resolveJoinpoints(ctx context.Context) {
	const maxJoinPause = 5 * time.Second
	pause := min(max(r.cfg.FailureTimeout, 200*time.Millisecond), maxJoinPause)
	join := r.joinList()
	for round := 1; ; round++ {
		jps := make([]overlay.Peer, len(join))
		errs := make([]error, len(join))
		var wg sync.WaitGroup
		for i, j := range join {
			jp := SplitJoinpoint(j)
			if jp.ID != "" {
				jps[i] = jp
				continue
			}
			wg.Go(func() {
				dctx, cancel := context.WithTimeout(ctx, r.dialTimeout())
				defer cancel()
				l, err := r.tr.Dial(dctx, "", jp.Addr)
				if err != nil {
					errs[i] = err
					return
				}
				r.put(event{kind: evDialed, link: l})
				jps[i] = overlay.Peer{ID: l.Peer(), Addr: jp.Addr}
			})
		}
		wg.Wait()
		found := slices.DeleteFunc(jps, func(p overlay.Peer) bool { return p.ID == "" })
		if len(found) > 0 {
			r.put(event{kind: evJoinpoints, peers: found})
			return
		}
		r.log.Warn().Err(errors.Join(errs...)).Int("round", round).Str("next_in", pause.String()).Msg("no joinpoint answered")
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, maxJoinPause)
	}
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

// maxEarly bounds the messages held on a link before the core is told of
// it (linkState.early): a peer heartbeats every heartbeat period, so this
// covers a joinpoint resolution of many seconds. Beyond it the link is
// closed: its peer sees it go down, and its core re-sends what matters on
// the next link (LinkUp: a StateRequest still awaited, floods,
// retransmissions).
const maxEarly = 1024

// announce tells the core of a link it was not told of yet, then steps
// what arrived on it meanwhile, in order.
func (r *Runtime) announce(peer message.BrokerID, ls *linkState) {
	ls.announced = true
	r.node.LinkUp(peer)
	early := ls.early
	ls.early = nil
	if len(early) > 0 {
		r.peerMessages(ls.l, early)
	}
}

func (r *Runtime) handle(ev event) {
	switch ev.kind {
	case evPeerUp, evDialed:
		r.linkUp(ev.link)
	case evPeerMsg:
		if ev.msg != nil {
			r.peerMessages(ev.link, []message.Message{ev.msg})
		} else {
			r.peerMessages(ev.link, ev.msgs)
		}
	case evPeerDown:
		peer := ev.link.Peer()
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

// peerMessages steps the core with messages received on l.
func (r *Runtime) peerMessages(l PeerLink, msgs []message.Message) {
	peer := l.Peer()
	ls := r.links[peer]
	if ls == nil || ls.l != l {
		// A link closed on the core's request, or replaced: what was in
		// flight on it is lost, as for any link that goes down.
		r.log.Debug().Str("peer", string(peer)).Int("messages", len(msgs)).Msg("messages on a closed link ignored")
		return
	}
	if !ls.announced {
		// The core has not been told of this link yet (it is not started:
		// the joinpoint is being resolved). Dropped, a message is lost on
		// a link its sender sees up, and not every one is sent again: a
		// recovering neighbour's StateRequest is not, and the neighbour
		// then waited for us until gone_after and became routable without
		// our side's subscriptions. Held until announce.
		if len(ls.early)+len(msgs) > maxEarly {
			r.log.Warn().Str("peer", string(peer)).Int("held", len(ls.early)).Msg("too many messages before the core started; closing the link")
			ls.l.Close("too many messages before the broker started")
			delete(r.links, peer)
			r.m.linkCloses.WithLabelValues("early").Inc()
			return
		}
		ls.early = append(ls.early, msgs...)
		return
	}
	for _, m := range msgs {
		if r.trace {
			r.log.Trace().Str("from", string(peer)).Str("type", m.Type().String()).Msg("step")
		}
		r.m.peerIn(m.Type())
		r.node.Step(peer, m)
		if r.links[peer] != ls {
			return // closed while stepping (a slow link): the rest is lost with it
		}
	}
}

// dialFailed tells the core that its dial of peer did not succeed,
// unless the peer's own dial won the race and its link is up.
func (r *Runtime) dialFailed(peer message.BrokerID, err error) {
	if ls := r.links[peer]; ls != nil {
		if !ls.announced && r.started {
			r.announce(peer, ls)
		}
		return
	}
	r.log.Debug().Str("peer", string(peer)).Err(err).Msg("dial failed")
	if r.started {
		r.node.DialFailed(peer)
	}
}

// linkUp records a link (replacing an older one to the same peer) and
// tells the core, once the core is a member or joining.
func (r *Runtime) linkUp(l PeerLink) {
	peer := l.Peer()
	delete(r.dialing, peer)
	if old := r.links[peer]; old != nil {
		if old.l == l {
			return
		}
		// The transport keeps one link per pair; a second one means the
		// first is dead and was not reported yet.
		old.l.Close("replaced by a new link")
		r.m.linkCloses.WithLabelValues("replaced").Inc()
		if old.announced {
			r.node.LinkDown(peer)
		}
	}
	ls := &linkState{l: l}
	r.links[peer] = ls
	r.log.Debug().Str("peer", string(peer)).Msg("link up")
	if r.started {
		r.announce(peer, ls)
	}
}

func (r *Runtime) clientUp(s ClientSession) (message.ClientID, bool) {
	if len(r.sessions) >= r.cfg.Limits.MaxClients {
		r.log.Warn().Int("limit", r.cfg.Limits.MaxClients).Msg("client refused: too many clients")
		r.m.clientDisconnects.WithLabelValues("too many clients").Inc()
		s.Close(fmt.Sprintf("too many clients (limit %d)", r.cfg.Limits.MaxClients))
		return 0, false
	}
	r.nextClient++
	c := r.nextClient
	r.sessions[c] = &sessionState{s: s, subs: map[message.SubID]bool{}, reqs: map[uint64]bool{}}
	r.sessionIDs[s] = c
	r.m.clientSessions.Set(float64(len(r.sessions)))
	r.node.ClientOpen(c)
	return c, true
}

func (r *Runtime) dropSession(c message.ClientID) {
	ss := r.sessions[c]
	if ss == nil {
		return
	}
	delete(r.sessions, c)
	delete(r.sessionIDs, ss.s)
	r.m.clientSessions.Set(float64(len(r.sessions)))
}

func (r *Runtime) clientMessage(c message.ClientID, ss *sessionState, m message.Message) {
	r.m.clientReq(m.Type())
	switch m := m.(type) {
	case *message.Publish:
		if m.Seq > ss.lastFwd && (ss.refusing && m.Seq > ss.resumeAt || r.now().Before(r.congested)) {
			if !ss.refusing {
				ss.refusing, ss.resumeAt = true, m.Seq
				if ss.lastFwd > 0 {
					ss.resumeAt = ss.lastFwd + 1
				}
			}
			r.answer(c, &message.PubAck{Seq: m.Seq, Err: "backpressure"})
			return
		}
		if m.Seq > ss.lastFwd {
			ss.refusing = false
			ss.lastFwd = m.Seq
		}
	case *message.Subscribe:
		if len(ss.subs)+len(ss.reqs) >= r.cfg.Limits.MaxSubsPerClient {
			r.answer(c, &message.SubAck{Req: m.Req, Err: fmt.Sprintf("too many subscriptions for this session (limit %d)", r.cfg.Limits.MaxSubsPerClient)})
			return
		}
		ss.reqs[m.Req] = true
	case *message.Unsubscribe:
		delete(ss.subs, m.Sub)
	}
	r.node.Client(c, m)
}

// coalesceAcks drops (sets to nil) every successful PubAck that a later
// successful PubAck to the same client in out supersedes: acknowledgements
// are cumulative, so the client learns the same from the last one, and a
// publisher with many publications in flight gets one acknowledgement per
// batch instead of one per publication (its session queue stays short). A
// refusal in between keeps the acknowledgement before it: the client must
// see them in order.
func (r *Runtime) coalesceAcks(out []overlay.ClientEnvelope) {
	if len(out) < 2 {
		return
	}
	clear(r.laterAck)
	for i := len(out) - 1; i >= 0; i-- {
		a, ok := out[i].Msg.(*message.PubAck)
		if !ok {
			continue
		}
		if a.Err != "" {
			r.laterAck[out[i].To] = false
			continue
		}
		if r.laterAck[out[i].To] {
			out[i].Msg = nil
		} else {
			r.laterAck[out[i].To] = true
		}
	}
}

// answer queues the runtime's own answer to a client request. It is sent
// after the core's outputs of the same batch, so that a client sees the
// answers to its requests in the order it made them (a refusal must not
// overtake the acknowledgement of an earlier publication).
func (r *Runtime) answer(c message.ClientID, m message.Message) {
	r.answers = append(r.answers, overlay.ClientEnvelope{To: c, Msg: m})
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
		if len(rd.Dials)+len(rd.Closes)+len(rd.Messages)+len(rd.ToClients)+len(rd.Notices)+len(rd.Appends)+len(rd.Released) == 0 {
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
	case overlay.NoticeSuspected, overlay.NoticeGone, overlay.NoticeJoinFailed, overlay.NoticeGap, overlay.NoticeLinkRefused:
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
	case overlay.NoticeLeft:
		r.left = true
		r.joined.Store(false)
		r.savePlace() // none: a broker that left rejoins as a new member
	case overlay.NoticeJoinFailed:
		r.joinFailed = n.Detail
	}
}

func (r *Runtime) dial(p overlay.Peer) {
	if ls := r.links[p.ID]; ls != nil {
		if !ls.announced {
			r.announce(p.ID, ls)
			return
		}
		// The core asks for a link it was told is up: it must consider
		// that one dead. Replace it.
		ls.l.Close("core asked for a new link")
		delete(r.links, p.ID)
		r.m.linkCloses.WithLabelValues("redial").Inc()
	}
	switch r.dialing[p.ID] {
	case dialActive, dialSlowAsked:
		return // the dial in flight will answer
	case dialSlow:
		r.dialing[p.ID] = dialSlowAsked // its outcome answers this request
		return
	}
	r.dialing[p.ID] = dialActive
	ctx, tr, timeout, patience := r.dialCtx, r.tr, r.dialTimeout(), r.dialPatience()
	go func() {
		dctx, cancel := context.WithTimeout(ctx, patience)
		defer cancel()
		type result struct {
			l   PeerLink
			err error
		}
		done := make(chan result, 1)
		go func() {
			l, err := tr.Dial(dctx, p.ID, p.Addr)
			done <- result{l, err}
		}()
		var res result
		slow := time.NewTimer(timeout)
		select {
		case res = <-done:
			slow.Stop()
		case <-slow.C:
			// The core is told now, as for a peer that does not answer
			// (it suspects it and goes around it), but the handshake is
			// not thrown away: on a starved machine it is slow, not
			// lost, and each new one costs more CPU than waiting.
			r.put(event{kind: evDialSlow, peer: p.ID})
			res = <-done
		}
		switch {
		case res.err != nil:
			r.put(event{kind: evDialFailed, peer: p.ID, err: res.err})
		case res.l.Peer() != p.ID:
			// Another broker answers at that address now.
			r.put(event{kind: evDialed, link: res.l})
			r.put(event{kind: evDialFailed, peer: p.ID, err: fmt.Errorf("runtime: %s answered at %s instead of %s", res.l.Peer(), p.Addr, p.ID)})
		default:
			r.put(event{kind: evDialed, link: res.l})
		}
	}()
}

// dialState is where a dial in flight stands with the core.
type dialState uint8

const (
	dialNone      dialState = iota
	dialActive              // the core waits for its outcome
	dialSlow                // the core was told DialFailed at dialTimeout; the handshake goes on
	dialSlowAsked           // as dialSlow, and the core asked again: it waits for the outcome
)

// sendPeer sends m on the link to peer; see Runtime for the policy when
// the link's queue is full.
func (r *Runtime) sendPeer(peer message.BrokerID, m message.Message) {
	ls := r.links[peer]
	if ls == nil || !ls.announced {
		r.m.unroutable.WithLabelValues("peer").Inc()
		r.log.Debug().Str("peer", string(peer)).Str("type", m.Type().String()).Msg("no link for a core output (link just went down)")
		return
	}
	if r.trace {
		r.log.Trace().Str("to", string(peer)).Str("type", m.Type().String()).Msg("send")
	}
	var ok bool
	if h, held := ls.l.(holder); held {
		r.markHeld(h, &ls.held)
		ok = h.Hold(m)
	} else {
		ok = ls.l.TrySend(m)
	}
	if ok {
		r.m.peerOut(m.Type())
		// Above the high-water mark the link is congested: refuse new
		// publications for a tick (PubAck "backpressure") before the
		// queue is full and the whole runtime has to wait. Checked every
		// 64 sends (Queued takes the link's lock).
		if ls.sends++; ls.sends%64 == 0 && ls.l.Queued() > r.highWater {
			r.congested = r.now().Add(r.cfg.Tick)
		}
		return
	}
	// Full, or closed. Wait for room, at most LinkBlock: Send returns as
	// soon as the writer freed some room, or at once if the link is closed.
	r.m.linkBlocked.Inc()
	start := r.now()
	errc := make(chan error, 1)
	l := ls.l
	go func() { errc <- l.Send(m) }()
	timer := time.NewTimer(r.cfg.Limits.LinkBlock)
	defer timer.Stop()
	select {
	case err := <-errc:
		if err == nil {
			// Room came, but the link is the bottleneck: refuse new
			// publications for as long as we had to wait.
			r.m.peerOut(m.Type())
			r.congested = r.now().Add(max(r.cfg.Tick, r.now().Sub(start)))
			return
		}
		// The link closed under us; its PeerDown is on its way, but the
		// core must not wait for it (it would keep sending into the void).
		r.log.Info().Str("peer", string(peer)).Err(err).Msg("link closed while sending")
		r.m.unroutable.WithLabelValues("peer").Inc()
		r.m.linkCloses.WithLabelValues("down").Inc()
	case <-timer.C:
		r.log.Warn().Str("peer", string(peer)).Str("waited", r.now().Sub(start).String()).Msg("closing a stuck link: no room in its send queue")
		l.Close(fmt.Sprintf("slow peer: no room in the send queue for %v", r.cfg.Limits.LinkBlock))
		r.m.linkCloses.WithLabelValues("slow peer").Inc()
	}
	delete(r.links, peer)
	r.node.LinkDown(peer)
}

// frameSession is a ClientSession that also takes encoded frames
// (internal/quic's Session): deliveries are encoded once per publication
// and the same bytes queued on every session.
type frameSession interface {
	// HoldFrame queues an encoded frame without blocking and without
	// waking the session's writer (false: queue full or closed); see
	// holder.
	HoldFrame(frame []byte) bool
	// Version is the protocol version agreed in the handshake: from 2 on
	// the client understands DeliverSet.
	Version() uint16
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

// trySend queues m on s (held, see holder) and remembers to flush it.
func (r *Runtime) trySendClient(ss *sessionState, m message.Message) bool {
	if h, ok := ss.s.(holder); ok {
		r.markHeld(h, &ss.held)
		return h.Hold(m)
	}
	return ss.s.TrySend(m)
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

// sendClients carries out the core's outputs to clients (nil ones are
// skipped: coalesced acknowledgements). The core emits the deliveries of one
// publication together; each such run goes to sendDeliveries.
func (r *Runtime) sendClients(out []overlay.ClientEnvelope) {
	for i := 0; i < len(out); {
		d, ok := out[i].Msg.(*message.Deliver)
		if !ok {
			if out[i].Msg != nil {
				r.sendClient(out[i].To, out[i].Msg)
			}
			i++
			continue
		}
		r.denc.Reset(d)
		j := i + 1
		for ; j < len(out); j++ {
			d2, ok := out[j].Msg.(*message.Deliver)
			if !ok || !r.denc.Same(&d2.Pub, d2.Attrs, d2.Payload, d2.Time) {
				break
			}
		}
		r.sendDeliveries(out[i:j])
		i = j
	}
}

// sendDeliveries sends the deliveries of one publication (r.denc holds it)
// to their sessions. A session that takes frames gets the publication
// encoded once for all sessions: one DeliverSet frame listing all its
// matching subscriptions (protocol version 2), or one Deliver frame per
// subscription built from the shared encoding (version 1). Per session the
// deliveries keep their order; across sessions order does not matter.
func (r *Runtime) sendDeliveries(run []overlay.ClientEnvelope) {
	if len(run) > 1 {
		// Group each session's deliveries (stable: their order is kept).
		r.runBuf = append(r.runBuf[:0], run...)
		slices.SortStableFunc(r.runBuf, func(a, b overlay.ClientEnvelope) int {
			switch {
			case a.To < b.To:
				return -1
			case a.To > b.To:
				return 1
			}
			return 0
		})
		run = r.runBuf
		defer clear(r.runBuf) // do not pin the messages until the next run
	}
	if t := run[0].Msg.(*message.Deliver).Time; t > 0 {
		// One observation per publication delivered here (not per
		// delivery: with 100 local subscribers the histogram cost as much
		// as encoding).
		r.m.deliveryLatency.Observe(r.now().Sub(time.Unix(0, t)).Seconds())
	}
	for i := 0; i < len(run); {
		c := run[i].To
		j := i + 1
		for j < len(run) && run[j].To == c {
			j++
		}
		r.deliverTo(c, run[i:j])
		i = j
	}
}

// deliverTo sends one session its deliveries of the publication r.denc
// holds; a session whose queue is full is disconnected (see Runtime).
func (r *Runtime) deliverTo(c message.ClientID, ds []overlay.ClientEnvelope) {
	ss := r.sessions[c]
	if ss == nil {
		r.m.unroutable.WithLabelValues("client").Add(float64(len(ds)))
		r.log.Debug().Uint64("client", uint64(c)).Msg("no session for a delivery (client just left)")
		return
	}
	fs, frames := ss.s.(frameSession)
	sent := true
	switch {
	case frames && fs.Version() >= 2 && r.ownSubs(ds):
		r.subsBuf = r.subsBuf[:0]
		for i := range ds {
			r.subsBuf = append(r.subsBuf, ds[i].Msg.(*message.Deliver).Sub.N)
		}
		r.markHeld(ss.s.(holder), &ss.held)
		sent = fs.HoldFrame(r.denc.DeliverSetFrame(r.subsBuf))
	case frames:
		r.markHeld(ss.s.(holder), &ss.held)
		for i := 0; i < len(ds) && sent; i++ {
			sent = fs.HoldFrame(r.denc.DeliverFrame(&ds[i].Msg.(*message.Deliver).Sub))
		}
	default:
		for i := 0; i < len(ds) && sent; i++ {
			sent = r.trySendClient(ss, ds[i].Msg)
		}
	}
	if !sent {
		r.slowConsumer(c, ss)
	}
}

// ownSubs reports whether every delivery is to a subscription this broker
// incarnation made: a DeliverSet names subscriptions by N only, the client
// knows their edge and epoch from its SubAcks.
func (r *Runtime) ownSubs(ds []overlay.ClientEnvelope) bool {
	for i := range ds {
		s := &ds[i].Msg.(*message.Deliver).Sub
		if s.Edge != message.BrokerID(r.cfg.ID) || s.Epoch != r.epoch {
			return false
		}
	}
	return true
}

// slowConsumer disconnects a client whose send queue is full.
func (r *Runtime) slowConsumer(c message.ClientID, ss *sessionState) {
	r.log.Warn().Uint64("client", uint64(c)).Int("queue", r.cfg.Limits.SendQueue).Msg("disconnecting a slow consumer: its send queue is full")
	ss.s.Close(fmt.Sprintf("slow consumer: %d messages queued and not read", r.cfg.Limits.SendQueue))
	r.m.clientDisconnects.WithLabelValues("slow consumer").Inc()
	r.dropSession(c)
	r.node.ClientClose(c)
}

// sendClient sends m to a client session; a client whose queue is full is
// disconnected (see Runtime).
func (r *Runtime) sendClient(c message.ClientID, m message.Message) {
	ss := r.sessions[c]
	if ss == nil {
		r.m.unroutable.WithLabelValues("client").Inc()
		r.log.Debug().Uint64("client", uint64(c)).Str("type", m.Type().String()).Msg("no session for a core output (client just left)")
		return
	}
	switch m := m.(type) {
	case *message.PubAck:
		if m.Err != "" {
			r.m.pubAckErrors.WithLabelValues(m.Err).Inc()
		}
	case *message.SubAck:
		delete(ss.reqs, m.Req)
		if m.Err == "" {
			ss.subs[m.Sub] = true
		}
	case *message.UnsubAck:
		delete(ss.subs, m.Sub)
	}
	if r.trySendClient(ss, m) {
		return
	}
	r.slowConsumer(c, ss)
}

// State is what /state serves: the core's overlay.Status (its fields at the top
// level of the JSON object) and what the runtime adds.
type State struct {
	overlay.Status
	Runtime RuntimeState `json:"runtime"`
	Log     *LogState    `json:"log,omitempty"` // the publication log (durable.go)
}

// RuntimeState describes the runtime around the core.
type RuntimeState struct {
	Addr           string             `json:"addr"`
	Delta          int                `json:"delta"`
	Tick           string             `json:"tick"`
	Heartbeat      string             `json:"heartbeat"`
	FailureTimeout string             `json:"failure_timeout"`
	Connected      []message.BrokerID `json:"connected"` // peers with a transport link, sorted
	Dialing        []message.BrokerID `json:"dialing"`   // dials in flight, sorted
	Sessions       int                `json:"sessions"`
	InputQueue     int                `json:"input_queue"`
	JoinFailed     string             `json:"join_failed,omitempty"`
}

// State returns the snapshot served on /state, taken on the runtime
// goroutine.
func (r *Runtime) State(ctx context.Context) (State, error) {
	var st State
	err := r.Do(ctx, func(n *overlay.Node) {
		st.Status = n.Status()
		rs := &st.Runtime
		rs.Addr = r.cfg.AdvertisedAddr()
		rs.Delta = r.cfg.Delta
		rs.Tick = r.cfg.Tick.String()
		rs.Heartbeat = r.cfg.Heartbeat.String()
		rs.FailureTimeout = r.cfg.FailureTimeout.String()
		rs.Connected = sortedKeys(r.links)
		rs.Dialing = sortedKeys(r.dialing)
		rs.Sessions = len(r.sessions)
		rs.InputQueue = len(r.in)
		rs.JoinFailed = r.joinFailed
		st.Log = r.logState()
	})
	return st, err
}

func sortedKeys[V any](m map[message.BrokerID]V) []message.BrokerID {
	out := make([]message.BrokerID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
