package wire

import (
	"bytes"
	"math/rand"
	"reflect"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// The hand-written codecs of the hot messages must be indistinguishable
// from the generic ones: same bytes out, same values in.
func TestFastCodecsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewSource(testSeed(t)))
	e := NewEncoder()
	for typ, fc := range fastCodecMap {
		for variant := 0; variant < 200; variant++ {
			m, _ := message.New(typ)
			switch variant % 4 {
			case 0: // the zero value (nil slices, omitted fields)
			case 1:
				populate(t, reflect.ValueOf(m).Elem(), rng, typ.String(), 0)
				zeroSome(reflect.ValueOf(m).Elem(), rng)
			default:
				populate(t, reflect.ValueOf(m).Elem(), rng, typ.String(), 0)
				widen(reflect.ValueOf(m).Elem(), rng)
			}
			fast, ok := fc.enc(nil, m)
			if !ok {
				t.Fatalf("%v: fast encoder declined its own type", typ)
			}
			generic, err := e.appendGeneric(nil, m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fast, generic) {
				t.Fatalf("%v variant %d: fast encoding differs\n fast    %x\n generic %x\n value %#v", typ, variant, fast, generic, m)
			}
			// fast decode of it equals generic decode and the original
			r := NewReader(nil, 0)
			viaFast, _ := message.New(typ)
			r.bd.reset(fast)
			if !fc.dec(&r.bd, viaFast) {
				t.Fatalf("%v variant %d: fast decoder declined the canonical encoding %x", typ, variant, fast)
			}
			viaGeneric, _ := message.New(typ)
			if err := r.decodeGeneric(viaGeneric, fast); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(viaFast, viaGeneric) || !reflect.DeepEqual(viaFast, m) {
				t.Fatalf("%v variant %d: decoders disagree\n fast    %#v\n generic %#v\n sent    %#v", typ, variant, viaFast, viaGeneric, m)
			}
		}
	}
}

// zeroSome zeroes random fields, so that omitempty and nil paths are used.
func zeroSome(v reflect.Value, rng *rand.Rand) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if !v.Type().Field(i).IsExported() {
				continue
			}
			if rng.Intn(3) == 0 {
				v.Field(i).SetZero()
			} else {
				zeroSome(v.Field(i), rng)
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			zeroSome(v.Index(i), rng)
		}
	}
}

// widen sets numbers and lengths across msgpack's encoding boundaries.
func widen(v reflect.Value, rng *rand.Rand) {
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				widen(v.Field(i), rng)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			n := []int{1, 255, 256, 70000}[rng.Intn(4)]
			v.SetBytes(bytes.Repeat([]byte{'z'}, n))
			return
		}
		if rng.Intn(4) == 0 {
			n := 16 + rng.Intn(3)
			s := reflect.MakeSlice(v.Type(), n, n)
			for i := 0; i < n; i++ {
				s.Index(i).Set(v.Index(i % v.Len()))
			}
			v.Set(s)
		}
		for i := 0; i < v.Len(); i++ {
			widen(v.Index(i), rng)
		}
	case reflect.Uint64:
		v.SetUint([]uint64{0, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1}[rng.Intn(10)])
	case reflect.Int64:
		v.SetInt([]int64{0, 1, -1, -32, -33, -128, -129, -32768, -32769, -1 << 31, -1<<31 - 1, 1 << 62, -1 << 63}[rng.Intn(13)])
	case reflect.String:
		v.SetString(string(bytes.Repeat([]byte{'s'}, []int{0, 31, 32, 255, 256, 70000}[rng.Intn(6)])))
	case reflect.Float64:
		v.SetFloat([]float64{0, 1.5, -2.25, 1e300}[rng.Intn(4)])
	}
}

// FuzzFastDecode: whenever a fast decoder accepts a body, the generic
// decoder accepts it too and yields the same value, and the fast encoder
// writes that value as the generic one does.
func FuzzFastDecode(f *testing.F) {
	for typ := range fastCodecMap {
		m, _ := message.New(typ)
		populate(&testing.T{}, reflect.ValueOf(m).Elem(), rand.New(rand.NewSource(1)), "", 0)
		b, _ := NewEncoder().AppendBody(nil, m)
		f.Add(uint16(typ), b)
	}
	f.Fuzz(func(t *testing.T, typ uint16, body []byte) {
		fc := fastCodecOf(message.Type(typ))
		if fc == nil {
			return
		}
		r := NewReader(nil, 0)
		viaFast, _ := message.New(message.Type(typ))
		r.bd.reset(body)
		if !fc.dec(&r.bd, viaFast) {
			return
		}
		viaGeneric, _ := message.New(message.Type(typ))
		if err := r.decodeGeneric(viaGeneric, body); err != nil {
			t.Fatalf("fast decoder accepted what the generic one refuses (%v): %x", err, body)
		}
		if !reflect.DeepEqual(viaFast, viaGeneric) && !sameEncoding(viaFast, viaGeneric) { // NaN != NaN
			t.Fatalf("decoders disagree on %x\n fast    %#v\n generic %#v", body, viaFast, viaGeneric)
		}
		fast, _ := fc.enc(nil, viaFast)
		generic, err := NewEncoder().appendGeneric(nil, viaFast)
		if err != nil || !bytes.Equal(fast, generic) {
			t.Fatalf("encoders disagree on %#v (%v)\n fast    %x\n generic %x", viaFast, err, fast, generic)
		}
	})
}

func sameEncoding(a, b message.Message) bool {
	e := NewEncoder()
	x, err1 := e.appendGeneric(nil, a)
	y, err2 := e.appendGeneric(nil, b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
