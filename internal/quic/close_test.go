package quic

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"
)

// deadPeer is a carrier whose peer never closes the connection (a broker
// that died): awaitClose blocks until the test releases it.
type deadPeer struct {
	mu        sync.Mutex
	written   bytes.Buffer
	awaiting  chan struct{} // closed when awaitClose is entered
	release   chan struct{}
	torn      chan struct{}
	closeOnce sync.Once
}

func (d *deadPeer) Read([]byte) (int, error) { select {} }
func (d *deadPeer) writeBatch(chunks [][]byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range chunks {
		d.written.Write(c)
		n += len(c)
	}
	return n, nil
}
func (d *deadPeer) SetDeadline(time.Time) error      { return nil }
func (d *deadPeer) SetWriteDeadline(time.Time) error { return nil }
func (d *deadPeer) closeWrite() error                { return nil }
func (d *deadPeer) awaitClose(time.Time, bool) {
	close(d.awaiting)
	<-d.release
}
func (d *deadPeer) teardown(quic.ApplicationErrorCode, string) {
	d.closeOnce.Do(func() { close(d.torn) })
}
func (d *deadPeer) RemoteAddr() net.Addr { return &net.UDPAddr{} }

// Close returns after handing the queued messages to the transport and a
// short wait for the broker's close, not after the full linger for a peer
// that never closes (a dead broker); the connection is torn down when the
// linger ends.
func TestClientCloseDoesNotWaitForADeadBroker(t *testing.T) {
	cfg := &Config{Log: zerolog.Nop()}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	d := &deadPeer{awaiting: make(chan struct{}), release: make(chan struct{}), torn: make(chan struct{})}
	c := &ClientConn{id: 1, broker: "B1"}
	c.peerConn = newPeerConn(d, wire.NewReader(d, cfg.MaxFrame), cfg, cfg.Log)
	go c.writeLoop()
	if err := c.Send(&message.Publish{Seq: 7}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second): // a bound on a hang, not a speed check
		t.Fatal("Close waited for the dead broker")
	}
	select {
	case <-d.awaiting:
	default:
		t.Fatal("Close returned before the orderly close began")
	}
	select {
	case <-d.torn:
		t.Fatal("torn down while still waiting for the peer")
	default:
	}
	d.mu.Lock()
	frames, err := readAllFrames(d.written.Bytes(), cfg.MaxFrame)
	d.mu.Unlock()
	if err != nil || len(frames) != 2 {
		t.Fatalf("written %v (%v), want the Publish and the closing Refuse", frames, err)
	}
	if p, ok := frames[0].(*message.Publish); !ok || p.Seq != 7 {
		t.Fatalf("first frame %v, want Publish 7", frames[0])
	}
	if r, ok := frames[1].(*message.Refuse); !ok || r.Code != message.RefuseClosing {
		t.Fatalf("last frame %v, want Refuse{Closing}", frames[1])
	}
	close(d.release)
	<-c.writerDone
	select {
	case <-d.torn:
	default:
		t.Fatal("not torn down after the wait ended")
	}
}

func readAllFrames(b []byte, maxFrame int) ([]message.Message, error) {
	rd := wire.NewReader(bytes.NewReader(b), maxFrame)
	var out []message.Message
	for {
		m, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}
