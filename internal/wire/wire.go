// Package wire is the byte format of deltapub: how a message.Message becomes
// a frame on a stream and back. Nothing outside this package touches raw
// protocol bytes.
//
// A frame is
//
//	uvarint length | uint16 type (big endian) | msgpack body
//
// where length counts the type and the body, and the body is the msgpack
// encoding of the struct registered for the type in package message. The
// type numbers are the append-only enum of package message.
//
// Robustness: a frame longer than the reader's maximum is ErrFrameTooLarge;
// a frame of a type this build does not know is ErrUnknownType and has been
// consumed, so the caller skips it (a newer peer's message); anything that is
// not exactly one well-formed msgpack value of the registered struct is
// ErrMalformed. Before msgpack sees a body, a validator walks it and refuses
// every declared length (string, binary, array, map) larger than what remains
// of the frame, lists longer than MaxListLen and nesting deeper than
// MaxDepth, so decoding allocates at most a small multiple of the frame's
// length and never recurses without bound.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/deltapub/deltapub/message"
	"github.com/vmihailenco/msgpack/v5"
)

// ProtocolVersion is the version of the deltapub protocol this build speaks.
// Bump it only for incompatible changes (adding a message type or a field is
// compatible); MinCompatibleVersion is the oldest version still spoken.
//
// Version 2 adds DeliverSet (a client that speaks 2 may receive it instead
// of Deliver; see deliver.go). Everything of version 1 is unchanged, so a
// version-1 peer is still spoken to, in version 1.
const (
	ProtocolVersion      = 2
	MinCompatibleVersion = 1
)

// DefaultMaxFrame is the default bound on one frame (type and body): 1 MiB.
// A larger frame is refused with ErrFrameTooLarge and the link closed,
// because its length alone would make the reader allocate that much.
const DefaultMaxFrame = 1 << 20

// MaxListLen bounds the number of elements of any one msgpack array or map
// in a frame. A message that needs more (a large state transfer) must be
// split. The bound keeps the decoder's allocations proportional to the
// frame: an empty element costs 1 byte on the wire but a whole Go struct in
// memory.
const MaxListLen = 1 << 16

// MaxFrameValues bounds the total number of list elements (array elements,
// map keys and values) in one frame. Together with MaxListLen it caps what
// a hostile frame makes the decoder allocate at about 15 MB whatever the
// frame size (an Attr is 56 bytes in memory, its slice may double while
// growing), while a 250-byte publication uses a few dozen.
const MaxFrameValues = 1 << 17

// MaxDepth bounds the nesting of msgpack arrays and maps in a frame; the
// registered messages nest a handful of levels.
const MaxDepth = 32

// maxHeader is the most bytes a frame header takes: a 5-byte uvarint
// (lengths below 2^35) and the 2-byte type.
const maxHeader = binary.MaxVarintLen32 + 2

var (
	// ErrFrameTooLarge: the frame's declared length exceeds the maximum.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrUnknownType: the frame's type is not registered in this build. The
	// frame has been consumed; skip it.
	ErrUnknownType = errors.New("wire: unknown message type")
	// ErrMalformed: the frame is not a valid encoding of its message type.
	ErrMalformed = errors.New("wire: malformed frame")
)

// UnknownTypeError reports a frame of an unregistered type; errors.Is(err,
// ErrUnknownType) holds.
type UnknownTypeError struct{ Type message.Type }

func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("wire: unknown message type %d (frame skipped)", uint16(e.Type))
}
func (e *UnknownTypeError) Unwrap() error { return ErrUnknownType }

func malformed(t message.Type, format string, args ...any) error {
	return fmt.Errorf("%w: type %v: %s", ErrMalformed, t, fmt.Sprintf(format, args...))
}

// appendWriter is the msgpack writer that appends to a byte slice, so that
// encoding goes straight into the caller's (batch) buffer.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
func (w *appendWriter) WriteByte(c byte) error      { w.b = append(w.b, c); return nil }
func (w *appendWriter) WriteString(s string) (int, error) {
	w.b = append(w.b, s...)
	return len(s), nil
}

// Encoder appends frames to byte slices. It keeps its msgpack encoder
// between calls, so a long-lived Encoder (one per link writer) encodes
// without per-call setup. Not safe for concurrent use.
type Encoder struct {
	w   appendWriter
	enc *msgpack.Encoder
}

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder {
	e := &Encoder{}
	e.enc = msgpack.NewEncoder(&e.w)
	// Compact integers: a sequence number or an epoch takes 1–5 bytes
	// instead of 9. Decoders accept every integer width either way.
	e.enc.UseCompactInts(true)
	return e
}

// AppendBody appends the msgpack body of m (no frame header) to dst.
func (e *Encoder) AppendBody(dst []byte, m message.Message) ([]byte, error) {
	if d, ok := m.(*message.DeliverSet); ok {
		return appendDeliverSet(dst, d), nil // its own format (deliver.go)
	}
	if fc := fastCodecOf(m.Type()); fc != nil {
		if b, ok := fc.enc(dst, m); ok {
			return b, nil
		}
	}
	return e.appendGeneric(dst, m)
}

// appendGeneric is msgpack's reflection encoder (tests compare the fast
// path with it).
func (e *Encoder) appendGeneric(dst []byte, m message.Message) (out []byte, err error) {
	e.w.b = dst
	defer func() {
		if r := recover(); r != nil {
			out, err = dst, fmt.Errorf("wire: encode %v: %v", m.Type(), r)
		}
		e.w.b = nil
	}()
	if err := e.enc.Encode(m); err != nil {
		return dst, fmt.Errorf("wire: encode %v: %w", m.Type(), err)
	}
	return e.w.b, nil
}

// AppendFrame appends the frame of m to dst and returns the extended slice.
// On error dst is returned unchanged (truncated to its original length).
func (e *Encoder) AppendFrame(dst []byte, m message.Message) ([]byte, error) {
	if m == nil {
		return dst, errors.New("wire: encode: nil message")
	}
	start := len(dst)
	// Reserve the longest header, encode, then move the body down over the
	// unused header bytes: one small memmove instead of a second buffer.
	b, err := e.AppendBody(append(dst, make([]byte, maxHeader)...), m)
	if err != nil {
		return dst[:start], err
	}
	bodyLen := len(b) - start - maxHeader
	var hdr [maxHeader]byte
	k := binary.PutUvarint(hdr[:], uint64(bodyLen+2))
	binary.BigEndian.PutUint16(hdr[k:], uint16(m.Type()))
	k += 2
	copy(b[start+k:], b[start+maxHeader:])
	copy(b[start:], hdr[:k])
	return b[:start+k+bodyLen], nil
}

var encoders = sync.Pool{New: func() any { return NewEncoder() }}

// AppendFrame appends the frame of m to dst, using a pooled Encoder.
func AppendFrame(dst []byte, m message.Message) ([]byte, error) {
	e := encoders.Get().(*Encoder)
	out, err := e.AppendFrame(dst, m)
	encoders.Put(e)
	return out, err
}

// FrameLen parses the header of the frame at the start of b. It returns the
// frame's total length (header included) and its type, or ok=false when b
// does not yet hold the whole header. Used by code that forwards encoded
// frames without decoding them.
func FrameLen(b []byte, maxFrame int) (total int, t message.Type, ok bool, err error) {
	n, k := binary.Uvarint(b)
	if k == 0 {
		if len(b) >= binary.MaxVarintLen32 {
			return 0, 0, false, fmt.Errorf("%w: bad length prefix", ErrMalformed)
		}
		return 0, 0, false, nil
	}
	if k < 0 || k > binary.MaxVarintLen32 {
		return 0, 0, false, fmt.Errorf("%w: bad length prefix", ErrMalformed)
	}
	if n > uint64(maxFrame) {
		return 0, 0, false, fmt.Errorf("%w: %d bytes, maximum %d", ErrFrameTooLarge, n, maxFrame)
	}
	if n < 2 {
		return 0, 0, false, fmt.Errorf("%w: frame length %d is shorter than the type", ErrMalformed, n)
	}
	if len(b) < k+2 {
		return 0, 0, false, nil
	}
	return k + int(n), message.Type(binary.BigEndian.Uint16(b[k:])), true, nil
}
