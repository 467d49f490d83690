package workload

import (
	"math/rand/v2"
	"testing"

	"github.com/deltapub/deltapub/matching"
)

type gen interface {
	Filter() matching.Filter
	Publication() matching.Publication
}

func gens(seed uint64) map[string]gen {
	return map[string]gen{
		"stock":  NewStock(rand.New(rand.NewPCG(seed, 1))),
		"ranges": NewRanges(rand.New(rand.NewPCG(seed, 1))),
		"random": NewRandom(rand.New(rand.NewPCG(seed, 1))),
		"small":  NewSmall(rand.New(rand.NewPCG(seed, 1))),
	}
}

// Same seed, same workload; every filter valid; every publication parses
// back from its text form; random pairs match often enough to be useful.
func TestWorkloads(t *testing.T) {
	const seed = 42
	a, b := gens(seed), gens(seed)
	for name, g := range a {
		matches := 0
		var pubs []matching.Publication
		for i := 0; i < 300; i++ {
			f, f2 := g.Filter(), b[name].Filter()
			if f.String() != f2.String() {
				t.Fatalf("%s seed %d: not deterministic: %s vs %s", name, seed, f, f2)
			}
			if err := f.Validate(); err != nil {
				t.Fatalf("%s seed %d: invalid filter %s: %v", name, seed, f, err)
			}
			if _, err := matching.ParseFilter(f.String()); err != nil {
				t.Fatalf("%s: %s does not parse: %v", name, f, err)
			}
			p := g.Publication()
			b[name].Publication()
			q, err := matching.ParsePublication(p.String())
			if err != nil || q.String() != p.String() {
				t.Fatalf("%s: publication %s does not round-trip: %v", name, p, err)
			}
			pubs = append(pubs, p)
			for j := range pubs {
				if f.Match(&pubs[j]) {
					matches++
				}
			}
		}
		t.Logf("%s seed %d: %d matches among %d pairs", name, seed, matches, 300*301/2)
		if name == "random" && matches < 300*301/2/10 {
			t.Errorf("random workload: only %d matches among %d pairs", matches, 300*301/2)
		}
	}
}

func TestStockSkew(t *testing.T) {
	s := NewStock(rand.New(rand.NewPCG(3, 1)))
	counts := map[string]int{}
	for i := 0; i < 20000; i++ {
		counts[s.Filter().Preds[1].Value.Str]++
	}
	if counts[Symbol(0)] < counts[Symbol(10)] || counts[Symbol(10)] < counts[Symbol(500)] || counts[Symbol(0)] < 20000/20 {
		t.Errorf("symbols not Zipf-skewed: %s %d, %s %d, %s %d", Symbol(0), counts[Symbol(0)], Symbol(10), counts[Symbol(10)], Symbol(500), counts[Symbol(500)])
	}
}
