package runtime

import (
	"sync"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/prometheus/client_golang/prometheus"
)

// runtimeMetrics are the Prometheus metrics of one broker runtime. They
// live in the runtime's own registry (not the global one) so that several
// brokers can run in one process (tests, benchmarks).
//
// Two kinds: what the runtime itself observes (sessions, slow peers,
// latencies), updated as it happens; and what the core counts, read from
// an overlay.Status snapshot that the runtime refreshes once a second and a
// collector exports at scrape time.
type runtimeMetrics struct {
	reg *prometheus.Registry

	clientSessions    prometheus.Gauge
	clientDisconnects *prometheus.CounterVec // by reason
	linkCloses        *prometheus.CounterVec // by reason
	linkBlocked       prometheus.Counter
	unroutable        *prometheus.CounterVec // by destination kind
	notices           *prometheus.CounterVec // by kind
	peerMsgsIn        *prometheus.CounterVec // by message type
	peerMsgsOut       *prometheus.CounterVec // by message type
	clientReqs        *prometheus.CounterVec // by message type
	pubAckErrors      *prometheus.CounterVec // by error
	deliveryLatency   prometheus.Histogram
	stepSeconds       prometheus.Histogram
	inputQueue        prometheus.GaugeFunc

	mu   sync.Mutex
	snap overlay.Status // last snapshot; guarded by mu

	// Per-type counters resolved once: WithLabelValues hashes the label on
	// every call, which showed in the per-message hot path. Owned by the
	// runtime goroutine.
	inByType, outByType, reqByType map[message.Type]prometheus.Counter
}

// byType returns the counter of vec for t, resolving it once into cache.
func byType(cache map[message.Type]prometheus.Counter, vec *prometheus.CounterVec, t message.Type) prometheus.Counter {
	c, ok := cache[t]
	if !ok {
		c = vec.WithLabelValues(t.String())
		cache[t] = c
	}
	return c
}

func (m *runtimeMetrics) peerIn(t message.Type)    { byType(m.inByType, m.peerMsgsIn, t).Inc() }
func (m *runtimeMetrics) peerOut(t message.Type)   { byType(m.outByType, m.peerMsgsOut, t).Inc() }
func (m *runtimeMetrics) clientReq(t message.Type) { byType(m.reqByType, m.clientReqs, t).Inc() }

func newRuntimeMetrics(reg *prometheus.Registry, inputLen func() float64) *runtimeMetrics {
	m := &runtimeMetrics{reg: reg, inByType: map[message.Type]prometheus.Counter{},
		outByType: map[message.Type]prometheus.Counter{}, reqByType: map[message.Type]prometheus.Counter{}}
	m.clientSessions = prometheus.NewGauge(prometheus.GaugeOpts{Name: "deltapub_client_sessions", Help: "Client sessions currently open."})
	m.clientDisconnects = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deltapub_client_disconnects_total", Help: "Client sessions closed by the broker, by reason (slow consumer, too many clients)."}, []string{"reason"})
	m.linkCloses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deltapub_link_closes_total", Help: "Broker links closed, by reason (protocol, slow peer, down)."}, []string{"reason"})
	m.linkBlocked = prometheus.NewCounter(prometheus.CounterOpts{Name: "deltapub_link_send_blocked_total", Help: "Times the runtime waited for room on a full broker link."})
	m.unroutable = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deltapub_unroutable_messages_total", Help: "Core outputs with no link or session to carry them (the link or session had just gone; the core learns it next)."}, []string{"to"})
	m.notices = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deltapub_notices_total", Help: "Notices of the protocol core, by kind (suspected, bypass-up, gone, ...)."}, []string{"kind"})
	m.peerMsgsIn = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deltapub_peer_messages_in_total", Help: "Messages received from broker links, by type."}, []string{"type"})
	m.peerMsgsOut = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deltapub_peer_messages_out_total", Help: "Messages sent on broker links, by type."}, []string{"type"})
	m.clientReqs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deltapub_client_requests_total", Help: "Requests received from clients, by type."}, []string{"type"})
	m.pubAckErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deltapub_puback_errors_total", Help: "Publications refused, by error (backpressure: retried by the client)."}, []string{"err"})
	m.deliveryLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "deltapub_delivery_latency_seconds",
		Help:    "End-to-end delay of publications delivered to local subscribers, one observation per publication (not per subscriber): publisher's clock at publish to this broker's clock at delivery (meaningful when the clocks agree, e.g. on one machine).",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18), // 50 µs … 6.5 s
	})
	m.stepSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "deltapub_runtime_batch_seconds",
		Help:    "Time the runtime spent on one batch of inputs, outputs included.",
		Buckets: prometheus.ExponentialBuckets(10e-6, 2, 18),
	})
	m.inputQueue = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "deltapub_input_queue_length", Help: "Inputs (peer and client messages) waiting for the runtime."}, inputLen)
	reg.MustRegister(m.clientSessions, m.clientDisconnects, m.linkCloses, m.linkBlocked, m.unroutable, m.notices,
		m.peerMsgsIn, m.peerMsgsOut, m.clientReqs, m.pubAckErrors, m.deliveryLatency, m.stepSeconds, m.inputQueue,
		statusCollector{m})
	return m
}

func (m *runtimeMetrics) setSnapshot(s overlay.Status) {
	m.mu.Lock()
	m.snap = s
	m.mu.Unlock()
}

// statusCollector exports the core's overlay.Status snapshot.
type statusCollector struct{ m *runtimeMetrics }

var (
	descJoined    = prometheus.NewDesc("deltapub_joined", "1 when this broker is a full member of the overlay.", nil, nil)
	descQueue     = prometheus.NewDesc("deltapub_queue_length", "Publications in the message queue (not yet safe to discard).", nil, nil)
	descSubs      = prometheus.NewDesc("deltapub_routing_table_size", "Subscription routing table entries.", nil, nil)
	descLocalSubs = prometheus.NewDesc("deltapub_local_subscriptions", "Subscriptions of local clients.", nil, nil)
	descMap       = prometheus.NewDesc("deltapub_topology_map_brokers", "Brokers in this broker's (δ+1)-neighbourhood map.", nil, nil)
	descLinks     = prometheus.NewDesc("deltapub_links", "Links of the core, by kind (tree, bypass) and state (up, down, suspected).", []string{"kind", "state"}, nil)
	descSuspected = prometheus.NewDesc("deltapub_suspected_peers", "Peers currently suspected.", nil, nil)
	descGone      = prometheus.NewDesc("deltapub_gone_peers", "Peers declared gone.", nil, nil)
	descBypasses  = prometheus.NewDesc("deltapub_bypasses", "Non-neighbour peers used as next hops (bypass links).", nil, nil)
	descDACKLag   = prometheus.NewDesc("deltapub_dack_lag", "Per upstream broker: stamps arrived here but not yet discarded (publications waiting for DACKs).", []string{"upstream"}, nil)
	descCounter   = prometheus.NewDesc("deltapub_core_events_total", "What the core counted since start: published, received, duplicates, sent, retransmitted, delivered, purged, backpressure, gaps.", []string{"event"}, nil)
	descControl   = prometheus.NewDesc("deltapub_control_messages_sent_total", "Control messages the core sent, by type.", []string{"type"}, nil)
)

func (statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJoined, descQueue, descSubs, descLocalSubs, descMap, descLinks,
		descSuspected, descGone, descBypasses, descDACKLag, descCounter, descControl} {
		ch <- d
	}
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	s := c.m.snap
	c.m.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	joined := 0.0
	if s.Joined && !s.Left {
		joined = 1
	}
	gauge(descJoined, joined)
	gauge(descQueue, float64(s.QueueLen))
	gauge(descSubs, float64(s.Subs))
	gauge(descLocalSubs, float64(s.LocalSubs))
	gauge(descMap, float64(len(s.Map)))
	links := map[[2]string]int{}
	for _, kind := range []string{"tree", "bypass"} {
		for _, state := range []string{"up", "down", "suspected"} {
			links[[2]string{kind, state}] = 0
		}
	}
	for _, l := range s.Links {
		kind, state := "bypass", "down"
		if l.Tree {
			kind = "tree"
		}
		switch {
		case l.Suspected:
			state = "suspected"
		case l.Up:
			state = "up"
		}
		links[[2]string{kind, state}]++
	}
	for k, v := range links {
		gauge(descLinks, float64(v), k[0], k[1])
	}
	gauge(descSuspected, float64(len(s.Suspected)))
	gauge(descGone, float64(len(s.Gone)))
	gauge(descBypasses, float64(len(s.Bypasses)))
	for up, arrived := range s.Arrived {
		lag := float64(0)
		if d := s.Discarded[up]; arrived > d {
			lag = float64(arrived - d)
		}
		gauge(descDACKLag, lag, up)
	}
	k := s.Counters
	for _, e := range []struct {
		name string
		v    uint64
	}{
		{"published", k.Published}, {"received", k.PubsIn}, {"duplicates", k.Duplicates}, {"sent", k.PubsOut},
		{"retransmitted", k.Retransmitted}, {"delivered", k.Delivered}, {"purged", k.Purged},
		{"backpressure", k.Backpressure}, {"gaps", k.Gaps},
	} {
		counter(descCounter, e.v, e.name)
	}
	for t, v := range k.Control {
		counter(descControl, v, t)
	}
}
