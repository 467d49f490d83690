package dack

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// TestCacheAccessors checks the cached accessors against the plain ones
// under random puts, arrivals, discards and forgets: the cursor walks
// exactly AppendChanged's entries in its order, an entry keeps what the
// caller wrote in its Aux (zero when new, also after Forget), a PathRef's
// threshold equals Threshold over About whatever changed since it was
// resolved (a reporter's first report, a restart, Forget), and
// LowerDiscarded does what SetDiscarded per OwnKeys entry does, and
// OwnVersion changes whenever the own (broker, epoch) pairs do.
func TestCacheAccessors(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 3))
	names := []BrokerID{"A", "B", "C", "D", "E", "self"}
	s := NewStore("self", 1)
	paths := [][]BrokerID{nil, {"A"}, {"A", "B"}, {"C", "B", "D"}, {"E", "D", "C", "A"}}
	refs := make([]PathRef, len(paths))
	for i := range refs {
		refs[i].SetPath(paths[i])
	}
	var versions []uint64
	auxOf := map[pairKey][2]uint64{}
	ownVer, ownPairs := s.OwnVersion(), pairs(s)
	for step := 0; step < 5000; step++ {
		switch r.IntN(5) {
		case 0, 4:
			e := message.DAckEntry{Reporter: names[r.IntN(len(names))], RE: uint64(1 + r.IntN(2)),
				About: names[r.IntN(len(names))], AE: uint64(1 + r.IntN(2)),
				Arrived: uint64(r.IntN(100)), Discarded: uint64(r.IntN(50))}
			s.Put(e)
		case 1:
			s.Arrive([]message.Stamp{{B: names[r.IntN(5)], E: 1, S: uint64(r.IntN(200))}})
		case 2:
			// LowerDiscarded against SetDiscarded on a copy of the store's state.
			var minq []message.Stamp
			for _, b := range names[:5] {
				if r.IntN(2) == 0 {
					minq = append(minq, message.Stamp{B: b, E: uint64(1 + r.IntN(2)), S: uint64(r.IntN(120))})
				}
			}
			want := replay(s)
			for _, k := range want.OwnKeys() {
				d := k.S
				for _, q := range minq {
					if q.B == k.B && q.E == k.E {
						if q.S-1 < d {
							d = q.S - 1
						}
						break
					}
				}
				want.SetDiscarded(k.B, k.E, d)
			}
			ov := s.OwnVersion()
			caps := make([]uint64, s.OwnLen())
			for i := range caps {
				caps[i] = ^uint64(0)
				k := s.OwnAt(i)
				if k != s.OwnKeys()[i] {
					t.Fatalf("step %d: OwnAt(%d) = %v, OwnKeys has %v", step, i, k, s.OwnKeys()[i])
				}
				for _, q := range minq {
					if q.B == k.B && q.E == k.E {
						caps[i] = q.S - 1
						break
					}
				}
			}
			s.LowerDiscarded(caps)
			if s.OwnVersion() != ov {
				t.Fatalf("step %d: LowerDiscarded changed OwnVersion", step)
			}
			if got, w := s.AppendChanged(nil, 0), want.AppendChanged(nil, 0); !sameEntries(got, w) {
				t.Fatalf("step %d: LowerDiscarded gave %v, SetDiscarded %v", step, got, w)
			}
		case 3:
			if r.IntN(8) == 0 {
				s.Forget(names[r.IntN(len(names))], 2)
			}
		}
		if ov := s.OwnVersion(); ov == ownVer && !reflect.DeepEqual(pairs(s), ownPairs) {
			t.Fatalf("step %d: own pairs changed from %v to %v, OwnVersion did not", step, ownPairs, pairs(s))
		} else {
			ownVer, ownPairs = ov, pairs(s)
		}
		versions = append(versions, s.Version())
		since := versions[r.IntN(len(versions))]
		var walked []Changed
		aux := map[pairKey][2]uint64{} // what the walk wrote last time, per entry
		for c := s.Newest(); c.Valid(); c = c.Prev() {
			if c.Version() > since {
				walked = append(walked, Changed{Entry: *c.Entry(), Version: c.Version()})
			}
			k := pairKey{c.Entry().Reporter, c.Entry().About}
			if a := *c.Aux(); a != auxOf[k] {
				t.Fatalf("step %d: %v has aux %v, the caller wrote %v", step, k, a, auxOf[k])
			}
			c.Aux()[0], c.Aux()[1] = uint64(step), uint64(len(k.reporter))
			aux[k] = *c.Aux()
		}
		auxOf = aux // entries gone (Forget) are new, zero, if they come back
		if want := s.AppendChanged(nil, since); !reflect.DeepEqual(walked, want) {
			t.Fatalf("step %d: cursor walked %v, AppendChanged %v", step, walked, want)
		}
		for i := range refs {
			if got, want := s.PathThreshold(&refs[i]), Threshold(paths[i], s.About); got != want {
				t.Fatalf("step %d: PathThreshold(%v) = %d, Threshold %d", step, paths[i], got, want)
			}
		}
	}
}

// TestPathRefVersionChange checks that a resolved path follows what
// changes the set of reports about this broker: a reporter's first
// report, and Forget dropping one.
func TestPathRefVersionChange(t *testing.T) {
	s := NewStore("R", 1)
	var p PathRef
	p.SetPath([]BrokerID{"A", "B"})
	if th := s.PathThreshold(&p); th != 0 {
		t.Fatalf("no reports: threshold %d", th)
	}
	s.Put(message.DAckEntry{Reporter: "A", RE: 1, About: "R", AE: 1, Arrived: 5})
	if th := s.PathThreshold(&p); th != 0 {
		t.Fatalf("B silent: threshold %d, want 0", th)
	}
	s.Put(message.DAckEntry{Reporter: "B", RE: 1, About: "R", AE: 1, Arrived: 7, Discarded: 2}) // B's first report: a new entry
	if th := s.PathThreshold(&p); th != 5 {
		t.Fatalf("both reported: threshold %d, want 5", th)
	}
	s.Put(message.DAckEntry{Reporter: "B", RE: 1, About: "R", AE: 1, Arrived: 7, Discarded: 6}) // same entry, raised
	if th := s.PathThreshold(&p); th != 6 {
		t.Fatalf("B discarded 6: threshold %d, want 6", th)
	}
	s.Forget("B", 2) // B restarted: its report is gone
	if th := s.PathThreshold(&p); th != 0 {
		t.Fatalf("B forgotten: threshold %d, want 0", th)
	}
	s.Put(message.DAckEntry{Reporter: "B", RE: 2, About: "R", AE: 1, Arrived: 9})
	if th := s.PathThreshold(&p); th != 5 {
		t.Fatalf("B's new incarnation reported: threshold %d, want 5", th)
	}
	p.SetPath([]BrokerID{"B"})
	if th := s.PathThreshold(&p); th != 9 {
		t.Fatalf("new path: threshold %d, want 9", th)
	}
}

// replay returns a store with s's entries, put in s's version order.
func replay(s *Store) *Store {
	c := NewStore(s.self, s.epoch)
	ch := s.AppendChanged(nil, 0)
	for i := len(ch) - 1; i >= 0; i-- {
		c.Put(ch[i].Entry)
	}
	return c
}

// sameEntries compares two change lists by entry, in order.
func sameEntries(a, b []Changed) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Entry != b[i].Entry {
			return false
		}
	}
	return true
}

// pairs is OwnKeys without the arrived watermarks.
func pairs(s *Store) []message.Stamp {
	var p []message.Stamp
	for _, k := range s.OwnKeys() {
		p = append(p, message.Stamp{B: k.B, E: k.E})
	}
	return p
}

// TestPutTableForget checks Put's pair table against Forget: a pair
// forgotten and put again is a new entry (the table must not hand back
// the dropped one), and entries of other pairs are still found.
func TestPutTableForget(t *testing.T) {
	s := NewStore("R", 1)
	s.Put(message.DAckEntry{Reporter: "D", RE: 1, About: "R", AE: 1, Arrived: 9, Discarded: 9})
	s.Put(message.DAckEntry{Reporter: "E", RE: 1, About: "R", AE: 1, Arrived: 4})
	s.Forget("D", 2)
	if !s.Put(message.DAckEntry{Reporter: "D", RE: 2, About: "R", AE: 1, Arrived: 1}) {
		t.Fatal("D's new incarnation after Forget was not stored")
	}
	if r, ok := s.About("D"); !ok || r.Arrived != 1 || r.Discarded != 0 || s.Len() != 2 {
		t.Fatalf("after Forget and Put: %+v %v, %d entries", r, ok, s.Len())
	}
	if s.Put(message.DAckEntry{Reporter: "E", RE: 1, About: "R", AE: 1, Arrived: 3}) {
		t.Error("a lower report of E changed the store")
	}
	if !s.Put(message.DAckEntry{Reporter: "E", RE: 1, About: "R", AE: 1, Arrived: 5}) || s.Len() != 2 {
		t.Error("E's entry was not found and raised")
	}
}
