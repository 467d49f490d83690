package runtime

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deltapub/deltapub/internal/sim"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// slowDials delays every dial's handshake by delay, as a starved machine
// does, and counts the handshakes started.
type slowDials struct {
	*MemEndpoint
	delay time.Duration
	dials atomic.Int32
}

func (s *slowDials) Dial(ctx context.Context, peer message.BrokerID, addr string) (PeerLink, error) {
	s.dials.Add(1)
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.MemEndpoint.Dial(ctx, peer, addr)
}

// A handshake slower than the dial timeout is not thrown away: the core is
// told the dial failed (it goes around the peer) but the handshake goes on,
// and its link, when it comes up, is the one the broker joins on. Starting
// a new handshake each time instead never succeeds while the machine stays
// as slow, and costs more CPU each time.
func TestRuntimeKeepsASlowHandshake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewMemNetwork()
		b1 := startTestBroker(t, net, "B1", "127.0.0.1:1", nil, nil)

		cfg := TestbedBrokerConfig()
		cfg.ID, cfg.Listen, cfg.Join = "B2", "127.0.0.1:2", []string{"B1@127.0.0.1:1"}
		rt, err := NewRuntime(cfg, 1, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ep, err := ListenMem(net, &cfg, rt)
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		tr := &slowDials{MemEndpoint: ep, delay: 2 * rt.dialTimeout()}
		if tr.delay >= rt.dialPatience() {
			t.Fatalf("the test's handshake (%v) must fit the dial patience (%v)", tr.delay, rt.dialPatience())
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rt.Run(ctx, tr) }()

		deadline := time.Now().Add(time.Minute)
		for !rt.Joined() {
			if time.Now().After(deadline) {
				t.Fatalf("B2 did not join within a minute of virtual time (%d handshakes started)", tr.dials.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n := tr.dials.Load(); n != 1 {
			t.Errorf("B2 started %d handshakes to join, want 1 (the slow one kept)", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		b1.shutdown(t)
	})
}

// The simulator draws slow handshakes with the runtime's patience.
func TestDialPatienceAgreesWithTheSimulator(t *testing.T) {
	for _, to := range []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 5 * time.Second} {
		for _, gone := range []time.Duration{time.Second, 3 * time.Second, 30 * time.Second} {
			if a, b := DialPatience(to, gone), sim.DialPatience(to, gone); a != b {
				t.Errorf("dial timeout %v, gone_after %v: runtime %v, simulator %v", to, gone, a, b)
			}
		}
	}
	if p := DialPatience(1500*time.Millisecond, 30*time.Second); p != 6*time.Second {
		t.Errorf("patience at the srds09 timers = %v, want 6s", p)
	}
	if p := DialPatience(500*time.Millisecond, 3*time.Second); p != 1500*time.Millisecond {
		t.Errorf("patience with gone_after 3s = %v, want 1.5s (half of it)", p)
	}
}
