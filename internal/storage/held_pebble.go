package storage

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// heldDirName is the held log's directory inside the data directory.
const heldDirName = "held"

// heldMemTable is the held log's memtable size. Most of what it holds is
// dropped within moments (a record at its acknowledgement, a publication
// with its last record); a memtable that outlives that drops it before it
// is ever flushed and compacted. Two may exist at once (one flushing).
const heldMemTable = 32 << 20

// Keys of the pebble held log. A name is encoded as a 2-byte length and
// its bytes, a source as in the publication log, a seq as 8 bytes
// big-endian, so that a subscription's records sort by source, then seq.
const (
	keyEvent = 'e' // 'e' source seq → the publication's wire frame (no stamps)
	keyMeta  = 's' // 's' name → heldMeta (JSON: filter and floor)
	keyToken = 't' // 't' name → the position (checkpoint token)
	keyRec   = 'r' // 'r' name source seq → GapFrom, 8 bytes (0: a delivery of seq)
)

// PebbleHeld is a HeldLog on pebble. Safe for concurrent use.
type PebbleHeld struct {
	path string
	db   *pebble.DB
	mu   sync.Mutex
	// meta: every subscription's filter and floor (small; rewritten
	// whole when its floor moves).
	meta   map[string]*heldMeta
	events int
	buf    []byte
}

var _ HeldLog = (*PebbleHeld)(nil)

// OpenHeld opens (creating it if needed) the held log in the data
// directory.
func (d *Dir) OpenHeld() (HeldLog, error) { return OpenPebbleHeld(filepath.Join(d.path, heldDirName)) }

// OpenPebbleHeld opens the held log at path and reads its metadata. A
// log that cannot be opened or read is an error naming its path.
func OpenPebbleHeld(path string) (*PebbleHeld, error) {
	db, err := pebble.Open(path, &pebble.Options{Logger: quietLogger{}, MemTableSize: heldMemTable})
	if err != nil {
		return nil, fmt.Errorf("storage: held log %s: %w", path, err)
	}
	l := &PebbleHeld{path: path, db: db, meta: map[string]*heldMeta{}}
	if err := l.readMeta(); err != nil {
		db.Close()
		return nil, l.damaged(err)
	}
	return l, nil
}

func (l *PebbleHeld) damaged(err error) error {
	return fmt.Errorf("storage: held log %s is damaged (%v): move the data directory aside to start this broker without it", l.path, err)
}

func appendName(b []byte, name string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(name)))
	return append(b, name...)
}

func parseName(b []byte) (string, []byte, error) {
	if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
		return "", nil, errors.New("short key")
	}
	n := int(binary.BigEndian.Uint16(b))
	return string(b[2 : 2+n]), b[2+n:], nil
}

func eventKey(id message.PubID) []byte {
	b := appendSource([]byte{keyEvent}, id.Source())
	return binary.BigEndian.AppendUint64(b, id.Seq)
}

func recKey(name string, s message.Source, seq uint64) []byte {
	b := appendSource(appendName([]byte{keyRec}, name), s)
	return binary.BigEndian.AppendUint64(b, seq)
}

// prefixEnd is the first key after every key that starts with p.
func prefixEnd(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func (l *PebbleHeld) readMeta() error {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyEvent}, UpperBound: []byte{keyEvent + 1}})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		l.events++
	}
	if err := it.Close(); err != nil {
		return err
	}
	it, err = l.db.NewIter(&pebble.IterOptions{LowerBound: []byte{keyMeta}, UpperBound: []byte{keyMeta + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		name, rest, err := parseName(it.Key()[1:])
		if err != nil || len(rest) != 0 {
			return fmt.Errorf("key %q: malformed", it.Key())
		}
		m := &heldMeta{}
		if err := json.Unmarshal(it.Value(), m); err != nil {
			return fmt.Errorf("subscription %q: %w", name, err)
		}
		m.Floor = map[message.Source]uint64{}
		for _, f := range m.Floors {
			m.Floor[f.Source] = f.Seq
		}
		l.meta[name] = m
	}
	return it.Error()
}

func (l *PebbleHeld) setMeta(b *pebble.Batch, name string, m *heldMeta) error {
	m.Floors = m.sorted()
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return b.Set(appendName([]byte{keyMeta}, name), v, nil)
}

// Apply implements HeldLog: one batch, committed without sync.
func (l *PebbleHeld) Apply(c *overlay.HeldChanges) error {
	if c.Empty() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.db.NewBatch()
	defer b.Close()
	fail := func(err error) error { return fmt.Errorf("storage: held log %s: %w", l.path, err) }
	for i := range c.Events {
		p := c.Events[i]
		p.Stamps = nil
		var err error
		if l.buf, err = wire.AppendFrame(l.buf[:0], &p); err != nil {
			return fail(err)
		}
		if err := b.Set(eventKey(p.ID), l.buf, nil); err != nil {
			return fail(err)
		}
	}
	for i := range c.Subs {
		ch := &c.Subs[i]
		recs := appendName([]byte{keyRec}, ch.Name)
		if ch.Start != nil {
			if err := b.DeleteRange(recs, prefixEnd(recs), nil); err != nil {
				return fail(err)
			}
			m := &heldMeta{Filter: ch.Start.Filter, Floor: map[message.Source]uint64{}}
			for _, f := range ch.Start.Floor {
				m.Floor[f.Source] = f.Seq
			}
			l.meta[ch.Name] = m
			if err := l.setMeta(b, ch.Name, m); err != nil {
				return fail(err)
			}
		}
		m := l.meta[ch.Name]
		if m == nil {
			continue // a subscription that never started: nothing to keep
		}
		for _, r := range ch.Records {
			if err := b.Set(recKey(ch.Name, r.Source, r.Seq), binary.BigEndian.AppendUint64(nil, r.GapFrom), nil); err != nil {
				return fail(err)
			}
		}
		if len(ch.Floor) > 0 {
			for _, f := range ch.Floor {
				m.Floor[f.Source] = max(m.Floor[f.Source], f.Seq)
				if err := b.DeleteRange(recKey(ch.Name, f.Source, 0), recKey(ch.Name, f.Source, f.Seq+1), nil); err != nil {
					return fail(err)
				}
			}
			if err := l.setMeta(b, ch.Name, m); err != nil {
				return fail(err)
			}
		}
		if ch.Token != nil {
			if err := b.Set(appendName([]byte{keyToken}, ch.Name), ch.Token, nil); err != nil {
				return fail(err)
			}
		}
		if ch.Drop {
			delete(l.meta, ch.Name)
			for _, k := range [][]byte{appendName([]byte{keyMeta}, ch.Name), appendName([]byte{keyToken}, ch.Name)} {
				if err := b.Delete(k, nil); err != nil {
					return fail(err)
				}
			}
			if err := b.DeleteRange(recs, prefixEnd(recs), nil); err != nil {
				return fail(err)
			}
		}
	}
	for _, id := range c.Dropped {
		if err := b.Delete(eventKey(id), nil); err != nil {
			return fail(err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fail(err)
	}
	l.events += len(c.Events) - len(c.Dropped)
	return nil
}

// Load implements HeldLog.
func (l *PebbleHeld) Load() ([]overlay.HeldSub, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []overlay.HeldSub
	for _, name := range slices.Sorted(maps.Keys(l.meta)) {
		h, err := l.load(name, l.meta[name])
		if err != nil {
			return nil, l.damaged(err)
		}
		out = append(out, h)
	}
	return out, nil
}

func (l *PebbleHeld) load(name string, m *heldMeta) (overlay.HeldSub, error) {
	token, closer, err := l.db.Get(appendName([]byte{keyToken}, name))
	if err != nil {
		return overlay.HeldSub{}, fmt.Errorf("durable subscription %q: position: %w", name, err)
	}
	token = slices.Clone(token)
	closer.Close()
	prefix := appendName([]byte{keyRec}, name)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return overlay.HeldSub{}, err
	}
	var recs []overlay.HeldRecord
	for it.First(); it.Valid(); it.Next() {
		s, rest, err := parseSource(it.Key()[len(prefix):])
		if err != nil || len(rest) != 8 || len(it.Value()) != 8 {
			it.Close()
			return overlay.HeldSub{}, fmt.Errorf("record %q: malformed", it.Key())
		}
		recs = append(recs, overlay.HeldRecord{Source: s, Seq: binary.BigEndian.Uint64(rest), GapFrom: binary.BigEndian.Uint64(it.Value())})
	}
	if err := it.Close(); err != nil {
		return overlay.HeldSub{}, err
	}
	return heldSub(name, m, token, recs, func(id message.PubID) (*message.Pub, error) {
		v, closer, err := l.db.Get(eventKey(id))
		if err != nil {
			return nil, err
		}
		defer closer.Close()
		msg, _, err := wire.Decode(bytes.Clone(v), 0)
		if err != nil {
			return nil, err
		}
		p, ok := msg.(*message.Pub)
		if !ok || p.ID != id {
			return nil, fmt.Errorf("the record does not hold it")
		}
		return p, nil
	})
}

// Sync implements HeldLog. A commit without sync stays in pebble's
// buffers until a later write fills a block or syncs: a process crash
// loses it too. Sync writes and syncs the write-ahead log up to here.
func (l *PebbleHeld) Sync() error {
	if err := l.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("storage: held log %s: %w", l.path, err)
	}
	return nil
}

// Stats implements HeldLog.
func (l *PebbleHeld) Stats() HeldStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return HeldStats{Subs: len(l.meta), Events: l.events}
}

// Close implements HeldLog.
func (l *PebbleHeld) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.db.Close()
}
