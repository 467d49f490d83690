package runtime

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
