// Covering: the indexed non-local entries in buckets by route and class, so
// that an insert looks for an entry covering it (or covered by it) in its own
// bucket only, and the entries covered hang under the one that covers them
// instead of reaching the matcher.

package routing

import (
	"cmp"
	"slices"

	"github.com/deltapub/deltapub/matching"
)

// bucketKey is a covering bucket: other is set for entries without a
// satisfiable [class,eq,...] (one bucket per route, class "").
type bucketKey struct {
	route uint32
	other bool
	class string
}

// bucketKeyOf is the bucket of non-local e.
func bucketKeyOf(e *Entry) bucketKey {
	class, other := bucketOf(e.Filter)
	return bucketKey{route: uint32(e.key >> 32), other: other, class: class}
}

// bucket is one covering bucket in its slot of Table.bslots: its key,
// the key's hash (its home slot), its entries in increasing seq; a 64-byte
// slot (unused: a free slot).
type bucket struct {
	ents  []cand
	class string
	route uint32
	h     uint32
	other bool
	used  bool
	_     [14]byte
}

// cand is an indexed entry in its bucket with what the covering scans
// read and change of it: its filter and seq (copies), and the entries
// hanging under it (covers, in the order they came). A scan reads the
// bucket's own array, and an entry covered by c is listed here, without
// reading or writing c's entry (a cold line in a table that a hundred
// floods visited since). 64 bytes.
type cand struct {
	e      *Entry
	f      matching.Filter
	seq    uint64
	covers []*Entry
}

// hash is a fixed hash of bk (the layout of the table never reaches
// outputs; a fixed hash keeps runs reproducible).
func (bk bucketKey) hash() uint32 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(bk.class); i++ {
		h = (h ^ uint64(bk.class[i])) * 1099511628211
	}
	h ^= uint64(bk.route) << 1
	if bk.other {
		h ^= 1
	}
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	h ^= h >> 31
	return uint32(h >> 32)
}

// findBucket returns the slot of bucket bk (ok) or, if absent, the free
// slot where it would go (-1: no slots yet). Slots move on every add and
// remove: valid until the buckets change.
func (t *Table) findBucket(bk bucketKey, h uint32) (int, bool) {
	if len(t.bslots) == 0 {
		return -1, false
	}
	mask := uint32(len(t.bslots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		b := &t.bslots[i]
		if !b.used {
			return int(i), false
		}
		if b.h == h && b.route == bk.route && b.other == bk.other && b.class == bk.class {
			return int(i), true
		}
	}
}

// bucketEnts returns the entries of bucket bk (nil: no such bucket).
func (t *Table) bucketEnts(bk bucketKey) []cand {
	if i, ok := t.findBucket(bk, bk.hash()); ok {
		return t.bslots[i].ents
	}
	return nil
}

// addBucket appends e (the newest seq), with the entries it covers, to
// bucket bk.
func (t *Table) addBucket(e *Entry, bk bucketKey, covers []*Entry) {
	h := bk.hash()
	i, ok := t.findBucket(bk, h)
	if !ok {
		if i < 0 || (t.bn+1)*8 > len(t.bslots)*5 {
			t.growBuckets()
			i, _ = t.findBucket(bk, h)
		}
		t.bslots[i] = bucket{class: bk.class, route: bk.route, h: h, other: bk.other, used: true}
		t.bn++
		for uint32(len(t.routeBuckets)) <= bk.route {
			t.routeBuckets = append(t.routeBuckets, nil)
		}
		t.routeBuckets[bk.route] = append(t.routeBuckets[bk.route], bk)
	}
	t.bslots[i].ents = append(t.bslots[i].ents, cand{e: e, f: e.Filter, seq: e.seq, covers: covers})
	if bk.other {
		t.nOther++
	}
}

func (t *Table) growBuckets() {
	old := t.bslots
	t.bslots = make([]bucket, max(2*len(old), 16))
	mask := uint32(len(t.bslots) - 1)
	for k := range old {
		if b := &old[k]; b.used {
			i := b.h & mask
			for t.bslots[i].used {
				i = (i + 1) & mask
			}
			t.bslots[i] = *b
		}
	}
}

// removeBucket frees slot i, shifting back the buckets after it that may
// not stay behind the hole (no tombstones).
func (t *Table) removeBucket(i int) {
	mask := len(t.bslots) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		b := &t.bslots[j]
		if !b.used {
			break
		}
		home := int(b.h) & mask
		// b may move to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.bslots[i] = *b
			i = j
		}
	}
	t.bslots[i] = bucket{}
	t.bn--
}

// classAttr is the attribute covering buckets by (PADRES convention:
// every filter names its class).
const classAttr = "class"

// bucketOf is the bucket of f within its route's directory: its class,
// or other for entries without a satisfiable [class,eq,...].
func bucketOf(f matching.Filter) (class string, other bool) {
	if !f.Satisfiable() {
		return "", true
	}
	for i := range f.Preds {
		p := &f.Preds[i]
		if p.Attr == classAttr {
			if p.Op == matching.OpEq && p.Value.Kind == matching.KindString {
				return p.Value.Str, false
			}
			break // Validate: one predicate per attribute
		}
	}
	return "", true
}

// touchBucket reads the slot of the covering bucket that place will
// likely look up for e, when its route is in the caches and its filter
// names a class first: the slot is cold (a hundred floods visited other
// tables since), and read here, next to the index probe that misses too,
// the two misses overlap instead of following each other (and the
// filter's predicates, read here first, are warm for Validate). A guess
// only (a wrong one costs a read): nothing depends on it but t.touched.
func (t *Table) touchBucket(e *Entry) {
	if e.Local || t.NoCovering || len(t.bslots) == 0 || len(e.Filter.Preds) == 0 {
		return
	}
	p := &e.Filter.Preds[0]
	if p.Attr != classAttr || p.Op != matching.OpEq || p.Value.Kind != matching.KindString {
		return
	}
	// (The caches' entries are not checked against the names: a stale
	// one only makes the guess wrong.)
	fc := t.icache[nameHash(e.From)&63] - 1
	dc := t.icache[nameHash(e.Dir)&63] - 1
	if fc < 0 || dc < 0 {
		return
	}
	ri := t.rcache[routeHash(route{from: fc, dir: dc})&63]
	if ri == 0 {
		return
	}
	bh := bucketKey{route: ri - 1, class: p.Value.Str}.hash()
	t.touched += t.bslots[bh&uint32(len(t.bslots)-1)].h
}

// coverCandidates returns (in a scratch slice or, shared, the bucket
// itself; in increasing seq, as the scans of place need) the indexed
// entries of bk's route that may cover, or be covered by, a filter of
// bucket bk; the others cannot:
//
//   - e in the bucket of class w (e satisfiable, [class,eq,w]) and c in
//     the bucket of class v ≠ w (c satisfiable, [class,eq,v]): Covers(c, e)
//     needs e's class predicate to imply c's, i.e. w eq v, false; Covers(e, c)
//     needs v eq w, false. So only class w's bucket and the "other" bucket.
//   - e in the "other" bucket (unsatisfiable, or no [class,eq,...]): the
//     whole group.
//
// shared reports that the list is the bucket itself (class bucket and no
// "other" entries: nothing to merge), valid until the buckets change.
func (t *Table) coverCandidates(bk bucketKey) (_ []cand, shared bool) {
	if !bk.other && t.nOther == 0 {
		return t.bucketEnts(bk), true
	}
	out := t.cands[:0]
	if bk.other {
		if bk.route < uint32(len(t.routeBuckets)) {
			for _, b := range t.routeBuckets[bk.route] {
				out = append(out, t.bucketEnts(b)...)
			}
		}
		slices.SortFunc(out, func(a, b cand) int { return cmp.Compare(a.seq, b.seq) })
	} else {
		mine := t.bucketEnts(bk)
		others := t.bucketEnts(bucketKey{route: bk.route, other: true})
		// Merge the two (each sorted by seq).
		i, j := 0, 0
		for i < len(mine) || j < len(others) {
			if j == len(others) || i < len(mine) && mine[i].seq < others[j].seq {
				out = append(out, mine[i])
				i++
			} else {
				out = append(out, others[j])
				j++
			}
		}
	}
	t.cands = out[:0]
	return out, false
}

// candIn returns the cand of seq in bucket bk (nil: none), valid until
// the buckets change.
func (t *Table) candIn(bk bucketKey, seq uint64) *cand {
	bi, found := t.findBucket(bk, bk.hash())
	if !found {
		return nil
	}
	b := t.bslots[bi].ents
	if i, ok := slices.BinarySearchFunc(b, seq, func(x cand, s uint64) int { return cmp.Compare(x.seq, s) }); ok {
		return &b[i]
	}
	return nil
}

// unbucket removes an indexed entry from its bucket (keeping seq order)
// and returns the entries that hung under it; an emptied bucket is
// dropped from its route's list, unless it is *keep (place is about to
// add the entry taking over to it: keeping its slot and array saves
// dropping and allocating them again).
func (t *Table) unbucket(e *Entry, keep *bucketKey) (covers []*Entry) {
	bk := bucketKeyOf(e)
	bi, found := t.findBucket(bk, bk.hash())
	if !found {
		return nil // not indexed (cannot happen: callers pass indexed entries)
	}
	bu := &t.bslots[bi]
	b := bu.ents
	i, ok := slices.BinarySearchFunc(b, e.seq, func(x cand, s uint64) int { return cmp.Compare(x.seq, s) })
	if !ok || b[i].e != e {
		return nil // not indexed here (cannot happen: callers pass indexed entries)
	}
	covers = b[i].covers
	b = append(b[:i], b[i+1:]...)
	b[:len(b)+1][len(b)] = cand{}
	bu.ents = b
	if bk.other {
		t.nOther--
	}
	if len(b) > 0 || keep != nil && bk == *keep {
		return covers
	}
	t.removeBucket(bi)
	rb := t.routeBuckets[bk.route]
	for j, x := range rb {
		if x == bk {
			rb = append(rb[:j], rb[j+1:]...)
			break
		}
	}
	t.routeBuckets[bk.route] = rb
	return covers
}

// coversOf returns the entries hanging under indexed e (tests).
func (t *Table) coversOf(e *Entry) []*Entry {
	if e.Local || e.coveredBy != nil {
		return nil
	}
	if c := t.candIn(bucketKeyOf(e), e.seq); c != nil && c.e == e {
		return c.covers
	}
	return nil
}
