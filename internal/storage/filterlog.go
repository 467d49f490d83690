package storage

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/message"
)

// FilterLog is the persistent filtering log of a subscriber hosting
// broker (SHB): the Gryphon paper's PFS (docs/durable.md). Per source it
// keeps one stream with one record per seq that matched at least one
// durable subscription: the seq and the matching subscriptions, each with
// the seq of its previous record in the stream (a back-pointer), so that a
// catch-up read follows one subscription's chain and skips the records of
// the others. The events themselves are not kept: the PHB's publication
// log has them. It is the paper's layout, which `deltapub bench gryphon
// --pfs` measures against per-subscriber queues (docs/results/gryphon.md).
// The broker keeps what its durable subscriptions hold in HeldLog
// (held.go) instead: the same idea (each event once, a per-subscription
// index) with the events kept too, since a PHB releases them once they are
// safe, and without back-pointers, since a restart reads each index whole.
//
// Each call is atomic. A call with sync = true returns once it and every
// call before it is on disk; a call without sync is made durable by the
// next synced Append, and a crash may lose it (never a part of it).
type FilterLog interface {
	// Register returns the key of the durable subscription name,
	// assigning one on the name's first registration. A durable key is
	// never given to another name, even after Forget: retained records
	// keep listing it. The log answers for a new key only from then on
	// (Read's From): it records, per stream, the horizon at registration
	// (one small write per stream).
	Register(name string) (SubKey, error)
	// Forget drops name's registration and chain heads; the records that
	// list its key stay until released.
	Forget(name string) error
	// Append adds records; each source's seqs must increase, from call to
	// call too. A record says that Subs matched Seq and no registered
	// subscription matched a seq between the stream's previous record and
	// Seq. A record without Subs writes nothing but that silence (the
	// stream's horizon moves to Seq). A new stream answers from its first
	// record on.
	Append(recs []FilterRecord, sync bool) error
	// Read returns the seqs after after that matched sub, in order, in one
	// batch of at most limit, and the range the answer is complete for. It
	// follows sub's chain back from its newest record to after: its cost
	// grows with the matches of sub since after, not with the stream.
	Read(src message.Source, sub SubKey, after uint64, limit int) (FilterRead, error)
	// Release drops src's records up to upTo (every durable subscription
	// has consumed them); the log answers only after upTo from then on.
	// Not synced: the next synced Append makes it durable, and a lost
	// release only keeps records that are still true.
	Release(src message.Source, upTo uint64) error
	// Stats describes what the log holds now.
	Stats() FilterLogStats
	// Close releases the log's resources.
	Close() error
}

// SubKey is a durable subscription's key in a filtering log, assigned by
// the log (Register): 8 bytes in every record that lists it where a name
// takes up to checkpoint.MaxName, and kept with the records it indexes,
// so that the name → key table is exactly as durable as they are.
type SubKey uint64

// FilterRecord is one matched seq of a source and the subscriptions it
// matched (empty: silence up to Seq).
type FilterRecord struct {
	Source message.Source
	Seq    uint64
	Subs   []SubKey
}

// FilterRead is the answer to a Read: every seq in (From, UpTo] that
// matched is in Seqs, so the seqs between are silence for the
// subscription. From is after, or later where the log does not know: the
// stream's records up to there were released, or the stream began, or the
// subscription was registered, after after. UpTo == From: the log knows
// nothing after From.
type FilterRead struct {
	Seqs       []uint64
	From, UpTo uint64
}

// FilterLogStats describes a filtering log.
type FilterLogStats struct {
	Records int   // retained records
	Bytes   int64 // their size as the paper counts it: 8 + 16 per listed subscription
	Streams int   // sources known
	Subs    int   // registered subscriptions
}

// Bounds of a filtering log.
const (
	// maxFilterSubs bounds the registered subscriptions, and so the
	// subscriptions of one record (8 + 16·65536 bytes, 1 MiB): the
	// overlay's bound on a broker's durable subscriptions. Register
	// refuses beyond it.
	maxFilterSubs = 1 << 16
	// maxFilterStreams bounds the streams kept: beyond it the oldest with
	// nothing retained are forgotten. That is safe: a source that comes
	// back starts a new stream, answering from its first record on.
	maxFilterStreams = 1 << 16
	// maxFilterRead bounds the seqs of one Read; a longer answer ends
	// earlier (UpTo says where).
	maxFilterRead = 1 << 20
	// maxFilterSeq keeps seqs clear of the encodings' limits.
	maxFilterSeq = 1<<63 - 1
)

// filterRecordBytes is a record's size as the paper counts it.
func filterRecordBytes(subs int) int64 { return 8 + 16*int64(subs) }

// filterEntry is one subscription of a record and the seq of its
// previous record in the stream (0: none retained).
type filterEntry struct {
	sub  SubKey
	prev uint64
}

// retainedRecord is what the index keeps of a retained record.
type retainedRecord struct {
	seq  uint64
	subs int
}

// filterStream is the index of one source's stream.
type filterStream struct {
	horizon  uint64 // the stream answers for seqs up to here…
	released uint64 // …after this (≤ horizon)
	// last is the seq of the last retained record of each subscription
	// that has one.
	last map[SubKey]uint64
	// since is, per subscription registered while the stream answered for
	// something, the horizon then: the log knows nothing of it before.
	since    map[SubKey]uint64
	retained []retainedRecord // in seq order
}

func newFilterStream(horizon, released uint64) *filterStream {
	return &filterStream{horizon: horizon, released: released, last: map[SubKey]uint64{}, since: map[SubKey]uint64{}}
}

// from is where an answer for sub after after begins.
func (s *filterStream) from(sub SubKey, after uint64) uint64 {
	return max(after, s.released, s.since[sub])
}

// filterIndex is the in-memory state shared by both filtering logs: the
// registrations and, per stream, its horizon and chain heads.
type filterIndex struct {
	streams map[message.Source]*filterStream
	order   []message.Source // in the order first seen, for the bound
	names   map[string]SubKey
	keys    map[SubKey]string
	next    SubKey // the next key to assign
	records int
	bytes   int64
}

func newFilterIndex() filterIndex {
	return filterIndex{streams: map[message.Source]*filterStream{}, names: map[string]SubKey{}, keys: map[SubKey]string{}, next: 1}
}

// clone copies the index (records' content is shared, never changed).
func (x *filterIndex) clone() filterIndex {
	c := *x
	c.streams = make(map[message.Source]*filterStream, len(x.streams))
	for src, s := range x.streams {
		cs := *s
		cs.last, cs.since, cs.retained = maps.Clone(s.last), maps.Clone(s.since), slices.Clone(s.retained)
		c.streams[src] = &cs
	}
	c.order = slices.Clone(x.order)
	c.names, c.keys = maps.Clone(x.names), maps.Clone(x.keys)
	return c
}

// sinceMark is a registration's start in one stream.
type sinceMark struct {
	src   message.Source
	since uint64
}

// register returns name's key; marks are the starts of a new key.
func (x *filterIndex) register(name string) (key SubKey, marks []sinceMark, err error) {
	if k, ok := x.names[name]; ok {
		return k, nil, nil
	}
	if err := x.canRegister(name); err != nil {
		return 0, nil, err
	}
	key = x.next
	x.next++
	x.names[name], x.keys[key] = key, name
	for src, s := range x.streams {
		if s.horizon > s.released {
			s.since[key] = s.horizon
			marks = append(marks, sinceMark{src, s.horizon})
		}
	}
	return key, marks, nil
}

// canRegister refuses a name register would refuse.
func (x *filterIndex) canRegister(name string) error {
	if name == "" || len(name) > checkpoint.MaxName {
		return fmt.Errorf("storage: filtering log: subscription name of %d bytes, want 1 to %d", len(name), checkpoint.MaxName)
	}
	if _, ok := x.names[name]; !ok && len(x.names) >= maxFilterSubs {
		return fmt.Errorf("storage: filtering log: %d subscriptions registered, at most %d", len(x.names), maxFilterSubs)
	}
	return nil
}

// forget drops name; in lists the streams where its key had a start.
func (x *filterIndex) forget(name string) (key SubKey, in []message.Source, ok bool) {
	key, ok = x.names[name]
	if !ok {
		return 0, nil, false
	}
	delete(x.names, name)
	delete(x.keys, key)
	for src, s := range x.streams {
		delete(s.last, key)
		if _, had := s.since[key]; had {
			delete(s.since, key)
			in = append(in, src)
		}
	}
	return key, in, true
}

// plannedRecord is a checked record, its back-pointers set by apply.
type plannedRecord struct {
	src     message.Source
	seq     uint64
	entries []filterEntry // sorted by key; none: silence up to seq
}

// plan checks recs against the index, changing nothing: a refused batch
// leaves the log as it was.
func (x *filterIndex) plan(recs []FilterRecord) ([]plannedRecord, error) {
	horizon := map[message.Source]uint64{}
	out := make([]plannedRecord, 0, len(recs))
	for _, r := range recs {
		h, seen := horizon[r.Source]
		if s := x.streams[r.Source]; !seen && s != nil {
			h = s.horizon
		}
		if r.Seq <= h || r.Seq > maxFilterSeq {
			return nil, fmt.Errorf("storage: filtering log: %s seq %d appended after seq %d", r.Source.Publisher, r.Seq, h)
		}
		horizon[r.Source] = r.Seq
		subs := slices.Clone(r.Subs)
		slices.Sort(subs)
		subs = slices.Compact(subs)
		if len(subs) > maxFilterSubs {
			return nil, fmt.Errorf("storage: filtering log: a record of %d subscriptions, at most %d", len(subs), maxFilterSubs)
		}
		p := plannedRecord{src: r.Source, seq: r.Seq, entries: make([]filterEntry, len(subs))}
		for i, sub := range subs {
			if _, ok := x.keys[sub]; !ok {
				return nil, fmt.Errorf("storage: filtering log: subscription key %d is not registered", sub)
			}
			p.entries[i].sub = sub
		}
		out = append(out, p)
	}
	return out, nil
}

// apply adds planned records to the index, setting their back-pointers;
// forgotten are the streams dropped at the bound. Applied again to an
// index in the state this one was in, it sets the same back-pointers.
func (x *filterIndex) apply(recs []plannedRecord) (forgotten []message.Source) {
	for _, r := range recs {
		s := x.streams[r.src]
		if s == nil {
			s = newFilterStream(r.seq-1, r.seq-1)
			x.streams[r.src] = s
			x.order = append(x.order, r.src)
			forgotten = append(forgotten, x.trim(r.src)...)
		}
		s.horizon = r.seq
		if len(r.entries) == 0 {
			continue
		}
		for i, e := range r.entries {
			r.entries[i].prev = s.last[e.sub]
			s.last[e.sub] = r.seq
		}
		s.retained = append(s.retained, retainedRecord{r.seq, len(r.entries)})
		x.records++
		x.bytes += filterRecordBytes(len(r.entries))
	}
	return forgotten
}

// trim forgets the oldest streams with nothing retained beyond
// maxFilterStreams, keeping the one being started.
func (x *filterIndex) trim(keep message.Source) (forgotten []message.Source) {
	if len(x.order) <= maxFilterStreams {
		return nil
	}
	x.order, forgotten = dropOldest(x.order, len(x.order)-maxFilterStreams, func(src message.Source) bool {
		return src != keep && len(x.streams[src].retained) == 0
	})
	for _, src := range forgotten {
		delete(x.streams, src)
	}
	return forgotten
}

// release drops src's records up to upTo from the index: dropped are
// their seqs, unstarted the keys whose start it passed.
func (x *filterIndex) release(src message.Source, upTo uint64) (dropped []uint64, unstarted []SubKey, ok bool) {
	s := x.streams[src]
	if s == nil || upTo <= s.released {
		return nil, nil, false
	}
	s.released, s.horizon = upTo, max(s.horizon, upTo)
	k := sort.Search(len(s.retained), func(i int) bool { return s.retained[i].seq > upTo })
	for _, r := range s.retained[:k] {
		dropped = append(dropped, r.seq)
		x.records--
		x.bytes -= filterRecordBytes(r.subs)
	}
	s.retained = slices.Clone(s.retained[k:])
	maps.DeleteFunc(s.last, func(_ SubKey, seq uint64) bool { return seq <= upTo })
	for key, since := range s.since {
		if since <= upTo {
			delete(s.since, key)
			unstarted = append(unstarted, key)
		}
	}
	return dropped, unstarted, true
}

// readStart is what a Read needs of the index: where the answer begins,
// the horizon, and the head of sub's chain.
func (x *filterIndex) readStart(src message.Source, sub SubKey, after uint64) (from, horizon, head uint64) {
	s := x.streams[src]
	if s == nil {
		return after, after, 0
	}
	from = s.from(sub, after)
	return from, max(s.horizon, from), s.last[sub]
}

func (x *filterIndex) stats() FilterLogStats {
	return FilterLogStats{Records: x.records, Bytes: x.bytes, Streams: len(x.streams), Subs: len(x.names)}
}

// readChain walks sub's chain back from head to from and returns the
// answer: at most limit seqs, the oldest first. prevOf gives the
// back-pointer of sub in the record at seq.
func readChain(from, horizon, head uint64, limit int, prevOf func(seq uint64) (uint64, error)) (FilterRead, error) {
	if limit < 1 {
		return FilterRead{}, errors.New("storage: filtering log: a read of fewer than 1 seq")
	}
	limit = min(limit, maxFilterRead)
	// The walk goes newest first; a ring keeps the oldest limit.
	ring := make([]uint64, 0, min(limit, 1024))
	n := 0
	for seq := head; seq > from; n++ {
		if len(ring) < limit {
			ring = append(ring, seq)
		} else {
			ring[n%limit] = seq
		}
		prev, err := prevOf(seq)
		if err != nil {
			return FilterRead{}, err
		}
		if prev >= seq {
			return FilterRead{}, fmt.Errorf("storage: filtering log: record %d points forward to %d", seq, prev)
		}
		seq = prev
	}
	out := FilterRead{From: from, UpTo: horizon, Seqs: make([]uint64, 0, len(ring))}
	for i := range len(ring) {
		out.Seqs = append(out.Seqs, ring[(n-1-i)%limit]) // the last written slot holds the oldest
	}
	if n > limit {
		out.UpTo = out.Seqs[len(out.Seqs)-1] // complete up to the last seq returned
	}
	return out, nil
}

// prevIn finds sub's back-pointer among a record's entries.
func prevIn(entries []filterEntry, sub SubKey) (uint64, bool) {
	i, ok := slices.BinarySearchFunc(entries, sub, func(e filterEntry, k SubKey) int {
		switch {
		case e.sub < k:
			return -1
		case e.sub > k:
			return 1
		}
		return 0
	})
	if !ok {
		return 0, false
	}
	return entries[i].prev, true
}

// memFilterState is the content of a MemoryFilterLog.
type memFilterState struct {
	idx     filterIndex
	records map[message.Source]map[uint64][]filterEntry
}

func newMemFilterState() *memFilterState {
	return &memFilterState{idx: newFilterIndex(), records: map[message.Source]map[uint64][]filterEntry{}}
}

func (st *memFilterState) clone() *memFilterState {
	c := &memFilterState{idx: st.idx.clone(), records: make(map[message.Source]map[uint64][]filterEntry, len(st.records))}
	for src, recs := range st.records {
		c.records[src] = maps.Clone(recs)
	}
	return c
}

func (st *memFilterState) append(recs []plannedRecord) {
	for _, src := range st.idx.apply(recs) {
		delete(st.records, src)
	}
	for _, r := range recs {
		if len(r.entries) == 0 {
			continue
		}
		if st.records[r.src] == nil {
			st.records[r.src] = map[uint64][]filterEntry{}
		}
		st.records[r.src][r.seq] = r.entries
	}
}

func (st *memFilterState) release(src message.Source, upTo uint64) {
	dropped, _, _ := st.idx.release(src, upTo)
	for _, seq := range dropped {
		delete(st.records[src], seq)
	}
}

// MemoryFilterLog is a FilterLog in memory, for the simulator. Its crash
// model: Crash keeps exactly what was synced (calls up to the last synced
// Append, or Close) and loses the rest. Safe for concurrent use.
type MemoryFilterLog struct {
	mu     sync.Mutex
	live   *memFilterState
	synced *memFilterState
	// pending are the calls since the last sync, to replay on synced.
	pending []func(*memFilterState)
}

var _ FilterLog = (*MemoryFilterLog)(nil)

// NewMemoryFilterLog returns an empty log.
func NewMemoryFilterLog() *MemoryFilterLog {
	return &MemoryFilterLog{live: newMemFilterState(), synced: newMemFilterState()}
}

// do applies op now and to the synced state at the next sync.
func (l *MemoryFilterLog) do(op func(*memFilterState)) {
	op(l.live)
	l.pending = append(l.pending, op)
}

func (l *MemoryFilterLog) sync() {
	for _, op := range l.pending {
		op(l.synced)
	}
	l.pending = nil
}

// Crash loses everything not synced, as a machine crash loses what a
// pebble log had not synced; the log carries on from what is left.
func (l *MemoryFilterLog) Crash() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = nil
	l.live = l.synced.clone()
}

// Register implements FilterLog.
func (l *MemoryFilterLog) Register(name string) (SubKey, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k, ok := l.live.idx.names[name]; ok {
		return k, nil
	}
	if err := l.live.idx.canRegister(name); err != nil {
		return 0, err
	}
	var key SubKey
	l.do(func(st *memFilterState) { key, _, _ = st.idx.register(name) })
	return key, nil
}

// Forget implements FilterLog.
func (l *MemoryFilterLog) Forget(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.do(func(st *memFilterState) { st.idx.forget(name) })
	return nil
}

// Append implements FilterLog.
func (l *MemoryFilterLog) Append(recs []FilterRecord, sync bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	planned, err := l.live.idx.plan(recs)
	if err != nil {
		return err
	}
	if len(planned) > 0 {
		l.do(func(st *memFilterState) { st.append(planned) })
	}
	if sync {
		l.sync()
	}
	return nil
}

// Read implements FilterLog.
func (l *MemoryFilterLog) Read(src message.Source, sub SubKey, after uint64, limit int) (FilterRead, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from, horizon, head := l.live.idx.readStart(src, sub, after)
	recs := l.live.records[src]
	return readChain(from, horizon, head, limit, func(seq uint64) (uint64, error) {
		prev, ok := prevIn(recs[seq], sub)
		if !ok {
			return 0, fmt.Errorf("storage: filtering log: record %d of %s does not list subscription %d", seq, src.Publisher, sub)
		}
		return prev, nil
	})
}

// Release implements FilterLog.
func (l *MemoryFilterLog) Release(src message.Source, upTo uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.do(func(st *memFilterState) { st.release(src, upTo) })
	return nil
}

// Stats implements FilterLog.
func (l *MemoryFilterLog) Stats() FilterLogStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live.idx.stats()
}

// Close implements FilterLog: a clean close keeps everything, as a
// pebble log's does; the content stays for the next incarnation.
func (l *MemoryFilterLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sync()
	return nil
}
