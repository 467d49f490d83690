package runtime

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/deltapub/deltapub/internal/webproto"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/web"
	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"
	"github.com/rs/zerolog"
)

// WSPath is where the WebSocket listener takes web client sessions.
const WSPath = "/v1/ws"

// helloTimeout is how long a new WebSocket session may stay without a hello.
const helloTimeout = 10 * time.Second

// wsWriters is the number of goroutines that write the queued frames of
// plain (non-TLS) sessions into nbio's non-blocking connections.
const wsWriters = 4

// WSListener takes web client sessions over WebSocket (docs/websocket.md)
// and reports them to the runtime as ClientSessions, like QUIC sessions:
// the runtime does not know which transport a session rides on.
//
// Plain ws is served by nbio's epoll engine: an idle connection costs no
// goroutine (docs/websocket.md has the measurement). With TLS it is served
// by net/http and crypto/tls, a goroutine per connection: nbio's own TLS is
// a fork of crypto/tls, which this broker does not take on.
type WSListener struct {
	rt      *Runtime
	id      message.BrokerID
	epoch   uint64
	token   string
	limits  LimitsConfig
	log     zerolog.Logger
	up      *websocket.Upgrader
	limiter *tokenBucket
	writers chan *wsSession
	addr    string

	engine *nbhttp.Engine // plain ws
	srv    *http.Server   // wss
	ln     net.Listener

	// The JSON body of the publication being delivered: the runtime hands
	// one publication to every session in turn, each session's frame
	// differs only in its subscription.
	bodyMu  sync.Mutex
	bodyKey bodyKey
	body    []byte

	mu       sync.Mutex
	conns    map[*nbio.Conn]*wsConn // plain connections, for the written-bytes count
	sessions map[string]*wsSession  // by token, until they end
	done     chan struct{}
}

// ListenWS starts the WebSocket listener of cfg (cfg.WSListen) for rt. token
// is what clients must present in their hello ("": any client).
func ListenWS(cfg *BrokerConfig, epoch uint64, token string, rt *Runtime, log zerolog.Logger) (*WSListener, error) {
	l := &WSListener{
		rt: rt, id: message.BrokerID(cfg.ID), epoch: epoch, token: token, limits: cfg.Limits,
		log:      log.With().Str("transport", "ws").Logger(),
		limiter:  newTokenBucket(float64(cfg.Limits.WSHandshakes), time.Now),
		writers:  make(chan *wsSession, cfg.Limits.MaxClients+1024),
		conns:    map[*nbio.Conn]*wsConn{},
		sessions: map[string]*wsSession{},
		done:     make(chan struct{}),
	}
	up := websocket.NewUpgrader()
	// Frames up to max_frame are read and answered with an error frame if
	// too large for the protocol; nbio itself closes (1009) beyond twice
	// that, before buffering them.
	up.MessageLengthLimit = 2 * cfg.Limits.MaxFrame
	up.KeepaliveTime = 0 // idle sessions are fine; dead ones end with TCP
	up.CheckOrigin = func(*http.Request) bool { return true }
	up.Subprotocols = []string{webproto.SubprotocolJSON, webproto.SubprotocolMsgpack}
	up.BlockingModAsyncWrite = false // wss: our writer goroutine does the blocking write
	// wss: the reading goroutine starts after Upgrade (below), once OnOpen
	// has set the connection's session.
	up.BlockingModHandleRead = false
	up.OnOpen(l.open)
	up.OnMessage(l.message)
	up.OnClose(l.closed)
	l.up = up

	mux := http.NewServeMux()
	mux.HandleFunc(WSPath, l.upgrade)
	static, _ := fs.Sub(web.FS, ".") // web.FS holds the example page and the JS client
	mux.Handle("/", http.FileServerFS(static))

	ln, err := net.Listen("tcp", cfg.WSListen)
	if err != nil {
		return nil, fmt.Errorf("runtime: ws_listen: %w", err)
	}
	l.addr = ln.Addr().String()
	if cfg.TLS.CertFile != "" || raceBuild {
		l.ln = ln
		tc, err := clientTLS(cfg)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("runtime: ws_listen: %w", err)
		}
		if tc != nil {
			l.ln = tls.NewListener(ln, tc)
		}
		// A client's failed TLS handshake is the client's business, not a
		// line in the broker's log.
		l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: stdlog.New(io.Discard, "", 0)}
		go l.srv.Serve(l.ln)
		return l, nil
	}
	logging.SetLevel(logging.LevelError)
	l.engine = nbhttp.NewEngine(nbhttp.Config{
		Name: "deltapub-ws", Handler: mux, MaxLoad: cfg.Limits.MaxClients + 1024,
		Listen: func(string, string) (net.Listener, error) { return ln, nil },
		Addrs:  []string{l.addr},
		// nbio's own bound on what it buffers for a connection the kernel
		// cannot take more of; ours (SendQueueBytes, below) applies first.
		MaxWriteBufferSize: 2 * cfg.Limits.SendQueueBytes,
	})
	l.engine.OnWrittenSize(l.written)
	if err := l.engine.Start(); err != nil {
		ln.Close()
		return nil, fmt.Errorf("runtime: ws_listen: %w", err)
	}
	for range wsWriters {
		go l.writeLoop()
	}
	return l, nil
}

// Addr is the listener's address.
func (l *WSListener) Addr() string { return l.addr }

// Close stops the listener; every session ends ("broker closing", 1001).
func (l *WSListener) Close() error {
	select {
	case <-l.done:
		return nil
	default:
	}
	close(l.done)
	// No resume after this: the sessions end with their connections.
	l.mu.Lock()
	for _, s := range l.sessions {
		if s.end() {
			go s.down(errors.New("broker closing"))
		}
	}
	l.mu.Unlock()
	if l.srv != nil {
		return l.srv.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return l.engine.Shutdown(ctx)
}

func (l *WSListener) upgrade(w http.ResponseWriter, r *http.Request) {
	if !l.limiter.take() {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many WebSocket handshakes; retry later", http.StatusTooManyRequests)
		l.rt.m.clientDisconnects.WithLabelValues("ws handshake rate").Inc()
		return
	}
	c, err := l.up.Upgrade(w, r, nil)
	if err != nil {
		l.log.Debug().Err(err).Str("from", r.RemoteAddr).Msg("websocket upgrade failed")
		return
	}
	if c.IsBlockingMod() {
		go c.HandleRead(4096)
	}
}

func (l *WSListener) open(c *websocket.Conn) {
	wc := &wsConn{l: l, c: c, codec: webproto.Codec{Binary: c.Subprotocol() == webproto.SubprotocolMsgpack}}
	if nc, ok := c.UnderlayerConn().(*nbio.Conn); ok {
		l.mu.Lock()
		l.conns[nc] = wc
		l.mu.Unlock()
		wc.nc = nc
	} else {
		wc.blocking = true
	}
	c.SetSession(wc)
	wc.helloTimer = time.AfterFunc(helloTimeout, func() {
		if wc.session() == nil {
			wc.fail(&webproto.Error{Code: webproto.CodeNoHello, Msg: fmt.Sprintf("no hello within %v", helloTimeout), Close: webproto.ClosePolicy})
		}
	})
}

func (l *WSListener) message(c *websocket.Conn, mt websocket.MessageType, data []byte) {
	wc, _ := c.Session().(*wsConn)
	if wc == nil {
		return
	}
	if len(data) > l.limits.MaxFrame {
		wc.fail(&webproto.Error{Code: webproto.CodeTooLarge, Msg: fmt.Sprintf("frame of %d bytes, at most %d", len(data), l.limits.MaxFrame), Close: webproto.CloseTooBig})
		return
	}
	hello, m, err := webproto.Decode(data, mt == websocket.BinaryMessage)
	if err != nil {
		var pe *webproto.Error
		if !errors.As(err, &pe) {
			pe = &webproto.Error{Code: webproto.CodeBadFrame, Msg: err.Error(), Close: webproto.CloseBadData}
		}
		wc.fail(pe)
		return
	}
	s := wc.session()
	switch {
	case hello != nil && s != nil, hello == nil && s == nil:
		wc.fail(&webproto.Error{Code: webproto.CodeNoHello, Msg: "hello comes first, and once", Close: webproto.ClosePolicy})
	case hello != nil:
		l.hello(wc, hello)
	default:
		l.rt.ClientMessages(s, []message.Message{m})
	}
}

// hello authenticates the connection, then resumes the session it names or
// opens a new one.
func (l *WSListener) hello(wc *wsConn, h *webproto.Hello) {
	if l.token != "" && subtle.ConstantTimeCompare([]byte(h.Token), []byte(l.token)) != 1 {
		wc.fail(&webproto.Error{Code: webproto.CodeUnauthorized, Msg: "wrong or missing token", Close: webproto.ClosePolicy})
		return
	}
	wc.helloTimer.Stop()
	if h.Resume != "" {
		l.mu.Lock()
		old := l.sessions[h.Resume]
		l.mu.Unlock()
		if old != nil && old.resume(wc, h.Positions) {
			return
		}
	}
	s := &wsSession{l: l, token: newToken(), conn: wc}
	l.mu.Lock()
	l.sessions[s.token] = s
	l.mu.Unlock()
	wc.mu.Lock()
	wc.sess = s
	wc.mu.Unlock()
	// Not resumed: the client subscribes again, and knows it missed what
	// came meanwhile.
	wc.direct(wc.codec.Welcome(l.id, l.epoch, s.token, webproto.Resume{Tried: h.Resume != ""}))
	l.rt.ClientUp(s)
	l.rt.ClientMessages(s, []message.Message{&message.ClientHello{Publisher: h.Publisher, Epoch: h.Epoch}})
}

func (l *WSListener) closed(c *websocket.Conn, err error) {
	wc, _ := c.Session().(*wsConn)
	if wc == nil {
		return
	}
	if wc.nc != nil {
		l.mu.Lock()
		delete(l.conns, wc.nc)
		l.mu.Unlock()
	}
	wc.helloTimer.Stop()
	if err == nil {
		err = errors.New("closed")
	}
	if s := wc.session(); s != nil {
		s.detach(wc, fmt.Errorf("runtime: ws: client session: %w", err))
	}
}

// forget drops an ended session's token.
func (l *WSListener) forget(s *wsSession) {
	l.mu.Lock()
	if l.sessions[s.token] == s {
		delete(l.sessions, s.token)
	}
	l.mu.Unlock()
}

// written counts the bytes nbio wrote to a plain connection's socket.
func (l *WSListener) written(nc *nbio.Conn, _ []byte, n int) {
	l.mu.Lock()
	wc := l.conns[nc]
	l.mu.Unlock()
	if wc != nil {
		if s := wc.session(); s != nil {
			s.written(wc, n)
		}
	}
}

func (l *WSListener) writeLoop() {
	for {
		select {
		case s := <-l.writers:
			s.writeOut()
		case <-l.done:
			return
		}
	}
}

type bodyKey struct {
	pub   message.PubID
	attrs *matching.Attr // the core shares one publication's attributes among its deliveries
	time  int64
}

// deliverBody is d's JSON body, encoded once per publication.
func (l *WSListener) deliverBody(d *message.Deliver) []byte {
	k := bodyKey{pub: d.Pub, time: d.Time}
	if len(d.Attrs) > 0 {
		k.attrs = &d.Attrs[0]
	}
	l.bodyMu.Lock()
	defer l.bodyMu.Unlock()
	if l.body == nil || l.bodyKey != k {
		l.bodyKey, l.body = k, webproto.Codec{}.DeliverBody(d)
	}
	return l.body
}

// tokenBucket is a rate limit: rate per second, bursts of one second's worth.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newTokenBucket(rate float64, now func() time.Time) *tokenBucket {
	return &tokenBucket{rate: rate, tokens: rate, last: now(), now: now}
}

func (b *tokenBucket) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.now()
	b.tokens = min(b.rate, b.tokens+t.Sub(b.last).Seconds()*b.rate)
	b.last = t
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// closeCode is the WebSocket close code for a runtime's close reason.
func closeCode(reason string) int {
	switch {
	case strings.HasPrefix(reason, "slow consumer"):
		return webproto.CloseSlowConsumer
	case strings.HasPrefix(reason, "too many clients"), strings.Contains(reason, "leaving"):
		return webproto.CloseTryLater
	default:
		return webproto.CloseNormal
	}
}
