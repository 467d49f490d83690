package bench

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deltapub/deltapub/internal/benchcompare"
	"github.com/deltapub/deltapub/internal/storage"
)

// GryphonPFSOptions sizes figure 4 of the Gryphon report (the paper's
// microbenchmark, in its results summary): the SHB's persistent filtering
// log (storage.FilterLog) against per-subscriber queues
// (storage.PebbleQueues), on the same pebble setup with the same events,
// in one run.
type GryphonPFSOptions struct {
	Dir         string        // where the stores are made ("": the system's temporary directory)
	Subscribers int           // durable subscriptions at the SHB
	Matching    []int         // subscriptions each event matches (n): a pair of rows each
	Sources     int           // sources (pubends) the events come from, in turn
	Batch       int           // events per group commit
	Cell        time.Duration // how long each store is written in each round
	Rounds      int           // rounds per row, the stores in turn: the row has the medians
	Progress    func(format string, args ...any)
}

// DefaultGryphonPFSOptions are the sizes of the published run: the
// paper's 4 pubends and events of n = 1, 4 or 20 of 100 subscribers.
func DefaultGryphonPFSOptions() GryphonPFSOptions {
	return GryphonPFSOptions{Subscribers: 100, Matching: []int{1, 4, 20}, Sources: 4, Batch: 64, Cell: 3 * time.Second, Rounds: 3}
}

// QuickGryphonPFSOptions measure each store for a moment (a smoke run).
func QuickGryphonPFSOptions() GryphonPFSOptions {
	o := DefaultGryphonPFSOptions()
	o.Cell, o.Rounds = 200*time.Millisecond, 1
	return o
}

// Validate checks the sizes.
func (o GryphonPFSOptions) Validate() error {
	if len(o.Matching) == 0 {
		return errors.New("no matching count (n) to measure")
	}
	for _, n := range o.Matching {
		if err := inRange("matching", n, 1, o.Subscribers); err != nil {
			return err
		}
	}
	for _, err := range []error{
		inRange("subscribers", o.Subscribers, 1, 10_000),
		inRange("sources", o.Sources, 1, 1000),
		inRange("batch", o.Batch, 1, 10_000),
		inRange("cell", o.Cell, 10*time.Millisecond, 10*time.Minute),
		inRange("rounds", o.Rounds, 1, 100),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// GryphonPFSRow is one workload written to both stores.
type GryphonPFSRow struct {
	Matching int    `json:"matching"`
	Commit   string `json:"commit"` // fsync or nosync
	// Events per second written (the median of the rounds), their ratio,
	// and the lowest and highest ratio of one round's two stores.
	FilterLogPerS float64 `json:"filter_log_events_per_s"`
	QueuesPerS    float64 `json:"queues_events_per_s"`
	Ratio         float64 `json:"filter_log_over_queues"`
	RatioMin      float64 `json:"ratio_min"`
	RatioMax      float64 `json:"ratio_max"`
	// The bytes the process wrote to disk per event until the store was
	// closed (WAL, flushes, compactions; median of the rounds; 0 where
	// /proc/self/io cannot be read).
	FilterLogDiskBytes float64   `json:"filter_log_disk_bytes_per_event"`
	QueuesDiskBytes    float64   `json:"queues_disk_bytes_per_event"`
	FilterLogRounds    []float64 `json:"filter_log_rounds"`
	QueuesRounds       []float64 `json:"queues_rounds"`
}

// GryphonPFSReport is figure 4.
type GryphonPFSReport struct {
	Machine     benchcompare.Machine `json:"machine"`
	Subscribers int                  `json:"subscribers"`
	Sources     int                  `json:"sources"`
	Batch       int                  `json:"batch"`
	EventBytes  int                  `json:"event_bytes"`
	CellS       float64              `json:"cell_s"`
	Rounds      int                  `json:"rounds"`
	Rows        []GryphonPFSRow      `json:"rows"`
}

// gryphonEventBytes is the paper's event with its headers (a 250-byte
// payload).
const gryphonEventBytes = 418

// GryphonPFS measures figure 4: for each n and each commit mode (fsync,
// then none), events from o.Sources sources each matching n of
// o.Subscribers durable subscriptions, o.Batch events per commit, written
// for o.Cell to a fresh filtering log (one record per event: seq, and per
// matching subscription its key and back-pointer; the event itself stays
// in the PHB's log) and then to fresh per-subscriber queues (the 418-byte
// event copied into each matching subscription's queue); o.Rounds times,
// so that a busy moment of the machine shows as spread, not as the result.
func GryphonPFS(o GryphonPFSOptions) (*GryphonPFSReport, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	rep := &GryphonPFSReport{Machine: benchcompare.ThisMachine(), Subscribers: o.Subscribers, Sources: o.Sources,
		Batch: o.Batch, EventBytes: gryphonEventBytes, CellS: o.Cell.Seconds(), Rounds: o.Rounds}
	event := make([]byte, gryphonEventBytes)
	rand.Read(event) // incompressible, as pebble would find real payloads mostly
	filterLog := func(sync bool) pfsStore {
		return func(path string, keys []storage.SubKey) (func([]storage.FilterRecord) error, func() error, error) {
			l, err := storage.OpenPebbleFilterLog(path)
			if err != nil {
				return nil, nil, err
			}
			for i := range keys {
				if keys[i], err = l.Register(fmt.Sprint("durable-", i)); err != nil {
					l.Close()
					return nil, nil, err
				}
			}
			return func(recs []storage.FilterRecord) error { return l.Append(recs, sync) }, l.Close, nil
		}
	}
	queues := func(sync bool) pfsStore {
		return func(path string, keys []storage.SubKey) (func([]storage.FilterRecord) error, func() error, error) {
			q, err := storage.OpenPebbleQueues(path)
			if err != nil {
				return nil, nil, err
			}
			for i := range keys {
				keys[i] = storage.SubKey(i + 1)
			}
			return func(recs []storage.FilterRecord) error { return q.Append(recs, event, sync) }, q.Close, nil
		}
	}
	for _, sync := range []bool{true, false} {
		for _, n := range o.Matching {
			row := GryphonPFSRow{Matching: n, Commit: map[bool]string{true: "fsync", false: "nosync"}[sync]}
			var filterDisk, queueDisk, ratios []float64
			for range o.Rounds {
				f, fd, err := o.cell(n, filterLog(sync))
				if err != nil {
					return nil, fmt.Errorf("filtering log, n = %d, %s: %w", n, row.Commit, err)
				}
				q, qd, err := o.cell(n, queues(sync))
				if err != nil {
					return nil, fmt.Errorf("queues, n = %d, %s: %w", n, row.Commit, err)
				}
				row.FilterLogRounds, row.QueuesRounds = append(row.FilterLogRounds, f), append(row.QueuesRounds, q)
				filterDisk, queueDisk, ratios = append(filterDisk, fd), append(queueDisk, qd), append(ratios, f/q)
			}
			row.FilterLogPerS, row.QueuesPerS = quantile(row.FilterLogRounds, 0.5), quantile(row.QueuesRounds, 0.5)
			row.Ratio = row.FilterLogPerS / row.QueuesPerS
			row.RatioMin, row.RatioMax = slices.Min(ratios), slices.Max(ratios)
			row.FilterLogDiskBytes, row.QueuesDiskBytes = quantile(filterDisk, 0.5), quantile(queueDisk, 0.5)
			o.Progress("figure 4, n = %d, %s: filtering log %.0f events/s, queues %.0f events/s, ratio %.2f (rounds %.2f–%.2f)",
				n, row.Commit, row.FilterLogPerS, row.QueuesPerS, row.Ratio, row.RatioMin, row.RatioMax)
			rep.Rows = append(rep.Rows, row)
		}
	}
	rep.Machine.LoadEnd = benchcompare.ThisMachine().LoadStart
	return rep, nil
}

// pfsStore opens a store in a fresh directory, filling keys, and returns
// its write and close.
type pfsStore func(path string, keys []storage.SubKey) (write func([]storage.FilterRecord) error, close func() error, err error)

// cell measures one store for o.Cell: events/s and disk bytes per event.
func (o GryphonPFSOptions) cell(n int, open pfsStore) (float64, float64, error) {
	dir, err := os.MkdirTemp(o.Dir, "deltapub-bench-pfs-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	keys := make([]storage.SubKey, o.Subscribers)
	written0 := diskWritten()
	write, closeStore, err := open(filepath.Join(dir, "store"), keys)
	if err != nil {
		return 0, 0, err
	}
	w := storage.NewFilterWorkload(keys, n, o.Sources, 1)
	var recs []storage.FilterRecord
	events := 0
	t0 := time.Now()
	for time.Since(t0) < o.Cell {
		recs = w.Next(recs, o.Batch)
		if err := write(recs); err != nil {
			closeStore()
			return 0, 0, err
		}
		events += len(recs)
	}
	elapsed := time.Since(t0)
	if err := closeStore(); err != nil {
		return 0, 0, err
	}
	return float64(events) / elapsed.Seconds(), float64(diskWritten()-written0) / float64(events), nil
}

// diskWritten is what this process has written to storage so far
// (/proc/self/io write_bytes; 0 where it cannot be read).
func diskWritten() int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// WriteText writes the table, the paper's figure beside it.
func (rep *GryphonPFSReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "Gryphon (DSN 2003) 4. SHB filtering log vs per-subscriber queues (the paper's PFS microbenchmark), pebble, %d durable subscriptions, %d sources, events per commit %d, %d-byte events; each store %g s per round, %d rounds, medians\n",
		rep.Subscribers, rep.Sources, rep.Batch, rep.EventBytes, rep.CellS, rep.Rounds)
	fmt.Fprintf(w, "  %-4s %-7s %15s %15s %7s %13s %16s %16s\n", "n", "commit", "filter events/s", "queue events/s", "ratio", "rounds' ratio", "filter disk B/ev", "queue disk B/ev")
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "  %-4d %-7s %15.0f %15.0f %7.2f %6.2f–%-6.2f %16.0f %16.0f\n", r.Matching, r.Commit, r.FilterLogPerS, r.QueuesPerS,
			r.Ratio, r.RatioMin, r.RatioMax, r.FilterLogDiskBytes, r.QueuesDiskBytes)
	}
	fmt.Fprintf(w, "  (filtering log record: 8 + 16·n bytes, the event stays in the PHB's log; queues: the %d-byte event in each of n queues)\n", rep.EventBytes)
	fmt.Fprintf(w, "  (paper: \"the PFS is over 5x faster than logging events at the SHB\")\n")
}
