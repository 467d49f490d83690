package matching

import (
	"math/rand/v2"
	"testing"
)

// TestIDIndexSameAsMap: the id index agrees with a map through random
// puts and deletes (ids clustered as routing keys are: a small slot below
// a route number), including after growth and backward shifts.
func TestIDIndexSameAsMap(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		var x idIndex
		ref := map[uint64]uint32{}
		for op := 0; op < 20000; op++ {
			id := uint64(r.IntN(600)) | uint64(r.IntN(4))<<32
			if _, ok := ref[id]; ok {
				if r.IntN(2) == 0 {
					if !x.del(id) {
						t.Fatalf("seed %d op %d: %x not deleted", seed, op, id)
					}
					delete(ref, id)
				}
			} else {
				if x.del(id) {
					t.Fatalf("seed %d op %d: absent %x deleted", seed, op, id)
				}
				v := uint32(r.IntN(1 << 20))
				x.put(id, v)
				ref[id] = v
			}
			if x.n != len(ref) {
				t.Fatalf("seed %d op %d: n %d, want %d", seed, op, x.n, len(ref))
			}
			if op%101 == 0 {
				for k, v := range ref {
					if got, ok := x.get(k); !ok || got != v {
						t.Fatalf("seed %d op %d: get %x = %d %v, want %d", seed, op, k, got, ok, v)
					}
				}
				for k := uint64(0); k < 700; k++ {
					_, want := ref[k|1<<32]
					if _, ok := x.get(k | 1<<32); ok != want {
						t.Fatalf("seed %d op %d: get %x present %v, want %v", seed, op, k|1<<32, ok, want)
					}
				}
			}
		}
	}
}
