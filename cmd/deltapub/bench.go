package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/deltapub/deltapub/internal/bench"
	"github.com/deltapub/deltapub/internal/benchcompare"
)

const benchMatchAbout = `Builds the matching index over --subs subscriptions of the --workload, then
times --events publications through the index and a sample of them through
brute force (every filter checked in turn) in the same run; reports median
and p99 µs per publication, matches per publication, index heap bytes per
subscription, the speed-up of the medians, and median insert/delete µs
(--ops of each). Workloads are defined in matching/workload. Exits 1 if the
index and brute force disagree.
`

func benchMatchCmd(fs *flag.FlagSet) func([]string) int {
	var o bench.MatchOptions
	fs.IntVar(&o.Subs, "subs", 100000, "number of subscriptions (1..10000000)")
	fs.StringVar(&o.Workload, "workload", "stock", "workload: stock or ranges")
	fs.IntVar(&o.Events, "events", 2000, "publications timed through the index (1..1000000)")
	fs.IntVar(&o.BruteforceEvents, "bruteforce-events", 0, "publications timed through brute force (default: all events up to 20,000,000 filter checks)")
	fs.IntVar(&o.Ops, "ops", 10000, "inserts and deletes timed (1..1000000)")
	fs.Uint64Var(&o.Seed, "seed", 1, "workload seed")
	fs.BoolVar(&o.PubSkew, "pub-skew", false, "stock: draw publication symbols from the subscriptions' Zipf skew instead of uniformly")
	asJSON := fs.Bool("json", false, "print one JSON object")
	return func([]string) int {
		if err := o.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench match:", err)
			return 2
		}
		rep, err := bench.Match(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench match:", err)
			return 1
		}
		if *asJSON {
			printJSON(rep)
		} else {
			rep.WriteText(os.Stdout)
		}
		if !rep.Agree {
			return 1
		}
		return 0
	}
}

const benchOverlayAbout = `Starts three brokers as separate processes on 127.0.0.1 (a chain B1–B2–B3,
δ = 2, default preset), a publisher at B1 and a subscriber at B3 (in this
process), and measures with 250-byte publications:
  throughput   --count publications published as fast as acknowledgements
               allow, first publish to last delivery;
  latency      p50/p99 publisher-to-subscriber at --latency-rate per second
               for --latency-duration;
  memory       RSS of each broker at rest (joined, subscription in place);
  baseline     a bare quic-go relay chain of the same shape (publisher → 3
               relays that decode and re-encode → subscriber, batched writes,
               no protocol: internal/quic/baseline), measured in the same run
               after the brokers have stopped (unless --no-baseline);
               ratio = throughput / baseline.
With --json, prints one JSON object.
`

func benchOverlayCmd(fs *flag.FlagSet) func([]string) int {
	o := bench.OverlayOptions{Warn: os.Stderr}
	jsonOut := fs.Bool("json", false, "print one JSON object")
	fs.IntVar(&o.Count, "count", 200_000, "publications in the throughput run (and in the baseline)")
	fs.Float64Var(&o.LatencyRate, "latency-rate", 1000, "publications per second in the latency run")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", 5*time.Second, "length of the latency run")
	noBaseline := fs.Bool("no-baseline", false, "skip the bare QUIC baseline")
	fs.StringVar(&o.ProfileDir, "cpuprofile", "", "write a CPU profile of each broker during the throughput run to this `directory`")
	fs.StringVar(&o.LogDir, "logs", "", "keep the brokers' logs in this `directory`")
	return func([]string) int {
		o.Baseline = !*noBaseline
		return runBrokerBench("overlay", &o.Binary, &o.Progress, *jsonOut, func() error { return o.Validate() }, func() (*bench.OverlayReport, error) { return bench.Overlay(o) })
	}
}

// runBrokerBench drives a benchmark that starts broker processes of this
// executable: it sets binary, validates the options, runs, and prints the
// report as JSON or as text (progress lines on stderr with text). Exit
// codes: 2 for bad options, 1 for a failed run or a report whose
// Failure method (if it has one) returns an error.
func runBrokerBench[R interface{ WriteText(io.Writer) }](name string, binary *string, progress *func(string, ...any), asJSON bool, validate func() error, run func() (R, error)) int {
	var err error
	if *binary, err = os.Executable(); err != nil {
		fmt.Fprintf(os.Stderr, "deltapub bench %s: cannot find this executable to start brokers: %v\n", name, err)
		return 1
	}
	if err := validate(); err != nil {
		fmt.Fprintf(os.Stderr, "deltapub bench %s: %v\n", name, err)
		return 2
	}
	if !asJSON {
		*progress = func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	}
	rep, err := run()
	if err != nil {
		fmt.Fprintf(os.Stderr, "deltapub bench %s: %v\n", name, err)
		return 1
	}
	if asJSON {
		printJSON(rep)
	} else {
		rep.WriteText(os.Stdout)
	}
	// A run that completed may still have failed what it checks.
	if f, ok := any(rep).(interface{ Failure() error }); ok {
		if err := f.Failure(); err != nil {
			fmt.Fprintf(os.Stderr, "deltapub bench %s: %v\n", name, err)
			return 1
		}
	}
	return 0
}

const benchCompareAbout = `Measures deltapub and NATS in one run on loopback with 250-byte payloads
and prints one table with the ratio deltapub/NATS per figure:
  single      1 publisher → 1 subscriber, one broker vs one nats-server
  two servers publisher on B1, subscriber on B2 (δ = 1) vs a 3-server NATS
              cluster, publisher on A, subscriber on C; also deltapub's
              3-broker chain alone
  fan-out     1 → --fanout-subs subscribers on the far broker/server,
              deliveries/s
  latency     p50/p99/p99.9 end to end at --latency-rate, two-server path
  filtered    --filter-subs stock-workload subscriptions: deltapub filters in
              the broker; NATS subscribes to stock.<symbol> and filters the
              price in the client; deliveries/s and bytes to subscribers
Both systems are driven by the same load generator (deltapub's client
library, NATS's nats.go); a message counts when the subscriber
application sees it. deltapub brokers run as 'deltapub broker' processes
of this executable; every server is killed when its run ends. deltapub's
clients reach their brokers over --client-transport (broker links are QUIC
either way); with tcp,quic the core runs are made with both, interleaved,
and the table comes once per transport.

Then the reliable peers (unless --no-reliable): deltapub δ = 2 over
B1–B2–B3 with durability none, write and fsync against JetStream R1 and R3
(three servers), memory and file storage, file with the default sync and
with sync_interval: always: acknowledged publish → consume msgs/s and p50/p99
at --reliable-rate. And failover (unless --no-failover): --failover-rate
msgs/s for --failover-seconds, SIGKILL at --failover-kill-at of deltapub's
middle broker B2 (default and testbed presets), JetStream R3's stream
leader, and core NATS's subscriber server: the longest pause between
deliveries at the subscriber, losses and duplicates.

--json FILE writes the report as JSON; --readme FILE replaces the block
between the bench-compare markers of FILE with a Markdown table of the
ratios, goals and the machine line (only when every run completed).
Regenerating the published figures:
  deltapub bench compare --json docs/bench/compare-result.json --readme README.md

nats-server v2.15.2 is taken from --nats-dir, or built there once with
'go install' through the Go module proxy (needs the go tool; minutes).
Progress goes to stderr, the table to stdout.
`

func benchCompareCmd(fs *flag.FlagSet) func([]string) int {
	var cfg benchcompare.Config
	fs.IntVar(&cfg.Messages, "messages", 1_000_000, "messages of the 1→1, two-server and chain runs; the other runs scale from it")
	fs.IntVar(&cfg.FanoutSubs, "fanout-subs", 100, "subscribers of the fan-out run")
	fs.IntVar(&cfg.FanoutMessages, "fanout-messages", 0, "messages of the fan-out run (0: messages/20)")
	fs.IntVar(&cfg.LatencyRate, "latency-rate", 10_000, "publications/s of the latency run")
	fs.IntVar(&cfg.LatencyMessages, "latency-messages", 0, "messages of the latency run (0: 5 s worth, at most --messages)")
	fs.IntVar(&cfg.FilterSubs, "filter-subs", 10_000, "subscriptions of the filtering run")
	fs.IntVar(&cfg.FilterPubs, "filter-pubs", 0, "publications of the filtering run (0: messages/10)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the stock workload")
	fs.DurationVar(&cfg.Timeout, "timeout", 180*time.Second, "bound on each run")
	fs.IntVar(&cfg.Repeat, "repeat", 1, "repetitions of each run (systems interleaved); the median is reported")
	jsonFile := fs.String("json", "", "also write the report as JSON to `FILE`")
	readme := fs.String("readme", "", "replace the bench-compare block of this Markdown `FILE` with the ratios and the machine line")
	natsDir := fs.String("nats-dir", "", "directory of the nats-server binary (default: $XDG_CACHE_HOME/deltapub/nats)")
	noNATS := fs.Bool("no-nats", false, "measure deltapub only")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "write CPU profiles of the deltapub brokers during each run to `DIR`")
	fs.IntVar(&cfg.ProfileSeconds, "profile-seconds", 5, "length of each profile")
	fs.IntVar(&cfg.Reliable.Messages, "reliable-messages", 0, "messages of each acknowledged (reliable) throughput run (0: messages/10)")
	fs.IntVar(&cfg.Reliable.Rate, "reliable-rate", 1000, "publications/s of the reliable latency runs")
	fs.IntVar(&cfg.Reliable.FailoverRate, "failover-rate", 10_000, "publications/s of the failover runs")
	fs.IntVar(&cfg.Reliable.FailoverSeconds, "failover-seconds", 15, "publishing time of each failover run")
	fs.IntVar(&cfg.Reliable.FailoverKillAt, "failover-kill-at", 4, "second of the failover run at which the server is killed")
	fs.BoolVar(&cfg.Reliable.Skip, "no-reliable", false, "skip the reliable (acknowledged, JetStream) runs")
	fs.BoolVar(&cfg.Reliable.SkipFailover, "no-failover", false, "skip the failover runs")
	fs.BoolVar(&cfg.SkipCore, "no-core", false, "skip the core runs (single to filtered): reliable and failover runs only")
	transports := fs.String("client-transport", "tcp", "how deltapub's clients reach their brokers: tcp or quic, or both as tcp,quic (the core runs again with the second, interleaved)")
	return func([]string) int {
		cfg.ClientTransports = strings.Split(*transports, ",")
		// The package reads 0 as its default everywhere; on the command
		// line 0 means the default only where the help says so.
		for _, f := range []struct {
			name   string
			v, min int
		}{{"messages", cfg.Messages, 1}, {"fanout-subs", cfg.FanoutSubs, 1}, {"latency-rate", cfg.LatencyRate, 1},
			{"filter-subs", cfg.FilterSubs, 1}, {"repeat", cfg.Repeat, 1}, {"profile-seconds", cfg.ProfileSeconds, 1},
			{"fanout-messages", cfg.FanoutMessages, 0}, {"latency-messages", cfg.LatencyMessages, 0}, {"filter-pubs", cfg.FilterPubs, 0},
			{"reliable-messages", cfg.Reliable.Messages, 0}, {"reliable-rate", cfg.Reliable.Rate, 1}, {"failover-rate", cfg.Reliable.FailoverRate, 1},
			{"failover-seconds", cfg.Reliable.FailoverSeconds, 1}, {"failover-kill-at", cfg.Reliable.FailoverKillAt, 1}} {
			if f.v < f.min {
				fmt.Fprintf(os.Stderr, "deltapub bench compare: --%s %d: must be at least %d\n", f.name, f.v, f.min)
				return 2
			}
		}
		if cfg.Timeout <= 0 {
			fmt.Fprintf(os.Stderr, "deltapub bench compare: --timeout %v: must be positive\n", cfg.Timeout)
			return 2
		}
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench compare: cannot find this executable to start brokers:", err)
			return 1
		}
		cfg.FilterConns = min(100, max(cfg.FilterSubs, 1))
		cfg.Launcher, cfg.Progress = benchcompare.ProcessLauncher(exe), os.Stderr
		// A bad flag fails here, before a NATS install that takes minutes.
		if err := cfg.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench compare:", err)
			return 2
		}
		if *readme != "" {
			if err := benchcompare.CheckMarkdownBlock(*readme); err != nil {
				fmt.Fprintln(os.Stderr, "deltapub bench compare: --readme:", err)
				return 2
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if !*noNATS {
			if cfg.NATSServer, err = benchcompare.EnsureNATS(ctx, *natsDir, os.Stderr); err != nil {
				fmt.Fprintln(os.Stderr, "deltapub bench compare:", err)
				return 1
			}
		}
		rep, err := benchcompare.Run(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench compare:", err)
			if rep == nil {
				return 2
			}
		}
		if werr := rep.WriteTable(os.Stdout); werr != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench compare:", werr)
			return 1
		}
		if *jsonFile != "" {
			if werr := writeFile(*jsonFile, rep.WriteJSON); werr != nil {
				fmt.Fprintln(os.Stderr, "deltapub bench compare: --json:", werr)
				return 1
			}
		}
		switch {
		case *readme != "" && (err != nil || rep.Failed()):
			// The README's figures come from complete runs only.
			fmt.Fprintf(os.Stderr, "deltapub bench compare: --readme: %s left as it was: a run failed\n", *readme)
		case *readme != "":
			if werr := rep.WriteMarkdownBlock(*readme); werr != nil {
				fmt.Fprintln(os.Stderr, "deltapub bench compare: --readme:", werr)
				return 1
			}
		}
		if err != nil || rep.Failed() {
			return 1
		}
		return 0
	}
}

// printJSON prints v as one line of JSON.
func printJSON(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

const benchClientsAbout = `Runs one broker as a child process (this executable, 'deltapub broker'
with ws_listen) and --conns clients in this process, each subscribed to a
filter that every publication matches, over --transport ws (web clients,
source addresses spread over 127.0.0.0/8) or quic (the Go client library).
Measures:
  connect     connections per second, hello and subscription acknowledged
              (256 dials at a time);
  memory      broker RSS delta / --conns;
  fan-out     deliveries/s and p50/p99 publisher-to-client latency at
              --fanout-rate publications/s to all, for --fanout-duration;
  reconnect   every client dropped at once, then connected and subscribed
              again: the time until all are back.
The file limit is raised to its hard limit; a run that needs more stops at
once with the limit in the message. Progress goes to stderr.
`

func benchClientsCmd(fs *flag.FlagSet) func([]string) int {
	o := bench.ClientsOptions{}
	fs.IntVar(&o.Conns, "conns", 10_000, "concurrent subscribed client connections")
	fs.StringVar(&o.Transport, "transport", "ws", "ws or quic")
	fs.Float64Var(&o.FanoutRate, "fanout-rate", 1, "publications per second to all clients")
	fs.DurationVar(&o.Fanout, "fanout-duration", 10*time.Second, "length of the fan-out run")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "bound on the whole run")
	jsonFile := fs.String("json", "", "also write the report as JSON to this `file`")
	return func([]string) int {
		var err error
		if o.Binary, err = os.Executable(); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench clients: cannot find this executable to start the broker:", err)
			return 1
		}
		o.Progress = func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
		if err := o.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench clients:", err)
			return 2
		}
		rep, err := bench.Clients(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench clients:", err)
			return 1
		}
		rep.WriteText(os.Stdout)
		if *jsonFile != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			if err := os.WriteFile(*jsonFile, append(b, '\n'), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "deltapub bench clients:", err)
				return 1
			}
		}
		return 0
	}
}
