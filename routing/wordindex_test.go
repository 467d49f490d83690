package routing

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// TestSubIndexSameAsMap: a table's Sub lookups agree with a map through
// random inserts and deletes (the index grows and shifts words back on
// every delete), and every entry handed out keeps its Sub.
func TestSubIndexSameAsMap(t *testing.T) {
	f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: str("c")}}}
	for seed := int64(1); seed <= 5; seed++ {
		r := rand.New(rand.NewSource(seed))
		tb := New(matching.NewIndex())
		ref := map[message.SubID]*Entry{}
		var live []message.SubID
		for op := 0; op < 4000; op++ {
			s := message.SubID{Edge: message.BrokerID(fmt.Sprint("B", r.Intn(9))), Epoch: uint64(r.Intn(2)), N: uint64(r.Intn(300))}
			if r.Intn(3) == 0 && len(live) > 0 {
				i := r.Intn(len(live))
				s = live[i]
			}
			if _, ok := ref[s]; ok && r.Intn(2) == 0 {
				if _, ok := tb.Delete(s); !ok {
					t.Fatalf("seed %d op %d: %v not deleted", seed, op, s)
				}
				delete(ref, s)
			} else {
				ok, err := tb.Insert(Entry{Sub: s, Filter: f, From: "F", Dir: "N"})
				_, had := ref[s]
				if err != nil || ok == had {
					t.Fatalf("seed %d op %d: insert %v: %v %v (present %v)", seed, op, s, ok, err, had)
				}
				if ok {
					e, _ := tb.Get(s)
					ref[s] = e
					live = append(live, s)
				}
			}
			if tb.Len() != len(ref) {
				t.Fatalf("seed %d op %d: Len %d, want %d", seed, op, tb.Len(), len(ref))
			}
			if op%97 == 0 || op > 3900 {
				for _, x := range live {
					e, ok := tb.Get(x)
					w, had := ref[x]
					if ok != had || e != w || ok && e.Sub != x {
						t.Fatalf("seed %d op %d: Get %v = %v %v, want %v %v", seed, op, x, e, ok, w, had)
					}
				}
			}
		}
	}
}

// checkBuckets verifies the covering buckets' table: every used slot is
// found by its key, bn counts them, and every indexed non-local entry is
// in its bucket (and nothing else is).
func checkBuckets(t *Table) error {
	used := 0
	inBuckets, aliases := 0, 0
	for k := range t.bslots {
		b := &t.bslots[k]
		if !b.used {
			continue
		}
		used++
		bk := bucketKey{route: b.route, other: b.other, alias: b.alias, class: b.class, pin: b.pin}
		if bk.hash() != b.h {
			return fmt.Errorf("slot %d: hash %x, want %x", k, b.h, bk.hash())
		}
		if i, ok := t.findBucket(bk, b.h); !ok || i != k {
			return fmt.Errorf("slot %d: found at %d (%v)", k, i, ok)
		}
		if len(b.ents) == 0 {
			return fmt.Errorf("slot %d: empty bucket kept", k)
		}
		for i, c := range b.ents {
			e := c.e
			home := bucketKeyOf(e)
			if b.alias {
				// Listed again under another of its pins, in its class.
				home.alias, home.pin = true, bk.pin
				if c.covers != nil || bucketKeyOf(e).pin == bk.pin || !slices.Contains(t.pinsOf(e.Filter), bk.pin) {
					return fmt.Errorf("slot %d: entry %v misplaced in an alias bucket", k, e.Sub)
				}
			}
			if home != bk || e.coveredBy != nil || c.seq != e.seq || len(c.f.Preds) != len(e.Filter.Preds) || len(e.Filter.Preds) > 0 && &c.f.Preds[0] != &e.Filter.Preds[0] {
				return fmt.Errorf("slot %d: entry %v misplaced", k, e.Sub)
			}
			if i > 0 && b.ents[i-1].seq >= c.seq {
				return fmt.Errorf("slot %d: seq out of order at %d", k, i)
			}
		}
		for _, c := range b.ents {
			for _, g := range c.covers {
				if g.coveredBy != c.e {
					return fmt.Errorf("slot %d: %v listed under %v, covered by %p", k, g.Sub, c.e.Sub, g.coveredBy)
				}
			}
		}
		if b.alias {
			aliases += len(b.ents)
		} else {
			inBuckets += len(b.ents)
		}
	}
	if used != t.bn {
		return fmt.Errorf("bn %d, %d slots used", t.bn, used)
	}
	listed := 0
	for r, rb := range t.routeBuckets {
		for j, bk := range rb {
			i, ok := t.findBucket(bk, bk.hash())
			if !ok || bk.alias || bk.route != uint32(r) || t.bslots[i].pos != uint32(j) {
				return fmt.Errorf("route %d: bucket %d (%+v) listed wrong", r, j, bk)
			}
		}
		listed += len(rb)
	}
	homes := 0
	for k := range t.bslots {
		if b := &t.bslots[k]; b.used && !b.alias {
			homes++
		}
	}
	if listed != homes {
		return fmt.Errorf("%d buckets listed by route, %d home buckets", listed, homes)
	}
	want, wantAliases := 0, 0
	for _, e := range t.slots {
		if e != nil && !e.Local && e.coveredBy == nil {
			want++
			if bucketKeyOf(e).pin != 0 {
				wantAliases += len(t.pinsOf(e.Filter)) - 1
			}
		}
	}
	if want != inBuckets || wantAliases != aliases {
		return fmt.Errorf("%d entries in buckets, want %d; %d in alias buckets, want %d", inBuckets, want, aliases, wantAliases)
	}
	return nil
}
