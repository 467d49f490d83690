package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/quic/baseline"
	"github.com/deltapub/deltapub/matching"
)

// DurableOptions sizes a Durable run.
type DurableOptions struct {
	Binary       string   // the deltapub executable that runs the broker
	Count        int      // publications of each throughput run (≥ 1,000)
	LatencyCount int      // publications of each latency run, one at a time (≥ 100)
	Repeat       int      // rounds; the durabilities are interleaved in each (≥ 1)
	Durabilities []string // the durability values measured (default fsync, write, none)
	Progress     func(format string, args ...any)
}

// Validate checks the sizes.
func (o DurableOptions) Validate() error {
	switch {
	case o.Binary == "":
		return errors.New("no deltapub binary to run the broker")
	case o.Count < 1000 || o.Count > 10_000_000:
		return fmt.Errorf("count %d out of range [1000, 10000000]", o.Count)
	case o.LatencyCount < 100 || o.LatencyCount > 1_000_000:
		return fmt.Errorf("latency count %d out of range [100, 1000000]", o.LatencyCount)
	case o.Repeat < 1 || o.Repeat > 100:
		return fmt.Errorf("repeat %d out of range [1, 100]", o.Repeat)
	}
	for _, d := range o.Durabilities {
		if d != "fsync" && d != "write" && d != "none" {
			return fmt.Errorf("durability %q: want fsync, write or none", d)
		}
	}
	return nil
}

// DurableRow is one durability's figures (medians over the rounds).
type DurableRow struct {
	Durability   string  `json:"durability"`
	MsgsPerS     float64 `json:"throughput_msgs_per_s"`
	AckP50ms     float64 `json:"ack_p50_ms"`
	AckP99ms     float64 `json:"ack_p99_ms"`
	Rounds       int     `json:"rounds"`
	FrameBytes   int     `json:"frame_bytes"`
	PublishCount int     `json:"count"`
}

// DurableReport is the outcome of a Durable run.
type DurableReport struct {
	Rows []DurableRow `json:"rows"`
}

// WriteText writes the report for a reader.
func (rep *DurableReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "one broker, publisher in this process, 250-byte publications, publish → PubAck\n")
	fmt.Fprintf(w, "  %-10s %14s %12s %12s\n", "durability", "msgs/s", "ack p50 ms", "ack p99 ms")
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "  %-10s %14.0f %12.3f %12.3f\n", r.Durability, r.MsgsPerS, r.AckP50ms, r.AckP99ms)
	}
}

// Durable measures the publication log's cost: for each durability, one
// broker process with a data directory of its own; a publisher publishes
// o.Count publications as fast as acknowledgements allow (up to 4,096 in
// flight: group commit at work), then o.LatencyCount one at a time, each
// waiting for its PubAck (the publish → acknowledgement latency). The
// durabilities are interleaved round by round so that a change of the
// machine's load hits them alike; the medians are reported.
func Durable(o DurableOptions) (*DurableReport, error) {
	if len(o.Durabilities) == 0 {
		o.Durabilities = []string{"fsync", "write", "none"}
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	progress := o.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	tmp, err := os.MkdirTemp("", "deltapub-bench-durable-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	tput := map[string][]float64{}
	p50 := map[string][]float64{}
	p99 := map[string][]float64{}
	for round := 0; round < o.Repeat; round++ {
		for _, d := range o.Durabilities {
			t, lat, err := durableRound(o, d, filepath.Join(tmp, fmt.Sprintf("%s-%d", d, round)))
			if err != nil {
				return nil, fmt.Errorf("durability %s: %w", d, err)
			}
			tput[d] = append(tput[d], t)
			p50[d] = append(p50[d], quantile(lat, 0.50))
			p99[d] = append(p99[d], quantile(lat, 0.99))
			progress("round %d, durability %s: %.0f msgs/s, ack p50 %.3f ms p99 %.3f ms", round+1, d, t, quantile(lat, 0.5), quantile(lat, 0.99))
		}
	}
	rep := &DurableReport{}
	for _, d := range o.Durabilities {
		rep.Rows = append(rep.Rows, DurableRow{Durability: d, MsgsPerS: quantile(tput[d], 0.5), AckP50ms: quantile(p50[d], 0.5),
			AckP99ms: quantile(p99[d], 0.5), Rounds: o.Repeat, FrameBytes: 250, PublishCount: o.Count})
	}
	return rep, nil
}

// durableRound runs one broker with durability d in dir and returns the
// throughput (msgs/s) and the acknowledgement latencies (ms).
func durableRound(o DurableOptions, d, dir string) (float64, []float64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, nil, err
	}
	b, err := newBenchBroker("B1")
	if err != nil {
		return 0, nil, err
	}
	if err := b.start(o.Binary, filepath.Join(dir, "broker.log"), "--preset", "default",
		"--data-dir", filepath.Join(dir, "data"), "--durability", d, "--log-level", "warn", "--log-format", "json"); err != nil {
		return 0, nil, err
	}
	defer stopBrokers([]*benchBroker{b}, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pubc, err := client.Connect(ctx, b.addr, client.Options{MaxInFlight: 4096})
	if err != nil {
		return 0, nil, err
	}
	defer pubc.Close()
	proto := baseline.Publication(250)
	pub := matching.Publication{Attrs: proto.Attrs, Payload: proto.Payload}
	// Throughput: acknowledgements waited for in order by one goroutine.
	acks := make(chan (<-chan error), 1<<13)
	ackErr := waitAcks(acks)
	start := time.Now()
	for i := 0; i < o.Count; i++ {
		ch, err := pubc.PublishAsync(ctx, pub)
		if err != nil {
			close(acks)
			<-ackErr
			return 0, nil, err
		}
		acks <- ch
	}
	close(acks)
	if err := <-ackErr; err != nil {
		return 0, nil, err
	}
	tput := float64(o.Count) / time.Since(start).Seconds()
	lat := make([]float64, 0, o.LatencyCount)
	for i := 0; i < o.LatencyCount; i++ {
		t0 := time.Now()
		if err := pubc.Publish(ctx, pub); err != nil {
			return 0, nil, err
		}
		lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
	}
	return tput, lat, nil
}

// waitAcks waits, in one goroutine, for each acknowledgement sent on acks
// in order, until acks is closed; the channel returned then gives the
// first error (nil: all acknowledged).
func waitAcks(acks <-chan (<-chan error)) <-chan error {
	ackErr := make(chan error, 1)
	go func() {
		var first error
		for ch := range acks {
			if err := <-ch; err != nil && first == nil {
				first = err
			}
		}
		ackErr <- first
	}()
	return ackErr
}
