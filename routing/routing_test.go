package routing

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

func str(v string) matching.Value { return matching.Value{Kind: matching.KindString, Str: v} }
func ival(v int64) matching.Value { return matching.Value{Kind: matching.KindInt, Int: v} }

func filter(class string, preds ...matching.Predicate) matching.Filter {
	return matching.Filter{Preds: append([]matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: str(class)}}, preds...)}
}

func pub(class string, x int64) *matching.Publication {
	return &matching.Publication{Attrs: []matching.Attr{{Name: "class", Value: str(class)}, {Name: "x", Value: ival(x)}}}
}

func sub(edge string, n uint64) message.SubID {
	return message.SubID{Edge: message.BrokerID(edge), Epoch: 1, N: n}
}

// One test body, two matchers: the index and the brute-force scan.
func forEachMatcher(t *testing.T, f func(t *testing.T, tab *Table)) {
	t.Run("index", func(t *testing.T) { f(t, New(matching.NewIndex())) })
	t.Run("linear", func(t *testing.T) { f(t, New(nil)) })
}

// TestRecipients checks the recipient set: distinct from-pointers of the
// matching entries, the arrival direction excluded, local entries reported
// apart.
func TestRecipients(t *testing.T) {
	entries := []Entry{
		{Sub: sub("E1", 1), Filter: filter("a"), From: "F1", Dir: "N1"},
		{Sub: sub("E1", 2), Filter: filter("a", matching.Predicate{Attr: "x", Op: matching.OpGt, Value: ival(5)}), From: "F1", Dir: "N1"},
		{Sub: sub("E2", 1), Filter: filter("a"), From: "F2", Dir: "N2"},
		{Sub: sub("E3", 1), Filter: filter("b"), From: "F3", Dir: "N2"},
		{Sub: sub("L", 1), Filter: filter("a"), From: "L", Local: true, Client: 7},
	}
	tests := []struct {
		name   string
		p      *matching.Publication
		except message.BrokerID
		want   []message.BrokerID
		local  int
	}{
		{"all directions", pub("a", 9), "", []message.BrokerID{"F1", "F2"}, 1},
		{"from N1: not back", pub("a", 9), "N1", []message.BrokerID{"F2"}, 1},
		{"from N2", pub("a", 1), "N2", []message.BrokerID{"F1"}, 1},
		{"other class", pub("b", 1), "", []message.BrokerID{"F3"}, 0},
		{"no match", pub("c", 1), "", nil, 0},
	}
	forEachMatcher(t, func(t *testing.T, tab *Table) {
		for _, e := range entries {
			if ok, err := tab.Insert(e); !ok || err != nil {
				t.Fatalf("insert %v: %v %v", e.Sub, ok, err)
			}
		}
		if ok, _ := tab.Insert(entries[0]); ok {
			t.Fatal("a second insert of the same SubID succeeded")
		}
		for _, tc := range tests {
			local := 0
			got := tab.Recipients(tc.p, tc.except, nil, func(*Entry) { local++ })
			if len(got) == 0 {
				got = nil
			}
			if !reflect.DeepEqual(got, tc.want) || local != tc.local {
				t.Errorf("%s: recipients %v local %d, want %v local %d", tc.name, got, local, tc.want, tc.local)
			}
		}
		// Delete one, and the recipient disappears; the slot is reused.
		if _, ok := tab.Delete(sub("E2", 1)); !ok {
			t.Fatal("delete failed")
		}
		if got := tab.Recipients(pub("a", 9), "N1", nil, nil); len(got) != 0 {
			t.Errorf("after delete: %v", got)
		}
		if ok, err := tab.Insert(Entry{Sub: sub("E9", 1), Filter: filter("a"), From: "F9", Dir: "N3"}); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if got := tab.Recipients(pub("a", 9), "N1", nil, nil); !reflect.DeepEqual(got, []message.BrokerID{"F9"}) {
			t.Errorf("after reuse: %v", got)
		}
		if tab.Len() != 5 {
			t.Errorf("Len = %d, want 5", tab.Len())
		}
	})
}

// TestIndexAgreesWithScan cross-checks the index against the scan on
// random filters and publications (seeded; the seed is printed on failure).
func TestIndexAgreesWithScan(t *testing.T) {
	seed := int64(20261130)
	r := rand.New(rand.NewSource(seed))
	// The index with covering against a plain scan without: the same
	// recipients whatever the insert/delete history.
	ix, lin := New(matching.NewIndex()), New(nil)
	lin.NoCovering = true
	ops := []matching.Op{matching.OpLt, matching.OpLe, matching.OpGt, matching.OpGe, matching.OpNumEq, matching.OpNumNe}
	for i := 0; i < 400; i++ {
		f := filter(fmt.Sprint("c", r.Intn(3)))
		if r.Intn(3) != 0 {
			f.Preds = append(f.Preds, matching.Predicate{Attr: "x", Op: ops[r.Intn(len(ops))], Value: ival(int64(r.Intn(10)))})
		}
		fr := r.Intn(6)
		e := Entry{Sub: sub("E", uint64(i)), Filter: f, From: message.BrokerID(fmt.Sprint("F", fr)), Dir: message.BrokerID(fmt.Sprint("N", fr%3))}
		ix.Insert(e)
		lin.Insert(e)
		if r.Intn(4) == 0 {
			d := sub("E", uint64(r.Intn(i+1)))
			ix.Delete(d)
			lin.Delete(d)
		}
	}
	if ix.Indexed() >= lin.Indexed() {
		t.Errorf("covering indexed %d of %d entries: nothing was covered", ix.Indexed(), ix.Len())
	}
	for i := 0; i < 300; i++ {
		p := pub(fmt.Sprint("c", r.Intn(3)), int64(r.Intn(10)))
		except := message.BrokerID(fmt.Sprint("N", r.Intn(4)))
		a := ix.Recipients(p, except, nil, nil)
		b := lin.Recipients(p, except, nil, nil)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: publication %d: index %v, scan %v", seed, i, a, b)
		}
	}
}

func TestTableBound(t *testing.T) {
	tab := New(nil)
	tab.Max = 2
	for i := 0; i < 2; i++ {
		if ok, err := tab.Insert(Entry{Sub: sub("E", uint64(i)), Filter: filter("a"), From: "F"}); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if _, err := tab.Insert(Entry{Sub: sub("E", 9), Filter: filter("a"), From: "F"}); err == nil {
		t.Fatal("insert beyond Max accepted")
	}
}

// TestLocalLen checks the O(1) count of local entries against a scan
// through inserts, duplicate inserts and deletes.
func TestLocalLen(t *testing.T) {
	forEachMatcher(t, func(t *testing.T, tab *Table) {
		r := rand.New(rand.NewSource(3))
		for i := 0; i < 500; i++ {
			s := sub("E", uint64(r.Intn(60)))
			if r.Intn(3) == 0 {
				tab.Delete(s)
			} else {
				tab.Insert(Entry{Sub: s, Filter: filter("a"), From: "F", Local: s.N%2 == 0})
			}
			want := 0
			for _, e := range tab.Entries() {
				if e.Local {
					want++
				}
			}
			if got := tab.LocalLen(); got != want {
				t.Fatalf("step %d: LocalLen %d, scan %d", i, got, want)
			}
		}
	})
}

func BenchmarkRecipients(b *testing.B) {
	tab := New(matching.NewIndex())
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 2600; i++ {
		f := filter(fmt.Sprint("c", r.Intn(3)), matching.Predicate{Attr: "x", Op: matching.OpLt, Value: ival(int64(r.Intn(10)))})
		tab.Insert(Entry{Sub: sub("E", uint64(i)), Filter: f, From: message.BrokerID(fmt.Sprint("F", r.Intn(20))), Dir: message.BrokerID(fmt.Sprint("N", r.Intn(3)))})
	}
	p := pub("c1", 3)
	var dst []message.BrokerID
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst = tab.Recipients(p, "N0", dst[:0], nil)
	}
}

// TestReplaceMatchesOneByOne applies random batches (small ones change the
// table entry by entry, large ones rebuild it) and checks the table against
// a twin changed one entry at a time: the same entries, and the same
// recipients and local matches for random publications.
func TestReplaceMatchesOneByOne(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	randEntry := func(n uint64) Entry {
		e := Entry{Sub: sub(fmt.Sprint("E", r.Intn(5)), n), From: message.BrokerID(fmt.Sprint("F", r.Intn(6))), Dir: message.BrokerID(fmt.Sprint("N", r.Intn(3)))}
		// Chains of covering filters (x > i) and others.
		e.Filter = filter(fmt.Sprint("c", r.Intn(2)), matching.Predicate{Attr: "x", Op: matching.OpGt, Value: ival(int64(r.Intn(20)))})
		if r.Intn(10) == 0 {
			e.Local, e.From, e.Dir, e.Client = true, "L", "", message.ClientID(r.Intn(4))
		}
		return e
	}
	a, b := New(matching.NewIndex()), New(matching.NewIndex())
	var next uint64
	for round := 0; round < 30; round++ {
		var del []message.SubID
		var put []Entry
		size := r.Intn(200)
		if round%3 == 0 {
			size = r.Intn(10)
		}
		for i := 0; i < size; i++ {
			ents := a.Entries()
			switch {
			case len(ents) > 0 && r.Intn(3) == 0:
				del = append(del, ents[r.Intn(len(ents))].Sub)
			case len(ents) > 0 && r.Intn(2) == 0:
				e := randEntry(ents[r.Intn(len(ents))].Sub.N)
				e.Sub = ents[r.Intn(len(ents))].Sub
				put = append(put, e)
			default:
				next++
				put = append(put, randEntry(1000+next))
			}
		}
		if err := a.Replace(del, put); err != nil {
			t.Fatal(err)
		}
		for _, s := range del {
			b.Delete(s)
		}
		for _, e := range put {
			b.Delete(e.Sub)
			if _, err := b.Insert(e); err != nil {
				t.Fatal(err)
			}
		}
		ea, eb := a.Entries(), b.Entries()
		if len(ea) != len(eb) {
			t.Fatalf("round %d: %d entries after Replace, %d one by one", round, len(ea), len(eb))
		}
		for i := range ea {
			x, y := ea[i], eb[i]
			if x.Sub != y.Sub || x.From != y.From || x.Dir != y.Dir || x.Local != y.Local || x.Filter.String() != y.Filter.String() {
				t.Fatalf("round %d: entry %d differs: %+v vs %+v", round, i, *x, *y)
			}
		}
		if a.LocalLen() != b.LocalLen() {
			t.Fatalf("round %d: LocalLen %d vs %d", round, a.LocalLen(), b.LocalLen())
		}
		for q := 0; q < 50; q++ {
			p := pub(fmt.Sprint("c", r.Intn(2)), int64(r.Intn(25)))
			ex := message.BrokerID(fmt.Sprint("N", r.Intn(4)))
			var la, lb []message.SubID
			ra := a.Recipients(p, ex, nil, func(e *Entry) { la = append(la, e.Sub) })
			rb := b.Recipients(p, ex, nil, func(e *Entry) { lb = append(lb, e.Sub) })
			sortSubs(la)
			sortSubs(lb)
			if !reflect.DeepEqual(ra, rb) || !reflect.DeepEqual(la, lb) {
				t.Fatalf("round %d: recipients %v/%v local %v/%v", round, ra, rb, la, lb)
			}
		}
	}
}

func sortSubs(s []message.SubID) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if SubLess(s[j], s[i]) {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

// BenchmarkRepointChain re-points 3,500 filters that cover each other in a
// chain (x > 0 covers x > 1 covers ...) to a new from-pointer, as a
// leave's repair does: one by one, and as one Replace batch.
func BenchmarkRepointChain(b *testing.B) {
	build := func() (*Table, []Entry) {
		tab := New(matching.NewIndex())
		var put []Entry
		for i := 0; i < 3500; i++ {
			e := Entry{Sub: sub("E", uint64(i)), Filter: filter("c", matching.Predicate{Attr: "x", Op: matching.OpGt, Value: ival(int64(i))}), From: "F1", Dir: "N1"}
			if _, err := tab.Insert(e); err != nil {
				b.Fatal(err)
			}
			e.From = "F2"
			put = append(put, e)
		}
		return tab, put
	}
	b.Run("one-by-one", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			tab, put := build()
			b.StartTimer()
			for _, e := range put {
				tab.Delete(e.Sub)
				if _, err := tab.Insert(e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("replace", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			tab, put := build()
			b.StartTimer()
			if err := tab.Replace(nil, put); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// plainMatcher hides the index's MatchOnce: Recipients then reads every
// match (the way before OnceMatcher).
type plainMatcher struct{ ix *matching.Index }

func (m plainMatcher) Insert(id uint64, f matching.Filter) error { return m.ix.Insert(id, f) }
func (m plainMatcher) Delete(id uint64) bool                     { return m.ix.Delete(id) }
func (m plainMatcher) Match(p *matching.Publication, dst []uint64) []uint64 {
	return m.ix.Match(p, dst)
}

// TestRecipientsOnceSameAsMatch: Recipients through MatchOnce gives the
// same recipients, and the same local entries in the same order, as
// through Match, with from-pointers reached through several directions,
// local entries, deletes, and (second round) more than 64 routes, whose
// entries MatchOnce cannot leave out.
func TestRecipientsOnceSameAsMatch(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	ops := []matching.Op{matching.OpLt, matching.OpLe, matching.OpGt, matching.OpGe, matching.OpNumEq, matching.OpNumNe}
	for _, nf := range []int{12, 90} {
		a, b := New(matching.NewIndex()), New(plainMatcher{matching.NewIndex()})
		if a.om == nil || b.om != nil {
			t.Fatal("want MatchOnce in a only")
		}
		for i := 0; i < 1500; i++ {
			f := filter(fmt.Sprint("c", r.Intn(3)))
			if r.Intn(4) != 0 {
				f.Preds = append(f.Preds, matching.Predicate{Attr: "x", Op: ops[r.Intn(len(ops))], Value: ival(int64(r.Intn(10)))})
			}
			fr := r.Intn(nf)
			e := Entry{Sub: sub("E", uint64(i)), Filter: f, From: message.BrokerID(fmt.Sprint("F", fr)), Dir: message.BrokerID(fmt.Sprint("N", (fr+r.Intn(2))%4))}
			if r.Intn(8) == 0 {
				e = Entry{Sub: e.Sub, Filter: f, From: "B", Local: true, Client: message.ClientID(i)}
			}
			a.Insert(e)
			b.Insert(e)
			if r.Intn(5) == 0 {
				d := sub("E", uint64(r.Intn(i+1)))
				a.Delete(d)
				b.Delete(d)
			}
			if i%5 != 0 {
				continue
			}
			p := pub(fmt.Sprint("c", r.Intn(3)), int64(r.Intn(10)))
			ex := message.BrokerID(fmt.Sprint("N", r.Intn(5)))
			if r.Intn(4) == 0 {
				ex = ""
			}
			var la, lb []message.SubID
			ra := a.Recipients(p, ex, nil, func(e *Entry) { la = append(la, e.Sub) })
			rb := b.Recipients(p, ex, nil, func(e *Entry) { lb = append(lb, e.Sub) })
			if !reflect.DeepEqual(ra, rb) || !reflect.DeepEqual(la, lb) {
				t.Fatalf("froms %d, insert %d: recipients %v / %v, local %v / %v", nf, i, ra, rb, la, lb)
			}
		}
		if nf > 64 && len(a.routes) <= 64 {
			t.Fatalf("only %d routes", len(a.routes))
		}
	}
}

// A publication that names an attribute twice (refused at the edge, but a
// peer running older code could still forward one) is
// reported to each matching local entry once: the index finds such an
// entry once per copy of the attribute.
func TestRecipientsLocalOncePerPublication(t *testing.T) {
	forEachMatcher(t, func(t *testing.T, tab *Table) {
		for i, e := range []Entry{
			{Sub: sub("L", 1), Filter: filter("a", matching.Predicate{Attr: "x", Op: matching.OpGt, Value: ival(0)}), From: "L", Local: true, Client: 7},
			{Sub: sub("L", 2), Filter: filter("a"), From: "L", Local: true, Client: 8},
			{Sub: sub("E", 1), Filter: filter("a", matching.Predicate{Attr: "x", Op: matching.OpGt, Value: ival(0)}), From: "F", Dir: "N"},
		} {
			if ok, err := tab.Insert(e); !ok || err != nil {
				t.Fatalf("insert %d: %v %v", i, ok, err)
			}
		}
		p := &matching.Publication{Attrs: []matching.Attr{
			{Name: "class", Value: str("a")}, {Name: "x", Value: ival(1)}, {Name: "x", Value: ival(2)}, {Name: "class", Value: str("a")},
		}}
		got := map[message.SubID]int{}
		recips := tab.Recipients(p, "", nil, func(e *Entry) { got[e.Sub]++ })
		if got[sub("L", 1)] != 1 || got[sub("L", 2)] != 1 || len(got) != 2 {
			t.Errorf("local deliveries %v, want each local entry once", got)
		}
		if !reflect.DeepEqual(recips, []message.BrokerID{"F"}) {
			t.Errorf("recipients %v, want [F]", recips)
		}
	})
}
