package storage

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/cockroachdb/pebble/v2"
	"github.com/deltapub/deltapub/message"
)

// PebbleQueues is what the Gryphon paper's filtering log is measured
// against: per-subscriber queues at the SHB, as a message-queuing product
// keeps durable subscriptions, with a copy of each event in the queue of
// every subscription it matched (key: subscription, source, seq). It is
// only a baseline for that figure (storage tests, 'deltapub bench
// gryphon --pfs'); no broker uses it.
type PebbleQueues struct {
	path string
	db   *pebble.DB
}

// OpenPebbleQueues opens (creating them if needed) queues at path, with
// the filtering log's pebble options.
func OpenPebbleQueues(path string) (*PebbleQueues, error) {
	db, err := pebble.Open(path, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("storage: queues %s: %w", path, err)
	}
	return &PebbleQueues{path: path, db: db}, nil
}

// Append copies event into the queue of every subscription each record
// lists, in one batch committed with or without sync.
func (q *PebbleQueues) Append(recs []FilterRecord, event []byte, sync bool) error {
	b := q.db.NewBatch()
	defer b.Close()
	var k []byte
	for _, r := range recs {
		for _, sub := range r.Subs {
			k = binary.BigEndian.AppendUint64(append(k[:0], 'q'), uint64(sub))
			k = binary.BigEndian.AppendUint64(appendSource(k, r.Source), r.Seq)
			if err := b.Set(k, event, nil); err != nil { // Set copies k
				return fmt.Errorf("storage: queues %s: %w", q.path, err)
			}
		}
	}
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	if err := b.Commit(opt); err != nil {
		return fmt.Errorf("storage: queues %s: %w", q.path, err)
	}
	return nil
}

// Close releases the queues' resources.
func (q *PebbleQueues) Close() error {
	if err := q.db.Close(); err != nil {
		return fmt.Errorf("storage: queues %s: %w", q.path, err)
	}
	return nil
}

// FilterWorkload makes the events of that figure: its sources in turn,
// each event matching n subscriptions drawn uniformly from keys (from a
// pool drawn ahead, so that drawing costs nothing in the measured loop).
type FilterWorkload struct {
	sources []message.Source
	seqs    []uint64
	pool    [][]SubKey
	next    int
}

// NewFilterWorkload returns the workload; seed fixes the draw.
func NewFilterWorkload(keys []SubKey, n, sources int, seed uint64) *FilterWorkload {
	w := &FilterWorkload{seqs: make([]uint64, sources)}
	for i := range sources {
		w.sources = append(w.sources, message.Source{Publisher: fmt.Sprintf("P%d", i+1), Epoch: 1})
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	n = min(n, len(keys))
	for range 4096 {
		subs := make([]SubKey, 0, n)
		for _, i := range rng.Perm(len(keys))[:n] {
			subs = append(subs, keys[i])
		}
		w.pool = append(w.pool, subs)
	}
	return w
}

// Next returns the next batch events, in recs' storage.
func (w *FilterWorkload) Next(recs []FilterRecord, batch int) []FilterRecord {
	recs = recs[:0]
	for range batch {
		i := w.next % len(w.sources)
		w.seqs[i]++
		recs = append(recs, FilterRecord{Source: w.sources[i], Seq: w.seqs[i], Subs: w.pool[w.next%len(w.pool)]})
		w.next++
	}
	return recs
}
