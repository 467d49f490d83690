package benchcompare

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
)

// PayloadSize is the size of every payload, both systems.
const PayloadSize = 250

// Payload layout (both systems, opaque to both): byte 0 is the kind, then
// the send time (ns since the run's base, little endian) and the index.
const (
	kindData  = 0
	kindProbe = 1
	offSent   = 1
	offIndex  = 9
)

var benchAttrs = []matching.Attr{{Name: "class", Value: matching.Str("BENCH")}}
var benchFilter = matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("BENCH")}}}

const benchSubject = "bench"

// sink counts what the subscriber applications see in one run.
type sink struct {
	base   time.Time
	target int64
	count  atomic.Int64
	raw    atomic.Int64
	bytes  atomic.Int64
	lastNs atomic.Int64 // latest delivery, ns since base
	probed atomic.Int64 // subscriptions that have seen a probe
	done   chan struct{}
	once   sync.Once
	errMu  sync.Mutex
	err    error   // the first failure of a subscription
	lat    []int64 // by message index (latency runs: one subscriber)
}

func newSink(target int64, latN int) *sink {
	s := &sink{base: time.Now(), target: target, done: make(chan struct{})}
	if target <= 0 {
		close(s.done) // nothing to wait for
	}
	if latN > 0 {
		s.lat = make([]int64, latN)
		for i := range s.lat {
			s.lat[i] = -1
		}
	}
	return s
}

func (s *sink) now() int64 { return int64(time.Since(s.base)) }

func (s *sink) fail(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
	s.once.Do(func() { close(s.done) })
}

// failure is the first subscription failure, if any.
func (s *sink) failure() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// subHandler is one subscription's handler.
type subHandler struct {
	s      *sink
	probed atomic.Bool
	count  atomic.Int64 // data messages delivered to this subscription
}

func (h *subHandler) Fail(err error) { h.s.fail(err) }

func (h *subHandler) Raw(b int) {
	h.s.raw.Add(1)
	h.s.bytes.Add(int64(b))
}

func (h *subHandler) Deliver(p []byte) {
	s := h.s
	if len(p) < offIndex+8 {
		return
	}
	if p[0] == kindProbe {
		if !h.probed.Swap(true) {
			s.probed.Add(1)
		}
		return
	}
	h.count.Add(1)
	now := s.now()
	if s.lat != nil {
		if i := binary.LittleEndian.Uint64(p[offIndex:]); i < uint64(len(s.lat)) {
			s.lat[i] = now - int64(binary.LittleEndian.Uint64(p[offSent:]))
		}
	}
	for {
		last := s.lastNs.Load()
		if now <= last || s.lastNs.CompareAndSwap(last, now) {
			break
		}
	}
	if s.count.Add(1) == s.target {
		s.once.Do(func() { close(s.done) })
	}
}

// wait waits until the target is reached, a subscription fails or ctx
// ends; it reports whether the target was reached.
func (s *sink) wait(ctx context.Context) bool {
	select {
	case <-s.done:
		return s.failure() == nil
	case <-ctx.Done():
		return false
	}
}

// Window is the end-to-end window of the throughput runs: the publisher
// waits while any subscriber is more than Window messages behind it. Both
// systems disconnect a subscriber that lets its server-side queue fill up
// (deltapub: 8,192 frames by default; NATS: 64 MB), and neither slows the
// publisher down for a slow subscriber, so an unpaced publisher measures
// how long buffers last, not throughput. The same window for both; it
// is far above what either needs to stay busy.
const Window = 4096

// FilterWindow is the window of the filtering run, counted in
// deliveries over all its subscriber connections (a hundred by default):
// spread over them it keeps each far below its server-side bound.
const FilterWindow = 8 * Window

// pace waits until the slowest of hs has received at least sent-Window
// messages, a subscription fails or ctx ends. Polling (50 µs) keeps the
// handlers free of any signalling cost.
func pace(ctx context.Context, s *sink, hs []*subHandler, sent int64) {
	for {
		min := sent
		for _, h := range hs {
			min = minInt(min, h.count.Load())
		}
		if sent-min <= Window || ctx.Err() != nil || s.failure() != nil {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func minInt(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

func (s *sink) payload(kind byte, i int) []byte {
	p := make([]byte, PayloadSize)
	p[0] = kind
	binary.LittleEndian.PutUint64(p[offSent:], uint64(s.now()))
	binary.LittleEndian.PutUint64(p[offIndex:], uint64(i))
	return p
}

// probe publishes probe messages until every one of subs subscriptions
// has seen one, so that the measurement starts with the routes in place
// (NATS propagates interest across its cluster asynchronously). Bounded:
// 20 s.
func probe(ctx context.Context, pub endpoint, s *sink, subs int) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for i := 0; s.probed.Load() < int64(subs); i++ {
		if err := pub.Publish(ctx, &outMsg{Subject: benchSubject, Attrs: benchAttrs, Payload: s.payload(kindProbe, i)}); err != nil {
			return err
		}
		if err := pub.Flush(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("benchcompare: only %d of %d subscriptions reachable after 20s", s.probed.Load(), subs)
		case <-time.After(10 * time.Millisecond): // probe interval
		}
	}
	return nil
}

// Throughput is the result of a throughput or fan-out run.
type Throughput struct {
	Messages   int     `json:"messages"`    // published
	Subs       int     `json:"subscribers"` // subscriptions receiving every message
	Expected   int64   `json:"expected_deliveries"`
	Delivered  int64   `json:"delivered"`
	Seconds    float64 `json:"seconds"` // first publish to last delivery
	Rate       float64 `json:"deliveries_per_s"`
	Complete   bool    `json:"complete"` // every expected delivery arrived in time
	PubSeconds float64 `json:"publish_seconds"`
}

// runThroughput starts servers, subscribes subs subscriptions on server
// subAt, publishes n messages from server pubAt as fast as the client
// lets it, and measures deliveries/s from the first publish to the last
// delivery.
func runThroughput(ctx context.Context, sys system, nServers, pubAt, subAt, subs, n int, prof *profiler) (Throughput, error) {
	res := Throughput{Messages: n, Subs: subs, Expected: int64(n) * int64(subs)}
	srv, err := start(ctx, sys, nServers)
	if err != nil {
		return res, err
	}
	defer srv.Close()
	s := newSink(res.Expected, 0)
	var eps []endpoint
	defer func() {
		for _, e := range eps {
			e.Close()
		}
	}()
	hs := make([]*subHandler, subs)
	for i := range hs {
		e, err := srv.Connect(ctx, subAt, connOptions{})
		if err != nil {
			return res, err
		}
		eps = append(eps, e)
		hs[i] = &subHandler{s: s}
		if err := e.Subscribe(ctx, subSpec{Subject: benchSubject, Filter: benchFilter}, hs[i]); err != nil {
			return res, err
		}
	}
	pub, err := srv.Connect(ctx, pubAt, connOptions{})
	if err != nil {
		return res, err
	}
	eps = append(eps, pub)
	if err := probe(ctx, pub, s, subs); err != nil {
		return res, err
	}
	stopProf := prof.start(ctx, srv, nServers)
	defer stopProf()
	t0 := s.now()
	for i := 0; i < n; i++ {
		if i&255 == 0 {
			if ctx.Err() != nil || s.failure() != nil {
				break
			}
			pace(ctx, s, hs, int64(i))
		}
		if err := pub.Publish(ctx, &outMsg{Subject: benchSubject, Attrs: benchAttrs, Payload: s.payload(kindData, i)}); err != nil {
			if ctx.Err() != nil {
				break // timed out: reported as incomplete
			}
			return res, err
		}
	}
	res.PubSeconds = float64(s.now()-t0) / 1e9
	if err := pub.Flush(ctx); err != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return res, err
	}
	res.Complete = s.wait(ctx)
	res.Delivered = s.count.Load()
	res.Seconds = float64(s.lastNs.Load()-t0) / 1e9
	if res.Seconds > 0 {
		res.Rate = float64(res.Delivered) / res.Seconds
	}
	return res, s.failure()
}

// Latency is the result of a latency run.
type Latency struct {
	Rate      int     `json:"rate_msgs_per_s"`
	Messages  int     `json:"messages"`
	Measured  int     `json:"measured"` // after the warm-up tenth
	Lost      int     `json:"lost"`     // measured messages that never arrived
	P50Us     float64 `json:"p50_us"`
	P99Us     float64 `json:"p99_us"`
	P999Us    float64 `json:"p999_us"`
	MaxUs     float64 `json:"max_us"`
	Complete  bool    `json:"complete"`
	AchievedR float64 `json:"achieved_rate"`
}

// runLatency publishes n messages at rate/s from server 0 to one
// subscriber on server 1 and takes end-to-end latency (publish call to the
// subscriber application) of every message after the first tenth.
func runLatency(ctx context.Context, sys system, rate, n int) (Latency, error) {
	return runLatencyOn(ctx, sys, 2, 0, 1, rate, n)
}

// runLatencyOn is runLatency over nServers servers, publishing on pubAt
// and subscribing on subAt.
func runLatencyOn(ctx context.Context, sys system, nServers, pubAt, subAt, rate, n int) (Latency, error) {
	res := Latency{Rate: rate, Messages: n}
	srv, err := start(ctx, sys, nServers)
	if err != nil {
		return res, err
	}
	defer srv.Close()
	s := newSink(int64(n), n)
	sub, err := srv.Connect(ctx, subAt, connOptions{})
	if err != nil {
		return res, err
	}
	defer sub.Close()
	if err := sub.Subscribe(ctx, subSpec{Subject: benchSubject, Filter: benchFilter}, &subHandler{s: s}); err != nil {
		return res, err
	}
	pub, err := srv.Connect(ctx, pubAt, connOptions{})
	if err != nil {
		return res, err
	}
	defer pub.Close()
	if err := probe(ctx, pub, s, 1); err != nil {
		return res, err
	}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d) // pacing: the schedule, not the sleep, sets the rate
		}
		if ctx.Err() != nil {
			break
		}
		if err := pub.Publish(ctx, &outMsg{Subject: benchSubject, Attrs: benchAttrs, Payload: s.payload(kindData, i)}); err != nil {
			if ctx.Err() != nil {
				break // timed out: reported as incomplete
			}
			return res, err
		}
	}
	res.AchievedR = float64(n) / time.Since(start).Seconds()
	if err := pub.Flush(ctx); err != nil && ctx.Err() == nil {
		return res, err
	}
	res.Complete = s.wait(ctx)
	// Copy under no lock: the subscriber may still write if incomplete;
	// an incomplete run's missing entries count as lost.
	var lat []float64
	for i := n / 10; i < n; i++ {
		v := atomic.LoadInt64(&s.lat[i])
		if v < 0 {
			res.Lost++
			continue
		}
		lat = append(lat, float64(v)/1e3)
	}
	res.Measured = len(lat)
	slices.Sort(lat)
	res.P50Us, res.P99Us, res.P999Us = pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999)
	if len(lat) > 0 {
		res.MaxUs = lat[len(lat)-1]
	}
	return res, s.failure()
}

func pct(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))]
}

// Filtered is the result of a filtering run.
type Filtered struct {
	Subs          int     `json:"subscriptions"`
	Conns         int     `json:"subscriber_connections"`
	Publications  int     `json:"publications"`
	Seed          uint64  `json:"seed"`
	Expected      int64   `json:"expected_deliveries"` // matching (publication, filter) pairs
	Delivered     int64   `json:"delivered"`           // reached the application
	Carried       int64   `json:"carried"`             // sent to subscriber connections
	BytesToSubs   int64   `json:"bytes_to_subscribers"`
	Seconds       float64 `json:"seconds"`
	Rate          float64 `json:"deliveries_per_s"`
	Complete      bool    `json:"complete"`
	SubscribeSecs float64 `json:"subscribe_seconds"`
}

// runFiltered subscribes subs stock-workload filters over conns
// connections to one server and publishes pubs quotes: deltapub filters
// in the broker; NATS subscribers subscribe to stock.<symbol> and filter
// the price (and volume) in the client.
func runFiltered(ctx context.Context, sys system, subs, conns, pubs int, seed uint64, prof *profiler) (Filtered, error) {
	res := Filtered{Subs: subs, Conns: conns, Publications: pubs, Seed: seed}
	st := workload.NewStock(rand.New(rand.NewPCG(seed, 0x5eed)))
	filters := make([]matching.Filter, subs)
	ix := matching.NewIndex()
	for i := range filters {
		filters[i] = st.Filter()
		if err := ix.Insert(uint64(i), filters[i]); err != nil {
			return res, err
		}
	}
	quotes := make([]matching.Publication, pubs)
	before := make([]int64, pubs) // deliveries expected from the quotes before i
	var dst []uint64
	for i := range quotes {
		quotes[i] = st.Publication()
		dst = ix.Match(&quotes[i], dst[:0])
		before[i] = res.Expected
		res.Expected += int64(len(dst))
	}
	srv, err := start(ctx, sys, 1)
	if err != nil {
		return res, err
	}
	defer srv.Close()
	s := newSink(res.Expected, 0)
	eps := make([]endpoint, conns)
	defer func() {
		for _, e := range eps {
			if e != nil {
				e.Close()
			}
		}
	}()
	t := time.Now()
	// Connect one at a time (a burst of QUIC handshakes overflows the
	// broker's accept queue, which refuses the excess), then subscribe over
	// the connections in parallel (one goroutine per connection).
	for c := range eps {
		e, err := srv.Connect(ctx, 0, connOptions{SubBuffer: 16}) // small: 10,000 subscriptions
		if err != nil {
			return res, err
		}
		eps[c] = e
	}
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < subs; i += conns {
				f := filters[i]
				spec := subSpec{Subject: "stock." + f.Preds[1].Value.Str, Filter: f, ClientFilter: true, CountBytes: true}
				if err := eps[c].Subscribe(ctx, spec, &subHandler{s: s}); err != nil {
					errs[c] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return res, err // the first; the others are usually the same
		}
	}
	res.SubscribeSecs = time.Since(t).Seconds()
	pub, err := srv.Connect(ctx, 0, connOptions{})
	if err != nil {
		return res, err
	}
	eps = append(eps, pub)
	stopProf := prof.start(ctx, srv, 1)
	defer stopProf()
	t0 := s.now()
	var head []byte
	for i := range quotes {
		if i&63 == 0 {
			if ctx.Err() != nil || s.failure() != nil {
				break
			}
			// The end-to-end window, over all subscriptions together: a
			// FilterWindow of deliveries, a few hundred per connection.
			for before[i]-s.count.Load() > FilterWindow && ctx.Err() == nil && s.failure() == nil {
				time.Sleep(50 * time.Microsecond)
			}
		}
		q := &quotes[i]
		head = stockHead(head[:0], q.Attrs[1].Value.Float, q.Attrs[3].Value.Int)
		m := outMsg{Subject: "stock." + q.Attrs[2].Value.Str, Attrs: q.Attrs, Head: head, Payload: s.payload(kindData, i)}
		if err := pub.Publish(ctx, &m); err != nil {
			if ctx.Err() != nil {
				break // timed out: reported as incomplete
			}
			return res, err
		}
	}
	if err := pub.Flush(ctx); err != nil && ctx.Err() == nil {
		return res, err
	}
	res.Complete = s.wait(ctx)
	res.Delivered = s.count.Load()
	res.Carried = s.raw.Load()
	res.BytesToSubs = s.bytes.Load()
	res.Seconds = float64(s.lastNs.Load()-t0) / 1e9
	if res.Seconds > 0 {
		res.Rate = float64(res.Delivered) / res.Seconds
	}
	return res, s.failure()
}
