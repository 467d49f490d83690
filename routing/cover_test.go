package routing

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// recMatcher logs the matcher calls: two tables fed the same operations
// must make the same calls in the same order (the index's match order,
// hence routing, depends on that history). It logs the slots: the
// table's keys carry the entry's route above them (see Table.slots), which
// the reference does not model.
type recMatcher struct{ log []string }

func (r *recMatcher) Insert(id uint64, f matching.Filter) error {
	r.log = append(r.log, fmt.Sprintf("I%d", uint32(id)))
	return nil
}
func (r *recMatcher) Delete(id uint64) bool {
	r.log = append(r.log, fmt.Sprintf("D%d", uint32(id)))
	return true
}
func (r *recMatcher) Match(*matching.Publication, []uint64) []uint64 { return nil }

// refTable is the covering of the table before the class buckets: one
// scan over every indexed entry with the same From, in insertion order.
// The bucketed table must take exactly the same decisions.
type refEntry struct {
	e         Entry
	key       uint64
	coveredBy *refEntry
	covers    []*refEntry
}

type refTable struct {
	byID   map[message.SubID]*refEntry
	byFrom map[message.BrokerID][]*refEntry
	free   []uint64
	next   uint64
	m      *recMatcher
}

func (t *refTable) insert(e Entry) bool {
	if _, ok := t.byID[e.Sub]; ok || e.Filter.Validate() != nil {
		return false
	}
	r := &refEntry{e: e}
	if n := len(t.free); n > 0 {
		r.key = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		r.key = t.next
		t.next++
	}
	t.place(r)
	t.byID[e.Sub] = r
	return true
}

func (t *refTable) place(e *refEntry) {
	if e.e.Local {
		t.m.Insert(e.key, e.e.Filter)
		return
	}
	group := t.byFrom[e.e.From]
	for _, c := range group {
		if c.e.Dir == e.e.Dir && matching.Covers(c.e.Filter, e.e.Filter) {
			e.coveredBy = c
			c.covers = append(c.covers, e)
			return
		}
	}
	t.m.Insert(e.key, e.e.Filter)
	kept := group[:0]
	for _, c := range group {
		if c.e.Dir == e.e.Dir && matching.Covers(e.e.Filter, c.e.Filter) {
			t.m.Delete(c.key)
			c.coveredBy = e
			e.covers = append(e.covers, c)
			for _, g := range c.covers {
				g.coveredBy = e
			}
			e.covers = append(e.covers, c.covers...)
			c.covers = nil
			continue
		}
		kept = append(kept, c)
	}
	t.byFrom[e.e.From] = append(kept, e)
}

func (t *refTable) delete(sub message.SubID) bool {
	e, ok := t.byID[sub]
	if !ok {
		return false
	}
	if c := e.coveredBy; c != nil {
		for i, x := range c.covers {
			if x == e {
				c.covers = append(c.covers[:i], c.covers[i+1:]...)
				break
			}
		}
	} else {
		t.m.Delete(e.key)
		if !e.e.Local {
			group := t.byFrom[e.e.From]
			for i, x := range group {
				if x == e {
					t.byFrom[e.e.From] = append(group[:i], group[i+1:]...)
					break
				}
			}
			orphans := e.covers
			e.covers = nil
			for _, o := range orphans {
				o.coveredBy = nil
				t.place(o)
			}
		}
	}
	delete(t.byID, sub)
	t.free = append(t.free, e.key)
	return true
}

// randCoverFilter draws filters that exercise every bucket: [class,eq,c]
// with ranges on x (the common case), other class operators, no class,
// and unsatisfiable filters; string predicates on s and t, in either
// order, pinned to one value (anchors, and alias buckets when both are)
// or not.
func randCoverFilter(r *rand.Rand, classes int) matching.Filter {
	var preds []matching.Predicate
	switch r.Intn(10) {
	case 0: // no class predicate
	case 1:
		preds = append(preds, matching.Predicate{Attr: "class", Op: matching.OpStrPrefix, Value: str("c")})
	case 2:
		preds = append(preds, matching.Predicate{Attr: "class", Op: matching.OpStrLe, Value: str("")}) // only ""
	case 3:
		preds = append(preds, matching.Predicate{Attr: "class", Op: matching.OpEq, Value: str("")})
	default:
		preds = append(preds, matching.Predicate{Attr: "class", Op: matching.OpEq, Value: str(fmt.Sprintf("c%d", r.Intn(classes)))})
	}
	strs := []matching.Predicate{
		{Op: matching.OpEq, Value: str("a")}, {Op: matching.OpEq, Value: str("b")}, {Op: matching.OpEq, Value: str("")},
		{Op: matching.OpStrLe, Value: str("")}, {Op: matching.OpStrLt, Value: str("\x00")},
		{Op: matching.OpStrPrefix, Value: str("a")}, {Op: matching.OpNeq, Value: str("a")}, {Op: matching.OpIsPresent, Value: str("")},
	}
	attrs := []string{"s", "t"}
	if r.Intn(2) == 0 {
		attrs[0], attrs[1] = attrs[1], attrs[0]
	}
	for _, a := range attrs {
		if r.Intn(3) == 0 {
			p := strs[r.Intn(len(strs))]
			p.Attr = a
			preds = append(preds, p)
		}
	}
	if r.Intn(3) > 0 {
		lo := int64(r.Intn(6))
		preds = append(preds, matching.Predicate{Attr: "x", Op: matching.OpGe, Value: ival(lo)})
	}
	if r.Intn(3) > 0 {
		preds = append(preds, matching.Predicate{Attr: "y", Op: matching.OpLt, Value: ival(int64(r.Intn(6)))})
	}
	if r.Intn(12) == 0 { // matches nothing
		preds = append(preds, matching.Predicate{Attr: "z", Op: matching.OpLt, Value: matching.Value{Kind: matching.KindFloat, Float: -math.MaxFloat64}})
	}
	return matching.Filter{Preds: preds}
}

// TestCoveringSameAsScan: the bucketed covering takes the same decisions
// (which entry covers which, and the same matcher calls in the same order)
// as a plain scan over the entries with the same From.
func TestCoveringSameAsScan(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewSource(seed))
		classes, froms := 3, 3
		if seed > 15 { // many classes over one from-pointer
			classes, froms = 40, 1
		}
		if seed > 20 { // one class, many anchors
			classes = 1
		}
		got := New(&recMatcher{})
		ref := &refTable{byID: map[message.SubID]*refEntry{}, byFrom: map[message.BrokerID][]*refEntry{}, m: &recMatcher{}}
		var subs []message.SubID
		for op := 0; op < 300; op++ {
			if len(subs) > 0 && r.Intn(3) == 0 {
				i := r.Intn(len(subs))
				s := subs[i]
				subs = append(subs[:i], subs[i+1:]...)
				_, ok := got.Delete(s)
				if ok != ref.delete(s) {
					t.Fatalf("seed %d op %d: delete %v disagrees", seed, op, s)
				}
			} else {
				e := Entry{Sub: sub("E", uint64(op)), Filter: randCoverFilter(r, classes),
					From: message.BrokerID(fmt.Sprintf("F%d", r.Intn(froms))), Dir: message.BrokerID(fmt.Sprintf("N%d", r.Intn(froms%2+1)))}
				if r.Intn(15) == 0 {
					e.Local, e.From, e.Dir = true, "L", ""
				}
				ok, _ := got.Insert(e)
				if ok != ref.insert(e) {
					t.Fatalf("seed %d op %d: insert %v disagrees", seed, op, e.Filter)
				}
				if ok {
					subs = append(subs, e.Sub)
				}
			}
			if err := checkBuckets(got); err != nil {
				t.Fatalf("seed %d op %d: %v", seed, op, err)
			}
			gl, rl := got.m.(*recMatcher).log, ref.m.log
			if fmt.Sprint(gl) != fmt.Sprint(rl) {
				t.Fatalf("seed %d op %d: matcher calls differ:\n got %v\nwant %v", seed, op, gl, rl)
			}
			for s, re := range ref.byID {
				ge, _ := got.Get(s)
				var want, have message.SubID
				if re.coveredBy != nil {
					want = re.coveredBy.e.Sub
				}
				if ge.coveredBy != nil {
					have = ge.coveredBy.Sub
				}
				gcovers := got.coversOf(ge)
				if want != have || len(re.covers) != len(gcovers) {
					t.Fatalf("seed %d op %d: %v covered by %v (%d under it), want %v (%d)", seed, op, s, have, len(gcovers), want, len(re.covers))
				}
				for i := range re.covers {
					if re.covers[i].e.Sub != gcovers[i].Sub {
						t.Fatalf("seed %d op %d: covers of %v differ at %d", seed, op, s, i)
					}
				}
			}
		}
	}
}
