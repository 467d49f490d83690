package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/benchcompare"
	"github.com/deltapub/deltapub/internal/quic/baseline"
	"github.com/deltapub/deltapub/matching"
)

// OverlayOptions are the sizes of an Overlay run.
type OverlayOptions struct {
	Binary          string        // the deltapub executable that runs the brokers ('deltapub broker')
	Count           int           // publications in the throughput run and in the baseline (≥ 1,000)
	LatencyRate     float64       // publications per second in the latency run
	LatencyDuration time.Duration // length of the latency run
	Baseline        bool          // also measure the bare QUIC relay chain
	ProfileDir      string        // if set: a CPU profile of each broker during the throughput run
	LogDir          string        // if set: the brokers' logs are kept there
	// Progress, if set, is told what the run is doing (one line each);
	// Warn, if set, what failed without stopping the run (a profile).
	Progress func(format string, args ...any)
	Warn     io.Writer
}

// Validate checks the sizes.
func (o OverlayOptions) Validate() error {
	switch {
	case o.Binary == "":
		return errors.New("no deltapub binary to run the brokers")
	case o.Count < 1000:
		return fmt.Errorf("count %d below 1000", o.Count)
	case o.LatencyRate <= 0 || o.LatencyDuration <= 0:
		return fmt.Errorf("latency rate %v and duration %v must be positive", o.LatencyRate, o.LatencyDuration)
	}
	return nil
}

// OverlayReport is the outcome of an Overlay run.
type OverlayReport struct {
	Messages          int       `json:"messages"`
	ThroughputMsgsPS  float64   `json:"throughput_msgs_per_s"`
	BaselineMsgsPS    float64   `json:"baseline_msgs_per_s"`
	Ratio             float64   `json:"ratio"`
	LatencyRate       float64   `json:"latency_rate"`
	LatencySamples    int       `json:"latency_samples"`
	P50ms             float64   `json:"p50_ms"`
	P99ms             float64   `json:"p99_ms"`
	P999ms            float64   `json:"p999_ms"`
	BrokerRSSMBAtRest float64   `json:"broker_rss_mb_at_rest"`
	BrokersRSSMB      []float64 `json:"brokers_rss_mb_at_rest"`
	BrokersRSSMBAfter []float64 `json:"brokers_rss_mb_after_load"`
	PayloadBytes      int       `json:"payload_bytes"`
	FrameBytes        int       `json:"frame_bytes"`
	CPUProfiles       []string  `json:"cpu_profiles,omitempty"`
}

// WriteText writes the report for a reader.
func (rep *OverlayReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "3-broker chain, %d-byte frames (%d B payload)\n", rep.FrameBytes, rep.PayloadBytes)
	fmt.Fprintf(w, "  throughput   %10.0f msgs/s (%d publications B1 → B3)\n", rep.ThroughputMsgsPS, rep.Messages)
	if rep.BaselineMsgsPS > 0 {
		fmt.Fprintf(w, "  baseline     %10.0f msgs/s (bare QUIC relay chain, 3 relays)   ratio %.2f\n", rep.BaselineMsgsPS, rep.Ratio)
	}
	fmt.Fprintf(w, "  latency      p50 %.3f ms  p99 %.3f ms  p99.9 %.3f ms  (%d samples at %.0f/s)\n", rep.P50ms, rep.P99ms, rep.P999ms, rep.LatencySamples, rep.LatencyRate)
	fmt.Fprintf(w, "  broker RSS   %.1f MB at rest (each: %v), after load %v\n", rep.BrokerRSSMBAtRest, rep.BrokersRSSMB, rep.BrokersRSSMBAfter)
	for _, p := range rep.CPUProfiles {
		fmt.Fprintf(w, "  cpu profile  %s  (go tool pprof -top %s)\n", p, p)
	}
}

// benchBroker is one broker child process.
type benchBroker struct {
	id, addr, admin string
	args            []string // its flags beyond id and addresses: a restart reuses them
	cmd             *exec.Cmd
	done            chan struct{}
}

// newBenchBroker names broker id and picks its free loopback addresses.
func newBenchBroker(id string) (*benchBroker, error) {
	b := &benchBroker{id: id}
	var err error
	if b.addr, err = benchcompare.FreeUDP(); err != nil {
		return nil, err
	}
	if b.admin, err = benchcompare.FreeTCP(); err != nil {
		return nil, err
	}
	return b, nil
}

// start runs b as 'deltapub broker' of binary with args, its output in
// logPath, and waits until it has joined the overlay (/healthz);
// one that does not is killed. The kernel kills it should this process
// die first, so no broker outlives a bench.
func (b *benchBroker) start(binary, logPath string, args ...string) error {
	mode := os.O_TRUNC // a restart appends to its first run's log
	if b.cmd != nil {
		mode = os.O_APPEND
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|mode, 0o644)
	if err != nil {
		return err
	}
	b.args = args
	b.cmd = exec.Command(binary, append([]string{"broker", "--id", b.id, "--listen", b.addr, "--admin", b.admin}, args...)...)
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	b.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); logf.Close(); close(done) }(b.cmd, b.done)
	if err := benchcompare.WaitHTTP(context.Background(), "http://"+b.admin+"/healthz", 60*time.Second, b.done, nil); err != nil {
		b.kill()
		return fmt.Errorf("broker %s: %w (its log: %s)", b.id, err, logPath)
	}
	return nil
}

// kill stops b at once (SIGKILL: a crash) and waits for it.
func (b *benchBroker) kill() {
	_ = b.cmd.Process.Kill()
	<-b.done
}

// Overlay starts three brokers as separate processes on 127.0.0.1 (a chain
// B1–B2–B3, δ = 2, default preset), a publisher at B1 and a subscriber at
// B3 (in this process), and measures with 250-byte publications: the
// throughput of o.Count publications published as fast as
// acknowledgements allow (first publish to last delivery); the p50/p99
// latency at o.LatencyRate; each broker's RSS at rest and after the load;
// and, with o.Baseline, a bare quic-go relay chain of the same shape
// (internal/quic/baseline) after the brokers have stopped. Every broker is
// killed on the way out.
func Overlay(o OverlayOptions) (*OverlayReport, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	count, latRate, latDur, logDir, profileDir := o.Count, o.LatencyRate, o.LatencyDuration, o.LogDir, o.ProfileDir
	progress := o.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	tmp, err := os.MkdirTemp("", "deltapub-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if logDir == "" {
		logDir = tmp
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	secret := filepath.Join(tmp, "secret")
	if err := os.WriteFile(secret, []byte("bench overlay secret\n"), 0o600); err != nil {
		return nil, err
	}
	// Deep session buffers: the subscriber shares this process (and two
	// cores) with the publisher; the benchmark measures throughput, not the
	// slow-consumer policy, which would disconnect it after one scheduling
	// hiccup with the default 8,192 frames / 4 MiB.
	limits := filepath.Join(tmp, "limits.toml")
	if err := os.WriteFile(limits, []byte("[limits]\nsend_queue = 262144\nsend_queue_bytes = 134217728\n"), 0o600); err != nil {
		return nil, err
	}

	// Start the chain; every broker is killed on the way out.
	var brokers []*benchBroker
	defer func() { stopBrokers(brokers, 3*time.Second) }()
	for i := 1; i <= 3; i++ {
		b, err := newBenchBroker(fmt.Sprintf("B%d", i))
		if err != nil {
			return nil, err
		}
		// The default preset's timings (1 s failure timeout, 500 ms
		// link_block): a benchmark on a busy machine must not be cut short
		// by false suspicions; failure detection is not what it measures.
		args := []string{"--preset", "default", "--config", limits, "--delta", "2", "--secret-file", secret, "--log-level", "warn", "--log-format", "json"}
		if i > 1 {
			args = append(args, "--join", brokers[i-2].addr)
		}
		if err := b.start(o.Binary, filepath.Join(logDir, b.id+".log"), args...); err != nil {
			return nil, err
		}
		brokers = append(brokers, b)
	}
	progress("brokers up: %s, %s, %s", brokers[0].addr, brokers[1].addr, brokers[2].addr)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	subc, err := client.Connect(ctx, brokers[2].addr, client.Options{DeliveryBuffer: 1 << 16})
	if err != nil {
		return nil, err
	}
	defer subc.Close()
	filter, err := matching.ParseFilter("[class,eq,'STOCK']")
	if err != nil {
		return nil, err
	}
	// The subscriber side: deliveries arrive in publication order (one
	// publisher); the k-th delivery is the k-th publication. They are
	// counted in a SubscribeFunc handler (no channel hand-off per
	// delivery), as an application that wants speed would read them.
	warm := 5000
	latN := int(latRate * latDur.Seconds())
	total := warm + count + latN
	type mark struct{ at time.Time }
	delivered := make(chan mark, 16)
	latencies := make([]time.Duration, 0, latN)
	var subErr error
	var received, published atomic.Int64
	var subWG sync.WaitGroup
	var finish sync.Once
	end := func(err error) { // the subscriber's last word, exactly once
		finish.Do(func() {
			subErr = err
			close(delivered)
			subWG.Done()
		})
	}
	k := 0
	subWG.Add(1)
	sub, err := subc.SubscribeFunc(ctx, filter, func(d client.Delivery) {
		if k >= total {
			return
		}
		k++
		received.Add(1)
		if d.Gap != nil {
			end(fmt.Errorf("gap notice: %+v", *d.Gap))
			k = total
			return
		}
		switch {
		case k == warm || k == warm+count:
			delivered <- mark{d.ReceivedAt}
		case k > warm+count:
			latencies = append(latencies, d.ReceivedAt.Sub(d.PublishedAt))
		}
		if k == total {
			end(nil)
		}
	})
	if err != nil {
		return nil, err
	}
	go func() {
		for range sub.C { // closed when the subscription ends
		}
		end(fmt.Errorf("subscription ended after %d deliveries: %v", received.Load(), sub.Err()))
	}()
	if err := sub.WaitConfirmed(ctx); err != nil {
		return nil, err
	}
	pubc, err := client.Connect(ctx, brokers[0].addr, client.Options{MaxInFlight: 4096})
	if err != nil {
		return nil, err
	}
	defer pubc.Close()

	rep := &OverlayReport{Messages: count, LatencyRate: latRate}
	for _, b := range brokers {
		rep.BrokersRSSMB = append(rep.BrokersRSSMB, rssMB(b.cmd.Process.Pid))
	}
	rep.BrokerRSSMBAtRest = mean(rep.BrokersRSSMB)

	proto := baseline.Publication(250)
	pub := matching.Publication{Attrs: proto.Attrs, Payload: proto.Payload}
	rep.PayloadBytes = len(pub.Payload)
	rep.FrameBytes = 250

	// A run that stops making progress fails with what each broker holds,
	// instead of waiting for the overall deadline (or the client's own
	// 30 s backpressure limit).
	const stallLimit = 20 * time.Second
	var stallMu sync.Mutex
	var stallDiag string
	ctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		last, lastChange := received.Load(), time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if n := received.Load(); n != last || n == int64(total) {
				last, lastChange = n, time.Now()
			} else if time.Since(lastChange) > stallLimit {
				diag := fmt.Sprintf("no delivery for %v after %d (published %d); brokers: %s",
					stallLimit, n, published.Load(), brokerSummary(brokers))
				stallMu.Lock()
				stallDiag = diag
				stallMu.Unlock()
				stopWatch()
				return
			}
		}
	}()
	stalled := func(err error) error {
		stallMu.Lock()
		defer stallMu.Unlock()
		if stallDiag != "" {
			return fmt.Errorf("%w: %s", err, stallDiag)
		}
		return err
	}
	waitMark := func(what string) (time.Time, error) {
		select {
		case m, ok := <-delivered:
			if !ok {
				return time.Time{}, stalled(fmt.Errorf("%s: %v", what, subErr))
			}
			return m.at, nil
		case <-ctx.Done():
			return time.Time{}, stalled(fmt.Errorf("%s: %w", what, ctx.Err()))
		}
	}

	// Acknowledgements are waited for in order by one goroutine, so the
	// publishing loop only waits when MaxInFlight publications are
	// unacknowledged.
	acks := make(chan (<-chan error), 1<<14)
	ackErr := waitAcks(acks)
	publish := func(n int, rate float64) error {
		start := time.Now()
		for i := 0; i < n; i++ {
			if rate > 0 {
				if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
					time.Sleep(d)
				}
			}
			ch, err := pubc.PublishAsync(ctx, pub)
			if err != nil {
				return stalled(err)
			}
			acks <- ch
			published.Add(1)
		}
		return nil
	}

	progress("warm-up: %d publications", warm)
	if err := publish(warm, 0); err != nil {
		return nil, err
	}
	if _, err := waitMark("warm-up"); err != nil {
		return nil, err
	}

	progress("throughput: %d publications as fast as acknowledgements allow", count)
	var profWG sync.WaitGroup
	if profileDir != "" {
		if err := os.MkdirAll(profileDir, 0o755); err != nil {
			return nil, err
		}
		secs := max(1, min(10, count/40_000))
		for _, b := range brokers {
			path := filepath.Join(profileDir, b.id+".pprof")
			rep.CPUProfiles = append(rep.CPUProfiles, path)
			profWG.Add(1)
			go func() {
				defer profWG.Done()
				if err := benchcompare.FetchProfile(ctx, "http://"+b.admin, secs, path); err != nil {
					if o.Warn != nil {
						fmt.Fprintln(o.Warn, "profile:", err)
					}
				}
			}()
		}
	}
	t0 := time.Now()
	if err := publish(count, 0); err != nil {
		return nil, err
	}
	t1, err := waitMark("throughput")
	if err != nil {
		return nil, err
	}
	rep.ThroughputMsgsPS = float64(count) / t1.Sub(t0).Seconds()
	profWG.Wait()

	progress("latency: %d publications at %.0f/s", latN, latRate)
	if err := publish(latN, latRate); err != nil {
		return nil, err
	}
	close(acks)
	subWG.Wait()
	if subErr != nil {
		return nil, subErr
	}
	if err := <-ackErr; err != nil {
		return nil, fmt.Errorf("publication not acknowledged: %w", err)
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		i := min(len(latencies)-1, int(p*float64(len(latencies))))
		return float64(latencies[i]) / float64(time.Millisecond)
	}
	rep.LatencySamples = len(latencies)
	rep.P50ms, rep.P99ms, rep.P999ms = pct(0.50), pct(0.99), pct(0.999)
	for _, b := range brokers {
		rep.BrokersRSSMBAfter = append(rep.BrokersRSSMBAfter, rssMB(b.cmd.Process.Pid))
	}

	// The baseline runs alone: stop the brokers and clients first.
	pubc.Close()
	subc.Close()
	stopBrokers(brokers, 5*time.Second)
	brokers = nil
	if o.Baseline {
		progress("baseline: bare QUIC relay chain, %d messages", count)
		res, err := baseline.Run(ctx, baseline.Options{Messages: count, Relays: 3, Size: 250})
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		rep.BaselineMsgsPS = res.MsgsPerSec
		if res.MsgsPerSec > 0 {
			rep.Ratio = rep.ThroughputMsgsPS / res.MsgsPerSec
		}
	}
	return rep, nil
}

// stopBrokers sends every broker SIGTERM (a graceful leave) and kills
// those still running after patience.
func stopBrokers(brokers []*benchBroker, patience time.Duration) {
	for _, b := range brokers {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, b := range brokers {
		select {
		case <-b.done:
		case <-time.After(patience):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	}
}

// brokerSummary says, per broker, its queue, links and counters (from
// /state), for a stalled run's error.
func brokerSummary(brokers []*benchBroker) string {
	var parts []string
	c := http.Client{Timeout: 2 * time.Second}
	for _, b := range brokers {
		resp, err := c.Get("http://" + b.admin + "/state")
		if err != nil {
			parts = append(parts, b.id+": "+err.Error())
			continue
		}
		var st struct {
			QueueLen  int
			Suspected []string
			Links     []struct {
				Peer      string
				Up        bool
				Suspected bool
			}
			Counters map[string]any
			Runtime  struct {
				Connected  []string `json:"connected"`
				InputQueue int      `json:"input_queue"`
			} `json:"runtime"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			parts = append(parts, b.id+": "+err.Error())
			continue
		}
		cnt := fmt.Sprintf("published %v received %v sent %v delivered %v retransmitted %v backpressure %v",
			st.Counters["Published"], st.Counters["PubsIn"], st.Counters["PubsOut"], st.Counters["Delivered"], st.Counters["Retransmitted"], st.Counters["Backpressure"])
		parts = append(parts, fmt.Sprintf("%s: queue %d, links %+v, connected %v, suspected %v, input %d, %s",
			b.id, st.QueueLen, st.Links, st.Runtime.Connected, st.Suspected, st.Runtime.InputQueue, cnt))
	}
	return strings.Join(parts, "; ")
}

// rssMB reads a process's resident set size from /proc (0 elsewhere),
// rounded down to 0.1 MB.
func rssMB(pid int) float64 { return float64(int(benchcompare.RSSMB(pid)*10)) / 10 }

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return float64(int(s/float64(len(xs))*10)) / 10
}
