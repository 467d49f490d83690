package sim

import (
	"container/heap"
	"time"
)

// event is one thing that happens at a virtual instant. Events are ordered
// by time, then by the order in which they were scheduled (seq), so a run is
// a pure function of its seed.
type event struct {
	at  time.Duration
	seq uint64
	// target, when set, is the broker whose node this event feeds: the
	// event is dropped when the broker crashed since it was scheduled
	// (inc differs) and held back while the broker is frozen.
	target *broker
	inc    int
	fn     func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// schedule queues fn at virtual time at (never earlier than now).
func (s *Sim) schedule(at time.Duration, fn func()) {
	s.scheduleFor(at, nil, fn)
}

// scheduleFor queues an input for broker b's current incarnation.
func (s *Sim) scheduleFor(at time.Duration, b *broker, fn func()) {
	if at < s.now {
		at = s.now
	}
	s.seq++
	e := &event{at: at, seq: s.seq, target: b, fn: fn}
	if b != nil {
		e.inc = b.inc
	}
	heap.Push(&s.q, e)
}
