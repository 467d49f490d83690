package runtime

import (
	"bytes"
	"slices"
	"testing"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// readFrames decodes every frame a session was sent.
func readFrames(t *testing.T, s *encodingSession) []message.Message {
	t.Helper()
	var out []message.Message
	r := wire.NewReader(bytes.NewReader(s.buf), 0)
	for range s.frames {
		m, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// The deliveries of one publication are encoded once: a version-2 session
// gets one DeliverSet naming all its matching subscriptions, a version-1
// session one Deliver per subscription, byte for byte what the generic
// path would send; the publication's identity is in every frame.
func TestRuntimeDeliversOnePublicationEncodedOnce(t *testing.T) {
	cfg := DefaultBrokerConfig()
	cfg.ID, cfg.Listen = "B1", "127.0.0.1:1"
	rt, err := NewRuntime(cfg, 1, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rt.start(nil)
	rt.drain()
	v2 := &encodingSession{enc: wire.NewEncoder(), version: 2}
	v1 := &encodingSession{enc: wire.NewEncoder(), version: 1}
	pubSess := &encodingSession{enc: wire.NewEncoder(), version: 2}
	filters := []string{"[class,eq,'STOCK']", "[class,eq,'STOCK'],[price,>,100]", "[class,eq,'STOCK'],[price,<,100]"}
	var v2subs, v1subs []message.SubID
	for _, s := range []*encodingSession{v2, v1} {
		rt.handle(event{kind: evClientUp, sess: s})
		for i, f := range filters {
			flt, err := matching.ParseFilter(f)
			if err != nil {
				t.Fatal(err)
			}
			rt.handle(event{kind: evClientMsg, sess: s, msg: &message.Subscribe{Req: uint64(i + 1), Filter: flt}})
			rt.drain()
		}
		for _, m := range readFrames(t, s) {
			if a, ok := m.(*message.SubAck); ok && a.Err == "" && !slices.Contains(v2subs, a.Sub) && !slices.Contains(v1subs, a.Sub) {
				if s == v2 {
					v2subs = append(v2subs, a.Sub)
				} else {
					v1subs = append(v1subs, a.Sub)
				}
			}
		}
		s.buf, s.frames = s.buf[:0], 0
	}
	if len(v2subs) != 3 || len(v1subs) != 3 {
		t.Fatalf("subscriptions accepted: %v and %v, want 3 each", v2subs, v1subs)
	}
	rt.handle(event{kind: evClientUp, sess: pubSess})
	rt.handle(event{kind: evClientMsg, sess: pubSess, msg: &message.ClientHello{Publisher: "p", Epoch: 3}})
	quote := []matching.Attr{{Name: "class", Value: matching.Str("STOCK")}, {Name: "price", Value: matching.Float(101.5)}}
	rt.handle(event{kind: evClientMsg, sess: pubSess, msg: &message.Publish{Seq: 1, Attrs: quote, Payload: []byte("q1"), Time: 42}})
	rt.drain()

	id := message.PubID{Publisher: "p", Epoch: 3, Seq: 1}
	got := readFrames(t, v2)
	if len(got) != 1 {
		t.Fatalf("version-2 session got %d frames, want one DeliverSet: %+v", len(got), got)
	}
	ds, ok := got[0].(*message.DeliverSet)
	if !ok || ds.Pub != id || string(ds.Payload) != "q1" || ds.Time != 42 || len(ds.Attrs) != 2 {
		t.Fatalf("version-2 session got %+v", got[0])
	}
	if want := []uint64{v2subs[0].N, v2subs[1].N}; !slices.Equal(ds.Subs, want) {
		t.Fatalf("DeliverSet names %v, want %v (the two matching subscriptions, in order)", ds.Subs, want)
	}
	got = readFrames(t, v1)
	if len(got) != 2 {
		t.Fatalf("version-1 session got %d frames, want 2 Delivers", len(got))
	}
	for i, m := range got {
		d, ok := m.(*message.Deliver)
		if !ok || d.Sub != v1subs[i] || d.Pub != id || string(d.Payload) != "q1" {
			t.Fatalf("version-1 frame %d: %+v", i, m)
		}
	}
	// The shared encoding is byte for byte the generic Deliver.
	want, _ := wire.AppendFrame(nil, got[0])
	if !bytes.HasPrefix(v1.buf, want) {
		t.Fatal("version-1 Deliver frame differs from the generic encoding")
	}
}
