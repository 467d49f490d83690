package benchcompare

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay/runtime"
	"github.com/rs/zerolog"
)

// BrokerSpec is one deltapub broker to start.
type BrokerSpec struct {
	ID     string
	Listen string // UDP, QUIC
	Admin  string // TCP, /healthz and /debug/pprof
	Join   string // "" starts a new overlay
	Delta  int
}

// RunningBroker is a started broker.
type RunningBroker struct {
	Stop   func() error
	Exited <-chan struct{} // closed if the broker ends by itself
	Output func() string   // its log tail, for errors
}

// BrokerLauncher starts a deltapub broker.
type BrokerLauncher func(ctx context.Context, s BrokerSpec) (*RunningBroker, error)

// ProcessLauncher starts each broker as a 'deltapub broker' process of the
// executable exe, so that brokers and the load generator do not share a
// Go runtime (as nats-server and its clients do not). Logs at warn level
// stay in memory and are shown if the broker fails.
func ProcessLauncher(exe string) BrokerLauncher {
	return func(ctx context.Context, s BrokerSpec) (*RunningBroker, error) {
		args := []string{"broker", "--id", s.ID, "--listen", s.Listen, "--admin", s.Admin,
			"--delta", strconv.Itoa(s.Delta), "--log-level", "warn", "--log-format", "console"}
		if s.Join != "" {
			args = append(args, "--join", s.Join)
		}
		p, err := StartProcess("broker "+s.ID, exe, args...)
		if err != nil {
			return nil, err
		}
		return &RunningBroker{Stop: p.Kill, Exited: p.Exited(), Output: p.Output}, nil
	}
}

// InProcessLauncher runs brokers inside this process (runtime.NewBroker):
// for tests, which cannot rely on a deltapub executable being built. The
// testbed preset's short timeouts keep joins fast.
func InProcessLauncher() BrokerLauncher {
	return func(ctx context.Context, s BrokerSpec) (*RunningBroker, error) {
		cfg, err := runtime.Preset("testbed")
		if err != nil {
			return nil, err
		}
		cfg.ID, cfg.Listen, cfg.Admin, cfg.Delta = s.ID, s.Listen, s.Admin, s.Delta
		if s.Join != "" {
			cfg.Join = []string{s.Join}
		}
		b, err := runtime.NewBroker(cfg, zerolog.Nop())
		if err != nil {
			return nil, err
		}
		bctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		var runErr error
		go func() { runErr = b.Run(bctx); close(done) }()
		stop := func() error {
			cancel()
			select {
			case <-done:
				return nil
			case <-time.After(10 * time.Second):
				return fmt.Errorf("benchcompare: in-process broker %s did not stop within 10s", s.ID)
			}
		}
		return &RunningBroker{Stop: stop, Exited: done, Output: func() string {
			if runErr != nil {
				return runErr.Error()
			}
			return ""
		}}, nil
	}
}

type deltapubSystem struct {
	launch BrokerLauncher
	delta  int
}

func (deltapubSystem) Name() string { return "deltapub" }

type deltapubServers struct {
	brokers []*RunningBroker
	addrs   []string
	admins  []string
	once    sync.Once
	err     error
}

func (d deltapubSystem) Start(ctx context.Context, n int) (servers, error) {
	s := &deltapubServers{}
	for i := 0; i < n; i++ {
		listen, err := FreeUDP()
		if err != nil {
			s.Close()
			return nil, err
		}
		admin, err := FreeTCP()
		if err != nil {
			s.Close()
			return nil, err
		}
		spec := BrokerSpec{ID: fmt.Sprintf("B%d", i+1), Listen: listen, Admin: admin, Delta: d.delta}
		if i > 0 {
			spec.Join = s.addrs[i-1] // a chain: Bi's parent is B(i-1)
		}
		b, err := d.launch(ctx, spec)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.brokers = append(s.brokers, b)
		s.addrs = append(s.addrs, listen)
		s.admins = append(s.admins, admin)
		// Healthy means joined: start the next one only then, so that the
		// chain has the intended shape.
		if err := WaitHTTP(ctx, "http://"+admin+"/healthz", 20*time.Second, b.Exited, nil); err != nil {
			out := b.Output()
			s.Close()
			return nil, fmt.Errorf("benchcompare: deltapub broker %s: %w\n%s", spec.ID, err, out)
		}
	}
	return s, nil
}

func (s *deltapubServers) ProfileBase(i int) string { return "http://" + s.admins[i] }

func (s *deltapubServers) Close() error {
	s.once.Do(func() {
		var errs []error
		for i := len(s.brokers) - 1; i >= 0; i-- {
			errs = append(errs, s.brokers[i].Stop())
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

func (s *deltapubServers) Connect(ctx context.Context, i int, o connOptions) (endpoint, error) {
	c, err := client.Connect(ctx, s.addrs[i], client.Options{
		DeliveryBuffer: o.SubBuffer,
		// A deep window: the publisher is not held back by acknowledgement
		// round trips (NATS publishes without any).
		MaxInFlight: 4096,
	})
	if err != nil {
		return nil, err
	}
	return &deltapubEndpoint{c: c}, nil
}

type deltapubEndpoint struct {
	c    *client.Client
	last <-chan error
	wg   sync.WaitGroup
}

func (e *deltapubEndpoint) Publish(ctx context.Context, m *outMsg) error {
	done, err := e.c.PublishAsync(ctx, matching.Publication{Attrs: m.Attrs, Payload: m.Payload})
	if err != nil {
		return err
	}
	e.last = done
	return nil
}

func (e *deltapubEndpoint) Flush(ctx context.Context) error {
	if e.last == nil {
		return nil
	}
	select {
	case err := <-e.last:
		e.last = nil
		return err
	case <-ctx.Done():
		return fmt.Errorf("benchcompare: deltapub publications not acknowledged: %w", ctx.Err())
	}
}

func (e *deltapubEndpoint) Subscribe(ctx context.Context, s subSpec, h handler) error {
	// Counted in a handler on the client's receive goroutine, as NATS's
	// async subscriptions count in theirs (no channel hand-off per message).
	var enc wire.DeliveryEncoder
	var subs [1]uint64
	sub, err := e.c.SubscribeFunc(ctx, s.Filter, func(d client.Delivery) {
		if d.Gap != nil {
			return
		}
		if s.CountBytes {
			// The DeliverSet frame the broker wrote on this connection
			// (protocol version 2; same encoder). A frame naming several
			// subscriptions of this connection is counted once per
			// subscription: an upper bound, rarely reached here.
			enc.Reset(&message.Deliver{Pub: d.Pub, Attrs: d.Attrs, Payload: d.Payload, Time: d.PublishedAt.UnixNano()})
			subs[0] = d.Sub.N
			h.Raw(len(enc.DeliverSetFrame(subs[:])))
		}
		h.Deliver(d.Payload)
	})
	if err != nil {
		return err
	}
	if err := sub.WaitConfirmed(ctx); err != nil {
		return err
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for range sub.C { // closed when the subscription ends
		}
		if err := sub.Err(); err != nil {
			h.Fail(fmt.Errorf("benchcompare: deltapub subscription ended: %w", err))
		}
	}()
	return nil
}

func (e *deltapubEndpoint) Close() {
	e.c.Close()
	e.wg.Wait() // the readers end when Close closes their channels
}
