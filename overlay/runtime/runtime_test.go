package runtime

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

	"github.com/deltapub/deltapub/internal/storage"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/rs/zerolog"
)

// testBroker is one runtime on a MemNetwork, running until stop.
type testBroker struct {
	rt   *Runtime
	ep   *MemEndpoint
	stop context.CancelFunc
	done chan error
}

func startTestBroker(t *testing.T, net *MemNetwork, id, addr string, join []string, edit func(*BrokerConfig)) *testBroker {
	t.Helper()
	cfg := TestbedBrokerConfig()
	cfg.ID, cfg.Listen, cfg.Join = id, addr, join
	if edit != nil {
		edit(&cfg)
	}
	return runTestBroker(t, net, cfg, 1, nil)
}

// runTestBroker starts the runtime of cfg with epoch (and the store st,
// nil: none) on net.
func runTestBroker(t *testing.T, net *MemNetwork, cfg BrokerConfig, epoch uint64, st storage.Store) *testBroker {
	t.Helper()
	log := zerolog.Nop()
	if os.Getenv("DELTAPUB_TEST_LOG") != "" {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).With().Str("broker", cfg.ID).Logger().Level(zerolog.TraceLevel)
	}
	rt, err := NewRuntime(cfg, epoch, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st != nil {
		rt.KeepState(st)
	}
	ep, err := ListenMem(net, &cfg, rt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &testBroker{rt: rt, ep: ep, stop: cancel, done: make(chan error, 1)}
	go func() {
		err := rt.Run(ctx, ep)
		ep.Close() // as the process exits
		b.done <- err
	}()
	return b
}

// sessions is the number of client sessions b's runtime holds.
func sessions(t *testing.T, b *testBroker) int {
	t.Helper()
	st, err := b.rt.State(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st.Runtime.Sessions
}

// connect opens a client session with the broker at addr and waits (in
// virtual time) until the broker has taken it in.
func connect(t *testing.T, net *MemNetwork, addr string) *MemClient {
	t.Helper()
	c, err := net.DialClient(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return c
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

// recv returns the next message the broker sent to c, failing after a
// minute of virtual time.
func recv(t *testing.T, c *MemClient) message.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("no message for the client within a minute: %v", err)
	}
	return m
}

// queued returns what the broker sent to c and c has not read yet.
func queued(c *MemClient) []message.Message {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var out []message.Message
	for {
		m, err := c.Next(done)
		if err != nil {
			return out
		}
		out = append(out, m)
	}
}

// closedWhy reads what c was sent and returns why the broker closed the
// session ("" while it is open).
func closedWhy(c *MemClient) string {
	queued(c)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Next(done); err != nil && !errors.Is(err, context.Canceled) {
		return err.Error()
	}
	return ""
}

func TestRuntimeRefusesClientsBeyondTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewMemNetwork()
		b := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, func(c *BrokerConfig) { c.Limits.MaxClients = 1 })
		defer b.shutdown(t)
		c1 := connect(t, net, "127.0.0.1:1")
		c2 := connect(t, net, "127.0.0.1:1")
		if r := closedWhy(c2); !strings.Contains(r, "too many clients") {
			t.Errorf("second session: close reason %q, want too many clients", r)
		}
		if r := closedWhy(c1); r != "" {
			t.Errorf("first session closed: %q", r)
		}
		if n := sessions(t, b); n != 1 {
			t.Errorf("sessions %d, want 1", n)
		}
	})
}

func TestRuntimeRefusesSubscriptionsBeyondTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewMemNetwork()
		b := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, func(c *BrokerConfig) { c.Limits.MaxSubsPerClient = 1 })
		defer b.shutdown(t)
		s := connect(t, net, "127.0.0.1:1")
		f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("A")}}}
		s.Send(&message.Subscribe{Req: 1, Filter: f})
		s.Send(&message.Subscribe{Req: 2, Filter: f})
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
		net := NewMemNetwork()
		b := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, func(c *BrokerConfig) {
			c.Limits.MaxSubsPerClient = 1
			c.Limits.SendQueue = 1
		})
		defer b.shutdown(t)
		// A client that does not read, with room for one message: the
		// second answer the broker owes it disconnects it, with a reason,
		// instead of being dropped.
		s := connect(t, net, "127.0.0.1:1")
		f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("A")}}}
		s.Send(&message.Subscribe{Req: 1, Filter: f})
		s.Send(&message.Subscribe{Req: 2, Filter: f})
		synctest.Wait()
		if r := closedWhy(s); !strings.Contains(r, "slow consumer") {
			t.Errorf("close reason %q, want slow consumer", r)
		}
		if n := sessions(t, b); n != 0 {
			t.Errorf("sessions %d after the disconnect, want 0", n)
		}
	})
}

func TestRuntimeResolvesJoinpointAndShutsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewMemNetwork()
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
		s := connect(t, net, "127.0.0.1:2")
		b2.shutdown(t)
		if r := closedWhy(s); r == "" {
			t.Error("client session still open after shutdown")
		}
		b1.shutdown(t)
		if _, err := b1.rt.State(t.Context()); err == nil {
			t.Error("State answered after Run returned")
		}
	})
}

// chainOnMemNet starts brokers B1..Bn in a chain (each joining the
// previous) on an in-memory network and waits (virtual time) until all
// joined.
func chainOnMemNet(t *testing.T, net *MemNetwork, n int, edit func(*BrokerConfig)) []*testBroker {
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
// acknowledged. With a crash, B2 goes silent half-way, as after a SIGKILL
// (δ = 1 in the 4-broker chain lets B1 bypass B2).
func TestRuntimeDeliversThroughAChain(t *testing.T) {
	t.Run("no failure", func(t *testing.T) { runChainDelivery(t, 3, 0, 50) })
	t.Run("crash of B2", func(t *testing.T) { runChainDelivery(t, 4, 2, 200) })
}

func runChainDelivery(t *testing.T, brokers, crash, n int) {
	synctest.Test(t, func(t *testing.T) {
		net := NewMemNetwork()
		bs := chainOnMemNet(t, net, brokers, func(c *BrokerConfig) { c.Delta = 1 })
		defer func() {
			for i := len(bs) - 1; i >= 0; i-- {
				bs[i].shutdown(t)
			}
		}()
		subS := connect(t, net, fmt.Sprintf("10.0.0.%d:1", brokers))
		f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("T")}}}
		subS.Send(&message.Subscribe{Req: 1, Filter: f})
		for confirmed := false; !confirmed; {
			a, ok := recv(t, subS).(*message.SubAck)
			if ok && a.Err != "" {
				t.Fatalf("subscription refused: %s", a.Err)
			}
			confirmed = ok && a.Confirmed
		}
		pubS := connect(t, net, "10.0.0.1:1")
		pubS.Send(&message.ClientHello{Publisher: "p", Epoch: 1})
		for i := 1; i <= n; i++ {
			if crash > 0 && i == n/2 {
				bs[crash-1].ep.Crash()
			}
			pubS.Send(&message.Publish{Seq: uint64(i), Time: 1,
				Attrs: []matching.Attr{{Name: "class", Value: matching.Str("T")}, {Name: "n", Value: matching.Int(int64(i))}}})
			time.Sleep(5 * time.Millisecond) // virtual: 200 publications/s
		}
		for want := uint64(1); want <= uint64(n); {
			switch m := recv(t, subS).(type) {
			case *message.DeliverSet:
				if m.Pub.Seq != want || m.Pub.Publisher != "p" || len(m.Subs) != 1 {
					t.Fatalf("delivery %v to %v, want p/1/%d to one subscription", m.Pub, m.Subs, want)
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
		for _, m := range queued(subS) {
			t.Errorf("unexpected message after the %d deliveries: %T %+v", n, m, m)
		}
	})
}

// TestRuntimeRetryAfterReconnectIsNotADuplicate: a publisher whose session
// broke re-sends its unacknowledged publications on a new session under the
// same identity (what the client library does); the subscriber gets each
// publication once.
func TestRuntimeRetryAfterReconnectIsNotADuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewMemNetwork()
		bs := chainOnMemNet(t, net, 2, nil)
		defer func() {
			bs[1].shutdown(t)
			bs[0].shutdown(t)
		}()
		subS := connect(t, net, "10.0.0.2:1")
		f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("T")}}}
		subS.Send(&message.Subscribe{Req: 1, Filter: f})
		for confirmed := false; !confirmed; {
			a, ok := recv(t, subS).(*message.SubAck)
			confirmed = ok && a.Confirmed
		}
		publish := func(s *MemClient, from, to int) {
			for i := from; i <= to; i++ {
				s.Send(&message.Publish{Seq: uint64(i), Time: 1,
					Attrs: []matching.Attr{{Name: "class", Value: matching.Str("T")}}})
			}
		}
		first := connect(t, net, "10.0.0.1:1")
		first.Send(&message.ClientHello{Publisher: "p", Epoch: 9})
		publish(first, 1, 5)
		synctest.Wait()
		first.Close() // the connection is lost
		synctest.Wait()
		// Acknowledgements of 4 and 5 were lost with the session: the
		// client sends them again, then goes on.
		second := connect(t, net, "10.0.0.1:1")
		second.Send(&message.ClientHello{Publisher: "p", Epoch: 9})
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
		for _, m := range queued(subS) {
			if d, ok := m.(*message.DeliverSet); ok {
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
	out := []overlay.ClientEnvelope{
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
		net := NewMemNetwork()
		b := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, nil)
		defer b.shutdown(t)
		for !b.rt.Joined() {
			time.Sleep(10 * time.Millisecond)
		}
		s := connect(t, net, "127.0.0.1:1")
		s.Send(&message.ClientHello{Publisher: "p", Epoch: 1})
		pub := func(seq uint64) *message.PubAck {
			t.Helper()
			s.Send(&message.Publish{Seq: seq, Attrs: []matching.Attr{{Name: "class", Value: matching.Str("T")}}})
			for {
				if a, ok := recv(t, s).(*message.PubAck); ok {
					return a
				}
			}
		}
		congest := func(on bool) {
			b.rt.Do(t.Context(), func(Core) {
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
			net := NewMemNetwork()
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

// TestRuntimeKillReturnsWithoutLeaving: a broker crashed in this process
// (its endpoint silent, then Kill) stops at once, without the leave that
// ending Run's context starts; its neighbours then bypass it as a crash.
func TestRuntimeKillReturnsWithoutLeaving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewMemNetwork()
		bs := chainOnMemNet(t, net, 3, nil)
		t0 := time.Now()
		bs[1].ep.Crash()
		bs[1].rt.Kill()
		if err := <-bs[1].done; err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d != 0 {
			t.Errorf("Run returned %v after Kill, want at once", d)
		}
		if bs[1].rt.HasLeft() {
			t.Error("a killed broker reports a completed leave")
		}
		time.Sleep(2 * time.Second) // virtual: several failure timeouts
		st, err := bs[0].rt.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(st.Suspected, "B2") {
			t.Errorf("B1 does not suspect the killed B2: suspected %v", st.Suspected)
		}
		bs[1].stop()
		bs[2].shutdown(t)
		bs[0].shutdown(t)
	})
}

// TestJoinedReportedAtOnce: the status snapshot behind deltapub_joined and
// /state shows the join when it happens, not at the next periodic refresh
// (a testbed waits for each broker's join before it starts the next).
func TestJoinedReportedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewMemNetwork()
		b1 := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, nil)
		b2 := startTestBroker(t, net, "B2", "127.0.0.1:2", []string{"127.0.0.1:1"}, nil)
		for i := 0; i < 500 && !b2.rt.joined.Load(); i++ {
			time.Sleep(time.Millisecond) // virtual
			synctest.Wait()
		}
		if !b2.rt.joined.Load() {
			t.Fatal("B2 did not join within 500 ms")
		}
		b2.rt.m.mu.Lock()
		snapJoined := b2.rt.m.snap.Joined
		b2.rt.m.mu.Unlock()
		if !snapJoined {
			t.Error("B2 joined, but its status snapshot (deltapub_joined) still says not joined")
		}
		b2.shutdown(t)
		b1.shutdown(t)
	})
}

// Restarts after removals are bounded: the sixth removal within ten
// minutes stops the broker; removals older than that are forgotten.
func TestRemovalsBoundRestarts(t *testing.T) {
	var r Removals
	t0 := time.Unix(1000, 0)
	for i := range maxRemovals {
		if err := r.Restart(t0.Add(time.Duration(i)*time.Second), ErrRemoved); err != nil {
			t.Fatalf("removal %d: %v", i+1, err)
		}
	}
	err := r.Restart(t0.Add(time.Minute), ErrRemoved)
	if !errors.Is(err, ErrRemoved) {
		t.Fatalf("removal %d within %v: %v, want ErrRemoved", maxRemovals+1, removalWindow, err)
	}
	if err := r.Restart(t0.Add(removalWindow+2*time.Minute), ErrRemoved); err != nil {
		t.Fatalf("a removal after the window: %v", err)
	}
}
