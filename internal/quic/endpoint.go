package quic

import (
	"context"
	"crypto/hmac"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"
)

// Handler receives the events of an Endpoint. For one link (or session)
// the calls come from one goroutine, in this order: PeerUp, PeerMessage in
// arrival order, PeerDown. For one peer, PeerUp and PeerDown alternate: a
// link that replaces an older one to the same peer announces PeerUp only
// after the older one's PeerDown returned. Handlers must not block for long
// (they hold up that link's reading, which is the backpressure toward the
// peer) and must not call Endpoint.Close.
type Handler interface {
	PeerUp(l *Link)                         // an authenticated broker link is up (dialled or accepted)
	PeerMessage(l *Link, m message.Message) // in arrival order, from one goroutine per link
	PeerDown(l *Link, err error)            // the link is gone; err says why
	ClientUp(c *Session)                    // a client session is up (token checked)
	ClientMessage(c *Session, m message.Message)
	ClientDown(c *Session, err error)
}

// BatchHandler is an optional extension of Handler: if the Handler
// implements it, messages arrive in batches (everything the link had
// already received, in order, at most 256) instead of one PeerMessage or
// ClientMessage call each, so a runtime can move a batch into its input
// queue with one operation. The slice is reused after the call returns:
// keep the messages, not the slice.
type BatchHandler interface {
	PeerMessages(l *Link, ms []message.Message)
	ClientMessages(c *Session, ms []message.Message)
}

// Endpoint is one broker's (or tool's) QUIC presence: a UDP socket that
// listens (if Config.Listen is set) and dials from the same port.
type Endpoint struct {
	cfg       Config
	h         Handler
	tr        *quic.Transport
	udp       *net.UDPConn // tr's socket, ours to close (closeTransport)
	ln        *quic.Listener
	serverTLS *tls.Config
	clientTLS *tls.Config
	ctx       context.Context
	cancel    context.CancelFunc
	sem       chan struct{}
	wg        sync.WaitGroup
	nextID    atomic.Uint64

	// mu guards the registry. Lock order: Endpoint.mu before peerConn.mu
	// (never the other way).
	mu        sync.Mutex
	links     map[message.BrokerID]*Link     // registered links (handshaking or up), one per peer
	dials     map[message.BrokerID]*dialCall // dials in progress
	sessions  map[message.ClientID]*Session
	linkAdded chan struct{} // closed and replaced whenever a link is registered
	closed    bool
}

type dialCall struct {
	done chan struct{}
	link *Link
	err  error
}

// Link is an authenticated connection to another broker.
type Link struct {
	*peerConn
	ep      *Endpoint
	peer    message.BrokerID
	epoch   uint64
	addr    string
	dialled bool          // we dialled it
	ready   chan struct{} // closed when the handshake ended (upErr says how)
	upErr   error
	prev    *Link         // the link this one replaced: wait for its PeerDown
	down    chan struct{} // closed after PeerDown returned (or if never up)
}

// Peer names the broker at the other end.
func (l *Link) Peer() message.BrokerID { return l.peer }

// PeerEpoch is the peer's epoch, from its handshake.
func (l *Link) PeerEpoch() uint64 { return l.epoch }

// PeerAddr is the address the peer advertised in its handshake.
func (l *Link) PeerAddr() string { return l.addr }

// Dialled reports whether this side dialled the link.
func (l *Link) Dialled() bool { return l.dialled }

// Send queues m for the peer, blocking while the send queue is full
// (backpressure) until there is room or the link closes (ErrClosed). The
// link owns m's encoding at once: m may be reused when Send returns.
func (l *Link) Send(m message.Message) error { return l.send(m, nil, sendBlock) }

// TrySend is Send without blocking: false when m was not queued (queue
// full, link closed, or m not encodable; Offer says which).
func (l *Link) TrySend(m message.Message) bool { return l.send(m, nil, sendTry) == nil }

// Offer is TrySend with the reason: ErrQueueFull, an ErrClosed error, or an
// encoding error.
func (l *Link) Offer(m message.Message) error { return l.send(m, nil, sendTry) }

// SendFrame queues an already encoded frame (wire.AppendFrame), e.g. one
// encoding forwarded to several links. Blocks like Send.
func (l *Link) SendFrame(frame []byte) error { return l.send(nil, frame, sendBlock) }

// TrySendFrame is SendFrame without blocking: false when the frame was not
// queued (queue full, link closed).
func (l *Link) TrySendFrame(frame []byte) bool { return l.send(nil, frame, sendTry) == nil }

// Hold is TrySend without waking the writer: a caller that queues several
// messages in a row calls Flush after the last one, and the writer takes
// them in one go (one stream write instead of one per message). A held
// queue larger than 64 KiB wakes the writer anyway.
func (l *Link) Hold(m message.Message) bool { return l.send(m, nil, sendHold) == nil }

// Flush wakes the writer for what Hold queued.
func (l *Link) Flush() { l.flush() }

// Queued is the number of frames waiting to be written.
func (l *Link) Queued() int { return l.queued() }

// Close closes the link in order: queued frames are still sent (for at
// most a couple of seconds), then the peer learns reason.
func (l *Link) Close(reason string) {
	l.ep.unregister(l)
	l.close(reason)
}

// RemoteAddr is the peer's UDP address.
func (l *Link) RemoteAddr() net.Addr { return l.st.RemoteAddr() }

func (l *Link) String() string { return fmt.Sprintf("link %s↔%s", l.ep.cfg.ID, l.peer) }

// Session is a client's session with this broker.
type Session struct {
	*peerConn
	ep      *Endpoint
	id      message.ClientID
	version uint16
}

// Version is the protocol version agreed with the client in the
// handshake: from 2 on, the client understands DeliverSet.
func (s *Session) Version() uint16 { return s.version }

// TrySendFrame queues an already encoded frame without blocking: false
// when it was not queued (queue full, session closed).
func (s *Session) TrySendFrame(frame []byte) bool { return s.send(nil, frame, sendTry) == nil }

// Hold and HoldFrame are TrySend and TrySendFrame without waking the
// writer; Flush wakes it (see Link.Hold).
func (s *Session) Hold(m message.Message) bool { return s.send(m, nil, sendHold) == nil }

// HoldFrame: see Hold.
func (s *Session) HoldFrame(frame []byte) bool { return s.send(nil, frame, sendHold) == nil }

// Flush wakes the writer for what Hold and HoldFrame queued.
func (s *Session) Flush() { s.flush() }

// ID is the broker-local handle of the session.
func (s *Session) ID() message.ClientID { return s.id }

// Send queues m for the client; blocks while the queue is full.
func (s *Session) Send(m message.Message) error { return s.send(m, nil, sendBlock) }

// TrySend is Send without blocking: false when m was not queued.
func (s *Session) TrySend(m message.Message) bool { return s.send(m, nil, sendTry) == nil }

// Offer is TrySend with the reason (ErrQueueFull, ErrClosed, encoding).
func (s *Session) Offer(m message.Message) error { return s.send(m, nil, sendTry) }

// SendFrame queues an already encoded frame.
func (s *Session) SendFrame(frame []byte) error { return s.send(nil, frame, sendBlock) }

// Queued is the number of frames waiting to be written.
func (s *Session) Queued() int { return s.queued() }

// Close ends the session in order.
func (s *Session) Close(reason string) { s.close(reason) }

// RemoteAddr is the client's address: UDP over QUIC, TCP over TCP.
func (s *Session) RemoteAddr() net.Addr { return s.st.RemoteAddr() }

// Listen opens an endpoint. With cfg.Listen empty it only dials.
func Listen(cfg Config, h Handler) (*Endpoint, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("quic: Listen: nil Handler")
	}
	srv, cli, err := tlsConfigs(&cfg)
	if err != nil {
		return nil, err
	}
	// One UDP socket listens and dials: peers see links come from the
	// listening address. A dial-only endpoint binds an ephemeral port on
	// every interface.
	laddr := cfg.Listen
	if laddr == "" {
		laddr = "0.0.0.0:0"
	}
	ua, err := net.ResolveUDPAddr("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("quic: listen address %q: %w", laddr, err)
	}
	udp, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("quic: listen %s: %w", laddr, err)
	}
	e := &Endpoint{
		cfg: cfg, h: h, serverTLS: srv, clientTLS: cli,
		tr:        &quic.Transport{Conn: udp},
		udp:       udp,
		sem:       make(chan struct{}, maxHandshakes),
		links:     map[message.BrokerID]*Link{},
		dials:     map[message.BrokerID]*dialCall{},
		sessions:  map[message.ClientID]*Session{},
		linkAdded: make(chan struct{}),
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if cfg.Listen != "" {
		e.ln, err = e.tr.Listen(srv, quicConfig(&cfg, true))
		if err != nil {
			_ = e.closeTransport()
			return nil, fmt.Errorf("quic: listen %s: %w", laddr, err)
		}
		if cfg.Secret == nil && cfg.CertFile == "" {
			cfg.Log.Warn().Msg("no broker secret and no mutual TLS: any peer may link to this broker")
		}
		e.wg.Add(1)
		go e.acceptLoop()
	}
	return e, nil
}

// Addr is the endpoint's UDP address.
func (e *Endpoint) Addr() net.Addr { return e.tr.Conn.LocalAddr() }

// Links returns the registered links (up or completing their handshake).
func (e *Endpoint) Links() []*Link {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Link, 0, len(e.links))
	for _, l := range e.links {
		out = append(out, l)
	}
	return out
}

// Link returns the registered link to peer, or nil.
func (e *Endpoint) Link(peer message.BrokerID) *Link {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.links[peer]
}

// Close closes every link and session at once and the socket, and waits
// (at most 5 s, then it returns an error) for the Handler's last calls
// (PeerDown/ClientDown) to return. Close
// links first with Link.Close for an orderly leave.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	var conns []*peerConn
	for _, l := range e.links {
		conns = append(conns, l.peerConn)
	}
	for _, s := range e.sessions {
		conns = append(conns, s.peerConn)
	}
	e.mu.Unlock()
	e.cancel()
	if e.ln != nil {
		_ = e.ln.Close()
	}
	for _, c := range conns {
		c.abort(codeShutdown, "endpoint closing")
	}
	// Wait for the links' last Handler calls, but not forever: a Handler
	// stuck in a call would otherwise hang the broker's shutdown.
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		e.closeTransport()
		return fmt.Errorf("quic: Close: handler calls still running after %v", closeWait)
	}
	return e.closeTransport()
}

// closeTransport closes the QUIC transport and then the UDP socket, which
// quic-go leaves open when it did not create it: left open, the address
// stayed bound, and a broker restarted in the same process (a removal
// while alive, runtime.RunBroker) could not listen on it again.
func (e *Endpoint) closeTransport() error {
	err := e.tr.Close()
	if cerr := e.udp.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

func (e *Endpoint) acceptLoop() {
	defer e.wg.Done()
	for {
		qc, err := e.ln.Accept(e.ctx)
		if err != nil {
			return
		}
		select {
		case e.sem <- struct{}{}:
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				run := e.accept(qc)
				<-e.sem // the handshake is over; the link's life is not bounded here
				if run != nil {
					run()
				}
			}()
		default:
			e.cfg.Log.Warn().Str("from", qc.RemoteAddr().String()).Msg("refusing connection: too many handshakes in progress")
			_ = qc.CloseWithError(codeBusy, "too many handshakes in progress")
		}
	}
}

// compatible returns the version both sides speak, or a refusal reason.
func (e *Endpoint) compatible(version, minVersion uint16, who string) (uint16, string) {
	v := min(version, e.cfg.version)
	if v < max(minVersion, e.cfg.minVersion) {
		return 0, fmt.Sprintf("incompatible protocol version: %s speaks versions %d to %d, %s speaks %d to %d",
			who, minVersion, version, e.self(), e.cfg.minVersion, e.cfg.version)
	}
	return v, ""
}

func (e *Endpoint) self() string {
	if e.cfg.ID == "" {
		return "this client"
	}
	return "broker " + string(e.cfg.ID)
}

// accept runs the acceptor's side of the handshake on a new connection and
// returns the life of the link or session (nil if refused).
func (e *Endpoint) accept(qc *quic.Conn) func() {
	from := qc.RemoteAddr().String()
	log := e.cfg.Log.With().Str("from", from).Logger()
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.HandshakeTimeout)
	defer cancel()
	str, err := qc.AcceptStream(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("connection without a stream")
		_ = qc.CloseWithError(codeRefused, "no stream opened")
		return nil
	}
	st := quicStream{qc, str}
	rd := wire.NewReader(st, e.cfg.MaxFrame)
	rd.UseArena(readArena)
	hello, v, who, ok := e.readHello(st, rd, from, log)
	if !ok {
		return nil
	}
	alpn := qc.ConnectionState().TLS.NegotiatedProtocol
	switch {
	case alpn == ALPNClient && hello.Role == message.RoleClient:
		return e.acceptClient(st, rd, hello, v, from, log)
	case alpn == ALPNBroker && hello.Role == message.RoleBroker:
		return e.acceptBroker(qc, st, rd, hello, v, who, log)
	}
	refuse(st, log, who, message.RefuseProtocol, fmt.Sprintf("role %v on ALPN %q", hello.Role, alpn))
	return nil
}

// readHello reads and checks the Hello that opens every connection, over
// QUIC or TCP: the magic, and a protocol version both sides speak (v). who
// names the peer for logs. The handshake gets HandshakeTimeout from here.
// Not ok: the connection was refused.
func (e *Endpoint) readHello(st carrier, rd *wire.Reader, from string, log zerolog.Logger) (hello *message.Hello, v uint16, who string, ok bool) {
	_ = st.SetDeadline(time.Now().Add(e.cfg.HandshakeTimeout))
	m, err := rd.Read()
	if err != nil {
		refuse(st, log, from, message.RefuseProtocol, fmt.Sprintf("reading Hello: %v", err))
		return nil, 0, "", false
	}
	hello, ok = m.(*message.Hello)
	if !ok {
		refuse(st, log, from, message.RefuseProtocol, fmt.Sprintf("expected Hello, got %v", m.Type()))
		return nil, 0, "", false
	}
	if hello.Magic != message.Magic {
		refuse(st, log, from, message.RefuseProtocol, fmt.Sprintf("bad magic %q", hello.Magic))
		return nil, 0, "", false
	}
	who = from
	if hello.ID != "" {
		who = fmt.Sprintf("broker %s (%s)", hello.ID, from)
	}
	v, why := e.compatible(hello.Version, hello.MinVersion, who)
	if why != "" {
		refuse(st, log, who, message.RefuseVersion, why)
		return nil, 0, "", false
	}
	return hello, v, who, true
}

// acceptClient ends a client's handshake, over QUIC or TCP: the token, then
// the Welcome with the session's ID.
func (e *Endpoint) acceptClient(st carrier, rd *wire.Reader, hello *message.Hello, v uint16, from string, log zerolog.Logger) func() {
	if e.cfg.ClientToken != "" && subtle.ConstantTimeCompare([]byte(hello.Token), []byte(e.cfg.ClientToken)) != 1 {
		reason := "client token missing or wrong"
		if hello.Token == "" {
			reason = "this broker requires a client token"
		}
		refuse(st, log, "client "+from, message.RefuseToken, reason)
		return nil
	}
	id := message.ClientID(e.nextID.Add(1))
	s := &Session{ep: e, id: id, version: v}
	s.peerConn = newPeerConn(st, rd, &e.cfg, log.With().Uint64("client", uint64(id)).Logger())
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		refuse(st, log, "client "+from, message.RefuseOther, "broker shutting down")
		return nil
	}
	e.sessions[id] = s
	e.mu.Unlock()
	w := &message.Welcome{Magic: message.Magic, Version: v, MinVersion: e.cfg.minVersion,
		ID: e.cfg.ID, Epoch: e.cfg.Epoch, Addr: e.cfg.Addr, Client: id}
	if err := writeHandshake(st, w); err != nil {
		e.dropSession(s)
		st.teardown(codeRefused, "handshake write failed")
		return nil
	}
	_ = st.SetDeadline(time.Time{})
	log.Debug().Uint64("client", uint64(id)).Msg("client session up")
	return func() {
		go s.writeLoop()
		e.h.ClientUp(s)
		var err error
		if bh, ok := e.h.(BatchHandler); ok {
			err = s.readLoop(fmt.Sprintf("client session %d", id), true, func(ms []message.Message) { bh.ClientMessages(s, ms) })
		} else {
			err = s.readLoop(fmt.Sprintf("client session %d", id), false, func(ms []message.Message) { e.h.ClientMessage(s, ms[0]) })
		}
		e.dropSession(s)
		e.h.ClientDown(s, err)
		<-s.writerDone
	}
}

func (e *Endpoint) dropSession(s *Session) {
	e.mu.Lock()
	delete(e.sessions, s.id)
	e.mu.Unlock()
}

func (e *Endpoint) acceptBroker(qc *quic.Conn, st quicStream, rd *wire.Reader, hello *message.Hello, v uint16, who string, log zerolog.Logger) func() {
	switch {
	case hello.ID == "":
		refuse(st, log, who, message.RefuseProtocol, "broker Hello without an ID")
		return nil
	case hello.ID == e.cfg.ID:
		refuse(st, log, who, message.RefuseProtocol, fmt.Sprintf("peer claims this broker's own ID %s", e.cfg.ID))
		return nil
	case e.cfg.CertFile != "" && len(qc.ConnectionState().TLS.PeerCertificates) == 0:
		refuse(st, log, who, message.RefuseAuth, "authentication failed: broker links need a certificate of the overlay CA")
		return nil
	}
	ekm, err := exportEKM(qc)
	if err != nil {
		refuse(st, log, who, message.RefuseOther, err.Error())
		return nil
	}
	if e.cfg.Secret != nil && !hmac.Equal(hello.Auth, authProof(e.cfg.Secret, ekm, roleDialer, hello.ID)) {
		refuse(st, log, who, message.RefuseAuth, "authentication failed: the peer does not prove it holds this overlay's secret")
		return nil
	}
	l := &Link{ep: e, peer: hello.ID, epoch: hello.Epoch, addr: hello.Addr,
		ready: make(chan struct{}), down: make(chan struct{})}
	l.peerConn = newPeerConn(st, rd, &e.cfg, log.With().Str("peer", string(hello.ID)).Logger())
	replaced, why := e.admitIncoming(l)
	if why != "" {
		refuse(st, log, who, message.RefuseDuplicate, why)
		return nil
	}
	if replaced != nil {
		replaced.abort(codeReplaced, "replaced by a newer link")
	}
	w := &message.Welcome{Magic: message.Magic, Version: v, MinVersion: e.cfg.minVersion,
		ID: e.cfg.ID, Epoch: e.cfg.Epoch, Addr: e.cfg.Addr}
	if e.cfg.Secret != nil {
		w.Auth = authProof(e.cfg.Secret, ekm, roleAcceptor, e.cfg.ID)
	}
	fail := func(err error) {
		l.upErr = err
		e.unregister(l)
		close(l.ready)
		close(l.down)
	}
	if err := writeHandshake(st, w); err != nil {
		fail(err)
		_ = qc.CloseWithError(codeRefused, "handshake write failed")
		return nil
	}
	m, err := rd.Read()
	if err != nil {
		var ae *quic.ApplicationError
		if errors.As(err, &ae) && ae.Remote {
			err = &RefusedError{Peer: who, Reason: ae.ErrorMessage, Remote: true}
		}
		log.Warn().Err(err).Msg("broker handshake failed after Welcome")
		fail(err)
		_ = qc.CloseWithError(codeRefused, "handshake failed")
		return nil
	}
	switch m := m.(type) {
	case *message.Ready:
	case *message.Refuse:
		err := &RefusedError{Peer: who, Code: m.Code, Reason: m.Reason, Remote: true}
		if m.Code == message.RefuseDuplicate {
			log.Debug().Err(err).Msg("peer dropped its duplicate link")
		} else {
			log.Warn().Err(err).Msg("peer refused the link")
		}
		fail(err)
		_ = qc.CloseWithError(codeRefused, "refused")
		return nil
	default:
		fail(refuse(st, log, who, message.RefuseProtocol, fmt.Sprintf("expected Ready, got %v", m.Type())))
		return nil
	}
	_ = st.SetDeadline(time.Time{})
	return func() { e.runLink(l) }
}

// admitIncoming decides whether an accepted link may be registered: it
// returns the link it replaces, or why it is refused. One link per pair of
// brokers: when both dial at once, the link dialled by the smaller ID
// survives (both sides apply the same rule); a link from a peer that
// restarted (larger epoch), or from a peer that re-dials after losing its
// end, replaces the old one.
func (e *Endpoint) admitIncoming(l *Link) (*Link, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, "broker shutting down"
	}
	p := l.peer
	if e.dials[p] != nil && e.cfg.ID < p {
		return nil, fmt.Sprintf("simultaneous dial: keeping the link %s dials", e.cfg.ID)
	}
	old := e.links[p]
	if old != nil && old.dialled && e.cfg.ID < p && l.epoch <= old.epoch {
		return nil, fmt.Sprintf("a link %s dialled is up", e.cfg.ID)
	}
	e.register(l, old)
	return old, ""
}

// register installs l (e.mu held), remembering the link it replaces.
func (e *Endpoint) register(l, old *Link) {
	l.prev = old
	e.links[l.peer] = l
	close(e.linkAdded)
	e.linkAdded = make(chan struct{})
}

// unregister removes l if it is still the registered link of its peer.
func (e *Endpoint) unregister(l *Link) {
	e.mu.Lock()
	if e.links[l.peer] == l {
		delete(e.links, l.peer)
	}
	e.mu.Unlock()
}

// runLink is the life of an up link: the writer goroutine, and in this
// goroutine PeerUp, the messages, PeerDown.
func (e *Endpoint) runLink(l *Link) {
	close(l.ready)
	go l.writeLoop()
	if l.prev != nil {
		<-l.prev.down // PeerUp/PeerDown alternate per peer
		l.prev = nil
	}
	l.log.Info().Bool("dialled", l.dialled).Uint64("epoch", l.epoch).Msg("link up")
	e.h.PeerUp(l)
	var err error
	if bh, ok := e.h.(BatchHandler); ok {
		err = l.readLoop(l.String(), true, func(ms []message.Message) { bh.PeerMessages(l, ms) })
	} else {
		err = l.readLoop(l.String(), false, func(ms []message.Message) { e.h.PeerMessage(l, ms[0]) })
	}
	e.unregister(l)
	l.log.Info().Err(err).Msg("link down")
	e.h.PeerDown(l, err)
	close(l.down)
	<-l.writerDone
}
