package benchcompare

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JSVariant is one JetStream configuration: the stream's replicas (1: one
// server; 3: a 3-server cluster), its storage, and for file storage
// whether every write is synced (sync_interval: always) or the server's
// default (sync every 2 minutes, acknowledgement before the sync).
type JSVariant struct {
	Replicas   int
	File       bool
	SyncAlways bool
}

// JSVariants are the reliable peers the comparison measures.
var JSVariants = []JSVariant{
	{Replicas: 1, File: false}, {Replicas: 1, File: true}, {Replicas: 1, File: true, SyncAlways: true},
	{Replicas: 3, File: false}, {Replicas: 3, File: true}, {Replicas: 3, File: true, SyncAlways: true},
}

// Key names the variant in the JSON ("jetstream_r3_file_sync").
func (v JSVariant) Key() string {
	k := fmt.Sprintf("jetstream_r%d_", v.Replicas)
	switch {
	case !v.File:
		return k + "memory"
	case v.SyncAlways:
		return k + "file_sync"
	}
	return k + "file"
}

// Label names the variant in the table.
func (v JSVariant) Label() string {
	l := fmt.Sprintf("JetStream R%d ", v.Replicas)
	switch {
	case !v.File:
		return l + "memory"
	case v.SyncAlways:
		return l + "file, sync always"
	}
	return l + "file, default sync"
}

// jsPullHeartbeat: the consumer's server sends a heartbeat every second
// while a pull waits, and nats.go pulls again after two missed ones. A pull
// that a replicated consumer dropped while it elected its leader (at start
// or after a failover) is then sent again within seconds, not after
// nats.go's default 30 s expiry.
var jsPullHeartbeat = jetstream.PullHeartbeat(time.Second)

const (
	jsStream  = "BENCH"
	jsSubject = benchSubject
	// jsMaxPending is the publisher's window of unacknowledged publishes,
	// the same as deltapub's MaxInFlight in this harness.
	jsMaxPending = 4096
	// jsAckTimeout bounds the wait for one publish acknowledgement in
	// failover runs; a publish that times out is sent again with the same
	// message id, so the stream keeps it once. Elsewhere a timeout fails
	// the run, and jsRunAckTimeout leaves room for a full window of synced
	// writes on a loaded machine.
	jsAckTimeout    = 2 * time.Second
	jsRunAckTimeout = 30 * time.Second
	// jsStallWait bounds the wait for room in the window.
	jsStallWait = 20 * time.Second
	// jsRetries bounds the sends of one publication in failover runs.
	jsRetries = 15
	// jsAckWait is the consumer's redelivery timeout in failover runs (the
	// server's default, 30 s, would outlast the run); elsewhere the
	// default, so that a consumer lagging behind synced writes is not sent
	// everything again.
	jsAckWait = 5 * time.Second
)

type jsSystem struct {
	bin string
	v   JSVariant
	// retry: send a publication again when its acknowledgement fails or
	// times out (failover runs); else a failure fails the run.
	retry bool
}

func (j jsSystem) Name() string { return j.v.Label() }

type jsServers struct {
	procs []*Process
	urls  []string
	mons  []string
	names []string
	dir   string
	retry bool
	once  sync.Once
	err   error
}

// Start starts the variant's servers (n is ignored: R1 runs on one server,
// R3 on three) and creates the stream. Servers that do not come up (on a
// loaded machine a cluster sometimes never agrees on a meta leader, and a
// server has exited at start without a word) are started once more on
// fresh ports, and the first error is kept with the second's.
func (j jsSystem) Start(ctx context.Context, _ int) (servers, error) {
	s, err := j.start(ctx)
	if err == nil || ctx.Err() != nil {
		return s, err
	}
	s, err2 := j.start(ctx)
	if err2 != nil {
		return nil, fmt.Errorf("%w; started again: %w", err, err2)
	}
	return s, nil
}

func (j jsSystem) start(ctx context.Context) (servers, error) {
	count := j.v.Replicas
	dir, err := os.MkdirTemp("", "deltapub-bench-js-")
	if err != nil {
		return nil, fmt.Errorf("benchcompare: jetstream store: %w", err)
	}
	s := &jsServers{dir: dir, retry: j.retry}
	type ports struct{ client, mon, cluster string }
	ps := make([]ports, count)
	for i := range ps {
		for _, p := range []*string{&ps[i].client, &ps[i].mon, &ps[i].cluster} {
			if *p, err = FreeTCP(); err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	var routes []string
	for _, p := range ps {
		routes = append(routes, strconv.Quote("nats://"+p.cluster))
	}
	for i, p := range ps {
		name := fmt.Sprintf("N%d", i+1)
		var c strings.Builder
		fmt.Fprintf(&c, "server_name: %s\nlisten: %q\nhttp: %q\n", name, p.client, p.mon)
		fmt.Fprintf(&c, "jetstream {\n  store_dir: %q\n  max_memory_store: 1GB\n  max_file_store: 4GB\n", filepath.Join(dir, name))
		if j.v.SyncAlways {
			c.WriteString("  sync_interval: always\n")
		}
		c.WriteString("}\n")
		if count > 1 {
			fmt.Fprintf(&c, "cluster {\n  name: bench\n  listen: %q\n  routes: [%s]\n}\n", p.cluster, strings.Join(routes, ", "))
		}
		conf := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(conf, []byte(c.String()), 0o644); err != nil {
			s.Close()
			return nil, err
		}
		pr, err := StartProcess("nats-server "+name, j.bin, "-c", conf)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.procs = append(s.procs, pr)
		s.urls = append(s.urls, "nats://"+p.client)
		s.mons = append(s.mons, "http://"+p.mon)
		s.names = append(s.names, name)
	}
	// Generous: a synced store on a busy disk starts slowly. But at most
	// half the time left, so that Start has time to try again.
	wait := 60 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	for i := range ps {
		if err := WaitHTTP(ctx, s.mons[i]+"/healthz", wait, s.procs[i].Exited(), nil); err != nil {
			out := s.procs[i].Output()
			s.Close()
			return nil, fmt.Errorf("benchcompare: nats-server %s: %w\n%s", s.names[i], err, out)
		}
	}
	if err := s.createStream(ctx, j.v); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// createStream creates the stream (retryJSAPI).
func (s *jsServers) createStream(ctx context.Context, v JSVariant) error {
	nc, err := nats.Connect(s.urls[0], nats.NoReconnect(), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("benchcompare: connect to nats-server N1: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cfg := jetstream.StreamConfig{Name: jsStream, Subjects: []string{jsSubject}, Replicas: v.Replicas,
		Storage: jetstream.MemoryStorage, MaxBytes: 1 << 30}
	if v.File {
		cfg.Storage = jetstream.FileStorage
	}
	err = retryJSAPI(ctx, func(ctx context.Context) error {
		st, err := js.CreateOrUpdateStream(ctx, cfg)
		if err != nil {
			return err
		}
		// A publish before the stream's Raft group has a leader gets
		// "no response from stream": measure from a stream that has one.
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		return leaderKnown(info.Cluster)
	})
	if err != nil {
		return fmt.Errorf("benchcompare: create JetStream stream (%s): %w", v.Label(), err)
	}
	return nil
}

// leaderKnown is nil unless a replicated stream's or consumer's Raft
// group (c; nil for R1) has no leader yet.
func leaderKnown(c *jetstream.ClusterInfo) error {
	if c != nil && c.Leader == "" {
		return errors.New("no Raft leader yet")
	}
	return nil
}

// retryJSAPI makes a JetStream API request, each attempt waiting 5 s for
// its answer, again every 200 ms for 30 s at most: a cluster drops
// requests while it has no meta leader, or while a new stream's Raft
// group elects its leader. The request must be idempotent.
func retryJSAPI(ctx context.Context, req func(context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := req(actx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *jsServers) ProfileBase(int) string { return "" }

func (s *jsServers) Close() error {
	s.once.Do(func() {
		var errs []error
		for _, p := range s.procs {
			errs = append(errs, p.Kill())
		}
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, err)
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

// Kill kills server i with SIGKILL.
func (s *jsServers) Kill(i int) error { return s.procs[i].Kill() }

// leader is the index of the stream's Raft leader.
func (s *jsServers) leader(ctx context.Context, via int) (int, error) {
	nc, err := nats.Connect(s.urls[via], nats.NoReconnect(), nats.Timeout(5*time.Second))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(ctx, jsStream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.Cluster != nil {
		for i, n := range s.names {
			if n == info.Cluster.Leader {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("benchcompare: stream %s has no known leader", jsStream)
}

// Connect connects to server i (modulo the servers), with the others as
// reconnect targets: after a server dies, nats.go moves to the next.
func (s *jsServers) Connect(ctx context.Context, i int, _ connOptions) (endpoint, error) {
	i %= len(s.urls)
	urls := append([]string{s.urls[i]}, slicesWithout(s.urls, i)...)
	e := &jsEndpoint{}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(), nats.Timeout(5*time.Second),
		nats.MaxReconnects(60), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("benchcompare: connect to nats-server %s: %w", s.names[i], err)
	}
	e.nc = nc
	ackTimeout := jsRunAckTimeout
	if s.retry {
		ackTimeout = jsAckTimeout
	}
	e.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(jsMaxPending),
		jetstream.WithPublishAsyncTimeout(ackTimeout),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { e.failed(m, err) }))
	if err != nil {
		nc.Close()
		return nil, err
	}
	if s.retry {
		e.enableRetry()
	}
	return e, nil
}

func slicesWithout(s []string, i int) []string {
	out := make([]string, 0, len(s))
	for j, v := range s {
		if j != i {
			out = append(out, v)
		}
	}
	return out
}

type jsEndpoint struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	retry bool
	sent  atomic.Int64
	// Failover runs: failed publishes are queued (each message at most
	// once at a time, so the queue is bounded by the run's messages) and
	// sent again by one goroutine; tries counts each message id's sends.
	// nats.go calls failed with its own lock held: it must never wait.
	queue   []*nats.Msg
	wake    chan struct{} // capacity 1: the queue is not empty
	closed  chan struct{}
	inRetry atomic.Int64 // failed publishes not yet sent again
	mu      sync.Mutex
	tries   map[string]int
	gaveUp  int
	errMu   sync.Mutex
	err     error
	cons    []jetstream.ConsumeContext
}

func (e *jsEndpoint) setErr(err error) {
	e.errMu.Lock()
	if e.err == nil {
		e.err = err
	}
	e.errMu.Unlock()
}

// failed is nats.go's callback for a publish whose acknowledgement failed
// or timed out. It must not publish itself (nats.go would deadlock).
func (e *jsEndpoint) failed(m *nats.Msg, err error) {
	if len(m.Data) > 0 && m.Data[0] == kindProbe {
		// The stream's interest had not reached this server yet: the
		// probe loop goes on until a probe arrives.
		return
	}
	if !e.retry {
		e.setErr(fmt.Errorf("benchcompare: JetStream publish: %w", err))
		return
	}
	id := m.Header.Get(jetstream.MsgIDHeader)
	e.mu.Lock()
	e.tries[id]++
	give := e.tries[id] >= jsRetries
	if give {
		e.gaveUp++
	}
	e.mu.Unlock()
	if give {
		return
	}
	e.inRetry.Add(1)
	e.mu.Lock()
	e.queue = append(e.queue, &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header})
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default: // already signalled
	}
}

func (e *jsEndpoint) gaveUpCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gaveUp
}

// enableRetry turns on resending with message ids (failover runs).
func (e *jsEndpoint) enableRetry() {
	e.retry = true
	e.tries = map[string]int{}
	e.wake = make(chan struct{}, 1)
	e.closed = make(chan struct{})
	go func() {
		for {
			select {
			case <-e.wake:
			case <-e.closed:
				return
			}
			time.Sleep(100 * time.Millisecond) // paced: the cluster is electing
			e.mu.Lock()
			batch := e.queue
			e.queue = nil
			e.mu.Unlock()
			for _, m := range batch {
				if _, err := e.js.PublishMsgAsync(m, jetstream.WithStallWait(jsStallWait)); err != nil {
					e.mu.Lock()
					e.gaveUp++
					e.mu.Unlock()
				}
				e.inRetry.Add(-1)
			}
		}
	}()
}

func (e *jsEndpoint) Publish(ctx context.Context, m *outMsg) error {
	msg := &nats.Msg{Subject: jsSubject, Data: m.Payload}
	// A full window waits for room up to jsStallWait (nats.go's default,
	// 200 ms, is shorter than one synced R3 batch).
	opts := []jetstream.PublishOpt{jetstream.WithStallWait(jsStallWait)}
	if e.retry {
		opts = append(opts, jetstream.WithMsgID(strconv.FormatInt(e.sent.Add(1), 10)))
	}
	_, err := e.js.PublishMsgAsync(msg, opts...)
	if err != nil {
		return fmt.Errorf("benchcompare: JetStream publish: %w", err)
	}
	e.errMu.Lock()
	err = e.err
	e.errMu.Unlock()
	return err
}

// Flush waits until every publish is acknowledged (or, in failover runs,
// given up after its retries).
func (e *jsEndpoint) Flush(ctx context.Context) error {
	for {
		select {
		case <-e.js.PublishAsyncComplete():
		case <-ctx.Done():
			return fmt.Errorf("benchcompare: JetStream publishes not acknowledged: %w", ctx.Err())
		}
		// nats.go closes PublishAsyncComplete after the error callbacks
		// returned: a failed publish is counted in inRetry by then.
		if !e.retry || (e.inRetry.Load() == 0 && e.js.PublishAsyncPending() == 0) {
			break
		}
		time.Sleep(50 * time.Millisecond) // a retry is waiting its pace
	}
	e.errMu.Lock()
	defer e.errMu.Unlock()
	return e.err
}

// Subscribe consumes the stream with a durable pull consumer (replicated
// like the stream), acknowledging every message: what an application
// that must not lose a message across a server crash uses.
func (e *jsEndpoint) Subscribe(ctx context.Context, s subSpec, h handler) error {
	name := fmt.Sprintf("C%d", len(e.cons)+1)
	var ackWait time.Duration // 0: the server's default
	if e.retry {
		ackWait = jsAckWait
	}
	// A replicated consumer drops the pull requests it gets before its
	// Raft group has a leader, and nats.go sends the next pull only when
	// the first expires (30 s): consume once the leader is known.
	var c jetstream.Consumer
	err := retryJSAPI(ctx, func(ctx context.Context) error {
		var err error
		c, err = e.js.CreateOrUpdateConsumer(ctx, jsStream, jetstream.ConsumerConfig{Durable: name,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 2 * Window,
			DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		return leaderKnown(info.Cluster)
	})
	if err != nil {
		return fmt.Errorf("benchcompare: JetStream consumer %s: %w", name, err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		h.Deliver(m.Data())
		_ = m.Ack() // a lost ack means a redelivery: counted as a duplicate
	}, jetstream.PullMaxMessages(2*Window), jsPullHeartbeat, jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {
		// Missed heartbeats and leader changes: the consumer goes on
		// pulling; what it misses shows as losses or pauses.
	}))
	if err != nil {
		return fmt.Errorf("benchcompare: JetStream consume: %w", err)
	}
	e.cons = append(e.cons, cc)
	return nil
}

func (e *jsEndpoint) Close() {
	for _, c := range e.cons {
		c.Stop()
	}
	e.nc.Close()
	if e.closed != nil {
		close(e.closed) // the retry goroutine ends: the run is over
	}
}
