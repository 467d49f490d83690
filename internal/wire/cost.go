package wire

import (
	"fmt"

	"github.com/deltapub/deltapub/message"
)

// Cost is what one encoded value takes of a frame's limits: its bytes, and
// the list values (array elements, map keys and values) a reader counts
// toward MaxFrameValues. Both add up: a list of k elements costs its
// elements' costs plus a header of at most 5 bytes and k values.
type Cost struct {
	Bytes  int
	Values int
}

// Add returns the sum of two costs.
func (c Cost) Add(d Cost) Cost { return Cost{c.Bytes + d.Bytes, c.Values + d.Values} }

// ValueCost encodes v (a message field: a struct with msgpack tags, a
// slice, ...) as it would be inside a frame and returns its cost. The
// protocol core uses it to split a state too large for one frame.
func ValueCost(v any) (Cost, error) {
	e := encoders.Get().(*Encoder)
	defer encoders.Put(e)
	e.w.b = e.w.b[:0]
	if err := e.enc.Encode(v); err != nil {
		e.w.b = nil
		return Cost{}, fmt.Errorf("wire: cost of %T: %w", v, err)
	}
	b := e.w.b
	e.w.b = nil
	return costOf(b)
}

// FrameCost returns the cost of m's frame: Bytes is the frame length that
// a reader compares with its maximum (type and body, without the length
// prefix), Values what it compares with MaxFrameValues.
func FrameCost(m message.Message) (Cost, error) {
	e := encoders.Get().(*Encoder)
	defer encoders.Put(e)
	b, err := e.AppendBody(nil, m)
	if err != nil {
		return Cost{}, err
	}
	c, err := costOf(b)
	c.Bytes += 2 // the type
	return c, err
}

// Fits reports whether a frame of cost c is accepted by a reader whose
// maximum is maxFrame (≤ 0: DefaultMaxFrame).
func (c Cost) Fits(maxFrame int) bool {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	return c.Bytes <= maxFrame && c.Values <= MaxFrameValues
}

func costOf(b []byte) (Cost, error) {
	const unbounded = 1 << 62
	budget := unbounded
	end, err := skipValue(b, 0, 0, &budget)
	if err == nil && end != len(b) {
		err = errTrailing
	}
	if err != nil {
		return Cost{}, fmt.Errorf("wire: cost: %w", err)
	}
	return Cost{Bytes: len(b), Values: unbounded - budget}, nil
}
