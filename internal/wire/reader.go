package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/vmihailenco/msgpack/v5"
)

// readChunk is how much the Reader asks its io.Reader for at once when
// traffic is heavy: large reads amortise the cost of a QUIC stream Read (a
// lock and a copy) over many small frames. A Reader starts with minReadBuf
// and doubles its buffer up to readChunk while reads keep filling it, so
// ten thousand quiet client sessions cost 4 KiB each, not 64.
const (
	readChunk  = 64 << 10
	minReadBuf = 4 << 10
)

// Reader reads frames from an io.Reader. It keeps one buffer (minReadBuf to readChunk,
// grown up to the maximum frame plus header for a large frame) and one
// msgpack decoder for its whole life. Not safe for concurrent use.
type Reader struct {
	r        io.Reader
	maxFrame int
	buf      []byte
	start    int // unread data is buf[start:end]
	end      int
	err      error // sticky read error of r
	full     bool  // the last read filled the buffer: grow it
	br       bytes.Reader
	dec      *msgpack.Decoder
	bd       bodyDec // the hand-written codecs' decoder
}

// NewReader returns a Reader of frames of at most maxFrame bytes (type and
// body); maxFrame <= 0 means DefaultMaxFrame.
func NewReader(r io.Reader, maxFrame int) *Reader {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	rd := &Reader{r: r, maxFrame: maxFrame, buf: make([]byte, min(minReadBuf, maxFrame+maxHeader))}
	rd.dec = msgpack.NewDecoder(&rd.br)
	rd.bd.intern = new(interner)
	return rd
}

// Ready reports whether a whole frame is buffered, so that the next Read
// returns without reading from the io.Reader. A relay flushes its batch of
// outgoing frames when Ready is false, before Read blocks.
func (r *Reader) Ready() bool {
	total, _, ok, err := FrameLen(r.buf[r.start:r.end], r.maxFrame)
	return err != nil || (ok && r.end-r.start >= total)
}

// Buffered returns how many bytes have been read from the io.Reader but not
// yet returned as frames.
func (r *Reader) Buffered() int { return r.end - r.start }

// Read returns the next message. Errors: ErrUnknownType (as an
// *UnknownTypeError; the frame was consumed, call Read again),
// ErrFrameTooLarge, ErrMalformed (wrapping the cause), and the io.Reader's
// own errors (io.EOF at a frame boundary; io.ErrUnexpectedEOF inside a
// frame). After any error but ErrUnknownType the stream is out of sync and
// the Reader must be abandoned.
func (r *Reader) Read() (message.Message, error) {
	t, body, err := r.ReadFrame()
	if err != nil {
		return nil, err
	}
	return r.decode(t, body)
}

// ReadFrame returns the type and the body (msgpack bytes) of the next
// frame without decoding it. body is valid only until the next call.
func (r *Reader) ReadFrame() (message.Type, []byte, error) {
	for {
		total, t, ok, err := FrameLen(r.buf[r.start:r.end], r.maxFrame)
		if err != nil {
			return 0, nil, err
		}
		if ok && r.end-r.start >= total {
			hdr := total - frameBody(total, r.buf[r.start:r.end])
			body := r.buf[r.start+hdr : r.start+total]
			r.start += total
			return t, body, nil
		}
		need := r.end - r.start + 1 // the header is incomplete: one more byte
		if ok {
			need = total
		}
		if err := r.fill(need); err != nil {
			return 0, nil, err
		}
	}
}

// frameBody returns the length of the body of the frame of the given total
// length whose header starts b.
func frameBody(total int, b []byte) int {
	_, k := binary.Uvarint(b)
	return total - k - 2
}

// fill reads until at least need bytes are buffered (or the reader fails).
func (r *Reader) fill(need int) error {
	if r.err != nil {
		return r.tailErr()
	}
	if len(r.buf)-r.start < need {
		// Compact; grow if a large frame does not fit (need is at most
		// maxFrame+maxHeader, checked by FrameLen), and shrink back to
		// readChunk once a large frame is consumed, so one big frame does
		// not pin maxFrame bytes per link for the link's life.
		size := len(r.buf)
		switch {
		case need > size:
			size = max(need, min(2*size, readChunk))
		case size > readChunk && need <= readChunk && r.end-r.start <= readChunk:
			size = readChunk
		case r.full && size < readChunk:
			size = min(2*size, readChunk)
		}
		if size != len(r.buf) {
			nb := make([]byte, size)
			r.end = copy(nb, r.buf[r.start:r.end])
			r.buf = nb
		} else {
			r.end = copy(r.buf, r.buf[r.start:r.end])
		}
		r.start = 0
	}
	for zero := 0; r.end-r.start < need; {
		n, err := r.r.Read(r.buf[r.end:])
		r.full = r.end+n == len(r.buf)
		r.end += n
		if err != nil {
			r.err = err
			if r.end-r.start >= need {
				return nil // report err on the next fill
			}
			return r.tailErr()
		}
		if n == 0 {
			if zero++; zero > 100 {
				r.err = io.ErrNoProgress
				return r.err
			}
		}
	}
	return nil
}

func (r *Reader) tailErr() error {
	if r.err == io.EOF && r.end > r.start {
		return fmt.Errorf("wire: stream ended inside a frame (%d bytes buffered): %w", r.end-r.start, io.ErrUnexpectedEOF)
	}
	return r.err
}

// decode decodes body as the message registered for t.
func (r *Reader) decode(t message.Type, body []byte) (message.Message, error) {
	m, ok := r.newMessage(t)
	if !ok {
		return nil, &UnknownTypeError{Type: t}
	}
	err := r.DecodeInto(m, body)
	r.bd.attrBuf, r.bd.stampBuf, r.bd.subBuf = nil, nil, nil
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Hot messages are allocated together with room for their usual lists (a
// publication has a handful of attributes and δ+1 stamps; a DeliverSet
// usually names one subscription): one allocation instead of two or three
// per message. A longer list gets its own allocation as before.
const (
	inlineAttrs  = 4
	inlineStamps = 3
)

type publishAlloc struct {
	m     message.Publish
	attrs [inlineAttrs]matching.Attr
}

type pubAlloc struct {
	m      message.Pub
	attrs  [inlineAttrs]matching.Attr
	stamps [inlineStamps]message.Stamp
}

type deliverAlloc struct {
	m     message.Deliver
	attrs [inlineAttrs]matching.Attr
}

type deliverSetAlloc struct {
	m     message.DeliverSet
	subs  [1]uint64
	attrs [inlineAttrs]matching.Attr
}

// newMessage is message.New, with room for the lists of the hot messages
// (handed to the hand-written decoders).
func (r *Reader) newMessage(t message.Type) (message.Message, bool) {
	switch t {
	case message.TypePublish:
		a := new(publishAlloc)
		r.bd.attrBuf = a.attrs[:]
		return &a.m, true
	case message.TypePub:
		a := new(pubAlloc)
		r.bd.attrBuf, r.bd.stampBuf = a.attrs[:], a.stamps[:]
		return &a.m, true
	case message.TypeDeliver:
		a := new(deliverAlloc)
		r.bd.attrBuf = a.attrs[:]
		return &a.m, true
	case message.TypeDeliverSet:
		a := new(deliverSetAlloc)
		r.bd.attrBuf, r.bd.subBuf = a.attrs[:], a.subs[:]
		return &a.m, true
	}
	return message.New(t)
}

// UseArena makes the Reader copy payloads into shared blocks of size bytes
// (one allocation for many payloads; payloads longer than size/8 are
// allocated on their own) instead of one allocation each. A block stays in
// memory while any payload in it is referenced, so this suits a broker,
// whose publications are released in arrival order, better than an
// application that keeps a few payloads out of many. size <= 0 turns it off.
func (r *Reader) UseArena(size int) {
	r.bd.arenaSize = max(size, 0)
	r.bd.arena = nil
}

// DecodeInto decodes a frame body (as returned by ReadFrame) into m, which
// must be a zero value of the registered struct of the frame's type.
func (r *Reader) DecodeInto(m message.Message, body []byte) error {
	if d, ok := m.(*message.DeliverSet); ok {
		// Its own format (deliver.go): no generic decoder to fall back to.
		r.bd.reset(body)
		if !r.bd.deliverSet(d) {
			return malformed(m.Type(), "not a valid %v body", m.Type())
		}
		return nil
	}
	if fc := fastCodecOf(m.Type()); fc != nil {
		r.bd.reset(body)
		if fc.dec(&r.bd, m) {
			return nil
		}
		// Not the canonical shape: start again from a zero value with the
		// generic decoder, which decides what is valid.
		reflect.ValueOf(m).Elem().SetZero()
	}
	return r.decodeGeneric(m, body)
}

// decodeGeneric is the validator followed by msgpack's reflection decoder.
func (r *Reader) decodeGeneric(m message.Message, body []byte) error {
	t := m.Type()
	if err := validate(body); err != nil {
		return malformed(t, "%v", err)
	}
	r.br.Reset(body)
	r.dec.ResetReader(&r.br)
	if err := r.dec.Decode(m); err != nil {
		return malformed(t, "%v", err)
	}
	if r.br.Len() != 0 {
		return malformed(t, "%d bytes left after the message", r.br.Len())
	}
	return nil
}

// Decode decodes one frame held entirely in b (as produced by AppendFrame)
// and returns the message and the number of bytes consumed. It is the
// allocation-light path for tests and tools; links use a Reader.
func Decode(b []byte, maxFrame int) (message.Message, int, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	total, t, ok, err := FrameLen(b, maxFrame)
	if err != nil {
		return nil, 0, err
	}
	if !ok || len(b) < total {
		return nil, 0, fmt.Errorf("%w: truncated frame (%d of %d bytes)", ErrMalformed, len(b), max(total, 3))
	}
	hdr := total - frameBody(total, b)
	var r Reader
	r.dec = msgpack.NewDecoder(&r.br)
	m, err := r.decode(t, b[hdr:total])
	if err != nil {
		return nil, total, err
	}
	return m, total, nil
}

// IsFatal reports whether a Read error ends the stream (everything except
// ErrUnknownType, which only skips one frame).
func IsFatal(err error) bool { return err != nil && !errors.Is(err, ErrUnknownType) }
