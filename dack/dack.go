// Package dack holds the depth-acknowledgement state of one broker
// (PROTOCOL §5): its own arrived and discarded watermarks per upstream
// broker, the reports it received from brokers downstream (about itself,
// and about others, to relay), the building of the one aggregated DACK per
// link per period, and the safety rule that decides when a queued
// publication may be purged. docs/protocol.md holds the safety argument.
// Pure: no I/O, no clock.
package dack

import (
	"cmp"
	"slices"

	"github.com/deltapub/deltapub/message"
)

// BrokerID is a broker's name.
type BrokerID = message.BrokerID

// Report is what one broker (in incarnation RE) said about the stamps of
// one upstream broker (in incarnation AE).
type Report struct {
	RE, AE    uint64
	Arrived   uint64
	Discarded uint64
}

type pairKey struct{ reporter, about BrokerID }

type stored struct {
	e message.DAckEntry
	// idx is the entry's place in the store's dense arrays (ents, vers,
	// auxs).
	idx int32
	// own: Reporter is this broker; ownIdx: its place in ownKeys as of
	// the last sort (LowerDiscarded's marks).
	own    bool
	ownIdx int32
	// aboutIdx: 1 + its place in Store.aboutDense for an entry about this
	// broker, 0 for the others.
	aboutIdx int32
}

// aboutRep is the dense copy of an entry about this broker (PathThreshold
// reads these instead of the entries).
type aboutRep struct {
	ae, arrived, discarded uint64
}

// ownRef is an own entry found by the name of the broker it is about.
type ownRef struct {
	b  BrokerID
	st *stored
}

// Store holds every DACK entry this broker knows: its own (Reporter ==
// self) and those received, keeping per (reporter, about) only the newest
// incarnations and the highest watermarks. Not safe for concurrent use.
type Store struct {
	self    BrokerID
	epoch   uint64
	m       map[pairKey]*stored
	version uint64
	// The entries, densely (stored.idx): each one's version (that of its
	// last change) and the caller's two words (Cursor.Aux). A DACK is
	// built by a scan of vers for what changed since the link's last one
	// (a few cache lines for the few dozen entries of a broker's
	// neighbourhood), so a change costs one word written, not a relinking
	// of neighbours in a version-ordered list; the changes found are then
	// put in version order (few: a sort of what one DACK carries).
	ents []*stored
	vers []uint64
	auxs [][2]uint64
	// order is Newest's walk (indices into ents, newest change first),
	// valid for version orderVer.
	order    []int32
	orderVer uint64
	orderOK  bool
	// own indexes the entries with Reporter == self by About (a handful:
	// the upstream brokers within δ+1 hops); ownKeys caches OwnKeys' order.
	own      map[BrokerID]*stored
	aboutMe  map[BrokerID]*stored // entries with About == self, by Reporter (purge reads them)
	ownKeys  []*stored            // own's entries sorted by About (rebuilt when ownDirty)
	ownDirty bool
	ownVer   uint64 // increases when own gains or loses an entry or one changes incarnation (OwnVersion)
	aboutVer uint64 // increases whenever an entry about this broker changes (AboutVersion)
	aboutSet uint64 // increases whenever aboutMe gains or loses an entry (PathRef)
	// aboutDense copies aboutMe's entries (stored.aboutIdx), kept by touch.
	aboutDense []aboutRep
	// LowerDiscarded's state: the caps it applied last (by ownKeys
	// index) and which own entries changed since (lowArr), valid while
	// OwnVersion is lowVer.
	lowCaps []uint64
	lowArr  []bool
	lowVer  uint64
	lowOK   bool
	// arrCache: per stamp position, the own entry Arrive found last.
	arrCache [4]ownRef
	// slab is where new entries are carved from (alloc).
	slab []stored
	// tab caches m by a cheap hash of the pair (Put; checked by
	// comparing the pair; cleared by Forget, which drops entries). In
	// srds09, 94% of the pairs are found there with 1,024 slots (80%
	// with 256).
	tab [1024]*stored
	// Max bounds the number of pairs kept; at the bound entries about
	// brokers other than this one are no longer stored (they are relays:
	// upstream brokers then purge later, through discarded reports, never
	// earlier), and entries about this broker always are.
	Max int
}

// NewStore returns an empty store for broker self in incarnation epoch.
func NewStore(self BrokerID, epoch uint64) *Store {
	return &Store{self: self, epoch: epoch, m: map[pairKey]*stored{}, own: map[BrokerID]*stored{}, aboutMe: map[BrokerID]*stored{}, Max: 1 << 16}
}

// pairHash is a cheap hash of a pair of names (their lengths and last
// bytes) for Store.tab.
func pairHash(a, b BrokerID) uint32 {
	h := uint32(len(a))*16777619 ^ uint32(len(b))
	for i := max(0, len(a)-4); i < len(a); i++ {
		h = (h ^ uint32(a[i])) * 16777619
	}
	for i := max(0, len(b)-4); i < len(b); i++ {
		h = (h ^ uint32(b[i])) * 16777619
	}
	return h ^ h>>16
}

// alloc returns a new zero entry, carved from a slab: the entries
// created together (a broker's first publications and DACKs) lie
// together, which the walks over them (DACK building, LowerDiscarded)
// read in order.
func (s *Store) alloc() *stored {
	if len(s.slab) == 0 {
		s.slab = make([]stored, 32)
	}
	st := &s.slab[0]
	s.slab = s.slab[1:]
	return st
}

// touch gives st the next version.
func (s *Store) touch(st *stored) {
	s.version++
	if st.aboutIdx > 0 { // About == self
		s.aboutVer++
		s.aboutDense[st.aboutIdx-1] = aboutRep{st.e.AE, st.e.Arrived, st.e.Discarded}
	}
	s.vers[st.idx] = s.version
	if st.own {
		// LowerDiscarded looks at this entry again (its arrived
		// watermark may have grown). A stale index (own's set changed
		// since the sort) is harmless: LowerDiscarded then looks at all.
		if i := int(st.ownIdx); i < len(s.lowArr) {
			s.lowArr[i] = true
		}
	}
}

// add gives a new entry its place in the dense arrays (version 0, zero
// aux: touch gives it its version).
func (s *Store) add(st *stored) {
	st.idx = int32(len(s.ents))
	s.ents = append(s.ents, st)
	s.vers = append(s.vers, 0)
	s.auxs = append(s.auxs, [2]uint64{})
}

// drop removes st from the dense arrays (the last entry takes its place).
func (s *Store) drop(st *stored) {
	i, last := int(st.idx), len(s.ents)-1
	if i != last {
		m := s.ents[last]
		s.ents[i], s.vers[i], s.auxs[i] = m, s.vers[last], s.auxs[last]
		m.idx = int32(i)
	}
	s.ents[last] = nil
	s.ents, s.vers, s.auxs = s.ents[:last], s.vers[:last], s.auxs[:last]
}

// AboutVersion increases whenever what About returns may have changed:
// a caller may keep what it derived from About (purge thresholds) while
// it is unchanged.
func (s *Store) AboutVersion() uint64 { return s.aboutVer }

// Version increases whenever an entry changes.
func (s *Store) Version() uint64 { return s.version }

// Put merges e and reports whether anything changed. An entry from an
// older incarnation of its reporter, or about an older incarnation of its
// subject, than the one stored is ignored; a newer one replaces the stored
// entry entirely (a restarted broker starts from zero); within the same
// incarnations the watermarks only grow.
func (s *Store) Put(e message.DAckEntry) bool {
	k := pairKey{e.Reporter, e.About}
	// The pair's entry through the table first (a DACK's pairs are
	// mostly those of the previous DACKs), then the map.
	sl := &s.tab[pairHash(e.Reporter, e.About)%uint32(len(s.tab))]
	old, ok := *sl, false
	if old != nil && old.e.Reporter == e.Reporter && old.e.About == e.About {
		ok = true
	} else if old, ok = s.m[k]; ok {
		*sl = old
	}
	if !ok {
		if len(s.m) >= s.Max && e.About != s.self && e.Reporter != s.self {
			return false
		}
		st := s.alloc()
		st.e = e
		st.own = e.Reporter == s.self
		s.add(st)
		s.m[k] = st
		*sl = st
		if e.Reporter == s.self {
			s.own[e.About] = st
			s.ownDirty = true
			s.ownVer++
		}
		if e.About == s.self {
			s.aboutMe[e.Reporter] = st
			s.aboutSet++
			s.aboutDense = append(s.aboutDense, aboutRep{})
			st.aboutIdx = int32(len(s.aboutDense))
		}
		s.touch(st)
		return true
	}
	o := &old.e
	switch {
	case e.RE < o.RE, e.RE == o.RE && e.AE < o.AE:
		return false
	case e.RE > o.RE || e.AE > o.AE:
		old.e = e
		if e.Reporter == s.self {
			s.ownVer++ // its incarnation changed
		}
		s.touch(old)
		return true
	}
	changed := false
	if e.Arrived > o.Arrived {
		o.Arrived, changed = e.Arrived, true
	}
	if e.Discarded > o.Discarded {
		o.Discarded, changed = e.Discarded, true
	}
	if changed {
		s.touch(old)
	}
	return changed
}

// Arrive records that this broker received a publication carrying stamps
// (its own arrived watermarks only grow).
func (s *Store) Arrive(stamps []message.Stamp) {
	for i := range stamps {
		st := &stamps[i]
		// The own entry of the broker at stamp position i is mostly the
		// one of the previous publication: compared by name before
		// hashing it (arrCache; an own entry's pointer only goes away in
		// Forget, which clears the cache). A cached name is never self
		// (no own entry is cached for it), so a hit needs no self check.
		var old *stored
		var ok bool
		if i < len(s.arrCache) && s.arrCache[i].st != nil && s.arrCache[i].b == st.B {
			old, ok = s.arrCache[i].st, true
		} else if st.B == s.self {
			continue
		} else if old, ok = s.own[st.B]; ok && i < len(s.arrCache) {
			s.arrCache[i].b, s.arrCache[i].st = st.B, old
		}
		if ok && old.e.AE == st.E {
			if st.S > old.e.Arrived {
				old.e.Arrived = st.S
				s.touch(old)
			}
			continue
		}
		s.Put(message.DAckEntry{Reporter: s.self, RE: s.epoch, About: st.B, AE: st.E, Arrived: st.S})
	}
}

// Own returns this broker's own report about (about, epoch).
func (s *Store) Own(about BrokerID, epoch uint64) (Report, bool) {
	st, ok := s.own[about]
	if !ok || st.e.AE != epoch {
		return Report{}, false
	}
	return Report{st.e.RE, st.e.AE, st.e.Arrived, st.e.Discarded}, true
}

// About returns what reporter said about this broker's current incarnation.
func (s *Store) About(reporter BrokerID) (Report, bool) {
	st, ok := s.aboutMe[reporter]
	if !ok || st.e.AE != s.epoch {
		return Report{}, false
	}
	return Report{st.e.RE, st.e.AE, st.e.Arrived, st.e.Discarded}, true
}

// SetDiscarded raises this broker's own discarded watermark about
// (about, epoch) to d (never above its arrived watermark).
func (s *Store) SetDiscarded(about BrokerID, epoch, d uint64) {
	st, ok := s.own[about]
	if !ok || st.e.AE != epoch {
		return
	}
	if d > st.e.Arrived {
		d = st.e.Arrived
	}
	if d > st.e.Discarded {
		st.e.Discarded = d
		s.touch(st)
	}
}

// OwnKeys returns the upstream (broker, epoch) pairs this broker has
// arrived watermarks about, sorted.
func (s *Store) OwnKeys() []message.Stamp {
	return s.AppendOwnKeys(nil)
}

// AppendOwnKeys is OwnKeys appending to dst (no allocation when dst has
// room).
func (s *Store) AppendOwnKeys(dst []message.Stamp) []message.Stamp {
	s.sortOwn()
	for _, st := range s.ownKeys {
		dst = append(dst, message.Stamp{B: st.e.About, E: st.e.AE, S: st.e.Arrived})
	}
	return dst
}

// sortOwn brings ownKeys up to date.
func (s *Store) sortOwn() {
	if s.ownDirty {
		// Cached as pointers (no map lookup per key per call): an own
		// entry is only ever replaced through own, which sets ownDirty.
		s.ownKeys = s.ownKeys[:0]
		for _, st := range s.own {
			s.ownKeys = append(s.ownKeys, st)
		}
		slices.SortFunc(s.ownKeys, func(a, b *stored) int { return cmp.Compare(a.e.About, b.e.About) })
		for i, st := range s.ownKeys {
			st.ownIdx = int32(i)
		}
		s.ownDirty = false
	}
}

// Forget drops every entry by or about id older than incarnation epoch
// (a restarted broker's old reports and the reports about its old stamps).
func (s *Store) Forget(id BrokerID, epoch uint64) {
	s.arrCache = [4]ownRef{}
	s.tab = [1024]*stored{}
	dropped := false
	for k, st := range s.m {
		if (k.reporter == id && st.e.RE < epoch) || (k.about == id && st.e.AE < epoch) {
			delete(s.m, k)
			s.drop(st)
			if k.reporter == s.self {
				delete(s.own, k.about)
				s.ownDirty = true
				s.ownVer++
			}
			if k.about == s.self {
				delete(s.aboutMe, k.reporter)
				s.aboutVer++
				s.aboutSet++
				dropped = true
			}
			s.version++
		}
	}
	if dropped {
		// Renumbered (the order is the map's: only the values are read).
		s.aboutDense = s.aboutDense[:0]
		for _, st := range s.aboutMe {
			s.aboutDense = append(s.aboutDense, aboutRep{st.e.AE, st.e.Arrived, st.e.Discarded})
			st.aboutIdx = int32(len(s.aboutDense))
		}
	}
}

// Build returns the entries changed after version since for which keep
// returns true, newest change first. It is the content of one aggregated
// DACK on one link: O(neighbourhood²) at most, independent of the number
// of publications (the overlay finds what changed by a scan of Versions:
// one word per entry).
// The order is a deterministic function of the broker's inputs; receivers
// merge each entry independently, so it carries no meaning. (The overlay
// selects a link's entries from Versions and puts them in this order;
// Build is AppendChanged filtered for one link.)
func (s *Store) Build(since uint64, keep func(reporter, about BrokerID) bool) []message.DAckEntry {
	var out []message.DAckEntry
	for _, c := range s.AppendChanged(nil, since) {
		if keep(c.Entry.Reporter, c.Entry.About) {
			out = append(out, c.Entry)
		}
	}
	return out
}

// Changed is one entry of AppendChanged: an entry and the version of its
// last change.
type Changed struct {
	Entry   message.DAckEntry
	Version uint64
}

// AppendChanged appends to dst the entries changed after version since,
// newest change first (Build's order, unfiltered): a caller building the
// DACKs of several links walks the changes once instead of once per link.
func (s *Store) AppendChanged(dst []Changed, since uint64) []Changed {
	for c := s.Newest(); c.Valid() && c.Version() > since; c = c.Prev() {
		dst = append(dst, Changed{Entry: *c.Entry(), Version: c.Version()})
	}
	return dst
}

// Len is the number of stored entries.
func (s *Store) Len() int { return len(s.m) }

// Safe is the safety rule of PROTOCOL §5, for one publication this broker
// stamped s, and one recipient reached along path (the brokers after this
// one, up to and including the recipient, at most δ+1): safe when every
// broker of the path has reported arrived ≥ s, or some broker of the path
// has reported discarded ≥ s. report returns the current report of a
// broker about this broker's current incarnation. An empty path (the
// recipient is unknown) is never safe.
func Safe(path []BrokerID, s uint64, report func(BrokerID) (Report, bool)) bool {
	if len(path) == 0 {
		return false
	}
	all := true
	for _, b := range path {
		r, ok := report(b)
		if ok && r.Discarded >= s {
			return true
		}
		if !ok || r.Arrived < s {
			all = false
		}
	}
	return all
}

// Threshold is Safe for every stamp at once: the largest s for which
// Safe(path, s, report) holds (0: none), i.e. the larger of the lowest
// arrived watermark on the path (0 if a broker has not reported) and the
// highest discarded one. A purge pass computes it once per recipient and
// compares stamps against it.
func Threshold(path []BrokerID, report func(BrokerID) (Report, bool)) uint64 {
	if len(path) == 0 {
		return 0
	}
	th := newThreshold()
	for _, b := range path {
		if r, ok := report(b); ok {
			th.add(r.Arrived, r.Discarded)
		} else {
			th.missing()
		}
	}
	return th.value()
}

// threshold accumulates Threshold over a path's reports: the lowest
// arrived watermark (0 once a broker has not reported) and the highest
// discarded one. Threshold and PathThreshold both go through it, so the
// safety rule is written once.
type threshold struct{ minArrived, maxDiscarded uint64 }

func newThreshold() threshold { return threshold{minArrived: ^uint64(0)} }

func (t *threshold) add(arrived, discarded uint64) {
	t.minArrived = min(t.minArrived, arrived)
	t.maxDiscarded = max(t.maxDiscarded, discarded)
}

// missing is a broker on the path that has not reported.
func (t *threshold) missing() { t.minArrived = 0 }

func (t *threshold) value() uint64 { return max(t.minArrived, t.maxDiscarded) }
