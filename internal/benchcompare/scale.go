package benchcompare

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
)

// ScaleConfig sizes a Scale run: how deltapub's cost grows with the path
// length and with the subscriptions routed through a broker.
type ScaleConfig struct {
	Launcher    BrokerLauncher
	Delta       int   // δ of every broker (default 2)
	Chains      []int // chain lengths (default 1–8)
	Subs        []int // routed subscriptions (default 100 … 1,000,000)
	Messages    int   // per throughput run (default 200,000)
	Rate        int   // msgs/s of the latency runs (default 1,000)
	LatencyMsgs int   // default 5 s worth of Rate
	Seed        uint64
	Timeout     time.Duration // per point (default 300 s)
	Progress    io.Writer
}

func (c *ScaleConfig) fill() error {
	if c.Delta == 0 {
		c.Delta = 2
	}
	if c.Chains == nil {
		c.Chains = []int{1, 2, 3, 4, 5, 6, 7, 8}
	}
	if c.Subs == nil {
		c.Subs = []int{100, 1000, 10_000, 100_000, 1_000_000}
	}
	if c.Messages == 0 {
		c.Messages = 200_000
	}
	if c.Rate == 0 {
		c.Rate = 1000
	}
	if c.LatencyMsgs == 0 {
		c.LatencyMsgs = 5 * c.Rate
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Timeout == 0 {
		c.Timeout = 300 * time.Second
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	switch {
	case c.Launcher == nil:
		return fmt.Errorf("benchcompare: scale: no broker launcher")
	case c.Delta < 1 || c.Delta > 8:
		return fmt.Errorf("benchcompare: scale: delta %d out of range [1, 8]", c.Delta)
	case c.Messages < 1 || c.Messages > 10_000_000:
		return fmt.Errorf("benchcompare: scale: messages %d out of range [1, 10000000]", c.Messages)
	case c.Rate < 1 || c.Rate > 100_000:
		return fmt.Errorf("benchcompare: scale: rate %d out of range [1, 100000]", c.Rate)
	case c.LatencyMsgs < 10 || c.LatencyMsgs > 1_000_000:
		return fmt.Errorf("benchcompare: scale: latency messages %d out of range [10, 1000000]", c.LatencyMsgs)
	case c.Timeout < time.Second:
		return fmt.Errorf("benchcompare: scale: timeout %v below 1s", c.Timeout)
	}
	for _, n := range c.Chains {
		if n < 1 || n > 16 {
			return fmt.Errorf("benchcompare: scale: chain length %d out of range [1, 16]", n)
		}
	}
	for _, n := range c.Subs {
		if n < 1 || n > scaleMaxSubs {
			return fmt.Errorf("benchcompare: scale: subscriptions %d out of range [1, %d]", n, scaleMaxSubs)
		}
	}
	return nil
}

// Validate fills in the defaults and checks the sizes.
func (c *ScaleConfig) Validate() error { return c.fill() }

const (
	scaleMaxSubs = 2_000_000
	// scaleSubsPerConn is the subscriptions per client connection: the
	// default preset's max_subs_per_client.
	scaleSubsPerConn = 1000
)

// ScalePoint is one measured point.
type ScalePoint struct {
	Brokers   int        `json:"brokers"`
	Subs      int        `json:"routed_subscriptions,omitempty"`
	Through   Throughput `json:"throughput"`
	Latency   Latency    `json:"latency"`
	RSSMB     []float64  `json:"rss_mb,omitempty"` // per broker, after subscribing (subscription points)
	SubSecs   float64    `json:"subscribe_seconds,omitempty"`
	Error     string     `json:"error,omitempty"`
	Connected int        `json:"subscriber_connections,omitempty"`
}

// ScaleReport is a Scale run.
type ScaleReport struct {
	Delta   int          `json:"delta"`
	Chain   []ScalePoint `json:"chain"`
	Subs    []ScalePoint `json:"subscriptions"`
	Machine Machine      `json:"machine"`
	Started time.Time    `json:"started"`
	Seconds float64      `json:"seconds"`
}

// Scale measures, with broker processes on loopback, throughput (as
// runThroughput: publisher at B1, subscriber at the far end, end-to-end
// window) and p50/p99 at a fixed rate against the chain length, then
// against the stock-workload subscriptions held by subscribers at B2 of
// B1–B2 (so routed through B1), with both brokers' RSS after
// subscribing. The traffic of the subscription points is the benchmark's
// own class (it matches none of the stock filters): it measures what a
// routing table of that size costs every publication that crosses it.
func Scale(ctx context.Context, cfg ScaleConfig) (*ScaleReport, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	rep := &ScaleReport{Delta: cfg.Delta, Machine: ThisMachine(), Started: time.Now().UTC()}
	t0 := time.Now()
	sys := deltapubSystem{launch: cfg.Launcher, delta: cfg.Delta}
	for _, n := range cfg.Chains {
		pt := ScalePoint{Brokers: n}
		pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		var errs []string
		var err error
		if pt.Through, err = runThroughput(pctx, sys, n, 0, n-1, 1, cfg.Messages, nil); err != nil {
			errs = append(errs, "throughput: "+err.Error())
		}
		if pt.Latency, err = runLatencyOn(pctx, sys, n, 0, n-1, cfg.Rate, cfg.LatencyMsgs); err != nil {
			errs = append(errs, "latency: "+err.Error())
		}
		cancel()
		if len(errs) > 0 {
			pt.Error = strings.Join(errs, "; ")
		}
		rep.Chain = append(rep.Chain, pt)
		fmt.Fprintf(cfg.Progress, "chain %d: %.0f msgs/s, p50 %.0f µs, p99 %.0f µs %s\n", n, pt.Through.Rate, pt.Latency.P50Us, pt.Latency.P99Us, pt.Error)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	for _, n := range cfg.Subs {
		pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		pt := scaleSubsPoint(pctx, cfg, n)
		cancel()
		rep.Subs = append(rep.Subs, pt)
		fmt.Fprintf(cfg.Progress, "subscriptions %d: subscribed in %.1f s, RSS %v MB, %.0f msgs/s, p50 %.0f µs, p99 %.0f µs %s\n",
			n, pt.SubSecs, pt.RSSMB, pt.Through.Rate, pt.Latency.P50Us, pt.Latency.P99Us, pt.Error)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	rep.Seconds = time.Since(t0).Seconds()
	rep.Machine.LoadEnd = loadAvg()
	return rep, nil
}

// scaleSubsPoint starts B1–B2, subscribes n stock filters at B2 over
// n/1000 connections (one at a time, then their subscriptions in
// parallel), reads the RSS of both, and runs throughput and latency
// B1→B2 on the same brokers.
func scaleSubsPoint(ctx context.Context, cfg ScaleConfig, n int) ScalePoint {
	pt := ScalePoint{Brokers: 2, Subs: n}
	fail := func(err error) ScalePoint { pt.Error = err.Error(); return pt }
	srv, err := start(ctx, deltapubSystem{launch: cfg.Launcher, delta: cfg.Delta}, 2)
	if err != nil {
		return fail(err)
	}
	defer srv.Close()
	ds := srv.(*deltapubServers)
	st := workload.NewStock(rand.New(rand.NewPCG(cfg.Seed, 0x5ca1e)))
	conns := (n + scaleSubsPerConn - 1) / scaleSubsPerConn
	cs := make([]*client.Client, 0, conns)
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	t := time.Now()
	for range conns {
		c, err := client.Connect(ctx, ds.addrs[1], client.Options{DeliveryBuffer: 1})
		if err != nil {
			return fail(err)
		}
		cs = append(cs, c)
	}
	pt.Connected = len(cs)
	filters := make([]matching.Filter, n)
	for i := range filters {
		filters[i] = st.Filter()
	}
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for ci, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := ci; i < n; i += len(cs) {
				sub, err := c.SubscribeFunc(ctx, filters[i], func(client.Delivery) {})
				if err == nil {
					err = sub.WaitConfirmed(ctx)
				}
				if err != nil {
					errs[ci] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fail(fmt.Errorf("subscribe: %w", err))
		}
	}
	pt.SubSecs = time.Since(t).Seconds()
	for _, b := range ds.brokers {
		pt.RSSMB = append(pt.RSSMB, RSSMB(b.Pid))
	}
	// Throughput and latency over the same two brokers, their tables full.
	one := &startedSystem{srv: srv}
	var perrs []string
	if pt.Through, err = runThroughput(ctx, one, 2, 0, 1, 1, cfg.Messages, nil); err != nil {
		perrs = append(perrs, "throughput: "+err.Error())
	}
	if pt.Latency, err = runLatencyOn(ctx, one, 2, 0, 1, cfg.Rate, cfg.LatencyMsgs); err != nil {
		perrs = append(perrs, "latency: "+err.Error())
	}
	if len(perrs) > 0 {
		pt.Error = strings.Join(perrs, "; ")
	}
	return pt
}

// startedSystem is a system whose servers are already running: Start
// returns them, and closing them is left to their owner.
type startedSystem struct{ srv servers }

func (startedSystem) Name() string { return "deltapub" }
func (s *startedSystem) Start(context.Context, int) (servers, error) {
	return keepOpen{s.srv}, nil
}

type keepOpen struct{ servers }

func (keepOpen) Close() error { return nil }

// RSSMB is a process's resident set size in MB from /proc (0 where there
// is none, or for pid 0).
func RSSMB(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
