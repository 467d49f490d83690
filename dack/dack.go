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

// stored is an entry and the store version of its last change.
type stored struct {
	e       message.DAckEntry
	version uint64
}

// Store holds every DACK entry this broker knows: its own (Reporter ==
// self) and those received, keeping per (reporter, about) only the newest
// incarnations and the highest watermarks. Not safe for concurrent use.
type Store struct {
	self    BrokerID
	epoch   uint64
	m       map[pairKey]*stored
	own     map[BrokerID]*stored // m's entries with Reporter == self, by About
	version uint64
	// Max bounds the number of pairs kept; at the bound entries about
	// brokers other than this one are no longer stored (they are relays:
	// upstream brokers then purge later, through discarded reports, never
	// earlier), and entries about this broker always are.
	Max int
}

// NewStore returns an empty store for broker self in incarnation epoch.
func NewStore(self BrokerID, epoch uint64) *Store {
	return &Store{self: self, epoch: epoch, m: map[pairKey]*stored{}, own: map[BrokerID]*stored{}, Max: 1 << 16}
}

// touch gives st the next version.
func (s *Store) touch(st *stored) {
	s.version++
	st.version = s.version
}

// Version increases whenever an entry changes.
func (s *Store) Version() uint64 { return s.version }

// Put merges e and reports whether anything changed. An entry from an
// older incarnation of its reporter, or about an older incarnation of its
// subject, than the one stored is ignored; a newer one replaces the stored
// entry entirely (a restarted broker starts from zero); within the same
// incarnations the watermarks only grow.
func (s *Store) Put(e message.DAckEntry) bool {
	k := pairKey{e.Reporter, e.About}
	old, ok := s.m[k]
	if !ok {
		if len(s.m) >= s.Max && e.About != s.self && e.Reporter != s.self {
			return false
		}
		st := &stored{e: e}
		s.m[k] = st
		if e.Reporter == s.self {
			s.own[e.About] = st
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
	for _, st := range stamps {
		if st.B != s.self {
			s.Put(message.DAckEntry{Reporter: s.self, RE: s.epoch, About: st.B, AE: st.E, Arrived: st.S})
		}
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
	st, ok := s.m[pairKey{reporter, s.self}]
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
// arrived watermarks about, with those watermarks, sorted by broker.
func (s *Store) OwnKeys() []message.Stamp {
	keys := make([]message.Stamp, 0, len(s.own))
	for _, st := range s.own {
		keys = append(keys, message.Stamp{B: st.e.About, E: st.e.AE, S: st.e.Arrived})
	}
	slices.SortFunc(keys, func(a, b message.Stamp) int { return cmp.Compare(a.B, b.B) })
	return keys
}

// Forget drops every entry by or about id older than incarnation epoch
// (a restarted broker's old reports and the reports about its old stamps).
func (s *Store) Forget(id BrokerID, epoch uint64) {
	for k, st := range s.m {
		if (k.reporter == id && st.e.RE < epoch) || (k.about == id && st.e.AE < epoch) {
			delete(s.m, k)
			if k.reporter == s.self {
				delete(s.own, k.about)
			}
			s.version++
		}
	}
}

// Build returns the entries changed after version since for which keep
// returns true, newest change first. It is the content of one aggregated
// DACK on one link: O(neighbourhood²) at most, independent of the number
// of publications. The order is a deterministic function of the broker's
// inputs; receivers merge each entry independently, so it carries no
// meaning.
func (s *Store) Build(since uint64, keep func(reporter, about BrokerID) bool) []message.DAckEntry {
	var sel []*stored
	for _, st := range s.m {
		if st.version > since && keep(st.e.Reporter, st.e.About) {
			sel = append(sel, st)
		}
	}
	slices.SortFunc(sel, func(a, b *stored) int { return cmp.Compare(b.version, a.version) })
	out := make([]message.DAckEntry, len(sel))
	for i, st := range sel {
		out[i] = st.e
	}
	return out
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
	minArrived, maxDiscarded := ^uint64(0), uint64(0)
	for _, b := range path {
		r, ok := report(b)
		if !ok {
			minArrived = 0
			continue
		}
		minArrived = min(minArrived, r.Arrived)
		maxDiscarded = max(maxDiscarded, r.Discarded)
	}
	return max(minArrived, maxDiscarded)
}
