package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/deltapub/deltapub/matching"
)

// simpleMatch is an exact matcher for the predicates the simulator's
// workloads generate (string eq/neq, integer comparisons, isPresent): a
// missing attribute or a type mismatch is "no match", as in PADRES. Other
// operators never match, so a workload using them must set sim.Match.
func simpleMatch(f matching.Filter, attrs []matching.Attr) bool {
	for _, p := range f.Preds {
		var v *matching.Value
		for i := range attrs {
			if attrs[i].Name == p.Attr {
				v = &attrs[i].Value
				break
			}
		}
		if v == nil {
			return false
		}
		if !predHolds(p, *v) {
			return false
		}
	}
	return true
}

func predHolds(p matching.Predicate, v matching.Value) bool {
	switch p.Op {
	case matching.OpIsPresent:
		return true
	case matching.OpEq, matching.OpNeq:
		if v.Kind != matching.KindString || p.Value.Kind != matching.KindString {
			return false
		}
		return (v.Str == p.Value.Str) == (p.Op == matching.OpEq)
	}
	if v.Kind != matching.KindInt || p.Value.Kind != matching.KindInt {
		return false
	}
	a, b := v.Int, p.Value.Int
	switch p.Op {
	case matching.OpNumEq:
		return a == b
	case matching.OpNumNe:
		return a != b
	case matching.OpLt:
		return a < b
	case matching.OpLe:
		return a <= b
	case matching.OpGt:
		return a > b
	case matching.OpGe:
		return a >= b
	}
	return false
}

var opText = map[matching.Op]string{
	matching.OpEq: "=", matching.OpNeq: "!=", matching.OpNumEq: "=", matching.OpNumNe: "!=",
	matching.OpLt: "<", matching.OpLe: "<=", matching.OpGt: ">", matching.OpGe: ">=",
	matching.OpIsPresent: "?",
}

func fmtValue(v matching.Value) string {
	switch v.Kind {
	case matching.KindInt:
		return strconv.FormatInt(v.Int, 10)
	case matching.KindFloat:
		return strconv.FormatFloat(v.Float, 'g', -1, 64)
	}
	return v.Str
}

// fmtFilter writes a filter in the scenario syntax: class=a x<5.
func fmtFilter(f matching.Filter) string {
	parts := make([]string, len(f.Preds))
	for i, p := range f.Preds {
		op, ok := opText[p.Op]
		if !ok {
			op = fmt.Sprintf("op%d", p.Op)
		}
		if p.Op == matching.OpIsPresent {
			parts[i] = p.Attr + "?"
			continue
		}
		parts[i] = p.Attr + op + fmtValue(p.Value)
	}
	return strings.Join(parts, " ")
}

func fmtAttrs(as []matching.Attr) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = a.Name + "=" + fmtValue(a.Value)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func parseValue(s string) matching.Value {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return matching.Value{Kind: matching.KindInt, Int: n}
	}
	return matching.Value{Kind: matching.KindString, Str: s}
}

// parsePred reads one predicate of the scenario syntax: attr=v, attr!=v,
// attr<n, attr<=n, attr>n, attr>=n, attr? (present). A value that parses as
// an integer is numeric; anything else is a string (eq/neq only).
func parsePred(tok string) (matching.Predicate, error) {
	if strings.HasSuffix(tok, "?") && len(tok) > 1 {
		return matching.Predicate{Attr: tok[:len(tok)-1], Op: matching.OpIsPresent, Value: matching.Value{Kind: matching.KindInt}}, nil
	}
	i := strings.IndexAny(tok, "=!<>")
	if i <= 0 {
		return matching.Predicate{}, fmt.Errorf("predicate %q: want attr=value, attr<n, attr<=n, attr>n, attr>=n, attr!=value or attr?", tok)
	}
	attr, rest := tok[:i], tok[i:]
	var op string
	for _, o := range []string{"<=", ">=", "!=", "<", ">", "="} {
		if strings.HasPrefix(rest, o) {
			op = o
			break
		}
	}
	val := rest[len(op):]
	if op == "" || val == "" {
		return matching.Predicate{}, fmt.Errorf("predicate %q: missing operator or value", tok)
	}
	v := parseValue(val)
	p := matching.Predicate{Attr: attr, Value: v}
	if v.Kind == matching.KindString {
		switch op {
		case "=":
			p.Op = matching.OpEq
		case "!=":
			p.Op = matching.OpNeq
		default:
			return p, fmt.Errorf("predicate %q: %s needs an integer", tok, op)
		}
		return p, nil
	}
	p.Op = map[string]matching.Op{"=": matching.OpNumEq, "!=": matching.OpNumNe, "<": matching.OpLt,
		"<=": matching.OpLe, ">": matching.OpGt, ">=": matching.OpGe}[op]
	return p, nil
}

// parseFilter reads space-separated predicates; the first must be class=...
// (the PADRES convention the core may rely on).
func parseFilter(toks []string) (matching.Filter, error) {
	var f matching.Filter
	for _, t := range toks {
		p, err := parsePred(t)
		if err != nil {
			return f, err
		}
		f.Preds = append(f.Preds, p)
	}
	if len(f.Preds) == 0 || f.Preds[0].Attr != "class" || f.Preds[0].Op != matching.OpEq {
		return f, fmt.Errorf("filter %q: must start with class=NAME", strings.Join(toks, " "))
	}
	return f, nil
}

// parseAttrs reads name=value pairs of a publication.
func parseAttrs(toks []string) ([]matching.Attr, error) {
	var as []matching.Attr
	for _, t := range toks {
		i := strings.IndexByte(t, '=')
		if i <= 0 || i == len(t)-1 {
			return nil, fmt.Errorf("attribute %q: want name=value", t)
		}
		as = append(as, matching.Attr{Name: t[:i], Value: parseValue(t[i+1:])})
	}
	return as, nil
}

// Workload generates random filters and publications over a small
// attribute space (class in a few names, x and y in 0..Range-1), so that a
// good share of publications match some subscription.
type Workload struct {
	Classes []string
	Range   int64
}

// DefaultWorkload: three classes, x and y in 0..9.
func DefaultWorkload() Workload { return Workload{Classes: []string{"a", "b", "c"}, Range: 10} }

func str(s string) matching.Value { return matching.Value{Kind: matching.KindString, Str: s} }
func num(n int64) matching.Value  { return matching.Value{Kind: matching.KindInt, Int: n} }

// Filter returns a random subscription filter.
func (w Workload) Filter(r *rand.Rand) matching.Filter {
	f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: str(w.Classes[r.IntN(len(w.Classes))])}}}
	ops := []matching.Op{matching.OpNumEq, matching.OpLt, matching.OpLe, matching.OpGt, matching.OpGe, matching.OpNumNe}
	for _, a := range []string{"x", "y"} {
		if r.IntN(2) == 0 {
			f.Preds = append(f.Preds, matching.Predicate{Attr: a, Op: ops[r.IntN(len(ops))], Value: num(r.Int64N(w.Range))})
		}
	}
	return f
}

// Publication returns random attributes.
func (w Workload) Publication(r *rand.Rand) []matching.Attr {
	return []matching.Attr{
		{Name: "class", Value: str(w.Classes[r.IntN(len(w.Classes))])},
		{Name: "x", Value: num(r.Int64N(w.Range))},
		{Name: "y", Value: num(r.Int64N(w.Range))},
	}
}
