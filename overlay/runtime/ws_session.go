package runtime

import (
	"time"

	"sync"

	"github.com/deltapub/deltapub/internal/webproto"
	"github.com/deltapub/deltapub/message"
	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/nbhttp/websocket"
)

// wsSession is a web client's session as the runtime sees it: a
// ClientSession (and a holder: frames queued during a drain are written
// after it, by a writer goroutine, never by the runtime's).
//
// Its outgoing queue is bounded by Limits.SendQueue frames and
// Limits.SendQueueBytes bytes not yet written to the socket (frames
// waiting here and bytes nbio still buffers). A session at the bound makes
// TrySend fail: the runtime disconnects it as a slow consumer, which the
// client sees as close code 4008 after an error frame.
type wsSession struct {
	l        *WSListener
	c        *websocket.Conn
	nc       *nbio.Conn // plain sessions
	blocking bool       // wss: WriteMessage blocks until the kernel has the bytes
	codec    webproto.Codec

	helloTimer *time.Timer

	mu          sync.Mutex
	up          bool // hello accepted, the runtime knows the session
	closed      bool
	scheduled   bool // in the writers' channel, or being written
	pending     [][]byte
	outstanding int // bytes queued here or in nbio, not yet on the socket
}

var _ ClientSession = (*wsSession)(nil)
var _ holder = (*wsSession)(nil)

func (s *wsSession) TrySend(m message.Message) bool {
	if !s.Hold(m) {
		return false
	}
	s.Flush()
	return true
}

// Hold encodes m and queues it without waking a writer.
func (s *wsSession) Hold(m message.Message) bool {
	frame, ok := s.codec.Encode(m)
	if !ok {
		return true // nothing web clients get
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.pending) >= s.l.limits.SendQueue || s.outstanding+len(frame) > s.l.limits.SendQueueBytes {
		return false
	}
	s.pending = append(s.pending, frame)
	s.outstanding += len(frame)
	return true
}

// Flush hands the session to a writer if it has frames waiting.
func (s *wsSession) Flush() {
	s.mu.Lock()
	if s.scheduled || len(s.pending) == 0 {
		s.mu.Unlock()
		return
	}
	s.scheduled = true
	s.mu.Unlock()
	if s.blocking {
		go s.writeOut() // wss: a goroutine per connection anyway
		return
	}
	select {
	case s.l.writers <- s:
	default:
		go s.writeOut() // never: the channel holds one entry per session
	}
}

// writeOut writes what is pending, until nothing is.
func (s *wsSession) writeOut() {
	mt := websocket.TextMessage
	if s.codec.Binary {
		mt = websocket.BinaryMessage
	}
	for {
		s.mu.Lock()
		frames := s.pending
		s.pending = nil
		if len(frames) == 0 || s.closed {
			s.scheduled = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		for _, f := range frames {
			if err := s.c.WriteMessage(mt, f); err != nil {
				s.mu.Lock()
				s.closed, s.pending, s.scheduled = true, nil, false
				s.mu.Unlock()
				_ = s.c.Close()
				return
			}
			if s.blocking {
				s.mu.Lock()
				s.outstanding = max(0, s.outstanding-len(f))
				s.mu.Unlock()
			}
		}
	}
}

// direct writes a frame outside the queue (welcome, error frames: before
// the runtime knows the session, or as it ends).
func (s *wsSession) direct(frame []byte) {
	mt := websocket.TextMessage
	if s.codec.Binary {
		mt = websocket.BinaryMessage
	}
	_ = s.c.WriteMessage(mt, frame)
}

// fail sends an error frame, then closes with the error's code.
func (s *wsSession) fail(e *webproto.Error) {
	s.direct(s.codec.Error(e.Code, e.Msg))
	s.closeWith(e.Close, e.Msg)
}

// Close is the runtime's: slow consumer, too many clients, broker leaving.
func (s *wsSession) Close(reason string) {
	code := closeCode(reason)
	end := func() {
		if code == webproto.CloseSlowConsumer {
			s.direct(s.codec.Error(webproto.CodeSlow, reason))
		}
		s.closeWith(code, reason)
	}
	if s.blocking {
		go end() // wss writes block; the runtime's goroutine must not
		return
	}
	end()
}

func (s *wsSession) closeWith(code int, reason string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed, s.pending = true, nil
	s.mu.Unlock()
	if len(reason) > 120 { // a close frame's reason fits in 123 bytes
		reason = reason[:120]
	}
	_ = s.c.WriteClose(code, reason)
	// The peer answers the close frame and closes; one that does not is
	// cut off shortly after.
	c := s.c
	time.AfterFunc(time.Second, func() { _ = c.Close() })
}
