package matching_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
)

// groupsGen draws filters with several string equalities over few values
// (groups sharing access keys, groups filed under non-class keys), numeric
// bounds of every kind on three attributes (int and float operands, so
// residual predicates both inline and not), and string residuals.
type groupsGen struct{ r *rand.Rand }

func (g groupsGen) Filter() matching.Filter {
	r := g.r
	f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str(fmt.Sprint("c", r.IntN(3)))}}}
	for _, a := range []string{"s", "t"} {
		switch r.IntN(4) {
		case 0:
			f.Preds = append(f.Preds, matching.Predicate{Attr: a, Op: matching.OpEq, Value: matching.Str(fmt.Sprint("v", r.IntN(3)))})
		case 1:
			f.Preds = append(f.Preds, matching.Predicate{Attr: a, Op: matching.OpStrPrefix, Value: matching.Str(fmt.Sprint("v", r.IntN(2)))})
		}
	}
	ops := []matching.Op{matching.OpNumEq, matching.OpLt, matching.OpLe, matching.OpGt, matching.OpGe, matching.OpNumNe}
	for _, a := range []string{"x", "y", "z"} {
		if r.IntN(2) == 0 {
			v := matching.Int(r.Int64N(6))
			if r.IntN(4) == 0 {
				v = matching.Float(float64(r.IntN(12)) / 2)
			}
			f.Preds = append(f.Preds, matching.Predicate{Attr: a, Op: ops[r.IntN(len(ops))], Value: v})
		}
	}
	r.Shuffle(len(f.Preds)-1, func(i, j int) { f.Preds[i+1], f.Preds[j+1] = f.Preds[j+1], f.Preds[i+1] })
	return f
}

func (g groupsGen) Publication() matching.Publication {
	r := g.r
	var p matching.Publication
	p.Attrs = append(p.Attrs, matching.Attr{Name: "class", Value: matching.Str(fmt.Sprint("c", r.IntN(3)))})
	for _, a := range []string{"s", "t"} {
		if r.IntN(4) > 0 {
			p.Attrs = append(p.Attrs, matching.Attr{Name: a, Value: matching.Str(fmt.Sprint("v", r.IntN(3)))})
		}
	}
	for _, a := range []string{"x", "y", "z"} {
		if r.IntN(5) > 0 {
			v := matching.Int(r.Int64N(6))
			if r.IntN(3) == 0 {
				v = matching.Float(float64(r.IntN(12)) / 2)
			}
			p.Attrs = append(p.Attrs, matching.Attr{Name: a, Value: v})
		}
	}
	if r.IntN(10) == 0 { // a duplicate name: the first one counts (see dupNames)
		p.Attrs = append(p.Attrs, p.Attrs[r.IntN(len(p.Attrs))])
	}
	r.Shuffle(len(p.Attrs), func(i, j int) { p.Attrs[i], p.Attrs[j] = p.Attrs[j], p.Attrs[i] })
	return p
}

// TestMatchThroughChanges: Match finds the same set as the brute-force
// matcher through inserts and deletes interleaved with matches.
func TestMatchThroughChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	gens := []struct {
		name string
		g    gen
	}{
		{"groups", groupsGen{r}},
		{"random", workload.NewRandom(r)},
		{"stock", workload.NewStock(r)},
		{"ranges", workload.NewRanges(r)},
	}
	for _, w := range gens {
		ix := matching.NewIndex()
		filters := map[uint64]matching.Filter{}
		var ids []uint64
		var got []uint64
		compared := 0
		for op := 0; op < 3000; op++ {
			switch k := r.IntN(10); {
			case k < 5 || len(ids) == 0:
				id := r.Uint64()
				f := w.g.Filter()
				if err := ix.Insert(id, f); err != nil {
					continue
				}
				filters[id] = f
				ids = append(ids, id)
			case k < 7:
				i := r.IntN(len(ids))
				id := ids[i]
				ids = slices.Delete(ids, i, i+1)
				delete(filters, id)
				if !ix.Delete(id) {
					t.Fatalf("%s: delete %d failed", w.name, id)
				}
			default:
				for range 3 {
					p := w.g.Publication()
					got = ix.Match(&p, got[:0])
					var want []uint64
					for _, id := range ids {
						if filters[id].Match(&p) {
							want = append(want, id)
						}
					}
					s := slices.Clone(got)
					slices.Sort(s)
					if dupNames(&p) {
						// A group filed under a repeated (name, value)
						// is visited once per repetition.
						s = slices.Compact(s)
					}
					slices.Sort(want)
					if !slices.Equal(s, want) {
						t.Fatalf("%s op %d: %v matched %v, want %v", w.name, op, p, s, want)
					}
					compared++
				}
			}
		}
		if compared < 500 {
			t.Fatalf("%s: only %d matches compared", w.name, compared)
		}
	}
}

func dupNames(p *matching.Publication) bool {
	for i := range p.Attrs {
		for j := range i {
			if p.Attrs[i].Name == p.Attrs[j].Name {
				return true
			}
		}
	}
	return false
}

// TestMatchOnceSameAsFiltered: MatchOnce reports Match's ids in Match's
// order less those its tags leave out (tagged in skip, or in once after
// the tag's first id), on ids tagged 0..69 (tags from 64 on are never left
// out).
func TestMatchOnceSameAsFiltered(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	gens := []gen{groupsGen{r}, workload.NewStock(r), workload.NewRanges(r)}
	for gi, g := range gens {
		ix := matching.NewIndex()
		for range 600 {
			id := r.Uint64N(70)<<32 | uint64(r.Uint32())
			_ = ix.Insert(id, g.Filter())
		}
		var all, got []uint64
		for range 400 {
			p := g.Publication()
			once, skip := r.Uint64()&r.Uint64(), r.Uint64()&r.Uint64()&r.Uint64()
			if r.IntN(4) == 0 {
				once = ^uint64(0)
			}
			all = ix.Match(&p, all[:0])
			got = ix.MatchOnce(&p, got[:0], once, skip)
			var want []uint64
			done := skip
			for _, id := range all {
				if tag := id >> 32; tag < 64 {
					if done>>tag&1 != 0 {
						continue
					}
					done |= once & (1 << tag)
				}
				want = append(want, id)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("gen %d: %v once %x skip %x: got %v, want %v", gi, p, once, skip, got, want)
			}
			if again := ix.Match(&p, nil); !slices.Equal(again, all) {
				t.Fatalf("gen %d: Match after MatchOnce: %v, want %v", gi, again, all)
			}
		}
	}
}
