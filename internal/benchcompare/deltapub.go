package benchcompare

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/admin"
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
	// TCPListen is the TCP client listener's address ("": none).
	TCPListen string
	Join      string // "" starts a new overlay
	Delta     int
	// Preset is the configuration preset ("": the launcher's own).
	Preset string
	// DataDir and Durability: the publication log ("" : none).
	DataDir    string
	Durability string
}

// RunningBroker is a started broker.
type RunningBroker struct {
	Stop   func() error
	Exited <-chan struct{} // closed if the broker ends by itself
	Output func() string   // its log tail, for errors
	Pid    int             // its process (0: in this process)
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
		if s.TCPListen != "" {
			args = append(args, "--tcp-listen", s.TCPListen)
		}
		if s.Preset != "" {
			args = append(args, "--preset", s.Preset)
		}
		if s.DataDir != "" {
			args = append(args, "--data-dir", s.DataDir, "--durability", s.Durability)
		}
		p, err := StartProcess("broker "+s.ID, exe, args...)
		if err != nil {
			return nil, err
		}
		return &RunningBroker{Stop: p.Kill, Exited: p.Exited(), Output: p.Output, Pid: p.Pid()}, nil
	}
}

// InProcessLauncher runs brokers inside this process (runtime.NewBroker):
// for tests, which cannot rely on a deltapub executable being built. The
// testbed preset's short timeouts keep joins fast.
func InProcessLauncher() BrokerLauncher {
	return func(ctx context.Context, s BrokerSpec) (*RunningBroker, error) {
		preset := s.Preset
		if preset == "" {
			preset = "testbed"
		}
		cfg, err := runtime.Preset(preset)
		if err != nil {
			return nil, err
		}
		cfg.ID, cfg.Listen, cfg.Admin, cfg.Delta = s.ID, s.Listen, s.Admin, s.Delta
		cfg.TCPListen = s.TCPListen
		cfg.DataDir, cfg.Durability = s.DataDir, s.Durability
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
	preset string
	// durability, if set, gives every broker a fresh data directory and
	// this publication log durability.
	durability string
	// checkAcks: Flush fails if any publication was refused (reliable
	// runs), not only the last.
	checkAcks bool
	label     string // Name ("": deltapub)
	// transport is how clients reach their broker: TransportTCP, or QUIC
	// (TransportQUIC or "").
	transport string
	// suspicions, if set, sums what every broker suspected over the
	// system's runs (read from its metrics before it is stopped).
	suspicions *suspicionCount
}

// suspicionCount sums the suspicions brokers noticed over several runs
// (deltapub_notices_total{kind="suspected"}). In runs where no broker is
// killed every suspicion is false: a live broker starved past the
// failure timeout.
type suspicionCount struct {
	mu sync.Mutex
	s  Suspicions
}

func (c *suspicionCount) read() Suspicions {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

// suspectedSeries is the metric series counted.
const suspectedSeries = `deltapub_notices_total{kind="suspected"}`

// add reads the suspicions of the broker whose admin endpoint is addr.
func (c *suspicionCount) add(addr string) {
	n, err := scrapeSuspected(addr)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.s.Unread++
		return
	}
	c.s.Brokers++
	c.s.Count += n
}

func scrapeSuspected(addr string) (int64, error) {
	m, err := admin.ScrapeMetrics(&http.Client{Timeout: 2 * time.Second}, addr)
	// No series: nothing was ever suspected.
	return int64(m.Series[suspectedSeries]), err
}

// The client transports of deltapub's sessions with its brokers (broker
// links are QUIC).
const (
	TransportQUIC = "quic"
	TransportTCP  = "tcp"
)

func (d deltapubSystem) Name() string {
	if d.label != "" {
		return d.label
	}
	return "deltapub"
}

type deltapubServers struct {
	brokers   []*RunningBroker
	addrs     []string // QUIC
	clients   []string // what clients dial (tcp://… with TCP sessions)
	admins    []string
	dir       string // data directories, removed by Close
	checkAcks bool
	// suspicions, if set, gets every live broker's suspicions at Close.
	suspicions *suspicionCount
	once       sync.Once
	err        error
}

func (d deltapubSystem) Start(ctx context.Context, n int) (servers, error) {
	s := &deltapubServers{checkAcks: d.checkAcks, suspicions: d.suspicions}
	if d.durability != "" {
		var err error
		if s.dir, err = os.MkdirTemp("", "deltapub-bench-data-"); err != nil {
			return nil, fmt.Errorf("benchcompare: data directory: %w", err)
		}
	}
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
		spec := BrokerSpec{ID: fmt.Sprintf("B%d", i+1), Listen: listen, Admin: admin, Delta: d.delta, Preset: d.preset}
		clientAddr := listen
		if d.transport == TransportTCP {
			if spec.TCPListen, err = FreeTCP(); err != nil {
				s.Close()
				return nil, err
			}
			clientAddr = "tcp://" + spec.TCPListen
		}
		if s.dir != "" {
			spec.DataDir, spec.Durability = filepath.Join(s.dir, spec.ID), d.durability
		}
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
		s.clients = append(s.clients, clientAddr)
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
		if s.suspicions != nil {
			for i, b := range s.brokers {
				if b != nil {
					s.suspicions.add(s.admins[i])
				}
			}
		}
		var errs []error
		for i := len(s.brokers) - 1; i >= 0; i-- {
			if s.brokers[i] != nil {
				errs = append(errs, s.brokers[i].Stop())
			}
		}
		if s.dir != "" {
			errs = append(errs, os.RemoveAll(s.dir))
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

func (s *deltapubServers) Connect(ctx context.Context, i int, o connOptions) (endpoint, error) {
	c, err := client.Connect(ctx, s.clients[i], client.Options{
		DeliveryBuffer: o.SubBuffer,
		// A deep window: the publisher is not held back by acknowledgement
		// round trips (NATS publishes without any).
		MaxInFlight: 4096,
	})
	if err != nil {
		return nil, err
	}
	e := &deltapubEndpoint{c: c}
	if s.checkAcks {
		e.waitAcks()
	}
	return e, nil
}

// waitAcks starts a goroutine that waits for every acknowledgement sent
// on e.acks, in order, until e.acks is closed; e.ackErr then gives the
// first error.
func (e *deltapubEndpoint) waitAcks() {
	e.acks = make(chan (<-chan error), 4096) // MaxInFlight: never full
	e.ackErr = make(chan error, 1)
	go func(acks <-chan (<-chan error), out chan<- error) {
		var first error
		for ch := range acks {
			if err := <-ch; err != nil {
				e.failed.Add(1)
				if first == nil {
					first = err
				}
			}
		}
		out <- first
	}(e.acks, e.ackErr)
}

// Kill kills broker i (SIGKILL for broker processes).
func (s *deltapubServers) Kill(i int) error {
	err := s.brokers[i].Stop()
	s.brokers[i] = nil
	return err
}

type deltapubEndpoint struct {
	c    *client.Client
	last <-chan error
	wg   sync.WaitGroup
	// acks, when set, receives every acknowledgement channel, waited for
	// in order by one goroutine; ackErr then gives the first error.
	acks   chan (<-chan error)
	ackErr chan error
	failed atomic.Int64 // publications whose acknowledgement failed
}

func (e *deltapubEndpoint) gaveUpCount() int { return int(e.failed.Load()) }

func (e *deltapubEndpoint) Publish(ctx context.Context, m *outMsg) error {
	done, err := e.c.PublishAsync(ctx, matching.Publication{Attrs: m.Attrs, Payload: m.Payload})
	if err != nil {
		return err
	}
	if e.acks != nil {
		e.acks <- done
		return nil
	}
	e.last = done
	return nil
}

func (e *deltapubEndpoint) Flush(ctx context.Context) error {
	if e.acks != nil {
		// Every acknowledgement so far; later publications start anew.
		close(e.acks)
		var err error
		select {
		case err = <-e.ackErr:
		case <-ctx.Done():
			return fmt.Errorf("benchcompare: deltapub publications not acknowledged: %w", ctx.Err())
		}
		e.waitAcks()
		return err
	}
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
	if e.acks != nil {
		close(e.acks) // the waiter ends: Close failed what was pending
	}
	e.wg.Wait() // the readers end when Close closes their channels
}
