package runtime

import (
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// A conflated subscription gets, per symbol, only the latest publication
// of each interval, in the order the kept ones arrived; a publication
// without the attribute goes out at once; a plain subscription of the same
// session gets everything; a bad conflation is refused.
func TestConflatedSubscriptionGetsTheLatestPerKey(t *testing.T) {
	cfg := DefaultBrokerConfig()
	cfg.ID, cfg.Listen = "B1", "127.0.0.1:1"
	rt, err := NewRuntime(cfg, 1, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1000, 0)
	rt.now = func() time.Time { return clock }
	rt.start(nil)
	rt.drain()
	s := &encodingSession{enc: wire.NewEncoder(), version: 1}
	rt.handle(event{kind: evClientUp, sess: s})
	flt, err := matching.ParseFilter("[class,eq,'STOCK']")
	if err != nil {
		t.Fatal(err)
	}
	subscribe := func(req uint64, cf *message.Conflation) {
		rt.handle(event{kind: evClientMsg, sess: s, msg: &message.Subscribe{Req: req, Filter: flt, Conflate: cf}})
		rt.drain()
	}
	subscribe(1, &message.Conflation{Key: "symbol", IntervalMS: 100})
	subscribe(2, nil)
	subscribe(3, &message.Conflation{Key: "symbol", IntervalMS: 5})
	subs := map[uint64]message.SubID{}
	refused := ""
	for _, m := range readFrames(t, s) {
		if a, ok := m.(*message.SubAck); ok {
			if a.Err != "" {
				refused = a.Err
			} else {
				subs[a.Req] = a.Sub
			}
		}
	}
	if len(subs) != 2 || refused == "" {
		t.Fatalf("subscriptions %v, refusal %q: want two accepted and the 5 ms interval refused", subs, refused)
	}
	s.buf, s.frames = s.buf[:0], 0

	pub := &encodingSession{enc: wire.NewEncoder(), version: 1}
	rt.handle(event{kind: evClientUp, sess: pub})
	rt.handle(event{kind: evClientMsg, sess: pub, msg: &message.ClientHello{Publisher: "p", Epoch: 1}})
	symbols := []string{"A", "B", "A", "A", "", "B"} // "": no symbol attribute
	for i, sym := range symbols {
		attrs := []matching.Attr{{Name: "class", Value: matching.Str("STOCK")}}
		if sym != "" {
			attrs = append(attrs, matching.Attr{Name: "symbol", Value: matching.Str(sym)})
		}
		rt.handle(event{kind: evClientMsg, sess: pub, msg: &message.Publish{Seq: uint64(i + 1), Attrs: attrs}})
	}
	rt.drain()
	got := func() map[message.SubID][]uint64 {
		out := map[message.SubID][]uint64{}
		for _, m := range readFrames(t, s) {
			if d, ok := m.(*message.Deliver); ok { // a version-1 session: one Deliver per subscription
				out[d.Sub] = append(out[d.Sub], d.Pub.Seq)
			}
		}
		s.buf, s.frames = s.buf[:0], 0
		return out
	}
	equal := func(a, b []uint64) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	now := got()
	if !equal(now[subs[2]], []uint64{1, 2, 3, 4, 5, 6}) || !equal(now[subs[1]], []uint64{5}) {
		t.Fatalf("at once: plain got %v (want 1..6), conflated got %v (want only 5, which has no symbol)", now[subs[2]], now[subs[1]])
	}
	clock = clock.Add(50 * time.Millisecond)
	rt.flushConflated(clock)
	rt.drain()
	if early := got(); len(early[subs[1]]) != 0 {
		t.Fatalf("conflated got %v before its interval ended", early[subs[1]])
	}
	clock = clock.Add(60 * time.Millisecond)
	rt.flushConflated(clock)
	rt.drain()
	if end := got(); !equal(end[subs[1]], []uint64{4, 6}) {
		t.Fatalf("at the interval's end the conflated subscription got %v, want [4 6] (latest A, latest B, in arrival order)", end[subs[1]])
	}
}
