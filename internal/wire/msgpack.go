package wire

import (
	"encoding/binary"
	"math"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// Msgpack written and read by hand, for the codecs that do not go through
// msgpack's reflection: the fast path of the hot messages (fast.go) and
// DeliverSet with DeliveryEncoder (deliver.go). The encoders write what the
// generic encoder writes (msgpack v5 with UseCompactInts: a map per struct,
// fields in declaration order, omitempty honoured, compact integers), here
// for the parts those messages share: a Value, attributes, a PubID, a SubID.

// ---- encoding ----

func appendUint(b []byte, n uint64) []byte {
	switch {
	case n <= math.MaxInt8:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, 0xcc, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), n)
}

func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendUint(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, 0xd0, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, p []byte) []byte {
	n := len(p)
	switch {
	case p == nil:
		return append(b, 0xc0)
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, p...)
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

// appendKey appends a one-letter map key (every hot field has one).
func appendKey(b []byte, k byte) []byte { return append(b, 0xa1, k) }

func appendValue(b []byte, v *matching.Value) []byte {
	n := 1
	if v.Str != "" {
		n++
	}
	if v.Int != 0 {
		n++
	}
	if v.Float != 0 {
		n++
	}
	b = append(b, 0x80|byte(n))
	b = appendUint(appendKey(b, 'k'), uint64(v.Kind))
	if v.Str != "" {
		b = appendStr(appendKey(b, 's'), v.Str)
	}
	if v.Int != 0 {
		b = appendInt(appendKey(b, 'i'), v.Int)
	}
	if v.Float != 0 {
		b = binary.BigEndian.AppendUint64(append(appendKey(b, 'f'), 0xcb), math.Float64bits(v.Float))
	}
	return b
}

func appendAttrs(b []byte, attrs []matching.Attr) []byte {
	if attrs == nil {
		return append(b, 0xc0)
	}
	b = appendArrayLen(b, len(attrs))
	for i := range attrs {
		b = append(b, 0x82)
		b = appendStr(appendKey(b, 'n'), attrs[i].Name)
		b = appendValue(appendKey(b, 'v'), &attrs[i].Value)
	}
	return b
}

// appendTriple appends the map {k0: s, e: e, k2: n}, the shape of a PubID
// (p, e, s), a SubID (b, e, n) and a Stamp (b, e, s).
func appendTriple(b []byte, k0 byte, s string, e uint64, k2 byte, n uint64) []byte {
	b = append(b, 0x83)
	b = appendStr(appendKey(b, k0), s)
	b = appendUint(appendKey(b, 'e'), e)
	return appendUint(appendKey(b, k2), n)
}

func appendPubID(b []byte, id *message.PubID) []byte {
	return appendTriple(b, 'p', id.Publisher, id.Epoch, 's', id.Seq)
}

func appendSubID(b []byte, id *message.SubID) []byte {
	return appendTriple(b, 'b', string(id.Edge), id.Epoch, 'n', id.N)
}

// ---- decoding ----

// Short strings (attribute names, class names, broker IDs, publishers)
// repeat in almost every message. Each Reader keeps a direct-mapped cache of
// internCache recent ones (strings up to maxInternedLen bytes) and returns
// the cached string when the bytes match: no allocation, and cheaper than a
// map lookup (no full hash). A miss allocates and replaces the slot.
const (
	internCache    = 512
	maxInternedLen = 32
)

type interner [internCache]string

func internSlot(b []byte) int {
	n := len(b)
	return (n*131 + int(b[0])*31 + int(b[n-1])*7 + int(b[n/2])) & (internCache - 1)
}

// bodyDec reads the hand-written msgpack of a frame body. Every method
// returns false on anything unexpected: the fast path then falls back to
// the generic decoder, DeliverSet reports the body malformed.
type bodyDec struct {
	b      []byte
	i      int
	intern *interner // nil: no interning

	// Room allocated together with the message being decoded (see
	// Reader.newMessage): small attribute, stamp and subscription lists go
	// there instead of separate allocations. Each is used at most once.
	attrBuf  []matching.Attr
	stampBuf []message.Stamp
	subBuf   []uint64
	// arena, when not nil, is where payloads are copied to: one
	// allocation of arenaSize bytes serves many payloads (brokers; see
	// Reader.UseArena).
	arena     []byte
	arenaSize int
}

// takeAttrs returns a slice of n attributes, from attrBuf if it fits.
func (d *bodyDec) takeAttrs(n int) []matching.Attr {
	if n > 0 && n <= len(d.attrBuf) {
		a := d.attrBuf[:n:n]
		d.attrBuf = nil
		return a
	}
	return make([]matching.Attr, n)
}

// bytesFor returns n bytes for a payload: from the arena (capacity capped
// at n, so an append by the user never reaches a neighbour), or fresh.
func (d *bodyDec) bytesFor(n int) []byte {
	if d.arenaSize == 0 || n > d.arenaSize/8 {
		return make([]byte, n)
	}
	if cap(d.arena)-len(d.arena) < n {
		d.arena = make([]byte, 0, d.arenaSize)
	}
	k := len(d.arena)
	d.arena = d.arena[:k+n]
	return d.arena[k : k+n : k+n]
}

func (d *bodyDec) reset(b []byte) { d.b, d.i = b, 0 }

func (d *bodyDec) byte1() (byte, bool) {
	if d.i >= len(d.b) {
		return 0, false
	}
	c := d.b[d.i]
	d.i++
	return c, true
}

func (d *bodyDec) n(w int) (uint64, bool) {
	if len(d.b)-d.i < w {
		return 0, false
	}
	var v uint64
	switch w {
	case 1:
		v = uint64(d.b[d.i])
	case 2:
		v = uint64(binary.BigEndian.Uint16(d.b[d.i:]))
	case 4:
		v = uint64(binary.BigEndian.Uint32(d.b[d.i:]))
	case 8:
		v = binary.BigEndian.Uint64(d.b[d.i:])
	}
	d.i += w
	return v, true
}

func (d *bodyDec) uint() (uint64, bool) {
	c, ok := d.byte1()
	switch {
	case !ok:
		return 0, false
	case c <= 0x7f:
		return uint64(c), true
	case c >= 0xcc && c <= 0xcf:
		return d.n(1 << (c - 0xcc))
	}
	return 0, false
}

func (d *bodyDec) int() (int64, bool) {
	c, ok := d.byte1()
	switch {
	case !ok:
		return 0, false
	case c <= 0x7f:
		return int64(c), true
	case c >= 0xe0:
		return int64(int8(c)), true
	case c >= 0xcc && c <= 0xcf:
		v, ok := d.n(1 << (c - 0xcc))
		return int64(v), ok && v <= math.MaxInt64
	case c >= 0xd0 && c <= 0xd3:
		w := 1 << (c - 0xd0)
		v, ok := d.n(w)
		switch w {
		case 1:
			return int64(int8(v)), ok
		case 2:
			return int64(int16(v)), ok
		case 4:
			return int64(int32(v)), ok
		}
		return int64(v), ok
	}
	return 0, false
}

// rawStr returns the bytes of a string (no copy).
func (d *bodyDec) rawStr() ([]byte, bool) {
	c, ok := d.byte1()
	var n uint64
	switch {
	case !ok:
		return nil, false
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9:
		n, ok = d.n(1)
	case c == 0xda:
		n, ok = d.n(2)
	case c == 0xdb:
		n, ok = d.n(4)
	default:
		return nil, false
	}
	if !ok || n > uint64(len(d.b)-d.i) {
		return nil, false
	}
	s := d.b[d.i : d.i+int(n)]
	d.i += int(n)
	return s, true
}

func (d *bodyDec) str() (string, bool) {
	raw, ok := d.rawStr()
	if !ok {
		return "", false
	}
	if len(raw) == 0 {
		return "", true
	}
	if len(raw) <= maxInternedLen && d.intern != nil {
		slot := &d.intern[internSlot(raw)]
		if *slot == string(raw) {
			return *slot, true
		}
		s := string(raw)
		*slot = s
		return s, true
	}
	return string(raw), true
}

// bin decodes a non-empty binary (copied: the Reader's buffer is reused).
func (d *bodyDec) bin() ([]byte, bool) { return d.binBody(false) }

// binBody decodes a binary header and copies its body; an empty binary is
// accepted only if allowEmpty.
func (d *bodyDec) binBody(allowEmpty bool) ([]byte, bool) {
	c, ok := d.byte1()
	var n uint64
	switch {
	case !ok:
		return nil, false
	case c == 0xc4:
		n, ok = d.n(1)
	case c == 0xc5:
		n, ok = d.n(2)
	case c == 0xc6:
		n, ok = d.n(4)
	default:
		return nil, false
	}
	if !ok || (n == 0 && !allowEmpty) || n > uint64(len(d.b)-d.i) {
		return nil, false
	}
	p := d.bytesFor(int(n))
	copy(p, d.b[d.i:])
	d.i += int(n)
	return p, true
}

// mapLen reads a map header.
func (d *bodyDec) mapLen() (int, bool) {
	c, ok := d.byte1()
	switch {
	case !ok:
		return 0, false
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), true
	}
	return 0, false // map16/32 never occur in the hot messages
}

// arrayLen reads a non-empty array header, or nil (-1).
func (d *bodyDec) arrayLen() (int, bool) {
	if d.i < len(d.b) && d.b[d.i] == 0xc0 {
		d.i++
		return -1, true
	}
	n, ok := d.arrayLenAny()
	return n, ok && n > 0
}

// arrayLenAny reads an array header of any length (empty included).
func (d *bodyDec) arrayLenAny() (int, bool) {
	c, ok := d.byte1()
	var n uint64
	switch {
	case !ok:
		return 0, false
	case c >= 0x90 && c <= 0x9f:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n, ok = d.n(2)
	case c == 0xdd:
		n, ok = d.n(4)
	default:
		return 0, false
	}
	if !ok || n > MaxListLen || n > uint64(len(d.b)-d.i) {
		return 0, false
	}
	return int(n), true
}

// key reads a one-letter key; 0 for anything else.
func (d *bodyDec) key() byte {
	if len(d.b)-d.i < 2 || d.b[d.i] != 0xa1 {
		return 0
	}
	k := d.b[d.i+1]
	d.i += 2
	return k
}

// seen marks key bit k; false on a duplicate.
func seen(mask *uint32, k byte) bool {
	bit := uint32(1) << (k & 31)
	if *mask&bit != 0 {
		return false
	}
	*mask |= bit
	return true
}

func (d *bodyDec) value(v *matching.Value) bool {
	n, ok := d.mapLen()
	var mask uint32
	for j := 0; ok && j < n; j++ {
		k := d.key()
		if !seen(&mask, k) {
			return false
		}
		switch k {
		case 'k':
			var u uint64
			u, ok = d.uint()
			ok = ok && u <= math.MaxUint8
			v.Kind = matching.Kind(u)
		case 's':
			v.Str, ok = d.str()
		case 'i':
			v.Int, ok = d.int()
		case 'f':
			c, ok2 := d.byte1()
			var bits uint64
			bits, ok = d.n(8)
			ok = ok && ok2 && c == 0xcb
			v.Float = math.Float64frombits(bits)
		default:
			return false
		}
	}
	return ok
}

func (d *bodyDec) attrs() ([]matching.Attr, bool) {
	n, ok := d.arrayLen()
	if !ok || n < 0 {
		return nil, ok
	}
	attrs := d.takeAttrs(n)
	for i := range attrs {
		m, ok := d.mapLen()
		var mask uint32
		for j := 0; ok && j < m; j++ {
			k := d.key()
			if !seen(&mask, k) {
				return nil, false
			}
			switch k {
			case 'n':
				attrs[i].Name, ok = d.str()
			case 'v':
				ok = d.value(&attrs[i].Value)
			default:
				return nil, false
			}
		}
		if !ok {
			return nil, false
		}
	}
	return attrs, true
}

// triple reads what appendTriple writes (keys in any order, each at most
// once, any of them absent).
func (d *bodyDec) triple(k0 byte, s *string, e *uint64, k2 byte, n *uint64) bool {
	m, ok := d.mapLen()
	var mask uint32
	for j := 0; ok && j < m; j++ {
		k := d.key()
		if !seen(&mask, k) {
			return false
		}
		switch k {
		case k0:
			*s, ok = d.str()
		case 'e':
			*e, ok = d.uint()
		case k2:
			*n, ok = d.uint()
		default:
			return false
		}
	}
	return ok
}

func (d *bodyDec) pubID(id *message.PubID) bool {
	return d.triple('p', &id.Publisher, &id.Epoch, 's', &id.Seq)
}

func (d *bodyDec) subID(id *message.SubID) bool {
	return d.triple('b', (*string)(&id.Edge), &id.Epoch, 'n', &id.N)
}

func (d *bodyDec) done(ok bool) bool { return ok && d.i == len(d.b) }
