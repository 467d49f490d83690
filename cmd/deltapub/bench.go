package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
)

// benchCommand is one 'deltapub bench <name>' subcommand.
type benchCommand struct {
	summary string
	run     func(args []string) int
}

var benches = map[string]benchCommand{}

// registerBench adds a bench subcommand; each lives in its own file and
// registers itself from init.
func registerBench(name, summary string, run func(args []string) int) {
	if _, dup := benches[name]; dup {
		panic("deltapub: bench registered twice: " + name)
	}
	benches[name] = benchCommand{summary: summary, run: run}
}

func benchUsage() {
	var b strings.Builder
	b.WriteString("Usage: deltapub bench <benchmark> [flags]\n\nBenchmarks:\n")
	names := make([]string, 0, len(benches))
	for n := range benches {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, benches[n].summary)
	}
	b.WriteString("\nRun 'deltapub bench <benchmark> --help' for its flags.\n")
	fmt.Fprint(os.Stderr, b.String())
}

func init() {
	register(command{name: "bench", summary: "run a benchmark (bench match, ...)", run: func(args []string) int {
		if len(args) == 0 {
			benchUsage()
			return 2
		}
		switch args[0] {
		case "-h", "--help", "help":
			benchUsage()
			return 0
		}
		b, ok := benches[args[0]]
		if !ok {
			fmt.Fprintf(os.Stderr, "deltapub bench: unknown benchmark %q\n\n", args[0])
			benchUsage()
			return 2
		}
		return b.run(args[1:])
	}})
	registerBench("match", "matching index vs brute force on a workload", benchMatch)
}

type matchReport struct {
	Subs               int     `json:"subs"`
	Workload           string  `json:"workload"`
	PubSkew            bool    `json:"pub_skew,omitempty"`
	Seed               uint64  `json:"seed"`
	Events             int     `json:"events"`
	MedianUs           float64 `json:"median_us"`
	P99Us              float64 `json:"p99_us"`
	MatchesPerPub      float64 `json:"matches_per_pub"`
	HeapBytesPerSub    float64 `json:"heap_bytes_per_sub"`
	BruteforceEvents   int     `json:"bruteforce_events"`
	BruteforceMedianUs float64 `json:"bruteforce_median_us"`
	BruteforceP99Us    float64 `json:"bruteforce_p99_us"`
	Speedup            float64 `json:"speedup"`
	InsertMedianUs     float64 `json:"insert_median_us"`
	DeleteMedianUs     float64 `json:"delete_median_us"`
	BuildSeconds       float64 `json:"build_seconds"`
	Agree              bool    `json:"agree"`
}

func benchMatch(args []string) int {
	fs := flag.NewFlagSet("bench match", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: deltapub bench match [--subs N] [--workload stock|ranges] [--events M] [--json]

Builds the matching index over N subscriptions of the workload, then times
M publications through the index and a sample of them through brute force
(every filter checked in turn) in the same run; reports median and p99 µs
per publication, matches per publication, index heap bytes per
subscription, the speed-up of the medians, and median insert/delete µs.
Workloads are defined in matching/workload.

`)
		fs.PrintDefaults()
	}
	subs := fs.Int("subs", 100000, "number of subscriptions (1..10000000)")
	wl := fs.String("workload", "stock", "workload: stock or ranges")
	events := fs.Int("events", 2000, "publications timed through the index (1..1000000)")
	bfEvents := fs.Int("bruteforce-events", 0, "publications timed through brute force (default: all events up to 20,000,000 filter checks)")
	ops := fs.Int("ops", 10000, "inserts and deletes timed (1..1000000)")
	seed := fs.Uint64("seed", 1, "workload seed")
	pubSkew := fs.Bool("pub-skew", false, "stock: draw publication symbols from the subscriptions' Zipf skew instead of uniformly")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "deltapub bench match: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *subs < 1 || *subs > 10000000 || *events < 1 || *events > 1000000 || *ops < 1 || *ops > 1000000 || *bfEvents < 0 {
		fmt.Fprintln(os.Stderr, "deltapub bench match: --subs must be 1..10000000, --events 1..1000000, --ops 1..1000000")
		return 2
	}
	r := rand.New(rand.NewPCG(*seed, 0x5eed))
	var gen interface {
		Filter() matching.Filter
		Publication() matching.Publication
	}
	switch *wl {
	case "stock":
		st := workload.NewStock(r)
		st.PubSkew = *pubSkew
		gen = st
	case "ranges":
		gen = workload.NewRanges(r)
	default:
		fmt.Fprintf(os.Stderr, "deltapub bench match: unknown workload %q, want stock or ranges\n", *wl)
		return 2
	}
	bf := *bfEvents
	if bf == 0 {
		bf = max(1, min(*events, 20000000 / *subs))
	}
	bf = min(bf, *events)

	filters := make([]matching.Filter, *subs)
	for i := range filters {
		filters[i] = gen.Filter()
	}
	pubs := make([]matching.Publication, *events)
	for i := range pubs {
		pubs[i] = gen.Publication()
	}
	var ms goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	t0 := time.Now()
	ix := matching.NewIndex()
	for i, f := range filters {
		if err := ix.Insert(uint64(i), f); err != nil {
			fmt.Fprintf(os.Stderr, "deltapub bench match: %v\n", err)
			return 1
		}
	}
	build := time.Since(t0)
	goruntime.GC()
	goruntime.ReadMemStats(&ms)
	heapPerSub := float64(int64(ms.HeapAlloc)-int64(before)) / float64(*subs)

	rep := matchReport{Subs: *subs, Workload: *wl, PubSkew: *pubSkew, Seed: *seed, Events: *events, HeapBytesPerSub: heapPerSub,
		BruteforceEvents: bf, BuildSeconds: build.Seconds(), Agree: true}

	// Index.
	lat := make([]float64, len(pubs))
	counts := make([]int, len(pubs))
	var dst []uint64
	total := 0
	for i := range pubs {
		t := time.Now()
		dst = ix.Match(&pubs[i], dst[:0])
		lat[i] = float64(time.Since(t).Nanoseconds()) / 1000
		counts[i] = len(dst)
		total += len(dst)
	}
	rep.MedianUs, rep.P99Us = quantile(lat, 0.5), quantile(lat, 0.99)
	rep.MatchesPerPub = float64(total) / float64(len(pubs))

	// Brute force on the first bf publications, same data.
	blat := make([]float64, bf)
	for i := 0; i < bf; i++ {
		t := time.Now()
		n := 0
		for j := range filters {
			if filters[j].Match(&pubs[i]) {
				n++
			}
		}
		blat[i] = float64(time.Since(t).Nanoseconds()) / 1000
		if n != counts[i] {
			rep.Agree = false
		}
	}
	rep.BruteforceMedianUs, rep.BruteforceP99Us = quantile(blat, 0.5), quantile(blat, 0.99)
	// The speed-up compares medians over the same publications.
	rep.Speedup = quantile(blat, 0.5) / quantile(lat[:bf], 0.5)

	// Insert and delete in the full index: fresh filters under fresh ids.
	extra := make([]matching.Filter, *ops)
	for i := range extra {
		extra[i] = gen.Filter()
	}
	ins := make([]float64, *ops)
	del := make([]float64, *ops)
	base := uint64(*subs)
	for i := range extra {
		t := time.Now()
		if err := ix.Insert(base+uint64(i), extra[i]); err != nil {
			fmt.Fprintf(os.Stderr, "deltapub bench match: %v\n", err)
			return 1
		}
		ins[i] = float64(time.Since(t).Nanoseconds()) / 1000
	}
	for i := range extra {
		t := time.Now()
		if !ix.Delete(base + uint64(i)) {
			fmt.Fprintln(os.Stderr, "deltapub bench match: delete failed")
			return 1
		}
		del[i] = float64(time.Since(t).Nanoseconds()) / 1000
	}
	rep.InsertMedianUs, rep.DeleteMedianUs = quantile(ins, 0.5), quantile(del, 0.5)

	if *asJSON {
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
	} else {
		fmt.Printf("workload %s, %d subscriptions (seed %d), index built in %.1f s, %.0f heap bytes/subscription\n",
			rep.Workload, rep.Subs, rep.Seed, rep.BuildSeconds, rep.HeapBytesPerSub)
		fmt.Printf("index:       %d publications, median %.2f µs, p99 %.2f µs, %.1f matches/publication\n",
			rep.Events, rep.MedianUs, rep.P99Us, rep.MatchesPerPub)
		fmt.Printf("brute force: first %d of those publications, median %.2f µs, p99 %.2f µs\n",
			rep.BruteforceEvents, rep.BruteforceMedianUs, rep.BruteforceP99Us)
		fmt.Printf("speed-up (median brute force / median index, same %d publications): %.0f×\n", bf, rep.Speedup)
		fmt.Printf("insert median %.2f µs, delete median %.2f µs (%d each, index of %d)\n",
			rep.InsertMedianUs, rep.DeleteMedianUs, *ops, rep.Subs)
		if !rep.Agree {
			fmt.Println("WARNING: index and brute force disagree on match counts")
		}
	}
	if !rep.Agree {
		return 1
	}
	return 0
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}
