package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/deltapub/deltapub/internal/benchcompare"
)

func init() {
	registerBench("compare", "deltapub side by side with NATS on loopback (installs nats-server if missing)", benchCompare)
}

const benchCompareUsage = `Usage: deltapub bench compare [--messages N] [--json FILE] [flags]

Measures deltapub and NATS in one run on loopback with 250-byte payloads
and prints one table with the ratio deltapub/NATS per figure:
  single      1 publisher → 1 subscriber, one broker vs one nats-server
  two servers publisher on B1, subscriber on B2 (δ = 1) vs a 3-server NATS
              cluster, publisher on A, subscriber on C; also deltapub's
              3-broker chain alone
  fan-out     1 → 100 subscribers on the far broker/server, deliveries/s
  latency     p50/p99/p99.9 end to end at 10,000 msgs/s, two-server path
  filtered    10,000 stock-workload subscriptions: deltapub filters in the
              broker; NATS subscribes to stock.<symbol> and filters the
              price in the client; deliveries/s and bytes to subscribers
Both systems are driven by the same load generator (deltapub's client
library, NATS's nats.go); a message counts when the subscriber
application sees it. deltapub brokers run as 'deltapub broker' processes
of this executable; every server is killed when its run ends.

nats-server v2.15.2 is taken from --nats-dir, or built there once with
'go install' through the Go module proxy (needs the go tool; minutes).
Progress goes to stderr, the table to stdout.

Flags:
`

func benchCompare(args []string) int {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, benchCompareUsage); fs.PrintDefaults() }
	var (
		messages   = fs.Int("messages", 1_000_000, "messages of the 1→1, two-server and chain runs; the other runs scale from it")
		fanoutSubs = fs.Int("fanout-subs", 100, "subscribers of the fan-out run")
		fanoutMsgs = fs.Int("fanout-messages", 0, "messages of the fan-out run (0: messages/20)")
		latRate    = fs.Int("latency-rate", 10_000, "publications/s of the latency run")
		latMsgs    = fs.Int("latency-messages", 0, "messages of the latency run (0: 5 s worth, at most --messages)")
		filterSubs = fs.Int("filter-subs", 10_000, "subscriptions of the filtering run")
		filterPubs = fs.Int("filter-pubs", 0, "publications of the filtering run (0: messages/10)")
		seed       = fs.Uint64("seed", 1, "seed of the stock workload")
		timeout    = fs.Duration("timeout", 180*time.Second, "bound on each run")
		repeat     = fs.Int("repeat", 1, "repetitions of each run (systems interleaved); the median is reported")
		jsonFile   = fs.String("json", "", "also write the report as JSON to `FILE`")
		natsDir    = fs.String("nats-dir", "", "directory of the nats-server binary (default: $XDG_CACHE_HOME/deltapub/nats)")
		noNATS     = fs.Bool("no-nats", false, "measure deltapub only")
		profDir    = fs.String("profile-dir", "", "write CPU profiles of the deltapub brokers during each run to `DIR`")
		profSecs   = fs.Int("profile-seconds", 5, "length of each profile")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "deltapub bench compare: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	// 0 means "default" only where the help says so; the package reads 0
	// as its default everywhere, so refuse the others here.
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{{"messages", *messages, 1}, {"fanout-subs", *fanoutSubs, 1}, {"latency-rate", *latRate, 1},
		{"filter-subs", *filterSubs, 1}, {"repeat", *repeat, 1}, {"profile-seconds", *profSecs, 1},
		{"fanout-messages", *fanoutMsgs, 0}, {"latency-messages", *latMsgs, 0}, {"filter-pubs", *filterPubs, 0}} {
		if f.v < f.min {
			fmt.Fprintf(os.Stderr, "deltapub bench compare: --%s %d: must be at least %d\n", f.name, f.v, f.min)
			return 2
		}
	}
	if *timeout <= 0 {
		fmt.Fprintf(os.Stderr, "deltapub bench compare: --timeout %v: must be positive\n", *timeout)
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deltapub bench compare: cannot find this executable to start brokers:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg := benchcompare.Config{
		Messages: *messages, FanoutSubs: *fanoutSubs, FanoutMessages: *fanoutMsgs,
		LatencyRate: *latRate, LatencyMessages: *latMsgs, FilterSubs: *filterSubs, FilterPubs: *filterPubs,
		FilterConns: min(100, max(*filterSubs, 1)),
		Seed:        *seed, Timeout: *timeout, Repeat: *repeat, Launcher: benchcompare.ProcessLauncher(exe),
		ProfileDir: *profDir, ProfileSeconds: *profSecs, Progress: os.Stderr,
	}
	// A bad flag fails here, before a NATS install that takes minutes.
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "deltapub bench compare:", err)
		return 2
	}
	if !*noNATS {
		dir := *natsDir
		if dir == "" {
			if dir, err = benchcompare.NATSCacheDir(); err != nil {
				fmt.Fprintln(os.Stderr, "deltapub bench compare:", err)
				return 1
			}
		}
		if cfg.NATSServer, err = benchcompare.EnsureNATS(ctx, dir, os.Stderr); err != nil {
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
		f, ferr := os.Create(*jsonFile)
		if ferr == nil {
			ferr = rep.WriteJSON(f)
			if cerr := f.Close(); ferr == nil {
				ferr = cerr
			}
		}
		if ferr != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench compare: --json:", ferr)
			return 1
		}
	}
	if err != nil {
		return 1
	}
	// A run that failed (its figures are zero) fails the command.
	if len(rep.Deltapub.Errors) > 0 || (rep.NATS != nil && len(rep.NATS.Errors) > 0) {
		return 1
	}
	return 0
}
