// Package benchcompare measures deltapub side by side with NATS on
// loopback, in one run, with the same load generator for both (250-byte
// payloads; a message counts when the subscriber application's handler
// sees it): one server 1→1, two servers (deltapub B1–B2 with δ = 1 against
// a NATS cluster, publisher on A and subscriber on C), deltapub's 3-broker
// chain on its own, fan-out 1→100 on the far server, end-to-end latency at
// a fixed rate over the two-server path, and content-based filtering
// (stock workload) against NATS subjects plus client-side filtering.
//
// deltapub brokers run as separate 'deltapub broker' processes
// (ProcessLauncher) like nats-server does, so that neither system's
// servers share a Go runtime with the load generator; tests use
// InProcessLauncher. Every server is killed when its run ends, on every
// path, and with the harness if it dies (Pdeathsig). Every loop is bounded
// in count and every run in time (Config.Timeout).
package benchcompare

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// Config chooses the sizes of a run. Zero values take the defaults of
// Defaults (scaled from Messages where noted).
type Config struct {
	Messages        int // 1→1, two servers, 3-broker chain (default 1,000,000)
	FanoutSubs      int // default 100
	FanoutMessages  int // default Messages/20 (so Messages×5 deliveries)
	LatencyRate     int // msgs/s, default 10,000
	LatencyMessages int // default 5 s worth of LatencyRate, at most Messages
	FilterSubs      int // default 10,000
	FilterConns     int // subscriber connections for them, default 100
	FilterPubs      int // default Messages/10
	Seed            uint64
	Delta           int           // δ of the deltapub brokers (default 1)
	Timeout         time.Duration // per run (default 180 s)
	Repeat          int           // repetitions of each run, median kept (default 1)

	Launcher   BrokerLauncher // how deltapub brokers are started (required)
	NATSServer string         // nats-server binary; "" runs deltapub only
	// ProfileDir, if set, receives a CPU profile of each deltapub broker
	// during each run (ProfileSeconds long, default 5).
	ProfileDir     string
	ProfileSeconds int
	Progress       io.Writer // one line per run; nil: discarded
	// Reliable sizes the reliable-delivery and failover runs (after the
	// others; JetStream with NATSServer).
	Reliable ReliableConfig
	// SkipCore skips the core runs (single … filtered): reliable and
	// failover runs only.
	SkipCore bool
	// ClientTransports: how deltapub's clients reach their brokers,
	// TransportTCP or TransportQUIC (broker links are QUIC either way). The
	// first is the one of every run and of Report.Deltapub; each further
	// one repeats the core runs (Report.OtherTransports), interleaved with
	// the others. Default: TCP.
	ClientTransports []string
}

// Validate fills in the defaults and checks the sizes (Run does it too):
// call it before anything slow, such as installing NATS.
func (c *Config) Validate() error { return c.fill() }

func (c *Config) fill() error {
	if c.Messages == 0 {
		c.Messages = 1_000_000
	}
	if c.FanoutSubs == 0 {
		c.FanoutSubs = 100
	}
	if c.FanoutMessages == 0 {
		c.FanoutMessages = max(1, c.Messages/20)
	}
	if c.LatencyRate == 0 {
		c.LatencyRate = 10_000
	}
	if c.LatencyMessages == 0 {
		c.LatencyMessages = min(5*c.LatencyRate, c.Messages)
	}
	if c.FilterSubs == 0 {
		c.FilterSubs = 10_000
	}
	if c.FilterConns == 0 {
		c.FilterConns = 100
	}
	if c.FilterPubs == 0 {
		c.FilterPubs = max(1, c.Messages/10)
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Delta == 0 {
		c.Delta = 1
	}
	if c.Timeout == 0 {
		c.Timeout = 180 * time.Second
	}
	if c.Repeat == 0 {
		c.Repeat = 1
	}
	if c.ProfileSeconds == 0 {
		c.ProfileSeconds = 5
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if len(c.ClientTransports) == 0 {
		c.ClientTransports = []string{TransportTCP}
	}
	for i, tr := range c.ClientTransports {
		if tr != TransportTCP && tr != TransportQUIC {
			return fmt.Errorf("benchcompare: client transport %q: want %s or %s", tr, TransportTCP, TransportQUIC)
		}
		if slices.Contains(c.ClientTransports[:i], tr) {
			return fmt.Errorf("benchcompare: client transport %s given twice", tr)
		}
	}
	if err := c.Reliable.fill(c.Messages); err != nil {
		return err
	}
	switch {
	case c.Launcher == nil:
		return errors.New("benchcompare: no broker launcher")
	case c.Messages < 1 || c.Messages > 100_000_000:
		return fmt.Errorf("benchcompare: messages %d out of range [1, 100000000]", c.Messages)
	case c.FanoutSubs < 1 || c.FanoutSubs > 10_000:
		return fmt.Errorf("benchcompare: fan-out subscribers %d out of range [1, 10000]", c.FanoutSubs)
	case c.FanoutMessages < 1 || c.FanoutMessages > 100_000_000:
		return fmt.Errorf("benchcompare: fan-out messages %d out of range [1, 100000000]", c.FanoutMessages)
	case c.LatencyRate < 1 || c.LatencyRate > 1_000_000:
		return fmt.Errorf("benchcompare: latency rate %d out of range [1, 1000000]", c.LatencyRate)
	case c.LatencyMessages < 10 || c.LatencyMessages > 10_000_000:
		return fmt.Errorf("benchcompare: latency messages %d out of range [10, 10000000]", c.LatencyMessages)
	case c.FilterSubs < 1 || c.FilterSubs > 1_000_000:
		return fmt.Errorf("benchcompare: filter subscriptions %d out of range [1, 1000000]", c.FilterSubs)
	case c.FilterConns < 1 || c.FilterConns > c.FilterSubs || c.FilterConns > 1000:
		return fmt.Errorf("benchcompare: filter connections %d out of range [1, min(subscriptions, 1000)]", c.FilterConns)
	case c.FilterPubs < 1 || c.FilterPubs > 100_000_000:
		return fmt.Errorf("benchcompare: filter publications %d out of range [1, 100000000]", c.FilterPubs)
	case c.Delta < 1 || c.Delta > 8:
		return fmt.Errorf("benchcompare: delta %d out of range [1, 8]", c.Delta)
	case c.Timeout < time.Second:
		return fmt.Errorf("benchcompare: timeout %v below 1s", c.Timeout)
	case c.Repeat < 1 || c.Repeat > 9:
		return fmt.Errorf("benchcompare: repeat %d out of range [1, 9]", c.Repeat)
	case c.ProfileSeconds < 1 || c.ProfileSeconds > 120:
		return fmt.Errorf("benchcompare: profile seconds %d out of range [1, 120]", c.ProfileSeconds)
	}
	return nil
}

// Figures are one system's raw results.
type Figures struct {
	Single    Throughput  `json:"single"`
	TwoServer Throughput  `json:"two_server"`
	Chain3    *Throughput `json:"three_broker_chain,omitempty"` // deltapub only
	Fanout    Throughput  `json:"fanout"`
	Latency   Latency     `json:"latency"`
	Filtered  Filtered    `json:"filtered"`
	// Errors names the runs that failed (every repetition) and why (their
	// figures are zero).
	Errors map[string]string `json:"errors,omitempty"`
	// Repeats lists each successful repetition's key figure by run, when
	// there was more than one (the report keeps the median).
	Repeats map[string][]float64 `json:"repeats,omitempty"`
	// FalseSuspicions (deltapub only): what the brokers suspected over
	// every core run. No broker is killed there, so each suspicion is a
	// live broker starved past the failure timeout.
	FalseSuspicions *Suspicions `json:"false_suspicions,omitempty"`
}

// Suspicions counts suspicions over runs, with the brokers read.
type Suspicions struct {
	Count   int64 `json:"count"`
	Brokers int   `json:"brokers_read"`             // broker runs whose metrics were read
	Unread  int   `json:"brokers_unread,omitempty"` // broker runs whose metrics could not be
}

// incomplete names the runs of f that ended (timeout) before every
// expected delivery arrived; their rates cover only what arrived.
func (f *Figures) incomplete() []string {
	var out []string
	add := func(name string, ran, complete bool) {
		if ran && !complete {
			out = append(out, name)
		}
	}
	add("single", f.Single.Messages > 0, f.Single.Complete)
	add("two_server", f.TwoServer.Messages > 0, f.TwoServer.Complete)
	if f.Chain3 != nil {
		add("three_broker_chain", f.Chain3.Messages > 0, f.Chain3.Complete)
	}
	add("fanout", f.Fanout.Messages > 0, f.Fanout.Complete)
	add("latency", f.Latency.Messages > 0, f.Latency.Complete)
	add("filtered", f.Filtered.Publications > 0, f.Filtered.Complete)
	return out
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"nproc"`
	Model     string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os_arch"`
	// Load averages (1, 5, 15 min, from /proc/loadavg) when the run
	// started and ended: other work on the machine shows here.
	LoadStart string `json:"loadavg_start,omitempty"`
	LoadEnd   string `json:"loadavg_end,omitempty"`
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Ratios are the core runs' ratios deltapub / core NATS.
type Ratios struct {
	SingleRatio    float64 `json:"single_throughput_ratio"`
	TwoServerRatio float64 `json:"two_server_throughput_ratio"`
	FanoutRatio    float64 `json:"fanout_ratio"`
	P99Ratio       float64 `json:"p99_latency_ratio"`
	FilteredRatio  float64 `json:"filtered_ratio"`
}

func coreRatios(d, n *Figures) Ratios {
	return Ratios{
		SingleRatio:    ratio(d.Single.Rate, n.Single.Rate),
		TwoServerRatio: ratio(d.TwoServer.Rate, n.TwoServer.Rate),
		FanoutRatio:    ratio(d.Fanout.Rate, n.Fanout.Rate),
		P99Ratio:       ratio(d.Latency.P99Us, n.Latency.P99Us),
		FilteredRatio:  ratio(d.Filtered.Rate, n.Filtered.Rate),
	}
}

// TransportRun is deltapub's core runs with another client transport.
type TransportRun struct {
	ClientTransport string `json:"client_transport"`
	Ratios
	Deltapub Figures `json:"deltapub"`
}

// Report is the whole comparison; its JSON is what --json writes.
type Report struct {
	Ratios // of Deltapub, with ClientTransport
	// ClientTransport is how deltapub's clients reached their brokers in
	// every run of Deltapub (and the reliable and failover runs).
	ClientTransport string `json:"client_transport"`
	// OtherTransports: the core runs with each further client transport.
	OtherTransports []TransportRun `json:"other_client_transports,omitempty"`

	// deltapub's acknowledged throughput (δ = 2) over JetStream R3 file
	// storage's: durability none against the default sync, fsync against
	// sync_interval: always.
	JetStreamR3Ratio     float64 `json:"jetstream_r3_ratio,omitempty"`
	JetStreamR3SyncRatio float64 `json:"jetstream_r3_sync_ratio,omitempty"`
	// Failover figures by system (deltapub, deltapub_testbed_preset,
	// jetstream_r3, nats); the runs in full under failover.
	FailoverPauseMs    map[string]float64 `json:"failover_pause_ms,omitempty"`
	FailoverLost       map[string]int64   `json:"failover_lost,omitempty"`
	FailoverDuplicates map[string]int64   `json:"failover_duplicates,omitempty"`

	Deltapub Figures       `json:"deltapub"`
	NATS     *Figures      `json:"nats,omitempty"`
	Reliable []ReliableRun `json:"reliable,omitempty"`
	// CoreSkipped: the core runs (single … filtered) were not run.
	CoreSkipped bool       `json:"core_skipped,omitempty"`
	Failover    []Failover `json:"failover,omitempty"`

	PayloadBytes int       `json:"payload_bytes"`
	Delta        int       `json:"delta"`
	NATSVersion  string    `json:"nats_version,omitempty"`
	Machine      Machine   `json:"machine"`
	Started      time.Time `json:"started"`
	Seconds      float64   `json:"seconds"`
}

// Failed reports whether a run of either system failed (its figures are
// zero: see Figures.Errors).
func (r *Report) Failed() bool {
	return len(r.Deltapub.Errors) > 0 || (r.NATS != nil && len(r.NATS.Errors) > 0) || r.reliableFailed()
}

// Run measures both systems (deltapub only without cfg.NATSServer).
// It fails only on a bad configuration or a cancelled ctx; a failed run
// is recorded in the report's Errors and the others go on.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	rep := &Report{PayloadBytes: PayloadSize, Delta: cfg.Delta, Machine: ThisMachine(), Started: time.Now().UTC(),
		ClientTransport: cfg.ClientTransports[0]}
	for _, tr := range cfg.ClientTransports[1:] {
		rep.OtherTransports = append(rep.OtherTransports, TransportRun{ClientTransport: tr})
	}
	var systems []system
	var figs []*Figures
	var suspicions []*suspicionCount
	for i, tr := range cfg.ClientTransports {
		sys := deltapubSystem{launch: cfg.Launcher, delta: cfg.Delta, transport: tr, suspicions: &suspicionCount{}}
		suspicions = append(suspicions, sys.suspicions)
		f := &rep.Deltapub
		if i > 0 {
			f = &rep.OtherTransports[i-1].Deltapub
		}
		if len(cfg.ClientTransports) > 1 {
			sys.label = "deltapub/" + tr
		}
		systems, figs = append(systems, sys), append(figs, f)
	}
	if cfg.NATSServer != "" {
		rep.NATS = &Figures{}
		rep.NATSVersion = NATSVersion
		systems = append(systems, natsSystem{bin: cfg.NATSServer})
		figs = append(figs, rep.NATS)
	}
	var prof *profiler
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("benchcompare: profile directory: %w", err)
		}
		prof = &profiler{dir: cfg.ProfileDir, seconds: cfg.ProfileSeconds, log: cfg.Progress}
		// The harness (both systems' load generator) too, for the whole run.
		f, err := os.Create(filepath.Join(cfg.ProfileDir, "harness.pprof"))
		if err != nil {
			return nil, fmt.Errorf("benchcompare: harness profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err == nil {
			defer pprof.StopCPUProfile()
		}
	}
	type step struct {
		name  string
		chain bool // deltapub's systems only
		run   func(ctx context.Context, sys system, f *Figures) (string, error)
		key   func(f *Figures) float64 // the figure whose median is kept
		take  func(dst, src *Figures)  // copies this step's result
	}
	// complete says whether a run's result has every expected delivery.
	complete := func(f *Figures) bool { return len(f.incomplete()) == 0 }
	tput := func(t Throughput) string {
		done := ""
		if !t.Complete {
			done = fmt.Sprintf(" INCOMPLETE %d/%d", t.Delivered, t.Expected)
		}
		return fmt.Sprintf("%.0f deliveries/s over %.1f s%s", t.Rate, t.Seconds, done)
	}
	far := func(sys system) int {
		if sys.Name() == "NATS" {
			return 3 // a 3-server cluster: publisher on A, subscriber on C
		}
		return 2
	}
	steps := []step{
		{"single", false, func(ctx context.Context, sys system, f *Figures) (string, error) {
			var err error
			f.Single, err = runThroughput(ctx, sys, 1, 0, 0, 1, cfg.Messages, prof.with("single"))
			return tput(f.Single), err
		}, func(f *Figures) float64 { return f.Single.Rate }, func(d, s *Figures) { d.Single = s.Single }},
		{"two_server", false, func(ctx context.Context, sys system, f *Figures) (string, error) {
			var err error
			n := far(sys)
			f.TwoServer, err = runThroughput(ctx, sys, n, 0, n-1, 1, cfg.Messages, prof.with("two_server"))
			return tput(f.TwoServer), err
		}, func(f *Figures) float64 { return f.TwoServer.Rate }, func(d, s *Figures) { d.TwoServer = s.TwoServer }},
		{"three_broker_chain", true, func(ctx context.Context, sys system, f *Figures) (string, error) {
			t, err := runThroughput(ctx, sys, 3, 0, 2, 1, cfg.Messages, prof.with("chain3"))
			f.Chain3 = &t
			return tput(t), err
		}, func(f *Figures) float64 { return f.Chain3.Rate }, func(d, s *Figures) { d.Chain3 = s.Chain3 }},
		{"fanout", false, func(ctx context.Context, sys system, f *Figures) (string, error) {
			var err error
			n := far(sys)
			f.Fanout, err = runThroughput(ctx, sys, n, 0, n-1, cfg.FanoutSubs, cfg.FanoutMessages, prof.with("fanout"))
			return tput(f.Fanout), err
		}, func(f *Figures) float64 { return f.Fanout.Rate }, func(d, s *Figures) { d.Fanout = s.Fanout }},
		{"latency", false, func(ctx context.Context, sys system, f *Figures) (string, error) {
			var err error
			f.Latency, err = runLatency(ctx, sys, cfg.LatencyRate, cfg.LatencyMessages)
			l := f.Latency
			return fmt.Sprintf("p50 %.0f µs, p99 %.0f µs, p99.9 %.0f µs (%d measured, %d lost)", l.P50Us, l.P99Us, l.P999Us, l.Measured, l.Lost), err
		}, func(f *Figures) float64 { return f.Latency.P99Us }, func(d, s *Figures) { d.Latency = s.Latency }},
		{"filtered", false, func(ctx context.Context, sys system, f *Figures) (string, error) {
			var err error
			f.Filtered, err = runFiltered(ctx, sys, cfg.FilterSubs, cfg.FilterConns, cfg.FilterPubs, cfg.Seed, prof.with("filtered"))
			r := f.Filtered
			return fmt.Sprintf("%.0f deliveries/s (%d/%d), %.1f MB to subscribers", r.Rate, r.Delivered, r.Expected, float64(r.BytesToSubs)/1e6), err
		}, func(f *Figures) float64 { return f.Filtered.Rate }, func(d, s *Figures) { d.Filtered = s.Filtered }},
	}
	total := 0
	for _, s := range steps {
		if s.chain {
			total += cfg.Repeat * len(cfg.ClientTransports)
		} else {
			total += cfg.Repeat * len(systems)
		}
	}
	t0 := time.Now()
	k := 0
	if cfg.SkipCore {
		steps = nil
		rep.CoreSkipped = true
	}
	for _, s := range steps {
		results := make([][]*Figures, len(systems))
		lastErr := make([]error, len(systems))
		// Repetitions interleave the systems, so that a disturbance of the
		// machine (other load) is more likely to hit both.
		for r := 0; r < cfg.Repeat; r++ {
			for i, sys := range systems {
				if _, isNATS := sys.(natsSystem); s.chain && isNATS {
					continue
				}
				if err := ctx.Err(); err != nil {
					return rep, fmt.Errorf("benchcompare: interrupted: %w", err)
				}
				k++
				rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
				st := time.Now()
				f := &Figures{}
				msg, err := s.run(rctx, sys, f)
				cancel()
				if err != nil {
					lastErr[i] = err
					msg = "FAILED: " + err.Error()
				} else {
					results[i] = append(results[i], f)
				}
				fmt.Fprintf(cfg.Progress, "[%d/%d] %-8s %-18s %s (%.0f s)\n", k, total, sys.Name(), s.name, msg, time.Since(st).Seconds())
			}
		}
		for i := range systems {
			rs := results[i]
			if len(rs) == 0 {
				if lastErr[i] != nil {
					if figs[i].Errors == nil {
						figs[i].Errors = map[string]string{}
					}
					figs[i].Errors[s.name] = lastErr[i].Error()
				}
				continue
			}
			// The median of the complete repetitions, if there are any.
			if done := slices.DeleteFunc(slices.Clone(rs), func(f *Figures) bool { return !complete(f) }); len(done) > 0 {
				rs = done
			}
			slices.SortFunc(rs, func(a, b *Figures) int { return cmp.Compare(s.key(a), s.key(b)) })
			s.take(figs[i], rs[(len(rs)-1)/2])
			if cfg.Repeat > 1 {
				if figs[i].Repeats == nil {
					figs[i].Repeats = map[string][]float64{}
				}
				for _, f := range rs {
					figs[i].Repeats[s.name] = append(figs[i].Repeats[s.name], s.key(f))
				}
			}
		}
	}
	if !cfg.SkipCore {
		for i, c := range suspicions {
			s := c.read()
			figs[i].FalseSuspicions = &s
		}
	}
	if err := runReliable(ctx, &cfg, rep, prof); err != nil {
		return rep, err
	}
	rep.Seconds = time.Since(t0).Seconds()
	rep.Machine.LoadEnd = loadAvg()
	if n := rep.NATS; n != nil {
		rep.Ratios = coreRatios(&rep.Deltapub, n)
		for i := range rep.OtherTransports {
			o := &rep.OtherTransports[i]
			o.Ratios = coreRatios(&o.Deltapub, n)
		}
	}
	return rep, nil
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// ThisMachine describes the machine the harness runs on.
func ThisMachine() Machine {
	m := Machine{CPUs: goruntime.NumCPU(), GoVersion: goruntime.Version(), OS: goruntime.GOOS + "/" + goruntime.GOARCH, LoadStart: loadAvg()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// The goals for the ratios deltapub / core NATS.
var (
	goalSingle    = goal{atLeast: true, bound: 0.6}
	goalTwoServer = goal{atLeast: true, bound: 0.5}
	goalFanout    = goal{atLeast: true, bound: 0.8}
	goalP99       = goal{bound: 2}
	goalFiltered  = goal{atLeast: true, bound: 1.2}
)

// goal is a target for a ratio.
type goal struct {
	atLeast bool // ratio ≥ bound (else ≤ bound)
	strict  bool // > rather than ≥
	bound   float64
}

func (g goal) String() string {
	switch {
	case g.atLeast && g.strict:
		return fmt.Sprintf("> %g", g.bound)
	case g.atLeast:
		return fmt.Sprintf("≥ %g", g.bound)
	default:
		return fmt.Sprintf("≤ %g", g.bound)
	}
}

func (g goal) met(r float64) bool {
	switch {
	case r == 0:
		return false
	case g.atLeast && g.strict:
		return r > g.bound
	case g.atLeast:
		return r >= g.bound
	default:
		return r <= g.bound
	}
}

// WriteTable writes the side-by-side table: the core runs (once per
// client transport), the reliable runs, the machine line.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	if !r.CoreSkipped {
		name := "deltapub"
		if len(r.OtherTransports) > 0 {
			name += "/" + r.ClientTransport
		}
		r.writeCore(&b, name, r.Deltapub)
		for _, o := range r.OtherTransports {
			b.WriteString("\n")
			r.writeCore(&b, "deltapub/"+o.ClientTransport, o.Deltapub)
		}
	}
	r.writeRunErrors(&b, "", r.NATS)
	r.writeReliableTable(&b)
	deltas := fmt.Sprintf("deltapub δ = %d", r.Delta)
	if len(r.Reliable) > 0 || len(r.Failover) > 0 {
		deltas += " (reliable and failover runs: δ = 2)"
	}
	if r.ClientTransport != "" {
		deltas += ", clients over " + r.ClientTransport
	}
	fmt.Fprintf(&b, "machine: %d CPUs, %s, %s, %s; load average %s at the start, %s at the end; %s; %.0f s\n",
		r.Machine.CPUs, r.Machine.Model, r.Machine.GoVersion, r.Machine.OS, r.Machine.LoadStart, r.Machine.LoadEnd, deltas, r.Seconds)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCore writes the core runs' rows of d (named name) beside NATS's.
func (r *Report) writeCore(b *strings.Builder, name string, d Figures) {
	var n Figures
	hasNATS := r.NATS != nil
	if hasNATS {
		n = *r.NATS
	}
	type row struct {
		name   string
		dp, nt float64
		unit   string
		g      *goal
		noNATS bool
	}
	g := func(x goal) *goal { return &x }
	rows := []row{
		{name: "single 1→1", dp: d.Single.Rate, nt: n.Single.Rate, unit: "msgs/s", g: g(goalSingle)},
		{name: "two servers (B1→B2 | A→C)", dp: d.TwoServer.Rate, nt: n.TwoServer.Rate, unit: "msgs/s", g: g(goalTwoServer)},
		{name: "3-broker chain B1→B3", unit: "msgs/s", noNATS: true},
		{name: fmt.Sprintf("fan-out 1→%d, far server", d.Fanout.Subs), dp: d.Fanout.Rate, nt: n.Fanout.Rate, unit: "deliveries/s", g: g(goalFanout)},
		{name: fmt.Sprintf("latency p50 @ %d/s", d.Latency.Rate), dp: d.Latency.P50Us, nt: n.Latency.P50Us, unit: "µs"},
		{name: "latency p99", dp: d.Latency.P99Us, nt: n.Latency.P99Us, unit: "µs", g: g(goalP99)},
		{name: "latency p99.9", dp: d.Latency.P999Us, nt: n.Latency.P999Us, unit: "µs"},
		{name: fmt.Sprintf("filtered, %d subs", d.Filtered.Subs), dp: d.Filtered.Rate, nt: n.Filtered.Rate, unit: "deliveries/s", g: g(goalFiltered)},
		{name: "  bytes to subscribers", dp: float64(d.Filtered.BytesToSubs) / 1e6, nt: float64(n.Filtered.BytesToSubs) / 1e6, unit: "MB"},
		{name: "  messages to subscribers", dp: float64(d.Filtered.Carried), nt: float64(n.Filtered.Carried), unit: "msgs"},
	}
	if d.Chain3 != nil {
		rows[2].dp = d.Chain3.Rate
	}
	fmt.Fprintf(b, "%-30s %14s %14s %-13s %7s  %s\n", "figure (250 B payloads)", name, "NATS "+r.NATSVersion, "unit", "ratio", "goal")
	for _, x := range rows {
		nt, rt, goalS := "—", "—", ""
		if hasNATS && !x.noNATS {
			nt = num(x.nt)
			rv := ratio(x.dp, x.nt)
			rt = fmt.Sprintf("%.2f", rv)
			if x.g != nil {
				goalS = x.g.String() + " "
				if x.g.met(rv) {
					goalS += "met"
				} else {
					goalS += "MISSED"
				}
			}
		}
		fmt.Fprintf(b, "%-30s %14s %14s %-13s %7s  %s\n", x.name, num(x.dp), nt, x.unit, rt, goalS)
	}
	if s := d.FalseSuspicions; s != nil {
		fmt.Fprintf(b, "false suspicions in %s's core runs (no broker killed): %d, over %d broker runs", name, s.Count, s.Brokers)
		if s.Unread > 0 {
			fmt.Fprintf(b, " (%d more not read)", s.Unread)
		}
		b.WriteString("\n")
	}
	prefix := ""
	if len(r.OtherTransports) > 0 {
		prefix = name + " "
	}
	r.writeRunErrors(b, prefix, &d)
}

// writeRunErrors names f's failed and incomplete runs (prefix: whose).
func (r *Report) writeRunErrors(b *strings.Builder, prefix string, f *Figures) {
	if f == nil {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(f.Errors)) {
		fmt.Fprintf(b, "failed run: %s%s: %s\n", prefix, k, f.Errors[k])
	}
	for _, k := range f.incomplete() {
		if _, failed := f.Errors[k]; !failed {
			fmt.Fprintf(b, "incomplete run (timed out; its figure counts what arrived): %s%s\n", prefix, k)
		}
	}
}

// num formats with thousands separators (no decimals above 100).
func num(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
