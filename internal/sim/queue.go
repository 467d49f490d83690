package sim

import (
	"time"

	"github.com/deltapub/deltapub/message"
)

// event is one thing that happens at a virtual instant. Events are ordered
// by time, then by the order in which they were scheduled (seq), so a run is
// a pure function of its seed. The order is total (seq is unique), so any
// correct priority queue pops the same sequence.
type event struct {
	at  time.Duration
	seq uint64
	// target, when set, is the broker whose node this event feeds: the
	// event is dropped when the broker crashed since it was scheduled
	// (inc differs) and held back while the broker is frozen.
	target *broker
	inc    int
	// Exactly one of fn and d is set: d is a broker message in flight
	// (the bulk of all events), carried without a closure.
	fn func()
	d  *delivery
}

func (e *event) before(o *event) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.seq < o.seq
}

// delivery is a broker message in flight on link l, in direction dir
// (0: from l.k.a to l.k.b, the sender), to broker to. Deliveries are
// recycled (Sim.freeDeliv) once processed or dropped.
//
// The record is read when its message is popped and delivered, long after
// it was written: the fields next() and deliver() read come first, in one
// 64-byte cache line (the record is 128 bytes, a size class aligned to
// 128); the second line (the frame) is used only with Config.Wire.
type delivery struct {
	// next is the message sent after this one in the same direction
	// while this one was in flight (fifo), with its event's time,
	// sequence number and receiver incarnation: the event that replaces
	// this one in the heap is built without touching next's record.
	next    *delivery
	nextAt  time.Duration
	nextSeq uint64
	to      *broker
	l       *link
	msg     message.Message
	nextInc int32
	dir     int32

	frame []byte   // the encoded message (Config.Wire only)
	_     [40]byte // to 128 bytes (TestDeliveryLayout)
}

// fifo is the messages in flight in one direction of a link, as a list
// through delivery.next from the one in the event heap to tail. A link is
// FIFO per direction and its arrival times never decrease (Sim.send), so
// the messages of one direction arrive in the order they were sent, in
// (at, seq) order: only the first of them needs to be in the event heap;
// the next one replaces it there when it is popped. The heap then holds
// one event per busy link direction instead of every message in flight
// (up to 34,000 in the setup's subscription floods), and the total order
// of events, (at, seq), is the same.
type fifo struct {
	tail *delivery // nil: nothing in flight in this direction
}

// eventHeap is a 4-ary min-heap of events held by value: no allocation per
// event, half the depth of a binary heap, and the four children of a node
// are adjacent in memory. The queue is the simulator's innermost loop.
type eventHeap []event

func (h *eventHeap) push(e event) {
	q := append(*h, e)
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !e.before(&q[p]) {
			break
		}
		q[i] = q[p]
		i = p
	}
	q[i] = e
	*h = q
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	last := q[n]
	q[n] = event{} // drop the references held by the slot
	q = q[:n]
	if n > 0 {
		q.down(last)
	}
	*h = q
	return top
}

// replaceTop returns the smallest event and puts e in its place (one
// sift-down instead of a pop and a push).
func (h eventHeap) replaceTop(e event) event {
	top := h[0]
	h.down(e)
	return top
}

// down places e, which replaces the root, where it belongs.
func (q eventHeap) down(e event) {
	n := len(q)
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		end := min(c+4, n)
		for j := c + 1; j < end; j++ {
			if q[j].before(&q[m]) {
				m = j
			}
		}
		if !q[m].before(&e) {
			break
		}
		q[i] = q[m]
		i = m
	}
	q[i] = e
}

// tickQueue holds the brokers' ticks after their first one, in the order
// of their keys (at, seq), as a FIFO ring instead of in the event heap. A
// tick queues its successor when it runs, Tick later, under a new
// sequence number: every tick already queued was queued no later, so is
// due no later (and, if at the same instant, was queued earlier in that
// instant: a smaller seq). Appending keeps the ring sorted, and the next
// event is the smaller of the heap's top and the ring's first, by the
// same total order (at, seq) as when the ticks were in the heap. A fifth
// of all events are ticks (83 brokers, 100 per second each); the ring
// spares them the heap's sift-down and keeps them out of its depth.
type tickQueue struct {
	buf  []tickEntry // len a power of two; entries [head, head+n) mod len
	head int
	n    int
}

// tickEntry is a queued tick of incarnation inc of b, with its event key.
type tickEntry struct {
	at  time.Duration
	seq uint64
	b   *broker
	inc int
}

// before reports whether the first queued tick comes before event e.
func (q *tickQueue) before(e *event) bool {
	t := &q.buf[q.head]
	return t.at < e.at || t.at == e.at && t.seq < e.seq
}

func (q *tickQueue) push(t tickEntry) {
	if q.n == len(q.buf) {
		buf := make([]tickEntry, max(16, 2*len(q.buf)))
		for i := 0; i < q.n; i++ {
			buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
		}
		q.buf, q.head = buf, 0
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = t
	q.n++
}

func (q *tickQueue) pop() tickEntry {
	t := q.buf[q.head]
	q.buf[q.head].b = nil // drop the reference
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return t
}

// next removes and returns the next event: the heap's smallest, replaced
// by the next message of its link direction when it is a message.
func (s *Sim) next() event { return s.q.popNext() }

// popNext removes the first event of q; a message's successor on its link
// direction (fifo) takes its place in q.
func (q *eventHeap) popNext() event {
	if d := (*q)[0].d; d != nil {
		if n := d.next; n != nil {
			return q.replaceTop(event{at: d.nextAt, seq: d.nextSeq, target: d.to, inc: int(d.nextInc), d: n})
		}
		d.l.q[d.dir].tail = nil
	}
	return q.pop()
}

// schedule queues fn at virtual time at (never earlier than now).
func (s *Sim) schedule(at time.Duration, fn func()) {
	s.scheduleFor(at, nil, fn)
}

// scheduleFor queues an input for broker b's current incarnation.
func (s *Sim) scheduleFor(at time.Duration, b *broker, fn func()) {
	s.enqueue(at, b, fn, nil)
}

func (s *Sim) enqueue(at time.Duration, b *broker, fn func(), d *delivery) {
	if at < s.now {
		at = s.now
	}
	s.seq++
	e := event{at: at, seq: s.seq, target: b, fn: fn, d: d}
	if b != nil {
		e.inc = b.inc
	}
	s.q.pushEvent(e)
}

// pushEvent queues e; a message waits behind the earlier ones of its link
// direction (fifo).
func (q *eventHeap) pushEvent(e event) {
	if d := e.d; d != nil {
		f := &d.l.q[d.dir]
		if p := f.tail; p != nil {
			p.next, p.nextAt, p.nextSeq, p.nextInc = d, e.at, e.seq, int32(e.inc)
			f.tail = d
			return
		}
		f.tail = d
	}
	q.push(e)
}

// newDelivery returns a recycled (or new) delivery record. The free list
// is bounded by the largest number of messages ever in flight at once.
func (s *Sim) newDelivery() *delivery {
	if n := len(s.freeDeliv); n > 0 {
		d := s.freeDeliv[n-1]
		s.freeDeliv = s.freeDeliv[:n-1]
		return d
	}
	return &delivery{}
}

func (s *Sim) releaseDelivery(d *delivery) {
	// Only the first cache line is cleared (the fifo needs next nil; msg
	// is dropped for the collector); send sets the rest. The frame is not
	// reused: a decoded message may share its bytes.
	d.next, d.msg = nil, nil
	if d.frame != nil {
		d.frame = nil
	}
	s.freeDeliv = append(s.freeDeliv, d)
}
