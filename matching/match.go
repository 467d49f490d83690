package matching

import (
	"fmt"
	"strings"
)

// Get returns the value of the named attribute. It relies on Attrs being
// sorted by name (the parsers return them so; see Sort).
func (p *Publication) Get(name string) (Value, bool) {
	a := p.Attrs
	if len(a) <= 8 {
		for i := range a {
			if a[i].Name == name {
				return a[i].Value, true
			}
		}
		return Value{}, false
	}
	lo, hi := 0, len(a)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a[m].Name < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(a) && a[lo].Name == name {
		return a[lo].Value, true
	}
	return Value{}, false
}

// Holds reports whether value v satisfies the predicate's operator and
// operand (the attribute name is not looked at). A type mismatch is false:
// string operators hold only for string values, numeric operators only for
// numbers (int and float compare by exact numeric value), isPresent with a
// string operand only for strings and with a numeric operand only for
// numbers.
func (p *Predicate) Holds(v Value) bool {
	return holds(p.Op, p.Value, v)
}

func holds(op Op, c, v Value) bool {
	if op.IsString() {
		if v.Kind != KindString || c.Kind != KindString {
			return false
		}
		s, k := v.Str, c.Str
		switch op {
		case OpEq:
			return s == k
		case OpNeq:
			return s != k
		case OpStrLt:
			return s < k
		case OpStrLe:
			return s <= k
		case OpStrGt:
			return s > k
		case OpStrGe:
			return s >= k
		case OpStrPrefix:
			return strings.HasPrefix(s, k)
		case OpStrPostfix:
			return strings.HasSuffix(s, k)
		case OpStrContains:
			return strings.Contains(s, k)
		}
		return false
	}
	if op.IsNumeric() {
		if !v.IsNumber() || !c.IsNumber() {
			return false
		}
		r := cmpNum(v, c)
		switch op {
		case OpNumEq:
			return r == 0
		case OpNumNe:
			return r != 0
		case OpLt:
			return r < 0
		case OpLe:
			return r <= 0
		case OpGt:
			return r > 0
		case OpGe:
			return r >= 0
		}
		return false
	}
	if op == OpIsPresent {
		if c.Kind == KindString {
			return v.Kind == KindString
		}
		return c.IsNumber() && v.IsNumber()
	}
	return false
}

// Match reports whether every predicate of f holds for p. A missing
// attribute or a type mismatch makes a predicate fail; extra publication
// attributes are ignored; the payload is never read.
func (f Filter) Match(p *Publication) bool {
	for i := range f.Preds {
		q := &f.Preds[i]
		v, ok := p.Get(q.Attr)
		if !ok || !holds(q.Op, q.Value, v) {
			return false
		}
	}
	return true
}

// Explain is Match with a reason: when ok is false, failed is the index in
// f.Preds of the first predicate that fails and why says why in words; when
// ok is true, failed is -1.
func (f Filter) Explain(p *Publication) (ok bool, failed int, why string) {
	for i := range f.Preds {
		q := &f.Preds[i]
		v, present := p.Get(q.Attr)
		if !present {
			return false, i, fmt.Sprintf("predicate %d %s: the publication has no attribute %q", i+1, q, q.Attr)
		}
		if holds(q.Op, q.Value, v) {
			continue
		}
		switch {
		case (q.Op.IsString() || q.Op == OpIsPresent && q.Value.Kind == KindString) && v.Kind != KindString:
			why = fmt.Sprintf("predicate %d %s: %s is a number, the operator wants a string", i+1, q, v)
		case (q.Op.IsNumeric() || q.Op == OpIsPresent && q.Value.IsNumber()) && !v.IsNumber():
			why = fmt.Sprintf("predicate %d %s: %s is a string, the operator wants a number", i+1, q, v)
		default:
			why = fmt.Sprintf("predicate %d %s: %s %s %s is false", i+1, q, v, q.Op, q.Value)
		}
		return false, i, why
	}
	return true, -1, ""
}

// Validate checks a filter built by hand against the rules ParseFilter
// enforces: at least one predicate, the first [class,eq,string], valid
// names, one predicate per attribute, operand types fitting the operators,
// and the limits. Index.Insert and Covers assume a valid filter.
func (f Filter) Validate() error {
	if len(f.Preds) == 0 {
		return fmt.Errorf("matching: empty filter: want [class,eq,...] first")
	}
	if len(f.Preds) > MaxPreds {
		return fmt.Errorf("matching: %d predicates, at most %d", len(f.Preds), MaxPreds)
	}
	// Duplicate attributes: a scan of the earlier predicates for small
	// filters (no allocation; every routing insert validates), a set
	// beyond.
	var seen map[string]bool
	if len(f.Preds) > 16 {
		seen = make(map[string]bool, len(f.Preds))
	}
	for i := range f.Preds {
		p := &f.Preds[i]
		if !ValidName(p.Attr) {
			return fmt.Errorf("matching: predicate %d: invalid attribute name %q", i+1, p.Attr)
		}
		dup := false
		if seen == nil {
			for j := 0; j < i && !dup; j++ {
				dup = f.Preds[j].Attr == p.Attr
			}
		} else {
			dup = seen[p.Attr]
			seen[p.Attr] = true
		}
		if dup {
			return fmt.Errorf("matching: predicate %d: attribute %q appears twice", i+1, p.Attr)
		}
		switch {
		case p.Op.IsString():
			if p.Value.Kind != KindString {
				return fmt.Errorf("matching: predicate %d: operator %s wants a string operand", i+1, p.Op)
			}
		case p.Op.IsNumeric():
			if !p.Value.IsNumber() {
				return fmt.Errorf("matching: predicate %d: operator %s wants a number operand", i+1, p.Op)
			}
		case p.Op == OpIsPresent:
			if p.Value.Kind != KindString && !p.Value.IsNumber() {
				return fmt.Errorf("matching: predicate %d: isPresent operand has no kind", i+1)
			}
		default:
			return fmt.Errorf("matching: predicate %d: invalid operator %d", i+1, p.Op)
		}
		if p.Value.Kind == KindString {
			if err := checkString(p.Value.Str); err != nil {
				return fmt.Errorf("matching: predicate %d: %v", i+1, err)
			}
		}
		if p.Value.Kind == KindFloat && (p.Value.Float != p.Value.Float || p.Value.Float > 1.7976931348623157e308 || p.Value.Float < -1.7976931348623157e308) {
			return fmt.Errorf("matching: predicate %d: operand must be a finite float", i+1)
		}
	}
	if f.Preds[0].Attr != "class" || f.Preds[0].Op != OpEq {
		return fmt.Errorf("matching: want [class,eq,...] as the first predicate")
	}
	return nil
}

// Admits reports whether advertisement f admits publication p (PADRES's
// publication conformance): every attribute of p, class included, is
// constrained by f, and its value satisfies f's predicate on it. Unlike
// Match, p may omit attributes that f constrains.
func (f Filter) Admits(p *Publication) bool {
	for _, a := range p.Attrs {
		ok := false
		for i := range f.Preds {
			if f.Preds[i].Attr == a.Name {
				ok = holds(f.Preds[i].Op, f.Preds[i].Value, a.Value)
				break
			}
		}
		if !ok {
			return false
		}
	}
	_, hasClass := p.Get("class")
	return hasClass
}
