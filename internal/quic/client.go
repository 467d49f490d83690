package quic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"
)

// ClientConn is a client's session with a broker (used by package client).
// Send may be called from any goroutine; Recv from one goroutine at a time.
type ClientConn struct {
	*peerConn
	id     message.ClientID
	broker message.BrokerID
}

// ClientOptions tunes DialClient; the zero value is the defaults.
type ClientOptions struct {
	TLS            *tls.Config // nil: no server verification (see the package comment)
	MaxFrame       int
	SendQueue      int
	SendQueueBytes int
	// IdleTimeout: a broker silent this long (no keepalive answered)
	// ends the session; 0: DefaultIdleTimeout. A client that can move to
	// another broker wants it short.
	IdleTimeout time.Duration
	Log         zerolog.Logger

	version, minVersion uint16 // tests
}

// DialClient opens a client session with the broker at addr, presenting
// token if not empty. addr is "host:port" or "quic://host:port" (QUIC),
// "tcp://host:port" (TCP) or "tls://host:port" (TLS over TCP): the last two
// reach a broker's TCP client listener (tcp_listen). opts may be omitted.
func DialClient(ctx context.Context, addr, token string, opts ...ClientOptions) (*ClientConn, error) {
	var o ClientOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	cfg := Config{MaxFrame: o.MaxFrame, SendQueue: o.SendQueue, SendQueueBytes: o.SendQueueBytes,
		IdleTimeout: o.IdleTimeout, Log: o.Log, version: o.version, minVersion: o.minVersion}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	scheme, hostPort, err := splitScheme(addr)
	if err != nil {
		return nil, fmt.Errorf("quic: dial broker: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	var st carrier
	if scheme == "tcp" || scheme == "tls" {
		ts, err := dialTCP(ctx, hostPort, scheme == "tls", o.TLS, cfg.IdleTimeout)
		if err != nil {
			return nil, fmt.Errorf("quic: dial broker %s: %w", addr, err)
		}
		st = ts
	} else if st, err = dialQUICClient(ctx, hostPort, o.TLS, &cfg); err != nil {
		return nil, fmt.Errorf("quic: dial broker %s: %w", addr, err)
	}
	return clientHandshake(ctx, st, addr, token, &cfg)
}

// dialQUICClient opens a QUIC connection and its stream to a broker.
func dialQUICClient(ctx context.Context, addr string, tc *tls.Config, cfg *Config) (carrier, error) {
	if tc == nil {
		tc = &tls.Config{
			MinVersion: tls.VersionTLS13,
			// A client trusts the broker address it was given; clients carry
			// no secret that a fake broker could steal (the token only
			// grants access). Use opts.TLS to verify the broker.
			InsecureSkipVerify: true, //nolint:gosec // see above
			ServerName:         "deltapub",
		}
	} else {
		tc = tc.Clone()
	}
	tc.NextProtos = []string{ALPNClient}
	qconf := quicConfig(cfg, false)
	// A subscriber's receive window is what its broker may have in flight
	// toward it: smaller than between brokers, so that a slow subscriber
	// meets the broker's bounded send queue (and its slow-consumer policy)
	// after 2 MiB rather than 8. Loopback and LAN bandwidth-delay products
	// are far below that.
	qconf.MaxStreamReceiveWindow = clientMaxStreamWindow
	qconf.MaxConnectionReceiveWindow = clientMaxConnWindow
	qc, err := quic.DialAddr(ctx, addr, tc, qconf)
	if err != nil {
		return nil, err
	}
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		_ = qc.CloseWithError(codeRefused, "")
		return nil, fmt.Errorf("open stream: %w", err)
	}
	return quicStream{qc, str}, nil
}

// clientHandshake is the client's side of the handshake, over QUIC or TCP:
// Hello, then the broker's Welcome (checked) or Refuse.
func clientHandshake(ctx context.Context, st carrier, addr, token string, cfg *Config) (*ClientConn, error) {
	deadline, _ := ctx.Deadline()
	_ = st.SetDeadline(deadline)
	hello := &message.Hello{Magic: message.Magic, Version: cfg.version, MinVersion: cfg.minVersion,
		Role: message.RoleClient, Token: token}
	if err := writeHandshake(st, hello); err != nil {
		st.teardown(codeRefused, "")
		return nil, fmt.Errorf("quic: dial broker %s: %w", addr, err)
	}
	rd := wire.NewReader(st, cfg.MaxFrame)
	m, err := rd.Read()
	if err != nil {
		st.teardown(codeRefused, "")
		var ae *quic.ApplicationError
		if errors.As(err, &ae) && ae.Remote {
			return nil, &RefusedError{Peer: "broker " + addr, Reason: ae.ErrorMessage, Remote: true}
		}
		return nil, fmt.Errorf("quic: dial broker %s: handshake: %w", addr, err)
	}
	switch m := m.(type) {
	case *message.Refuse:
		st.teardown(codeRefused, "")
		return nil, &RefusedError{Peer: "broker " + addr, Code: m.Code, Reason: m.Reason, Remote: true}
	case *message.Welcome:
		c := &ClientConn{id: m.Client, broker: m.ID}
		log := cfg.Log.With().Str("broker", addr).Logger()
		if m.Magic != message.Magic {
			return nil, refuse(st, log, addr, message.RefuseProtocol, fmt.Sprintf("bad magic %q", m.Magic))
		}
		// The broker chose the version; check it is one we speak.
		if m.Version < cfg.minVersion || m.Version > cfg.version {
			return nil, refuse(st, log, addr, message.RefuseVersion,
				fmt.Sprintf("incompatible protocol version: broker chose %d, this client speaks %d to %d", m.Version, cfg.minVersion, cfg.version))
		}
		_ = st.SetDeadline(deadlineNone)
		c.peerConn = newPeerConn(st, rd, cfg, log)
		go c.writeLoop()
		return c, nil
	default:
		return nil, refuse(st, cfg.Log, addr, message.RefuseProtocol, fmt.Sprintf("expected Welcome, got %v", m.Type()))
	}
}

// ID is the session handle the broker gave this client.
func (c *ClientConn) ID() message.ClientID { return c.id }

// Broker is the ID of the broker this client is connected to.
func (c *ClientConn) Broker() message.BrokerID { return c.broker }

// Send queues m for the broker, blocking while the send queue is full.
func (c *ClientConn) Send(m message.Message) error { return c.send(m, nil, sendBlock) }

// TrySend is Send without blocking: false when full or closed.
func (c *ClientConn) TrySend(m message.Message) bool { return c.send(m, nil, sendTry) == nil }

// Recv returns the next message from the broker. Unknown message types are
// skipped. After an error the session is closed.
func (c *ClientConn) Recv() (message.Message, error) {
	for {
		m, err := c.rd.Read()
		if err != nil {
			if errors.Is(err, wire.ErrUnknownType) {
				continue
			}
			return nil, c.readFailed("session", err)
		}
		switch m := m.(type) {
		case *message.Refuse:
			c.st.teardown(codeOK, "")
			c.shutdown(false, codeOK, "broker closed the session")
			return nil, fmt.Errorf("%w: broker closed the session: %s", ErrClosed, m.Reason)
		case *message.Hello, *message.Welcome, *message.Ready:
			reason := fmt.Sprintf("protocol violation: %v after the handshake", m.Type())
			c.abort(codeProtocol, reason)
			return nil, fmt.Errorf("quic: session: %s", reason)
		}
		return m, nil
	}
}

// Close ends the session in order: every queued message is handed to the
// transport, then Close waits up to clientCloseWait for the broker to close
// the connection after reading them (a process that exits right after
// Close leaves no half-open session behind). A broker that died does not
// hold Close longer: the transport goes on in the background, and tears
// the connection down after closeLinger at most. Recv fails once the
// connection is closed.
func (c *ClientConn) Close() error {
	c.close("client closed")
	<-c.flushed
	t := time.NewTimer(clientCloseWait)
	defer t.Stop()
	select {
	case <-c.writerDone:
	case <-t.C:
	}
	return nil
}
