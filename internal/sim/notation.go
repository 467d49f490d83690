package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/deltapub/deltapub/matching"
)

// The scenario files and the fuzzer's plans write filters and publications
// in a short notation: class=a x<5 y!=3 for [class,eq,'a'],[x,<,5],[y,<>,3],
// and class=a x=3 for [class,'a'],[x,3]. It is only a notation: what a
// filter means is package matching's (Filter.Match), and a scenario may
// write any filter in the PADRES syntax instead (scenario.go).

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
		if !ok || p.Value.Kind == matching.KindFloat || p.Op == matching.OpIsPresent && p.Value.Kind == matching.KindString {
			parts[i] = p.String() // no short form: PADRES's
			continue
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

// parsePred reads one predicate of the short notation: attr=v, attr!=v,
// attr<n, attr<=n, attr>n, attr>=n, attr? (a number present). A value that
// parses as an integer is numeric; anything else is a string (eq/neq only).
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
