package sim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The tick ring is a FIFO through growth while wrapped around.
func TestTickQueueFIFO(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var q tickQueue
	var model []tickEntry
	seq := uint64(0)
	for i := 0; i < 20000; i++ {
		if r.IntN(3) != 0 || len(model) == 0 {
			seq++
			e := tickEntry{at: time.Duration(seq), seq: seq, inc: int(seq)}
			q.push(e)
			model = append(model, e)
		} else {
			want := model[0]
			model = model[1:]
			if !q.before(&event{at: want.at, seq: want.seq + 1}) || q.before(&event{at: want.at, seq: want.seq}) {
				t.Fatalf("step %d: before() wrong for the first tick %+v", i, want)
			}
			if got := q.pop(); got != want {
				t.Fatalf("step %d: popped %+v, want %+v", i, got, want)
			}
		}
		if q.n != len(model) {
			t.Fatalf("step %d: %d queued, want %d", i, q.n, len(model))
		}
	}
}
