package matching_test

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
)

// Benchmarks over the workloads. The index of a given size is
// built once per process and shared (building 1,000,000 filters takes a
// few seconds). Run e.g.
//
//	go test -run '^$' -bench 'Index' -benchtime 20000x ./matching/

type benchSet struct {
	ix   *matching.Index
	fs   []matching.Filter
	pubs []matching.Publication
	gen  interface {
		Filter() matching.Filter
		Publication() matching.Publication
	}
}

var (
	benchMu   sync.Mutex
	benchSets = map[string]*benchSet{}
)

func getBenchSet(b *testing.B, wl string, n int) *benchSet {
	benchMu.Lock()
	defer benchMu.Unlock()
	key := wl + string(rune(n))
	if s := benchSets[key]; s != nil {
		return s
	}
	r := rand.New(rand.NewPCG(1, 0x5eed))
	s := &benchSet{ix: matching.NewIndex()}
	if wl == "stock" {
		s.gen = workload.NewStock(r)
	} else {
		s.gen = workload.NewRanges(r)
	}
	s.fs = make([]matching.Filter, n)
	for i := range s.fs {
		s.fs[i] = s.gen.Filter()
		if err := s.ix.Insert(uint64(i), s.fs[i]); err != nil {
			b.Fatal(err)
		}
	}
	s.pubs = make([]matching.Publication, 4096)
	for i := range s.pubs {
		s.pubs[i] = s.gen.Publication()
	}
	benchSets[key] = s
	return s
}

func benchMatch(b *testing.B, wl string, n int) {
	s := getBenchSet(b, wl, n)
	var dst []uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst = s.ix.Match(&s.pubs[i%len(s.pubs)], dst[:0])
	}
}

func benchBrute(b *testing.B, wl string, n int) {
	s := getBenchSet(b, wl, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := &s.pubs[i%len(s.pubs)]
		for j := range s.fs {
			s.fs[j].Match(p)
		}
	}
}

func BenchmarkIndexMatchStock1M(b *testing.B)    { benchMatch(b, "stock", 1000000) }
func BenchmarkIndexMatchStock100k(b *testing.B)  { benchMatch(b, "stock", 100000) }
func BenchmarkIndexMatchRanges100k(b *testing.B) { benchMatch(b, "ranges", 100000) }
func BenchmarkBruteStock100k(b *testing.B)       { benchBrute(b, "stock", 100000) }
func BenchmarkBruteRanges100k(b *testing.B)      { benchBrute(b, "ranges", 100000) }

// Insert b.N fresh filters into an index of 1,000,000 (then remove them,
// untimed).
func BenchmarkIndexInsertStock1M(b *testing.B) {
	s := getBenchSet(b, "stock", 1000000)
	fs := make([]matching.Filter, b.N)
	for i := range fs {
		fs[i] = s.gen.Filter()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.ix.Insert(uint64(1<<40+i), fs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		s.ix.Delete(uint64(1<<40 + i))
	}
}

// Delete b.N filters from an index of 1,000,000 plus b.N (inserted
// untimed).
func BenchmarkIndexDeleteStock1M(b *testing.B) {
	s := getBenchSet(b, "stock", 1000000)
	for i := 0; i < b.N; i++ {
		if err := s.ix.Insert(uint64(1<<40+i), s.gen.Filter()); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !s.ix.Delete(uint64(1<<40 + i)) {
			b.Fatal("not found")
		}
	}
}

func BenchmarkParseFilter(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := matching.ParseFilter("[class,eq,'STOCK'],[symbol,eq,'IBM'],[price,>,100.5],[volume,<,1000]"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCovers(b *testing.B) {
	a, _ := matching.ParseFilter("[class,eq,'STOCK'],[symbol,str-prefix,'IB'],[price,>,100]")
	c, _ := matching.ParseFilter("[class,eq,'STOCK'],[symbol,eq,'IBM'],[price,>,150.5],[volume,<,1000]")
	for i := 0; i < b.N; i++ {
		matching.Covers(a, c)
	}
}
