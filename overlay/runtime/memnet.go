package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/deltapub/deltapub/internal/quic"
	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
)

// MemNetwork is the in-memory twin of the QUIC transport, for tests and the
// testbed's inproc mode (the idea of memberlist's MockTransport): brokers
// listen on it by address (MemNetwork.Listen, or ListenMem for a runtime),
// dial each other (MemEndpoint.Dial, a Transport), and clients open
// sessions with them (MemNetwork.DialClient, what package client needs of
// a connection). It keeps the contract of internal/quic that the runtime
// relies on:
//
//   - every message crosses the wire format (encoded when sent, decoded
//     when it arrives, a frame larger than the receiver's MaxFrame closes
//     the link): a receiver never shares memory with its sender;
//   - each direction of a link or session is a FIFO queue bounded in frames
//     and bytes (MemConfig.SendQueue, SendQueueBytes): TrySend reports false
//     and Send waits while it is full, never a silent drop;
//   - one link per pair of brokers: a dial finds the link already up, and a
//     new link to a peer (a restarted broker's, say) replaces the one held
//     to it, whose PeerDown is reported before the new link's PeerUp;
//   - a link closed at one end delivers what that end had queued, then ends
//     at the other (PeerDown); handler calls come from one goroutine per
//     link or session, in order.
//
// Faults, as the testbed applies them to real processes:
//
//   - Crash is a SIGKILL: the endpoint leaves its address at once and says
//     nothing: its peers keep their links to it, what they send vanishes,
//     nothing more arrives from it, and they find out from their
//     heartbeats; a restart listens again on the same address while its
//     peers may still hold the old incarnation's link;
//   - Freeze is a SIGSTOP: nothing is delivered to or from the endpoint
//     (its queues fill up, which its senders see as a full link) and dials
//     to it wait, until Resume;
//   - a dial to an address where nothing listens (or to a crashed or frozen
//     broker) waits for an answer until its context or the handshake timeout
//     ends, as a QUIC handshake sent into the void does.
//
// What it does not model: QUIC's flow-control windows (a peer's queue is
// the whole buffer, so a frozen receiver fills it sooner), delays, loss and
// authentication (secrets and tokens are not checked).
//
// Locks: MemNetwork.mu guards the registry (endpoints by address, each
// endpoint's links and sessions); memPipe.mu guards one queue. Order:
// MemNetwork.mu before memPipe.mu. No handler is called with a lock held.
type MemNetwork struct {
	mu        sync.Mutex
	listening map[string]*MemEndpoint
	changed   chan struct{} // closed and replaced when an endpoint listens or resumes: waiting dials look again
}

// NewMemNetwork returns an empty network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{listening: map[string]*MemEndpoint{}, changed: make(chan struct{})}
}

// MemConfig describes one broker's endpoint on a MemNetwork. Zero values
// take internal/quic's defaults.
type MemConfig struct {
	ID   message.BrokerID // required
	Addr string           // where it listens, and what its peers learn; unique among live endpoints

	MaxFrame       int // largest frame accepted, in bytes; default wire.DefaultMaxFrame
	SendQueue      int // frames queued per link or session before a send waits; default quic.DefaultSendQueue
	SendQueueBytes int // bytes likewise; default quic.DefaultSendQueueBytes
}

// memHandshakeTimeout bounds a dial that nobody answers, as
// quic.DefaultHandshakeTimeout bounds a QUIC handshake.
const memHandshakeTimeout = quic.DefaultHandshakeTimeout

// memBatch bounds the messages handed to a Handler at once, as internal/quic's
// readers do.
const memBatch = 256

// ErrMemClosed is returned by sends and dials on a closed link, session or
// endpoint (a crashed endpoint's included).
var ErrMemClosed = errors.New("runtime: memnet: closed")

// errMemQueueFull is TrySend's failure on a full queue.
var errMemQueueFull = errors.New("runtime: memnet: send queue full")

// MemEndpoint is one broker's presence on a MemNetwork: its links and the
// sessions of its clients. It is the runtime's Transport (Dial).
type MemEndpoint struct {
	net *MemNetwork
	cfg MemConfig
	h   Handler

	// thaw is non-nil while the endpoint is frozen, and closed by Resume.
	// Read without a lock by the queues' readers.
	thaw atomic.Pointer[chan struct{}]

	// Guarded by net.mu.
	links    map[message.BrokerID]*memLink // the current link per peer (not closed)
	last     map[message.BrokerID]*memLink // the newest link per peer, closed or not: PeerUp waits for its PeerDown
	open     map[*memLink]bool             // every link end whose reader still runs
	sessions map[*memSession]bool
	crashed  bool
	closed   bool
}

// Listen adds an endpoint at cfg.Addr whose links and sessions are reported
// to h. The address must be free: nobody listens there, or its previous
// endpoint crashed or closed.
func (n *MemNetwork) Listen(cfg MemConfig, h Handler) (*MemEndpoint, error) {
	if cfg.ID == "" || cfg.Addr == "" {
		return nil, errors.New("runtime: memnet: listen: an endpoint needs an ID and an address")
	}
	if cfg.MaxFrame == 0 {
		cfg.MaxFrame = wire.DefaultMaxFrame
	}
	if cfg.SendQueue == 0 {
		cfg.SendQueue = quic.DefaultSendQueue
	}
	if cfg.SendQueueBytes == 0 {
		cfg.SendQueueBytes = quic.DefaultSendQueueBytes
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if old := n.listening[cfg.Addr]; old != nil {
		return nil, fmt.Errorf("runtime: memnet: listen %s: address in use by %s", cfg.Addr, old.cfg.ID)
	}
	e := &MemEndpoint{net: n, cfg: cfg, h: h, links: map[message.BrokerID]*memLink{},
		last: map[message.BrokerID]*memLink{}, open: map[*memLink]bool{}, sessions: map[*memSession]bool{}}
	n.listening[cfg.Addr] = e
	n.announce()
	return e, nil
}

// ListenMem adds the endpoint of cfg (its advertised address, frame and
// queue limits) for rt: ListenQUIC's twin.
func ListenMem(n *MemNetwork, cfg *BrokerConfig, rt *Runtime) (*MemEndpoint, error) {
	return n.Listen(MemConfig{
		ID: message.BrokerID(cfg.ID), Addr: cfg.AdvertisedAddr(),
		MaxFrame: cfg.Limits.MaxFrame, SendQueue: cfg.Limits.SendQueue, SendQueueBytes: cfg.Limits.SendQueueBytes,
	}, rt)
}

// announce wakes the dials waiting for an address (n.mu held).
func (n *MemNetwork) announce() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// Addr is the endpoint's address.
func (e *MemEndpoint) Addr() string { return e.cfg.Addr }

// frozen returns the channel Resume closes, or nil when e is not frozen.
func (e *MemEndpoint) frozen() <-chan struct{} {
	if ch := e.thaw.Load(); ch != nil {
		return *ch
	}
	return nil
}

// Freeze stops everything to and from e, as SIGSTOP stops a process: its
// queues are no longer read (its senders' queues fill up), nothing it
// queued is delivered, and dials to it wait. Freezing a frozen endpoint is
// a no-op.
func (e *MemEndpoint) Freeze() {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	if !e.crashed && !e.closed && e.thaw.Load() == nil {
		ch := make(chan struct{})
		e.thaw.Store(&ch)
	}
}

// Resume undoes Freeze: what waited is delivered, in order.
func (e *MemEndpoint) Resume() {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	e.resume()
}

func (e *MemEndpoint) resume() {
	if ch := e.thaw.Swap(nil); ch != nil {
		close(*ch)
		e.net.announce()
	}
}

// Crash takes e off the network as SIGKILL takes a process: silently (see
// MemNetwork). Its own handler still sees its links and sessions end;
// nothing it does afterwards reaches anyone (stop its runtime with
// Runtime.Kill).
func (e *MemEndpoint) Crash() {
	n := e.net
	n.mu.Lock()
	if e.crashed || e.closed {
		n.mu.Unlock()
		return
	}
	e.crashed = true
	e.resume()
	if n.listening[e.cfg.Addr] == e {
		delete(n.listening, e.cfg.Addr)
	}
	for l := range e.open {
		l.dead = true
		l.in.end(pipeSink, "crashed")    // its reader ends; what peers send vanishes
		l.out.end(pipeSilent, "crashed") // peers get nothing more, and no end
	}
	for s := range e.sessions {
		s.in.end(pipeSink, "crashed")
		s.out.end(pipeSilent, "crashed")
	}
	clear(e.links)
	n.mu.Unlock()
}

// Close takes e off the network in order, as a broker process exits: every
// link and session is closed (what was queued is still delivered, then the
// other end sees it end). Safe to call twice, and after Crash.
func (e *MemEndpoint) Close() error {
	n := e.net
	n.mu.Lock()
	if e.crashed || e.closed {
		n.mu.Unlock()
		return nil
	}
	e.closed = true
	e.resume()
	if n.listening[e.cfg.Addr] == e {
		delete(n.listening, e.cfg.Addr)
	}
	var links []*memLink
	for l := range e.open {
		links = append(links, l)
	}
	var sessions []*memSession
	for s := range e.sessions {
		sessions = append(sessions, s)
	}
	n.mu.Unlock()
	for _, l := range links {
		l.Close("broker shutting down")
	}
	for _, s := range sessions {
		s.Close("broker shutting down")
	}
	return nil
}

// Dial returns the link to the broker peer at addr (peer empty: whoever
// answers there, a joinpoint). The link already up to peer (or, by address,
// to the broker that advertised addr) is returned as it is; otherwise a
// new one is made once a live broker answers at addr. Both ends report
// PeerUp. It fails when another broker answers at addr, and when nobody
// answers before ctx ends or the handshake timeout.
func (e *MemEndpoint) Dial(ctx context.Context, peer message.BrokerID, addr string) (PeerLink, error) {
	if peer == e.cfg.ID {
		return nil, fmt.Errorf("runtime: memnet: dial: %s cannot link to itself", peer)
	}
	who := addr
	if peer != "" {
		who = fmt.Sprintf("broker %s (%s)", peer, addr)
	}
	ctx, cancel := context.WithTimeout(ctx, memHandshakeTimeout)
	defer cancel()
	n := e.net
	for {
		n.mu.Lock()
		if e.crashed || e.closed {
			n.mu.Unlock()
			return nil, fmt.Errorf("runtime: memnet: dial %s: %w", who, ErrMemClosed)
		}
		if l := e.current(peer, addr); l != nil {
			n.mu.Unlock()
			return l, nil
		}
		r := n.listening[addr]
		if r != nil && e.thaw.Load() == nil && r.thaw.Load() == nil {
			switch {
			case r == e:
				n.mu.Unlock()
				return nil, fmt.Errorf("runtime: memnet: dial %s: that is this broker", who)
			case peer != "" && r.cfg.ID != peer:
				n.mu.Unlock()
				return nil, fmt.Errorf("runtime: memnet: dial %s: dialled %s but reached %s", who, peer, r.cfg.ID)
			}
			l, replaced := n.connect(e, r)
			n.mu.Unlock()
			for _, old := range replaced {
				old.Close("replaced by a newer link")
			}
			go l.run()
			go l.other.run()
			return l, nil
		}
		// Nobody there, or one of the two is frozen: no answer yet.
		wait := n.changed
		n.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("runtime: memnet: dial %s: no answer: %w", who, ctx.Err())
		}
	}
}

// current is e's link already up to peer, or (peer empty) to the broker
// that advertised addr; nil if none (n.mu held).
func (e *MemEndpoint) current(peer message.BrokerID, addr string) *memLink {
	if peer != "" {
		return e.links[peer]
	}
	for _, l := range e.links {
		if l.peerAddr == addr {
			return l
		}
	}
	return nil
}

// connect makes a link between a (dialling) and b and registers both ends;
// it returns a's end and the ends it replaces, to close (n.mu held).
func (n *MemNetwork) connect(a, b *MemEndpoint) (*memLink, []*memLink) {
	ab := newMemPipe(a.cfg.SendQueue, a.cfg.SendQueueBytes)
	ba := newMemPipe(b.cfg.SendQueue, b.cfg.SendQueueBytes)
	la := &memLink{ep: a, peer: b.cfg.ID, peerAddr: b.cfg.Addr, peerEp: b, out: ab, in: ba, down: make(chan struct{})}
	lb := &memLink{ep: b, peer: a.cfg.ID, peerAddr: a.cfg.Addr, peerEp: a, out: ba, in: ab, down: make(chan struct{})}
	la.other, lb.other = lb, la
	var replaced []*memLink
	for _, l := range []*memLink{la, lb} {
		if old := l.ep.links[l.peer]; old != nil {
			replaced = append(replaced, old)
		}
		l.prev = l.ep.last[l.peer]
		l.ep.links[l.peer] = l
		l.ep.last[l.peer] = l
		l.ep.open[l] = true
	}
	return la, replaced
}

// unregister forgets l as its endpoint's current link (n.mu held).
func (l *memLink) unregister() {
	if l.ep.links[l.peer] == l {
		delete(l.ep.links, l.peer)
	}
}

// memLink is one end of a broker link: the PeerLink its endpoint's runtime
// holds. out carries what this end sends, in what it receives.
type memLink struct {
	ep       *MemEndpoint
	peer     message.BrokerID
	peerAddr string
	peerEp   *MemEndpoint // the other end's endpoint (its freeze stops what comes in)
	out, in  *memPipe
	other    *memLink
	prev     *memLink      // the link to peer before this one: its PeerDown comes first
	down     chan struct{} // closed once PeerDown was reported
	dead     bool          // guarded by net.mu: ep crashed, Close is local

	closeOnce sync.Once
}

func (l *memLink) Peer() message.BrokerID { return l.peer }

// TrySend queues m without waiting; false when the queue is full or the
// link closed.
func (l *memLink) TrySend(m message.Message) bool { return l.out.putMessage(m, false) == nil }

// Send queues m, waiting while the queue is full; it fails once the link
// is closed.
func (l *memLink) Send(m message.Message) error { return l.out.putMessage(m, true) }

// Queued is the number of frames waiting for the peer.
func (l *memLink) Queued() int { return l.out.queued() }

// Close ends the link: this end's reader stops (PeerDown here), what the
// peer still sends is lost, and the peer gets what this end had queued,
// then the end of the link (PeerDown there). After a crash of this end it
// does nothing: its reader has stopped, and its peer hears nothing.
func (l *memLink) Close(reason string) {
	l.closeOnce.Do(func() {
		n := l.ep.net
		n.mu.Lock()
		dead := l.dead
		l.unregister()
		if !dead {
			l.other.unregister()
		}
		n.mu.Unlock()
		if !dead {
			l.out.end(pipeClosing, "closed by the peer: "+reason)
			l.in.end(pipeSink, "closed locally: "+reason)
		}
	})
}

func (l *memLink) String() string { return fmt.Sprintf("memnet link %s↔%s", l.ep.cfg.ID, l.peer) }

// gate returns the channel to wait on while either end is frozen, or nil.
func (l *memLink) gate() <-chan struct{} {
	if ch := l.ep.frozen(); ch != nil {
		return ch
	}
	return l.peerEp.frozen()
}

// run is the life of this end, on its own goroutine: PeerUp (after the
// replaced link's PeerDown), the messages in order, PeerDown.
func (l *memLink) run() {
	if l.prev != nil {
		<-l.prev.down
		l.prev = nil
	}
	h := l.ep.h
	h.PeerUp(l)
	err := l.in.feed(l.gate, l.ep.cfg.MaxFrame, func(ms []message.Message) { h.PeerMessages(l, ms) }, l.Close)
	n := l.ep.net
	n.mu.Lock()
	delete(l.ep.open, l)
	n.mu.Unlock()
	h.PeerDown(l, fmt.Errorf("runtime: memnet: %s: %w", l, err))
	close(l.down)
}

// DialClient opens a client session with the broker at addr, waiting (as
// Dial does) while nobody answers there. The session's queue toward the
// client is bounded by the broker's MemConfig; its queue toward the broker
// by internal/quic's client defaults.
func (n *MemNetwork) DialClient(ctx context.Context, addr string) (*MemClient, error) {
	ctx, cancel := context.WithTimeout(ctx, memHandshakeTimeout)
	defer cancel()
	for {
		n.mu.Lock()
		if e := n.listening[addr]; e != nil && e.thaw.Load() == nil {
			s := &memSession{ep: e,
				out: newMemPipe(e.cfg.SendQueue, e.cfg.SendQueueBytes),
				in:  newMemPipe(quic.DefaultSendQueue, quic.DefaultSendQueueBytes)}
			e.sessions[s] = true
			n.mu.Unlock()
			go s.run()
			return &MemClient{s: s, broker: e.cfg.ID}, nil
		}
		wait := n.changed
		n.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("runtime: memnet: dial broker %s: no answer: %w", addr, ctx.Err())
		}
	}
}

// memSession is a client session as its broker sees it: a ClientSession
// that, like internal/quic's Session, also takes encoded frames (the
// runtime's deliveries, encoded once per publication) and speaks the
// current protocol version.
type memSession struct {
	ep      *MemEndpoint
	out, in *memPipe // to the client, from the client

	closeOnce sync.Once
}

func (s *memSession) TrySend(m message.Message) bool { return s.out.putMessage(m, false) == nil }

// Hold is TrySend: the reader is woken as frames arrive (nothing to flush).
func (s *memSession) Hold(m message.Message) bool { return s.TrySend(m) }

// HoldFrame queues a copy of an encoded frame (the runtime reuses its
// buffer).
func (s *memSession) HoldFrame(frame []byte) bool {
	return s.out.put(append([]byte(nil), frame...), false) == nil
}

func (s *memSession) Flush() {}

func (s *memSession) Version() uint16 { return wire.ProtocolVersion }

// Close ends the session: the client still reads what was queued, then
// gets an error carrying reason.
func (s *memSession) Close(reason string) {
	s.closeOnce.Do(func() {
		s.out.end(pipeClosing, "broker closed the session: "+reason)
		s.in.end(pipeSink, "closed by the broker: "+reason)
	})
}

func (s *memSession) gate() <-chan struct{} { return s.ep.frozen() }

func (s *memSession) run() {
	h := s.ep.h
	h.ClientUp(s)
	err := s.in.feed(s.gate, s.ep.cfg.MaxFrame, func(ms []message.Message) { h.ClientMessages(s, ms) }, s.Close)
	n := s.ep.net
	n.mu.Lock()
	delete(s.ep.sessions, s)
	n.mu.Unlock()
	h.ClientDown(s, fmt.Errorf("runtime: memnet: client session: %w", err))
}

// MemClient is a client's end of a session on a MemNetwork: what package
// client needs of a connection (Send, Recv, Close), for client.Options.Dial.
// Send may be called from any goroutine, Recv and Next from one at a time.
type MemClient struct {
	s      *memSession
	broker message.BrokerID
	buf    [][]byte
}

// Broker is the ID of the broker this client is connected to.
func (c *MemClient) Broker() message.BrokerID { return c.broker }

// Send queues m for the broker, waiting while the queue is full.
func (c *MemClient) Send(m message.Message) error { return c.s.in.putMessage(m, true) }

// Recv returns the next message from the broker, waiting for it. Once the
// broker closed the session (and everything before was read), the error
// says why.
func (c *MemClient) Recv() (message.Message, error) { return c.Next(context.Background()) }

// Next is Recv until ctx ends. A message already there is returned even
// when ctx has ended (poll with a cancelled context).
func (c *MemClient) Next(ctx context.Context) (message.Message, error) {
	var err error
	c.buf, err = c.s.out.next(ctx, c.s.gate, 1, c.buf[:0])
	if err != nil {
		return nil, err
	}
	m, _, err := wire.Decode(c.buf[0], 0)
	c.buf[0] = nil
	return m, err
}

// Close ends the session from the client's side.
func (c *MemClient) Close() error {
	c.s.in.end(pipeClosing, "client closed")
	c.s.out.end(pipeSink, "client closed")
	return nil
}

// memPipe is one direction of a link or session: the frames its sender
// queued, in order, until the receiver takes them. Bounded as
// internal/quic's send queue: in frames and in bytes, an empty queue
// taking any one frame.
type memPipe struct {
	maxFrames, maxBytes int

	mu     sync.Mutex
	frames [][]byte // queued from head on
	head   int
	bytes  int
	state  pipeState
	why    string        // why it ended (state past pipeOpen)
	wake   chan struct{} // one slot: frames arrived, or the state changed (one reader)
	space  chan struct{} // non-nil while a sender waits for room; closed when there is some
}

type pipeState uint8

const (
	pipeOpen    pipeState = iota
	pipeClosing           // its sender closed: sends fail; the receiver takes what is queued, then the end
	pipeSink              // its receiver closed or crashed: sends vanish; the receiver ends at once (final)
	pipeSilent            // its sender crashed: nothing more arrives, and no end (until the receiver closes)
)

func newMemPipe(maxFrames, maxBytes int) *memPipe {
	return &memPipe{maxFrames: maxFrames, maxBytes: maxBytes, wake: make(chan struct{}, 1)}
}

// signal wakes the reader and any waiting sender (p.mu held).
func (p *memPipe) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
	if p.space != nil {
		close(p.space)
		p.space = nil
	}
}

// end moves p to st (see pipeState). A sink stays one, and a crash of the
// sender of a closing pipe keeps it closing: the close was on its way.
func (p *memPipe) end(st pipeState, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == pipeSink || p.state == st || (p.state == pipeClosing && st == pipeSilent) {
		return
	}
	p.state, p.why = st, why
	if st != pipeClosing {
		clear(p.frames)
		p.frames, p.head, p.bytes = p.frames[:0], 0, 0
	}
	p.signal()
}

func (p *memPipe) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.frames) - p.head
}

// putMessage encodes m and queues it (see put).
func (p *memPipe) putMessage(m message.Message, wait bool) error {
	frame, err := wire.AppendFrame(nil, m)
	if err != nil {
		return err
	}
	return p.put(frame, wait)
}

// put queues frame; when the queue is full it waits for room (wait) or
// fails. After the pipe ended it fails, except toward a crashed receiver,
// where what is sent vanishes.
func (p *memPipe) put(frame []byte, wait bool) error {
	for {
		p.mu.Lock()
		switch p.state {
		case pipeSink, pipeSilent:
			p.mu.Unlock()
			return nil
		case pipeClosing:
			why := p.why
			p.mu.Unlock()
			return fmt.Errorf("%w: %s", ErrMemClosed, why)
		}
		if n := len(p.frames) - p.head; n == 0 || (n < p.maxFrames && p.bytes < p.maxBytes) {
			if p.head > 0 && p.head == len(p.frames) {
				p.frames, p.head = p.frames[:0], 0
			}
			p.frames = append(p.frames, frame)
			p.bytes += len(frame)
			select {
			case p.wake <- struct{}{}:
			default:
			}
			p.mu.Unlock()
			return nil
		}
		if !wait {
			p.mu.Unlock()
			return errMemQueueFull
		}
		if p.space == nil {
			p.space = make(chan struct{})
		}
		room := p.space
		p.mu.Unlock()
		<-room
	}
}

// next appends to dst up to max queued frames, waiting for one while the
// queue is empty or gate (a frozen end) says to wait. It fails once the
// pipe has ended (with its reason) or ctx ended with nothing there.
func (p *memPipe) next(ctx context.Context, gate func() <-chan struct{}, max int, dst [][]byte) ([][]byte, error) {
	for {
		p.mu.Lock()
		n := len(p.frames) - p.head
		st := p.state
		switch {
		case st == pipeSink || (st == pipeClosing && n == 0):
			why := p.why
			p.mu.Unlock()
			return dst, errors.New(why)
		case n > 0:
			thaw := gate()
			if thaw == nil {
				k := min(n, max)
				for _, f := range p.frames[p.head : p.head+k] {
					p.bytes -= len(f)
				}
				dst = append(dst, p.frames[p.head:p.head+k]...)
				clear(p.frames[p.head : p.head+k])
				p.head += k
				if p.head == len(p.frames) {
					p.frames, p.head = p.frames[:0], 0
				} else if p.head > 1024 && p.head > len(p.frames)/2 {
					m := copy(p.frames, p.frames[p.head:])
					clear(p.frames[m:])
					p.frames, p.head = p.frames[:m], 0
				}
				if p.space != nil {
					close(p.space)
					p.space = nil
				}
				p.mu.Unlock()
				return dst, nil
			}
			p.mu.Unlock()
			select {
			case <-thaw:
			case <-p.wake:
			case <-ctx.Done():
				return dst, ctx.Err()
			}
			continue
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
}

// feed decodes what arrives on p (frames of at most maxFrame bytes) and
// hands it to deliver in batches of at most memBatch messages, in order,
// until p ends or a frame is malformed (then it closes the link or session
// with the reason); it returns why.
func (p *memPipe) feed(gate func() <-chan struct{}, maxFrame int, deliver func([]message.Message), closeWith func(reason string)) error {
	var frames [][]byte
	ms := make([]message.Message, 0, memBatch)
	for {
		var err error
		frames, err = p.next(context.Background(), gate, memBatch, frames[:0])
		if err != nil {
			return err
		}
		for i, f := range frames {
			m, _, err := wire.Decode(f, maxFrame)
			frames[i] = nil
			if err != nil {
				if len(ms) > 0 {
					deliver(ms)
				}
				err = fmt.Errorf("malformed frame: %w", err)
				closeWith(err.Error())
				return err
			}
			ms = append(ms, m)
		}
		deliver(ms)
		clear(ms)
		ms = ms[:0]
	}
}
