package quic

import (
	"io"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// carrier is the byte stream under a peerConn: the one stream of a QUIC
// connection (broker links, client sessions), or a TCP or TLS connection
// (client sessions, tcp.go). Everything above it (handshake, send queue,
// writer, reader, closing in order) is the same code for both.
type carrier interface {
	io.Reader
	// writeBatch writes the chunks of one batch in order (empty ones
	// skipped); it returns the bytes written.
	writeBatch(chunks [][]byte) (int, error)
	SetDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	// closeWrite ends the outgoing stream after the last frame, the
	// incoming one stays open to read the peer's last frames.
	closeWrite() error
	// awaitClose waits, until deadline at most, for the peer to close the
	// connection after reading our last frame. alone: nothing else reads
	// the connection (a handshake), so awaitClose may read, and drop,
	// what the peer still sends.
	awaitClose(deadline time.Time, alone bool)
	// teardown closes the connection now. QUIC tells the peer code and
	// reason in its CONNECTION_CLOSE; see tcpStream.teardown for TCP.
	teardown(code quic.ApplicationErrorCode, reason string)
	RemoteAddr() net.Addr
}

// quicStream is a QUIC connection with its one bidirectional stream.
type quicStream struct {
	qc *quic.Conn
	*quic.Stream
}

func (s quicStream) writeBatch(chunks [][]byte) (int, error) {
	n := 0
	for _, b := range chunks {
		if len(b) == 0 {
			continue // an encoding that failed left its new chunk empty
		}
		k, err := s.Write(b)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s quicStream) closeWrite() error    { return s.Close() }
func (s quicStream) RemoteAddr() net.Addr { return s.qc.RemoteAddr() }

func (s quicStream) awaitClose(deadline time.Time, _ bool) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-s.qc.Context().Done():
	case <-t.C:
	}
}

func (s quicStream) teardown(code quic.ApplicationErrorCode, reason string) {
	_ = s.qc.CloseWithError(code, reason)
}
