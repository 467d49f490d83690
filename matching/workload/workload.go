// Package workload generates subscriptions and publications for the
// benchmarks, the simulator and the testbed. Every generator draws only
// from the *rand.Rand (math/rand/v2) it is given, so a seed replays a
// workload exactly.
//
//   - Stock: quotes of 1,000 symbols. A subscription is
//     [class,eq,'STOCK'],[symbol,eq,S],[price,OP,X], and one in four adds
//     [volume,>,V] or [volume,<,V]. S is Zipf-skewed over the symbols
//     (s = 1.1: the most popular symbol draws about 12% of subscriptions),
//     OP is uniform over =, <>, <, <=, >, >=, and X is within ±10% of the
//     symbol's reference price, in cents. A publication is a quote
//     [class,'STOCK'],[symbol,S],[price,P],[volume,V] with S uniform over
//     the symbols (a feed quotes every listed stock; interest, not
//     quoting, is skewed; set PubSkew to draw S from the subscriptions'
//     Zipf instead), P within ±10% of the reference price and V uniform
//     in [0, 100000).
//   - Ranges: five numeric attributes a0..a4, publication values uniform
//     integers in [0, 1000000). A subscription is [class,eq,'RANGES'] and
//     two or three one-sided ranges (<, <=, >, >=) on distinct attributes,
//     no other equality; each range admits a fraction of the values drawn
//     uniformly from (0, 10%] (its bound lies in the outer tenth on its
//     side), so a subscription matches about 1 publication in 1,000.
//   - Random: small filters and publications over three attributes and a
//     handful of values, every operator, ints and floats mixed, so random
//     pairs match often (about a third of the time): for brute-force
//     tests.
//   - Small: the simulator's workload. A subscription is [class,eq,C] and,
//     each with probability 1/2, [x,OP,N] and [y,OP,N] (OP uniform over
//     =, <, <=, >, >=, <>; N uniform in [0, Range)); a publication is
//     [class,C],[x,N],[y,N]. With a few classes and Range 10, a good share
//     of publications match some subscription.
package workload

import (
	"math"
	"math/rand/v2"

	"github.com/deltapub/deltapub/matching"
)

// Symbols is the number of stock symbols.
const Symbols = 1000

// Symbol returns the name of stock symbol i (0 is the most popular): three
// capital letters, AAA, AAB, ...
func Symbol(i int) string {
	return string([]byte{byte('A' + i/676%26), byte('A' + i/26%26), byte('A' + i%26)})
}

// refPrice is the reference price of symbol i, in [10, 500).
func refPrice(i int) float64 { return 10 + float64((i*7919)%49000)/100 }

// Stock generates the stock workload.
type Stock struct {
	// PubSkew draws publication symbols from the same Zipf skew as the
	// subscriptions, so hot symbols are also the most quoted.
	PubSkew bool

	r       *rand.Rand
	zipf    *rand.Zipf
	symbols [Symbols]string
}

// NewStock returns a stock workload drawing from r.
func NewStock(r *rand.Rand) *Stock {
	s := &Stock{r: r, zipf: rand.NewZipf(r, 1.1, 1, Symbols-1)}
	for i := range s.symbols {
		s.symbols[i] = Symbol(i)
	}
	return s
}

var numOps = [...]matching.Op{matching.OpNumEq, matching.OpNumNe, matching.OpLt, matching.OpLe, matching.OpGt, matching.OpGe}

func cents(x float64) float64 { return math.Round(x*100) / 100 }

// Filter returns a new stock subscription.
func (s *Stock) Filter() matching.Filter {
	i := int(s.zipf.Uint64())
	f := matching.Filter{Preds: make([]matching.Predicate, 3, 4)}
	f.Preds[0] = matching.Predicate{Attr: "class", Op: matching.OpEq, Value: matching.Str("STOCK")}
	f.Preds[1] = matching.Predicate{Attr: "symbol", Op: matching.OpEq, Value: matching.Str(s.symbols[i])}
	x := cents(refPrice(i) * (0.9 + 0.2*s.r.Float64()))
	f.Preds[2] = matching.Predicate{Attr: "price", Op: numOps[s.r.IntN(len(numOps))], Value: matching.Float(x)}
	if s.r.IntN(4) == 0 {
		op := matching.OpGt
		if s.r.IntN(2) == 0 {
			op = matching.OpLt
		}
		f.Preds = append(f.Preds, matching.Predicate{Attr: "volume", Op: op, Value: matching.Int(int64(s.r.IntN(100000)))})
	}
	return f
}

// Publication returns a new quote.
func (s *Stock) Publication() matching.Publication {
	var i int
	if s.PubSkew {
		i = int(s.zipf.Uint64())
	} else {
		i = s.r.IntN(Symbols)
	}
	p := matching.Publication{Attrs: []matching.Attr{
		{Name: "class", Value: matching.Str("STOCK")},
		{Name: "price", Value: matching.Float(cents(refPrice(i) * (0.9 + 0.2*s.r.Float64())))},
		{Name: "symbol", Value: matching.Str(s.symbols[i])},
		{Name: "volume", Value: matching.Int(int64(s.r.IntN(100000)))},
	}}
	return p // already sorted by name
}

// RangeAttrs are the attributes of the ranges workload.
var RangeAttrs = [5]string{"a0", "a1", "a2", "a3", "a4"}

// RangeMax bounds the values of the ranges workload: [0, RangeMax).
const RangeMax = 1000000

// Ranges generates the ranges workload.
type Ranges struct{ r *rand.Rand }

// NewRanges returns a ranges workload drawing from r.
func NewRanges(r *rand.Rand) *Ranges { return &Ranges{r: r} }

// Filter returns a new ranges subscription.
func (g *Ranges) Filter() matching.Filter {
	n := 2 + g.r.IntN(2)
	f := matching.Filter{Preds: make([]matching.Predicate, 1, 1+n)}
	f.Preds[0] = matching.Predicate{Attr: "class", Op: matching.OpEq, Value: matching.Str("RANGES")}
	perm := g.r.Perm(len(RangeAttrs))
	for _, a := range perm[:n] {
		frac := 1 - g.r.Float64() // (0, 1]
		width := int64(math.Ceil(frac * RangeMax / 10))
		var op matching.Op
		var x int64
		switch g.r.IntN(4) {
		case 0:
			op, x = matching.OpLt, width
		case 1:
			op, x = matching.OpLe, width-1
		case 2:
			op, x = matching.OpGt, RangeMax-width-1
		default:
			op, x = matching.OpGe, RangeMax-width
		}
		f.Preds = append(f.Preds, matching.Predicate{Attr: RangeAttrs[a], Op: op, Value: matching.Int(x)})
	}
	return f
}

// Publication returns a new ranges publication.
func (g *Ranges) Publication() matching.Publication {
	p := matching.Publication{Attrs: make([]matching.Attr, 0, 1+len(RangeAttrs))}
	for _, a := range RangeAttrs {
		p.Attrs = append(p.Attrs, matching.Attr{Name: a, Value: matching.Int(int64(g.r.IntN(RangeMax)))})
	}
	p.Attrs = append(p.Attrs, matching.Attr{Name: "class", Value: matching.Str("RANGES")})
	return p // a0..a4 < class in byte order: sorted
}

// Random generates small random filters and publications.
type Random struct{ r *rand.Rand }

// NewRandom returns a random workload drawing from r.
func NewRandom(r *rand.Rand) *Random { return &Random{r: r} }

// RandomAttrs are the non-class attributes of the Random workload.
var RandomAttrs = [3]string{"x", "y", "z"}

// RandomStrings and RandomNumbers are the operands and values the Random
// workload draws from; the byte values 0x00 and 0xff are deliberately not
// among them (they cannot be written in the text forms).
var (
	RandomStrings = []string{"", "a", "b", "ab", "ba", "bb", "abc"}
	RandomNumbers = []matching.Value{
		matching.Int(-1), matching.Int(0), matching.Int(1), matching.Int(2), matching.Int(3),
		matching.Float(-0.5), matching.Float(0.5), matching.Float(1.5), matching.Float(2.0), matching.Float(0),
	}
)

func (g *Random) str() matching.Value {
	return matching.Str(RandomStrings[g.r.IntN(len(RandomStrings))])
}

func (g *Random) num() matching.Value { return RandomNumbers[g.r.IntN(len(RandomNumbers))] }

func (g *Random) class() matching.Value {
	if g.r.IntN(8) == 0 {
		return matching.Str("B")
	}
	return matching.Str("A")
}

// Filter returns a random valid filter: class A (or sometimes B), then
// each of x, y, z with probability 1/2, any operator.
func (g *Random) Filter() matching.Filter {
	f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: g.class()}}}
	for _, a := range RandomAttrs {
		if g.r.IntN(2) == 0 {
			continue
		}
		op := matching.Op(1 + g.r.IntN(int(matching.OpIsPresent)))
		var v matching.Value
		switch {
		case op.IsString():
			v = g.str()
		case op.IsNumeric():
			v = g.num()
		default:
			if g.r.IntN(2) == 0 {
				v = g.str()
			} else {
				v = g.num()
			}
		}
		f.Preds = append(f.Preds, matching.Predicate{Attr: a, Op: op, Value: v})
	}
	return f
}

// Publication returns a random publication: class, then each of x, y, z
// with probability 3/4, half strings, half numbers.
func (g *Random) Publication() matching.Publication {
	p := matching.Publication{Attrs: []matching.Attr{{Name: "class", Value: g.class()}}}
	for _, a := range RandomAttrs {
		if g.r.IntN(4) == 0 {
			continue
		}
		v := g.num()
		if g.r.IntN(2) == 0 {
			v = g.str()
		}
		p.Attrs = append(p.Attrs, matching.Attr{Name: a, Value: v})
	}
	p.Sort()
	return p
}

// Small generates the simulator's workload (see the package comment).
type Small struct {
	// Classes are the class names drawn from, uniformly.
	Classes []string
	// Range bounds the values of x and y: [0, Range).
	Range int64

	r *rand.Rand
}

// NewSmall returns a small workload drawing from r over classes a, b and
// c, x and y in [0, 10).
func NewSmall(r *rand.Rand) *Small {
	return &Small{Classes: []string{"a", "b", "c"}, Range: 10, r: r}
}

// smallOps is the order Small draws its operators in (not numOps's: the
// simulator's fuzz seeds replay these draws).
var smallOps = [...]matching.Op{matching.OpNumEq, matching.OpLt, matching.OpLe, matching.OpGt, matching.OpGe, matching.OpNumNe}

// Filter returns a new small subscription.
func (g *Small) Filter() matching.Filter {
	f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str(g.Classes[g.r.IntN(len(g.Classes))])}}}
	for _, a := range [...]string{"x", "y"} {
		if g.r.IntN(2) == 0 {
			f.Preds = append(f.Preds, matching.Predicate{Attr: a, Op: smallOps[g.r.IntN(len(smallOps))], Value: matching.Int(g.r.Int64N(g.Range))})
		}
	}
	return f
}

// Publication returns a new small publication.
func (g *Small) Publication() matching.Publication {
	return matching.Publication{Attrs: []matching.Attr{
		{Name: "class", Value: matching.Str(g.Classes[g.r.IntN(len(g.Classes))])},
		{Name: "x", Value: matching.Int(g.r.Int64N(g.Range))},
		{Name: "y", Value: matching.Int(g.r.Int64N(g.Range))},
	}} // class < x < y: sorted
}
