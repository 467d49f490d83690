package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/deltapub/deltapub/internal/benchcompare"
)

// GryphonOptions sizes a Gryphon run: the figures of Bhola, Zhao and
// Auerbach, "Scalably supporting durable subscriptions in a
// publish/subscribe system" (DSN 2003), measured for deltapub's durable
// subscriptions (docs/durable.md) with broker processes on loopback.
type GryphonOptions struct {
	Binary string // the deltapub executable that runs the brokers

	// Figure 1, the delivery rate of one SHB.
	Subscribers int           // durable subscribers on the SHB, each matching every publication (figures 1 and 2)
	Publishers  int           // publishers on the PHB
	Duration    time.Duration // publishing time of each rate run
	AwayEvery   time.Duration // with disconnections, each subscriber leaves once per period…
	AwayFor     time.Duration // …for this long, then resumes at the SHB with its token

	// Figure 2, catch-up after an SHB outage.
	OutageRate int           // publications per second
	Outage     time.Duration // how long the SHB stays down

	// Figure 3, latency over a chain of Hops+1 brokers.
	Hops         int
	LatencyRate  int // publications per second
	LatencyCount int // publications of each durability

	LogDir   string // if set, the brokers' logs are kept there, one directory per run
	Progress func(format string, args ...any)
}

// DefaultGryphonOptions are the sizes of the published run
// (docs/results/gryphon.md): the paper's where they fit two cores.
func DefaultGryphonOptions() GryphonOptions {
	return GryphonOptions{Subscribers: 20, Publishers: 4, Duration: 20 * time.Second, AwayEvery: 60 * time.Second, AwayFor: 5 * time.Second,
		OutageRate: 1000, Outage: 40 * time.Second, Hops: 5, LatencyRate: 500, LatencyCount: 3000}
}

// QuickGryphonOptions are tiny sizes: every figure in seconds (the unit
// test, a smoke run).
func QuickGryphonOptions() GryphonOptions {
	return GryphonOptions{Subscribers: 3, Publishers: 2, Duration: 2 * time.Second, AwayEvery: 1500 * time.Millisecond, AwayFor: 400 * time.Millisecond,
		OutageRate: 200, Outage: time.Second, Hops: 2, LatencyRate: 200, LatencyCount: 100}
}

// Validate checks the sizes.
func (o GryphonOptions) Validate() error {
	if o.Binary == "" {
		return errors.New("no deltapub binary to run the brokers")
	}
	queued := o.OutageRate * int(o.Outage.Seconds())
	for _, err := range []error{
		inRange("subscribers", o.Subscribers, 1, 200),
		inRange("publishers", o.Publishers, 1, 16),
		inRange("duration", o.Duration, time.Second, 10*time.Minute),
		inRange("away-every", o.AwayEvery, time.Second, time.Hour),
		inRange("away-for", o.AwayFor, 100*time.Millisecond, min(o.AwayEvery-time.Millisecond, 10*time.Minute)),
		inRange("outage-rate", o.OutageRate, 1, 100_000),
		inRange("outage", o.Outage, time.Second, 10*time.Minute),
		// The PHB queues what the SHB has not acknowledged while it is down.
		inRange("publications queued for the SHB during the outage (outage-rate × outage)", queued, 0, gryphonMaxQueue/2),
		inRange("hops", o.Hops, 1, 9),
		inRange("latency-rate", o.LatencyRate, 1, 100_000),
		inRange("latency-count", o.LatencyCount, 10, 1_000_000),
		inRange("latency-count / latency-rate (seconds)", o.LatencyCount/max(o.LatencyRate, 1), 0, 600),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// inRange is nil if lo ≤ v ≤ hi, else an error that names what.
func inRange[T cmp.Ordered](what string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s %v out of range [%v, %v]", what, v, lo, hi)
	}
	return nil
}

// GryphonCheck is what the subscribers of one run received against what
// was published: every publication exactly once, in per-publisher order.
type GryphonCheck struct {
	Lost       int64  `json:"lost"`       // not delivered, delivered after a later one of its publisher, or in a Gap
	Duplicates int64  `json:"duplicates"` // delivered again
	Failed     int    `json:"sessions_failed"`
	Detail     string `json:"detail,omitempty"` // which subscribers, when not clean
}

func (c GryphonCheck) clean() bool { return c.Lost == 0 && c.Duplicates == 0 && c.Failed == 0 }

// GryphonRateRun is one run of figure 1.
type GryphonRateRun struct {
	DeliveriesPerS float64 `json:"deliveries_per_s"` // summed over the SHB's subscribers
	PublishedPerS  float64 `json:"publications_per_s"`
	Published      int64   `json:"publications"`
	Reconnects     int     `json:"reconnects"`
	// Of those, the ones live again while publishing went on (a later one
	// has no publication to become live with), and their time from the
	// reconnect until live.
	CaughtUp     int     `json:"caught_up"`
	CatchupP50Ms float64 `json:"catchup_p50_ms,omitempty"`
	CatchupMaxMs float64 `json:"catchup_max_ms,omitempty"`
	GryphonCheck
}

// GryphonRate is figure 1: one SHB's delivery rate with and without
// subscriber disconnections.
type GryphonRate struct {
	Subscribers int            `json:"subscribers"`
	Publishers  int            `json:"publishers"`
	Seconds     float64        `json:"seconds"`
	AwayEveryS  float64        `json:"away_every_s"`
	AwayForS    float64        `json:"away_for_s"`
	Without     GryphonRateRun `json:"without_disconnections"`
	With        GryphonRateRun `json:"with_disconnections"`
	Fraction    float64        `json:"with_over_without"`
}

// GryphonOutage is figure 2: catch-up after the SHB was killed and
// restarted with its data directory.
type GryphonOutage struct {
	Subscribers int     `json:"subscribers"`
	Rate        int     `json:"rate"`
	OutageS     float64 `json:"outage_s"`
	RejoinS     float64 `json:"rejoin_s"` // restart → joined (/healthz)
	ResumedAt   string  `json:"resumed_at"`
	CaughtUp    int     `json:"subscribers_caught_up"`
	// Reconnect → live (a delivery published after the reconnect).
	CatchupP50Ms float64 `json:"catchup_p50_ms"`
	CatchupMaxMs float64 `json:"catchup_max_ms"`
	// Deliveries before live: per subscriber (median) and in all; their
	// rate over the longest catch-up.
	CaughtUpPubsP50       float64 `json:"caught_up_pubs_p50"`
	CaughtUpPubs          int64   `json:"caught_up_pubs"`
	CatchupDeliveriesPerS float64 `json:"catchup_deliveries_per_s"`
	Published             int64   `json:"publications"`
	GryphonCheck
}

// GryphonLatency is figure 3 for one durability of the chain's brokers.
type GryphonLatency struct {
	Durability string  `json:"durability"`
	Hops       int     `json:"hops"`
	Count      int     `json:"count"`
	Rate       int     `json:"rate"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	GryphonCheck
}

// gryphonFilteringLog says where figure 4 is measured.
const gryphonFilteringLog = "measured apart, without brokers: 'deltapub bench gryphon --pfs' (the SHB's filtering log against " +
	"per-subscriber queues on pebble; docs/results/gryphon.md)"

// GryphonReport is the outcome of a Gryphon run.
type GryphonReport struct {
	Machine      benchcompare.Machine `json:"machine"`
	PayloadBytes int                  `json:"payload_bytes"`
	Rate         GryphonRate          `json:"delivery_rate"`
	Outage       GryphonOutage        `json:"shb_outage"`
	Latency      []GryphonLatency     `json:"latency"`
	FilteringLog string               `json:"filtering_log"`
}

// Failure says which runs lost or duplicated a publication (nil: none).
func (rep *GryphonReport) Failure() error {
	var bad []string
	note := func(run string, c GryphonCheck) {
		if !c.clean() {
			bad = append(bad, fmt.Sprintf("%s: %d lost, %d duplicated, %d sessions failed (%s)", run, c.Lost, c.Duplicates, c.Failed, c.Detail))
		}
	}
	note("rate without disconnections", rep.Rate.Without.GryphonCheck)
	note("rate with disconnections", rep.Rate.With.GryphonCheck)
	note("SHB outage", rep.Outage.GryphonCheck)
	for _, l := range rep.Latency {
		note("latency "+l.Durability, l.GryphonCheck)
	}
	if len(bad) > 0 {
		return errors.New("exactly-once delivery violated: " + strings.Join(bad, "; "))
	}
	return nil
}

// WriteText writes the report for a reader, the paper's figure beside each.
func (rep *GryphonReport) WriteText(w io.Writer) {
	r := rep.Rate
	fmt.Fprintf(w, "Gryphon (DSN 2003) figures, deltapub broker processes on 127.0.0.1, %d-byte payloads, PHB durability fsync\n", rep.PayloadBytes)
	fmt.Fprintf(w, "1. delivery rate of one SHB: %d durable subscribers matching everything, %d publishers at the PHB, %.0f s\n", r.Subscribers, r.Publishers, r.Seconds)
	fmt.Fprintf(w, "  %-22s %13s %14s %11s %19s %6s %5s\n", "", "deliveries/s", "publications/s", "reconnects", "catch-up p50/max", "lost", "dup")
	row := func(name string, run GryphonRateRun) {
		fmt.Fprintf(w, "  %-22s %13.0f %14.0f %5d (%3d) %10.0f/%5.0f ms %6d %5d\n", name, run.DeliveriesPerS, run.PublishedPerS,
			run.Reconnects, run.CaughtUp, run.CatchupP50Ms, run.CatchupMaxMs, run.Lost, run.Duplicates)
	}
	row("no disconnections", r.Without)
	row(fmt.Sprintf("away %gs every %gs", r.AwayForS, r.AwayEveryS), r.With)
	fmt.Fprintf(w, "  (reconnects: in parentheses those live again while publishing went on, whose catch-up is timed)\n")
	fmt.Fprintf(w, "  with/without %.2f   (paper: 0.88, away 5 s every 300 s)\n", r.Fraction)
	o := rep.Outage
	fmt.Fprintf(w, "2. SHB outage: SIGKILL, restarted with its data directory after %.0f s (joined %.1f s later); %d/s; %d subscribers resumed at %s\n",
		o.OutageS, o.RejoinS, o.Rate, o.Subscribers, o.ResumedAt)
	fmt.Fprintf(w, "  reconnect → live: p50 %.0f ms, max %.0f ms (%d of %d live); caught up %.0f publications per subscriber (p50), %d in all, %.0f deliveries/s; lost %d, dup %d\n",
		o.CatchupP50Ms, o.CatchupMaxMs, o.CaughtUp, o.Subscribers, o.CaughtUpPubsP50, o.CaughtUpPubs, o.CatchupDeliveriesPerS, o.Lost, o.Duplicates)
	fmt.Fprintf(w, "  (paper: all subscribers away ~40 s; the SHB's rate falls to ~10K events/s, from 20K, while they catch up)\n")
	if len(rep.Latency) > 0 {
		l := rep.Latency[0]
		fmt.Fprintf(w, "3. latency over %d hops (%d brokers), publish → durable delivery, %d publications at %d/s\n", l.Hops, l.Hops+1, l.Count, l.Rate)
		fmt.Fprintf(w, "  %-12s %8s %8s %6s %5s\n", "durability", "p50 ms", "p99 ms", "lost", "dup")
		for _, l := range rep.Latency {
			fmt.Fprintf(w, "  %-12s %8.2f %8.2f %6d %5d\n", l.Durability, l.P50Ms, l.P99Ms, l.Lost, l.Duplicates)
		}
		fmt.Fprintf(w, "  (paper: 50 ms over 5 hops, 44 ms of it logging at the PHB)\n")
	}
	fmt.Fprintf(w, "4. filtering log vs per-subscriber queues: %s\n", rep.FilteringLog)
}

// gryphonPayload is the paper's application payload.
const gryphonPayload = 250

// Gryphon measures the paper's figures 1–3 for deltapub's durable
// subscriptions, each run on fresh broker processes (this executable's
// 'deltapub broker', default preset) with data directories:
//
//  1. B1 (PHB) – B2 (SHB); o.Subscribers durable subscribers at B2, each
//     matching every publication; o.Publishers at B1 as fast as
//     acknowledgements allow for o.Duration; deliveries/s summed over the
//     subscribers. Then again with each subscriber away o.AwayFor every
//     o.AwayEvery (staggered over the period), resuming at B2 with its
//     token.
//  2. The same brokers, one publisher at o.OutageRate; B2 killed (SIGKILL)
//     and restarted with its data directory after o.Outage; the
//     subscribers resume there with their tokens: the time from the
//     reconnect until each is live again.
//  3. A chain of o.Hops+1 brokers, a publisher at one end and a durable
//     subscriber at the other, o.LatencyCount publications at
//     o.LatencyRate: publish → delivery p50/p99 with durability fsync and
//     none.
//
// Every run checks that every subscriber got every publication exactly
// once in per-publisher order (Failure).
func Gryphon(o GryphonOptions) (*GryphonReport, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	tmp, err := os.MkdirTemp("", "deltapub-bench-gryphon-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "limits.toml"), []byte(gryphonLimits), 0o600); err != nil {
		return nil, err
	}
	g := &gryphon{o: o, dir: tmp}
	// A bound on the whole run, far above what it needs.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute+2*o.Duration+o.Outage+
		2*time.Duration(o.LatencyCount/o.LatencyRate)*time.Second)
	defer cancel()
	rep := &GryphonReport{Machine: benchcompare.ThisMachine(), PayloadBytes: gryphonPayload, FilteringLog: gryphonFilteringLog,
		Rate: GryphonRate{Subscribers: o.Subscribers, Publishers: o.Publishers, Seconds: o.Duration.Seconds(),
			AwayEveryS: o.AwayEvery.Seconds(), AwayForS: o.AwayFor.Seconds()}}
	for _, away := range []bool{false, true} {
		run, err := g.rateRun(ctx, away)
		if err != nil {
			return nil, fmt.Errorf("figure 1 (away %v): %w", away, err)
		}
		o.Progress("figure 1, away %v: %.0f deliveries/s, %.0f publications/s, %d reconnects; lost %d, dup %d %s",
			away, run.DeliveriesPerS, run.PublishedPerS, run.Reconnects, run.Lost, run.Duplicates, run.Detail)
		if away {
			rep.Rate.With = run
		} else {
			rep.Rate.Without = run
		}
	}
	if rep.Rate.Without.DeliveriesPerS > 0 {
		rep.Rate.Fraction = rep.Rate.With.DeliveriesPerS / rep.Rate.Without.DeliveriesPerS
	}
	if rep.Outage, err = g.outageRun(ctx); err != nil {
		return nil, fmt.Errorf("figure 2: %w", err)
	}
	o.Progress("figure 2: %d of %d live again, catch-up p50 %.0f ms max %.0f ms; lost %d, dup %d %s", rep.Outage.CaughtUp,
		o.Subscribers, rep.Outage.CatchupP50Ms, rep.Outage.CatchupMaxMs, rep.Outage.Lost, rep.Outage.Duplicates, rep.Outage.Detail)
	for _, d := range []string{"fsync", "none"} {
		l, err := g.latencyRun(ctx, d)
		if err != nil {
			return nil, fmt.Errorf("figure 3 (%s): %w", d, err)
		}
		o.Progress("figure 3, %s: p50 %.2f ms, p99 %.2f ms; lost %d, dup %d %s", d, l.P50Ms, l.P99Ms, l.Lost, l.Duplicates, l.Detail)
		rep.Latency = append(rep.Latency, l)
	}
	rep.Machine.LoadEnd = benchcompare.ThisMachine().LoadStart
	return rep, nil
}
