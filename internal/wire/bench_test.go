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

// benchPub is a publication as brokers forward it: four attributes, a
// 250-byte payload and δ+1 = 2 stamps.
func benchPub() *message.Pub {
	p := samplePublish(250)
	return &message.Pub{ID: message.PubID{Publisher: "bench-publisher", Epoch: 1764470000000000000, Seq: 123456},
		Attrs: p.Attrs, Payload: p.Payload, Time: p.Time,
		Stamps: []message.Stamp{{B: "B1", E: 1764470000, S: 99999}, {B: "B0", E: 1764470001, S: 88888}}}
}

// pubStream returns a reader of benchPub frames as a broker's link reader
// sees them (a stream of copies, arena on), starting over at the end.
func pubStream(b *testing.B) func() *message.Pub {
	frame, _ := AppendFrame(nil, benchPub())
	stream := bytes.Repeat(frame, 256)
	src := bytes.NewReader(stream)
	r := NewReader(src, 0)
	r.UseArena(16 << 10) // as a broker's readers do
	return func() *message.Pub {
		if src.Len() == 0 {
			src.Reset(stream)
		}
		m, err := r.Read()
		if err != nil {
			b.Fatal(err)
		}
		return m.(*message.Pub)
	}
}

// BenchmarkForwardPub250 is the codec work of one broker hop: read a Pub
// frame from a link, make the forwarded Pub (this broker's stamp first, as
// the core does) and encode it for the next link.
func BenchmarkForwardPub250(b *testing.B) {
	next := pubStream(b)
	e := NewEncoder()
	out := make([]byte, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		in := next()
		var err error
		stamps := make([]message.Stamp, 0, 2)
		stamps = append(stamps, message.Stamp{B: "B2", E: 1764470002, S: 77777}, in.Stamps[0])
		fwd := &message.Pub{ID: in.ID, Attrs: in.Attrs, Payload: in.Payload, Time: in.Time, Stamps: stamps}
		if out, err = e.AppendFrame(out[:0], fwd); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPubToDeliver100 is the codec work of the far edge broker for
// one publication and 100 local subscribers: read the Pub, encode one
// Deliver per subscriber session (each session has its own Encoder).
func BenchmarkPubToDeliver100(b *testing.B) {
	next := pubStream(b)
	encs := make([]*Encoder, 100)
	for i := range encs {
		encs[i] = NewEncoder()
	}
	out := make([]byte, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		in := next()
		var err error
		for i, e := range encs {
			d := &message.Deliver{Sub: message.SubID{Edge: "B2", Epoch: 1764470002, N: uint64(i + 1)},
				Pub: in.ID, Attrs: in.Attrs, Payload: in.Payload, Time: in.Time}
			if out, err = e.AppendFrame(out[:0], d); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkPubToDeliverSet100 is the same work as the runtime now does it:
// the publication encoded once (DeliveryEncoder), one DeliverSet frame per
// session copied into each session's send buffer.
func BenchmarkPubToDeliverSet100(b *testing.B) {
	next := pubStream(b)
	var de DeliveryEncoder
	bufs := make([][]byte, 100)
	subs := make([]uint64, 1)
	b.ReportAllocs()
	for b.Loop() {
		in := next()
		d := &message.Deliver{Pub: in.ID, Attrs: in.Attrs, Payload: in.Payload, Time: in.Time}
		de.Reset(d)
		for i := range bufs {
			subs[0] = uint64(i + 1)
			bufs[i] = append(bufs[i][:0], de.DeliverSetFrame(subs)...)
		}
	}
}
