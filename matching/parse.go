package matching

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

var opNames = [...]string{
	OpInvalid:     "invalid",
	OpEq:          "eq",
	OpNeq:         "neq",
	OpStrLt:       "str-lt",
	OpStrLe:       "str-le",
	OpStrGt:       "str-gt",
	OpStrGe:       "str-ge",
	OpStrPrefix:   "str-prefix",
	OpStrPostfix:  "str-postfix",
	OpStrContains: "str-contains",
	OpNumEq:       "=",
	OpNumNe:       "<>",
	OpLt:          "<",
	OpLe:          "<=",
	OpGt:          ">",
	OpGe:          ">=",
	OpIsPresent:   "isPresent",
}

const opList = "eq, neq, str-lt, str-le, str-gt, str-ge, str-prefix, str-postfix, str-contains, =, <>, <, <=, >, >=, isPresent"

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// IsString reports whether o takes a string operand (eq … str-contains).
func (o Op) IsString() bool { return o >= OpEq && o <= OpStrContains }

// IsNumeric reports whether o takes a numeric operand (= … >=).
func (o Op) IsNumeric() bool { return o >= OpNumEq && o <= OpGe }

// ParseOp returns the operator written s (case-sensitive, as in PADRES).
func ParseOp(s string) (Op, bool) {
	for i := OpEq; i <= OpIsPresent; i++ {
		if opNames[i] == s {
			return i, true
		}
	}
	return OpInvalid, false
}

// Error is a parse error: Col is the 1-based byte column of the offending
// input, Msg says what was expected.
type Error struct {
	Col int
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("matching: col %d: %s", e.Col, e.Msg) }

type parser struct {
	s   string
	pos int
}

func (p *parser) errf(pos int, format string, args ...any) error {
	return &Error{Col: pos + 1, Msg: fmt.Sprintf(format, args...)}
}

// ws skips spaces, tabs, CR and LF. Unlike PADRES, a space after a name is
// fine (docs/filters.md).
func (p *parser) ws() {
	for p.pos < len(p.s) {
		switch p.s[p.pos] {
		case ' ', '\t', '\r', '\n':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) describe() string {
	if p.pos >= len(p.s) {
		return "end of input"
	}
	r, _ := utf8.DecodeRuneInString(p.s[p.pos:])
	return strconv.QuoteRune(r)
}

func (p *parser) expect(c byte, what string) error {
	p.ws()
	if p.pos < len(p.s) && p.s[p.pos] == c {
		p.pos++
		return nil
	}
	return p.errf(p.pos, "want %q %s, got %s", c, what, p.describe())
}

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':' || c == '/'
}

func isNameByte(c byte) bool {
	return isNameStart(c) || c >= '0' && c <= '9' || c == '-'
}

// ValidName reports whether s can be an attribute name: a letter, '_', ':'
// or '/' followed by letters, digits, '_', '-', ':' or '/' (PADRES's ANAME),
// at most MaxNameLen bytes.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameLen || !isNameStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func (p *parser) name(what string) (string, error) {
	p.ws()
	start := p.pos
	if p.pos >= len(p.s) || !isNameStart(p.s[p.pos]) {
		return "", p.errf(p.pos, "want %s (a name: letter, '_', ':' or '/' first), got %s", what, p.describe())
	}
	for p.pos < len(p.s) && isNameByte(p.s[p.pos]) {
		p.pos++
	}
	if p.pos-start > MaxNameLen {
		return "", p.errf(start, "%s longer than %d bytes", what, MaxNameLen)
	}
	return p.s[start:p.pos], nil
}

func (p *parser) op() (Op, error) {
	p.ws()
	start := p.pos
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c == ',' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '[' || c == '\'' || c == '"' {
			break
		}
		p.pos++
		if p.pos-start > 20 {
			break
		}
	}
	tok := p.s[start:p.pos]
	if tok == "" {
		return OpInvalid, p.errf(start, "want an operator (one of %s), got %s", opList, p.describe())
	}
	o, ok := ParseOp(tok)
	if !ok {
		hint := ""
		switch tok {
		case "!=":
			hint = " (use <> for numbers, neq for strings)"
		case "==":
			hint = " (use = for numbers, eq for strings)"
		}
		return OpInvalid, p.errf(start, "unknown operator %q%s, want one of %s", tok, hint, opList)
	}
	return o, nil
}

// value reads a quoted string, a bare name (a string), or a number.
func (p *parser) value() (Value, int, error) {
	p.ws()
	start := p.pos
	if p.pos >= len(p.s) {
		return Value{}, start, p.errf(p.pos, "want a value ('string', name or number), got end of input")
	}
	c := p.s[p.pos]
	switch {
	case c == '\'' || c == '"':
		s, err := p.quoted()
		return Str(s), start, err
	case isNameStart(c):
		for p.pos < len(p.s) && isNameByte(p.s[p.pos]) {
			p.pos++
		}
		if p.pos-start > MaxStringLen {
			return Value{}, start, p.errf(start, "string longer than %d bytes", MaxStringLen)
		}
		return Str(p.s[start:p.pos]), start, nil
	case c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.':
		v, err := p.number()
		return v, start, err
	}
	return Value{}, start, p.errf(p.pos, "want a value ('string', name or number), got %s", p.describe())
}

func (p *parser) quoted() (string, error) {
	q := p.s[p.pos]
	start := p.pos
	p.pos++
	var b []byte // only allocated when an escape occurs
	seg := p.pos
	for {
		if p.pos >= len(p.s) {
			return "", p.errf(start, "unterminated string: want closing %c", q)
		}
		c := p.s[p.pos]
		switch {
		case c == q:
			var out string
			if b == nil {
				out = p.s[seg:p.pos]
			} else {
				out = string(append(b, p.s[seg:p.pos]...))
			}
			p.pos++
			if len(out) > MaxStringLen {
				return "", p.errf(start, "string longer than %d bytes", MaxStringLen)
			}
			return out, nil
		case c == '\\':
			if p.pos+1 >= len(p.s) || (p.s[p.pos+1] != '\\' && p.s[p.pos+1] != '\'' && p.s[p.pos+1] != '"') {
				return "", p.errf(p.pos, `bad escape in string: only \\, \' and \" are allowed`)
			}
			b = append(b, p.s[seg:p.pos]...)
			b = append(b, p.s[p.pos+1])
			p.pos += 2
			seg = p.pos
		case c < 0x20 || c == 0x7f:
			return "", p.errf(p.pos, "control character %#02x in string", c)
		case c >= 0x80:
			r, n := utf8.DecodeRuneInString(p.s[p.pos:])
			if r == utf8.RuneError && n <= 1 {
				return "", p.errf(p.pos, "invalid UTF-8 in string")
			}
			p.pos += n
		default:
			p.pos++
		}
	}
}

// number reads [+-]?(0|[1-9][0-9]*)(\.[0-9]+)? or [+-]?\.[0-9]+ : an int64
// when there is no '.', else a float64. No exponent, no leading zeros (as in
// PADRES), no NaN or infinity.
func (p *parser) number() (Value, error) {
	start := p.pos
	if p.s[p.pos] == '+' || p.s[p.pos] == '-' {
		p.pos++
	}
	intStart := p.pos
	for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
		p.pos++
	}
	intDigits := p.pos - intStart
	isFloat := false
	if p.pos < len(p.s) && p.s[p.pos] == '.' {
		isFloat = true
		p.pos++
		fs := p.pos
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
		}
		if p.pos == fs {
			return Value{}, p.errf(p.pos, "want digits after '.' in number %q", p.s[start:p.pos])
		}
	} else if intDigits == 0 {
		return Value{}, p.errf(p.pos, "want digits in number, got %s", p.describe())
	}
	if p.pos < len(p.s) && (p.s[p.pos] == 'e' || p.s[p.pos] == 'E' || isNameByte(p.s[p.pos]) || p.s[p.pos] == '.') {
		return Value{}, p.errf(p.pos, "want ',' or ']' after number %q, got %s (no exponents, no names starting with a digit)", p.s[start:p.pos], p.describe())
	}
	if intDigits > 1 && p.s[intStart] == '0' {
		return Value{}, p.errf(intStart, "leading zero in number %q", p.s[start:p.pos])
	}
	tok := p.s[start:p.pos]
	if len(tok) > maxNumberLen {
		return Value{}, p.errf(start, "number longer than %d bytes", maxNumberLen)
	}
	if !isFloat {
		i, err := strconv.ParseInt(tok, 10, 64)
		if err != nil {
			return Value{}, p.errf(start, "integer %q out of int64 range (write it with a '.' for a float)", tok)
		}
		return Int(i), nil
	}
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil || math.IsInf(f, 0) {
		return Value{}, p.errf(start, "number %q out of float64 range", tok)
	}
	return Float(f), nil
}

// end accepts an optional trailing ';' (PADRES terminates messages with one)
// and then nothing but whitespace.
func (p *parser) end() error {
	p.ws()
	if p.pos < len(p.s) && p.s[p.pos] == ';' {
		p.pos++
		p.ws()
	}
	if p.pos < len(p.s) {
		return p.errf(p.pos, "want ',' and another [...] or end of input, got %s", p.describe())
	}
	return nil
}

func checkLen(s string) error {
	if len(s) > MaxInputLen {
		return &Error{Col: MaxInputLen + 1, Msg: fmt.Sprintf("input longer than %d bytes", MaxInputLen)}
	}
	if strings.TrimSpace(s) == "" {
		return &Error{Col: 1, Msg: "empty input: want [class,...]"}
	}
	return nil
}

// ParseFilter parses a subscription or advertisement in PADRES syntax:
// [class,eq,'STOCK'],[price,>,100]. The first predicate must be
// [class,eq,V]; each attribute appears at most once; string operators take
// a string operand ('quoted', "quoted" or a bare name), numeric operators a
// number, isPresent any operand (its type says which values it accepts). A
// trailing ';' is allowed. See docs/filters.md.
func ParseFilter(s string) (Filter, error) {
	if err := checkLen(s); err != nil {
		return Filter{}, err
	}
	p := &parser{s: s}
	var f Filter
	for {
		if len(f.Preds) == MaxPreds {
			return Filter{}, p.errf(p.pos, "more than %d predicates", MaxPreds)
		}
		open := p.pos
		if err := p.expect('[', "to open a predicate [attr,op,value]"); err != nil {
			return Filter{}, err
		}
		p.ws()
		namePos := p.pos
		name, err := p.name("an attribute name")
		if err != nil {
			return Filter{}, err
		}
		if err := p.expect(',', "after the attribute name"); err != nil {
			return Filter{}, err
		}
		p.ws()
		opPos := p.pos
		op, err := p.op()
		if err != nil {
			return Filter{}, err
		}
		if err := p.expect(',', "after the operator"); err != nil {
			return Filter{}, err
		}
		v, vpos, err := p.value()
		if err != nil {
			return Filter{}, err
		}
		switch {
		case op.IsString() && v.Kind != KindString:
			return Filter{}, p.errf(vpos, "operator %s wants a string operand ('quoted' or a name), got number %s", op, v)
		case op.IsNumeric() && v.Kind == KindString:
			return Filter{}, p.errf(vpos, "operator %s wants a number operand, got string %s", op, v)
		}
		if err := p.expect(']', "to close the predicate"); err != nil {
			return Filter{}, err
		}
		if len(f.Preds) == 0 {
			if name != "class" {
				return Filter{}, p.errf(namePos, "want [class,eq,...] as the first predicate, got attribute %q", name)
			}
			if op != OpEq {
				return Filter{}, p.errf(opPos, "the class predicate takes operator eq, got %s", op)
			}
		} else {
			for _, q := range f.Preds {
				if q.Attr == name {
					return Filter{}, p.errf(namePos, "attribute %q appears twice (one predicate per attribute)", name)
				}
			}
		}
		_ = open
		f.Preds = append(f.Preds, Predicate{Attr: name, Op: op, Value: v})
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == ',' {
			p.pos++
			continue
		}
		if err := p.end(); err != nil {
			return Filter{}, err
		}
		return f, nil
	}
}

// ParsePublication parses a publication in PADRES syntax:
// [class,'STOCK'],[price,100.3]. The first pair must be class with a string
// value; each attribute appears at most once. The result's Attrs are sorted
// by name (see Publication.Sort).
func ParsePublication(s string) (Publication, error) {
	if err := checkLen(s); err != nil {
		return Publication{}, err
	}
	p := &parser{s: s}
	var pub Publication
	for {
		if len(pub.Attrs) == MaxPreds {
			return Publication{}, p.errf(p.pos, "more than %d attributes", MaxPreds)
		}
		if err := p.expect('[', "to open a pair [name,value]"); err != nil {
			return Publication{}, err
		}
		p.ws()
		namePos := p.pos
		name, err := p.name("an attribute name")
		if err != nil {
			return Publication{}, err
		}
		if err := p.expect(',', "after the attribute name"); err != nil {
			return Publication{}, err
		}
		p.ws()
		save := p.pos
		if _, err := p.op(); err == nil {
			p.ws()
			if p.pos < len(p.s) && p.s[p.pos] == ',' {
				return Publication{}, p.errf(save, "want a value: a publication pair is [name,value] (operators belong in subscriptions)")
			}
		}
		p.pos = save
		v, vpos, err := p.value()
		if err != nil {
			return Publication{}, err
		}
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == ',' {
			return Publication{}, p.errf(p.pos, "want ']' after the value: a publication pair is [name,value] (operators belong in subscriptions)")
		}
		if err := p.expect(']', "to close the pair"); err != nil {
			return Publication{}, err
		}
		if len(pub.Attrs) == 0 {
			if name != "class" {
				return Publication{}, p.errf(namePos, "want [class,'...'] as the first pair, got attribute %q", name)
			}
			if v.Kind != KindString {
				return Publication{}, p.errf(vpos, "class wants a string value, got number %s", v)
			}
		} else {
			for _, a := range pub.Attrs {
				if a.Name == name {
					return Publication{}, p.errf(namePos, "attribute %q appears twice", name)
				}
			}
		}
		pub.Attrs = append(pub.Attrs, Attr{Name: name, Value: v})
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == ',' {
			p.pos++
			continue
		}
		if err := p.end(); err != nil {
			return Publication{}, err
		}
		pub.Sort()
		return pub, nil
	}
}

// Sort puts Attrs in the order Get relies on: by name, byte-wise. The
// parsers return sorted publications; call Sort after building Attrs by hand.
func (p *Publication) Sort() {
	if !sort.SliceIsSorted(p.Attrs, func(i, j int) bool { return p.Attrs[i].Name < p.Attrs[j].Name }) {
		sort.Slice(p.Attrs, func(i, j int) bool { return p.Attrs[i].Name < p.Attrs[j].Name })
	}
}
