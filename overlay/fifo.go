package overlay

// fifo is a queue kept in blocks of at most fifoBlock entries: a push
// never moves what is queued and dropping from the front frees whole
// blocks, so a log that retains a minute of publications costs no copy
// of them per tick. A short queue (most sources) is one small block that
// grows by doubling up to fifoBlock.
type fifo[T any] struct {
	blocks [][]T // blocks[0][head:], blocks[1], … ; all but the last full
	head   int
	n      int
}

const (
	fifoBlock = 256
	fifoKeep  = 16 // the largest block an empty queue keeps
)

func (q *fifo[T]) Len() int { return q.n }

// At returns the i-th entry from the front (0 ≤ i < Len).
func (q *fifo[T]) At(i int) *T {
	i += q.head
	if len(q.blocks) == 1 {
		return &q.blocks[0][i] // a first block may be shorter than fifoBlock
	}
	return &q.blocks[i/fifoBlock][i%fifoBlock]
}

// Push appends v.
func (q *fifo[T]) Push(v T) {
	if len(q.blocks) == 0 {
		q.blocks = append(q.blocks, make([]T, 0, 4))
	}
	last := &q.blocks[len(q.blocks)-1]
	if len(*last) == cap(*last) {
		if c := cap(*last); c < fifoBlock { // only a lone first block is short
			b := make([]T, len(*last), min(2*c, fifoBlock))
			copy(b, *last)
			*last = b
		} else {
			q.blocks = append(q.blocks, make([]T, 0, fifoBlock))
			last = &q.blocks[len(q.blocks)-1]
		}
	}
	*last = append(*last, v)
	q.n++
}

// Drop removes the first k entries (k ≤ Len), clearing them so that
// nothing they point to stays reachable.
func (q *fifo[T]) Drop(k int) {
	for k > 0 {
		b := q.blocks[0]
		m := min(k, len(b)-q.head)
		clear(b[q.head : q.head+m])
		q.head += m
		q.n -= m
		k -= m
		if q.head == len(b) && len(q.blocks) > 1 {
			q.blocks[0] = nil
			q.blocks = q.blocks[1:]
			q.head = 0
		}
	}
	if q.n == 0 {
		// Empty: a small block is reused, a large one freed (an idle
		// source must not keep what it once needed).
		if len(q.blocks) == 1 && cap(q.blocks[0]) <= fifoKeep {
			q.blocks[0] = q.blocks[0][:0]
		} else {
			q.blocks = nil
		}
		q.head = 0
	}
}
