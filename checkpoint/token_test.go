package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/deltapub/deltapub/message"
)

func TestRoundTrip(t *testing.T) {
	tok := Token{Name: "orders"}
	for i := range 50 {
		s := message.Source{Publisher: fmt.Sprintf("p%02d", 49-i), Epoch: uint64(i)}
		if err := tok.Consume(s, uint64(i*3)); err != nil {
			t.Fatal(err)
		}
		if err := tok.Advance(s, uint64(i*2)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Decode(tok.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "orders" || len(got.Entries) != 50 {
		t.Fatalf("decoded %q with %d entries", got.Name, len(got.Entries))
	}
	for _, e := range tok.Entries {
		if g := got.Get(e.Source); g != e {
			t.Fatalf("entry %v decoded as %v", e, g)
		}
	}
	if e := got.Get(message.Source{Publisher: "p01", Epoch: 48}); e.From() != 144 {
		t.Fatalf("From = %d, want 144", e.From())
	}
}

func TestRefusals(t *testing.T) {
	tok := Token{Name: "x"}
	_ = tok.Consume(message.Source{Publisher: "a", Epoch: 1}, 5)
	good := tok.Encode()
	flip := bytes.Clone(good)
	flip[len(flip)-6] ^= 1
	ver := bytes.Clone(good)
	ver[4] = 9
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrForeign},
		{"json", []byte(`{"seq":1}`), ErrForeign},
		{"version", ver, ErrVersion},
		{"damaged", flip, ErrChecksum},
		{"truncated", good[:len(good)-1], ErrChecksum},
	}
	for _, c := range cases {
		if _, err := Decode(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
}

func TestBound(t *testing.T) {
	var tok Token
	for i := range MaxSources {
		if err := tok.Consume(message.Source{Publisher: "p", Epoch: uint64(i)}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := tok.Consume(message.Source{Publisher: "q", Epoch: 1}, 1); !errors.Is(err, ErrFull) {
		t.Fatalf("err %v, want ErrFull", err)
	}
	if err := tok.Consume(message.Source{Publisher: "p", Epoch: 3}, 2); err != nil {
		t.Fatalf("a known source at the bound: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	tok := Token{Name: "n"}
	_ = tok.Consume(message.Source{Publisher: "a", Epoch: 1}, 5)
	_ = tok.Advance(message.Source{Publisher: "b", Epoch: 2}, 7)
	f.Add(tok.Encode())
	f.Add([]byte("DPCT\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(got.Encode())
		if err != nil {
			t.Fatalf("re-encoded token refused: %v", err)
		}
		if again.Name != got.Name || len(again.Entries) != len(got.Entries) {
			t.Fatalf("round trip changed the token")
		}
	})
}
