package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/deltapub/deltapub/internal/quic"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// TCPListener takes client sessions over TCP, or TLS over TCP (tcp_listen):
// the handshake, frames, queues and limits of QUIC client sessions, run by
// the QUIC transport's endpoint (quic.Endpoint.ServeConn), so the runtime
// gets the same sessions whichever transport carries them. Broker links
// stay on QUIC.
type TCPListener struct {
	ln      net.Listener
	tls     bool
	tr      *QUICTransport
	rt      *Runtime
	limiter *tokenBucket
	log     zerolog.Logger
	done    chan struct{} // closed when the accept loop returns
}

// tcpKeepAlive ends the session of a client whose machine is gone (no
// answer to the kernel's probes for about 40 s): the counterpart of QUIC's
// idle timeout (30 s).
var tcpKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 10 * time.Second, Count: 3}

// ListenTCP starts the TCP client listener of cfg (cfg.TCPListen), whose
// sessions run on tr's endpoint and report to rt.
func ListenTCP(cfg *BrokerConfig, tr *QUICTransport, rt *Runtime, log zerolog.Logger) (*TCPListener, error) {
	tc, err := clientTLS(cfg)
	if err != nil {
		return nil, fmt.Errorf("runtime: tcp_listen: %w", err)
	}
	lc := net.ListenConfig{KeepAliveConfig: tcpKeepAlive}
	ln, err := lc.Listen(context.Background(), "tcp", cfg.TCPListen)
	if err != nil {
		return nil, fmt.Errorf("runtime: tcp_listen: %w", err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	l := &TCPListener{ln: ln, tls: tc != nil, tr: tr, rt: rt,
		limiter: newTokenBucket(float64(cfg.Limits.TCPHandshakes), time.Now),
		log:     log.With().Str("transport", "tcp").Logger(),
		done:    make(chan struct{})}
	go l.acceptLoop()
	return l, nil
}

// clientTLS is the TLS configuration of the client listeners (ws_listen,
// tcp_listen): the broker's certificate and key; nil without them.
func clientTLS(cfg *BrokerConfig) (*tls.Config, error) {
	if cfg.TLS.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLS.CertFile, cfg.TLS.KeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Addr is the listener's address.
func (l *TCPListener) Addr() string { return l.ln.Addr().String() }

// Close stops accepting; sessions already up end with the broker (the
// runtime's shutdown and the endpoint's Close).
func (l *TCPListener) Close() error {
	err := l.ln.Close()
	<-l.done
	return err
}

// acceptPause is the wait after a failed accept (out of file descriptors):
// the listener neither spins nor gives up.
const acceptPause = 50 * time.Millisecond

func (l *TCPListener) acceptLoop() {
	defer close(l.done)
	for {
		c, err := l.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			l.log.Warn().Err(err).Msg("accept failed")
			time.Sleep(acceptPause)
			continue
		}
		if !l.limiter.take() {
			l.rt.m.clientDisconnects.WithLabelValues("tcp handshake rate").Inc()
			if l.tls {
				_ = c.Close() // before the TLS handshake: that is what the limit spares
				continue
			}
			quic.RefuseConn(c, message.RefuseBusy, "too many new TCP sessions per second; retry later")
			continue
		}
		l.tr.ep.ServeConn(c)
	}
}
