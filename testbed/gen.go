package testbed

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/deltapub/deltapub/matching"
)

// A generator expression yields one attribute value per draw:
//
//	'STOCK'  IBM  12  12.5       constants (quoted or bare string, integer, float)
//	uniform(a,b)                  float in [a,b), two decimals
//	randint(a,b)                  integer in [a,b]
//	zipf(x1,x2,…)                 xk with probability ∝ 1/k (x1 most frequent)
//	choice(x1,x2,…)               each xk equally likely
//	seq()                         1, 2, 3, … per publisher (or per subscriber in filters)
//
// List elements follow the constant rules. In a filter, {expr} is replaced
// by a drawn value, written in filter syntax ('quoted' for strings).
type genSpec struct {
	kind   string // const | uniform | randint | zipf | choice | seq
	konst  matching.Value
	lo, hi float64
	items  []matching.Value
	cum    []float64 // zipf: cumulative weights, normalised to 1
	text   string
}

// gen is one stateful instance of a genSpec with its own random stream.
type gen struct {
	spec *genSpec
	rng  *rand.Rand
	n    int64 // seq counter
}

// maxGenItems bounds zipf/choice lists: the list is written by hand in the
// file, and a bound keeps a pasted megabyte from becoming a huge table.
const maxGenItems = 100000

func parseGen(expr string) (*genSpec, error) {
	s := strings.TrimSpace(expr)
	g := &genSpec{text: s}
	open := strings.IndexByte(s, '(')
	if open < 0 || !strings.HasSuffix(s, ")") || strings.HasPrefix(s, "'") {
		v, err := parseConst(s)
		if err != nil {
			return nil, err
		}
		g.kind, g.konst = "const", v
		return g, nil
	}
	name := strings.TrimSpace(s[:open])
	inner := strings.TrimSpace(s[open+1 : len(s)-1])
	var args []string
	if inner != "" {
		args = splitArgs(inner)
	}
	switch name {
	case "uniform", "randint":
		if len(args) != 2 {
			return nil, fmt.Errorf("%s(a,b) takes two numbers, got %q", name, s)
		}
		lo, err1 := strconv.ParseFloat(strings.TrimSpace(args[0]), 64)
		hi, err2 := strconv.ParseFloat(strings.TrimSpace(args[1]), 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s(a,b) takes two numbers, got %q", name, s)
		}
		if !(lo < hi) && !(name == "randint" && lo == hi) {
			return nil, fmt.Errorf("%s(a,b) needs a < b, got %q", name, s)
		}
		if name == "randint" && (lo != math.Trunc(lo) || hi != math.Trunc(hi)) {
			return nil, fmt.Errorf("randint(a,b) takes integers, got %q", s)
		}
		g.kind, g.lo, g.hi = name, lo, hi
	case "zipf", "choice":
		if len(args) == 0 {
			return nil, fmt.Errorf("%s(x1,x2,…) needs at least one value, got %q", name, s)
		}
		if len(args) > maxGenItems {
			return nil, fmt.Errorf("%s: %d values, at most %d", name, len(args), maxGenItems)
		}
		for _, a := range args {
			v, err := parseConst(strings.TrimSpace(a))
			if err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
			g.items = append(g.items, v)
		}
		g.kind = name
		if name == "zipf" {
			total := 0.0
			for k := range g.items {
				total += 1 / float64(k+1)
				g.cum = append(g.cum, total)
			}
			for k := range g.cum {
				g.cum[k] /= total
			}
		}
	case "seq":
		if len(args) != 0 {
			return nil, fmt.Errorf("seq() takes no arguments, got %q", s)
		}
		g.kind = "seq"
	default:
		return nil, fmt.Errorf("unknown generator %q (want uniform, randint, zipf, choice, seq, or a constant)", name)
	}
	return g, nil
}

// splitArgs splits on commas outside quotes.
func splitArgs(s string) []string {
	var out []string
	quoted := false
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseConst(s string) (matching.Value, error) {
	if s == "" {
		return matching.Value{}, fmt.Errorf("empty value")
	}
	if strings.HasPrefix(s, "'") {
		if len(s) < 2 || !strings.HasSuffix(s, "'") || strings.Contains(s[1:len(s)-1], "'") {
			return matching.Value{}, fmt.Errorf("unterminated string %s", s)
		}
		return matching.Value{Kind: matching.KindString, Str: s[1 : len(s)-1]}, nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return matching.Value{Kind: matching.KindInt, Int: i}, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return matching.Value{Kind: matching.KindFloat, Float: f}, nil
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return matching.Value{}, fmt.Errorf("bad value %q (quote strings: 'text')", s)
		}
	}
	return matching.Value{Kind: matching.KindString, Str: s}, nil
}

// streamRNG returns the random stream named label of an experiment seeded
// with seed. Streams are independent, so adding a publisher does not change
// what the others draw.
func streamRNG(seed int64, label string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(label))
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

func (g *genSpec) instance(rng *rand.Rand) *gen { return &gen{spec: g, rng: rng} }

// next draws one value.
func (g *gen) next() matching.Value {
	s := g.spec
	switch s.kind {
	case "const":
		return s.konst
	case "uniform":
		f := s.lo + g.rng.Float64()*(s.hi-s.lo)
		return matching.Value{Kind: matching.KindFloat, Float: math.Round(f*100) / 100}
	case "randint":
		return matching.Value{Kind: matching.KindInt, Int: int64(s.lo) + g.rng.Int64N(int64(s.hi-s.lo)+1)}
	case "zipf":
		u := g.rng.Float64()
		return s.items[sort.SearchFloat64s(s.cum, u)%len(s.items)]
	case "choice":
		return s.items[g.rng.IntN(len(s.items))]
	case "seq":
		g.n++
		return matching.Value{Kind: matching.KindInt, Int: g.n}
	}
	panic("testbed: unreachable generator kind " + s.kind)
}

// formatValue writes v in filter/publication syntax.
func formatValue(v matching.Value) string {
	switch v.Kind {
	case matching.KindString:
		return "'" + v.Str + "'"
	case matching.KindInt:
		return strconv.FormatInt(v.Int, 10)
	case matching.KindFloat:
		s := strconv.FormatFloat(v.Float, 'f', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		return s
	}
	return "?"
}

// attrGen is one publication attribute and its generator.
type attrGen struct {
	name string
	spec *genSpec
}

// parseAttrs turns the attrs table into generators, class first and the
// rest by name (TOML tables are unordered; a fixed order keeps runs
// reproducible). TOML numbers are constants.
func parseAttrs(m map[string]any) ([]attrGen, error) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == "class") != (names[j] == "class") {
			return names[i] == "class"
		}
		return names[i] < names[j]
	})
	var out []attrGen
	for _, k := range names {
		var g *genSpec
		var err error
		switch v := m[k].(type) {
		case string:
			g, err = parseGen(v)
		case int64:
			g = &genSpec{kind: "const", konst: matching.Value{Kind: matching.KindInt, Int: v}, text: strconv.FormatInt(v, 10)}
		case float64:
			g = &genSpec{kind: "const", konst: matching.Value{Kind: matching.KindFloat, Float: v}, text: formatValue(matching.Value{Kind: matching.KindFloat, Float: v})}
		default:
			err = fmt.Errorf("want a string (constant or generator) or a number, got %T", v)
		}
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %v", k, err)
		}
		out = append(out, attrGen{name: k, spec: g})
	}
	return out, nil
}

// filterTemplate is a filter with {generator} holes.
type filterTemplate struct {
	parts []string   // literal text; len(parts) == len(holes)+1
	holes []*genSpec // generators between the parts
}

func parseFilterTemplate(s string) (*filterTemplate, error) {
	t := &filterTemplate{}
	rest := s
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return nil, fmt.Errorf("unbalanced '}' in filter %q", s)
			}
			t.parts = append(t.parts, rest)
			return t, nil
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("unterminated '{' in filter %q", s)
		}
		if strings.IndexByte(rest[:i], '}') >= 0 {
			return nil, fmt.Errorf("unbalanced '}' in filter %q", s)
		}
		g, err := parseGen(rest[i+1 : i+j])
		if err != nil {
			return nil, fmt.Errorf("generator {%s}: %v", rest[i+1:i+j], err)
		}
		t.parts = append(t.parts, rest[:i])
		t.holes = append(t.holes, g)
		rest = rest[i+j+1:]
	}
}

// expand draws one filter; gens holds one instance per hole.
func (t *filterTemplate) expand(gens []*gen) string {
	var b strings.Builder
	for i, p := range t.parts {
		b.WriteString(p)
		if i < len(gens) {
			b.WriteString(formatValue(gens[i].next()))
		}
	}
	return b.String()
}

func (t *filterTemplate) instances(rng *rand.Rand) []*gen {
	out := make([]*gen, len(t.holes))
	for i, h := range t.holes {
		out[i] = h.instance(rng)
	}
	return out
}
