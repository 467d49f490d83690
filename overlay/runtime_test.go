package overlay

import (
	"context"
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
	rt, err := NewRuntime(cfg, 1, zerolog.Nop(), nil)
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
