package quic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"
)

// Client sessions over TCP, plain or TLS: the same handshake (Hello →
// Welcome or Refuse) and the same frames as over QUIC, on the connection's
// byte stream. Only the carrier differs (tcpStream); Session and
// ClientConn are the same types, so the runtime cannot tell them apart.
// Broker links stay on QUIC.

// lastWordWait bounds how long a connection torn down with a reason
// (tcpStream.teardown) tries to write it.
const lastWordWait = 250 * time.Millisecond

// tcpStream is a TCP connection, or TLS over one, as a carrier.
type tcpStream struct {
	net.Conn          // what frames are read from and written to
	raw      net.Conn // the TCP connection (Conn itself when plain)

	bufs        net.Buffers // writeBatch's scratch (one writer at a time)
	readFailed  chan struct{}
	failOnce    sync.Once
	writeClosed atomic.Bool
	closeOnce   sync.Once
}

func newTCPStream(c net.Conn) *tcpStream {
	t := &tcpStream{Conn: c, raw: c, readFailed: make(chan struct{})}
	if tc, ok := c.(*tls.Conn); ok {
		t.raw = tc.NetConn()
	}
	return t
}

// Read notes the end of the incoming stream for awaitClose.
func (t *tcpStream) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	if err != nil {
		t.failOnce.Do(func() { close(t.readFailed) })
	}
	return n, err
}

// writeBatch writes every chunk with one writev system call on plain TCP
// (net.Buffers), where QUIC needs a stream write per chunk and a
// sendmsg per packet; TLS writes each chunk in records of 16 KiB.
func (t *tcpStream) writeBatch(chunks [][]byte) (int, error) {
	for _, b := range chunks {
		if len(b) > 0 {
			t.bufs = append(t.bufs, b)
		}
	}
	bufs := t.bufs // WriteTo consumes the slice it is called on
	n, err := bufs.WriteTo(t.Conn)
	clear(t.bufs)
	t.bufs = t.bufs[:0]
	return int(n), err
}

// closeWrite ends the outgoing stream: TLS's close_notify, or TCP's FIN.
func (t *tcpStream) closeWrite() error {
	t.writeClosed.Store(true)
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (t *tcpStream) awaitClose(deadline time.Time, alone bool) {
	if alone {
		// Read to the peer's close: closing with unread bytes would make
		// the kernel reset the connection, and the peer could lose our
		// last frame.
		_ = t.SetReadDeadline(deadline)
		_, _ = io.Copy(io.Discard, io.LimitReader(t, 1<<20))
		return
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-t.readFailed: // the session's reader saw the end
	case <-timer.C:
	}
}

// teardown closes the connection. A byte stream has no close frame of its
// own like QUIC's CONNECTION_CLOSE: a reason (an abort: malformed frame,
// broker closing) is written as a last Refuse frame first, if the stream
// is still open, for at most lastWordWait, by a goroutine of its own (the
// caller may be closing many connections).
func (t *tcpStream) teardown(code quic.ApplicationErrorCode, reason string) {
	t.closeOnce.Do(func() {
		if code == codeOK || reason == "" || t.writeClosed.Load() {
			_ = t.raw.Close()
			return
		}
		frame, _ := wire.AppendFrame(nil, &message.Refuse{Code: refuseCode(code), Reason: reason})
		go func() {
			_ = t.SetWriteDeadline(time.Now().Add(lastWordWait))
			_, _ = t.Conn.Write(frame)
			_ = t.raw.Close()
		}()
	})
}

// refuseCode is the Refuse code that tells a TCP peer what a QUIC peer
// learns from the application error code.
func refuseCode(code quic.ApplicationErrorCode) message.RefuseCode {
	switch code {
	case codeProtocol:
		return message.RefuseProtocol
	case codeShutdown:
		return message.RefuseClosing
	case codeBusy:
		return message.RefuseBusy
	}
	return message.RefuseOther
}

// ServeConn runs a client session over conn, a TCP or TLS connection
// accepted by a listener (overlay/runtime: tcp_listen): the handshake of
// a QUIC client session, then a Session reported to the Handler like any
// other. It returns at once. A connection beyond the handshakes in
// progress that QUIC allows too (64) is refused busy.
func (e *Endpoint) ServeConn(conn net.Conn) {
	st := newTCPStream(conn)
	from := conn.RemoteAddr().String()
	log := e.cfg.Log.With().Str("from", from).Str("transport", "tcp").Logger()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		_ = conn.Close()
		return
	}
	select {
	case e.sem <- struct{}{}:
	default:
		e.mu.Unlock()
		if _, isTLS := conn.(*tls.Conn); isTLS {
			_ = conn.Close() // a refusal would cost the TLS handshake it spares
			return
		}
		go refuse(st, log, "client "+from, message.RefuseBusy, "too many handshakes in progress")
		return
	}
	e.wg.Add(1) // under mu: Close has not started waiting
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		// Close does not wait out a handshake's timeout.
		stop := context.AfterFunc(e.ctx, func() { _ = st.raw.Close() })
		run := e.acceptTCP(st, from, log)
		stop()
		<-e.sem
		if run != nil {
			run()
		}
	}()
}

func (e *Endpoint) acceptTCP(st *tcpStream, from string, log zerolog.Logger) func() {
	rd := wire.NewReader(st, e.cfg.MaxFrame)
	rd.UseArena(readArena)
	hello, v, who, ok := e.readHello(st, rd, from, log)
	if !ok {
		return nil
	}
	if hello.Role != message.RoleClient {
		refuse(st, log, who, message.RefuseProtocol, "this is a client listener; broker links use QUIC")
		return nil
	}
	return e.acceptClient(st, rd, hello, v, from, log)
}

// dialTCP connects to a broker's TCP client listener, with TLS if secure.
// Keepalive probes end the session when the broker's machine is gone
// for about idle (a frozen broker process still answers them: unlike
// QUIC's keepalives, TCP's are the kernel's).
func dialTCP(ctx context.Context, addr string, secure bool, tc *tls.Config, idle time.Duration) (*tcpStream, error) {
	d := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: idle / 4, Interval: idle / 4, Count: 3}}
	if !secure {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return newTCPStream(c), nil
	}
	if tc == nil {
		tc = &tls.Config{
			MinVersion: tls.VersionTLS12,
			// As over QUIC: a client trusts the address it was given (see
			// DialClient); ClientOptions.TLS verifies the broker.
			InsecureSkipVerify: true, //nolint:gosec // see above
		}
	} else if tc.ServerName == "" {
		tc = tc.Clone()
		tc.ServerName, _, _ = net.SplitHostPort(addr)
	}
	c, err := (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return newTCPStream(c), nil
}

// errUnknownScheme: a broker address with a scheme DialClient does not know.
var errUnknownScheme = errors.New("unknown scheme (want quic://, tcp:// or tls://)")

// splitScheme splits "tcp://host:port" into "tcp" and "host:port"; a bare
// address has the scheme "".
func splitScheme(addr string) (scheme, hostPort string, err error) {
	s, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return "", addr, nil
	}
	switch s {
	case "quic", "tcp", "tls":
		return s, rest, nil
	}
	return "", "", fmt.Errorf("broker address %q: %w", addr, errUnknownScheme)
}

// RefuseConn answers a TCP connection refused before its handshake (a
// listener's rate limit) with a Refuse frame, and closes it. The frame is
// written without waiting: a connection that cannot take it at once is
// closed all the same.
func RefuseConn(conn net.Conn, code message.RefuseCode, reason string) {
	if frame, err := wire.AppendFrame(nil, &message.Refuse{Code: code, Reason: reason}); err == nil {
		_ = conn.SetWriteDeadline(time.Now().Add(time.Millisecond))
		_, _ = conn.Write(frame)
	}
	_ = conn.Close()
}
