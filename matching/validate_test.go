package matching

import (
	"strings"
	"testing"
)

func TestValidateAttrs(t *testing.T) {
	s, i := Str("x"), Int(1)
	for _, tc := range []struct {
		attrs []Attr
		want  string // "" = valid
	}{
		{nil, ""},
		{[]Attr{{"class", s}, {"price", i}}, ""},
		{[]Attr{{"class", s}, {"class", s}}, `"class" appears twice`},
		{[]Attr{{"class", s}, {"price", i}, {"price", Int(2)}}, `"price" appears twice`},
		{[]Attr{{"class", s}, {"", i}}, "attribute 2 has an empty name"},
	} {
		err := ValidateAttrs(tc.attrs)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ValidateAttrs(%v) = %v, want %q", tc.attrs, err, tc.want)
		}
	}
}
