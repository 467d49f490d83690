package matching

import (
	"math"
	"strings"
)

// Covers reports whether every publication that matches b also matches a
// (a "covers" b: the routing layer can drop b where a is already routed).
// It is exact for valid filters (Validate: one predicate per attribute):
//
//   - if b matches nothing (some predicate of b is unsatisfiable, such as
//     [x,str-lt,”] or [x,<,-1.7976931348623157e308]), a covers b;
//   - otherwise every predicate of a must constrain an attribute that b
//     constrains too (else a publication without that attribute matches b
//     but not a), and the set of values satisfying b's predicate must lie
//     inside the set satisfying a's predicate.
//
// The set inclusion is decided by looking for a witness value that
// satisfies b's predicate and not a's among a finite candidate set built
// from the two operands; docs/filters.md argues why the candidate set
// always contains a witness when one exists. Numbers range over the
// values the language can write (every int64 and every finite float64,
// compared exactly); strings over all byte strings, so at the edges (a
// witness that needs a control character) Covers may answer false where
// no writable publication tells the two apart — false is always safe.
func Covers(a, b Filter) bool {
	for i := range b.Preds {
		if !satisfiable(&b.Preds[i]) {
			return true
		}
	}
	for i := range a.Preds {
		pa := &a.Preds[i]
		var pb *Predicate
		for j := range b.Preds {
			if b.Preds[j].Attr == pa.Attr {
				pb = &b.Preds[j]
				break
			}
		}
		if pb == nil || !implies(pb, pa) {
			return false
		}
	}
	return true
}

// Pinned returns the string value when p admits exactly one value, a
// string (ok false otherwise): eq v admits v; str-le ” and str-lt '\x00'
// admit ” alone; every other string predicate admits none or infinitely
// many (a longer string, or one of more 0xff bytes, always fits), and a
// numeric one is not pinned here. Covering indexes filters by it: a
// filter whose predicate on x is pinned to v covers only filters whose
// predicate on x is pinned to v as well.
func (p *Predicate) Pinned() (string, bool) {
	if p.Value.Kind != KindString {
		return "", false
	}
	switch {
	case p.Op == OpEq:
		return p.Value.Str, true
	case p.Op == OpStrLe && p.Value.Str == "", p.Op == OpStrLt && p.Value.Str == "\x00":
		return "", true
	}
	return "", false
}

// Satisfiable reports whether some publication matches f.
func (f Filter) Satisfiable() bool {
	for i := range f.Preds {
		if !satisfiable(&f.Preds[i]) {
			return false
		}
	}
	return true
}

func satisfiable(p *Predicate) bool {
	switch p.Op {
	case OpStrLt:
		return p.Value.Kind == KindString && p.Value.Str != "" // "" is below every other string
	case OpLt:
		if p.Value.Kind == KindInt || p.Value.Kind == KindFloat && p.Value.Float > -math.MaxFloat64 {
			return true // predD of an int always finds a float below it; minD lies below such a float
		}
		_, ok := predD(p.Value)
		return p.Value.IsNumber() && ok
	case OpGt:
		if p.Value.Kind == KindInt || p.Value.Kind == KindFloat && p.Value.Float < math.MaxFloat64 {
			return true // succD of an int always finds a float above it; maxD lies above such a float
		}
		_, ok := succD(p.Value)
		return p.Value.IsNumber() && ok
	}
	if p.Op.IsString() {
		return p.Value.Kind == KindString
	}
	if p.Op.IsNumeric() {
		return p.Value.IsNumber()
	}
	return p.Op == OpIsPresent && (p.Value.Kind == KindString || p.Value.IsNumber())
}

// stringFamily reports whether p holds only for strings (else only for
// numbers).
func stringFamily(p *Predicate) bool {
	return p.Op.IsString() || p.Op == OpIsPresent && p.Value.Kind == KindString
}

// implies reports whether every value satisfying pb satisfies pa; pb is
// satisfiable.
func implies(pb, pa *Predicate) bool {
	if stringFamily(pb) != stringFamily(pa) {
		return false // a witness of pb is of the wrong type for pa
	}
	if pb.Op == OpEq || pb.Op == OpNumEq {
		// One value (an int and an equal float are the same number).
		return holds(pa.Op, pa.Value, pb.Value)
	}
	if pa.Op == OpIsPresent {
		return true // same family
	}
	if stringFamily(pb) {
		cs, ds := "", ""
		if pb.Value.Kind == KindString {
			cs = pb.Value.Str
		}
		if pa.Value.Kind == KindString {
			ds = pa.Value.Str
		}
		for _, s := range stringCandidates(cs, ds) {
			if holds(pb.Op, pb.Value, Str(s)) && !holds(pa.Op, pa.Value, Str(s)) {
				return false
			}
		}
		return true
	}
	if r, ok := impliesSmall(pb, pa); ok {
		return r
	}
	var buf [9]Value
	for _, w := range numberCandidates(&buf, pb.Value, pa.Value) {
		if holds(pb.Op, pb.Value, w) && !holds(pa.Op, pa.Value, w) {
			return false
		}
	}
	return true
}

// smallMax bounds the operands impliesSmall decides: up to 2^52 in
// magnitude every int64 is a float64, so there D is the float64 grid,
// and D holds a value between two operands exactly when the next
// float64 above the lower one lies below the higher (between).
const smallMax = 1<<52 - 1

// smallNum returns the number v as a float64 if its magnitude is at most
// smallMax (ok false: not such a number).
func smallNum(v Value) (float64, bool) {
	switch v.Kind {
	case KindInt:
		if v.Int >= -smallMax && v.Int <= smallMax {
			return float64(v.Int), true
		}
	case KindFloat:
		if math.Abs(v.Float) <= smallMax { // false for NaN
			return v.Float, true
		}
	}
	return 0, false
}

// between reports whether D holds a value strictly between lo and hi,
// both of magnitude at most smallMax.
func between(lo, hi float64) bool {
	return lo < hi && math.Nextafter(lo, math.Inf(1)) < hi
}

// impliesSmall is implies for numeric predicates other than = and
// isPresent on the pb side, both operands of magnitude at most smallMax
// (ok false: not such a pair). The value sets are then intervals (or D
// without a point) with ends at the operands or ±MaxFloat64, and
// inclusion is decided by comparing the operands, and, where an open end
// meets an open end, by whether D holds a value between them: the
// answer numberCandidates' witnesses give, without building them
// (TestImpliesSmall compares the two). Float operands take this path
// too: the stock workload's prices are floats, and covering tests them
// on every insert.
func impliesSmall(pb, pa *Predicate) (bool, bool) {
	c, okc := smallNum(pb.Value)
	d, okd := smallNum(pa.Value)
	if !okc || !okd {
		return false, false
	}
	switch pb.Op {
	case OpNumNe, OpLt, OpLe, OpGt, OpGe:
	default:
		return false, false
	}
	switch pa.Op {
	case OpNumEq:
		return false, true // an infinite set is not inside a point
	case OpNumNe: // d outside pb's set
		switch pb.Op {
		case OpNumNe:
			return c == d, true
		case OpLt:
			return d >= c, true
		case OpLe:
			return d > c, true
		case OpGt:
			return d <= c, true
		default: // OpGe
			return d < c, true
		}
	case OpLt:
		switch pb.Op {
		case OpLt:
			return c <= d, true
		case OpLe:
			return c < d, true
		}
		return false, true
	case OpLe:
		switch pb.Op {
		case OpLt: // nothing of D in (d, c)
			return !between(d, c), true
		case OpLe:
			return c <= d, true
		}
		return false, true
	case OpGt:
		switch pb.Op {
		case OpGt:
			return c >= d, true
		case OpGe:
			return c > d, true
		}
		return false, true
	case OpGe:
		switch pb.Op {
		case OpGt: // nothing of D in (c, d)
			return !between(c, d), true
		case OpGe:
			return c >= d, true
		}
		return false, true
	}
	return false, false
}

var (
	minD = Float(-math.MaxFloat64)
	maxD = Float(math.MaxFloat64)
)

// numberCandidates returns numbers among which a witness of "pb holds
// and pa does not" is found whenever one exists, for numeric-family
// predicates with operands c and d.
//
// Every numeric predicate's value set is a union of at most two intervals
// of D (the int64 and finite float64 values, ordered exactly) whose end
// points lie in {minD, maxD, c, pred(c), succ(c)} for its operand c. The
// set "pb and not pa" is then a union of intervals whose lower ends lie
// among those points for both operands, so if it is not empty it
// contains one of them.
func numberCandidates(buf *[9]Value, c, d Value) []Value {
	out := buf[:0]
	out = append(out, minD, maxD)
	for _, x := range [2]Value{c, d} {
		if x.IsNumber() {
			out = append(out, x)
			if s, ok := succD(x); ok {
				out = append(out, s)
			}
			if s, ok := predD(x); ok {
				out = append(out, s)
			}
		}
	}
	if len(out) == 2 {
		out = append(out, Int(0))
	}
	return out
}

// stringCandidates covers every pair of string operators (byte-wise order):
// interval-shaped sets (eq, str-lt/le/gt/ge, str-prefix) have their end
// points among x, x+"\x00", x with one byte incremented and cut, and the
// empty string; str-postfix and str-contains witnesses are found by
// padding the operand with the smallest or largest byte on the side that
// keeps (or breaks) the required suffix or substring, or by joining the
// two operands; a padding of len(other)+1 bytes is always enough to get
// past (or below) the other operand in byte order.
func stringCandidates(c, d string) []string {
	out := []string{"", "\x00", "\x01", "\xff", c + d, d + c}
	long := len(c) + len(d) + 2
	out = append(out, strings.Repeat("\xff", long))
	for _, pair := range [2][2]string{{c, d}, {d, c}} {
		x, other := pair[0], pair[1]
		k := len(other) + 1
		out = append(out,
			x, x+"\x00", x+"\x01", x+"\xff", "\x00"+x, "\x01"+x, "\xff"+x,
			strings.Repeat("\x00", k)+x, strings.Repeat("\xff", k)+x,
			x+strings.Repeat("\xff", k), x+strings.Repeat("\x00", k))
		for i := 0; i < len(x); i++ {
			out = append(out, x[:i])
			if x[i] < 0xff {
				out = append(out, x[:i]+string([]byte{x[i] + 1}))
			}
			if x[i] > 0 {
				out = append(out, x[:i]+string([]byte{x[i] - 1})+strings.Repeat("\xff", k))
			}
		}
	}
	return out
}

// succD returns the smallest int64 or finite float64 greater than x.
func succD(x Value) (Value, bool) {
	var best Value
	ok := false
	consider := func(v Value) {
		if !ok || cmpNum(v, best) < 0 {
			best, ok = v, true
		}
	}
	// Smallest int64 > x.
	switch x.Kind {
	case KindInt:
		if x.Int < math.MaxInt64 {
			consider(Int(x.Int + 1))
		}
	case KindFloat:
		switch {
		case x.Float < -9223372036854775808.0:
			consider(Int(math.MinInt64))
		case x.Float < 9223372036854775807.0: // float64(MaxInt64) is 2^63
			t := math.Floor(x.Float)
			if t+1 < 9223372036854775808.0 {
				consider(Int(int64(t) + 1))
			}
		}
	}
	// Smallest float64 > x.
	switch x.Kind {
	case KindFloat:
		if n := math.Nextafter(x.Float, math.Inf(1)); !math.IsInf(n, 0) {
			consider(Float(n))
		}
	case KindInt:
		f := float64(x.Int)
		if cmpFloatInt(f, x.Int) <= 0 {
			f = math.Nextafter(f, math.Inf(1))
		}
		consider(Float(f))
	}
	return best, ok
}

// predD returns the largest int64 or finite float64 less than x.
func predD(x Value) (Value, bool) {
	var best Value
	ok := false
	consider := func(v Value) {
		if !ok || cmpNum(v, best) > 0 {
			best, ok = v, true
		}
	}
	// Largest int64 < x.
	switch x.Kind {
	case KindInt:
		if x.Int > math.MinInt64 {
			consider(Int(x.Int - 1))
		}
	case KindFloat:
		switch {
		case x.Float >= 9223372036854775808.0:
			consider(Int(math.MaxInt64))
		case x.Float > -9223372036854775808.0:
			t := math.Ceil(x.Float)
			consider(Int(int64(t) - 1))
		}
	}
	// Largest float64 < x.
	switch x.Kind {
	case KindFloat:
		if n := math.Nextafter(x.Float, math.Inf(-1)); !math.IsInf(n, 0) {
			consider(Float(n))
		}
	case KindInt:
		f := float64(x.Int)
		if cmpFloatInt(f, x.Int) >= 0 {
			f = math.Nextafter(f, math.Inf(-1))
		}
		consider(Float(f))
	}
	return best, ok
}
