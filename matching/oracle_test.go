package matching_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
)

// The brute-force matcher (Filter.Match) is the oracle for the index, and
// enumeration over a finite value domain is the oracle for Covers.

// domain holds every value the covering oracle tries: all strings over
// {A,a,b,c,~} of length at most 3 ('A' and '~' sort below and above
// every operand byte, standing in for the rest of the byte range), each
// operand string extended by one such byte on either side, and the numbers from -2 to 4
// in quarter steps (integers as Int). It contains a witness for every
// pair of predicates whose operands come from workload.RandomStrings and
// workload.RandomNumbers.
func domain() []matching.Value {
	var out []matching.Value
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		out = append(out, matching.Str(prefix))
		if n == 0 {
			return
		}
		for _, c := range "Aabc~" {
			gen(prefix+string(c), n-1)
		}
	}
	gen("", 3)
	for _, s := range workload.RandomStrings {
		for _, c := range "Aabc~" {
			out = append(out, matching.Str(s+string(c)), matching.Str(string(c)+s))
		}
	}
	for q := -8; q <= 16; q++ {
		if q%4 == 0 {
			out = append(out, matching.Int(int64(q/4)))
		} else {
			out = append(out, matching.Float(float64(q)/4))
		}
	}
	return out
}

func allPredicates() []matching.Predicate {
	var out []matching.Predicate
	for op := matching.OpEq; op <= matching.OpIsPresent; op++ {
		if op.IsString() || op == matching.OpIsPresent {
			for _, s := range workload.RandomStrings {
				out = append(out, matching.Predicate{Attr: "x", Op: op, Value: matching.Str(s)})
			}
		}
		if op.IsNumeric() || op == matching.OpIsPresent {
			for _, v := range workload.RandomNumbers {
				out = append(out, matching.Predicate{Attr: "x", Op: op, Value: v})
			}
		}
	}
	return out
}

func classA() matching.Predicate {
	return matching.Predicate{Attr: "class", Op: matching.OpEq, Value: matching.Str("A")}
}

// Every pair of single predicates: Covers must equal enumeration exactly.
func TestCoversPredicatePairsBruteForce(t *testing.T) {
	dom := domain()
	preds := allPredicates()
	pubs := []matching.Publication{{Attrs: []matching.Attr{{Name: "class", Value: matching.Str("A")}}}}
	for _, v := range dom {
		p := matching.Publication{Attrs: []matching.Attr{{Name: "class", Value: matching.Str("A")}, {Name: "x", Value: v}}}
		pubs = append(pubs, p)
	}
	// sat[i][j]: predicate i matches publication j
	sat := make([][]bool, len(preds))
	filters := make([]matching.Filter, len(preds))
	for i, q := range preds {
		filters[i] = matching.Filter{Preds: []matching.Predicate{classA(), q}}
		sat[i] = make([]bool, len(pubs))
		for j := range pubs {
			sat[i][j] = filters[i].Match(&pubs[j])
		}
	}
	checked := 0
	for i := range preds {
		for k := range preds {
			want := true
			for j := range pubs {
				if sat[k][j] && !sat[i][j] {
					want = false
					break
				}
			}
			if got := matching.Covers(filters[i], filters[k]); got != want {
				t.Errorf("Covers(%s, %s) = %v, enumeration says %v", filters[i], filters[k], got, want)
			}
			checked++
		}
	}
	t.Logf("%d predicate pairs checked against %d publications", checked, len(pubs))
}

// Edge values of the number domain, where int64 and float64 meet.
func TestCoversNumberEdges(t *testing.T) {
	f := func(s string) matching.Filter {
		x, err := matching.ParseFilter(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	minF := matching.Float(-math.MaxFloat64).String()
	cases := []struct {
		a, b string
		want bool
	}{
		{"[class,eq,A],[x,>,5]", "[class,eq,A],[x,>=,6]", true},
		{"[class,eq,A],[x,>=,6]", "[class,eq,A],[x,>,5]", false}, // 5.5
		{"[class,eq,A],[x,<," + minF + "]", "[class,eq,A],[x,<," + minF + "],[y,=,1]", true},
		{"[class,eq,A],[y,=,1]", "[class,eq,A],[x,<," + minF + "]", true}, // b matches nothing
		{"[class,eq,A],[x,>,9223372036854775806]", "[class,eq,A],[x,>=,9223372036854775807]", true},
		{"[class,eq,A],[x,>=,9223372036854775807]", "[class,eq,A],[x,>,9223372036854775806]", true}, // nothing between
		{"[class,eq,A],[x,>,9007199254740992.0]", "[class,eq,A],[x,>=,9007199254740993]", true},
		{"[class,eq,A],[x,>=,9007199254740993]", "[class,eq,A],[x,>,9007199254740992.0]", true}, // the next float is 2^53+2
		{"[class,eq,A],[x,<>,0]", "[class,eq,A],[x,isPresent,0]", false},
		{"[class,eq,A],[x,isPresent,1.5]", "[class,eq,A],[x,<>,0]", true},
		{"[class,eq,A],[x,=,2]", "[class,eq,A],[x,=,2.0]", true},
		{"[class,eq,A],[x,str-lt,'']", "[class,eq,A],[x,eq,'a']", false},
		{"[class,eq,A],[x,eq,'a']", "[class,eq,A],[x,str-lt,'']", true},
		{"[class,eq,A]", "[class,eq,B],[x,eq,'a']", false},
	}
	for _, c := range cases {
		if got := matching.Covers(f(c.a), f(c.b)); got != c.want {
			t.Errorf("Covers(%s, %s) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// Random whole filters: when Covers says yes, no publication may match b
// and not a; when it says no, a witness must be constructible from the
// domain.
func TestCoversFiltersBruteForce(t *testing.T) {
	seed := uint64(20261130)
	r := rand.New(rand.NewPCG(seed, 1))
	g := workload.NewRandom(r)
	dom := domain()
	var vals []matching.Value
	vals = append(vals, dom...)
	const pairs = 3000
	yes := 0
	for n := 0; n < pairs; n++ {
		a, b := g.Filter(), g.Filter()
		if n%3 == 0 { // make covering likelier: b extends a
			b = matching.Filter{Preds: append(slices.Clone(a.Preds), g.Filter().Preds[1:]...)}
			b = dedupe(b)
		}
		got := matching.Covers(a, b)
		w, found := witness(a, b, vals)
		if got && found {
			t.Fatalf("seed %d pair %d: Covers(%s, %s) = true, but %s matches b and not a", seed, n, a, b, w)
		}
		if !got && !found {
			t.Fatalf("seed %d pair %d: Covers(%s, %s) = false, but no witness exists in the domain", seed, n, a, b)
		}
		if got {
			yes++
		}
	}
	t.Logf("seed %d: %d pairs, %d covered", seed, pairs, yes)
}

func dedupe(f matching.Filter) matching.Filter {
	seen := map[string]bool{}
	var out matching.Filter
	for _, p := range f.Preds {
		if !seen[p.Attr] {
			seen[p.Attr] = true
			out.Preds = append(out.Preds, p)
		}
	}
	return out
}

// witness searches for a publication matching b and not a: every
// attribute b constrains gets a value b accepts, and one attribute at a
// time is varied over the domain (or left out) to break a.
func witness(a, b matching.Filter, vals []matching.Value) (matching.Publication, bool) {
	attrs := []string{"class", "x", "y", "z"}
	base := map[string][]matching.Value{}
	for _, name := range attrs {
		var q *matching.Predicate
		for i := range b.Preds {
			if b.Preds[i].Attr == name {
				q = &b.Preds[i]
			}
		}
		for _, v := range append(vals, matching.Str("A"), matching.Str("B")) {
			if q == nil || q.Holds(v) {
				base[name] = append(base[name], v)
			}
		}
		if q != nil && len(base[name]) == 0 {
			return matching.Publication{}, false // b matches nothing in the domain
		}
	}
	build := func(vary string, v *matching.Value) matching.Publication {
		var p matching.Publication
		for _, name := range attrs {
			if name == vary {
				if v != nil {
					p.Attrs = append(p.Attrs, matching.Attr{Name: name, Value: *v})
				}
				continue
			}
			p.Attrs = append(p.Attrs, matching.Attr{Name: name, Value: base[name][0]})
		}
		p.Sort()
		return p
	}
	for _, name := range attrs {
		cands := base[name]
		constrained := false
		for _, q := range b.Preds {
			constrained = constrained || q.Attr == name
		}
		if !constrained {
			p := build(name, nil)
			if b.Match(&p) && !a.Match(&p) {
				return p, true
			}
		}
		for i := range cands {
			p := build(name, &cands[i])
			if b.Match(&p) && !a.Match(&p) {
				return p, true
			}
		}
	}
	return matching.Publication{}, false
}

func sorted(x []uint64) []uint64 { slices.Sort(x); return x }

type gen interface {
	Filter() matching.Filter
	Publication() matching.Publication
}

// agree checks index against brute force for nPubs publications.
func agree(t *testing.T, name string, seed uint64, ix *matching.Index, filters map[uint64]matching.Filter, g gen, nPubs int) (pairs, matches int) {
	t.Helper()
	var dst []uint64
	for n := 0; n < nPubs; n++ {
		p := g.Publication()
		dst = ix.Match(&p, dst[:0])
		got := sorted(slices.Clone(dst))
		var want []uint64
		for id, f := range filters {
			if f.Match(&p) {
				want = append(want, id)
			}
		}
		want = sorted(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s seed %d: publication %s: index matched %d filters, brute force %d (first difference %s)", name, seed, p, len(got), len(want), firstDiff(got, want, filters))
		}
		pairs += len(filters)
		matches += len(want)
	}
	return pairs, matches
}

func firstDiff(got, want []uint64, fs map[uint64]matching.Filter) string {
	g, w := map[uint64]bool{}, map[uint64]bool{}
	for _, x := range got {
		if g[x] {
			return fmt.Sprintf("id %d returned twice", x)
		}
		g[x] = true
	}
	for _, x := range want {
		w[x] = true
	}
	for _, x := range want {
		if !g[x] {
			return fmt.Sprintf("missed %d %s", x, fs[x])
		}
	}
	for _, x := range got {
		if !w[x] {
			return fmt.Sprintf("extra %d %s", x, fs[x])
		}
	}
	return "none"
}

// 100,000 random (filter, publication) pairs and more: index and brute
// force agree, before and after deletes and re-inserts.
func TestIndexAgreesWithBruteForce(t *testing.T) {
	seed := uint64(7)
	r := rand.New(rand.NewPCG(seed, 2))
	type wl struct {
		name string
		g    gen
		subs int
		pubs int
	}
	wls := []wl{
		{"random", workload.NewRandom(r), 2000, 50},
		{"stock", workload.NewStock(r), 5000, 20},
		{"ranges", workload.NewRanges(r), 5000, 20},
	}
	for _, w := range wls {
		ix := matching.NewIndex()
		filters := map[uint64]matching.Filter{}
		for i := 0; i < w.subs; i++ {
			id := r.Uint64()
			f := w.g.Filter()
			if err := ix.Insert(id, f); err != nil {
				t.Fatalf("%s seed %d: insert %s: %v", w.name, seed, f, err)
			}
			filters[id] = f
		}
		pairs, matches := agree(t, w.name, seed, ix, filters, w.g, w.pubs)
		// Delete half, re-insert some under new ids, check again.
		n := 0
		for id := range filters {
			if n%2 == 0 {
				if !ix.Delete(id) {
					t.Fatalf("%s: delete %d: not found", w.name, id)
				}
				if ix.Delete(id) {
					t.Fatalf("%s: second delete %d succeeded", w.name, id)
				}
				delete(filters, id)
			}
			n++
		}
		for i := 0; i < w.subs/4; i++ {
			id := r.Uint64()
			f := w.g.Filter()
			if err := ix.Insert(id, f); err != nil {
				t.Fatal(err)
			}
			filters[id] = f
		}
		if ix.Len() != len(filters) {
			t.Fatalf("%s: Len %d, want %d", w.name, ix.Len(), len(filters))
		}
		p2, m2 := agree(t, w.name, seed, ix, filters, w.g, w.pubs)
		t.Logf("%s seed %d: %d pairs, %d matches", w.name, seed, pairs+p2, matches+m2)
		if w.name == "random" && pairs < 100000 {
			t.Fatalf("random: only %d pairs", pairs)
		}
		for id, f := range filters {
			got, ok := ix.Filter(id)
			if !ok || got.String() != f.String() {
				t.Fatalf("%s: Filter(%d) = %s, want %s", w.name, id, got, f)
			}
		}
		for id := range filters {
			ix.Delete(id)
		}
		if ix.Len() != 0 {
			t.Fatalf("%s: Len %d after deleting all", w.name, ix.Len())
		}
	}
}

func TestIndexRejects(t *testing.T) {
	ix := matching.NewIndex()
	f, _ := matching.ParseFilter("[class,eq,A]")
	if err := ix.Insert(1, f); err != nil {
		t.Fatal(err)
	}
	if err := ix.Insert(1, f); err == nil {
		t.Fatal("duplicate id accepted")
	}
	if err := ix.Insert(2, matching.Filter{}); err == nil {
		t.Fatal("empty filter accepted")
	}
	bad := matching.Filter{Preds: []matching.Predicate{classA(), {Attr: "x", Op: matching.OpLt, Value: matching.Str("a")}}}
	if err := ix.Insert(3, bad); err == nil {
		t.Fatal("string operand for < accepted")
	}
	if ix.Len() != 1 {
		t.Fatalf("Len %d, want 1", ix.Len())
	}
}
