package dack

import (
	"cmp"
	"slices"

	"github.com/deltapub/deltapub/message"
)

// Cursor is at one entry of the store: either on a walk of the entries
// in version order, newest change first (Newest, Prev: AppendChanged's
// order), or at an entry by its dense index (At, for a scan of
// Versions). A cursor is valid until the store next changes.
type Cursor struct {
	s *Store
	i int32 // the entry's dense index (-1: none)
	k int32 // its place in s.order (Newest's walk; -1: made by At)
}

// Newest returns a cursor at the entry changed last (invalid when the
// store is empty). The walk sorts the entries by version (kept while the
// store is unchanged): for tests and slow paths; the DACK pass scans
// Versions.
func (s *Store) Newest() Cursor {
	if !s.orderOK || s.orderVer != s.version || len(s.order) != len(s.ents) {
		s.order = s.order[:0]
		for i := range s.ents {
			s.order = append(s.order, int32(i))
		}
		slices.SortFunc(s.order, func(a, b int32) int { return cmp.Compare(s.vers[b], s.vers[a]) })
		s.orderVer, s.orderOK = s.version, true
	}
	return s.walkAt(0)
}

func (s *Store) walkAt(k int32) Cursor {
	if int(k) >= len(s.order) {
		return Cursor{s, -1, k}
	}
	return Cursor{s, s.order[k], k}
}

// Valid reports whether the cursor is at an entry.
func (c Cursor) Valid() bool { return c.i >= 0 }

// Prev moves to the entry changed before this one (on a walk from
// Newest).
func (c Cursor) Prev() Cursor { return c.s.walkAt(c.k + 1) }

// Versions returns the version of each entry's last change, by dense
// index (read only, valid until the store next changes): a caller finds
// what changed after a version by a scan of it, then reads those entries
// through At.
func (s *Store) Versions() []uint64 { return s.vers }

// Auxes returns each entry's Aux by dense index (valid until the store
// next changes).
func (s *Store) Auxes() [][2]uint64 { return s.auxs }

// At returns a cursor at the entry of dense index i (0 ≤ i <
// len(Versions())); Prev is not for it.
func (s *Store) At(i int) Cursor { return Cursor{s, int32(i), -1} }

// Version is the version of the entry's last change.
func (c Cursor) Version() uint64 { return c.s.vers[c.i] }

// Entry is the entry itself: read only.
func (c Cursor) Entry() *message.DAckEntry { return &c.s.ents[c.i].e }

// Aux is two words the caller may keep with the entry (what it derived
// from the entry's reporter and about, which never change for an entry):
// zero when the entry is created, never written by the store. Kept
// densely, apart from the entry: a scan reads them without the entry.
func (c Cursor) Aux() *[2]uint64 { return &c.s.auxs[c.i] }

// PathRef is a path of brokers resolved to the store's entries about this
// broker (one per broker of the path, or none), so that its Threshold
// reads them without a lookup by name. It is resolved again whenever the
// set of such entries changed (a reporter's first entry, Forget).
//
// A PathRef is used in place (not copied once resolved): idx then points
// into its own small array.
type PathRef struct {
	path []BrokerID
	idx  []int32 // per broker: 1 + its index in the store's aboutDense, 0: no entry
	set  uint64  // the store's aboutSet idx holds for
	ok   bool    // idx resolved once
	// small holds idx for a path of up to δ+1 = 4 brokers, on the
	// PathRef's own cache lines (a separate allocation cost a cache miss
	// per threshold).
	small [4]int32
}

// SetPath makes p the path (copied; empty: never safe).
func (p *PathRef) SetPath(path []BrokerID) {
	p.path = append(p.path[:0], path...)
	p.ok = false
}

// PathThreshold is Threshold(p's path, s.About): the reports are read
// from the store's dense copies of its entries about this broker.
func (s *Store) PathThreshold(p *PathRef) uint64 {
	if len(p.path) == 0 {
		return 0
	}
	if !p.ok || p.set != s.aboutSet {
		p.idx = p.idx[:0]
		if len(p.path) <= len(p.small) {
			p.idx = p.small[:0]
		}
		for _, b := range p.path {
			var i int32
			if st := s.aboutMe[b]; st != nil {
				i = st.aboutIdx
			}
			p.idx = append(p.idx, i)
		}
		p.set, p.ok = s.aboutSet, true
	}
	th := newThreshold()
	for _, i := range p.idx {
		if i == 0 {
			th.missing()
			continue
		}
		r := &s.aboutDense[i-1]
		if r.ae != s.epoch {
			th.missing()
			continue
		}
		th.add(r.arrived, r.discarded)
	}
	return th.value()
}

// OwnVersion increases whenever the list OwnKeys returns may change
// other than in its arrived watermarks: an own entry added, dropped, or
// replaced by one about a newer incarnation. A caller may keep what it
// derived from the (broker, epoch) pairs and their order while it is
// unchanged.
func (s *Store) OwnVersion() uint64 { return s.ownVer }

// OwnLen is the number of own entries (OwnKeys' length).
func (s *Store) OwnLen() int { s.sortOwn(); return len(s.ownKeys) }

// OwnAt returns OwnKeys()[i] (the pair i and its arrived watermark).
func (s *Store) OwnAt(i int) message.Stamp {
	s.sortOwn()
	st := s.ownKeys[i]
	return message.Stamp{B: st.e.About, E: st.e.AE, S: st.e.Arrived}
}

// LowerDiscarded raises this broker's own discarded watermark about each
// upstream (B, E) it has an arrived watermark about, in OwnKeys' order,
// to its arrived watermark capped by caps[i] (SetDiscarded(B, E,
// min(arrived, caps[i])) for OwnKeys()[i], without a lookup by name).
// caps has OwnLen entries. Only the entries whose cap or arrived
// watermark changed since the previous call are looked at: for the
// others the same min was applied already (discarded only grows within
// an incarnation, and a new one changes OwnVersion: all are looked at).
func (s *Store) LowerDiscarded(caps []uint64) {
	s.sortOwn()
	k := len(s.ownKeys)
	full := !s.lowOK || s.lowVer != s.ownVer || len(s.lowCaps) != k || len(caps) != k
	if full {
		s.lowCaps = append(s.lowCaps[:0], make([]uint64, k)...)
		s.lowArr = append(s.lowArr[:0], make([]bool, k)...)
		s.lowVer, s.lowOK = s.ownVer, true
	}
	for i, st := range s.ownKeys {
		if !full && !s.lowArr[i] && caps[i] == s.lowCaps[i] {
			continue
		}
		s.lowCaps[i] = caps[i]
		d := min(st.e.Arrived, caps[i])
		if d > st.e.Discarded {
			st.e.Discarded = d
			s.touch(st)
		}
		s.lowArr[i] = false
	}
}
