package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
)

// Keys of the pebble log. A source is encoded as a 2-byte length, the
// publisher name and the 8-byte epoch, so that keys sort by source, then
// by seq (8 bytes, big-endian).
const (
	keyPub  = 'p' // 'p' source seq → the publication's wire frame (no stamps)
	keyLast = 'm' // 'm' source → the source's last appended seq
)

// PebbleLog is a Log on pebble (an LSM store with a write-ahead log and
// group commit): one record per publication, and one per source holding
// its last seq, written in the same batch. Safe for concurrent use. The
// broker's log is a SegmentLog now; a data directory with a PebbleLog is
// migrated into one when it is opened (SegmentLog.migrate).
type PebbleLog struct {
	path string
	db   *pebble.DB
	mu   sync.Mutex
	idx  logIndex
	buf  []byte
}

var _ Log = (*PebbleLog)(nil)

// OpenPebbleLog opens the log at path and reads its index.
func OpenPebbleLog(path string) (*PebbleLog, error) {
	db, err := pebble.Open(path, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("storage: publication log %s: %w", path, err)
	}
	l := &PebbleLog{path: path, db: db, idx: newLogIndex()}
	if _, err := l.read(false); err != nil {
		db.Close()
		return nil, err
	}
	return l, nil
}

func appendSource(b []byte, s message.Source) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s.Publisher)))
	b = append(b, s.Publisher...)
	return binary.BigEndian.AppendUint64(b, s.Epoch)
}

func parseSource(b []byte) (message.Source, []byte, error) {
	if len(b) < 2 {
		return message.Source{}, nil, errors.New("short key")
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n+8 {
		return message.Source{}, nil, errors.New("short key")
	}
	s := message.Source{Publisher: string(b[2 : 2+n]), Epoch: binary.BigEndian.Uint64(b[2+n:])}
	return s, b[2+n+8:], nil
}

func pubKey(b []byte, s message.Source, seq uint64) []byte {
	b = append(appendSource(append(b, keyPub), s), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint64(b[len(b)-8:], seq)
	return b
}

// Append implements Log: one batch, committed with or without sync.
func (l *PebbleLog) Append(pubs []message.Pub, sync bool) error {
	if len(pubs) == 0 && !sync {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.db.NewBatch()
	defer b.Close()
	last := map[message.Source]uint64{}
	for i := range pubs {
		p := pubs[i]
		p.Stamps = nil
		var err error
		l.buf, err = wire.AppendFrame(l.buf[:0], &p)
		if err != nil {
			return fmt.Errorf("storage: publication log: %s: %w", p.ID, err)
		}
		if err := b.Set(pubKey(nil, p.ID.Source(), p.ID.Seq), l.buf, nil); err != nil {
			return fmt.Errorf("storage: publication log %s: %w", l.path, err)
		}
		last[p.ID.Source()] = p.ID.Seq
	}
	for s, seq := range last {
		if err := b.Set(appendSource([]byte{keyLast}, s), binary.BigEndian.AppendUint64(nil, seq), nil); err != nil {
			return fmt.Errorf("storage: publication log %s: %w", l.path, err)
		}
	}
	var forgotten []message.Source
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	if b.Empty() {
		// Nothing new but a sync asked for: sync what earlier unsynced
		// writes (releases) put in the WAL.
		return l.db.LogData(nil, opt)
	}
	for i := range pubs {
		forgotten = append(forgotten, l.idx.add(&pubs[i])...)
	}
	for _, s := range forgotten {
		_ = b.Delete(appendSource([]byte{keyLast}, s), nil)
	}
	if err := b.Commit(opt); err != nil {
		return fmt.Errorf("storage: publication log %s: %w", l.path, err)
	}
	return nil
}

// Release implements Log: a range deletion per source.
func (l *PebbleLog) Release(rs []Release) error {
	if len(rs) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.db.NewBatch()
	defer b.Close()
	for _, r := range rs {
		if err := b.DeleteRange(pubKey(nil, r.Source, 0), pubKey(nil, r.Source, r.Seq+1), nil); err != nil {
			return fmt.Errorf("storage: publication log %s: %w", l.path, err)
		}
		l.idx.release(r.Source, r.Seq)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("storage: publication log %s: %w", l.path, err)
	}
	return nil
}

// Recover implements Log.
func (l *PebbleLog) Recover() (Recovered, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.read(true)
}

// read scans the log, rebuilding the index (at open), and returns the
// publications if want.
func (l *PebbleLog) read(want bool) (Recovered, error) {
	var rec Recovered
	idx := newLogIndex()
	fail := func(k []byte, err error) (Recovered, error) {
		return Recovered{}, fmt.Errorf("storage: publication log %s: record %q: %v; the log is damaged: move the data directory aside to start this broker without it (its unsafe publications are then lost)", l.path, k, err)
	}
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyPub}, UpperBound: []byte{keyPub + 1}})
	if err != nil {
		return Recovered{}, fmt.Errorf("storage: publication log %s: %w", l.path, err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		s, rest, err := parseSource(k[1:])
		if err != nil || len(rest) != 8 {
			it.Close()
			return fail(k, fmt.Errorf("bad key"))
		}
		m, _, err := wire.Decode(it.Value(), 0)
		if err != nil {
			it.Close()
			return fail(k, err)
		}
		p, ok := m.(*message.Pub)
		if !ok || p.ID.Source() != s || p.ID.Seq != binary.BigEndian.Uint64(rest) {
			it.Close()
			return fail(k, fmt.Errorf("the record does not match its key"))
		}
		idx.add(p)
		if want {
			rec.Pubs = append(rec.Pubs, *p)
		}
	}
	if err := it.Close(); err != nil {
		return Recovered{}, fmt.Errorf("storage: publication log %s: %w", l.path, err)
	}
	it, err = l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyLast}, UpperBound: []byte{keyLast + 1}})
	if err != nil {
		return Recovered{}, fmt.Errorf("storage: publication log %s: %w", l.path, err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		s, rest, err := parseSource(k[1:])
		if err != nil || len(rest) != 0 || len(it.Value()) != 8 {
			it.Close()
			return fail(k, fmt.Errorf("bad source record"))
		}
		idx.noteLast(s, binary.BigEndian.Uint64(it.Value()))
	}
	if err := it.Close(); err != nil {
		return Recovered{}, fmt.Errorf("storage: publication log %s: %w", l.path, err)
	}
	l.idx = idx
	rec.Last = idx.lasts()
	return rec, nil
}

// Stats implements Log.
func (l *PebbleLog) Stats() LogStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idx.stats()
}

// Close implements Log.
// Sync implements Log: pebble keeps a commit without sync in its own
// buffers until a later write fills a block or syncs (pebble#2624).
func (l *PebbleLog) Sync() error {
	if err := l.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("storage: publication log %s: %w", l.path, err)
	}
	return nil
}

func (l *PebbleLog) Close() error {
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("storage: publication log %s: %w", l.path, err)
	}
	return nil
}

// quietLogger drops pebble's informational messages (the broker's own log
// reports what matters) and keeps its errors on the error path.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(format string, args ...any) { log.Printf("pebble: "+format, args...) }
func (quietLogger) Fatalf(format string, args ...any) { panic(fmt.Sprintf("pebble: "+format, args...)) }
