package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/deltapub/deltapub/internal/benchcompare"
)

const benchScaleAbout = `Measures how deltapub's cost grows, with 'deltapub broker' processes of this
executable on loopback (default preset, δ = --delta) and 250-byte payloads:
  chain          for each --chains length n: B1–…–Bn, publisher at B1,
                 subscriber at Bn; --messages as fast as the end-to-end window
                 allows (msgs/s), then p50/p99 at --rate for 5 s;
  subscriptions  for each --subs count N: B1–B2 with N stock-workload
                 subscriptions (matching/workload, --seed) at B2 over N/1000
                 connections, so B1 routes N; RSS of both brokers after
                 subscribing, then the same throughput and latency B1→B2 (the
                 traffic matches none of the stock filters: the cost of a
                 table of N entries to every publication crossing it).
Writes scale.json and the plots scale-chain, scale-subs and scale-memory (PNG
and SVG) into --out. Every point is bounded by --timeout.
`

func benchScaleCmd(fs *flag.FlagSet) func([]string) int {
	var cfg benchcompare.ScaleConfig
	chains := fs.String("chains", "1,2,3,4,5,6,7,8", "comma-separated chain lengths")
	subs := fs.String("subs", "100,1000,10000,100000,1000000", "comma-separated routed subscription counts")
	fs.IntVar(&cfg.Delta, "delta", 2, "δ of every broker")
	fs.IntVar(&cfg.Messages, "messages", 200_000, "messages of each throughput run")
	fs.IntVar(&cfg.Rate, "rate", 1000, "publications/s of the latency runs")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the stock workload")
	fs.DurationVar(&cfg.Timeout, "timeout", 300*time.Second, "bound on each point")
	out := fs.String("out", "", "write scale.json and the plots into this `DIR`")
	return func([]string) int {
		var err error
		if cfg.Chains, err = intList(*chains); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench scale: --chains:", err)
			return 2
		}
		if cfg.Subs, err = intList(*subs); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench scale: --subs:", err)
			return 2
		}
		if cfg.Messages < 1 || cfg.Rate < 1 || cfg.Delta < 1 || cfg.Timeout <= 0 {
			fmt.Fprintln(os.Stderr, "deltapub bench scale: --messages, --rate, --delta and --timeout must be positive")
			return 2
		}
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench scale: cannot find this executable to start brokers:", err)
			return 1
		}
		cfg.Launcher, cfg.Progress = benchcompare.ProcessLauncher(exe), os.Stderr
		if err := cfg.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench scale:", err)
			return 2
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		rep, err := benchcompare.Scale(ctx, cfg)
		if rep != nil {
			rep.WriteText(os.Stdout)
			if *out != "" {
				files, werr := rep.WriteFiles(*out)
				if werr != nil {
					fmt.Fprintln(os.Stderr, "deltapub bench scale: --out:", werr)
					return 1
				}
				fmt.Fprintln(os.Stderr, "written:", strings.Join(files, " "))
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub bench scale:", err)
			return 1
		}
		return 0
	}
}

// intList parses "1,2,3" (empty: none).
func intList(s string) ([]int, error) {
	out := []int{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
