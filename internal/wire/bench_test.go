package wire

import (
	"bytes"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// bench250 is a publication whose frame is about 250 bytes: four typed
// attributes and a 135-byte payload.
func bench250(b *testing.B) *message.Publish {
	p := samplePublish(135)
	f, _ := AppendFrame(nil, p)
	b.ReportMetric(float64(len(f)), "frame_bytes")
	return p
}

func BenchmarkEncodePublish250(b *testing.B) {
	p := bench250(b)
	e := NewEncoder()
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = e.AppendFrame(buf[:0], p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodePublish250(b *testing.B) {
	p := bench250(b)
	frame, _ := AppendFrame(nil, p)
	// A stream of many copies, read through one Reader as a link does.
	const n = 1024
	stream := bytes.Repeat(frame, n)
	src := bytes.NewReader(stream)
	r := NewReader(src, 0)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == n {
			src.Reset(stream)
			i = 0
		}
		if _, err := r.Read(); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkValidate250(b *testing.B) {
	p := bench250(b)
	frame, _ := AppendFrame(nil, p)
	_, body, _ := NewReader(bytes.NewReader(frame), 0).ReadFrame()
	b.ReportAllocs()
	for b.Loop() {
		if err := validate(body); err != nil {
			b.Fatal(err)
		}
	}
}

// The generic (reflection) msgpack path, for comparison with the fast one.
func BenchmarkEncodePublish250Generic(b *testing.B) {
	p := bench250(b)
	e := NewEncoder()
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = e.appendGeneric(buf[:0], p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodePublish250Generic(b *testing.B) {
	p := bench250(b)
	frame, _ := AppendFrame(nil, p)
	r := NewReader(bytes.NewReader(frame), 0)
	_, body, _ := r.ReadFrame()
	b.ReportAllocs()
	for b.Loop() {
		m := new(message.Publish)
		if err := r.decodeGeneric(m, body); err != nil {
			b.Fatal(err)
		}
	}
}
