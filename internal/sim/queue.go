package sim

import (
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

func (e *event) before(o *event) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.seq < o.seq
}

// eventHeap is a binary min-heap of events, written out rather than
// through container/heap: the queue is the simulator's innermost loop and
// the interface calls cost ~10% of a large run.
type eventHeap []*event

func (h *eventHeap) push(e *event) {
	q := append(*h, e)
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].before(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
	*h = q
}

func (h *eventHeap) pop() *event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = nil
	q = q[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q[r].before(q[l]) {
			m = r
		}
		if !q[m].before(q[i]) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
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
	s.q.push(e)
}
