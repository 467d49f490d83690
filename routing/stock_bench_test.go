package routing

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
)

// stockEntries returns n stock-workload subscriptions learned from one
// neighbour, as B1 of bench scale learns B2's: one route, one class.
func stockEntries(n int) []Entry {
	w := workload.NewStock(rand.New(rand.NewPCG(1, 2)))
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Sub: sub("B2", uint64(i+1)), Filter: w.Filter(), From: "B2", Dir: "B2"}
	}
	return es
}

// BenchmarkInsertStock fills a table with n stock subscriptions from one
// route (one op: the whole fill) and reports inserts/s, and how many
// entries reach the matcher (the others hang under a coverer).
func BenchmarkInsertStock(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			es := stockEntries(n)
			var el time.Duration
			var tab *Table
			for b.Loop() {
				tab = New(matching.NewIndex())
				start := time.Now()
				for _, e := range es {
					if _, err := tab.Insert(e); err != nil {
						b.Fatal(err)
					}
				}
				el += time.Since(start)
			}
			b.ReportMetric(float64(n*b.N)/el.Seconds(), "inserts/s")
			b.ReportMetric(float64(tab.Indexed()), "indexed")
		})
	}
}

// BenchmarkDeleteStock deletes a random tenth of n stock subscriptions
// from one route (one op: those deletes, each placing again what the
// deleted entry covered) and reports deletes/s.
func BenchmarkDeleteStock(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			es := stockEntries(n)
			r := rand.New(rand.NewPCG(3, 4))
			var el time.Duration
			for b.Loop() {
				b.StopTimer()
				tab := New(matching.NewIndex())
				for _, e := range es {
					if _, err := tab.Insert(e); err != nil {
						b.Fatal(err)
					}
				}
				del := r.Perm(n)[:n/10]
				b.StartTimer()
				start := time.Now()
				for _, i := range del {
					if _, ok := tab.Delete(es[i].Sub); !ok {
						b.Fatal("not found")
					}
				}
				el += time.Since(start)
			}
			b.ReportMetric(float64(n/10*b.N)/el.Seconds(), "deletes/s")
		})
	}
}
