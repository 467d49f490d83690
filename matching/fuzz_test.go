package matching

import (
	"strings"
	"testing"
)

// Fuzz targets for the three parsers. The seed corpus is in
// testdata/fuzz/<target>/ (built from the conformance data); run e.g.
//
//	go test -run '^$' -fuzz '^FuzzParseFilter$' -fuzztime 3m ./matching/

var fuzzPub = Publication{Attrs: []Attr{
	{Name: "class", Value: Str("STOCK")}, {Name: "p", Value: Int(100)}, {Name: "price", Value: Float(100.5)},
	{Name: "s", Value: Str("abc")},
}}

func FuzzParseFilter(f *testing.F) {
	f.Add("[class,eq,'STOCK'],[price,>,100]")
	f.Add("[class,eq,x],[a,str-prefix,'a\\'b'],[b,isPresent,1.5];")
	f.Fuzz(func(t *testing.T, s string) {
		flt, err := ParseFilter(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "matching: col ") {
				t.Fatalf("error without column: %v", err)
			}
			return
		}
		if err := flt.Validate(); err != nil {
			t.Fatalf("parsed filter %s is not valid: %v", flt, err)
		}
		again, err := ParseFilter(flt.String())
		if err != nil {
			t.Fatalf("String() %s does not parse: %v", flt, err)
		}
		if !filterEqual(flt, again) {
			t.Fatalf("round trip: %s -> %s", flt, again)
		}
		flt.Match(&fuzzPub)
		flt.Explain(&fuzzPub)
		if !Covers(flt, flt) {
			t.Fatalf("Covers(f, f) false for %s", flt)
		}
		ix := NewIndex()
		if err := ix.Insert(1, flt); err != nil {
			t.Fatalf("Insert(%s): %v", flt, err)
		}
		got := ix.Match(&fuzzPub, nil)
		if want := flt.Match(&fuzzPub); want != (len(got) == 1) {
			t.Fatalf("index %v, brute force %v for %s", got, want, flt)
		}
		if !ix.Delete(1) || ix.Len() != 0 {
			t.Fatal("delete failed")
		}
	})
}

func filterEqual(a, b Filter) bool {
	if len(a.Preds) != len(b.Preds) {
		return false
	}
	for i := range a.Preds {
		if a.Preds[i].Attr != b.Preds[i].Attr || a.Preds[i].Op != b.Preds[i].Op || !a.Preds[i].Value.Equal(b.Preds[i].Value) {
			return false
		}
	}
	return true
}

func checkPubRoundTrips(t *testing.T, p Publication) {
	q, err := ParsePublication(p.String())
	if err != nil {
		t.Fatalf("String() %s does not parse: %v", p, err)
	}
	if !pubEqual(p, q) {
		t.Fatalf("PADRES round trip: %s -> %s", p, q)
	}
	j, err := ParsePublicationJSON(p.JSON())
	if err != nil {
		t.Fatalf("JSON() %s does not parse: %v", p.JSON(), err)
	}
	if !pubEqual(p, j) {
		t.Fatalf("JSON round trip: %s -> %s", p.JSON(), j)
	}
}

func FuzzParsePublication(f *testing.F) {
	f.Add("[class,'STOCK'],[price,100.3]")
	f.Add("[class,\"x\"],[a,-0.0],[b,+7],[c,'it\\'s'];")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePublication(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "matching: col ") {
				t.Fatalf("error without column: %v", err)
			}
			return
		}
		checkPubRoundTrips(t, p)
	})
}

func FuzzParsePublicationJSON(f *testing.F) {
	f.Add([]byte(`{"class":"STOCK","price":100.3}`))
	f.Add([]byte(`{"class":"x","a":-0,"b":1e300,"c":"\u00e9'\\"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePublicationJSON(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "matching: col ") {
				t.Fatalf("error without column: %v", err)
			}
			return
		}
		checkPubRoundTrips(t, p)
	})
}
