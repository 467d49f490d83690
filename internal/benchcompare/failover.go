package benchcompare

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"
)

// Failover is one system's failover run: a publisher at a fixed rate, one
// subscriber, and a server on the path killed with SIGKILL partway.
type Failover struct {
	System   string `json:"system"`
	Killed   string `json:"killed"` // which server, and why it is on the path
	Rate     int    `json:"rate_msgs_per_s"`
	Seconds  int    `json:"publish_seconds"`
	KillAtS  int    `json:"kill_at_s"`
	Sent     int    `json:"sent"`
	Received int64  `json:"received_distinct"`
	// Lost: sent (the publish call returned without an error) and never
	// received by the end of the drain.
	Lost       int64 `json:"lost"`
	Duplicates int64 `json:"duplicates"` // deliveries beyond the first of a message
	// PublishErrors: publish calls that failed (not counted as sent).
	PublishErrors int `json:"publish_errors"`
	// GaveUp: sent, but the publisher gave up on its acknowledgement
	// after its retries (JetStream; counted in Lost if it never arrived).
	GaveUp int `json:"gave_up,omitempty"`
	// PauseMs is the longest gap between two deliveries at the subscriber
	// that began while the publisher was still publishing; PauseAfterKillMs
	// is when it began, counted from the kill (negative: before it).
	PauseMs          float64 `json:"pause_ms"`
	PauseAfterKillMs float64 `json:"pause_after_kill_ms"`
	// PauseBeforeKillMs is the longest such gap before the kill: the
	// steady state's jitter, for scale.
	PauseBeforeKillMs float64 `json:"pause_before_kill_ms"`
	MaxLatencyMs      float64 `json:"max_latency_ms"` // publish call to delivery, worst message
	Error             string  `json:"error,omitempty"`
}

type killable interface {
	servers
	Kill(i int) error
}

// failoverHandler records, per message index, how often it arrived, and
// the gaps between deliveries.
type failoverHandler struct {
	s       *sink // probes and failures
	mu      sync.Mutex
	got     []uint16
	last    int64 // ns since s.base of the previous delivery (0: none yet)
	pubEnd  int64 // gaps starting after this are not pauses (0: still publishing)
	killAt  int64
	maxGap  int64
	gapAt   int64
	preGap  int64
	maxLat  int64
	arrived int64 // distinct
	dups    int64
}

func (h *failoverHandler) Fail(err error) { h.s.fail(err) }
func (h *failoverHandler) Raw(int)        {}

func (h *failoverHandler) Deliver(p []byte) {
	if len(p) < offIndex+8 {
		return
	}
	if p[0] == kindProbe {
		if h.s.probed.Load() == 0 {
			h.s.probed.Add(1)
		}
		return
	}
	now := h.s.now()
	i := binary.LittleEndian.Uint64(p[offIndex:])
	h.mu.Lock()
	defer h.mu.Unlock()
	if i >= uint64(len(h.got)) {
		return
	}
	if lat := now - int64(binary.LittleEndian.Uint64(p[offSent:])); lat > h.maxLat {
		h.maxLat = lat
	}
	if h.got[i] > 0 {
		h.dups++
	} else {
		h.arrived++
	}
	if h.got[i] < ^uint16(0) {
		h.got[i]++
	}
	if h.last > 0 && (h.pubEnd == 0 || h.last < h.pubEnd) {
		gap := now - h.last
		if gap > h.maxGap {
			h.maxGap, h.gapAt = gap, h.last
		}
		if (h.killAt == 0 || now < h.killAt) && gap > h.preGap { // ended before the kill
			h.preGap = gap
		}
	}
	h.last = now
}

// failoverPlan says where to publish and subscribe and which server to
// kill: deltapub's middle broker of B1–B2–B3 (publisher at B1, subscriber
// at B3: the bypass B1–B3 takes over); JetStream's stream leader
// (publisher and subscriber on the two others); core NATS's subscriber's
// server (a full mesh has no server between two others: the subscriber
// reconnects to another and what was in flight is lost).
func failoverPlan(ctx context.Context, srv servers) (pubAt, subAt, victim int, what string, err error) {
	switch s := srv.(type) {
	case *deltapubServers:
		return 0, 2, 1, "B2, the middle broker of B1–B2–B3 (δ = 2)", nil
	case *jsServers:
		l, err := s.leader(ctx, 0)
		if err != nil {
			return 0, 0, 0, "", err
		}
		return (l + 1) % 3, (l + 2) % 3, l, fmt.Sprintf("N%d, the stream leader", l+1), nil
	case *natsServers:
		return 0, 2, 2, "N3, the subscriber's server (it reconnects to N2)", nil
	}
	return 0, 0, 0, "", fmt.Errorf("benchcompare: no failover plan for %T", srv)
}

// runFailover publishes rate msgs/s for seconds s from one server to a
// subscriber on another, kills the planned server at killAt s, then waits
// up to drain for the stragglers (or until nothing arrived for quiet).
func runFailover(ctx context.Context, sys system, rate, seconds, killAt int) (Failover, error) {
	const (
		drain = 30 * time.Second // bound on the wait after the last publish
		quiet = 8 * time.Second  // longer than JetStream's redelivery (jsAckWait)
	)
	n := rate * seconds
	res := Failover{System: sys.Name(), Rate: rate, Seconds: seconds, KillAtS: killAt}
	srv, err := start(ctx, sys, 3)
	if err != nil {
		return res, err
	}
	defer srv.Close()
	ks, ok := srv.(killable)
	if !ok {
		return res, fmt.Errorf("benchcompare: %s cannot kill a server", sys.Name())
	}
	pubAt, subAt, victim, what, err := failoverPlan(ctx, srv)
	if err != nil {
		return res, err
	}
	res.Killed = what
	s := newSink(math.MaxInt64, 0) // done only by a failure
	h := &failoverHandler{s: s, got: make([]uint16, n)}
	sub, err := srv.Connect(ctx, subAt, connOptions{})
	if err != nil {
		return res, err
	}
	defer sub.Close()
	if err := sub.Subscribe(ctx, subSpec{Subject: benchSubject, Filter: benchFilter}, h); err != nil {
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
	killI := killAt * rate
	killed := make(chan error, 1)
	start := time.Now()
	published := 0 // indices the loop reached
	for i := 0; i < n; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			break
		}
		published = i + 1
		if i == killI {
			h.mu.Lock()
			h.killAt = s.now()
			h.mu.Unlock()
			go func() { killed <- ks.Kill(victim) }()
		}
		if err := pub.Publish(ctx, &outMsg{Subject: benchSubject, Attrs: benchAttrs, Payload: s.payload(kindData, i)}); err != nil {
			res.PublishErrors++
			h.mu.Lock()
			h.got[i] = ^uint16(0) // not sent: neither lost nor duplicated
			h.mu.Unlock()
			continue
		}
		res.Sent++
	}
	h.mu.Lock()
	h.pubEnd = s.now()
	h.mu.Unlock()
	if killI < published {
		if err := <-killed; err != nil {
			return res, err
		}
	}
	// Acknowledged (deltapub, JetStream) or flushed (NATS); a failure here
	// does not end the run: what arrived is what counts.
	fctx, cancel := context.WithTimeout(ctx, drain)
	ferr := pub.Flush(fctx)
	cancel()
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		h.mu.Lock()
		done, idle := h.arrived >= int64(res.Sent), s.now()-h.last
		h.mu.Unlock()
		if done || time.Duration(idle) > quiet {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	res.Received, res.Duplicates = h.arrived, h.dups
	for _, c := range h.got[:published] {
		if c == 0 {
			res.Lost++
		}
	}
	res.PauseMs = float64(h.maxGap) / 1e6
	res.PauseAfterKillMs = float64(h.gapAt-h.killAt) / 1e6
	res.PauseBeforeKillMs = float64(h.preGap) / 1e6
	res.MaxLatencyMs = float64(h.maxLat) / 1e6
	if g, ok := pub.(interface{ gaveUpCount() int }); ok {
		res.GaveUp = g.gaveUpCount()
	}
	if ferr != nil {
		res.Error = "flush: " + ferr.Error()
	}
	return res, s.failure()
}
