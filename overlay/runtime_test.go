package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// testBroker is one runtime on a fakeNet, running until stop.
type testBroker struct {
	rt   *Runtime
	ep   *fakeEndpoint
	stop context.CancelFunc
	done chan error
}

func startTestBroker(t *testing.T, net *fakeNet, id, addr string, join []string, edit func(*BrokerConfig)) *testBroker {
	t.Helper()
	cfg := TestbedBrokerConfig()
	cfg.ID, cfg.Listen, cfg.Join = id, addr, join
	if edit != nil {
		edit(&cfg)
	}
	log := zerolog.Nop()
	if os.Getenv("DELTAPUB_TEST_LOG") != "" {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).With().Str("broker", id).Logger().Level(zerolog.TraceLevel)
	}
	rt, err := NewRuntime(cfg, 1, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := net.add(message.BrokerID(id), addr, rt)
	ctx, cancel := context.WithCancel(context.Background())
	b := &testBroker{rt: rt, ep: ep, stop: cancel, done: make(chan error, 1)}
	go func() { b.done <- rt.Run(ctx, ep) }()
	return b
}

// shutdown stops the broker and waits for Run to return (its leave is
// bounded by leaveTimeout, in virtual time).
func (b *testBroker) shutdown(t *testing.T) {
	t.Helper()
	b.stop()
	if err := <-b.done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// recv returns the next message the broker sent to s, failing after a
// minute of virtual time.
func recv(t *testing.T, s *fakeSession) message.Message {
	t.Helper()
	select {
	case m := <-s.out:
		return m
	case <-time.After(time.Minute):
		t.Fatal("no message for the client within a minute")
		return nil
	}
}

func TestRuntimeRefusesClientsBeyondTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := newFakeNet(64)
		b := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, func(c *BrokerConfig) { c.Limits.MaxClients = 1 })
		defer b.shutdown(t)
		s1, s2 := newFakeSession(16), newFakeSession(16)
		b.rt.ClientUp(s1)
		b.rt.ClientUp(s2)
		synctest.Wait()
		if r := s2.closeReason(); !strings.Contains(r, "too many clients") {
			t.Errorf("second session: close reason %q, want too many clients", r)
		}
		if r := s1.closeReason(); r != "" {
			t.Errorf("first session closed: %q", r)
		}
		st, err := b.rt.State(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Runtime.Sessions != 1 {
			t.Errorf("sessions %d, want 1", st.Runtime.Sessions)
		}
	})
}

func TestRuntimeRefusesSubscriptionsBeyondTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := newFakeNet(64)
		b := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, func(c *BrokerConfig) { c.Limits.MaxSubsPerClient = 1 })
		defer b.shutdown(t)
		s := newFakeSession(16)
		b.rt.ClientUp(s)
		f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("A")}}}
		b.rt.ClientMessage(s, &message.Subscribe{Req: 1, Filter: f})
		b.rt.ClientMessage(s, &message.Subscribe{Req: 2, Filter: f})
		for {
			m := recv(t, s)
			if a, ok := m.(*message.SubAck); ok && a.Req == 2 {
				if !strings.Contains(a.Err, "too many subscriptions") {
					t.Errorf("second subscription: %+v, want refused", a)
				}
				break
			}
		}
	})
}

func TestRuntimeDisconnectsSlowConsumer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := newFakeNet(64)
		b := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, func(c *BrokerConfig) { c.Limits.MaxSubsPerClient = 1 })
		defer b.shutdown(t)
		// A session that never has room: the first answer the broker owes
		// it disconnects it, with a reason, instead of being dropped.
		s := newFakeSession(0)
		b.rt.ClientUp(s)
		f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("A")}}}
		b.rt.ClientMessage(s, &message.Subscribe{Req: 1, Filter: f})
		b.rt.ClientMessage(s, &message.Subscribe{Req: 2, Filter: f})
		synctest.Wait()
		if r := s.closeReason(); !strings.Contains(r, "slow consumer") {
			t.Errorf("close reason %q, want slow consumer", r)
		}
		st, err := b.rt.State(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Runtime.Sessions != 0 {
			t.Errorf("sessions %d after the disconnect, want 0", st.Runtime.Sessions)
		}
	})
}

func TestRuntimeResolvesJoinpointAndShutsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := newFakeNet(64)
		b1 := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, nil)
		b2 := startTestBroker(t, net, "B2", "127.0.0.1:2", []string{"127.0.0.1:1"}, nil)
		time.Sleep(time.Second) // virtual
		synctest.Wait()
		for _, b := range []*testBroker{b1, b2} {
			st, err := b.rt.State(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Runtime.Connected) != 1 {
				t.Errorf("%s: connected to %v, want one peer", st.ID, st.Runtime.Connected)
			}
		}
		s := newFakeSession(16)
		b2.rt.ClientUp(s)
		b2.shutdown(t)
		if r := s.closeReason(); r == "" {
			t.Error("client session still open after shutdown")
		}
		b1.shutdown(t)
		if _, err := b1.rt.State(t.Context()); err == nil {
			t.Error("State answered after Run returned")
		}
	})
}

// chainOnFakeNet starts brokers B1..Bn in a chain (each joining the
// previous) on a fake network and waits (virtual time) until all joined.
func chainOnFakeNet(t *testing.T, net *fakeNet, n int, edit func(*BrokerConfig)) []*testBroker {
	t.Helper()
	var bs []*testBroker
	for i := 1; i <= n; i++ {
		var join []string
		if i > 1 {
			join = []string{fmt.Sprintf("10.0.0.%d:1", i-1)}
		}
		b := startTestBroker(t, net, fmt.Sprintf("B%d", i), fmt.Sprintf("10.0.0.%d:1", i), join, edit)
		for tries := 0; !b.rt.Joined(); tries++ {
			if tries > 1000 {
				t.Fatalf("B%d did not join within 10 s of virtual time", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
		bs = append(bs, b)
	}
	return bs
}

// TestRuntimeDeliversThroughAChain runs the real core in runtimes on the
// in-memory transport: a subscriber at the last broker, a publisher at the
// first, publications delivered exactly once and in order, each
// acknowledged. With a crash, the middle broker is cut off half-way
// (δ = 1 in the 4-broker chain lets B1 bypass B2).
func TestRuntimeDeliversThroughAChain(t *testing.T) {
	t.Run("no failure", func(t *testing.T) { runChainDelivery(t, 3, 0, 50) })
	t.Run("crash of B2", func(t *testing.T) { runChainDelivery(t, 4, 2, 200) })
}

func runChainDelivery(t *testing.T, brokers, crash, n int) {
	synctest.Test(t, func(t *testing.T) {
		net := newFakeNet(1024)
		bs := chainOnFakeNet(t, net, brokers, func(c *BrokerConfig) { c.Delta = 1 })
		defer func() {
			for i := len(bs) - 1; i >= 0; i-- {
				bs[i].shutdown(t)
			}
		}()
		subS := newFakeSession(4096)
		last := bs[len(bs)-1]
		last.rt.ClientUp(subS)
		f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("T")}}}
		last.rt.ClientMessage(subS, &message.Subscribe{Req: 1, Filter: f})
		for confirmed := false; !confirmed; {
			a, ok := recv(t, subS).(*message.SubAck)
			if ok && a.Err != "" {
				t.Fatalf("subscription refused: %s", a.Err)
			}
			confirmed = ok && a.Confirmed
		}
		pubS := newFakeSession(4096)
		bs[0].rt.ClientUp(pubS)
		bs[0].rt.ClientMessage(pubS, &message.ClientHello{Publisher: "p", Epoch: 1})
		for i := 1; i <= n; i++ {
			if crash > 0 && i == n/2 {
				net.crash(fmt.Sprintf("10.0.0.%d:1", crash))
			}
			bs[0].rt.ClientMessage(pubS, &message.Publish{Seq: uint64(i), Time: 1,
				Attrs: []matching.Attr{{Name: "class", Value: matching.Str("T")}, {Name: "n", Value: matching.Int(int64(i))}}})
			time.Sleep(5 * time.Millisecond) // virtual: 200 publications/s
		}
		for want := uint64(1); want <= uint64(n); {
			var m message.Message
			select {
			case m = <-subS.out:
			case <-time.After(time.Minute):
				t.Fatalf("no delivery within a minute after %d of %d", want-1, n)
			}
			switch m := m.(type) {
			case *message.Deliver:
				if m.Pub.Seq != want || m.Pub.Publisher != "p" {
					t.Fatalf("delivery %v, want p/1/%d", m.Pub, want)
				}
				want++
			case *message.Gap:
				t.Fatalf("unexpected gap %+v", m)
			}
		}
		var acked uint64
		for acked < uint64(n) {
			a, ok := recv(t, pubS).(*message.PubAck)
			if ok {
				if a.Err != "" {
					t.Fatalf("publication %d refused: %s", a.Seq, a.Err)
				}
				acked = max(acked, a.Seq)
			}
		}
		time.Sleep(time.Second) // virtual: retransmissions would have arrived
		synctest.Wait()
		select {
		case m := <-subS.out:
			t.Errorf("unexpected message after the %d deliveries: %T %+v", n, m, m)
		default:
		}
	})
}

// TestRuntimeRetryAfterReconnectIsNotADuplicate: a publisher whose session
// broke re-sends its unacknowledged publications on a new session under the
// same identity (what the client library does); the subscriber gets each
// publication once.
func TestRuntimeRetryAfterReconnectIsNotADuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := newFakeNet(1024)
		bs := chainOnFakeNet(t, net, 2, nil)
		defer func() {
			bs[1].shutdown(t)
			bs[0].shutdown(t)
		}()
		subS := newFakeSession(1024)
		bs[1].rt.ClientUp(subS)
		f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("T")}}}
		bs[1].rt.ClientMessage(subS, &message.Subscribe{Req: 1, Filter: f})
		for confirmed := false; !confirmed; {
			a, ok := recv(t, subS).(*message.SubAck)
			confirmed = ok && a.Confirmed
		}
		publish := func(s *fakeSession, from, to int) {
			for i := from; i <= to; i++ {
				bs[0].rt.ClientMessage(s, &message.Publish{Seq: uint64(i), Time: 1,
					Attrs: []matching.Attr{{Name: "class", Value: matching.Str("T")}}})
			}
		}
		first := newFakeSession(1024)
		bs[0].rt.ClientUp(first)
		bs[0].rt.ClientMessage(first, &message.ClientHello{Publisher: "p", Epoch: 9})
		publish(first, 1, 5)
		synctest.Wait()
		bs[0].rt.ClientDown(first, errors.New("connection lost"))
		// Acknowledgements of 4 and 5 were lost with the session: the
		// client sends them again, then goes on.
		second := newFakeSession(1024)
		bs[0].rt.ClientUp(second)
		bs[0].rt.ClientMessage(second, &message.ClientHello{Publisher: "p", Epoch: 9})
		publish(second, 4, 8)
		var acked uint64
		for acked < 8 {
			if a, ok := recv(t, second).(*message.PubAck); ok {
				if a.Err != "" {
					t.Fatalf("publication %d refused: %s", a.Seq, a.Err)
				}
				acked = max(acked, a.Seq)
			}
		}
		time.Sleep(time.Second) // virtual
		synctest.Wait()
		var got []uint64
		for len(subS.out) > 0 {
			if d, ok := (<-subS.out).(*message.Deliver); ok {
				got = append(got, d.Pub.Seq)
			}
		}
		if !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7, 8}) {
			t.Errorf("deliveries %v, want 1..8 once each", got)
		}
	})
}

func TestCoalesceAcksKeepsTheLastAckBeforeEachRefusal(t *testing.T) {
	r := &Runtime{laterAck: map[message.ClientID]bool{}}
	ack := func(seq uint64, err string) *message.PubAck { return &message.PubAck{Seq: seq, Err: err} }
	out := []ClientEnvelope{
		{To: 1, Msg: ack(1, "")},
		{To: 2, Msg: &message.Deliver{}},
		{To: 1, Msg: ack(2, "")},
		{To: 2, Msg: ack(1, "")},
		{To: 1, Msg: ack(3, "backpressure")},
		{To: 1, Msg: ack(4, "sequence gap: expected 3")},
		{To: 2, Msg: ack(2, "")},
	}
	r.coalesceAcks(out)
	var got []string
	for _, e := range out {
		switch m := e.Msg.(type) {
		case nil:
		case *message.PubAck:
			got = append(got, fmt.Sprintf("%d:%d%s", e.To, m.Seq, m.Err))
		default:
			got = append(got, fmt.Sprintf("%d:%T", e.To, m))
		}
	}
	want := []string{"2:*message.Deliver", "1:2", "1:3backpressure", "1:4sequence gap: expected 3", "2:2"}
	if !slices.Equal(got, want) {
		t.Errorf("after coalescing %v, want %v", got, want)
	}
}

// TestRuntimeBackpressureNeverLeavesAHole: while a link is congested the
// runtime refuses new publications; afterwards it resumes only with the
// first refused one (never leaving a hole for the core), and copies of
// accepted publications always pass.
func TestRuntimeBackpressureNeverLeavesAHole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := newFakeNet(64)
		b := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, nil)
		defer b.shutdown(t)
		for !b.rt.Joined() {
			time.Sleep(10 * time.Millisecond)
		}
		s := newFakeSession(256)
		b.rt.ClientUp(s)
		b.rt.ClientMessage(s, &message.ClientHello{Publisher: "p", Epoch: 1})
		pub := func(seq uint64) *message.PubAck {
			t.Helper()
			b.rt.ClientMessage(s, &message.Publish{Seq: seq, Attrs: []matching.Attr{{Name: "class", Value: matching.Str("T")}}})
			for {
				if a, ok := recv(t, s).(*message.PubAck); ok {
					return a
				}
			}
		}
		congest := func(on bool) {
			b.rt.Do(t.Context(), func(*Node) {
				if on {
					b.rt.congested = time.Now().Add(time.Hour)
				} else {
					b.rt.congested = time.Time{}
				}
			})
		}
		if a := pub(1); a.Err != "" {
			t.Fatalf("1: %+v", a)
		}
		congest(true)
		for _, seq := range []uint64{2, 3} {
			if a := pub(seq); a.Err != "backpressure" {
				t.Fatalf("%d while congested: %+v, want backpressure", seq, a)
			}
		}
		if a := pub(1); a.Err != "" || a.Seq != 1 {
			t.Errorf("copy of 1 while congested: %+v, want acknowledged", a)
		}
		congest(false)
		if a := pub(3); a.Err != "backpressure" {
			t.Errorf("3 before 2 after congestion: %+v, want refused", a)
		}
		for _, seq := range []uint64{2, 3, 4} {
			if a := pub(seq); a.Err != "" || a.Seq != seq {
				t.Errorf("%d after congestion: %+v, want acknowledged", seq, a)
			}
		}
	})
}

// TestRuntimeJoinsThroughTheNextJoinpoint: a restarted broker's first
// joinpoint answers the dial but is not a member (it is restarting too,
// its own joinpoint gone); the runtime hands the core every joinpoint, so
// the core moves on to the next one, a member, and joins there. Given the
// first that answered alone (as the runtime once did), it asked that one
// for ever.
func TestRuntimeJoinsThroughTheNextJoinpoint(t *testing.T) {
	for _, named := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			net := newFakeNet(64)
			b1 := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, nil)
			// B6 is up and answers dials, but never becomes a member.
			b6 := startTestBroker(t, net, "B6", "127.0.0.1:6", []string{"127.0.0.1:99"}, nil)
			join := []string{"127.0.0.1:6", "127.0.0.1:1"}
			if named {
				join = []string{"B6@127.0.0.1:6", "B1@127.0.0.1:1"}
			}
			b5 := startTestBroker(t, net, "B5", "127.0.0.1:5", join, nil)
			for tries := 0; !b5.rt.Joined(); tries++ {
				if tries > 1000 {
					t.Fatalf("named=%v: B5 did not join within 10 s of virtual time", named)
				}
				time.Sleep(10 * time.Millisecond)
			}
			for _, b := range []*testBroker{b5, b6, b1} {
				b.shutdown(t)
			}
		})
	}
}
