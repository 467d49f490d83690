// Package quic is deltapub's transport: broker-to-broker links and
// client sessions over QUIC (github.com/quic-go/quic-go), one bidirectional
// stream per connection carrying internal/wire frames; and client sessions
// over TCP or TLS (tcp.go), the same frames on the connection's byte
// stream, for a listener the caller runs (Endpoint.ServeConn).
//
// Security. Every endpoint has an ephemeral self-signed TLS 1.3
// certificate and dialers do not verify it (InsecureSkipVerify). That is
// safe only because broker links are authenticated one level up: each side
// sends HMAC-SHA256(secret, EKM || role || ID), where EKM is keying material
// exported from this very TLS session (RFC 5705/8446 exporter). A peer
// without the overlay secret cannot compute it, the secret never crosses the
// wire, and a man in the middle terminates two TLS sessions with two
// different EKMs, so relaying a proof does not help him. Optionally (CertFile,
// KeyFile, CAFile) the endpoint uses mutual TLS with certificates of an
// overlay CA instead of, or in addition to, the secret. Clients prove
// nothing but an optional token (compared in constant time).
//
// Links. A writer goroutine per link batches queued frames into large
// stream writes; the send queue is bounded in frames and bytes, and a full
// queue makes Send block and TrySend report false (backpressure, never a
// silent drop). A reader goroutine per link decodes with a reused buffer and
// calls the Handler in arrival order.
package quic

import (
	"errors"
	"fmt"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// ALPN protocol names: they tell broker links from client sessions before
// any byte of deltapub is read. The protocol version is negotiated in the
// Hello, not here, so that an incompatible peer gets a readable refusal
// instead of a TLS alert.
const (
	ALPNBroker = "deltapub-broker"
	ALPNClient = "deltapub-client"
)

// Defaults, each with its reason.
const (
	// DefaultSendQueue frames may wait per link before Send blocks: about
	// 4 ms of traffic at 500,000 msgs/s, enough to fill large batched
	// writes while the writer is busy.
	DefaultSendQueue = 2048
	// DefaultSendQueueBytes bounds the same queue in bytes (frames can be up
	// to MaxFrame): memory per link is at most twice this (the queue and the
	// batch being written) plus one frame.
	DefaultSendQueueBytes = 4 << 20
	// DefaultHandshakeTimeout bounds QUIC+TLS and the deltapub handshake.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultIdleTimeout is QUIC's idle timeout. Failure detection is the
	// protocol's job (its heartbeats and failure timeout, typically well
	// under a second), so QUIC must not close a link first: this is a
	// backstop for a peer that vanished without the protocol noticing.
	// Keepalives are sent every third of it.
	DefaultIdleTimeout = 30 * time.Second
	// maxHandshakes bounds concurrent incoming handshakes; beyond it a new
	// connection is closed at once ("busy") instead of queued.
	maxHandshakes = 64
	// closeLinger bounds how long an orderly Close waits for the peer to
	// read the last frames before the connection is torn down.
	closeLinger = 2 * time.Second
	// clientCloseWait bounds how long ClientConn.Close waits for the
	// broker's close (a live broker closes within a round trip or two).
	clientCloseWait = 250 * time.Millisecond
)

// closeWait bounds how long Endpoint.Close waits for Handler calls (a
// variable for tests).
var closeWait = 5 * time.Second

// Flow-control windows (bytes). Loopback at 500,000 × 250 B/s is
// 125 MB/s; the bandwidth-delay product is tiny (RTT ~0.1 ms), so the
// windows exist to absorb the reader's scheduling hiccups (a GC pause or a
// busy runtime goroutine): 8 MiB per stream is ~60 ms of full-speed traffic
// before the sender is throttled. quic-go starts at the initial window and
// auto-tunes up to the maximum. The connection window is 1.5× the stream's
// (one stream per connection; the rest is slack for control frames).
const (
	initialStreamWindow = 1 << 20
	maxStreamWindow     = 8 << 20
	initialConnWindow   = 3 << 19
	maxConnWindow       = 12 << 20

	clientMaxStreamWindow = 2 << 20 // see DialClient
	clientMaxConnWindow   = 3 << 20
)

// Config configures an Endpoint. Zero values take the defaults above.
type Config struct {
	ID     message.BrokerID // this broker; empty for a dial-only client endpoint
	Epoch  uint64           // this broker's incarnation, sent in the handshake
	Addr   string           // advertised address, sent in the handshake
	Listen string           // "127.0.0.1:7001"; empty = dial only

	// Secret authenticates broker links (HMAC over the TLS exporter, see the
	// package comment). nil = no broker authentication (a warning is
	// logged): any peer that speaks the protocol may link.
	Secret []byte
	// ClientToken, if set, must be presented by every client.
	ClientToken string

	// Optional mutual TLS: this endpoint's certificate and key, and the CA
	// that signed every peer's certificate (PEM files). All three or none.
	CertFile, KeyFile, CAFile string

	MaxFrame         int           // bytes per frame; default wire.DefaultMaxFrame
	SendQueue        int           // frames queued per link before Send blocks; default DefaultSendQueue
	SendQueueBytes   int           // bytes queued per link before Send blocks; default DefaultSendQueueBytes
	HandshakeTimeout time.Duration // default DefaultHandshakeTimeout
	IdleTimeout      time.Duration // QUIC idle timeout; default DefaultIdleTimeout

	Log zerolog.Logger

	// version and minVersion override the protocol versions this endpoint
	// claims (tests of the version check).
	version, minVersion uint16
}

func (c *Config) fill() error {
	if c.MaxFrame == 0 {
		c.MaxFrame = wire.DefaultMaxFrame
	}
	if c.SendQueue == 0 {
		c.SendQueue = DefaultSendQueue
	}
	if c.SendQueueBytes == 0 {
		c.SendQueueBytes = DefaultSendQueueBytes
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.version == 0 {
		c.version = wire.ProtocolVersion
	}
	if c.minVersion == 0 {
		c.minVersion = wire.MinCompatibleVersion
	}
	switch {
	case c.MaxFrame < 1024 || c.MaxFrame > 64<<20:
		return fmt.Errorf("quic: config: MaxFrame %d out of range [1024, 64 MiB]", c.MaxFrame)
	case c.SendQueue < 1:
		return fmt.Errorf("quic: config: SendQueue %d must be positive", c.SendQueue)
	case c.SendQueueBytes < 1:
		return fmt.Errorf("quic: config: SendQueueBytes %d must be positive", c.SendQueueBytes)
	case c.HandshakeTimeout < 0 || c.IdleTimeout < 0:
		return errors.New("quic: config: negative timeout")
	case c.IdleTimeout < time.Second:
		return fmt.Errorf("quic: config: IdleTimeout %v below 1s would race the protocol's own failure detection", c.IdleTimeout)
	case (c.CertFile != "" || c.KeyFile != "" || c.CAFile != "") && (c.CertFile == "" || c.KeyFile == "" || c.CAFile == ""):
		return errors.New("quic: config: CertFile, KeyFile and CAFile go together (mutual TLS)")
	case c.Listen != "" && c.ID == "":
		return errors.New("quic: config: a listening endpoint needs an ID")
	}
	return nil
}

var (
	// ErrClosed is returned by Send on a closed link, session or endpoint.
	ErrClosed = errors.New("quic: closed")
	// ErrQueueFull is returned by the non-blocking sends when the send queue
	// is at its bound.
	ErrQueueFull = errors.New("quic: send queue full")
	// ErrRefused is wrapped by every *RefusedError.
	ErrRefused = errors.New("quic: refused")
)

// RefusedError is a handshake refusal, by the peer (Remote) or by us.
type RefusedError struct {
	Peer   string // peer ID or address
	Code   message.RefuseCode
	Reason string
	Remote bool
}

func (e *RefusedError) Error() string {
	if e.Remote {
		return fmt.Sprintf("quic: %s refused the connection: %s", e.Peer, e.Reason)
	}
	return fmt.Sprintf("quic: refused %s: %s", e.Peer, e.Reason)
}
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Application error codes in QUIC CONNECTION_CLOSE frames.
const (
	codeOK       = 0 // orderly close
	codeRefused  = 1 // handshake refused (the reason says why)
	codeProtocol = 2 // malformed frame or protocol violation
	codeReplaced = 3 // a newer link to the same peer replaced this one
	codeShutdown = 4 // the endpoint is closing
	codeBusy     = 5 // too many handshakes
)
