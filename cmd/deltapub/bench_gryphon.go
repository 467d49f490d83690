package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/deltapub/deltapub/internal/bench"
)

const benchGryphonAbout = `Measures the figures of the Gryphon paper (Bhola, Zhao, Auerbach, DSN 2003)
for deltapub's durable subscriptions (docs/durable.md), with 'deltapub broker'
processes of this executable on 127.0.0.1 (default preset, data directories,
the PHB retaining its log for 1 h) and 250-byte payloads; every run on fresh
brokers:
  1. delivery rate of one SHB: B1 (PHB, durability fsync) – B2 (SHB);
     --subscribers durable subscribers at B2, each matching every
     publication; --publishers at B1 as fast as acknowledgements allow (and
     an end-to-end window: publishers wait while a connected, caught-up
     subscriber is 4,096 publications behind) for --duration; deliveries/s
     summed over the subscribers. Again with every subscriber away
     --away-for every --away-every (first departures spread over the
     period), resuming at B2 with its checkpoint token: the rate as a
     fraction of the first (the paper: 88%).
  2. catch-up after an SHB outage: one publisher at --outage-rate; B2 killed
     (SIGKILL) and restarted with its data directory after --outage; the
     subscribers resume there with their tokens: time from the reconnect
     until each is live (receives a publication published after it),
     median and max, and the publications caught up.
  3. latency over --hops hops (--hops+1 brokers in a chain): one publisher
     at one end, one durable subscriber at the other, --latency-count
     publications at --latency-rate, publish → delivery p50/p99 with
     durability fsync and none (the paper: 50 ms over 5 hops, 44 ms of it
     logging).
With --pfs, measures only the paper's 4th figure, without brokers: the SHB's
persistent filtering log against per-subscriber queues, both on pebble in
--pfs-dir, with the same events: from --pfs-sources sources, each matching
n (--pfs-matching) of --pfs-subscribers durable subscriptions, --pfs-batch
events per commit, each store written for --pfs-cell in turn, --pfs-rounds
times (the table has the medians and the spread of the rounds' ratios),
with fsync then without. The filtering log writes one record per event (its seq and, per
matching subscription, its key and back-pointer: 8 + 16·n bytes), the
queues a copy of the 418-byte event per matching subscription. It prints
events/s of both and their ratio (the paper: over 5×).
Every run checks that every subscriber got every publication exactly once
in per-publisher order; a loss or duplicate exits 1 naming the run and the
subscribers. Progress goes to stderr, the table to stdout.
`

func benchGryphonCmd(fs *flag.FlagSet) func([]string) int {
	o := bench.DefaultGryphonOptions()
	fs.IntVar(&o.Subscribers, "subscribers", o.Subscribers, "durable subscribers on the SHB (figures 1 and 2)")
	fs.IntVar(&o.Publishers, "publishers", o.Publishers, "publishers on the PHB (figure 1)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "publishing time of each rate run (figure 1)")
	fs.DurationVar(&o.AwayEvery, "away-every", o.AwayEvery, "each subscriber disconnects once per this `period` (figure 1)")
	fs.DurationVar(&o.AwayFor, "away-for", o.AwayFor, "and stays away this `long` (figure 1)")
	fs.IntVar(&o.OutageRate, "outage-rate", o.OutageRate, "publications per second (figure 2)")
	fs.DurationVar(&o.Outage, "outage", o.Outage, "how long the SHB stays down (figure 2; beyond the preset's gone_after of 60 s it is declared gone)")
	fs.IntVar(&o.Hops, "hops", o.Hops, "hops between publisher and subscriber (figure 3)")
	fs.IntVar(&o.LatencyRate, "latency-rate", o.LatencyRate, "publications per second (figure 3)")
	fs.IntVar(&o.LatencyCount, "latency-count", o.LatencyCount, "publications of each durability (figure 3)")
	fs.StringVar(&o.LogDir, "logs", "", "keep the brokers' logs in this `directory`, one directory per run")
	quick := fs.Bool("quick", false, "tiny sizes, every figure in seconds (a smoke run), in place of the size flags")
	jsonOut := fs.Bool("json", false, "print one JSON object")
	pfs := fs.Bool("pfs", false, "measure only figure 4, the filtering log against per-subscriber queues (no brokers)")
	po := bench.DefaultGryphonPFSOptions()
	fs.IntVar(&po.Subscribers, "pfs-subscribers", po.Subscribers, "durable subscriptions (figure 4)")
	matching := fs.String("pfs-matching", "1,4,20", "`list` of n, the subscriptions each event matches (figure 4)")
	fs.IntVar(&po.Sources, "pfs-sources", po.Sources, "sources the events come from (figure 4)")
	fs.IntVar(&po.Batch, "pfs-batch", po.Batch, "events per commit (figure 4)")
	fs.DurationVar(&po.Cell, "pfs-cell", po.Cell, "how long each store is written in each round (figure 4)")
	fs.IntVar(&po.Rounds, "pfs-rounds", po.Rounds, "rounds per row, the stores in turn; the table has the medians (figure 4)")
	fs.StringVar(&po.Dir, "pfs-dir", "", "`directory` for the stores (figure 4; default: the system's temporary directory)")
	return func([]string) int {
		if *pfs {
			if *quick {
				q := bench.QuickGryphonPFSOptions()
				po.Cell, po.Rounds = q.Cell, q.Rounds
			}
			return runGryphonPFS(po, *matching, *jsonOut)
		}
		if *quick {
			logDir := o.LogDir
			o = bench.QuickGryphonOptions()
			o.LogDir = logDir
		}
		return runBrokerBench("gryphon", &o.Binary, &o.Progress, *jsonOut, func() error { return o.Validate() }, func() (*bench.GryphonReport, error) { return bench.Gryphon(o) })
	}
}

// runGryphonPFS runs figure 4 alone: exit 2 for bad options, 1 for a
// failed run.
func runGryphonPFS(o bench.GryphonPFSOptions, matching string, asJSON bool) int {
	o.Matching = nil
	for f := range strings.SplitSeq(matching, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintf(os.Stderr, "deltapub bench gryphon --pfs: --pfs-matching %q: %v\n", matching, err)
			return 2
		}
		o.Matching = append(o.Matching, n)
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "deltapub bench gryphon --pfs:", err)
		return 2
	}
	if !asJSON {
		o.Progress = func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	}
	rep, err := bench.GryphonPFS(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deltapub bench gryphon --pfs:", err)
		return 1
	}
	if asJSON {
		printJSON(rep)
	} else {
		rep.WriteText(os.Stdout)
	}
	return 0
}
