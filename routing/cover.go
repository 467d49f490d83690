// Covering: the indexed non-local entries in buckets by route, class and
// anchor, so that an insert looks for an entry covering it (or covered by
// it) among the few buckets that can hold one, and the entries covered hang
// under the one that covers them instead of reaching the matcher.
//
// The anchor is a filter's first predicate besides class that admits one
// string (matching.Predicate.Pinned), such as the stock workload's
// [symbol,eq,S]. By class alone, all the subscriptions learned from one
// neighbour share a bucket, and each insert tests every uncovered one:
// O(N) per insert (BenchmarkInsertStock: 4,500 inserts/s at 100,000). A
// bounded scan (the last K candidates) keeps the cost flat but loses the
// covering: the stock workload's coverers are spread over 1,000 symbols,
// so with K = 64 the matcher holds 64,000 of 100,000 entries and 637,000
// of 1,000,000, against 15,000 and 106,000 with the whole scan. The
// anchor keeps the covering exact (the decisions of a scan of the whole
// route) and limits the scan to the entries of one symbol.

package routing

import (
	"cmp"
	"slices"

	"github.com/deltapub/deltapub/matching"
)

// bucketKey is a covering bucket: other is set for entries without a
// satisfiable [class,eq,...] (one bucket per route: class "", pin 0).
// Within a class, pin is the hash of the entries' anchor (0: entries
// without one), and an alias bucket lists again, without their covers,
// the entries pinning that attribute and value besides their anchor.
type bucketKey struct {
	route uint32
	other bool
	alias bool
	class string
	pin   uint64
}

// bucketKeyOf is the bucket of non-local e (its home, not an alias).
func bucketKeyOf(e *Entry) bucketKey { return homeKey(uint32(e.key>>32), e.Filter) }

// homeKey is the bucket of a non-local filter f on route.
func homeKey(route uint32, f matching.Filter) bucketKey {
	class, pin, other := bucketOf(f)
	return bucketKey{route: route, other: other, class: class, pin: pin}
}

// bucket is one covering bucket in its slot of Table.bslots: its key,
// the key's hash (its home slot), its entries in increasing seq, its
// place in Table.routeBuckets (not for alias buckets, which are not
// listed there); a 64-byte slot (unused: a free slot).
type bucket struct {
	ents  []cand
	class string
	pin   uint64
	route uint32
	h     uint32
	pos   uint32
	other bool
	alias bool
	used  bool
	_     [1]byte
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
	h ^= uint64(bk.route) << 2
	if bk.other {
		h ^= 1
	}
	if bk.alias {
		h ^= 2
	}
	h ^= bk.pin * 0x9e3779b97f4a7c15
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
		if b.h == h && b.route == bk.route && b.pin == bk.pin && b.other == bk.other && b.alias == bk.alias && b.class == bk.class {
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
// its home bucket bk, and to the alias buckets of its other pins.
func (t *Table) addBucket(e *Entry, bk bucketKey, covers []*Entry) {
	t.appendCand(bk, cand{e: e, f: e.Filter, seq: e.seq, covers: covers})
	switch {
	case bk.other:
		t.nOther++
	case bk.pin != 0:
		t.nPinned++
		for _, p := range t.pinsOf(e.Filter)[1:] {
			t.appendCand(bucketKey{route: bk.route, alias: true, class: bk.class, pin: p}, cand{e: e, f: e.Filter, seq: e.seq})
		}
	}
}

// appendCand appends c (the newest seq) to bucket bk.
func (t *Table) appendCand(bk bucketKey, c cand) {
	h := bk.hash()
	i, ok := t.findBucket(bk, h)
	if !ok {
		if i < 0 || (t.bn+1)*8 > len(t.bslots)*5 {
			t.growBuckets()
			i, _ = t.findBucket(bk, h)
		}
		t.bslots[i] = bucket{class: bk.class, pin: bk.pin, route: bk.route, h: h, other: bk.other, alias: bk.alias, used: true}
		t.bn++
		if !bk.alias {
			for uint32(len(t.routeBuckets)) <= bk.route {
				t.routeBuckets = append(t.routeBuckets, nil)
			}
			t.bslots[i].pos = uint32(len(t.routeBuckets[bk.route]))
			t.routeBuckets[bk.route] = append(t.routeBuckets[bk.route], bk)
		}
	}
	t.bslots[i].ents = append(t.bslots[i].ents, c)
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

// bucketOf is the bucket of f within its route's directory: its class
// and the hash of its anchor (0: none), or other for entries without a
// satisfiable [class,eq,...].
func bucketOf(f matching.Filter) (class string, pin uint64, other bool) {
	if !f.Satisfiable() {
		return "", 0, true
	}
	other = true
	for i := range f.Preds {
		p := &f.Preds[i]
		if p.Attr == classAttr {
			if p.Op == matching.OpEq && p.Value.Kind == matching.KindString {
				class, other = p.Value.Str, false
			}
			continue // Validate: one predicate per attribute
		}
		if pin == 0 {
			if v, ok := p.Pinned(); ok {
				pin = pinHash(p.Attr, v)
			}
		}
	}
	if other {
		return "", 0, true
	}
	return class, pin, false
}

// pinsOf returns (in t.pins) the distinct hashes of f's predicates
// besides class that admit one string, its anchor first.
func (t *Table) pinsOf(f matching.Filter) []uint64 {
	out := t.pins[:0]
next:
	for i := range f.Preds {
		p := &f.Preds[i]
		v, ok := p.Pinned()
		if !ok || p.Attr == classAttr {
			continue
		}
		h := pinHash(p.Attr, v)
		for _, x := range out {
			if x == h {
				continue next
			}
		}
		out = append(out, h)
	}
	t.pins = out[:0]
	return out
}

// pinHash is the hash of attribute attr pinned to v, never 0. Two pins
// may share a hash: their entries then share buckets, more candidates
// to test, never a wrong answer.
func pinHash(attr, v string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(attr); i++ {
		h = (h ^ uint64(attr[i])) * 1099511628211
	}
	h = (h ^ 0xff) * 1099511628211
	for i := 0; i < len(v); i++ {
		h = (h ^ uint64(v[i])) * 1099511628211
	}
	return h | 1
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
	bh := homeKey(ri-1, e.Filter).hash()
	t.touched += t.bslots[bh&uint32(len(t.bslots)-1)].h
}

// coverers returns the indexed entries of bk's route that may cover f,
// of home bucket bk (in increasing seq, as the scans of place need; in
// a scratch slice, or shared: the bucket itself); the others cannot:
//
//   - c in the bucket of class v ≠ w, f's (both satisfiable, [class,eq,v]
//     and [class,eq,w]): Covers(c, f) needs f's class predicate to imply
//     c's, i.e. w eq v, false.
//   - c of class w anchored at [x,·] admitting u alone: Covers(c, f) needs
//     f's predicate on x to imply c's, so to admit u alone too (f is
//     satisfiable): only the buckets of f's own pins hold such a c.
//   - f in the "other" bucket (unsatisfiable, or no [class,eq,...]): the
//     whole route.
func (t *Table) coverers(bk bucketKey, f matching.Filter) (_ []cand, shared bool) {
	ks := t.keys[:0]
	if bk.other {
		ks = t.homes(ks, bk.route, nil)
	} else {
		ks = append(ks, bucketKey{route: bk.route, class: bk.class})
		if t.nPinned > 0 {
			for _, p := range t.pinsOf(f) {
				ks = append(ks, bucketKey{route: bk.route, class: bk.class, pin: p})
			}
		}
		if t.nOther > 0 {
			ks = append(ks, bucketKey{route: bk.route, other: true})
		}
	}
	t.keys = ks[:0]
	return t.gather(ks)
}

// covered returns, as coverers, the indexed entries that a filter of home
// bucket bk may cover: with an anchor [x,·] admitting u alone, only the
// entries whose predicate on x implies it, i.e. admits u alone: those
// anchored there, and those listed in the alias bucket; without an
// anchor, the whole class; and the "other" bucket (or, for a filter of
// the "other" bucket, the whole route).
func (t *Table) covered(bk bucketKey) (_ []cand, shared bool) {
	ks := t.keys[:0]
	switch {
	case bk.other:
		ks = t.homes(ks, bk.route, nil)
	case bk.pin != 0:
		ks = append(ks, bk, bucketKey{route: bk.route, alias: true, class: bk.class, pin: bk.pin})
	case t.nPinned == 0: // the class's only bucket
		ks = append(ks, bk)
	default:
		ks = t.homes(ks, bk.route, &bk.class)
	}
	if !bk.other && t.nOther > 0 {
		ks = append(ks, bucketKey{route: bk.route, other: true})
	}
	t.keys = ks[:0]
	return t.gather(ks)
}

// homes appends to ks the home buckets of route (of class *class only,
// if set: then not the "other" bucket).
func (t *Table) homes(ks []bucketKey, route uint32, class *string) []bucketKey {
	if route >= uint32(len(t.routeBuckets)) {
		return ks
	}
	for _, b := range t.routeBuckets[route] {
		if !b.alias && (class == nil || !b.other && b.class == *class) {
			ks = append(ks, b)
		}
	}
	return ks
}

// gather returns the entries of the buckets ks (distinct, none holding
// an entry another holds) in increasing seq: the one non-empty bucket
// itself (shared, valid until the buckets change), else a merged copy.
func (t *Table) gather(ks []bucketKey) (_ []cand, shared bool) {
	var one []cand
	n := 0
	for _, k := range ks {
		if b := t.bucketEnts(k); len(b) > 0 {
			one = b
			n++
		}
	}
	if n <= 1 {
		return one, true
	}
	out := t.cands[:0]
	for _, k := range ks {
		out = append(out, t.bucketEnts(k)...)
	}
	slices.SortFunc(out, func(a, b cand) int { return cmp.Compare(a.seq, b.seq) })
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

// unbucket removes an indexed entry from its buckets (keeping seq order)
// and returns the entries that hung under it; an emptied bucket is
// dropped from its route's list, unless it is *keep (place is about to
// add the entry taking over to it: keeping its slot and array saves
// dropping and allocating them again).
func (t *Table) unbucket(e *Entry, keep *bucketKey) (covers []*Entry) {
	bk := bucketKeyOf(e)
	covers = t.removeCand(bk, e, keep)
	switch {
	case bk.other:
		t.nOther--
	case bk.pin != 0:
		t.nPinned--
		for _, p := range t.pinsOf(e.Filter)[1:] {
			t.removeCand(bucketKey{route: bk.route, alias: true, class: bk.class, pin: p}, e, nil)
		}
	}
	return covers
}

// removeCand removes e from bucket bk and returns the entries that hung
// under it there (see unbucket for keep).
func (t *Table) removeCand(bk bucketKey, e *Entry, keep *bucketKey) (covers []*Entry) {
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
	if len(b) > 0 || keep != nil && bk == *keep {
		return covers
	}
	pos := bu.pos
	t.removeBucket(bi)
	if bk.alias {
		return covers
	}
	// The route's last bucket takes the freed place: a route may have a
	// bucket per anchor, too many to search.
	rb := t.routeBuckets[bk.route]
	last := rb[len(rb)-1]
	rb[pos] = last
	t.routeBuckets[bk.route] = rb[:len(rb)-1]
	if last != bk {
		i, _ := t.findBucket(last, last.hash())
		t.bslots[i].pos = pos
	}
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
