package matching

import (
	"math"
	"strconv"
	"strings"
)

// Limits on what the parsers accept. Input past a limit is rejected with an
// error naming the limit; nothing is truncated silently.
const (
	// MaxInputLen bounds the text of one filter or publication (bytes).
	MaxInputLen = 64 << 10
	// MaxPreds bounds the predicates of a filter and the attributes of a
	// publication.
	MaxPreds = 256
	// MaxNameLen bounds an attribute name (bytes).
	MaxNameLen = 128
	// MaxStringLen bounds a string value (bytes, after unquoting).
	MaxStringLen = 4096
	// maxNumberLen bounds a number token (bytes); the longest float64 in
	// shortest fixed notation (5e-324) is 327 bytes.
	maxNumberLen = 400
)

// Str, Int and Float build values.
func Str(s string) Value       { return Value{Kind: KindString, Str: s} }
func Int(i int64) Value        { return Value{Kind: KindInt, Int: i} }
func Float(f float64) Value    { return Value{Kind: KindFloat, Float: f} }
func (v Value) IsNumber() bool { return v.Kind == KindInt || v.Kind == KindFloat }

func (k Kind) String() string {
	switch k {
	case KindString:
		return "string"
	case KindInt:
		return "int"
	case KindFloat:
		return "float"
	}
	return "invalid"
}

// String formats v as the PADRES syntax writes it: strings single-quoted
// (with \' and \\ escaped, an extension: PADRES has no escapes), integers in
// decimal, floats always with a '.' so they read back as floats.
func (v Value) String() string {
	switch v.Kind {
	case KindString:
		return quote(v.Str)
	case KindInt:
		return strconv.FormatInt(v.Int, 10)
	case KindFloat:
		return formatFloat(v.Float)
	}
	return "<invalid>"
}

func formatFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}

func quote(s string) string {
	if !strings.ContainsAny(s, `'\`) {
		return "'" + s + "'"
	}
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('\'')
	return b.String()
}

// Equal reports whether two values are the same value: same kind and same
// content. Int 5 and Float 5.0 are not Equal (they print differently) but
// compare equal numerically (see Compare).
func (v Value) Equal(w Value) bool {
	if v.Kind != w.Kind {
		return false
	}
	switch v.Kind {
	case KindString:
		return v.Str == w.Str
	case KindInt:
		return v.Int == w.Int
	case KindFloat:
		return v.Float == w.Float || (math.IsNaN(v.Float) && math.IsNaN(w.Float))
	}
	return true
}

// cmpNum compares two numeric values by their exact mathematical value:
// int64 and float64 are compared without rounding either one (so
// 9007199254740993 > 9007199254740992.0). NaN never occurs: the parsers
// cannot produce it.
func cmpNum(a, b Value) int {
	switch {
	case a.Kind == KindInt && b.Kind == KindInt:
		return cmp64(a.Int, b.Int)
	case a.Kind == KindFloat && b.Kind == KindFloat:
		return cmpF(a.Float, b.Float)
	case a.Kind == KindInt:
		return -cmpFloatInt(b.Float, a.Int)
	default:
		return cmpFloatInt(a.Float, b.Int)
	}
}

func cmp64(a, b int64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

func cmpF(a, b float64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// cmpFloatInt compares f with i exactly.
func cmpFloatInt(f float64, i int64) int {
	// Every float64 at or beyond ±2^63 is outside int64's range.
	if f >= 9223372036854775808.0 {
		return 1
	}
	if f < -9223372036854775808.0 {
		return -1
	}
	t := math.Trunc(f)
	ti := int64(t) // exact: |t| < 2^63, and t is integral
	if ti != i {
		return cmp64(ti, i)
	}
	return cmpF(f, t) // same integer part: the fraction decides
}

// numKey is a hashable key for a numeric value such that two numbers that
// compare equal have the same key: integral floats in int64 range become
// ints, -0.0 becomes 0.
type numKey struct {
	float bool
	bits  uint64
}

func keyOf(v Value) numKey {
	if v.Kind == KindInt {
		return numKey{bits: uint64(v.Int)}
	}
	f := v.Float
	if f == math.Trunc(f) && f >= -9223372036854775808.0 && f < 9223372036854775808.0 {
		return numKey{bits: uint64(int64(f))}
	}
	return numKey{float: true, bits: math.Float64bits(f)}
}
