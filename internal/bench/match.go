// Package bench holds the benchmark drivers of 'deltapub bench': the
// matching index against brute force (Match) and the 3-broker chain over
// QUIC against a bare QUIC relay chain (Overlay). The comparison with NATS
// is internal/benchcompare.
package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	goruntime "runtime"
	"slices"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
)

// MatchOptions are the sizes of a Match run.
type MatchOptions struct {
	Subs     int    // subscriptions in the index (1..10,000,000)
	Workload string // "stock" or "ranges" (matching/workload)
	PubSkew  bool   // stock: publication symbols from the subscriptions' Zipf skew
	Events   int    // publications timed through the index (1..1,000,000)
	// BruteforceEvents are the publications (the first of Events) timed
	// through brute force; 0: all of them up to 20,000,000 filter checks.
	BruteforceEvents int
	Ops              int // inserts and deletes timed (1..1,000,000)
	Seed             uint64
}

// Validate checks the sizes and the workload.
func (o MatchOptions) Validate() error {
	switch {
	case o.Subs < 1 || o.Subs > 10_000_000:
		return fmt.Errorf("subs %d out of range [1, 10000000]", o.Subs)
	case o.Events < 1 || o.Events > 1_000_000:
		return fmt.Errorf("events %d out of range [1, 1000000]", o.Events)
	case o.Ops < 1 || o.Ops > 1_000_000:
		return fmt.Errorf("ops %d out of range [1, 1000000]", o.Ops)
	case o.BruteforceEvents < 0:
		return fmt.Errorf("bruteforce events %d below 0", o.BruteforceEvents)
	case o.Workload != "stock" && o.Workload != "ranges":
		return fmt.Errorf("unknown workload %q, want stock or ranges", o.Workload)
	}
	return nil
}

// MatchReport is the outcome of a Match run.
type MatchReport struct {
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
	Ops                int     `json:"-"`
}

// Match builds the matching index over o.Subs subscriptions of the
// workload, then times o.Events publications through the index and the
// first of them through brute force (every filter checked in turn) in the
// same run, and o.Ops inserts and deletes in the full index. Agree reports
// whether index and brute force found the same number of matches.
func Match(o MatchOptions) (*MatchReport, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	var gen interface {
		Filter() matching.Filter
		Publication() matching.Publication
	}
	if o.Workload == "stock" {
		st := workload.NewStock(r)
		st.PubSkew = o.PubSkew
		gen = st
	} else {
		gen = workload.NewRanges(r)
	}
	bf := o.BruteforceEvents
	if bf == 0 {
		bf = max(1, min(o.Events, 20000000/o.Subs))
	}
	bf = min(bf, o.Events)

	filters := make([]matching.Filter, o.Subs)
	for i := range filters {
		filters[i] = gen.Filter()
	}
	pubs := make([]matching.Publication, o.Events)
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
			return nil, err
		}
	}
	build := time.Since(t0)
	goruntime.GC()
	goruntime.ReadMemStats(&ms)
	heapPerSub := float64(int64(ms.HeapAlloc)-int64(before)) / float64(o.Subs)

	rep := &MatchReport{Subs: o.Subs, Workload: o.Workload, PubSkew: o.PubSkew, Seed: o.Seed, Events: o.Events, HeapBytesPerSub: heapPerSub,
		BruteforceEvents: bf, BuildSeconds: build.Seconds(), Agree: true, Ops: o.Ops}

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
	extra := make([]matching.Filter, o.Ops)
	for i := range extra {
		extra[i] = gen.Filter()
	}
	ins := make([]float64, o.Ops)
	del := make([]float64, o.Ops)
	base := uint64(o.Subs)
	for i := range extra {
		t := time.Now()
		if err := ix.Insert(base+uint64(i), extra[i]); err != nil {
			return nil, err
		}
		ins[i] = float64(time.Since(t).Nanoseconds()) / 1000
	}
	for i := range extra {
		t := time.Now()
		if !ix.Delete(base + uint64(i)) {
			return nil, fmt.Errorf("delete of filter %d failed", base+uint64(i))
		}
		del[i] = float64(time.Since(t).Nanoseconds()) / 1000
	}
	rep.InsertMedianUs, rep.DeleteMedianUs = quantile(ins, 0.5), quantile(del, 0.5)
	return rep, nil
}

// WriteText writes the report for a reader.
func (rep *MatchReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "workload %s, %d subscriptions (seed %d), index built in %.1f s, %.0f heap bytes/subscription\n",
		rep.Workload, rep.Subs, rep.Seed, rep.BuildSeconds, rep.HeapBytesPerSub)
	fmt.Fprintf(w, "index:       %d publications, median %.2f µs, p99 %.2f µs, %.1f matches/publication\n",
		rep.Events, rep.MedianUs, rep.P99Us, rep.MatchesPerPub)
	fmt.Fprintf(w, "brute force: first %d of those publications, median %.2f µs, p99 %.2f µs\n",
		rep.BruteforceEvents, rep.BruteforceMedianUs, rep.BruteforceP99Us)
	fmt.Fprintf(w, "speed-up (median brute force / median index, same %d publications): %.0f×\n", rep.BruteforceEvents, rep.Speedup)
	fmt.Fprintf(w, "insert median %.2f µs, delete median %.2f µs (%d each, index of %d)\n",
		rep.InsertMedianUs, rep.DeleteMedianUs, rep.Ops, rep.Subs)
	if !rep.Agree {
		fmt.Fprintln(w, "WARNING: index and brute force disagree on match counts")
	}
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
