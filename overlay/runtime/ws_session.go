package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/deltapub/deltapub/internal/webproto"
	"github.com/deltapub/deltapub/message"
	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/nbhttp/websocket"
)

// wsConn is one WebSocket connection; after its hello it carries a
// session (a new one, or one it resumes).
type wsConn struct {
	l          *WSListener
	c          *websocket.Conn
	nc         *nbio.Conn // plain connections
	blocking   bool       // wss: WriteMessage blocks until the kernel has the bytes
	codec      webproto.Codec
	helloTimer *time.Timer

	mu   sync.Mutex
	sess *wsSession // nil until the hello
	done bool       // closing: the broker ended it
}

func (wc *wsConn) session() *wsSession {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return wc.sess
}

func (wc *wsConn) msgType() websocket.MessageType {
	if wc.codec.Binary {
		return websocket.BinaryMessage
	}
	return websocket.TextMessage
}

// direct writes a frame outside any queue (welcome, error frames).
func (wc *wsConn) direct(frame []byte) { _ = wc.c.WriteMessage(wc.msgType(), frame) }

// fail sends an error frame, then closes with the error's code; the
// session, if any, ends with it (no resume after a protocol error).
func (wc *wsConn) fail(e *webproto.Error) {
	if s := wc.session(); s != nil {
		s.end()
	}
	wc.direct(wc.codec.Error(e.Code, e.Msg))
	wc.closeWith(e.Close, e.Msg)
}

func (wc *wsConn) closeWith(code int, reason string) {
	wc.mu.Lock()
	if wc.done {
		wc.mu.Unlock()
		return
	}
	wc.done = true
	wc.mu.Unlock()
	if len(reason) > 120 { // a close frame's reason fits in 123 bytes
		reason = reason[:120]
	}
	_ = wc.c.WriteClose(code, reason)
	// The peer answers the close frame and closes; one that does not is
	// cut off shortly after.
	c := wc.c
	time.AfterFunc(time.Second, func() { _ = c.Close() })
}

// wsSession is a web client's session as the runtime sees it: a
// ClientSession (and a holder: frames queued during a drain are written
// after it, by a writer goroutine, never by the runtime's). It outlives its
// connection by Limits.WSResumeGrace: a client that reconnects within it
// and presents the session's token continues it, subscriptions and all,
// and gets the deliveries it missed from the session's recent history
// (Limits.WSHistory entries, none older than Limits.WSHistoryAge).
//
// Its outgoing queue is bounded by Limits.SendQueue frames and
// Limits.SendQueueBytes bytes not yet written to the socket (frames
// waiting here and bytes nbio still buffers). A session at the bound loses
// its connection (see behind), not its subscriptions.
type wsSession struct {
	l     *WSListener
	token string

	mu          sync.Mutex
	conn        *wsConn // nil while waiting for a resume
	ended       bool
	scheduled   bool // in the writers' channel, or being written
	pending     [][]byte
	outstanding int // bytes queued here or in nbio, not yet on the socket
	recent      recentRing
	owed        []message.Message // answers that came while disconnected (bounded)
	owedLost    bool
	grace       *time.Timer
}

// maxOwed bounds the answers (acknowledgements, gap notices) kept for a
// disconnected session; beyond it its resume reports recovered: false.
const maxOwed = 64

var _ ClientSession = (*wsSession)(nil)
var _ holder = (*wsSession)(nil)

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *wsSession) TrySend(m message.Message) bool {
	if !s.Hold(m) {
		return false
	}
	s.Flush()
	return true
}

// Hold queues m without waking a writer (and keeps deliveries in the
// recent history).
func (s *wsSession) Hold(m message.Message) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	lim := &s.l.limits
	if d, ok := m.(*message.Deliver); ok {
		s.recent.add(d, time.Now(), lim.WSHistory, lim.WSHistoryAge)
	}
	if s.conn == nil {
		s.owe(m)
		return true
	}
	var frame []byte
	if d, ok := m.(*message.Deliver); ok && !s.conn.codec.Binary {
		frame = webproto.DeliverFrame(s.l.deliverBody(d), d.Sub)
	} else if frame, ok = s.conn.codec.Encode(m); !ok {
		return true // nothing web clients get
	}
	if len(s.pending) >= lim.SendQueue || s.outstanding+len(frame) > lim.SendQueueBytes {
		s.behind(m)
		return true
	}
	s.pending = append(s.pending, frame)
	s.outstanding += len(frame)
	return true
}

// behind disconnects a client that let its queue fill up (error frame
// slow_consumer, close code 4008) without ending its session: it waits for
// a resume like any session that lost its connection, its history going on,
// so the client gets back its subscriptions and what the history still
// holds. The runtime is not told: for the others nothing changed. m is
// what did not fit. Called with s.mu held.
func (s *wsSession) behind(m message.Message) {
	wc := s.conn
	s.conn, s.pending, s.outstanding = nil, nil, 0
	s.owe(m)
	s.grace = time.AfterFunc(s.l.limits.WSResumeGrace, s.expire)
	s.l.rt.m.clientDisconnects.WithLabelValues("slow consumer").Inc()
	reason := fmt.Sprintf("slow consumer: more than %d frames or %d bytes waiting", s.l.limits.SendQueue, s.l.limits.SendQueueBytes)
	end := func() {
		wc.direct(wc.codec.Error(webproto.CodeSlow, reason))
		wc.closeWith(webproto.CloseSlowConsumer, reason)
	}
	if wc.blocking {
		go end() // wss writes block; the runtime's goroutine must not
		return
	}
	end()
}

// owe keeps an answer (not a delivery: those are in the history) for a
// disconnected session. Called with s.mu held.
func (s *wsSession) owe(m message.Message) {
	if _, ok := m.(*message.Deliver); ok {
		return
	}
	if len(s.owed) < maxOwed {
		s.owed = append(s.owed, m)
	} else {
		s.owedLost = true
	}
}

// Flush hands the session to a writer if it has frames waiting.
func (s *wsSession) Flush() {
	s.mu.Lock()
	if s.scheduled || len(s.pending) == 0 || s.conn == nil {
		s.mu.Unlock()
		return
	}
	s.scheduled = true
	blocking := s.conn.blocking
	s.mu.Unlock()
	if blocking {
		go s.writeOut() // wss: a goroutine per connection anyway
		return
	}
	select {
	case s.l.writers <- s:
	default:
		go s.writeOut() // never: the channel holds one entry per session
	}
}

// writeOut writes what is pending, until nothing is. A write that fails
// on a connection the session has left (a resume attached another one
// meanwhile, whose Flush found this writer busy) goes on with what is
// pending for the new one: the welcome of the resume is among it.
func (s *wsSession) writeOut() {
	for {
		s.mu.Lock()
		frames, wc := s.pending, s.conn
		s.pending = nil
		if len(frames) == 0 || wc == nil {
			s.scheduled = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		for _, f := range frames {
			if err := wc.c.WriteMessage(wc.msgType(), f); err != nil {
				s.mu.Lock()
				moved := s.conn != wc
				if !moved {
					s.scheduled, s.pending = false, nil
				}
				s.mu.Unlock()
				_ = wc.c.Close() // its close handler detaches the session
				if !moved {
					return
				}
				break // to what is pending for the new connection
			}
			if wc.blocking {
				s.mu.Lock()
				s.outstanding = max(0, s.outstanding-len(f))
				s.mu.Unlock()
			}
		}
	}
}

// written counts bytes nbio wrote to the session's socket.
func (s *wsSession) written(wc *wsConn, n int) {
	s.mu.Lock()
	if s.conn == wc {
		s.outstanding = max(0, s.outstanding-n)
	}
	s.mu.Unlock()
}

// detach is the end of wc, the session's connection: the session waits for
// a resume (or ends, if the broker closed it).
func (s *wsSession) detach(wc *wsConn, err error) {
	s.mu.Lock()
	if s.conn != wc {
		s.mu.Unlock()
		return
	}
	s.conn, s.pending, s.outstanding = nil, nil, 0
	if s.ended {
		s.mu.Unlock()
		s.down(err)
		return
	}
	s.grace = time.AfterFunc(s.l.limits.WSResumeGrace, s.expire)
	s.mu.Unlock()
}

func (s *wsSession) expire() {
	s.mu.Lock()
	if s.conn != nil || s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.mu.Unlock()
	s.down(errors.New("not resumed within ws_resume_grace"))
}

// end marks the session as not resumable.
// It reports whether the session was waiting for a resume: no connection
// will end it, the caller tells the runtime (down).
func (s *wsSession) end() (waiting bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	waiting = !s.ended && s.conn == nil
	s.ended = true
	if s.grace != nil {
		s.grace.Stop()
	}
	return waiting
}

func (s *wsSession) down(err error) {
	s.l.forget(s)
	s.l.rt.ClientDown(s, err)
}

// resume attaches wc to the session; the answer to the hello, the missed
// deliveries and the owed answers are queued first. A connection the
// session still has is replaced: the client knows it is dead before the
// broker does (the token is the client's alone).
func (s *wsSession) resume(wc *wsConn, pos []webproto.Position) bool {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return false
	}
	if s.grace != nil {
		s.grace.Stop()
	}
	if old := s.conn; old != nil {
		s.conn, s.pending, s.outstanding = nil, nil, 0
		go old.closeWith(webproto.CloseNormal, "session resumed on another connection")
	}
	lim := &s.l.limits
	missed, gaps, complete := s.recent.since(pos, time.Now(), lim.WSHistoryAge)
	r := webproto.Resume{Tried: true, Resumed: true, Recovered: complete && !s.owedLost, Gaps: gaps}
	s.conn = wc
	s.pending = append(s.pending[:0], wc.codec.Welcome(s.l.id, s.l.epoch, s.token, r))
	for _, d := range missed {
		f, _ := wc.codec.Encode(d)
		s.pending = append(s.pending, f)
	}
	for _, m := range s.owed {
		if f, ok := wc.codec.Encode(m); ok {
			s.pending = append(s.pending, f)
		}
	}
	s.owed, s.owedLost = nil, false
	for _, f := range s.pending {
		s.outstanding += len(f)
	}
	s.mu.Unlock()
	wc.mu.Lock()
	wc.sess = s
	wc.mu.Unlock()
	s.Flush()
	return true
}

// Close is the runtime's: slow consumer, too many clients, broker leaving.
func (s *wsSession) Close(reason string) {
	s.mu.Lock()
	wasEnded := s.ended
	s.ended = true
	wc := s.conn
	if s.grace != nil {
		s.grace.Stop()
	}
	s.mu.Unlock()
	if wc == nil {
		if !wasEnded {
			go s.down(errors.New(reason)) // the runtime's goroutine must not wait
		}
		return
	}
	code := closeCode(reason)
	end := func() {
		if code == webproto.CloseSlowConsumer {
			wc.direct(wc.codec.Error(webproto.CodeSlow, reason))
		}
		wc.closeWith(code, reason)
	}
	if wc.blocking {
		go end() // wss writes block; the runtime's goroutine must not
		return
	}
	end()
}
