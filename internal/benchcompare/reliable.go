package benchcompare

import (
	"context"
	"fmt"
	"io"
	"time"
)

// ReliableConfig sizes the reliable-delivery runs: deltapub (δ = 2,
// B1–B2–B3, each durability) against JetStream R1 and R3. Zero values
// take the defaults noted.
type ReliableConfig struct {
	Skip         bool
	Messages     int // acknowledged throughput runs (default Messages/10)
	Rate         int // msgs/s of their latency runs (default 1,000)
	LatencyMsgs  int // default 5 s worth of Rate
	Durabilities []string
	// Failover: Rate msgs/s for Seconds, the server killed at KillAt s.
	SkipFailover    bool
	FailoverRate    int // default 10,000
	FailoverSeconds int // default 15
	FailoverKillAt  int // default 4
}

func (c *ReliableConfig) fill(messages int) error {
	if c.Messages == 0 {
		c.Messages = max(1, messages/10)
	}
	if c.Rate == 0 {
		c.Rate = 1000
	}
	if c.LatencyMsgs == 0 {
		c.LatencyMsgs = 5 * c.Rate
	}
	if len(c.Durabilities) == 0 {
		c.Durabilities = []string{"none", "write", "fsync"}
	}
	if c.FailoverRate == 0 {
		c.FailoverRate = 10_000
	}
	if c.FailoverSeconds == 0 {
		c.FailoverSeconds = 15
	}
	if c.FailoverKillAt == 0 {
		c.FailoverKillAt = 4
	}
	switch {
	case c.Messages < 1 || c.Messages > 10_000_000:
		return fmt.Errorf("benchcompare: reliable messages %d out of range [1, 10000000]", c.Messages)
	case c.Rate < 1 || c.Rate > 100_000:
		return fmt.Errorf("benchcompare: reliable rate %d out of range [1, 100000]", c.Rate)
	case c.LatencyMsgs < 10 || c.LatencyMsgs > 1_000_000:
		return fmt.Errorf("benchcompare: reliable latency messages %d out of range [10, 1000000]", c.LatencyMsgs)
	case c.FailoverRate < 10 || c.FailoverRate > 100_000:
		return fmt.Errorf("benchcompare: failover rate %d out of range [10, 100000]", c.FailoverRate)
	case c.FailoverSeconds < 2 || c.FailoverSeconds > 120:
		return fmt.Errorf("benchcompare: failover seconds %d out of range [2, 120]", c.FailoverSeconds)
	case c.FailoverKillAt < 1 || c.FailoverKillAt >= c.FailoverSeconds:
		return fmt.Errorf("benchcompare: failover kill at %d s out of range [1, %d)", c.FailoverKillAt, c.FailoverSeconds)
	}
	for _, d := range c.Durabilities {
		if d != "fsync" && d != "write" && d != "none" {
			return fmt.Errorf("benchcompare: durability %q: want fsync, write or none", d)
		}
	}
	return nil
}

// ReliableRun is one reliable system's figures: acknowledged publishing
// from one server to a subscriber on another (deltapub B1→B3; JetStream
// R3 publishes on N1 and consumes on N3, R1 on its one server), as fast
// as acknowledgements and the end-to-end window allow, then end-to-end
// latency at a fixed rate.
type ReliableRun struct {
	Key        string     `json:"key"`
	Label      string     `json:"label"`
	Throughput Throughput `json:"throughput"`
	Latency    Latency    `json:"latency"`
	Error      string     `json:"error,omitempty"`
}

// reliableSystems lists the systems of the reliable runs, deltapub's
// durabilities first.
func reliableSystems(cfg *Config) (keys []string, systems []system) {
	for _, d := range cfg.Reliable.Durabilities {
		keys = append(keys, "deltapub_"+d)
		systems = append(systems, deltapubSystem{launch: cfg.Launcher, delta: 2, durability: d, checkAcks: true,
			label: "deltapub δ=2, " + d, transport: cfg.ClientTransports[0]})
	}
	if cfg.NATSServer != "" {
		for _, v := range JSVariants {
			keys = append(keys, v.Key())
			systems = append(systems, jsSystem{bin: cfg.NATSServer, v: v})
		}
	}
	return keys, systems
}

// failoverSystems lists the systems of the failover runs by JSON key.
func failoverSystems(cfg *Config) (keys []string, systems []system) {
	keys = []string{"deltapub", "deltapub_testbed_preset"}
	systems = []system{
		deltapubSystem{launch: cfg.Launcher, delta: 2, preset: "default", label: "deltapub δ=2", checkAcks: true, transport: cfg.ClientTransports[0]},
		deltapubSystem{launch: cfg.Launcher, delta: 2, preset: "testbed", label: "deltapub δ=2, testbed preset", checkAcks: true, transport: cfg.ClientTransports[0]},
	}
	if cfg.NATSServer != "" {
		keys = append(keys, "jetstream_r3", "nats")
		systems = append(systems, jsSystem{bin: cfg.NATSServer, v: JSVariant{Replicas: 3, File: true}, retry: true},
			natsSystem{bin: cfg.NATSServer, failover: true})
	}
	return keys, systems
}

// runReliable runs the reliable and failover runs into rep.
func runReliable(ctx context.Context, cfg *Config, rep *Report, prof *profiler) error {
	rc := &cfg.Reliable
	type job struct {
		name string
		run  func(ctx context.Context) string
	}
	var jobs []job
	if !rc.Skip {
		keys, systems := reliableSystems(cfg)
		for i, sys := range systems {
			jobs = append(jobs, job{"reliable " + keys[i], func(ctx context.Context) string {
				r := ReliableRun{Key: keys[i], Label: sys.Name()}
				var errs []string
				var err error
				if r.Throughput, err = runThroughput(ctx, sys, 3, 0, 2, 1, rc.Messages, prof.with("reliable-"+keys[i])); err != nil {
					errs = append(errs, "throughput: "+err.Error())
				}
				if r.Latency, err = runLatencyOn(ctx, sys, 3, 0, 2, rc.Rate, rc.LatencyMsgs); err != nil {
					errs = append(errs, "latency: "+err.Error())
				}
				if len(errs) > 0 {
					r.Error = fmt.Sprint(errs)
				}
				rep.Reliable = append(rep.Reliable, r)
				t, l := r.Throughput, r.Latency
				msg := fmt.Sprintf("%.0f msgs/s acknowledged and delivered (%d/%d); p50 %.0f µs, p99 %.0f µs @ %d/s", t.Rate, t.Delivered, t.Expected, l.P50Us, l.P99Us, l.Rate)
				if r.Error != "" {
					msg += " FAILED: " + r.Error
				}
				return msg
			}})
		}
	}
	if !rc.SkipFailover {
		keys, systems := failoverSystems(cfg)
		for i, sys := range systems {
			jobs = append(jobs, job{"failover " + keys[i], func(ctx context.Context) string {
				f, err := runFailover(ctx, sys, rc.FailoverRate, rc.FailoverSeconds, rc.FailoverKillAt)
				if err != nil && f.Error == "" {
					f.Error = err.Error()
				}
				if rep.FailoverPauseMs == nil {
					rep.FailoverPauseMs, rep.FailoverLost, rep.FailoverDuplicates = map[string]float64{}, map[string]int64{}, map[string]int64{}
				}
				f.System = keys[i]
				rep.Failover = append(rep.Failover, f)
				if f.Error == "" || f.Sent > 0 {
					rep.FailoverPauseMs[keys[i]], rep.FailoverLost[keys[i]], rep.FailoverDuplicates[keys[i]] = f.PauseMs, f.Lost, f.Duplicates
				}
				msg := fmt.Sprintf("killed %s: pause %.0f ms (%.0f ms after the kill; %.0f ms before it), %d lost (%d of them unacknowledged), %d duplicates of %d sent",
					f.Killed, f.PauseMs, f.PauseAfterKillMs, f.PauseBeforeKillMs, f.Lost, f.GaveUp, f.Duplicates, f.Sent)
				if f.Error != "" {
					msg += " FAILED: " + f.Error
				}
				return msg
			}})
		}
	}
	for k, j := range jobs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("benchcompare: interrupted: %w", err)
		}
		// Failover runs last about FailoverSeconds plus a drain; the
		// per-run timeout bounds them like the others.
		rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		st := time.Now()
		msg := j.run(rctx)
		cancel()
		fmt.Fprintf(cfg.Progress, "[%d/%d] %-32s %s (%.0f s)\n", k+1, len(jobs), j.name, msg, time.Since(st).Seconds())
	}
	rep.JetStreamR3Ratio = ratio(rep.reliableRate("deltapub_none"), rep.reliableRate("jetstream_r3_file"))
	rep.JetStreamR3SyncRatio = ratio(rep.reliableRate("deltapub_fsync"), rep.reliableRate("jetstream_r3_file_sync"))
	return nil
}

func (r *Report) reliableRate(key string) float64 {
	for _, x := range r.Reliable {
		if x.Key == key && x.Error == "" {
			return x.Throughput.Rate
		}
	}
	return 0
}

// reliableFailed reports whether a reliable or failover run failed.
func (r *Report) reliableFailed() bool {
	for _, x := range r.Reliable {
		if x.Error != "" {
			return true
		}
	}
	for _, f := range r.Failover {
		if f.Error != "" {
			return true
		}
	}
	return false
}

// writeReliableTable writes the reliable and failover sections (nothing
// if neither ran).
func (r *Report) writeReliableTable(w io.Writer) {
	if len(r.Reliable) > 0 {
		fmt.Fprintf(w, "\n%-36s %12s %10s %10s  %s\n", "reliable: acknowledged, B1→B3 | N1→N3", "msgs/s", "p50 µs", "p99 µs", "(latency at a fixed rate)")
		for _, x := range r.Reliable {
			if x.Error != "" {
				fmt.Fprintf(w, "%-36s FAILED: %s\n", x.Label, x.Error)
				continue
			}
			fmt.Fprintf(w, "%-36s %12s %10s %10s  @ %d/s\n", x.Label, num(x.Throughput.Rate), num(x.Latency.P50Us), num(x.Latency.P99Us), x.Latency.Rate)
		}
		verdict := func(v, goal float64) string {
			if v >= goal {
				return "met"
			}
			return "MISSED"
		}
		if r.JetStreamR3Ratio > 0 {
			fmt.Fprintf(w, "deltapub none / JetStream R3 file default: %.2f  ≥ 4 %s\n", r.JetStreamR3Ratio, verdict(r.JetStreamR3Ratio, 4))
		}
		if r.JetStreamR3SyncRatio > 0 {
			fmt.Fprintf(w, "deltapub fsync / JetStream R3 file sync always: %.2f  ≥ 2 %s\n", r.JetStreamR3SyncRatio, verdict(r.JetStreamR3SyncRatio, 2))
		}
	}
	if len(r.Failover) > 0 {
		f0 := r.Failover[0]
		fmt.Fprintf(w, "\nfailover @ %d msgs/s, kill -9 at %d s of %d s   %10s %8s %8s %8s  %s\n", f0.Rate, f0.KillAtS, f0.Seconds, "pause ms", "lost", "unacked", "dups", "killed")
		for _, f := range r.Failover {
			if f.Error != "" && f.Sent == 0 {
				fmt.Fprintf(w, "%-44s FAILED: %s\n", f.System, f.Error)
				continue
			}
			fmt.Fprintf(w, "%-44s %10s %8d %8d %8d  %s\n", f.System, num(f.PauseMs), f.Lost, f.GaveUp, f.Duplicates, f.Killed)
			if f.Error != "" {
				fmt.Fprintf(w, "  %s: %s\n", f.System, f.Error)
			}
		}
		if dp, js := r.FailoverPauseMs["deltapub"], r.FailoverPauseMs["jetstream_r3"]; js > 0 {
			ok := dp <= js/5 && r.FailoverLost["deltapub"] == 0 && r.FailoverDuplicates["deltapub"] == 0
			v := "met"
			if !ok {
				v = "MISSED"
			}
			fmt.Fprintf(w, "deltapub pause / JetStream R3 pause: %.2f  ≤ 0.2 with 0 lost, 0 duplicates %s\n", ratio(dp, js), v)
		}
	}
}
