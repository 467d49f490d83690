package dack

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// TestSafe is the safety rule of PROTOCOL §5, table-driven.
func TestSafe(t *testing.T) {
	type rep = map[BrokerID]Report
	tests := []struct {
		name string
		path []BrokerID
		s    uint64
		reps rep
		want bool
	}{
		{"all arrived", []BrokerID{"A", "B", "C"}, 5, rep{"A": {Arrived: 5}, "B": {Arrived: 7}, "C": {Arrived: 5}}, true},
		{"one behind", []BrokerID{"A", "B", "C"}, 5, rep{"A": {Arrived: 5}, "B": {Arrived: 4}, "C": {Arrived: 9}}, false},
		{"one silent (failed)", []BrokerID{"A", "B", "C"}, 5, rep{"A": {Arrived: 5}, "C": {Arrived: 9}}, false},
		{"failed but a later one discarded", []BrokerID{"A", "B", "C"}, 5, rep{"C": {Arrived: 9, Discarded: 6}}, true},
		{"discarded below s", []BrokerID{"A", "B", "C"}, 5, rep{"C": {Arrived: 9, Discarded: 4}}, false},
		{"first discarded", []BrokerID{"A", "B"}, 3, rep{"A": {Arrived: 3, Discarded: 3}}, true},
		{"short path (edge near): all arrived", []BrokerID{"E"}, 2, rep{"E": {Arrived: 2}}, true},
		{"empty path", nil, 1, rep{}, false},
	}
	for _, tc := range tests {
		rep := func(b BrokerID) (Report, bool) { r, ok := tc.reps[b]; return r, ok }
		got := Safe(tc.path, tc.s, rep)
		if got != tc.want {
			t.Errorf("%s: Safe = %v, want %v", tc.name, got, tc.want)
		}
		// Threshold agrees with Safe for every stamp.
		th := Threshold(tc.path, rep)
		for s := uint64(1); s <= 12; s++ {
			if (s <= th) != Safe(tc.path, s, rep) {
				t.Errorf("%s: Threshold %d disagrees with Safe at s=%d", tc.name, th, s)
			}
		}
	}
}

func stamp(b string, e, s uint64) message.Stamp { return message.Stamp{B: BrokerID(b), E: e, S: s} }

// TestWatermarks checks arrived (highest stamp seen, never down),
// discarded (never above arrived), incarnations replacing old reports, and
// Forget.
func TestWatermarks(t *testing.T) {
	st := NewStore("R", 1)
	st.Arrive([]message.Stamp{stamp("R", 1, 99), stamp("U", 1, 3), stamp("V", 2, 10)})
	st.Arrive([]message.Stamp{stamp("U", 1, 7)})
	st.Arrive([]message.Stamp{stamp("U", 1, 5)}) // a retransmitted duplicate: arrived does not go down
	if r, ok := st.Own("U", 1); !ok || r.Arrived != 7 {
		t.Fatalf("arrived U = %+v %v, want 7", r, ok)
	}
	if _, ok := st.Own("R", 1); ok {
		t.Fatal("a broker keeps a watermark about itself")
	}
	st.SetDiscarded("U", 1, 100)
	if r, _ := st.Own("U", 1); r.Discarded != 7 {
		t.Fatalf("discarded = %d, want capped at arrived 7", r.Discarded)
	}
	// U restarts: stamps of its new incarnation start a new watermark.
	st.Arrive([]message.Stamp{stamp("U", 2, 1)})
	if r, ok := st.Own("U", 2); !ok || r.Arrived != 1 || r.Discarded != 0 {
		t.Fatalf("new incarnation: %+v %v", r, ok)
	}
	// Reports about R from reporter D: newer incarnation replaces, older ignored.
	put := func(re, ae, arr, disc uint64) bool {
		return st.Put(message.DAckEntry{Reporter: "D", RE: re, About: "R", AE: ae, Arrived: arr, Discarded: disc})
	}
	put(1, 1, 10, 8)
	if put(1, 1, 9, 7) {
		t.Error("a lower report changed the store")
	}
	if r, _ := st.About("D"); r.Arrived != 10 || r.Discarded != 8 {
		t.Errorf("about R from D = %+v", r)
	}
	put(2, 1, 1, 0) // D restarted: starts from zero
	if r, _ := st.About("D"); r.Arrived != 1 || r.RE != 2 {
		t.Errorf("after D's restart = %+v", r)
	}
	if put(1, 1, 50, 50) {
		t.Error("a report of D's old incarnation was accepted after its restart")
	}
	st.Forget("D", 3)
	if _, ok := st.About("D"); ok {
		t.Error("Forget kept D's report")
	}
}

// TestBuildAggregation checks that one DACK holds only what changed since
// the last one on the link and only what the filter keeps, whatever the
// number of publications behind it.
func TestBuildAggregation(t *testing.T) {
	st := NewStore("R", 1)
	for s := uint64(1); s <= 1000; s++ { // a thousand publications from U and V
		st.Arrive([]message.Stamp{stamp("U", 1, s), stamp("V", 1, s)})
	}
	st.Put(message.DAckEntry{Reporter: "D", RE: 1, About: "U", AE: 1, Arrived: 900})
	keepU := func(reporter, about BrokerID) bool { return about == "U" }
	first := st.Build(0, keepU)
	want := []message.DAckEntry{
		{Reporter: "D", RE: 1, About: "U", AE: 1, Arrived: 900},
		{Reporter: "R", RE: 1, About: "U", AE: 1, Arrived: 1000},
	}
	if !reflect.DeepEqual(first, want) {
		t.Fatalf("first DACK = %+v, want %+v", first, want)
	}
	v := st.Version()
	if again := st.Build(v, keepU); len(again) != 0 {
		t.Fatalf("nothing changed, yet the DACK holds %v", again)
	}
	st.Arrive([]message.Stamp{stamp("U", 1, 1001), stamp("V", 1, 1001)})
	if next := st.Build(v, keepU); len(next) != 1 || next[0].Arrived != 1001 {
		t.Fatalf("next DACK = %+v, want only R's new U watermark", next)
	}
}

// TestBuildFollowsChanges checks, under random puts, arrivals, discards
// and forgets, that Build(since) returns exactly the entries changed after
// since (each entry's last change tracked here on its own).
func TestBuildFollowsChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	names := []BrokerID{"A", "B", "C", "D", "E", "self"}
	s := NewStore("self", 1)
	changedAt := map[pairKey]uint64{} // brute force: version of each entry's last change
	var versions []uint64
	for step := 0; step < 5000; step++ {
		before := s.Version()
		switch r.IntN(4) {
		case 0:
			e := message.DAckEntry{Reporter: names[r.IntN(len(names))], RE: uint64(1 + r.IntN(2)),
				About: names[r.IntN(len(names))], AE: uint64(1 + r.IntN(2)),
				Arrived: uint64(r.IntN(100)), Discarded: uint64(r.IntN(50))}
			if s.Put(e) {
				changedAt[pairKey{e.Reporter, e.About}] = s.Version()
			}
		case 1:
			b := names[r.IntN(5)]
			s.Arrive([]message.Stamp{{B: b, E: 1, S: uint64(r.IntN(200))}})
			if s.Version() != before {
				changedAt[pairKey{"self", b}] = s.Version()
			}
		case 2:
			b := names[r.IntN(5)]
			s.SetDiscarded(b, 1, uint64(r.IntN(200)))
			if s.Version() != before {
				changedAt[pairKey{"self", b}] = s.Version()
			}
		case 3:
			if r.IntN(10) == 0 {
				id := names[r.IntN(len(names))]
				s.Forget(id, 2)
				for k := range changedAt {
					if _, ok := s.m[k]; !ok {
						delete(changedAt, k)
					}
				}
			}
		}
		versions = append(versions, s.Version())
		since := versions[r.IntN(len(versions))]
		got := s.Build(since, func(BrokerID, BrokerID) bool { return true })
		var want []pairKey
		for k, v := range changedAt {
			if v > since {
				want = append(want, k)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("step %d: Build(%d) returned %d entries, want %d (%v)", step, since, len(got), len(want), want)
		}
		for _, e := range got {
			if v := changedAt[pairKey{e.Reporter, e.About}]; v <= since {
				t.Fatalf("step %d: Build(%d) returned %v, last changed at %d", step, since, e, v)
			}
		}
	}
}

// TestForgetThenPut checks that a pair forgotten and put again is a new
// entry, and that entries of other pairs are still found and raised.
func TestForgetThenPut(t *testing.T) {
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

// TestThresholdFollowsReports checks a path's threshold over the store's
// reports about this broker as they come, grow, and are forgotten.
func TestThresholdFollowsReports(t *testing.T) {
	s := NewStore("R", 1)
	path := []BrokerID{"A", "B"}
	check := func(what string, want uint64) {
		t.Helper()
		if th := Threshold(path, s.About); th != want {
			t.Fatalf("%s: threshold %d, want %d", what, th, want)
		}
	}
	check("no reports", 0)
	s.Put(message.DAckEntry{Reporter: "A", RE: 1, About: "R", AE: 1, Arrived: 5})
	check("B silent", 0)
	s.Put(message.DAckEntry{Reporter: "B", RE: 1, About: "R", AE: 1, Arrived: 7, Discarded: 2})
	check("both reported", 5)
	s.Put(message.DAckEntry{Reporter: "B", RE: 1, About: "R", AE: 1, Arrived: 7, Discarded: 6})
	check("B discarded 6", 6)
	s.Forget("B", 2) // B restarted: its report is gone
	check("B forgotten", 0)
	s.Put(message.DAckEntry{Reporter: "B", RE: 2, About: "R", AE: 1, Arrived: 9})
	check("B's new incarnation reported", 5)
	s.Put(message.DAckEntry{Reporter: "A", RE: 1, About: "R", AE: 2, Arrived: 9})
	check("A reports about another incarnation of R", 0)
}
