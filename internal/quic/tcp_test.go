package quic

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// serveTCP accepts TCP connections (TLS with secure) for n's endpoint and
// returns the address clients dial: tcp://… or tls://….
func serveTCP(t *testing.T, n *node, secure bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme := "tcp://"
	if secure {
		cert, err := selfSigned()
		if err != nil {
			t.Fatal(err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "tls://"
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.ep.ServeConn(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return scheme + ln.Addr().String()
}

// session returns the broker's i-th client session.
func (n *node) session(t *testing.T, i int) *Session {
	t.Helper()
	waitFor(t, "the client session", func() bool {
		n.rec.mu.Lock()
		defer n.rec.mu.Unlock()
		return len(n.rec.cups) > i
	})
	n.rec.mu.Lock()
	defer n.rec.mu.Unlock()
	return n.rec.cups[i]
}

// sessionOf returns the broker's session of client id (sessions come up
// in any order: the client has its Welcome before the broker records it).
func (n *node) sessionOf(t *testing.T, id message.ClientID) *Session {
	t.Helper()
	var s *Session
	waitFor(t, "the client session", func() bool {
		n.rec.mu.Lock()
		defer n.rec.mu.Unlock()
		for _, c := range n.rec.cups {
			if c.ID() == id {
				s = c
				return true
			}
		}
		return false
	})
	return s
}

func (n *node) clientDowns() []error {
	n.rec.mu.Lock()
	defer n.rec.mu.Unlock()
	return append([]error(nil), n.rec.cdowns...)
}

// A client session over TCP and over TLS: the token checked, messages
// both ways, the broker's close reason at the client.
func TestTCPClientSession(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := map[bool]string{false: "tcp", true: "tls"}[secure]
		t.Run(name, func(t *testing.T) {
			a := start(t, "B1", "s", func(c *Config) { c.ClientToken = "t0ken" })
			addr := serveTCP(t, a, secure)
			var re *RefusedError
			if _, err := DialClient(ctx10(t), addr, "wrong"); !errors.As(err, &re) || re.Code != message.RefuseToken || !re.Remote {
				t.Fatalf("wrong token: %v", err)
			}
			if _, err := DialClient(ctx10(t), addr, ""); !errors.As(err, &re) || re.Code != message.RefuseToken {
				t.Fatalf("no token: %v", err)
			}
			cc, err := DialClient(ctx10(t), addr, "t0ken")
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			if cc.Broker() != "B1" || cc.ID() == 0 {
				t.Fatalf("broker %q id %d", cc.Broker(), cc.ID())
			}
			for i := 1; i <= 3; i++ {
				if err := cc.Send(&message.Publish{Seq: uint64(i), Payload: []byte("hi")}); err != nil {
					t.Fatal(err)
				}
			}
			for i, m := range recvN(t, a.rec.cmsgs, 3) {
				if p, ok := m.(*message.Publish); !ok || p.Seq != uint64(i+1) || string(p.Payload) != "hi" {
					t.Fatalf("broker got %#v", m)
				}
			}
			s := a.session(t, 0)
			if s.ID() != cc.ID() || s.Version() != wire.ProtocolVersion {
				t.Fatalf("session id %d version %d, client has id %d", s.ID(), s.Version(), cc.ID())
			}
			if _, ok := s.RemoteAddr().(*net.TCPAddr); !ok {
				t.Fatalf("session's remote address %v is not TCP", s.RemoteAddr())
			}
			for i := uint64(1); i <= 3; i++ {
				if !s.Hold(&message.PubAck{Seq: i}) {
					t.Fatal("Hold refused")
				}
			}
			s.Flush()
			for i := uint64(1); i <= 3; i++ {
				got, err := cc.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if a, ok := got.(*message.PubAck); !ok || a.Seq != i {
					t.Fatalf("client got %#v, want PubAck %d", got, i)
				}
			}
			s.Close("bye")
			if _, err := cc.Recv(); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "bye") {
				t.Fatalf("after the broker closed: %v", err)
			}
			waitFor(t, "ClientDown", func() bool { return len(a.clientDowns()) == 1 })
		})
	}
}

// rawClient is a hand-written TCP client: the handshake, then any bytes.
type rawClient struct {
	t  *testing.T
	c  net.Conn
	rd *wire.Reader
}

func dialRaw(t *testing.T, addr string, hello *message.Hello) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(addr, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	r := &rawClient{t: t, c: c, rd: wire.NewReader(c, 1<<20)}
	if hello != nil {
		r.write(frame(t, hello))
	}
	return r
}

func frame(t *testing.T, m message.Message) []byte {
	t.Helper()
	b, err := wire.AppendFrame(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func clientHello() *message.Hello {
	return &message.Hello{Magic: message.Magic, Version: wire.ProtocolVersion, MinVersion: wire.MinCompatibleVersion, Role: message.RoleClient}
}

func (r *rawClient) write(b []byte) {
	r.t.Helper()
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawClient) read() message.Message {
	r.t.Helper()
	m, err := r.rd.Read()
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// refusal reads until the broker's Refuse, then expects the end of the
// stream (a reset when the broker closed with bytes of ours unread).
func (r *rawClient) refusal() *message.Refuse {
	r.t.Helper()
	for range 1000 {
		m := r.read()
		if rf, ok := m.(*message.Refuse); ok {
			if m, err := r.rd.Read(); err == nil || errors.Is(err, wire.ErrMalformed) {
				r.t.Fatalf("after the Refuse: %v, %v; want the end of the stream", m, err)
			}
			return rf
		}
	}
	r.t.Fatal("no Refuse in 1000 frames")
	return nil
}

// A malformed frame, and a frame over max_frame, close that session with
// the reason sent to the client, and the broker serves the others on.
func TestTCPBadFramesCloseOnlyThatSession(t *testing.T) {
	a := start(t, "B1", "s", func(c *Config) { c.MaxFrame = 4096 })
	addr := serveTCP(t, a, false)
	good, err := DialClient(ctx10(t), addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	for i, bad := range []struct {
		frame []byte
		want  error
	}{
		{[]byte{4, 0, byte(message.TypePubAck), 0xc1, 0xc1}, wire.ErrMalformed},
		{frame(t, &message.Publish{Seq: 1, Payload: make([]byte, 8000)}), wire.ErrFrameTooLarge},
	} {
		r := dialRaw(t, addr, clientHello())
		if w, ok := r.read().(*message.Welcome); !ok || w.ID != "B1" || w.Client == 0 {
			t.Fatalf("case %d: no Welcome", i)
		}
		r.write(frame(t, &message.Publish{Seq: 1, Payload: []byte("ok")}))
		r.write(bad.frame)
		rf := r.refusal()
		if rf.Code != message.RefuseProtocol || !strings.Contains(rf.Reason, "malformed frame") {
			t.Fatalf("case %d: Refuse %+v, want a protocol error naming the malformed frame", i, rf)
		}
		waitFor(t, "ClientDown", func() bool { return len(a.clientDowns()) == i+1 })
		if err := a.clientDowns()[i]; !errors.Is(err, bad.want) {
			t.Fatalf("case %d: ClientDown error %v, want %v", i, err, bad.want)
		}
	}
	if !strings.Contains(a.log.String(), "malformed frame") {
		t.Fatalf("the reason is not logged:\n%s", a.log.String())
	}
	// The first client's session still works both ways.
	if err := good.Send(&message.Publish{Seq: 9}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		m := recvN(t, a.rec.cmsgs, 1)[0]
		if p, ok := m.(*message.Publish); ok && p.Seq == 9 {
			break
		}
		if i == 10 {
			t.Fatal("the first client's publication did not arrive")
		}
	}
	if err := a.sessionOf(t, good.ID()).Send(&message.PubAck{Seq: 9}); err != nil {
		t.Fatal(err)
	}
	if m, err := good.Recv(); err != nil || m.(*message.PubAck).Seq != 9 {
		t.Fatalf("first client: %v, %v", m, err)
	}
}

// What the TCP handshake refuses, each with its code; nothing else
// follows the Refuse.
func TestTCPHandshakeRefusals(t *testing.T) {
	a := start(t, "B1", "s", func(c *Config) { c.ClientToken = "t0ken" })
	addr := serveTCP(t, a, false)
	newer := clientHello()
	newer.Version, newer.MinVersion, newer.Token = 9, 8, "t0ken"
	broker := clientHello()
	broker.Role, broker.ID, broker.Token = message.RoleBroker, "B2", "t0ken"
	magic := clientHello()
	magic.Magic, magic.Token = "nope", "t0ken"
	for _, c := range []struct {
		name  string
		first message.Message
		code  message.RefuseCode
		says  string
	}{
		{"no hello", &message.Publish{Seq: 1}, message.RefuseProtocol, "expected Hello"},
		{"bad magic", magic, message.RefuseProtocol, "bad magic"},
		{"no common version", newer, message.RefuseVersion, "incompatible protocol version"},
		{"a broker", broker, message.RefuseProtocol, "broker links use QUIC"},
		{"no token", clientHello(), message.RefuseToken, "requires a client token"},
	} {
		r := dialRaw(t, addr, nil)
		r.write(frame(t, c.first))
		if rf := r.refusal(); rf.Code != c.code || !strings.Contains(rf.Reason, c.says) {
			t.Errorf("%s: Refuse %+v, want code %d saying %q", c.name, rf, c.code, c.says)
		}
	}
}

// Beyond the handshakes in progress the endpoint allows, a TCP client is
// refused busy.
func TestTCPBusyRefused(t *testing.T) {
	a := start(t, "B1", "s", nil)
	addr := serveTCP(t, a, false)
	for range cap(a.ep.sem) {
		a.ep.sem <- struct{}{}
	}
	var re *RefusedError
	_, err := DialClient(ctx10(t), addr, "")
	if !errors.As(err, &re) || re.Code != message.RefuseBusy {
		t.Fatalf("dial while busy: %v", err)
	}
	for range cap(a.ep.sem) {
		<-a.ep.sem
	}
	cc, err := DialClient(ctx10(t), addr, "")
	if err != nil {
		t.Fatal(err)
	}
	cc.Close()
}

func TestSplitScheme(t *testing.T) {
	for _, c := range []struct{ in, scheme, hostPort string }{
		{"127.0.0.1:7001", "", "127.0.0.1:7001"},
		{"quic://b1:7001", "quic", "b1:7001"},
		{"tcp://[::1]:7001", "tcp", "[::1]:7001"},
		{"tls://b1.example:443", "tls", "b1.example:443"},
	} {
		s, hp, err := splitScheme(c.in)
		if err != nil || s != c.scheme || hp != c.hostPort {
			t.Errorf("splitScheme(%q) = %q, %q, %v", c.in, s, hp, err)
		}
	}
	if _, err := DialClient(ctx10(t), "ws://127.0.0.1:1", ""); !errors.Is(err, errUnknownScheme) {
		t.Errorf("ws:// address: %v", err)
	}
}

// discard is a Handler that drops everything.
type discard struct{}

func (discard) PeerUp(*Link)                            {}
func (discard) PeerMessage(*Link, message.Message)      {}
func (discard) PeerDown(*Link, error)                   {}
func (discard) ClientUp(*Session)                       {}
func (discard) ClientMessage(*Session, message.Message) {}
func (discard) ClientDown(*Session, error)              {}

// FuzzTCPSession sends arbitrary bytes as a TCP client's whole stream and
// reads the broker's answer: it must be frames the client can read, the
// first a Welcome or a Refuse, nothing after a Refuse, and the broker must
// close the connection once the client's stream has ended. The broker
// (in this process) must not panic.
func FuzzTCPSession(f *testing.F) {
	join := func(ms ...any) []byte {
		var b []byte
		for _, m := range ms {
			switch m := m.(type) {
			case []byte:
				b = append(b, m...)
			case message.Message:
				b, _ = wire.AppendFrame(b, m)
			}
		}
		return b
	}
	broker := clientHello()
	broker.Role, broker.ID = message.RoleBroker, "B2"
	for _, seed := range [][]byte{
		{},
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		join(clientHello()),
		join(clientHello(), &message.ClientHello{Publisher: "p", Epoch: 1}, &message.Publish{Seq: 1, Payload: []byte("x")}),
		join(clientHello(), &message.Subscribe{Req: 1}, &message.Unsubscribe{}),
		join(clientHello(), []byte{4, 0, byte(message.TypePubAck), 0xc1, 0xc1}),
		join(clientHello(), []byte{0xff, 0xff, 0xff, 0x7f, 0, 1}),
		join(clientHello(), []byte{5, 0xff, 0xf0, 0x92, 1, 2}, &message.Publish{Seq: 2}),
		join(clientHello(), &message.Refuse{Code: message.RefuseClosing, Reason: "bye"}),
		join(clientHello(), clientHello()),
		join(clientHello(), &message.Ready{}),
		join(broker),
		join(clientHello())[:5],
	} {
		f.Add(seed)
	}
	ep, err := Listen(Config{ID: "B1", Listen: "127.0.0.1:0", MaxFrame: 4096, Log: zerolog.Nop()}, discard{})
	if err != nil {
		f.Fatal(err)
	}
	defer ep.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ep.ServeConn(c)
		}
	}()
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 64<<10 {
			return
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Write(in); err != nil {
			return // the broker closed first (a reset): no answer to check
		}
		_ = c.(*net.TCPConn).CloseWrite()
		rd := wire.NewReader(c, 1<<20)
		var got []message.Message
		for range 10000 {
			m, err := rd.Read()
			if err != nil {
				if errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrFrameTooLarge) || errors.Is(err, wire.ErrUnknownType) {
					t.Fatalf("the broker wrote a frame a client cannot read: %v", err)
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("the broker did not close the connection after the client's stream ended (%d frames read)", len(got))
				}
				break
			}
			got = append(got, m)
		}
		if len(got) == 0 {
			return // reset before the answer arrived: nothing to check
		}
		switch got[0].(type) {
		case *message.Welcome, *message.Refuse:
		default:
			t.Fatalf("first frame %v, want Welcome or Refuse", got[0].Type())
		}
		for i, m := range got {
			if _, ok := m.(*message.Refuse); ok && i != len(got)-1 {
				t.Fatalf("%d frames after a Refuse", len(got)-1-i)
			}
		}
	})
}
