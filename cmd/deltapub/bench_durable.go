package main

import (
	"flag"
	"strings"

	"github.com/deltapub/deltapub/internal/bench"
)

const benchDurableAbout = `Measures the publication log (docs/durable.md): for each --durability value,
one 'deltapub broker' process of this executable with a fresh data directory
and a publisher in this process; --count 250-byte publications published as
fast as acknowledgements allow (up to 4,096 in flight), then --latency-count
one at a time, each waiting for its PubAck. The durabilities are interleaved
over --repeat rounds; medians are reported (msgs/s, publish→ack p50/p99).
`

func benchDurableCmd(fs *flag.FlagSet) func([]string) int {
	o := bench.DurableOptions{}
	fs.IntVar(&o.Count, "count", 100_000, "publications of each throughput run")
	fs.IntVar(&o.LatencyCount, "latency-count", 2000, "publications of each latency run, one at a time")
	fs.IntVar(&o.Repeat, "repeat", 3, "rounds (durabilities interleaved); medians reported")
	durs := fs.String("durability", "fsync,write,none", "comma-separated durability values to measure")
	jsonOut := fs.Bool("json", false, "print one JSON object")
	return func([]string) int {
		for _, d := range strings.Split(*durs, ",") {
			if d = strings.TrimSpace(d); d != "" {
				o.Durabilities = append(o.Durabilities, d)
			}
		}
		return runBrokerBench("durable", &o.Binary, &o.Progress, *jsonOut, func() error { return o.Validate() }, func() (*bench.DurableReport, error) { return bench.Durable(o) })
	}
}
