package overlay

import (
	"math/rand/v2"
	"testing"
)

// fifo behaves as a plain slice used as a queue, through block
// boundaries, growth of the first block and emptying.
func TestFifoIsAQueue(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var q fifo[int]
	var want []int
	next := 0
	for range 20000 {
		if r.IntN(3) > 0 {
			for range r.IntN(300) {
				q.Push(next)
				want = append(want, next)
				next++
			}
		} else {
			k := r.IntN(len(want) + 1)
			q.Drop(k)
			want = want[k:]
		}
		if q.Len() != len(want) {
			t.Fatalf("Len %d, want %d", q.Len(), len(want))
		}
		for _, i := range []int{0, len(want) / 2, len(want) - 1} {
			if i >= 0 && i < len(want) && *q.At(i) != want[i] {
				t.Fatalf("At(%d) = %d, want %d", i, *q.At(i), want[i])
			}
		}
	}
	for i := range want {
		if *q.At(i) != want[i] {
			t.Fatalf("At(%d) = %d, want %d", i, *q.At(i), want[i])
		}
	}
}

// An emptied queue keeps at most a small block.
func TestFifoFreesWhatItNoLongerNeeds(t *testing.T) {
	var q fifo[int]
	for i := range 1000 {
		q.Push(i)
	}
	q.Drop(1000)
	if len(q.blocks) != 0 {
		t.Fatalf("empty after 1000 entries: %d blocks kept (first cap %d)", len(q.blocks), cap(q.blocks[0]))
	}
	q.Push(1)
	q.Drop(1)
	if len(q.blocks) != 1 || cap(q.blocks[0]) > fifoKeep {
		t.Fatalf("empty after one entry: blocks %d, want its small block kept", len(q.blocks))
	}
	q.Push(7)
	if q.Len() != 1 || *q.At(0) != 7 {
		t.Fatalf("reused block: Len %d", q.Len())
	}
}
