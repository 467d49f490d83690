package runtime

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/quic"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// tcpBroker runs a real broker (QUIC on 127.0.0.1) with a TCP client
// listener, until the test ends.
func tcpBroker(t *testing.T, edit func(*BrokerConfig)) *Broker {
	t.Helper()
	cfg := TestbedBrokerConfig()
	cfg.ID, cfg.Listen, cfg.TCPListen = "B1", "127.0.0.1:0", "127.0.0.1:0"
	if edit != nil {
		edit(&cfg)
	}
	b, err := NewBroker(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

func (b *Broker) quicAddr() string { return b.tr.ep.Addr().String() }

func mustFilter(t *testing.T, s string) matching.Filter {
	t.Helper()
	f, err := matching.ParseFilter(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustPub(t *testing.T, s string) matching.Publication {
	t.Helper()
	p, err := matching.ParsePublication(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Publications from a QUIC client reach subscribers over TCP and over TLS,
// and the other way round: one session code, whatever carries it.
func TestTCPSessionsPublishAndSubscribe(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := map[bool]string{false: "tcp", true: "tls"}[secure]
		t.Run(name, func(t *testing.T) {
			scheme := "tcp://"
			b := tcpBroker(t, func(c *BrokerConfig) {
				if secure {
					certFile, keyFile, _ := selfSignedFiles(t)
					c.TLS.CertFile, c.TLS.KeyFile, c.TLS.CAFile = certFile, keyFile, certFile
					scheme = "tls://"
				}
			})
			ctx, cancel := testCtx(t)
			defer cancel()
			overTCP, err := client.Connect(ctx, scheme+b.TCPAddr(), client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer overTCP.Close()
			overQUIC, err := client.Connect(ctx, b.quicAddr(), client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer overQUIC.Close()
			subs := map[string]*client.Subscription{}
			for n, c := range map[string]*client.Client{"tcp": overTCP, "quic": overQUIC} {
				s, err := c.Subscribe(ctx, mustFilter(t, "[class,eq,'A']"))
				if err != nil {
					t.Fatal(err)
				}
				if err := s.WaitConfirmed(ctx); err != nil {
					t.Fatal(err)
				}
				subs[n] = s
			}
			const n = 200
			for i := range n {
				pub := overQUIC
				if i%2 == 1 {
					pub = overTCP
				}
				if _, err := pub.PublishAsync(ctx, mustPub(t, "[class,'A'],[i,1]")); err != nil {
					t.Fatal(err)
				}
			}
			if err := overTCP.Publish(ctx, mustPub(t, "[class,'B']")); err != nil {
				t.Fatal(err) // not matched: only acknowledged
			}
			for name, s := range subs {
				per := map[string]uint64{} // the last seq per publisher: FIFO each
				for i := range n {
					select {
					case d := <-s.C:
						if d.Pub.Seq <= per[d.Pub.Publisher] {
							t.Fatalf("%s subscriber: delivery %d out of order", name, i)
						}
						per[d.Pub.Publisher] = d.Pub.Seq
					case <-ctx.Done():
						t.Fatalf("%s subscriber got %d of %d deliveries", name, i, n)
					}
				}
			}
			if secure {
				// Plain TCP is not served on a TLS listener.
				if c, err := quic.DialClient(ctx, "tcp://"+b.TCPAddr(), ""); err == nil {
					c.Close()
					t.Error("a plain TCP session on the TLS listener")
				}
			}
		})
	}
}

// A list of brokers may mix transports; the first that answers is taken.
func TestTCPAddressListTriedInOrder(t *testing.T) {
	b := tcpBroker(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	ctx, cancel := testCtx(t)
	defer cancel()
	c, err := client.Connect(ctx, "tcp://"+dead+",tcp://"+b.TCPAddr(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Publish(ctx, mustPub(t, "[class,'A']")); err != nil {
		t.Fatal(err)
	}
}

// A subscriber that stops reading is disconnected as a slow consumer; the
// broker goes on serving the others.
func TestTCPSlowConsumerIsDisconnected(t *testing.T) {
	b := tcpBroker(t, func(c *BrokerConfig) { c.Limits.SendQueue, c.Limits.SendQueueBytes = 64, 64<<10 })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	addr := "tcp://" + b.TCPAddr()
	slow, err := client.Connect(ctx, addr, client.Options{DeliveryBuffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	stuck := make(chan struct{})
	// Its handler blocks: the client stops reading the connection.
	s, err := slow.SubscribeFunc(ctx, mustFilter(t, "[class,eq,'A']"), func(client.Delivery) { <-stuck })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitConfirmed(ctx); err != nil {
		t.Fatal(err)
	}
	pub, err := client.Connect(ctx, addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	disconnected := func() bool {
		return metricValue(t, b, "deltapub_client_disconnects_total", "slow consumer") > 0
	}
	p := mustPub(t, "[class,'A']")
	p.Payload = make([]byte, 16<<10)
	// At most 5,000 publications of 16 kB: far more than the queue and the
	// kernel's socket buffers together.
	n := 0
	for ; n < 5_000 && !disconnected(); n++ {
		if _, err := pub.PublishAsync(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d publications until the disconnect", n)
	if !disconnected() {
		t.Fatal("the subscriber that does not read was not disconnected")
	}
	close(stuck)
	select {
	case <-s.C: // SubscribeFunc: C yields nothing, it is closed at the end
	case <-ctx.Done():
		t.Fatal("the slow subscriber's subscription did not end")
	}
	t.Logf("the slow subscriber's subscription ended: %v", s.Err())
	if s.Err() == nil {
		t.Error("the slow subscriber's subscription ended without an error")
	}
	if err := pub.Publish(ctx, mustPub(t, "[class,'B']")); err != nil {
		t.Fatalf("the publisher after the disconnect: %v", err)
	}
}

// Sessions beyond max_clients are closed with the reason, and new TCP
// connections beyond tcp_handshakes_per_s are refused busy.
func TestTCPLimits(t *testing.T) {
	b := tcpBroker(t, func(c *BrokerConfig) { c.Limits.MaxClients, c.Limits.TCPHandshakes = 1, 3 })
	frozen := time.Now()
	b.tcp.limiter.mu.Lock()
	b.tcp.limiter.now = func() time.Time { return frozen } // no refill: exactly 3 pass
	b.tcp.limiter.mu.Unlock()
	ctx, cancel := testCtx(t)
	defer cancel()
	addr := "tcp://" + b.TCPAddr()
	first, err := quic.DialClient(ctx, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := first.Send(&message.ClientHello{Publisher: "p", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first session", func() bool {
		return metricValue(t, b, "deltapub_client_sessions", "") == 1
	})
	second, err := quic.DialClient(ctx, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := second.Recv(); err == nil || !strings.Contains(err.Error(), "too many clients") {
		t.Fatalf("a session beyond max_clients: %v", err)
	}
	third, err := quic.DialClient(ctx, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	third.Close()
	var re *quic.RefusedError
	if _, err := quic.DialClient(ctx, addr, ""); !errors.As(err, &re) || re.Code != message.RefuseBusy {
		t.Fatalf("a fourth connection within the same second: %v", err)
	}
}

// waitUntil polls cond (every 2 ms, at most 10 s).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// metricValue is the value of the broker's counter or gauge name (with the
// label value label, if not empty); 0 if it has none.
func metricValue(t *testing.T, b *Broker, name, label string) float64 {
	t.Helper()
	mfs, err := b.Runtime.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}
