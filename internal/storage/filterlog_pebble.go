package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/deltapub/deltapub/message"
)

// filterDirName is the filtering log's directory inside the data directory.
const filterDirName = "filter"

// Keys of the pebble filtering log (a source encoded as in the
// publication log, so that keys sort by source, then by seq or key).
const (
	keyFilterRecord = 'f' // 'f' source seq → per listed subscription: key, back-pointer (8 + 8 bytes, keys increasing)
	keyFilterStream = 'm' // 'm' source → horizon, released (8 + 8 bytes)
	keyFilterSince  = 's' // 's' source key → the stream's horizon when key was registered
	keyFilterName   = 'n' // 'n' name → key
	keyFilterNext   = 'c' // 'c' → the next key to assign
)

// PebbleFilterLog is a FilterLog on pebble: a record is one key (8 bytes
// of seq after the source) and 16 bytes per listed subscription, the
// paper's 8 + 16·n; every call is one batch. Safe for concurrent use; a
// Read walks a snapshot without holding up appends.
type PebbleFilterLog struct {
	path string
	db   *pebble.DB
	mu   sync.Mutex
	idx  filterIndex
	// failed is the first write error: the index may be ahead of the
	// disk from then on, so every later call fails with it.
	failed error
}

var _ FilterLog = (*PebbleFilterLog)(nil)

// OpenFilterLog opens (creating it if needed) the filtering log in data
// directory dir.
func (d *Dir) OpenFilterLog() (FilterLog, error) {
	return OpenPebbleFilterLog(filepath.Join(d.path, filterDirName))
}

// OpenPebbleFilterLog opens the filtering log at path and reads its
// index. A record that does not decode, or does not continue its chains,
// is an error naming the path.
func OpenPebbleFilterLog(path string) (*PebbleFilterLog, error) {
	db, err := pebble.Open(path, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("storage: filtering log %s: %w", path, err)
	}
	l := &PebbleFilterLog{path: path, db: db}
	if err := l.load(); err != nil {
		db.Close()
		return nil, err
	}
	return l, nil
}

func filterRecordKey(src message.Source, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(appendSource([]byte{keyFilterRecord}, src), seq)
}

func filterSinceKey(src message.Source, key SubKey) []byte {
	return binary.BigEndian.AppendUint64(appendSource([]byte{keyFilterSince}, src), uint64(key))
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func encodeFilterEntries(entries []filterEntry) []byte {
	b := make([]byte, 0, 16*len(entries))
	for _, e := range entries {
		b = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(b, uint64(e.sub)), e.prev)
	}
	return b
}

func decodeFilterEntries(v []byte) ([]filterEntry, error) {
	if len(v) == 0 || len(v)%16 != 0 || len(v)/16 > maxFilterSubs {
		return nil, fmt.Errorf("a record of %d bytes", len(v))
	}
	entries := make([]filterEntry, len(v)/16)
	for i := range entries {
		entries[i] = filterEntry{SubKey(binary.BigEndian.Uint64(v[16*i:])), binary.BigEndian.Uint64(v[16*i+8:])}
		if entries[i].sub == 0 || i > 0 && entries[i].sub <= entries[i-1].sub {
			return nil, errors.New("subscription keys not increasing")
		}
	}
	return entries, nil
}

// filterBatch is a pebble batch that keeps its first error.
type filterBatch struct {
	*pebble.Batch
	err error
}

func (b *filterBatch) set(k, v []byte) {
	if b.err == nil {
		b.err = b.Set(k, v, nil)
	}
}

func (b *filterBatch) del(k []byte) {
	if b.err == nil {
		b.err = b.Delete(k, nil)
	}
}

func (b *filterBatch) delRange(from, to []byte) {
	if b.err == nil {
		b.err = b.DeleteRange(from, to, nil)
	}
}

// setStream writes src's horizon and released.
func (b *filterBatch) setStream(src message.Source, s *filterStream) {
	b.set(appendSource([]byte{keyFilterStream}, src), binary.BigEndian.AppendUint64(u64(s.horizon), s.released))
}

// dropStream deletes everything a forgotten stream left.
func (b *filterBatch) dropStream(src message.Source) {
	b.del(appendSource([]byte{keyFilterStream}, src))
	b.delRange(filterSinceKey(src, 0), filterSinceKey(src, ^SubKey(0)))
	b.delRange(filterRecordKey(src, 0), filterRecordKey(src, maxFilterSeq+1))
}

// write commits a batch built under l.mu (the index already changed).
func (l *PebbleFilterLog) write(build func(b *filterBatch), sync bool) error {
	b := &filterBatch{Batch: l.db.NewBatch()}
	defer b.Close()
	build(b)
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	err := b.err
	switch {
	case err != nil:
	case b.Empty() && sync:
		// Nothing new: sync what earlier unsynced calls put in the WAL.
		err = l.db.LogData(nil, opt)
	case !b.Empty():
		err = b.Commit(opt)
	}
	if err != nil {
		l.failed = fmt.Errorf("storage: filtering log %s: %w", l.path, err)
	}
	return l.failed
}

// Register implements FilterLog.
func (l *PebbleFilterLog) Register(name string) (SubKey, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return 0, l.failed
	}
	if k, ok := l.idx.names[name]; ok {
		return k, nil
	}
	key, marks, err := l.idx.register(name)
	if err != nil {
		return 0, err
	}
	return key, l.write(func(b *filterBatch) {
		b.set(append([]byte{keyFilterName}, name...), u64(uint64(key)))
		b.set([]byte{keyFilterNext}, u64(uint64(l.idx.next)))
		for _, m := range marks {
			b.set(filterSinceKey(m.src, key), u64(m.since))
		}
	}, false)
}

// Forget implements FilterLog.
func (l *PebbleFilterLog) Forget(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return l.failed
	}
	key, in, ok := l.idx.forget(name)
	if !ok {
		return nil
	}
	return l.write(func(b *filterBatch) {
		b.del(append([]byte{keyFilterName}, name...))
		for _, src := range in {
			b.del(filterSinceKey(src, key))
		}
	}, false)
}

// Append implements FilterLog: one batch, committed with or without sync.
func (l *PebbleFilterLog) Append(recs []FilterRecord, sync bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return l.failed
	}
	planned, err := l.idx.plan(recs)
	if err != nil {
		return err
	}
	forgotten := l.idx.apply(planned)
	return l.write(func(b *filterBatch) { // after apply: the back-pointers are set
		touched := map[message.Source]bool{}
		for _, r := range planned {
			touched[r.src] = true
			if len(r.entries) > 0 {
				b.set(filterRecordKey(r.src, r.seq), encodeFilterEntries(r.entries))
			}
		}
		for src := range touched {
			if s := l.idx.streams[src]; s != nil {
				b.setStream(src, s)
			}
		}
		for _, src := range forgotten {
			b.dropStream(src)
		}
	}, sync)
}

// Release implements FilterLog: a range deletion.
func (l *PebbleFilterLog) Release(src message.Source, upTo uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return l.failed
	}
	upTo = min(upTo, maxFilterSeq)
	_, unstarted, ok := l.idx.release(src, upTo)
	if !ok {
		return nil
	}
	return l.write(func(b *filterBatch) {
		b.delRange(filterRecordKey(src, 0), filterRecordKey(src, upTo+1))
		b.setStream(src, l.idx.streams[src])
		for _, key := range unstarted {
			b.del(filterSinceKey(src, key))
		}
	}, false)
}

// Read implements FilterLog: one chain walk over a snapshot.
func (l *PebbleFilterLog) Read(src message.Source, sub SubKey, after uint64, limit int) (FilterRead, error) {
	l.mu.Lock()
	if l.failed != nil {
		l.mu.Unlock()
		return FilterRead{}, l.failed
	}
	from, horizon, head := l.idx.readStart(src, sub, after)
	snap := l.db.NewSnapshot()
	l.mu.Unlock()
	defer snap.Close()
	return readChain(from, horizon, head, limit, func(seq uint64) (uint64, error) {
		v, closer, err := snap.Get(filterRecordKey(src, seq))
		if err != nil {
			return 0, fmt.Errorf("storage: filtering log %s: record %d of %s: %w", l.path, seq, src.Publisher, err)
		}
		defer closer.Close()
		entries, err := decodeFilterEntries(v)
		if err != nil {
			return 0, fmt.Errorf("storage: filtering log %s: record %d of %s: %v", l.path, seq, src.Publisher, err)
		}
		prev, ok := prevIn(entries, sub)
		if !ok {
			return 0, fmt.Errorf("storage: filtering log %s: record %d of %s does not list subscription %d", l.path, seq, src.Publisher, sub)
		}
		return prev, nil
	})
}

// Stats implements FilterLog.
func (l *PebbleFilterLog) Stats() FilterLogStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idx.stats()
}

// Close implements FilterLog.
func (l *PebbleFilterLog) Close() error {
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("storage: filtering log %s: %w", l.path, err)
	}
	return nil
}

// load reads the whole log into the index, checking every record: the
// keys it lists were assigned, and its back-pointers continue the chains
// read so far.
func (l *PebbleFilterLog) load() error {
	x := newFilterIndex()
	scan := func(prefix byte, fn func(k, v []byte) error) error {
		it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
		if err != nil {
			return fmt.Errorf("storage: filtering log %s: %w", l.path, err)
		}
		for it.First(); it.Valid(); it.Next() {
			if err := fn(it.Key(), it.Value()); err != nil {
				k := slices.Clone(it.Key())
				it.Close()
				return fmt.Errorf("storage: filtering log %s: record %q: %v; the log is damaged: move it aside to start this broker without it (catch-ups are then served from the publishers' logs)", l.path, k, err)
			}
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("storage: filtering log %s: %w", l.path, err)
		}
		return nil
	}
	steps := []struct {
		prefix byte
		fn     func(k, v []byte) error
	}{
		{keyFilterNext, func(k, v []byte) error {
			if len(k) != 1 || len(v) != 8 || binary.BigEndian.Uint64(v) == 0 {
				return errors.New("bad key counter")
			}
			x.next = SubKey(binary.BigEndian.Uint64(v))
			return nil
		}},
		{keyFilterName, func(k, v []byte) error {
			name := string(k[1:])
			if len(v) != 8 || x.canRegister(name) != nil {
				return errors.New("bad registration")
			}
			key := SubKey(binary.BigEndian.Uint64(v))
			if _, dup := x.keys[key]; dup || key == 0 || key >= x.next {
				return fmt.Errorf("key %d not assigned or assigned twice", key)
			}
			x.names[name], x.keys[key] = key, name
			return nil
		}},
		{keyFilterStream, func(k, v []byte) error {
			src, rest, err := parseSource(k[1:])
			if err != nil || len(rest) != 0 || len(v) != 16 {
				return errors.New("bad stream record")
			}
			s := newFilterStream(binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]))
			if s.released > s.horizon {
				return errors.New("released after its horizon")
			}
			x.streams[src] = s
			x.order = append(x.order, src)
			return nil
		}},
		{keyFilterSince, func(k, v []byte) error {
			src, rest, err := parseSource(k[1:])
			if err != nil || len(rest) != 8 || len(v) != 8 {
				return errors.New("bad registration start")
			}
			s, key, since := x.streams[src], SubKey(binary.BigEndian.Uint64(rest)), binary.BigEndian.Uint64(v)
			if _, ok := x.keys[key]; !ok || s == nil || since <= s.released || since > s.horizon {
				return errors.New("a registration start outside its stream or of an unregistered key")
			}
			s.since[key] = since
			return nil
		}},
		{keyFilterRecord, func(k, v []byte) error {
			src, rest, err := parseSource(k[1:])
			if err != nil || len(rest) != 8 {
				return errors.New("bad key")
			}
			seq, s := binary.BigEndian.Uint64(rest), x.streams[src]
			if s == nil || seq <= s.released || seq > s.horizon {
				return errors.New("a record outside its stream")
			}
			entries, err := decodeFilterEntries(v)
			if err != nil {
				return err
			}
			for _, e := range entries {
				if e.sub >= x.next {
					return fmt.Errorf("subscription key %d was never assigned", e.sub)
				}
				last, seen := s.last[e.sub]
				if seen && e.prev != last || !seen && e.prev > s.released {
					return fmt.Errorf("subscription %d does not continue its chain (back-pointer %d)", e.sub, e.prev)
				}
				s.last[e.sub] = seq
			}
			s.retained = append(s.retained, retainedRecord{seq, len(entries)})
			x.records++
			x.bytes += filterRecordBytes(len(entries))
			return nil
		}},
	}
	for _, st := range steps {
		if err := scan(st.prefix, st.fn); err != nil {
			return err
		}
	}
	l.idx = x
	return nil
}
