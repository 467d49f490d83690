// Package client is the Go client library of deltapub: connect to an edge
// broker, publish (acknowledged by that broker), subscribe with a filter
// and receive the matching publications.
//
//	c, err := client.Connect(ctx, "127.0.0.1:7001", client.Options{})
//	sub, err := c.Subscribe(ctx, filter)      // accepted by the edge broker
//	err = sub.WaitConfirmed(ctx)              // every broker has it: guarantees apply
//	for d := range sub.C { ... }              // deliveries, in per-publisher order
//	err = c.Publish(ctx, pub)                 // returns once the edge broker acknowledged
//
// Publications carry the identity (publisher, epoch, sequence number). The
// client keeps the unacknowledged ones and sends them again, with the same
// identity, after a backpressure answer or a reconnect, so a retry is
// recognised by the overlay and never delivered twice.
//
// Bounds and what happens at them (all in Options):
//   - MaxInFlight unacknowledged publications: Publish and PublishAsync
//     wait for room (or their context);
//   - DeliveryBuffer deliveries per subscription: when the application
//     does not read C, the client stops reading the connection (nothing is
//     dropped); the broker then buffers up to its own bound and finally
//     disconnects this client as a slow consumer (the subscription ends
//     with an error);
//   - refusals from the broker ("backpressure", or "sequence gap" for the
//     publications that followed a refused one): everything from the lowest
//     refused publication on (or from the N of "sequence gap: expected
//     N", the broker's own word for where the stream resumes) is sent
//     again, in order and under the same sequence numbers, after a pause
//     doubling from 5 ms to 500 ms; new publications wait meanwhile and
//     go out after the retransmission, never before one held earlier (the
//     stream has no holes); after BackpressureTimeout of
//     uninterrupted refusals the client fails. Any other refusal is final
//     and fails the client (the stream cannot continue past it);
//   - reconnects: at most MaxReconnects attempts per loss, ReconnectWait
//     apart, each to the next broker of the list given to Connect
//     ("A,B,C"); then the client fails. Durable subscriptions
//     (SubscribeDurable) survive a reconnect: they resume on the new
//     broker from their checkpoint token.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// Conn is one connection to a broker: what the transport provides
// (internal/quic's ClientConn; tests use an in-memory one).
type Conn interface {
	// Send queues m; it may block while the connection's buffer is full.
	Send(m message.Message) error
	// Recv returns the next message from the broker.
	Recv() (message.Message, error)
	Close() error
}

// DialFunc opens a connection to a broker.
type DialFunc func(ctx context.Context, addr string) (Conn, error)

// Options configure a Client. The zero value is usable.
type Options struct {
	// Token is presented to brokers that require one.
	Token string
	// Publisher names this client's publication stream; with Epoch it is
	// the source of every publication. Empty: a random name. Reuse a name
	// only with a larger Epoch (a new stream).
	Publisher string
	// Epoch of the stream. 0: the current time in nanoseconds.
	Epoch uint64
	// MaxInFlight bounds unacknowledged publications (default 1024).
	MaxInFlight int
	// DeliveryBuffer is the capacity of each Subscription's channel
	// (default 4096).
	DeliveryBuffer int
	// Reconnect, if true, redials after the connection is lost (the next
	// broker of the list given to Connect) and sends every unacknowledged
	// publication again. Plain subscriptions do not survive a reconnect:
	// they end with ErrConnectionLost; durable ones resume.
	Reconnect bool
	// MaxReconnects bounds dial attempts per loss (default 10).
	MaxReconnects int
	// ReconnectWait is the pause between attempts (default 200 ms).
	// FailureTimeout: a broker silent this long counts as failed (the
	// connection is lost; with Reconnect, the next broker is tried). 0:
	// the transport's default (30 s); at least 1 s. Over TCP it is the
	// kernel's keepalive that notices: a broker machine gone, not a
	// broker process that is frozen but whose machine still answers.
	FailureTimeout time.Duration
	ReconnectWait  time.Duration
	// BackpressureTimeout is how long the broker may keep refusing a
	// publication before the client gives up and fails (default 30 s).
	BackpressureTimeout time.Duration
	// Dial opens connections. Nil: package internal/quic, over QUIC for
	// "host:port" or "quic://host:port", TCP for "tcp://host:port", TLS
	// over TCP for "tls://host:port" (a broker's tcp_listen; the broker's
	// certificate is not verified, as over QUIC: the token grants access,
	// the client holds no secret a fake broker could take).
	Dial DialFunc
	Log  zerolog.Logger
}

// ErrClosed is returned after Close.
var ErrClosed = errors.New("client: closed")

// ErrConnectionLost ends subscriptions when the connection to the broker
// is lost.
var ErrConnectionLost = errors.New("client: connection to the broker lost")

// Client is a connection to an edge broker. Its methods are safe for
// concurrent use.
type Client struct {
	addrs  []string // the brokers, tried in turn (Connect's "A,B,C")
	cur    int      // index in addrs of the current connection (mu)
	addr   string
	opts   Options
	window chan struct{} // one token per unacknowledged publication
	done   chan struct{} // closed by Close or a fatal error
	gate   gate          // hands deliveries to the application until done

	// Lock order: sendMu, then mu. sendMu serialises writes to the
	// connection so that publications go out in sequence order.
	sendMu sync.Mutex
	mu     sync.Mutex
	conn   Conn
	err    error // set once: why the client stopped
	// Publishing state.
	nextSeq  uint64
	acked    uint64 // every seq ≤ acked is acknowledged
	pending  []*pendingPub
	lastSent uint64 // highest seq written on the current connection
	// Refusals ("backpressure", "sequence gap"): while bp is set, new
	// publications are held; refused is the lowest refused seq not yet
	// sent again (0: none); after the pause, everything pending from it
	// on is sent again, and bpSeq is the first seq of that retransmission:
	// once it is acknowledged (and nothing else was refused) bp ends.
	bp      bool
	refused uint64
	bpSeq   uint64
	bpTimer *time.Timer
	bpWait  time.Duration
	bpSince time.Time
	// startFlush runs flushUnsent on its own goroutine (the receive loop
	// calls it with mu held and must not wait for sendMu); a test delays
	// it to show that a publication made meanwhile keeps the order.
	startFlush func()
	// Subscriptions.
	nextReq uint64
	subReqs map[uint64]*Subscription
	subs    map[message.SubID]*Subscription
	subsByN map[uint64]*Subscription // the same by SubID.N: DeliverSet names only N
	unsubs  map[message.SubID]chan error
	// durables: the durable subscriptions not ended, resubscribed after a
	// reconnect (durable.go).
	durables map[*Subscription]bool
}

type pendingPub struct {
	msg  *message.Publish // points to pub: one allocation for both
	pub  message.Publish
	done chan error // buffered 1: the outcome
}

// Connect dials the broker at addr and opens a session. addr may list
// several brokers separated by commas: they are tried in order, and a
// reconnect (Options.Reconnect) moves to the next one. Each is
// "host:port" (QUIC), or "tcp://host:port" or "tls://host:port" for a
// broker's TCP client listener (see Options.Dial); a list may mix them.
func Connect(ctx context.Context, addr string, opts Options) (*Client, error) {
	addrs := splitAddrs(addr)
	if len(addrs) == 0 {
		return nil, errors.New("client: connect: no broker address")
	}
	if opts.Publisher == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		opts.Publisher = "pub-" + hex.EncodeToString(b[:])
	}
	if opts.Epoch == 0 {
		opts.Epoch = uint64(time.Now().UnixNano())
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 1024
	}
	if opts.DeliveryBuffer <= 0 {
		opts.DeliveryBuffer = 4096
	}
	if opts.MaxReconnects <= 0 {
		opts.MaxReconnects = 10
	}
	if opts.ReconnectWait <= 0 {
		opts.ReconnectWait = 200 * time.Millisecond
	}
	if opts.BackpressureTimeout <= 0 {
		opts.BackpressureTimeout = 30 * time.Second
	}
	if opts.Dial == nil {
		opts.Dial = defaultDial(opts)
	}
	var conn Conn
	var err error
	cur := 0
	for i, a := range addrs {
		if conn, err = opts.Dial(ctx, a); err == nil {
			cur, addr = i, a
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("client: connect %s: %w", strings.Join(addrs, ","), err)
	}
	if err := conn.Send(&message.ClientHello{Publisher: opts.Publisher, Epoch: opts.Epoch}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("client: hello to %s: %w", addr, err)
	}
	c := &Client{
		addrs:    addrs,
		cur:      cur,
		addr:     addr,
		opts:     opts,
		window:   make(chan struct{}, opts.MaxInFlight),
		done:     make(chan struct{}),
		conn:     conn,
		subReqs:  map[uint64]*Subscription{},
		subs:     map[message.SubID]*Subscription{},
		subsByN:  map[uint64]*Subscription{},
		unsubs:   map[message.SubID]chan error{},
		durables: map[*Subscription]bool{},
	}
	c.gate.done = c.done
	c.startFlush = func() { go c.flushUnsent() }
	go c.recvLoop(conn)
	return c, nil
}

// Publisher and Epoch name this client's publication stream.
func (c *Client) Publisher() string { return c.opts.Publisher }
func (c *Client) Epoch() uint64     { return c.opts.Epoch }

// Close ends the session. Unacknowledged publications fail with ErrClosed
// (they may still have been published); subscriptions end, and nothing
// that still arrives is handed on (a durable subscription's Token is final
// when Close returns). What is queued for the broker is still sent; Close
// waits a moment for the broker's close, not for a broker that died.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	return nil
}

// Err is why the client stopped, or nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail stops the client for good with err.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	conn := c.conn
	pending := c.pending
	c.pending = nil
	if c.bpTimer != nil {
		c.bpTimer.Stop()
	}
	for _, s := range c.subReqs {
		s.accept(nil, err)
	}
	c.subReqs = map[uint64]*Subscription{}
	for sub, ch := range c.unsubs {
		ch <- err
		delete(c.unsubs, sub)
	}
	c.mu.Unlock()
	c.gate.shut()
	for _, p := range pending {
		p.done <- err
		<-c.window
	}
	conn.Close()
}

// Publish publishes pub and waits until the edge broker acknowledged it.
// When ctx ends first the publication may still be published later (it
// keeps its place in the stream); the error says so.
func (c *Client) Publish(ctx context.Context, pub matching.Publication) error {
	done, err := c.PublishAsync(ctx, pub)
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("client: publish not acknowledged yet (it may still be published): %w", ctx.Err())
	}
}

// PublishAsync sends pub without waiting for the acknowledgement; the
// returned channel yields its outcome (nil once acknowledged). It waits
// only while MaxInFlight publications are unacknowledged.
func (c *Client) PublishAsync(ctx context.Context, pub matching.Publication) (<-chan error, error) {
	if err := matching.ValidateAttrs(pub.Attrs); err != nil {
		return nil, fmt.Errorf("client: publish: %w", err) // nothing sent, no sequence number used
	}
	select {
	case c.window <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("client: publish: %w", ctx.Err())
	case <-c.done:
		return nil, c.Err()
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		<-c.window
		return nil, err
	}
	c.nextSeq++
	p := &pendingPub{
		pub:  message.Publish{Seq: c.nextSeq, Attrs: pub.Attrs, Payload: pub.Payload, Time: time.Now().UnixNano()},
		done: make(chan error, 1),
	}
	p.msg = &p.pub
	c.pending = append(c.pending, p)
	var msgs []*message.Publish
	if !c.bp {
		// p, and before it whatever was held during a refusal and not sent
		// yet: the flush after a refusal runs on its own goroutine, so p
		// may come first, and sending p alone would leave a hole the
		// broker refuses ("sequence gap") under every retransmission from
		// p on.
		msgs = c.unsentLocked()
	}
	conn := c.conn
	c.mu.Unlock()
	// A send error means the connection is lost: the receive loop
	// notices, reconnects if allowed and sends them again.
	sendAll(conn, msgs)
	return p.done, nil
}

// unsentLocked returns, in order, the pending publications not yet
// written on the current connection (Seq > lastSent), and counts them as
// written. Called with mu held, by a holder of sendMu that writes them.
func (c *Client) unsentLocked() []*message.Publish {
	i := len(c.pending)
	for i > 0 && c.pending[i-1].msg.Seq > c.lastSent {
		i--
	}
	if i == len(c.pending) {
		return nil
	}
	msgs := make([]*message.Publish, 0, len(c.pending)-i)
	for _, p := range c.pending[i:] {
		msgs = append(msgs, p.msg)
	}
	c.lastSent = msgs[len(msgs)-1].Seq
	return msgs
}

// sendAll writes msgs in order; it stops at the first error (the
// connection is lost: the receive loop reconnects or fails the client).
func sendAll(conn Conn, msgs []*message.Publish) {
	for _, m := range msgs {
		if conn.Send(m) != nil {
			return
		}
	}
}

// onPubAck handles an acknowledgement; called with mu held.
//
// The broker answers every Publish, in order: "" acknowledges every
// publication up to Seq; "backpressure" (the broker is overloaded) and
// "sequence gap" (an earlier publication was refused, so this one cannot be
// accepted yet) refuse Seq, which must be sent again, with everything after
// it; any other error is final and breaks the stream (the broker cannot
// accept anything after a publication it refused for good), so the client
// fails. Refusals may arrive in any order relative to the acknowledgements
// of a retransmission; what counts is the lowest refused seq.
func (c *Client) onPubAck(a *message.PubAck) {
	switch {
	case a.Err == "":
		if a.Seq <= c.acked {
			return
		}
		c.acked = a.Seq
		n := 0
		for n < len(c.pending) && c.pending[n].msg.Seq <= a.Seq {
			c.pending[n].done <- nil
			<-c.window
			n++
		}
		c.pending = c.pending[n:]
		if c.refused != 0 && c.refused <= c.acked {
			c.refused = 0 // refused once, accepted since (a retransmission)
		}
		c.maybeResume()
	case a.Err == "backpressure" || strings.HasPrefix(a.Err, "sequence gap"):
		if a.Seq <= c.acked {
			return
		}
		if !c.bp {
			c.bp, c.bpSince = true, time.Now()
		}
		low := a.Seq
		if n, ok := gapExpected(a.Err); ok && n < low {
			// The broker says where the stream must resume: a hole
			// before a.Seq (for whatever reason) is filled from there,
			// not retried from a.Seq into the same refusal.
			low = max(n, c.acked+1)
		}
		if c.refused == 0 || low < c.refused {
			c.refused = low
		}
		if time.Since(c.bpSince) > c.opts.BackpressureTimeout {
			go c.fail(fmt.Errorf("client: the broker refused publication %d for more than %v (%s)", a.Seq, c.opts.BackpressureTimeout, a.Err))
			return
		}
		if c.bpTimer == nil {
			c.bpWait = min(max(2*c.bpWait, 5*time.Millisecond), 500*time.Millisecond)
			c.bpTimer = time.AfterFunc(c.bpWait, c.retransmit)
		}
	default:
		if a.Seq <= c.acked {
			return
		}
		go c.fail(fmt.Errorf("client: publication %d refused: %s", a.Seq, a.Err))
	}
}

// gapExpected parses the N of a "sequence gap: expected N" refusal.
func gapExpected(err string) (uint64, bool) {
	rest, ok := strings.CutPrefix(err, "sequence gap: expected ")
	if !ok {
		return 0, false
	}
	n, perr := strconv.ParseUint(rest, 10, 64)
	return n, perr == nil && n > 0
}

// maybeResume ends the backpressure state once the retransmission is
// acknowledged, nothing else is refused and no retransmission is pending,
// and sends what was held meanwhile. Called with mu held.
func (c *Client) maybeResume() {
	if c.bp && c.acked >= c.bpSeq && c.refused == 0 && c.bpTimer == nil && c.err == nil {
		c.bp = false
		c.bpWait = 0
		c.startFlush()
	}
}

// retransmit sends again every publication from the lowest refused one on.
func (c *Client) retransmit() {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	c.bpTimer = nil
	if !c.bp || c.err != nil || c.refused == 0 {
		// Nothing left to send again (what was refused has been accepted
		// since): resume if the last retransmission is acknowledged.
		c.maybeResume()
		c.mu.Unlock()
		return
	}
	from := max(c.refused, c.acked+1)
	c.refused = 0
	var msgs []*message.Publish
	for _, p := range c.pending {
		if p.msg.Seq >= from {
			msgs = append(msgs, p.msg)
		}
	}
	if len(msgs) == 0 {
		// Everything refused was accepted meanwhile.
		c.bp = false
		c.bpWait = 0
		c.mu.Unlock()
		c.startFlush()
		return
	}
	c.bpSeq = msgs[0].Seq
	c.lastSent = max(c.lastSent, msgs[len(msgs)-1].Seq)
	conn := c.conn
	c.mu.Unlock()
	sendAll(conn, msgs)
}

// flushUnsent sends the publications held during backpressure.
func (c *Client) flushUnsent() {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	if c.bp || c.err != nil {
		c.mu.Unlock()
		return
	}
	msgs := c.unsentLocked()
	conn := c.conn
	c.mu.Unlock()
	sendAll(conn, msgs)
}

// recvLoop reads the connection until it fails, then reconnects (if
// allowed) and goes on with the new connection.
func (c *Client) recvLoop(conn Conn) {
	for {
		for {
			m, err := conn.Recv()
			if err != nil {
				c.opts.Log.Debug().Err(err).Msg("client: connection lost")
				break
			}
			c.dispatch(m)
		}
		select {
		case <-c.done:
			c.endSubscriptions(c.Err())
			return
		default:
		}
		c.endSubscriptions(ErrConnectionLost)
		if !c.opts.Reconnect {
			c.fail(ErrConnectionLost)
			return
		}
		next, err := c.reconnect()
		if err != nil {
			c.fail(err)
			return
		}
		conn = next
	}
}

func (c *Client) reconnect() (Conn, error) {
	var lastErr error
	for attempt := 1; attempt <= c.opts.MaxReconnects; attempt++ {
		select {
		case <-c.done:
			return nil, ErrClosed
		case <-time.After(c.opts.ReconnectWait):
		}
		c.mu.Lock()
		c.cur = (c.cur + 1) % len(c.addrs) // the next broker (the same one when there is one)
		addr := c.addrs[c.cur]
		c.addr = addr
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := c.opts.Dial(ctx, addr)
		cancel()
		if err != nil {
			lastErr = err
			c.opts.Log.Warn().Err(err).Int("attempt", attempt).Msg("client: reconnect failed")
			continue
		}
		// Same publisher and epoch: the broker recognises the stream, and
		// what it already accepted is acknowledged, not published twice.
		c.sendMu.Lock()
		c.mu.Lock()
		if c.err != nil {
			c.mu.Unlock()
			c.sendMu.Unlock()
			conn.Close()
			return nil, c.err
		}
		c.conn = conn
		c.bp = false
		c.refused = 0
		c.bpWait = 0
		if c.bpTimer != nil {
			c.bpTimer.Stop()
			c.bpTimer = nil
		}
		msgs := make([]message.Message, 0, len(c.pending)+1)
		msgs = append(msgs, &message.ClientHello{Publisher: c.opts.Publisher, Epoch: c.opts.Epoch})
		for _, p := range c.pending {
			msgs = append(msgs, p.msg)
			c.lastSent = p.msg.Seq
		}
		msgs = append(msgs, c.resubscribeDurables()...)
		c.mu.Unlock()
		for _, m := range msgs {
			if err = conn.Send(m); err != nil {
				break
			}
		}
		c.sendMu.Unlock()
		if err != nil {
			lastErr = err
			conn.Close()
			continue
		}
		c.opts.Log.Info().Int("attempt", attempt).Str("broker", addr).Int("resent", len(msgs)-1).Msg("client: reconnected")
		return conn, nil
	}
	return nil, fmt.Errorf("client: %d reconnect attempts to %s failed: %w", c.opts.MaxReconnects, strings.Join(c.addrs, ","), lastErr)
}

func (c *Client) dispatch(m message.Message) {
	switch m := m.(type) {
	case *message.PubAck:
		c.mu.Lock()
		c.onPubAck(m)
		c.mu.Unlock()
	case *message.SubAck:
		c.onSubAck(m)
	case *message.UnsubAck:
		c.mu.Lock()
		ch := c.unsubs[m.Sub]
		delete(c.unsubs, m.Sub)
		s := c.subs[m.Sub]
		delete(c.subs, m.Sub)
		if s != nil {
			delete(c.subsByN, m.Sub.N)
		}
		c.mu.Unlock()
		if s != nil {
			var why error
			if m.Err != "" && ch == nil {
				// Ended by the broker (it is leaving the overlay): the
				// application must subscribe again elsewhere.
				why = errors.New("client: subscription ended by the broker: " + m.Err)
			}
			s.end(why)
		}
		if ch != nil {
			if m.Err != "" {
				ch <- errors.New("client: unsubscribe: " + m.Err)
			} else {
				ch <- nil
			}
		}
	case *message.Deliver:
		c.mu.Lock()
		s := c.subs[m.Sub]
		c.mu.Unlock()
		if s != nil {
			s.deliver(Delivery{Sub: m.Sub, Pub: m.Pub, Attrs: m.Attrs, Payload: m.Payload,
				PublishedAt: time.Unix(0, m.Time), ReceivedAt: time.Now()}, &c.gate)
		}
	case *message.DeliverSet:
		// One publication for one or more of this session's subscriptions
		// (protocol version 2): the broker encoded it once for all.
		now := time.Now()
		for _, n := range m.Subs {
			c.mu.Lock()
			s := c.subsByN[n]
			c.mu.Unlock()
			if s != nil {
				s.deliver(Delivery{Sub: s.ID(), Pub: m.Pub, Attrs: m.Attrs, Payload: m.Payload,
					PublishedAt: time.Unix(0, m.Time), ReceivedAt: now}, &c.gate)
			}
		}
	case *message.Gap:
		c.mu.Lock()
		s := c.subs[m.Sub]
		c.mu.Unlock()
		if s != nil {
			g := *m
			s.deliver(Delivery{Sub: m.Sub, Gap: &g, ReceivedAt: time.Now()}, &c.gate)
		}
	case *message.Silence:
		c.mu.Lock()
		s := c.subs[m.Sub]
		c.mu.Unlock()
		if s != nil && s.dur != nil {
			s.dur.silence(m)
		}
	default:
		c.opts.Log.Debug().Str("type", m.Type().String()).Msg("client: unexpected message ignored")
	}
}

func (c *Client) endSubscriptions(err error) {
	c.mu.Lock()
	if errors.Is(err, ErrConnectionLost) && c.opts.Reconnect {
		c.keepDurables() // durable.go: they resume after the reconnect
	}
	subs := c.subs
	c.subs = map[message.SubID]*Subscription{}
	c.subsByN = map[uint64]*Subscription{}
	reqs := c.subReqs
	c.subReqs = map[uint64]*Subscription{}
	unsubs := c.unsubs
	c.unsubs = map[message.SubID]chan error{}
	c.mu.Unlock()
	for _, s := range subs {
		s.end(err)
	}
	for _, s := range reqs {
		s.accept(nil, err)
	}
	for _, ch := range unsubs {
		ch <- err
	}
}
