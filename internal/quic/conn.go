package quic

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"
)

// peerConn is what a Link, a Session and a ClientConn share: one byte
// stream (a QUIC connection's one stream, or a TCP connection: carrier), a
// bounded send queue drained by a writer goroutine in large writes, and
// the frame reader.
//
// Send path: Send encodes the message straight into the queue (under mu);
// the writer swaps the queue out and writes it with a few large stream
// Writes. So encoding happens once, in the sender's goroutine, and batching
// is automatic (everything queued while a Write is in progress goes out in
// the next one). The queue is a list of chunks of chunkSize bytes taken from
// a pool shared by all connections: a burst that queues megabytes does not
// grow (and copy) one buffer over and over, an idle connection holds no
// buffer, and the steady state allocates nothing.
type peerConn struct {
	st  carrier
	log zerolog.Logger
	rd  *wire.Reader

	maxFrame, maxFrames, maxBytes int

	mu        sync.Mutex
	enc       *wire.Encoder
	pending   [][]byte // queued frames, in chunks (see chunkSize)
	bytes     int      // bytes in pending
	frames    int
	spaceWait chan struct{} // closed by the writer when it takes the queue; nil if nobody waits
	closedErr error         // non-nil once closing: every send fails with it

	// counters for Stats
	sentFrames, sentBytes, recvFrames atomic.Uint64
	writes                            atomic.Uint64

	wake    chan struct{} // cap 1: the queue went from empty to non-empty
	closing chan struct{} // closed when the conn starts closing

	closeOnce   sync.Once
	graceful    bool
	closeCode   quic.ApplicationErrorCode
	closeReason string
	// flushed is closed once closing has handed every queued frame to the
	// stream (an orderly close) or dropped them (an abort); writerDone
	// once the connection is torn down, which after an orderly close
	// waits, up to closeLinger, for the peer to close first.
	flushed    chan struct{}
	writerDone chan struct{}
}

func newPeerConn(st carrier, rd *wire.Reader, cfg *Config, log zerolog.Logger) *peerConn {
	return &peerConn{
		st: st, rd: rd, log: log,
		maxFrame: cfg.MaxFrame, maxFrames: cfg.SendQueue, maxBytes: cfg.SendQueueBytes,
		enc:        wire.NewEncoder(),
		wake:       make(chan struct{}, 1),
		closing:    make(chan struct{}),
		flushed:    make(chan struct{}),
		writerDone: make(chan struct{}),
	}
}

// How send behaves: sendTry returns ErrQueueFull when the queue is full;
// sendBlock waits for room; sendHold is sendTry without waking the writer
// (the caller calls flush after queueing a batch, so that the writer takes
// the whole batch in one go instead of one frame at a time).
const (
	sendTry = iota
	sendBlock
	sendHold
)

// holdLimit: a held queue this large wakes the writer anyway.
const holdLimit = 64 << 10

// send queues m (or, when raw != nil, an already encoded frame); see sendTry
// and the others for mode.
func (c *peerConn) send(m message.Message, raw []byte, mode int) error {
	for {
		c.mu.Lock()
		if c.closedErr != nil {
			err := c.closedErr
			c.mu.Unlock()
			return err
		}
		// An empty queue takes any frame, so a frame larger than the byte
		// bound still goes through; otherwise both bounds apply.
		if c.frames == 0 || (c.frames < c.maxFrames && c.bytes < c.maxBytes) {
			chunk := c.chunkFor(len(raw))
			n0 := len(*chunk)
			var err error
			if raw != nil {
				*chunk = append(*chunk, raw...)
			} else {
				*chunk, err = c.enc.AppendFrame(*chunk, m)
			}
			if err == nil && len(*chunk)-n0 > c.maxFrame+8 {
				err = fmt.Errorf("quic: send %v: frame of %d bytes exceeds MaxFrame %d", typeOf(m), len(*chunk)-n0, c.maxFrame)
			}
			if err != nil {
				*chunk = (*chunk)[:n0]
				c.mu.Unlock()
				return err
			}
			c.bytes += len(*chunk) - n0
			c.frames++
			c.sentFrames.Add(1)
			wake := c.frames == 1
			if mode == sendHold {
				wake = c.bytes >= holdLimit && c.bytes-(len(*chunk)-n0) < holdLimit
			}
			c.mu.Unlock()
			if wake {
				select {
				case c.wake <- struct{}{}:
				default:
				}
			}
			return nil
		}
		if mode != sendBlock {
			c.mu.Unlock()
			return ErrQueueFull
		}
		if c.spaceWait == nil {
			c.spaceWait = make(chan struct{})
		}
		w := c.spaceWait
		c.mu.Unlock()
		c.wakeWriter() // the queue may be held (sendHold): it must drain
		select {
		case <-w:
		case <-c.closing:
		}
	}
}

func typeOf(m message.Message) string {
	if m == nil {
		return "raw frame"
	}
	return m.Type().String()
}

// wakeWriter makes the writer take the queue (if it is not empty).
func (c *peerConn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// flush wakes the writer for what sendHold queued.
func (c *peerConn) flush() {
	c.mu.Lock()
	n := c.frames
	c.mu.Unlock()
	if n > 0 {
		c.wakeWriter()
	}
}

// queued returns the number of frames waiting to be written.
func (c *peerConn) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

// chunkSize is the size of the send queue's chunks. Frames never straddle
// chunks; a frame larger than a chunk gets a chunk of its own size.
const chunkSize = 32 << 10

// chunks is the pool of send chunks shared by every connection.
var chunks = sync.Pool{New: func() any { b := make([]byte, 0, chunkSize); return &b }}

// chunkFor returns the chunk to append a frame of about n bytes to (n = 0:
// unknown, an encoding), adding one to the queue when the last one is too
// full. Called with mu held.
func (c *peerConn) chunkFor(n int) *[]byte {
	if k := len(c.pending); k > 0 {
		last := &c.pending[k-1]
		room := cap(*last) - len(*last)
		if (n > 0 && n <= room) || (n == 0 && room >= 2<<10) {
			return last
		}
	}
	var b []byte
	if n > chunkSize {
		b = make([]byte, 0, n)
	} else {
		b = (*chunks.Get().(*[]byte))[:0]
	}
	c.pending = append(c.pending, b)
	return &c.pending[len(c.pending)-1]
}

// take swaps the queue out for writing (spare: an empty list to reuse).
func (c *peerConn) take(spare [][]byte) [][]byte {
	c.mu.Lock()
	batch := c.pending
	c.pending = spare[:0]
	c.frames = 0
	c.bytes = 0
	if c.spaceWait != nil {
		close(c.spaceWait)
		c.spaceWait = nil
	}
	c.mu.Unlock()
	return batch
}

// release returns a written batch's chunks to the pool (and clears the
// list for reuse).
func release(batch [][]byte) {
	for i, b := range batch {
		if cap(b) == chunkSize {
			b = b[:0]
			chunks.Put(&b)
		}
		batch[i] = nil
	}
}

// writeLoop is the writer goroutine.
func (c *peerConn) writeLoop() {
	defer close(c.writerDone)
	var spare [][]byte
	for {
		select {
		case <-c.wake:
		case <-c.closing:
			c.finish()
			return
		}
		batch := c.take(spare)
		if len(batch) == 0 {
			spare = batch
			continue
		}
		n, err := c.st.writeBatch(batch)
		if err != nil {
			c.abort(codeProtocol, fmt.Sprintf("write failed: %v", err))
			c.finish()
			return
		}
		c.sentBytes.Add(uint64(n))
		c.writes.Add(1)
		release(batch)
		spare = batch
	}
}

// finish runs in the writer after closing: for an orderly close it flushes
// the queue and a last Refuse{Closing} frame, half-closes the stream and
// waits (bounded) for the peer to close the connection after reading them.
func (c *peerConn) finish() {
	if c.graceful {
		deadline := time.Now().Add(closeLinger)
		_ = c.st.SetWriteDeadline(deadline)
		var batch []byte
		for _, b := range c.take(nil) {
			batch = append(batch, b...)
		}
		batch, _ = wire.AppendFrame(batch, &message.Refuse{Code: message.RefuseClosing, Reason: c.closeReason})
		if _, err := c.st.writeBatch([][]byte{batch}); err == nil {
			_ = c.st.closeWrite()
			close(c.flushed)
			c.st.awaitClose(deadline, false)
			c.st.teardown(c.closeCode, c.closeReason)
			return
		}
	}
	close(c.flushed)
	c.st.teardown(c.closeCode, c.closeReason)
}

// close starts an orderly close: queued frames are still written.
func (c *peerConn) close(reason string) { c.shutdown(true, codeOK, reason) }

// abort closes at once, dropping what is queued (protocol errors, shutdown).
func (c *peerConn) abort(code quic.ApplicationErrorCode, reason string) {
	c.shutdown(false, code, reason)
}

func (c *peerConn) shutdown(graceful bool, code quic.ApplicationErrorCode, reason string) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closedErr = fmt.Errorf("%w: %s", ErrClosed, reason)
		c.graceful, c.closeCode, c.closeReason = graceful, code, reason
		if c.spaceWait != nil {
			close(c.spaceWait)
			c.spaceWait = nil
		}
		c.mu.Unlock()
		close(c.closing)
		if !graceful {
			c.st.teardown(code, reason)
		}
	})
}

// isClosing reports whether close or abort was called, and why.
func (c *peerConn) localReason() (string, bool) {
	select {
	case <-c.closing:
		return c.closeReason, true
	default:
		return "", false
	}
}

// readArena is the block size in which a broker's readers (links and
// client sessions) copy received payloads: one allocation per ~60
// publications of 250 bytes instead of one each. A block is freed once
// every publication in it is (the broker releases them in arrival order, at
// the latest when they are purged). Client readers do not use one: an
// application may keep a few payloads out of many.
const readArena = 16 << 10

// maxBatch bounds the messages handed to a BatchHandler at once.
const maxBatch = 256

// readLoop reads frames and hands the messages to deliver until the
// connection ends; it returns why. Messages go out in batches of what was
// already buffered (at most maxBatch; with batch false, one at a time).
// Unknown types are skipped (a newer peer's messages); a malformed frame
// closes the connection with the reason logged and sent to the peer.
func (c *peerConn) readLoop(what string, batch bool, deliver func([]message.Message)) error {
	ms := make([]message.Message, 0, maxBatch)
	flush := func() {
		if len(ms) > 0 {
			deliver(ms)
			clear(ms)
			ms = ms[:0]
		}
	}
	for {
		if len(ms) > 0 && (!batch || len(ms) == maxBatch || !c.rd.Ready()) {
			flush() // before Read may block
		}
		m, err := c.rd.Read()
		if err != nil {
			if errors.Is(err, wire.ErrUnknownType) {
				c.log.Debug().Err(err).Msg("skipping a frame of an unknown type (newer peer?)")
				continue
			}
			flush()
			return c.readFailed(what, err)
		}
		switch m := m.(type) {
		case *message.Refuse:
			// An orderly close by the peer: its last frame.
			flush()
			c.st.teardown(codeOK, "")
			c.shutdown(false, codeOK, "peer closed")
			return fmt.Errorf("%w: %s closed by the peer: %s", ErrClosed, what, m.Reason)
		case *message.Hello, *message.Welcome, *message.Ready:
			flush()
			reason := fmt.Sprintf("protocol violation: %v after the handshake", m.Type())
			c.log.Warn().Str("reason", reason).Msgf("closing %s", what)
			c.abort(codeProtocol, reason)
			return fmt.Errorf("quic: %s: %s", what, reason)
		}
		c.recvFrames.Add(1)
		ms = append(ms, m)
	}
}

// Stats are a link's or session's counters since it came up.
type Stats struct {
	FramesQueued   uint64 // frames accepted by Send/TrySend/SendFrame
	BytesWritten   uint64 // bytes written to the stream
	Writes         uint64 // stream writes (FramesQueued/Writes is the batching factor)
	FramesReceived uint64 // messages handed to the Handler
	Queued         int    // frames waiting now
	GSO            bool   // quic-go sends with UDP generic segmentation offload (QUIC only)
}

// Stats returns the counters.
func (c *peerConn) Stats() Stats {
	return Stats{FramesQueued: c.sentFrames.Load(), BytesWritten: c.sentBytes.Load(), Writes: c.writes.Load(),
		FramesReceived: c.recvFrames.Load(), Queued: c.queued(), GSO: c.gso()}
}

func (c *peerConn) gso() bool {
	q, ok := c.st.(quicStream)
	return ok && q.qc.ConnectionState().GSO
}

func (c *peerConn) readFailed(what string, err error) error {
	if reason, local := c.localReason(); local {
		return fmt.Errorf("%w: %s closed locally: %s", ErrClosed, what, reason)
	}
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote {
		if ae.ErrorCode != codeOK {
			c.log.Warn().Str("reason", ae.ErrorMessage).Uint64("code", uint64(ae.ErrorCode)).Msgf("%s closed by the peer", what)
		}
		c.shutdown(false, codeOK, "peer closed")
		return fmt.Errorf("%w: %s closed by the peer: %s", ErrClosed, what, ae.ErrorMessage)
	}
	if errors.Is(err, wire.ErrMalformed) || errors.Is(err, wire.ErrFrameTooLarge) {
		reason := fmt.Sprintf("malformed frame: %v", err)
		c.log.Warn().Str("reason", reason).Msgf("closing %s", what)
		c.abort(codeProtocol, reason)
		return fmt.Errorf("quic: %s: %w", what, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		c.abort(codeProtocol, "stream ended without a close frame")
		return fmt.Errorf("quic: %s: stream ended: %w", what, err)
	}
	c.abort(codeProtocol, err.Error())
	return fmt.Errorf("quic: %s: %w", what, err)
}

// writeHandshake writes one handshake frame synchronously (before the
// writer goroutine exists).
func writeHandshake(st carrier, m message.Message) error {
	b, err := wire.AppendFrame(nil, m)
	if err != nil {
		return err
	}
	_, err = st.writeBatch([][]byte{b})
	return err
}

// refuse tells the peer why, logs it, and closes the connection. It waits
// (bounded) for the peer to read the Refuse and close first, so the reason
// arrives as a frame; QUIC's CONNECTION_CLOSE carries it as well.
func refuse(st carrier, log zerolog.Logger, peer string, code message.RefuseCode, reason string) *RefusedError {
	lv := log.Warn()
	if code == message.RefuseDuplicate {
		lv = log.Debug() // routine: simultaneous dials resolve this way
	}
	lv.Str("peer", peer).Str("reason", reason).Msg("refusing connection")
	_ = st.SetWriteDeadline(time.Now().Add(time.Second))
	if writeHandshake(st, &message.Refuse{Code: code, Reason: reason}) == nil {
		_ = st.closeWrite()
		st.awaitClose(time.Now().Add(time.Second), true)
	}
	st.teardown(codeRefused, reason)
	return &RefusedError{Peer: peer, Code: code, Reason: reason}
}
