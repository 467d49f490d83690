package wire

import (
	"bytes"
	"math/rand"
	"reflect"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// randomDeliverSet fills a DeliverSet with random values: canonical
// attribute values (the compact form) and, for some, values that are not
// (the full map), and lengths across msgpack's size classes.
func randomDeliverSet(t *testing.T, rng *rand.Rand) *message.DeliverSet {
	m := new(message.DeliverSet)
	switch rng.Intn(4) {
	case 0: // zero value
		return m
	case 1:
		populate(t, reflect.ValueOf(m).Elem(), rng, "DeliverSet", 0)
		widen(reflect.ValueOf(m).Elem(), rng)
		return m
	}
	m.Subs = make([]uint64, rng.Intn(20))
	for i := range m.Subs {
		m.Subs[i] = rng.Uint64() >> rng.Intn(64)
	}
	if len(m.Subs) == 0 {
		m.Subs = nil // the format does not tell an empty list from none
	}
	m.Pub = message.PubID{Publisher: "p" + string(bytes.Repeat([]byte{'x'}, rng.Intn(40))), Epoch: rng.Uint64(), Seq: uint64(rng.Intn(1 << 20))}
	m.Time = rng.Int63() - rng.Int63()
	if rng.Intn(5) > 0 {
		m.Attrs = make([]matching.Attr, rng.Intn(6))
		for i := range m.Attrs {
			a := &m.Attrs[i]
			a.Name = string(rune('a' + rng.Intn(26)))
			switch rng.Intn(5) {
			case 0:
				a.Value = matching.Str(string(bytes.Repeat([]byte{'s'}, []int{0, 3, 31, 32, 300}[rng.Intn(5)])))
			case 1:
				a.Value = matching.Int([]int64{0, 1, -1, -33, 1 << 40, -1 << 63}[rng.Intn(6)])
			case 2:
				a.Value = matching.Float([]float64{0, 1.5, -2.25, 1e300}[rng.Intn(4)])
			case 3: // not canonical: the full map
				a.Value = matching.Value{Kind: matching.KindInt, Int: 5, Str: "also"}
			default:
				a.Value = matching.Value{Kind: matching.Kind(1 + rng.Intn(9)), Float: 2.5}
			}
		}
	}
	if rng.Intn(4) > 0 {
		m.Payload = bytes.Repeat([]byte{'z'}, []int{0, 1, 255, 256, 70000}[rng.Intn(5)])
	}
	return m
}

func TestDeliverSetRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(testSeed(t)))
	for i := 0; i < 2000; i++ {
		m := randomDeliverSet(t, rng)
		if err := roundTrip(m, new(message.DeliverSet)); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
	}
}

// A DeliveryEncoder's frames are what AppendFrame writes for the same
// Deliver (byte for byte) and DeliverSet, whatever the publication.
func TestDeliveryEncoderFrames(t *testing.T) {
	rng := rand.New(rand.NewSource(testSeed(t)))
	var e DeliveryEncoder
	for i := 0; i < 1000; i++ {
		ds := randomDeliverSet(t, rng)
		d := &message.Deliver{Pub: ds.Pub, Attrs: ds.Attrs, Payload: ds.Payload, Time: ds.Time}
		e.Reset(d)
		if !e.Same(&d.Pub, d.Attrs, d.Payload, d.Time) {
			t.Fatal("Same is false right after Reset")
		}
		for j := 0; j < 3; j++ {
			d.Sub = message.SubID{Edge: message.BrokerID("B" + string(rune('0'+j))), Epoch: rng.Uint64(), N: uint64(rng.Intn(1000))}
			want, err := AppendFrame(nil, d)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.DeliverFrame(&d.Sub); !bytes.Equal(got, want) {
				t.Fatalf("case %d: Deliver frame differs\n got  %x\n want %x", i, got, want)
			}
		}
		want, err := AppendFrame(nil, ds)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.DeliverSetFrame(ds.Subs); !bytes.Equal(got, want) {
			t.Fatalf("case %d: DeliverSet frame differs\n got  %x\n want %x", i, got, want)
		}
	}
	// A different publication with the same identity but other slices is
	// not the same (the slices are the identity within a drain).
	d := &message.Deliver{Pub: message.PubID{Publisher: "p", Epoch: 1, Seq: 1}, Payload: []byte("a")}
	e.Reset(d)
	if e.Same(&d.Pub, d.Attrs, []byte("a"), d.Time) {
		t.Fatal("another payload slice counts as the same publication")
	}
}

// The compact frame of a stock quote is smaller than the Deliver frame.
func TestDeliverSetIsSmaller(t *testing.T) {
	p := samplePublish(250)
	d := &message.Deliver{Sub: message.SubID{Edge: "B2", Epoch: 1764470002000000000, N: 17},
		Pub: message.PubID{Publisher: "pub-0123456789ab", Epoch: 1764470001000000000, Seq: 123456}, Attrs: p.Attrs, Payload: p.Payload, Time: p.Time}
	var e DeliveryEncoder
	e.Reset(d)
	classic, set := len(e.DeliverFrame(&d.Sub)), len(e.DeliverSetFrame([]uint64{17}))
	t.Logf("250-byte payload, 4 attributes: Deliver %d bytes, DeliverSet %d bytes", classic, set)
	if set >= classic-40 {
		t.Fatalf("DeliverSet %d bytes, Deliver %d: expected at least 40 bytes less", set, classic)
	}
}

// FuzzDeliverSet: any body the DeliverSet decoder accepts re-encodes to a
// body that decodes to the same value; the decoder never panics.
func FuzzDeliverSet(f *testing.F) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 8; i++ {
		b, _ := NewEncoder().AppendBody(nil, randomDeliverSet(&testing.T{}, rng))
		f.Add(b)
	}
	f.Add([]byte{deliverSetHeader})
	f.Fuzz(func(t *testing.T, body []byte) {
		defer watchdog(body)()
		r := NewReader(nil, 0)
		m := new(message.DeliverSet)
		if err := r.DecodeInto(m, body); err != nil {
			return
		}
		again, err := NewEncoder().AppendBody(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		m2 := new(message.DeliverSet)
		if err := r.DecodeInto(m2, again); err != nil {
			t.Fatalf("re-encoded DeliverSet does not decode: %v\n in  %x\n out %x", err, body, again)
		}
		if !reflect.DeepEqual(m, m2) && !bytes.Equal(again, mustBody(t, m2)) { // NaN != NaN
			t.Fatalf("DeliverSet round trip differs\n first  %#v\n second %#v", m, m2)
		}
	})
}

func mustBody(t *testing.T, m message.Message) []byte {
	b, err := NewEncoder().AppendBody(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
