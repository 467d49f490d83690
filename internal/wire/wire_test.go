package wire

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"testing"
	"unsafe"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

var seedFlag = flag.Int64("wire.seed", 0, "seed for randomly populated messages (0 = fixed default)")

func testSeed(t *testing.T) int64 {
	s := *seedFlag
	if s == 0 {
		s = 20261130
	}
	t.Logf("seed %d (rerun with -wire.seed=%d)", s, s)
	return s
}

func sortedTypes() []message.Type {
	ts := message.Types()
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts
}

// populate fills every field of v (exported or not) with a non-zero random
// value, so that a field the codec loses shows up as a difference.
func populate(t *testing.T, v reflect.Value, rng *rand.Rand, path string, depth int) {
	t.Helper()
	if depth > 8 {
		t.Fatalf("%s: nesting deeper than 8 levels; recursive type?", path)
	}
	if !v.CanSet() {
		v = reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1 + rng.Int63n(100))
		if v.Kind() == reflect.Int64 && rng.Intn(2) == 0 {
			v.SetInt(-1 - rng.Int63n(1<<40))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(1 + uint64(rng.Int63n(100)))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(rng.Float64()*1000 + 0.5)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", rng.Intn(1000000)))
	case reflect.Slice:
		n := 1 + rng.Intn(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := 0; i < n; i++ {
			populate(t, s.Index(i), rng, fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
		v.Set(s)
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			populate(t, v.Index(i), rng, fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := 0; i < 2; i++ {
			k := reflect.New(v.Type().Key()).Elem()
			e := reflect.New(v.Type().Elem()).Elem()
			populate(t, k, rng, path+".key", depth+1)
			populate(t, e, rng, path+".elem", depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		populate(t, p.Elem(), rng, path, depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			populate(t, v.Field(i), rng, path+"."+v.Type().Field(i).Name, depth+1)
		}
	default:
		t.Fatalf("%s: cannot populate a field of kind %v (interfaces, funcs and chans do not belong in messages)", path, v.Kind())
	}
}

// roundTrip encodes m, decodes the frame into fresh (a zero value of the
// same type) and reports any difference.
func roundTrip(m, fresh message.Message) error {
	frame, err := AppendFrame([]byte("prefix"), m)
	if err != nil {
		return fmt.Errorf("encode: %v", err)
	}
	if !bytes.HasPrefix(frame, []byte("prefix")) {
		return errors.New("AppendFrame lost the bytes before the frame")
	}
	r := NewReader(bytes.NewReader(frame[len("prefix"):]), DefaultMaxFrame)
	typ, body, err := r.ReadFrame()
	if err != nil {
		return fmt.Errorf("read frame: %v", err)
	}
	if typ != m.Type() {
		return fmt.Errorf("type %v on the wire, want %v", typ, m.Type())
	}
	if err := r.DecodeInto(fresh, body); err != nil {
		return fmt.Errorf("decode: %v", err)
	}
	if !reflect.DeepEqual(m, fresh) {
		return fmt.Errorf("round trip differs:\n sent %#v\n got  %#v", m, fresh)
	}
	if _, err := r.Read(); err != io.EOF {
		return fmt.Errorf("after the frame: %v, want io.EOF", err)
	}
	return nil
}

func TestRoundTripEveryRegisteredType(t *testing.T) {
	rng := rand.New(rand.NewSource(testSeed(t)))
	types := sortedTypes()
	if len(types) < 13 {
		t.Fatalf("only %d registered types; expected at least the handshake and client protocol", len(types))
	}
	for _, typ := range types {
		for variant := 0; variant < 3; variant++ {
			m, _ := message.New(typ)
			if variant > 0 { // variant 0: the zero value
				populate(t, reflect.ValueOf(m).Elem(), rng, typ.String(), 0)
			}
			fresh, _ := message.New(typ)
			if err := roundTrip(m, fresh); err != nil {
				t.Errorf("%v (variant %d): %v", typ, variant, err)
			}
		}
	}
}

// brokenMsg has an unexported field: the round-trip check must catch it.
type brokenMsg struct {
	A string `msgpack:"a"`
	b int
}

func (*brokenMsg) Type() message.Type { return 63 }

func TestRoundTripCheckCatchesLostField(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	m := new(brokenMsg)
	populate(t, reflect.ValueOf(m).Elem(), rng, "brokenMsg", 0)
	if m.b == 0 {
		t.Fatal("populate did not fill the unexported field")
	}
	if err := roundTrip(m, new(brokenMsg)); err == nil {
		t.Fatal("round trip of a struct with an unexported field passed; the check is blind")
	}
}

func samplePublish(payload int) *message.Publish {
	return &message.Publish{
		Seq: 123456,
		Attrs: []matching.Attr{
			{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "STOCK"}},
			{Name: "symbol", Value: matching.Value{Kind: matching.KindString, Str: "IBM"}},
			{Name: "price", Value: matching.Value{Kind: matching.KindFloat, Float: 101.25}},
			{Name: "n", Value: matching.Value{Kind: matching.KindInt, Int: 42}},
		},
		Payload: bytes.Repeat([]byte{'x'}, payload),
		Time:    1764460000000000000,
	}
}

func TestReaderManyFramesAndUnknownType(t *testing.T) {
	var stream []byte
	var err error
	for i := 0; i < 500; i++ {
		p := samplePublish(i % 300)
		p.Seq = uint64(i)
		if stream, err = AppendFrame(stream, p); err != nil {
			t.Fatal(err)
		}
		if i == 250 { // a frame of a type nobody registered: skippable
			stream = append(stream, 6, 0xff, 0xf0, 0x93, 1, 2, 3)
		}
	}
	// one byte per Read: every partial-header and partial-body path
	r := NewReader(&oneByteReader{b: stream}, DefaultMaxFrame)
	unknown := 0
	for i := 0; i < 500; {
		m, err := r.Read()
		if errors.Is(err, ErrUnknownType) {
			var ute *UnknownTypeError
			if !errors.As(err, &ute) || ute.Type != 0xfff0 || IsFatal(err) {
				t.Fatalf("unknown type error %v", err)
			}
			unknown++
			continue
		}
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if p, ok := m.(*message.Publish); !ok || p.Seq != uint64(i) || len(p.Payload) != i%300 {
			t.Fatalf("frame %d: got %#v", i, m)
		}
		i++
	}
	if unknown != 1 {
		t.Fatalf("%d unknown frames, want 1", unknown)
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}

type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.b[0]
	r.b = r.b[1:]
	return 1, nil
}

func TestFrameErrors(t *testing.T) {
	good, _ := AppendFrame(nil, samplePublish(10))
	cases := []struct {
		name  string
		in    []byte
		max   int
		want  error
		isEOF bool
	}{
		{"oversized declared length", []byte{0xff, 0xff, 0xff, 0x7f, 0, 1}, DefaultMaxFrame, ErrFrameTooLarge, false},
		{"over the reader's maximum", good, 20, ErrFrameTooLarge, false},
		{"bad varint", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, DefaultMaxFrame, ErrMalformed, false},
		{"length shorter than the type", []byte{1, 0}, DefaultMaxFrame, ErrMalformed, false},
		{"truncated body", good[:len(good)-3], DefaultMaxFrame, io.ErrUnexpectedEOF, false},
		{"truncated header", good[:2], DefaultMaxFrame, io.ErrUnexpectedEOF, false},
		{"garbage body", []byte{4, 0, byte(message.TypePublish), 0xc1, 0xc1}, DefaultMaxFrame, ErrMalformed, false},
		{"trailing bytes in the body", []byte{4, 0, byte(message.TypePubAck), 0x80, 0x01}, DefaultMaxFrame, ErrMalformed, false},
		{"wrong shape", []byte{4, 0, byte(message.TypePubAck), 0x92, 0xa1, 'x'}, DefaultMaxFrame, ErrMalformed, false},
		{"array claims 65535 elements", []byte{6, 0, byte(message.TypePublish), 0x81, 0xa1, 'a', 0xdc, 0xff, 0xff}, DefaultMaxFrame, ErrMalformed, false},
		{"str32 claims 4 GB", []byte{9, 0, byte(message.TypePubAck), 0x81, 0xa1, 'e', 0xdb, 0xff, 0xff, 0xff, 0xff}, DefaultMaxFrame, ErrMalformed, false},
		{"map32 claims 2^32 entries", []byte{7, 0, byte(message.TypePubAck), 0xdf, 0xff, 0xff, 0xff, 0xff}, DefaultMaxFrame, ErrMalformed, false},
	}
	for _, c := range cases {
		r := NewReader(bytes.NewReader(c.in), c.max)
		_, err := r.Read()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// nesting beyond MaxDepth
	deep := bytes.Repeat([]byte{0x91}, MaxDepth+5)
	deep = append(deep, 0xc0)
	frame := append([]byte{byte(len(deep) + 2), 0, byte(message.TypePubAck)}, deep...)
	if _, err := NewReader(bytes.NewReader(frame), 0).Read(); !errors.Is(err, ErrMalformed) {
		t.Errorf("deep nesting: %v, want ErrMalformed", err)
	}
}

// TestDecodeAllocationBound: the worst frame for allocation amplification
// (a list of empty elements, each a whole struct in memory) allocates a
// bounded multiple of the frame's length.
func TestDecodeAllocationBound(t *testing.T) {
	body := []byte{0x81, 0xa1, 'a', 0xdd, 0, 0, 0xff, 0xff} // Attrs: array32 of 65535
	body = append(body, bytes.Repeat([]byte{0x80}, 0xffff)...)
	frame := binaryFrame(message.TypePublish, body)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m, _, err := Decode(frame, 0)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.(*message.Publish).Attrs); n != 0xffff {
		t.Fatalf("%d attrs", n)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	if limit := uint64(16 << 20); alloc > limit {
		t.Fatalf("decoding a %d-byte frame allocated %d bytes (limit %d)", len(frame), alloc, limit)
	}
	t.Logf("%d-byte frame: %d bytes allocated (%.1f×)", len(frame), alloc, float64(alloc)/float64(len(frame)))
	// one element more than MaxListLen is refused before decoding
	body = []byte{0x81, 0xa1, 'a', 0xdd, 0, 1, 0, 1}
	body = append(body, bytes.Repeat([]byte{0x80}, MaxListLen+1)...)
	if _, _, err := Decode(binaryFrame(message.TypePublish, body), 0); !errors.Is(err, ErrMalformed) {
		t.Fatalf("list of MaxListLen+1: %v, want ErrMalformed", err)
	}
}

func binaryFrame(t message.Type, body []byte) []byte {
	var hdr [16]byte
	n := putUvarint(hdr[:], uint64(len(body)+2))
	out := append(hdr[:n:n], byte(t>>8), byte(t))
	return append(out, body...)
}

func putUvarint(b []byte, x uint64) int {
	i := 0
	for x >= 0x80 {
		b[i] = byte(x) | 0x80
		x >>= 7
		i++
	}
	b[i] = byte(x)
	return i + 1
}

func TestEncodeErrors(t *testing.T) {
	if _, err := AppendFrame(nil, nil); err == nil {
		t.Fatal("nil message encoded")
	}
	// A message too large for a reader is refused by the reader, not the encoder.
	big := samplePublish(DefaultMaxFrame)
	frame, err := AppendFrame(nil, big)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Decode(frame, 0); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
}

var genCorpus = flag.Bool("wire.gencorpus", false, "rewrite the checked-in fuzz seed corpus under testdata/fuzz")

// TestGenerateCorpus writes one seed file per registered type (populated)
// plus some edge cases for FuzzReader and FuzzDecodeBody. Run with
// -wire.gencorpus after adding message types.
func TestGenerateCorpus(t *testing.T) {
	if !*genCorpus {
		t.Skip("run with -wire.gencorpus to rewrite testdata/fuzz")
	}
	rng := rand.New(rand.NewSource(7))
	write := func(dir, name string, vals ...any) {
		var b bytes.Buffer
		b.WriteString("go test fuzz v1\n")
		for _, v := range vals {
			switch v := v.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", v)
			case uint16:
				fmt.Fprintf(&b, "uint16(%d)\n", v)
			}
		}
		p := filepath.Join("testdata", "fuzz", dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stream []byte
	for _, typ := range sortedTypes() {
		m, _ := message.New(typ)
		populate(t, reflect.ValueOf(m).Elem(), rng, typ.String(), 0)
		frame, err := AppendFrame(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, frame...)
		write("FuzzReader", "seed-"+typ.String(), frame)
		_, body, _ := NewReader(bytes.NewReader(frame), 0).ReadFrame()
		write("FuzzDecodeBody", "seed-"+typ.String(), uint16(typ), body)
	}
	write("FuzzReader", "seed-all-types", stream)
	write("FuzzReader", "seed-truncated", stream[:len(stream)/2])
	write("FuzzReader", "seed-huge-length", []byte{0xff, 0xff, 0xff, 0x7f, 0, 1})
}

// Frames larger than the read chunk grow the buffer (up to the maximum),
// and it shrinks back afterwards.
func TestReaderLargeFrames(t *testing.T) {
	var stream []byte
	sizes := []int{10, 200 << 10, 10, 700 << 10, 10, 10}
	for i, n := range sizes {
		p := samplePublish(n)
		p.Seq = uint64(i)
		stream, _ = AppendFrame(stream, p)
	}
	r := NewReader(bytes.NewReader(stream), DefaultMaxFrame)
	for i, n := range sizes {
		m, err := r.Read()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if p := m.(*message.Publish); p.Seq != uint64(i) || len(p.Payload) != n {
			t.Fatalf("frame %d: seq %d, %d bytes", i, p.Seq, len(p.Payload))
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if len(r.buf) > readChunk {
		t.Fatalf("buffer stayed at %d bytes after the large frames", len(r.buf))
	}
}

// The read buffer starts small and grows while reads fill it.
func TestReaderBufferGrowsUnderLoad(t *testing.T) {
	var stream []byte
	for i := 0; i < 2000; i++ {
		stream, _ = AppendFrame(stream, samplePublish(200))
	}
	r := NewReader(bytes.NewReader(stream), 0)
	if len(r.buf) != minReadBuf {
		t.Fatalf("initial buffer %d", len(r.buf))
	}
	for i := 0; i < 2000; i++ {
		if _, err := r.Read(); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.buf) != readChunk {
		t.Fatalf("buffer %d after a long stream, want %d", len(r.buf), readChunk)
	}
}
