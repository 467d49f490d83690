package wire

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// Deliveries encoded once per publication.
//
// An edge broker with many local subscribers used to encode one Deliver per
// subscriber session: 100 sessions meant 100 encodings (and 100 copies of
// the payload into fresh frames) of bytes that differ only in the
// subscription id. A DeliveryEncoder encodes the publication's part once
// and builds each session's frame as a small header followed by those
// bytes:
//
//   - for a session of protocol version 2 or later, a DeliverSet frame
//     (message type 137): a msgpack array
//     [subs, publisher, epoch, seq, time, attrs, payload] where subs lists
//     the N of every matching subscription of that session (one frame per
//     session and publication, not per subscription), and attrs is a flat
//     array name, value, name, value, ... with each value a plain msgpack
//     string, integer or float64 for its kind (the full {k,s,i,f} map only
//     for a value that is not in that canonical shape). A 250-byte stock
//     quote takes about 90 bytes less than as a Deliver;
//   - for an older session, the Deliver frame, byte for byte what
//     AppendFrame writes: the Deliver map puts the subscription first, so
//     the rest of the body is the shared part.
//
// The publication's identity (publisher, epoch, sequence number) stays in
// every frame: a subscriber still sees it end to end.

// deliverSetHeader starts every DeliverSet body: an array of 7.
const deliverSetHeader = 0x90 | 7

// DeliveryEncoder holds the encoded shared part of one publication. Not
// safe for concurrent use; the returned frames are valid until the next
// call.
type DeliveryEncoder struct {
	valid   bool
	id      message.PubID
	time    int64
	attrs   *matching.Attr
	nattrs  int
	payload *byte
	npay    int
	classic []byte // Deliver body after the subscription: i, a, [b,] t
	cmap    byte   // Deliver map header
	set     []byte // DeliverSet body after subs: publisher … payload
	frame   []byte
}

// Same reports whether d carries the publication the encoder holds (the
// same identity, and the very same attribute and payload slices: what the
// core passes for one publication's deliveries).
func (e *DeliveryEncoder) Same(id *message.PubID, attrs []matching.Attr, payload []byte, time int64) bool {
	return e.valid && e.id == *id && e.time == time && e.nattrs == len(attrs) && e.npay == len(payload) &&
		e.attrs == unsafe.SliceData(attrs) && e.payload == unsafe.SliceData(payload)
}

// Reset makes the encoder hold d's publication (a no-op if it already
// does).
func (e *DeliveryEncoder) Reset(d *message.Deliver) {
	if e.Same(&d.Pub, d.Attrs, d.Payload, d.Time) {
		return
	}
	e.valid = true
	e.id, e.time = d.Pub, d.Time
	e.attrs, e.nattrs = unsafe.SliceData(d.Attrs), len(d.Attrs)
	e.payload, e.npay = unsafe.SliceData(d.Payload), len(d.Payload)

	e.cmap = 0x80 | 4
	if len(d.Payload) > 0 {
		e.cmap++
	}
	b := appendPubID(appendKey(e.classic[:0], 'i'), &d.Pub)
	b = appendAttrs(appendKey(b, 'a'), d.Attrs)
	if len(d.Payload) > 0 {
		b = appendBin(appendKey(b, 'b'), d.Payload)
	}
	e.classic = appendInt(appendKey(b, 't'), d.Time)

	e.set = appendSetTail(e.set[:0], &d.Pub, d.Attrs, d.Payload, d.Time)
}

// DeliverFrame returns the Deliver frame of the held publication for sub:
// exactly AppendFrame(&message.Deliver{Sub: *sub, ...}).
func (e *DeliveryEncoder) DeliverFrame(sub *message.SubID) []byte {
	b := append(e.frame[:0], make([]byte, maxHeader)...)
	b = append(b, e.cmap)
	b = appendSubID(appendKey(b, 's'), sub)
	b = append(b, e.classic...)
	return e.finish(b, message.TypeDeliver)
}

// DeliverSetFrame returns the DeliverSet frame of the held publication for
// the subscriptions subs (their N) of one session.
func (e *DeliveryEncoder) DeliverSetFrame(subs []uint64) []byte {
	b := append(e.frame[:0], make([]byte, maxHeader)...)
	b = append(b, deliverSetHeader)
	b = appendArrayLen(b, len(subs))
	for _, n := range subs {
		b = appendUint(b, n)
	}
	b = append(b, e.set...)
	return e.finish(b, message.TypeDeliverSet)
}

// finish writes the frame header right before the body (which starts at
// maxHeader) and returns the frame.
func (e *DeliveryEncoder) finish(b []byte, t message.Type) []byte {
	e.frame = b
	bodyLen := len(b) - maxHeader
	var hdr [maxHeader]byte
	k := binary.PutUvarint(hdr[:], uint64(bodyLen+2))
	binary.BigEndian.PutUint16(hdr[k:], uint16(t))
	k += 2
	start := maxHeader - k
	copy(b[start:], hdr[:k])
	return b[start:]
}

// appendSetTail appends a DeliverSet body after its subs.
func appendSetTail(b []byte, id *message.PubID, attrs []matching.Attr, payload []byte, time int64) []byte {
	b = appendStr(b, id.Publisher)
	b = appendUint(b, id.Epoch)
	b = appendUint(b, id.Seq)
	b = appendInt(b, time)
	if attrs == nil {
		b = append(b, 0xc0)
	} else {
		b = appendArrayLen(b, 2*len(attrs))
		for i := range attrs {
			b = appendStr(b, attrs[i].Name)
			b = appendCompactValue(b, &attrs[i].Value)
		}
	}
	if payload == nil {
		return append(b, 0xc0)
	}
	return appendBin(b, payload)
}

// appendCompactValue writes a value as the plain msgpack value of its kind
// when it has the canonical shape (only the field of its kind set), and as
// the full Value map otherwise, so that every Value round-trips.
func appendCompactValue(b []byte, v *matching.Value) []byte {
	switch {
	case v.Kind == matching.KindString && v.Int == 0 && v.Float == 0:
		return appendStr(b, v.Str)
	case v.Kind == matching.KindInt && v.Str == "" && v.Float == 0:
		return appendInt(b, v.Int)
	case v.Kind == matching.KindFloat && v.Str == "" && v.Int == 0:
		return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(v.Float))
	}
	return appendValue(b, v)
}

func appendDeliverSet(b []byte, m *message.DeliverSet) []byte {
	b = append(b, deliverSetHeader)
	b = appendArrayLen(b, len(m.Subs))
	for _, n := range m.Subs {
		b = appendUint(b, n)
	}
	return appendSetTail(b, &m.Pub, m.Attrs, m.Payload, m.Time)
}

// ---- decoding ----

// binAny decodes nil or a binary of any length (copied).
func (d *bodyDec) binAny() ([]byte, bool) {
	if d.i < len(d.b) && d.b[d.i] == 0xc0 {
		d.i++
		return nil, true
	}
	return d.binBody(true)
}

func (d *bodyDec) compactValue(v *matching.Value) bool {
	if d.i >= len(d.b) {
		return false
	}
	c := d.b[d.i]
	switch {
	case c >= 0xa0 && c <= 0xbf, c >= 0xd9 && c <= 0xdb:
		v.Kind = matching.KindString
		var ok bool
		v.Str, ok = d.str()
		return ok
	case c <= 0x7f, c >= 0xe0, c >= 0xcc && c <= 0xcf, c >= 0xd0 && c <= 0xd3:
		v.Kind = matching.KindInt
		var ok bool
		v.Int, ok = d.int()
		return ok
	case c == 0xcb:
		d.i++
		bits, ok := d.n(8)
		v.Kind, v.Float = matching.KindFloat, math.Float64frombits(bits)
		return ok
	case c >= 0x80 && c <= 0x8f:
		return d.value(v)
	}
	return false
}

func (d *bodyDec) deliverSet(m *message.DeliverSet) bool {
	if c, ok := d.byte1(); !ok || c != deliverSetHeader {
		return false
	}
	n, ok := d.arrayLenAny()
	if !ok {
		return false
	}
	if n > 0 {
		if n <= len(d.subBuf) {
			m.Subs, d.subBuf = d.subBuf[:n:n], nil
		} else {
			m.Subs = make([]uint64, n)
		}
		for i := range m.Subs {
			if m.Subs[i], ok = d.uint(); !ok {
				return false
			}
		}
	}
	if m.Pub.Publisher, ok = d.str(); !ok {
		return false
	}
	if m.Pub.Epoch, ok = d.uint(); !ok {
		return false
	}
	if m.Pub.Seq, ok = d.uint(); !ok {
		return false
	}
	if m.Time, ok = d.int(); !ok {
		return false
	}
	if d.i < len(d.b) && d.b[d.i] == 0xc0 {
		d.i++
	} else {
		n, ok := d.arrayLenAny()
		if !ok || n%2 != 0 {
			return false
		}
		m.Attrs = d.takeAttrs(n / 2)
		for i := range m.Attrs {
			if m.Attrs[i].Name, ok = d.str(); !ok {
				return false
			}
			if !d.compactValue(&m.Attrs[i].Value) {
				return false
			}
		}
	}
	if m.Payload, ok = d.binAny(); !ok {
		return false
	}
	return d.done(true)
}
