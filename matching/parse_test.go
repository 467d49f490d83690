package matching

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func mustFilter(t *testing.T, s string) Filter {
	t.Helper()
	f, err := ParseFilter(s)
	if err != nil {
		t.Fatalf("ParseFilter(%q): %v", s, err)
	}
	return f
}

func mustPub(t *testing.T, s string) Publication {
	t.Helper()
	p, err := ParsePublication(s)
	if err != nil {
		t.Fatalf("ParsePublication(%q): %v", s, err)
	}
	return p
}

func TestParseFilterValues(t *testing.T) {
	f := mustFilter(t, " [class, eq, 'STOCK'] ,\t[price ,>=, -1.5],[n,<>,+7],[s,str-prefix,abc],[q,isPresent,\"x y\"] ; ")
	want := Filter{Preds: []Predicate{
		{Attr: "class", Op: OpEq, Value: Str("STOCK")},
		{Attr: "price", Op: OpGe, Value: Float(-1.5)},
		{Attr: "n", Op: OpNumNe, Value: Int(7)},
		{Attr: "s", Op: OpStrPrefix, Value: Str("abc")},
		{Attr: "q", Op: OpIsPresent, Value: Str("x y")},
	}}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("got %#v\nwant %#v", f, want)
	}
	if got := f.String(); got != `[class,eq,'STOCK'],[price,>=,-1.5],[n,<>,7],[s,str-prefix,'abc'],[q,isPresent,'x y']` {
		t.Fatalf("String() = %s", got)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"[class,eq,'STOCK'],[price,=>,100]", `matching: col 27: unknown operator "=>", want one of eq, neq,`},
		{"[class,eq,'STOCK'],[price,!=,100]", `(use <> for numbers, neq for strings)`},
		{"", "col 1: empty input"},
		{"[class,eq,'STOCK'", `col 18: want ']' to close the predicate, got end of input`},
		{"[price,<,1]", `col 2: want [class,eq,...] as the first predicate, got attribute "price"`},
		{"[class,neq,'x']", "col 8: the class predicate takes operator eq, got neq"},
		{"[class,eq,'x'],[p,<,'1']", "col 21: operator < wants a number operand, got string '1'"},
		{"[class,eq,'x'],[p,eq,1]", "col 22: operator eq wants a string operand"},
		{"[class,eq,'x'],[p,<,007]", "leading zero"},
		{"[class,eq,'x'],[p,<,5.]", "want digits after '.'"},
		{"[class,eq,'x'],[p,<,1e5]", "no exponents"},
		{"[class,eq,'x'],[p,<,99999999999999999999]", "out of int64 range"},
		{"[class,eq,'x'],[p,<,1],[p,>,0]", `attribute "p" appears twice`},
		{"[class,eq,'x'],[9p,<,1]", "want an attribute name"},
		{"[class,eq,'x'] [p,<,1]", "want ',' and another [...] or end of input"},
		{"[class,eq,'x'];junk", "want ',' and another [...] or end of input"},
		{"[class,eq,'x'],", "want '[' to open a predicate"},
		{"[class,eq,'a\x01']", "control character"},
		{"[class,eq,'a\\n']", `bad escape`},
		{"[class,eq,'abc", "unterminated string"},
		{"[class,eq,'\xff']", "invalid UTF-8"},
		{"[class,eq,$S$X]", "want a value"},
	}
	for _, c := range cases {
		_, err := ParseFilter(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "matching: col ") {
			t.Errorf("ParseFilter(%q) error = %v, want it to contain %q", c.in, err, c.want)
		}
	}
	pcases := []struct{ in, want string }{
		{"[class,'x'],[price,<,1]", "a publication pair is [name,value]"},
		{"[class,eq,'x']", "a publication pair is [name,value]"},
		{"[price,1]", `want [class,'...'] as the first pair`},
		{"[class,5]", "class wants a string value"},
		{"[class,'x'],[a,1],[a,2]", `attribute "a" appears twice`},
	}
	for _, c := range pcases {
		_, err := ParsePublication(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePublication(%q) error = %v, want it to contain %q", c.in, err, c.want)
		}
	}
	jcases := []struct{ in, want string }{
		{`{"class":"x","a":true}`, "no booleans"},
		{`{"class":"x","a":null}`, "no booleans, null"},
		{`{"class":"x","a":[1]}`, "arrays"},
		{`{"a":1}`, `want a "class" key`},
		{`{"class":1}`, `want a "class" key with a string value`},
		{`{"class":"x","a":1,"a":2}`, `appears twice`},
		{`{"class":"x","9":1}`, `is not an attribute name`},
		{`{"class":"x"} {}`, "want end of input"},
		{`{"class":"x",`, "invalid JSON"},
		{`[1]`, "want a JSON object"},
		{`{"class":"x","a":1e999}`, "out of float64 range"},
		{`{"class":"x","a":99999999999999999999}`, "out of int64 range"},
		{`{"class":"x\u0001"}`, "control character"},
	}
	for _, c := range jcases {
		_, err := ParsePublicationJSON([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "matching: col ") {
			t.Errorf("ParsePublicationJSON(%s) error = %v, want it to contain %q", c.in, err, c.want)
		}
	}
}

func TestLimits(t *testing.T) {
	long := "[class,eq,'" + strings.Repeat("a", MaxStringLen+1) + "']"
	if _, err := ParseFilter(long); err == nil || !strings.Contains(err.Error(), "string longer than") {
		t.Errorf("long string: %v", err)
	}
	var b strings.Builder
	b.WriteString("[class,eq,x]")
	for i := 0; i < MaxPreds; i++ {
		b.WriteString(",[a" + strings.Repeat("b", i%50) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ",<,1]")
	}
	if _, err := ParseFilter(b.String()); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("too many predicates: %v", err)
	}
	if _, err := ParseFilter(strings.Repeat(" ", MaxInputLen+1)); err == nil || !strings.Contains(err.Error(), "input longer than") {
		t.Errorf("long input: %v", err)
	}
	if _, err := ParseFilter("[class,eq,x],[" + strings.Repeat("n", MaxNameLen+1) + ",<,1]"); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("long name: %v", err)
	}
}

func TestPublicationRoundTrip(t *testing.T) {
	inputs := []string{
		`[class,'STOCK'],[symbol,'IBM'],[price,100.3],[volume,1000],[neg,-0.5],[big,9223372036854775807],[tiny,0.000001],[f,2.0],[z,-0.0]`,
		`[class,"it's"],[q,'a\\b'],[u,'café ✓']`,
		`[class,stock],[flag,true]`,
	}
	for _, in := range inputs {
		p := mustPub(t, in)
		q := mustPub(t, p.String())
		if !pubEqual(p, q) {
			t.Errorf("PADRES round trip of %s: %s -> %s", in, p, q)
		}
		j, err := ParsePublicationJSON(p.JSON())
		if err != nil {
			t.Fatalf("JSON %s: %v", p.JSON(), err)
		}
		if !pubEqual(p, j) {
			t.Errorf("JSON round trip of %s: %s -> %s", in, p.JSON(), j)
		}
	}
	p, err := ParsePublicationJSON([]byte(`{"price":100.3, "class":"STOCK", "n": 5, "e": 1e3, "s":"a'b"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p.JSON()); got != `{"class":"STOCK","e":1000.0,"n":5,"price":100.3,"s":"a'b"}` {
		t.Errorf("JSON() = %s", got)
	}
	if got := p.String(); got != `[class,'STOCK'],[e,1000.0],[n,5],[price,100.3],[s,'a\'b']` {
		t.Errorf("String() = %s", got)
	}
	if v, ok := p.Get("n"); !ok || !v.Equal(Int(5)) {
		t.Errorf("Get(n) = %v, %v", v, ok)
	}
	if _, ok := p.Get("missing"); ok {
		t.Error("Get(missing) found")
	}
}

func pubEqual(a, b Publication) bool {
	if len(a.Attrs) != len(b.Attrs) {
		return false
	}
	for i := range a.Attrs {
		if a.Attrs[i].Name != b.Attrs[i].Name || !a.Attrs[i].Value.Equal(b.Attrs[i].Value) {
			return false
		}
	}
	return true
}

func TestGetManyAttrs(t *testing.T) {
	var p Publication
	for i := 0; i < 40; i++ {
		p.Attrs = append(p.Attrs, Attr{Name: "a" + string(rune('A'+i)), Value: Int(int64(i))})
	}
	p.Attrs = append(p.Attrs, Attr{Name: "class", Value: Str("x")})
	p.Sort()
	for i := 0; i < 40; i++ {
		if v, ok := p.Get("a" + string(rune('A'+i))); !ok || v.Int != int64(i) {
			t.Fatalf("Get a%c = %v %v", 'A'+i, v, ok)
		}
	}
	if _, ok := p.Get("zz"); ok {
		t.Fatal("found zz")
	}
}

func TestMatchSemantics(t *testing.T) {
	cases := []struct {
		f, p string
		want bool
	}{
		{"[class,eq,s],[p,<,100]", "[class,s],[p,50.5]", true},                             // int bound, float value
		{"[class,eq,s],[p,=,100]", "[class,s],[p,100.0]", true},                            // numeric value, not spelling
		{"[class,eq,s],[p,=,9007199254740993]", "[class,s],[p,9007199254740992.0]", false}, // exact, no rounding
		{"[class,eq,s],[p,>,9007199254740992.0]", "[class,s],[p,9007199254740993]", true},
		{"[class,eq,s],[p,isPresent,1]", "[class,s],[p,1.5]", true},
		{"[class,eq,s],[p,isPresent,1]", "[class,s],[p,'x']", false},
		{"[class,eq,s],[p,isPresent,'']", "[class,s],[p,1]", false},
		{"[class,eq,s],[p,neq,'a']", "[class,s]", false},
		{"[class,eq,s],[p,<>,1]", "[class,s],[p,'a']", false},
		{"[class,eq,s],[p,str-lt,'b']", "[class,s],[p,'B']", true},
		{"[class,eq,s],[p,str-contains,'']", "[class,s],[p,'']", true},
		{"[class,eq,s],[flag,eq,true]", "[class,s],[flag,'true']", true},
	}
	for _, c := range cases {
		f, p := mustFilter(t, c.f), mustPub(t, c.p)
		if got := f.Match(&p); got != c.want {
			t.Errorf("%s matches %s = %v, want %v", c.f, c.p, got, c.want)
		}
		ok, failed, why := f.Explain(&p)
		if ok != c.want || (ok && failed != -1) || (!ok && (failed < 0 || why == "")) {
			t.Errorf("Explain(%s, %s) = %v %d %q", c.f, c.p, ok, failed, why)
		}
	}
	f := mustFilter(t, "[class,eq,'STOCK'],[price,>,100],[sym,eq,'IBM']")
	p := mustPub(t, "[class,'STOCK'],[price,120.5]")
	ok, failed, why := f.Explain(&p)
	if ok || failed != 2 || !strings.Contains(why, `no attribute "sym"`) {
		t.Errorf("Explain = %v %d %q", ok, failed, why)
	}
	p = mustPub(t, "[class,'STOCK'],[price,'high'],[sym,'IBM']")
	if _, failed, why = f.Explain(&p); failed != 1 || !strings.Contains(why, "is a string, the operator wants a number") {
		t.Errorf("Explain = %d %q", failed, why)
	}
}

func TestNumberOrder(t *testing.T) {
	vals := []Value{Float(-math.MaxFloat64), Int(math.MinInt64), Float(-1.5), Int(-1), Float(-0.0), Int(0), Float(0.5), Int(1),
		Float(9007199254740992), Int(9007199254740993), Float(9007199254740994), Int(math.MaxInt64), Float(9223372036854775808.0), Float(math.MaxFloat64)}
	for i := range vals {
		for j := range vals {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if (vals[i].IsNumber() && vals[j].IsNumber()) && i != j && ((i == 4 && j == 5) || (i == 5 && j == 4)) {
				want = 0 // -0.0 == 0
			}
			if got := cmpNum(vals[i], vals[j]); got != want {
				t.Errorf("cmpNum(%v, %v) = %d, want %d", vals[i], vals[j], got, want)
			}
		}
	}
	for i := 0; i+1 < len(vals); i++ {
		if i == 4 {
			continue
		}
		if s, ok := succD(vals[i]); !ok || cmpNum(s, vals[i]) <= 0 {
			t.Errorf("succD(%v) = %v", vals[i], s)
		}
		if p, ok := predD(vals[i+1]); !ok || cmpNum(p, vals[i+1]) >= 0 {
			t.Errorf("predD(%v) = %v", vals[i+1], p)
		}
	}
	if s, _ := succD(Int(9007199254740992)); !s.Equal(Int(9007199254740993)) {
		t.Errorf("succD(2^53) = %v", s)
	}
	if s, _ := succD(Int(math.MaxInt64)); !s.Equal(Float(9223372036854775808.0)) {
		t.Errorf("succD(MaxInt64) = %v", s)
	}
	if _, ok := succD(Float(math.MaxFloat64)); ok {
		t.Error("succD(MaxFloat64) exists")
	}
	if p, _ := predD(Float(0.5)); !p.Equal(Float(math.Nextafter(0.5, -1))) {
		t.Errorf("predD(0.5) = %v", p)
	}
}
