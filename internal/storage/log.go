package storage

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/deltapub/deltapub/message"
)

// Log is the publication log of a publisher hosting broker (PHB): every
// publication it accepted from a local publisher, with its full identity,
// kept until the overlay made it safe (docs/durable.md). Appends and
// releases of one call are atomic; a call with sync = true returns once
// it and everything before it is on disk.
type Log interface {
	// Append adds publications (their Stamps are not kept). sync: on
	// disk before it returns; otherwise handed to the store (written,
	// not synced).
	Append(pubs []message.Pub, sync bool) error
	// Release drops the publications of src up to seq (safe downstream).
	// Not synced: a lost release only makes recovery offer a publication
	// again, which the overlay's duplicate filter drops; the next synced
	// Append makes it durable too.
	Release(rs []Release) error
	// Recover reads what the log holds: the retained publications, per
	// source in sequence order, and every source's last logged seq.
	Recover() (Recovered, error)
	// Stats describes what the log holds now.
	Stats() LogStats
	// Sync makes every call before it durable. An Append without sync
	// may otherwise stay in the store's buffers until a later write (a
	// process crash then loses it too).
	Sync() error
	// Close releases the log's resources.
	Close() error
}

// Release says that a source's publications up to Seq are safe.
type Release struct {
	Source message.Source
	Seq    uint64
}

// Recovered is the content of a log at start.
type Recovered struct {
	// Pubs are the retained publications, sorted by source, then seq.
	Pubs []message.Pub
	// Last is every known source's last logged sequence number, sorted
	// by source; Seq of a source with nothing retained is its last one.
	Last []message.PubID
}

// LogStats describes a log.
type LogStats struct {
	Bytes   int64         // retained publications, as RecordSize counts them
	Records int           // retained publications
	Sources []SourceRange // per source with something retained, sorted
}

// SourceRange is the retained range [First, Last] of one source.
type SourceRange struct {
	Source      message.Source
	First, Last uint64
}

// RecordSize is what one publication counts against a log's size bound
// (message.LogSize: the core bounds the log with the same count).
func RecordSize(p *message.Pub) int64 { return p.LogSize() }

// maxLogSources bounds the per-source records of a log: at the bound the
// oldest sources with nothing retained are forgotten (a publisher of such
// a source reconnecting after a restart is then accepted at any seq, as
// by a broker without a log).
const maxLogSources = 1 << 16

// srcMeta is a log's record of one source.
type srcMeta struct {
	last  uint64   // last seq appended
	first uint64   // first seq retained (> last: none)
	sizes []uint64 // sizes of retained records, from first on
	bytes int64
}

// logIndex is the in-memory index shared by both logs: what is retained
// per source and the order sources were first seen (for the bound).
type logIndex struct {
	src   map[message.Source]*srcMeta
	order []message.Source
	bytes int64
	recs  int
}

func newLogIndex() logIndex { return logIndex{src: map[message.Source]*srcMeta{}} }

// add records p appended; forgotten lists sources dropped at the bound.
func (x *logIndex) add(p *message.Pub) (forgotten []message.Source) {
	s := p.ID.Source()
	m := x.src[s]
	if m == nil {
		m = &srcMeta{first: p.ID.Seq}
		x.src[s] = m
		x.order = append(x.order, s)
		forgotten = x.trim()
	}
	if m.first > m.last || len(m.sizes) == 0 {
		m.first = p.ID.Seq
	} else if p.ID.Seq != m.last+1 {
		// The core appends a source densely; a hole here would make
		// sizes disagree with seqs. Start the retained range anew
		// (everything before is kept by the store until released).
		m.first = p.ID.Seq - uint64(len(m.sizes))
	}
	m.last = max(m.last, p.ID.Seq)
	sz := RecordSize(p)
	m.sizes = append(m.sizes, uint64(sz))
	m.bytes += sz
	x.bytes += sz
	x.recs++
	return forgotten
}

// noteLast records that s's last logged seq is at least seq (a source
// with nothing retained is known by its last seq alone).
func (x *logIndex) noteLast(s message.Source, seq uint64) {
	m := x.src[s]
	if m == nil {
		m = &srcMeta{last: seq, first: seq + 1}
		x.src[s] = m
		x.order = append(x.order, s)
	}
	m.last = max(m.last, seq)
}

// release drops the records of s up to seq from the index.
func (x *logIndex) release(s message.Source, seq uint64) {
	m := x.src[s]
	if m == nil {
		return
	}
	for len(m.sizes) > 0 && m.first <= seq {
		sz := int64(m.sizes[0])
		m.sizes = m.sizes[1:]
		m.first++
		m.bytes -= sz
		x.bytes -= sz
		x.recs--
	}
	if len(m.sizes) == 0 {
		m.sizes = nil
		m.first = m.last + 1
	}
}

// trim forgets the oldest sources with nothing retained beyond
// maxLogSources.
func (x *logIndex) trim() (forgotten []message.Source) {
	if len(x.order) <= maxLogSources {
		return nil
	}
	x.order, forgotten = dropOldest(x.order, len(x.order)-maxLogSources, func(s message.Source) bool { return len(x.src[s].sizes) == 0 })
	for _, s := range forgotten {
		delete(x.src, s)
	}
	return forgotten
}

// dropOldest takes up to excess entries that may go out of order (oldest
// first, order kept) and returns what is left and what was taken.
func dropOldest[K comparable](order []K, excess int, mayGo func(K) bool) (kept, dropped []K) {
	kept = order[:0]
	for _, k := range order {
		if excess > 0 && mayGo(k) {
			dropped = append(dropped, k)
			excess--
			continue
		}
		kept = append(kept, k)
	}
	clear(order[len(kept):])
	return kept, dropped
}

func (x *logIndex) stats() LogStats {
	st := LogStats{Bytes: x.bytes, Records: x.recs}
	for s, m := range x.src {
		if len(m.sizes) > 0 {
			st.Sources = append(st.Sources, SourceRange{Source: s, First: m.first, Last: m.first + uint64(len(m.sizes)) - 1})
		}
	}
	slices.SortFunc(st.Sources, func(a, b SourceRange) int { return compareSource(a.Source, b.Source) })
	return st
}

func (x *logIndex) lasts() []message.PubID {
	out := make([]message.PubID, 0, len(x.src))
	for s, m := range x.src {
		out = append(out, message.PubID{Publisher: s.Publisher, Epoch: s.Epoch, Seq: m.last})
	}
	slices.SortFunc(out, func(a, b message.PubID) int { return compareSource(a.Source(), b.Source()) })
	return out
}

func compareSource(a, b message.Source) int {
	return cmp.Or(cmp.Compare(a.Publisher, b.Publisher), cmp.Compare(a.Epoch, b.Epoch))
}

// MemoryLog is a Log in memory: what survives a "crash" is everything
// appended before it (each Append is carried out whole, as the simulator
// carries out a Ready whole), which models fsync durability. Safe for
// concurrent use.
type MemoryLog struct {
	mu   sync.Mutex
	pubs map[message.Source][]message.Pub // retained, in seq order
	idx  logIndex
}

var _ Log = (*MemoryLog)(nil)

// NewMemoryLog returns an empty log.
func NewMemoryLog() *MemoryLog {
	return &MemoryLog{pubs: map[message.Source][]message.Pub{}, idx: newLogIndex()}
}

// Append implements Log.
func (l *MemoryLog) Append(pubs []message.Pub, _ bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range pubs {
		p := pubs[i]
		p.Stamps = nil
		s := p.ID.Source()
		if q := l.pubs[s]; len(q) > 0 && q[len(q)-1].ID.Seq >= p.ID.Seq {
			return fmt.Errorf("storage: log: %s appended after seq %d", p.ID, q[len(q)-1].ID.Seq)
		}
		l.pubs[s] = append(l.pubs[s], p)
		for _, f := range l.idx.add(&p) {
			delete(l.pubs, f)
		}
	}
	return nil
}

// Release implements Log.
func (l *MemoryLog) Release(rs []Release) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		q := l.pubs[r.Source]
		k := 0
		for k < len(q) && q[k].ID.Seq <= r.Seq {
			k++
		}
		if k == len(q) {
			delete(l.pubs, r.Source)
		} else {
			l.pubs[r.Source] = slices.Clone(q[k:])
		}
		l.idx.release(r.Source, r.Seq)
	}
	return nil
}

// Recover implements Log.
func (l *MemoryLog) Recover() (Recovered, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rec Recovered
	srcs := make([]message.Source, 0, len(l.pubs))
	for s := range l.pubs {
		srcs = append(srcs, s)
	}
	slices.SortFunc(srcs, compareSource)
	for _, s := range srcs {
		rec.Pubs = append(rec.Pubs, l.pubs[s]...)
	}
	rec.Last = l.idx.lasts()
	return rec, nil
}

// Stats implements Log.
func (l *MemoryLog) Stats() LogStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idx.stats()
}

// Close implements Log; the content stays for the next incarnation.
func (l *MemoryLog) Close() error { return nil }

// Sync implements Log: in memory, everything is kept.
func (l *MemoryLog) Sync() error { return nil }
