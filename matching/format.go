package matching

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// String formats the filter in PADRES syntax; ParseFilter reads it back to
// an equal filter.
func (f Filter) String() string {
	var b strings.Builder
	for i, p := range f.Preds {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// String formats one predicate as [attr,op,value].
func (p Predicate) String() string {
	return "[" + p.Attr + "," + p.Op.String() + "," + p.Value.String() + "]"
}

// String formats the publication in PADRES syntax, class first, then the
// other attributes in Attrs order; ParsePublication reads it back to an
// equal publication. The payload is not part of the text form.
func (p Publication) String() string {
	var b strings.Builder
	first := true
	write := func(a Attr) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString("[" + a.Name + "," + a.Value.String() + "]")
	}
	for _, a := range p.Attrs {
		if a.Name == "class" {
			write(a)
		}
	}
	for _, a := range p.Attrs {
		if a.Name != "class" {
			write(a)
		}
	}
	return b.String()
}

// JSON formats the publication as one JSON object, class first:
// {"class":"STOCK","price":100.3}. Integers are written without a '.',
// floats always with a '.' or an exponent, so ParsePublicationJSON reads
// back the same kinds. The payload is not part of the JSON form.
func (p Publication) JSON() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	write := func(a Attr) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(a.Name)
		b.Write(k)
		b.WriteByte(':')
		switch a.Value.Kind {
		case KindString:
			s, _ := json.Marshal(a.Value.Str)
			b.Write(s)
		case KindInt:
			b.WriteString(strconv.FormatInt(a.Value.Int, 10))
		case KindFloat:
			s := strconv.FormatFloat(a.Value.Float, 'g', -1, 64)
			if !strings.ContainsAny(s, ".eEnN") { // n/N: NaN and Inf never parse, but never write a bare int either
				s += ".0"
			}
			b.WriteString(s)
		default:
			b.WriteString("null")
		}
	}
	for _, a := range p.Attrs {
		if a.Name == "class" {
			write(a)
		}
	}
	for _, a := range p.Attrs {
		if a.Name != "class" {
			write(a)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// ParsePublicationJSON parses the JSON form of a publication: one object
// whose keys are attribute names (see ValidName) and whose values are
// strings or numbers; "class" must be present with a string value. A
// number with '.', 'e' or 'E' is a float, otherwise an int64. Booleans,
// null, arrays and nested objects are rejected, as are duplicate keys.
func ParsePublicationJSON(data []byte) (Publication, error) {
	if len(data) > MaxInputLen {
		return Publication{}, &Error{Col: MaxInputLen + 1, Msg: fmt.Sprintf("input longer than %d bytes", MaxInputLen)}
	}
	if !utf8.Valid(data) {
		return Publication{}, &Error{Col: 1, Msg: "invalid UTF-8 in JSON input"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	col := func() int { return int(dec.InputOffset()) + 1 }
	jerr := func(err error) error {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return &Error{Col: int(se.Offset), Msg: "invalid JSON: " + se.Error()}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &Error{Col: len(data) + 1, Msg: "invalid JSON: unexpected end of input"}
		}
		return &Error{Col: col(), Msg: "invalid JSON: " + err.Error()}
	}
	tok, err := dec.Token()
	if err != nil {
		return Publication{}, jerr(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Publication{}, &Error{Col: col(), Msg: "want a JSON object {\"class\":...}"}
	}
	var pub Publication
	seen := map[string]bool{}
	for dec.More() {
		kpos := col()
		tok, err := dec.Token()
		if err != nil {
			return Publication{}, jerr(err)
		}
		name, _ := tok.(string)
		if !ValidName(name) {
			return Publication{}, &Error{Col: kpos, Msg: fmt.Sprintf("key %q is not an attribute name (letter, '_', ':' or '/' first, then also digits and '-'; at most %d bytes)", name, MaxNameLen)}
		}
		if seen[name] {
			return Publication{}, &Error{Col: kpos, Msg: fmt.Sprintf("attribute %q appears twice", name)}
		}
		if len(pub.Attrs) == MaxPreds {
			return Publication{}, &Error{Col: kpos, Msg: fmt.Sprintf("more than %d attributes", MaxPreds)}
		}
		seen[name] = true
		vpos := col()
		tok, err = dec.Token()
		if err != nil {
			return Publication{}, jerr(err)
		}
		var v Value
		switch t := tok.(type) {
		case string:
			if err := checkString(t); err != nil {
				return Publication{}, &Error{Col: vpos, Msg: err.Error()}
			}
			v = Str(t)
		case json.Number:
			s := string(t)
			if len(s) > maxNumberLen {
				return Publication{}, &Error{Col: vpos, Msg: fmt.Sprintf("number longer than %d bytes", maxNumberLen)}
			}
			if strings.ContainsAny(s, ".eE") {
				f, err := strconv.ParseFloat(s, 64)
				if err != nil || math.IsInf(f, 0) {
					return Publication{}, &Error{Col: vpos, Msg: fmt.Sprintf("number %s out of float64 range", s)}
				}
				v = Float(f)
			} else {
				i, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return Publication{}, &Error{Col: vpos, Msg: fmt.Sprintf("integer %s out of int64 range (write it with a '.' for a float)", s)}
				}
				v = Int(i)
			}
		default:
			return Publication{}, &Error{Col: vpos, Msg: fmt.Sprintf("attribute %q: want a string or a number (no booleans, null, arrays or objects)", name)}
		}
		pub.Attrs = append(pub.Attrs, Attr{Name: name, Value: v})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return Publication{}, jerr(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Publication{}, &Error{Col: col(), Msg: "want end of input after the JSON object"}
	}
	cls, ok := pub.lookup("class")
	if !ok || cls.Kind != KindString {
		return Publication{}, &Error{Col: 1, Msg: "want a \"class\" key with a string value"}
	}
	pub.Sort()
	return pub, nil
}

// checkString applies the string rules of the PADRES form to JSON strings,
// so every publication can be written in both forms.
func checkString(s string) error {
	if len(s) > MaxStringLen {
		return fmt.Errorf("string longer than %d bytes", MaxStringLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("control character %#02x in string", c)
		}
	}
	return nil
}

func (p *Publication) lookup(name string) (Value, bool) {
	for _, a := range p.Attrs {
		if a.Name == name {
			return a.Value, true
		}
	}
	return Value{}, false
}
