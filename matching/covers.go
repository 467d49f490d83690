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
		if p.Value.Kind == KindInt {
			return true // predD of an int always finds a float below it
		}
		_, ok := predD(p.Value)
		return p.Value.IsNumber() && ok
	case OpGt:
		if p.Value.Kind == KindInt {
			return true // succD of an int always finds a float above it
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
	if r, ok := impliesSmallInts(pb, pa); ok {
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

// smallIntMax bounds the int operands impliesSmallInts decides: below
// 2^52 in magnitude, every half-integer next to an operand is a float64
// of D, so a nonempty open interval between two such operands holds a
// value of D, and the value sets compare as real intervals.
const smallIntMax = 1<<52 - 1

// impliesSmallInts is implies for numeric predicates other than = and
// isPresent on the pb side, both operands ints of magnitude at most
// smallIntMax (ok false: not such a pair). The value sets are then real
// intervals (or the reals without a point) cut to D, and D holds a value
// in every nonempty gap between them (see smallIntMax; the unbounded ends
// hold ±MaxFloat64), so inclusion of the real sets is inclusion in D:
// the answer numberCandidates' witnesses give, without building them
// (TestImpliesSmallInts compares the two).
func impliesSmallInts(pb, pa *Predicate) (bool, bool) {
	if pb.Value.Kind != KindInt || pa.Value.Kind != KindInt {
		return false, false
	}
	c, d := pb.Value.Int, pa.Value.Int
	if c < -smallIntMax || c > smallIntMax || d < -smallIntMax || d > smallIntMax {
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
		case OpLt, OpLe:
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
		case OpGt, OpGe:
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
