package runtime

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// fullLink is a link whose send queue stays full: TrySend fails, Send
// waits until the link is closed.
type fullLink struct {
	peer   message.BrokerID
	sends  atomic.Int32 // calls of Send (the runtime waiting for room)
	closed chan struct{}
	once   sync.Once
}

func (l *fullLink) Peer() message.BrokerID       { return l.peer }
func (l *fullLink) TrySend(message.Message) bool { return false }
func (l *fullLink) Queued() int                  { return 8192 }
func (l *fullLink) Close(string)                 { l.once.Do(func() { close(l.closed) }) }
func (l *fullLink) Send(message.Message) error {
	l.sends.Add(1)
	<-l.closed
	return errors.New("closed")
}

// The full link of a peer silent for half the failure timeout is closed
// at once; a peer heard lately gets LinkBlock of waiting for room first.
func TestFullLinkOfASilentPeerIsClosedWithoutWaiting(t *testing.T) {
	c := validBrokerConfig()
	c.Limits.LinkBlock = 20 * time.Millisecond
	r, err := NewRuntime(c, 5, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	for _, tc := range []struct {
		name   string
		silent time.Duration
		waits  int32
	}{
		{"silent peer", c.FailureTimeout/2 + time.Millisecond, 0},
		{"peer heard lately", c.FailureTimeout / 4, 1},
	} {
		l := &fullLink{peer: "B2", closed: make(chan struct{})}
		r.links["B2"] = &linkState{l: l, announced: true, heard: now.Add(-tc.silent)}
		r.sendPeer("B2", &message.Heartbeat{})
		select {
		case <-l.closed:
		default:
			t.Errorf("%s: the link is not closed", tc.name)
		}
		if got := l.sends.Load(); got != tc.waits {
			t.Errorf("%s: waited for room %d times, want %d", tc.name, got, tc.waits)
		}
		if r.links["B2"] != nil {
			t.Errorf("%s: the closed link is still the peer's", tc.name)
		}
	}
}
