package quic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// logBuf collects an endpoint's log for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// recorder is a Handler that records events.
type recorder struct {
	mu       sync.Mutex
	ups      []*Link
	downs    []error
	cups     []*Session
	cdowns   []error
	msgs     chan message.Message
	cmsgs    chan message.Message
	block    chan struct{} // if non-nil, PeerMessage waits for it to close
	blocked  atomic.Bool
	upSignal chan *Link
}

func newRecorder() *recorder {
	return &recorder{msgs: make(chan message.Message, 1<<16), cmsgs: make(chan message.Message, 1<<12),
		upSignal: make(chan *Link, 16)}
}

func (r *recorder) PeerUp(l *Link) {
	r.mu.Lock()
	r.ups = append(r.ups, l)
	r.mu.Unlock()
	r.upSignal <- l
}
func (r *recorder) PeerMessage(l *Link, m message.Message) {
	if r.block != nil {
		r.blocked.Store(true)
		<-r.block
	}
	r.msgs <- m
}
func (r *recorder) PeerDown(l *Link, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.downs = append(r.downs, err)
}
func (r *recorder) ClientUp(c *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cups = append(r.cups, c)
}
func (r *recorder) ClientMessage(c *Session, m message.Message) { r.cmsgs <- m }
func (r *recorder) ClientDown(c *Session, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cdowns = append(r.cdowns, err)
}
func (r *recorder) counts() (ups, downs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ups), len(r.downs)
}
func (r *recorder) down(i int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.downs[i]
}

// waitFor polls cond until it holds or 30 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling interval, not a timing assumption
	}
}

type node struct {
	ep  *Endpoint
	rec *recorder
	log *logBuf
}

func start(t *testing.T, id string, secret string, mod func(*Config)) *node {
	t.Helper()
	lb := &logBuf{}
	// Generous handshake timeout: CI machines can be very busy.
	cfg := Config{ID: message.BrokerID(id), Epoch: 1, Listen: "127.0.0.1:0", HandshakeTimeout: 20 * time.Second,
		Log: zerolog.New(lb).Level(zerolog.DebugLevel).With().Str("broker", id).Logger()}
	if secret != "" {
		cfg.Secret = []byte(secret)
	}
	if mod != nil {
		mod(&cfg)
	}
	rec := newRecorder()
	ep, err := Listen(cfg, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if rec.block != nil {
			select {
			case <-rec.block:
			default:
				close(rec.block)
			}
		}
		_ = ep.Close()
		if t.Failed() {
			t.Logf("log of %s:\n%s", id, lb.String())
		}
	})
	return &node{ep: ep, rec: rec, log: lb}
}

func (n *node) addr() string { return n.ep.Addr().String() }

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func recvN(t *testing.T, ch chan message.Message, n int) []message.Message {
	t.Helper()
	out := make([]message.Message, 0, n)
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for len(out) < n {
		select {
		case m := <-ch:
			out = append(out, m)
		case <-timeout.C:
			t.Fatalf("received %d of %d messages", len(out), n)
		}
	}
	return out
}

func checkSeqs(t *testing.T, ms []message.Message, from uint64) {
	t.Helper()
	for i, m := range ms {
		a, ok := m.(*message.PubAck)
		if !ok || a.Seq != from+uint64(i) {
			t.Fatalf("message %d: %#v, want PubAck seq %d", i, m, from+uint64(i))
		}
	}
}

func TestLinkUpMessagesBothWaysInOrder(t *testing.T) {
	a := start(t, "B1", "s3cret", nil)
	b := start(t, "B2", "s3cret", nil)
	la, err := a.ep.Dial(ctx10(t), "B2", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	if la.Peer() != "B2" || la.PeerEpoch() != 1 || !la.Dialled() {
		t.Fatalf("link %v epoch %d dialled %v", la.Peer(), la.PeerEpoch(), la.Dialled())
	}
	lb := <-b.rec.upSignal
	<-a.rec.upSignal
	if lb.Peer() != "B1" || lb.Dialled() {
		t.Fatalf("acceptor sees %v dialled=%v", lb.Peer(), lb.Dialled())
	}
	// Dial again: the existing link, no second one.
	if again, err := a.ep.Dial(ctx10(t), "B2", b.addr()); err != nil || again != la {
		t.Fatalf("second Dial: %v, %v", again, err)
	}
	const n = 5000
	go func() {
		for i := 1; i <= n; i++ {
			if err := la.Send(&message.PubAck{Seq: uint64(i)}); err != nil {
				t.Errorf("send: %v", err)
				return
			}
		}
	}()
	for i := 1; i <= n; i++ {
		if err := lb.Send(&message.PubAck{Seq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	checkSeqs(t, recvN(t, b.rec.msgs, n), 1)
	checkSeqs(t, recvN(t, a.rec.msgs, n), 1)
	if st := la.Stats(); st.FramesQueued != n || st.Writes == 0 || st.Writes > n || lb.Stats().FramesReceived != n {
		t.Fatalf("stats %+v / %+v", st, lb.Stats())
	} else {
		t.Logf("%d frames in %d writes", st.FramesQueued, st.Writes)
	}
	// An orderly close: the last message still arrives, both sides see
	// PeerDown, the acceptor with the reason.
	if err := la.Send(&message.PubAck{Seq: 99}); err != nil {
		t.Fatal(err)
	}
	la.Close("test over")
	checkSeqs(t, recvN(t, b.rec.msgs, 1), 99)
	waitFor(t, "PeerDown on both sides", func() bool {
		_, da := a.rec.counts()
		_, db := b.rec.counts()
		return da == 1 && db == 1
	})
	if err := b.rec.down(0); !strings.Contains(err.Error(), "test over") {
		t.Fatalf("acceptor's PeerDown error %v does not carry the reason", err)
	}
	if err := la.Send(&message.PubAck{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send on a closed link: %v", err)
	}
	if ups, _ := a.rec.counts(); ups != 1 {
		t.Fatalf("%d PeerUp", ups)
	}
}

func TestWrongSecretRefusedOnBothSides(t *testing.T) {
	a := start(t, "B1", "secret-one", nil)
	b := start(t, "B2", "secret-two", nil)
	_, err := a.ep.Dial(ctx10(t), "B2", b.addr())
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != message.RefuseAuth || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("Dial with the wrong secret: %v", err)
	}
	waitFor(t, "the refusal in both logs", func() bool {
		return strings.Contains(a.log.String(), "authentication failed") &&
			strings.Contains(b.log.String(), "authentication failed")
	})
	// And the other way round, and a broker without any secret.
	if _, err := b.ep.Dial(ctx10(t), "B1", a.addr()); !errors.As(err, &re) || re.Code != message.RefuseAuth {
		t.Fatalf("reverse Dial: %v", err)
	}
	c := start(t, "B3", "", nil)
	if _, err := c.ep.Dial(ctx10(t), "B1", a.addr()); !errors.As(err, &re) || re.Code != message.RefuseAuth {
		t.Fatalf("Dial without a secret: %v", err)
	}
	// A secret-less acceptor cannot prove anything: the dialler refuses.
	if _, err := a.ep.Dial(ctx10(t), "B3", c.addr()); !errors.As(err, &re) || re.Code != message.RefuseAuth || re.Remote {
		t.Fatalf("Dial to a broker without a secret: %v", err)
	}
	waitFor(t, "B3 logs the dialler's refusal", func() bool { return strings.Contains(c.log.String(), "authentication failed") })
	for _, n := range []*node{a, b, c} {
		if ups, _ := n.rec.counts(); ups != 0 {
			t.Fatalf("a link came up despite the refusal")
		}
	}
}

func TestMalformedFrameClosesOnlyThatLink(t *testing.T) {
	a := start(t, "B1", "s", nil)
	b := start(t, "B2", "s", nil)
	c := start(t, "B3", "s", nil)
	lb, err := b.ep.Dial(ctx10(t), "B1", a.addr())
	if err != nil {
		t.Fatal(err)
	}
	lc, err := c.ep.Dial(ctx10(t), "B1", a.addr())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two links at B1", func() bool { u, _ := a.rec.counts(); return u == 2 })
	// A frame of an unknown type is skipped; the link stays up.
	unknown := []byte{5, 0xff, 0xf0, 0x92, 1, 2}
	if err := lc.SendFrame(unknown); err != nil {
		t.Fatal(err)
	}
	if err := lc.Send(&message.PubAck{Seq: 7}); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, recvN(t, a.rec.msgs, 1), 7)
	// A malformed frame closes that link, logged with the reason.
	bad := []byte{4, 0, byte(message.TypePubAck), 0xc1, 0xc1}
	if err := lc.SendFrame(bad); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B1 drops B3's link", func() bool { _, d := a.rec.counts(); return d == 1 })
	if err := a.rec.down(0); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("B1's PeerDown error: %v", err)
	}
	waitFor(t, "B3 learns why", func() bool { _, d := c.rec.counts(); return d == 1 })
	if err := c.rec.down(0); !strings.Contains(err.Error(), "malformed frame") {
		t.Fatalf("B3's PeerDown error: %v", err)
	}
	if !strings.Contains(a.log.String(), "malformed frame") {
		t.Fatalf("B1 did not log the reason:\n%s", a.log.String())
	}
	// B2's link still works both ways.
	if err := lb.Send(&message.PubAck{Seq: 8}); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, recvN(t, a.rec.msgs, 1), 8)
	la := a.ep.Link("B2")
	if la == nil || la.Send(&message.PubAck{Seq: 9}) != nil {
		t.Fatal("B1 lost its link to B2")
	}
	checkSeqs(t, recvN(t, b.rec.msgs, 1), 9)
}

func TestClientToken(t *testing.T) {
	a := start(t, "B1", "s", func(c *Config) { c.ClientToken = "t0ken" })
	var re *RefusedError
	if _, err := DialClient(ctx10(t), a.addr(), ""); !errors.As(err, &re) || re.Code != message.RefuseToken {
		t.Fatalf("no token: %v", err)
	}
	if _, err := DialClient(ctx10(t), a.addr(), "wrong"); !errors.As(err, &re) || re.Code != message.RefuseToken {
		t.Fatalf("wrong token: %v", err)
	}
	cc, err := DialClient(ctx10(t), a.addr(), "t0ken")
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if cc.Broker() != "B1" || cc.ID() == 0 {
		t.Fatalf("broker %q id %d", cc.Broker(), cc.ID())
	}
	if err := cc.Send(&message.Publish{Seq: 1, Payload: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	m := recvN(t, a.rec.cmsgs, 1)[0]
	if p, ok := m.(*message.Publish); !ok || p.Seq != 1 || string(p.Payload) != "hi" {
		t.Fatalf("broker got %#v", m)
	}
	a.rec.mu.Lock()
	s := a.rec.cups[0]
	a.rec.mu.Unlock()
	if s.ID() != cc.ID() {
		t.Fatalf("session id %d, client thinks %d", s.ID(), cc.ID())
	}
	if err := s.Send(&message.PubAck{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	got, err := cc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := got.(*message.PubAck); !ok || a.Seq != 1 {
		t.Fatalf("client got %#v", got)
	}
	s.Close("bye")
	if _, err := cc.Recv(); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "bye") {
		t.Fatalf("after the broker closed: %v", err)
	}
	if !strings.Contains(a.log.String(), "client token") {
		t.Fatal("refused clients not logged")
	}
}

func TestVersionMismatchRefused(t *testing.T) {
	a := start(t, "B1", "s", nil)
	b := start(t, "B2", "s", func(c *Config) { c.version, c.minVersion = 5, 3 })
	_, err := a.ep.Dial(ctx10(t), "B2", b.addr())
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != message.RefuseVersion {
		t.Fatalf("Dial to an incompatible broker: %v", err)
	}
	want := "incompatible protocol version: broker B1 (127.0.0.1"
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "versions 1 to 2, broker B2 speaks 3 to 5") {
		t.Fatalf("unclear reason: %v", err)
	}
	waitFor(t, "both logs", func() bool {
		return strings.Contains(a.log.String(), "incompatible protocol version") &&
			strings.Contains(b.log.String(), "incompatible protocol version")
	})
	// A newer broker that still speaks version 1 is compatible.
	c := start(t, "B3", "s", func(c *Config) { c.version, c.minVersion = 4, 1 })
	if _, err := a.ep.Dial(ctx10(t), "B3", c.addr()); err != nil {
		t.Fatalf("compatible newer broker: %v", err)
	}
	if _, err := DialClient(ctx10(t), b.addr(), ""); !errors.As(err, &re) || re.Code != message.RefuseVersion {
		t.Fatalf("old client to new broker: %v", err)
	}
}

func TestBackpressureBlocksSender(t *testing.T) {
	a := start(t, "B1", "s", func(c *Config) { c.SendQueue = 64; c.SendQueueBytes = 64 << 10 })
	b := start(t, "B2", "s", nil)
	b.rec.block = make(chan struct{})
	la, err := a.ep.Dial(ctx10(t), "B2", b.addr())
	if err != nil {
		t.Fatal(err)
	}
	// Far more than the queue plus QUIC's flow-control windows can hold.
	const n = 20000
	payload := bytes.Repeat([]byte{'p'}, 1000)
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= n; i++ {
			if err := la.SendFrame(mustFrame(&message.Publish{Seq: uint64(i), Payload: payload})); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			sent.Add(1)
		}
	}()
	waitFor(t, "the receiver to block in its handler", b.rec.blocked.Load)
	// The queue fills and stays full: TrySend fails. (Successful TrySends
	// before that add PubAcks, which the receiver skips below.)
	extra := 0
	waitFor(t, "TrySend to report a full queue", func() bool {
		if la.TrySend(&message.PubAck{}) {
			extra++
			return false
		}
		return true
	})
	if q := la.Queued(); q > 64 {
		t.Fatalf("queue holds %d frames, bound 64", q)
	}
	// 20 MB cannot pass a receiver that reads nothing: the sender is
	// blocked, and what it got rid of is bounded by the queue and QUIC's
	// flow-control windows.
	select {
	case <-done:
		t.Fatalf("all %d sends completed although the peer reads nothing", n)
	default:
	}
	if s := sent.Load(); s*1000 > maxConnWindow+(1<<20) {
		t.Fatalf("%d KB accepted while the peer reads nothing", s)
	}
	close(b.rec.block)
	<-done
	ms := recvN(t, b.rec.msgs, n+extra)
	seq := uint64(0)
	for _, m := range ms {
		if p, ok := m.(*message.Publish); ok {
			if seq++; p.Seq != seq {
				t.Fatalf("publication %d has seq %d: lost or reordered", seq, p.Seq)
			}
		}
	}
	if seq != n {
		t.Fatalf("%d publications arrived, want %d", seq, n)
	}
	t.Logf("%d sends, the sender blocked with %d done", n, sent.Load())
}

func mustFrame(m message.Message) []byte {
	b, err := wire.AppendFrame(nil, m)
	if err != nil {
		panic(err)
	}
	return b
}

func TestSimultaneousDialsKeepOneLink(t *testing.T) {
	for round := 0; round < 5; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			a := start(t, "B1", "s", nil)
			b := start(t, "B2", "s", nil)
			var la, lb *Link
			var ea, eb error
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); la, ea = a.ep.Dial(ctx10(t), "B2", b.addr()) }()
			go func() { defer wg.Done(); lb, eb = b.ep.Dial(ctx10(t), "B1", a.addr()) }()
			wg.Wait()
			if ea != nil || eb != nil {
				t.Fatalf("dials: %v / %v", ea, eb)
			}
			if a.ep.Link("B2") != la || b.ep.Link("B1") != lb {
				t.Fatal("Dial returned a link that is not the registered one")
			}
			if la.Dialled() == lb.Dialled() {
				t.Fatalf("both ends claim dialled=%v: two different links", la.Dialled())
			}
			waitFor(t, "PeerUp on both sides", func() bool {
				ua, _ := a.rec.counts()
				ub, _ := b.rec.counts()
				return ua >= 1 && ub >= 1
			})
			if err := la.Send(&message.PubAck{Seq: 1}); err != nil {
				t.Fatal(err)
			}
			checkSeqs(t, recvN(t, b.rec.msgs, 1), 1)
			if err := lb.Send(&message.PubAck{Seq: 2}); err != nil {
				t.Fatal(err)
			}
			checkSeqs(t, recvN(t, a.rec.msgs, 1), 2)
			ua, da := a.rec.counts()
			ub, db := b.rec.counts()
			if ua != 1 || ub != 1 || da != 0 || db != 0 {
				t.Fatalf("events: B1 %d up %d down, B2 %d up %d down", ua, da, ub, db)
			}
		})
	}
}

// A restarted broker (same ID, larger epoch) replaces its old link; the
// handler sees PeerDown of the old link before PeerUp of the new one.
func TestRestartedPeerReplacesLink(t *testing.T) {
	a := start(t, "B1", "s", nil)
	old := start(t, "B2", "s", nil)
	if _, err := old.ep.Dial(ctx10(t), "B1", a.addr()); err != nil {
		t.Fatal(err)
	}
	first := <-a.rec.upSignal
	restarted := start(t, "B2", "s", func(c *Config) { c.Epoch = 2 })
	l, err := restarted.ep.Dial(ctx10(t), "B1", a.addr())
	if err != nil {
		t.Fatal(err)
	}
	second := <-a.rec.upSignal
	if second == first || second.PeerEpoch() != 2 || a.ep.Link("B2") != second {
		t.Fatalf("B1's link to B2 is epoch %d", a.ep.Link("B2").PeerEpoch())
	}
	a.rec.mu.Lock()
	downsBeforeUp := len(a.rec.downs)
	a.rec.mu.Unlock()
	if downsBeforeUp != 1 {
		t.Fatalf("the new link came up with %d PeerDowns delivered, want the old link's first", downsBeforeUp)
	}
	waitFor(t, "the old incarnation to lose its link", func() bool { _, d := old.rec.counts(); return d == 1 })
	if err := l.Send(&message.PubAck{Seq: 3}); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, recvN(t, a.rec.msgs, 1), 3)
}

// A frame longer than the receiver's MaxFrame closes the link; a message
// too large for the sender's own MaxFrame is refused by Send.
func TestOversizedFrames(t *testing.T) {
	a := start(t, "B1", "s", func(c *Config) { c.MaxFrame = 4096 })
	b := start(t, "B2", "s", nil)
	l, err := b.ep.Dial(ctx10(t), "B1", a.addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Send(&message.Publish{Seq: 1, Payload: make([]byte, 8000)}); err != nil {
		t.Fatal(err) // B2's own limit is the default 1 MiB
	}
	waitFor(t, "B1 to close the link", func() bool { _, d := a.rec.counts(); return d == 1 })
	if err := a.rec.down(0); !errors.Is(err, wire.ErrFrameTooLarge) {
		t.Fatalf("B1's PeerDown: %v", err)
	}
	if err := func() error {
		la := start(t, "B3", "s", func(c *Config) { c.MaxFrame = 4096 })
		lk, err := la.ep.Dial(ctx10(t), "B2", b.addr())
		if err != nil {
			return err
		}
		return lk.Send(&message.Publish{Seq: 1, Payload: make([]byte, 8000)})
	}(); err == nil || !strings.Contains(err.Error(), "exceeds MaxFrame") {
		t.Fatalf("Send of a frame over MaxFrame: %v", err)
	}
}

// batchRecorder implements BatchHandler.
type batchRecorder struct {
	recorder
	batches atomic.Int64
}

func (r *batchRecorder) PeerMessages(l *Link, ms []message.Message) {
	r.batches.Add(1)
	for _, m := range ms {
		r.msgs <- m
	}
}
func (r *batchRecorder) ClientMessages(s *Session, ms []message.Message) {
	for _, m := range ms {
		r.cmsgs <- m
	}
}

func TestBatchHandlerInOrder(t *testing.T) {
	a := start(t, "B1", "s", nil)
	br := &batchRecorder{recorder: *newRecorder()}
	ep, err := Listen(Config{ID: "B2", Listen: "127.0.0.1:0", Secret: []byte("s"), Log: zerolog.Nop()}, br)
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	l, err := a.ep.Dial(ctx10(t), "B2", ep.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	for i := 1; i <= n; i++ {
		if err := l.Send(&message.PubAck{Seq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	checkSeqs(t, recvN(t, br.msgs, n), 1)
	if b := br.batches.Load(); b < 1 || b > n {
		t.Fatalf("%d batches", b)
	}
	t.Logf("%d messages in %d batches", n, br.batches.Load())
}

// A Handler stuck in a call does not hang Endpoint.Close forever.
func TestCloseWithAStuckHandler(t *testing.T) {
	defer func(d time.Duration) { closeWait = d }(closeWait)
	closeWait = 200 * time.Millisecond
	a := start(t, "B1", "s", nil)
	rec := newRecorder()
	rec.block = make(chan struct{})
	defer close(rec.block)
	ep, err := Listen(Config{ID: "B2", Listen: "127.0.0.1:0", Secret: []byte("s"), Log: zerolog.Nop()}, rec)
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.ep.Dial(ctx10(t), "B2", ep.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Send(&message.PubAck{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the handler to block", rec.blocked.Load)
	if err := ep.Close(); err == nil || !strings.Contains(err.Error(), "handler calls still running") {
		t.Fatalf("Close with a stuck handler: %v", err)
	}
}

// A closed endpoint releases its UDP address: a broker restarted in the
// same process (runtime.RunBroker after a removal) listens on it again.
func TestCloseReleasesTheAddress(t *testing.T) {
	cfg := Config{ID: "B1", Listen: "127.0.0.1:0", Secret: []byte("s"), Log: zerolog.Nop()}
	ep, err := Listen(cfg, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = ep.Addr().String()
	if err := ep.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Listen(cfg, newRecorder())
	if err != nil {
		t.Fatalf("listen again on %s after Close: %v", cfg.Listen, err)
	}
	_ = again.Close()
}
