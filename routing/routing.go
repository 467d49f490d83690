// Package routing is the subscription routing table of one broker: entries
// with from-pointers (PROTOCOL §3), matching a publication against them,
// the recipient set of a publication, and the bookkeeping of flood
// confirmations (a flood is confirmed hop by hop once every broker behind a
// hop has answered). It is pure: no I/O, no clock.
package routing

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// Matcher finds the entries (by key) whose filter matches a publication.
// matching.Index implements it; linearMatcher is the brute-force twin used
// until (and to cross-check) the index.
type Matcher interface {
	Insert(id uint64, f matching.Filter) error
	Delete(id uint64) bool
	Match(p *matching.Publication, dst []uint64) []uint64
}

// validInserter is a Matcher that can insert a filter without
// validating it again (matching.Index): the table validates every filter
// in Insert before it reaches the matcher.
type validInserter interface {
	InsertValid(id uint64, f matching.Filter) error
}

// insertM inserts validated f under key in the matcher.
func (t *Table) insertM(key uint64, f matching.Filter) error {
	if t.mv != nil {
		return t.mv.InsertValid(key, f)
	}
	return t.m.Insert(key, f)
}

// Entry is one subscription as this broker routes toward it. The fields
// the covering scans read of other entries (Filter, covers, coveredBy)
// come first, so that a candidate often costs one cache line instead of
// two (padding Entry to 192 bytes for whole lines saved a few read misses
// but cost more write misses than it saved).
type Entry struct {
	Filter matching.Filter
	// coveredBy is the indexed entry (same From and Dir) whose filter
	// covers this one (the entries hanging under an indexed entry are
	// listed in its bucket: cand.covers).
	coveredBy *Entry
	// seq orders the indexed entries of one (From, Dir) group: the
	// covering scans visit them in increasing seq (insertion order).
	seq uint64
	key uint64 // matcher key: slot, route above (see Table.slots)
	// From is the from-pointer: the broker toward the subscriber as far as
	// possible within δ+1 hops of this broker (this broker itself for a
	// local subscription).
	From message.BrokerID
	// Sub to Client fill the second cache line of a 64-byte aligned
	// entry (slab chunks of 128-byte entries): a local delivery reads Sub
	// and Client, a lookup by Sub compares Sub, one line each.
	Sub message.SubID
	// Dir is the tree neighbour toward the subscriber ("" when local).
	Dir message.BrokerID
	// Local is set for subscriptions of this broker's own clients.
	Local  bool
	Client message.ClientID
}

// Table is the routing table. Not safe for concurrent use.
type Table struct {
	// What Recipients reads comes first (few cache lines per call).
	om OnceMatcher // m, if it is one (else nil)
	// fast: om is set, and there are at most 64 routes and 64 interned
	// names (Recipients' fast path; kept by intern, routeOf and reset).
	fast   bool
	exNext uint8
	// remote has bit i set for each non-local route i below 64 (the
	// routes whose matches Recipients needs once, see OnceMatcher);
	// locals likewise for the local routes.
	remote, locals uint64
	buf            []uint64
	// rrank is each route's from-pointer's rank (below 64 hops only: see
	// Recipients' fast path) and byRank the interned names in rank order:
	// with at most 64 names, Recipients collects the ranks of the
	// recipients in a bit set, read in order, instead of marking froms and
	// sorting them.
	rrank []uint8
	// exNames holds Recipients' last except lookups (a broker sees
	// publications from its few tree neighbours; comparing with the same
	// string is cheaper than hashing it), replaced round robin (exNext),
	// with the interned index (exIdx) and the routes toward it below 64
	// (exSkip, kept by routeOf). Only interned names are cached, and
	// interned indices hold until reset, which clears the cache.
	exNames [4]message.BrokerID
	exSkip  [4]uint64
	exIdx   [4]int32
	byRank  []message.BrokerID
	m       Matcher
	routes  []route
	// froms interns the from-pointers so that Recipients deduplicates
	// with a generation mark instead of a scan or a map per publication.
	froms []fromInfo
	gen   uint32

	// ids finds an entry's slot by its Sub (see wordIndex).
	ids wordIndex
	// slab is the chunk new entries are carved from (one allocation per
	// chunk instead of one per entry). An entry is never reused, so a
	// pointer handed out stays valid; a chunk is freed by the collector
	// once none of its entries is referenced.
	slab []Entry
	// slots holds the entries by slot number; slots are reused after a
	// Delete (free), so the slice is bounded by the largest table size
	// ever reached. An entry's matcher key is its slot in the low 32 bits
	// and its route (index into routes: from-pointer, direction, local)
	// above: Recipients reads what it needs from the key itself instead of
	// a per-entry lookup (a cache miss per match with 83 tables).
	slots []*Entry
	free  []uint32
	// routeIdx interns routes; bounded like froms (by the from-pointers
	// and directions seen since the last reset).
	routeIdx map[route]uint32
	fromIdx  map[message.BrokerID]int32
	// icache finds interned names without a scan or hashing: index+1 in
	// froms by nameHash (0: empty; checked against the name).
	icache [64]int32
	// rcache finds interned routes without a scan or hashing: index+1 in
	// routes by routeHash (0: empty; checked against the route).
	rcache [64]uint32
	// touched sums what touchBucket read (so that the read is made).
	touched uint32
	local   int // entries with Local set (LocalLen)
	// Max bounds the number of entries; Insert fails beyond it (the
	// subscriber is answered with an error, nothing is dropped silently).
	Max int
	// NoCovering disables covering (every entry goes to the matcher); set
	// it before the first Insert.
	NoCovering bool
	// buckets holds the indexed non-local entries by route (a non-local
	// route is a (From, Dir) pair) and class, each bucket in increasing
	// seq; routeBuckets lists the buckets of each route. Covering only
	// looks at entries with the same From and Dir, and (docs in
	// coverCandidates) an entry [class,eq,v] can neither cover nor be
	// covered by a satisfiable [class,eq,w] with w ≠ v, so an insert scans
	// its class bucket instead of every entry with its From: with 2,600
	// subscriptions over 26 classes that is 26× fewer Covers. The buckets
	// are the slots of an open-addressing table (linear probing, one
	// 64-byte slot each, in place: bslots; bn used): an insert finds its
	// table cold, and a lookup usually reads the one line of its bucket
	// (a map keyed by the struct read a control word, then a slot line).
	// routeBuckets lists the buckets of each route (by route index).
	bslots       []bucket
	bn           int
	routeBuckets [][]bucketKey
	nOther       int // entries in "other" buckets (none: no lookup of them)
	nextSeq      uint64
	cands        []cand // scratch for coverCandidates
	// mv is m when it can insert without validating again (nil: it
	// cannot); here, not next to m: Recipients' fields come first.
	mv validInserter
}

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

// OnceMatcher is a Matcher that can leave out matches by the ids' tags
// (their high 32 bits: the route, see Table.slots), as
// matching.Index.MatchOnce: ids tagged in skip are not reported, and of
// those tagged in once only the first found. Recipients uses it when the
// matcher has it: the entries toward except, and the entries of a route
// already found, are not even checked.
type OnceMatcher interface {
	MatchOnce(p *matching.Publication, dst []uint64, once, skip uint64) []uint64
}

// fromInfo is an interned from-pointer: its name, its position among the
// interned names in sorted order, and Recipients' mark.
type fromInfo struct {
	name message.BrokerID
	rank int32
	mark uint32
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

// route is the part of an entry Recipients needs; entries share it by
// index (see Table.slots).
type route struct {
	from, dir int32 // interned broker names (-1: none)
	local     bool
}

// maxSlots bounds the slots: a slot must fit the low 32 bits of a key.
const maxSlots = 1 << 32

func keyOf(slot, rt uint32) uint64 { return uint64(slot) | uint64(rt)<<32 }

func slotOf(key uint64) uint32 { return uint32(key) }

// intern returns the small index of a broker name, adding it if absent.
// Bounded by the brokers within δ+1 hops plus the tree neighbours.
func (t *Table) intern(b message.BrokerID) int32 {
	c := &t.icache[nameHash(b)&63]
	if i := *c - 1; i >= 0 && t.froms[i].name == b {
		return i
	}
	if len(t.froms) <= 16 {
		// Few names: comparing (often the same pointer) beats hashing.
		for i := range t.froms {
			if t.froms[i].name == b {
				*c = int32(i) + 1
				return int32(i)
			}
		}
	}
	fi, ok := t.fromIdx[b]
	if !ok {
		fi = int32(len(t.froms))
		t.fromIdx[b] = fi
		t.froms = append(t.froms, fromInfo{name: b})
		t.fast = t.om != nil && len(t.routes) <= 64 && len(t.froms) <= 64
		// Ranks of all names again (a new from-pointer is rare: bounded by
		// the brokers within δ+1 hops).
		order := make([]int32, len(t.froms))
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortFunc(order, func(x, y int32) int { return cmp.Compare(t.froms[x].name, t.froms[y].name) })
		for r, i := range order {
			t.froms[i].rank = int32(r)
		}
		t.byRank = t.byRank[:0]
		for _, i := range order {
			t.byRank = append(t.byRank, t.froms[i].name)
		}
		for i := range t.routes {
			t.rrank[i] = uint8(t.froms[t.routes[i].from].rank)
		}
	}
	*c = fi + 1
	return fi
}

// nameHash is a cheap hash of a broker name (its length and last two
// bytes) for icache.
func nameHash(a message.BrokerID) uint32 {
	if len(a) < 2 {
		return uint32(len(a))
	}
	h := uint32(len(a))*0x9e3779b1 ^ uint32(a[len(a)-1])*0x85ebca6b ^ uint32(a[len(a)-2])*0xc2b2ae35
	return h ^ h>>16
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

// routeOf interns r.
// routeHash is rcache's hash of r.
func routeHash(r route) uint32 {
	h := (uint32(r.from)*0x9e3779b1 ^ uint32(r.dir)*0x85ebca6b) >> 26
	if r.local {
		h ^= 1
	}
	return h
}

func (t *Table) routeOf(r route) uint32 {
	c := &t.rcache[routeHash(r)&63]
	if i := *c; i > 0 && t.routes[i-1] == r {
		return i - 1
	}
	i, ok := uint32(0), false
	if len(t.routes) <= 32 {
		for j, x := range t.routes {
			if x == r {
				i, ok = uint32(j), true
				break
			}
		}
	}
	if !ok {
		i, ok = t.routeIdx[r]
	}
	if !ok {
		i = uint32(len(t.routes))
		t.routeIdx[r] = i
		t.routes = append(t.routes, r)
		t.rrank = append(t.rrank, uint8(t.froms[r.from].rank))
		if i < 64 {
			if r.local {
				t.locals |= 1 << i
			} else {
				t.remote |= 1 << i
				for k := range t.exNames {
					if t.exNames[k] != "" && t.exIdx[k] == r.dir {
						t.exSkip[k] |= 1 << i
					}
				}
			}
		}
		t.fast = t.om != nil && len(t.routes) <= 64 && len(t.froms) <= 64
	}
	*c = i + 1
	return i
}

// New returns an empty table using m (nil: a linear scan).
func New(m Matcher) *Table {
	if m == nil {
		m = newLinear()
	}
	mv, _ := m.(validInserter)
	om, _ := m.(OnceMatcher)
	return &Table{m: m, mv: mv, om: om, fast: om != nil, Max: 1 << 22,
		fromIdx: map[message.BrokerID]int32{}, routeIdx: map[route]uint32{}}
}

// Len is the number of entries.
func (t *Table) Len() int { return t.ids.n }

// LocalLen is the number of entries of this broker's own clients (O(1):
// status snapshots poll it; Local never changes after Insert).
func (t *Table) LocalLen() int { return t.local }

// Get returns the entry of sub.
func (t *Table) Get(sub message.SubID) (*Entry, bool) {
	s, _, ok := t.ids.find(sub, subHash(sub), t.slots)
	if !ok {
		return nil, false
	}
	return t.slots[s], true
}

// newEntry returns a copy of e carved from the slab.
func (t *Table) newEntry(e *Entry) *Entry {
	if len(t.slab) == cap(t.slab) {
		n := 8
		for n < slabMax && n*8 < t.ids.n {
			n *= 2
		}
		t.slab = make([]Entry, 0, n)
	}
	t.slab = append(t.slab, *e)
	return &t.slab[len(t.slab)-1]
}

// slabMax bounds a slab chunk: a chunk stays allocated while any of its
// entries is referenced, so after heavy churn a live entry may hold up to
// slabMax entries' worth of memory.
const slabMax = 32

// Insert adds e (a copy is kept). An existing entry for the same Sub is
// left unchanged and false is returned.
func (t *Table) Insert(e Entry) (bool, error) {
	h := subHash(e.Sub)
	t.touchBucket(&e)
	_, pos, found := t.ids.find(e.Sub, h, t.slots)
	if found {
		return false, nil
	}
	if t.ids.n >= t.Max {
		return false, fmt.Errorf("routing: table full (%d entries)", t.Max)
	}
	if err := e.Filter.Validate(); err != nil {
		return false, fmt.Errorf("routing: subscription %v: %w", e.Sub, err)
	}
	var slot uint32
	if n := len(t.free); n > 0 {
		slot = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		if len(t.slots) >= maxSlots-1 { // slot+1 must fit 32 bits (wordIndex)
			return false, fmt.Errorf("routing: table full (%d slots)", len(t.slots))
		}
		slot = uint32(len(t.slots))
		t.slots = append(t.slots, nil)
	}
	r := route{from: t.intern(e.From), dir: -1, local: e.Local}
	if e.Dir != "" {
		r.dir = t.intern(e.Dir)
	}
	ri := t.routeOf(r)
	e.key = keyOf(slot, ri)
	p := t.newEntry(&e)
	if err := t.place(p); err != nil {
		t.free = append(t.free, slot)
		return false, fmt.Errorf("routing: subscription %v: %w", e.Sub, err)
	}
	t.ids.add(h, slot, pos)
	t.slots[slot] = p
	if e.Local {
		t.local++
	}
	return true, nil
}

// place puts e in the matcher, unless (covering) another indexed entry
// with the same from-pointer and direction covers its filter: then e only
// hangs under that entry, since whenever e matches the coverer matches and
// yields the same recipient. An indexed e takes over the entries it covers.
// Local entries are always indexed (each needs its own delivery).
func (t *Table) place(e *Entry) error {
	if t.NoCovering || e.Local {
		return t.insertM(e.key, e.Filter)
	}
	bk := bucketKeyOf(e)
	// One candidate list for both scans: the first changes nothing.
	cands, shared := t.coverCandidates(bk)
	for k := range cands {
		if matching.Covers(cands[k].f, e.Filter) {
			c := &cands[k]
			if !shared { // a merged copy: list e in the bucket itself
				class, other := bucketOf(c.f)
				c = t.candIn(bucketKey{route: bk.route, other: other, class: class}, c.seq)
			}
			e.coveredBy = c.e
			if c.covers == nil {
				// Most lists stay short: one allocation for up to four.
				c.covers = make([]*Entry, 0, 4)
			}
			c.covers = append(c.covers, e)
			return nil
		}
	}
	if err := t.insertM(e.key, e.Filter); err != nil {
		return err
	}
	if shared && len(cands) > 0 {
		// The second scan takes entries out of the bucket: scan a copy.
		cands = append(t.cands[:0], cands...)
		t.cands = cands[:0]
	}
	var covers []*Entry
	for k := range cands {
		if matching.Covers(e.Filter, cands[k].f) {
			c := cands[k].e
			t.m.Delete(c.key)
			under := t.unbucket(c, &bk)
			c.coveredBy = e
			covers = append(covers, c)
			for _, g := range under {
				g.coveredBy = e
			}
			covers = append(covers, under...)
		}
	}
	t.nextSeq++
	e.seq = t.nextSeq
	t.addBucket(e, bk, covers)
	return nil
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

// Delete removes the entry of sub and returns it. The entries it covered
// are placed again.
func (t *Table) Delete(sub message.SubID) (Entry, bool) {
	s, pos, ok := t.ids.find(sub, subHash(sub), t.slots)
	if !ok {
		return Entry{}, false
	}
	e := t.slots[s]
	switch {
	case e.coveredBy != nil:
		if c := t.candIn(bucketKeyOf(e.coveredBy), e.coveredBy.seq); c != nil {
			for i, x := range c.covers {
				if x == e {
					c.covers = append(c.covers[:i], c.covers[i+1:]...)
					break
				}
			}
		}
		e.coveredBy = nil
	default:
		t.m.Delete(e.key)
		if !e.Local && !t.NoCovering {
			orphans := t.unbucket(e, nil)
			for _, o := range orphans {
				o.coveredBy = nil
				// Placing again cannot fail: each was valid when inserted.
				_ = t.place(o)
			}
		}
	}
	t.ids.remove(pos)
	if e.Local {
		t.local--
	}
	t.slots[slotOf(e.key)] = nil
	t.free = append(t.free, slotOf(e.key))
	return *e, true
}

// Batches of at least rebuildMin changes that touch at least one entry in
// rebuildShare rebuild the table instead of changing it entry by entry:
// deleting an indexed entry places every entry it covered again, so
// re-pointing a chain of filters that cover each other one by one (a
// leave's repair re-points every route through the leaver) is quadratic:
// 3,500 entries took 15 s; a rebuild is one insert each.
const (
	rebuildMin   = 64
	rebuildShare = 8
)

// Replace applies a batch of changes: the entries of del are removed, and
// every entry of put is inserted, replacing the entry of the same Sub if
// any. It returns the first insert error (the entry concerned is then
// absent; the others are applied).
func (t *Table) Replace(del []message.SubID, put []Entry) error {
	n := len(del) + len(put)
	if n < rebuildMin || n*rebuildShare < t.ids.n {
		for _, s := range del {
			t.Delete(s)
		}
		var first error
		for _, e := range put {
			t.Delete(e.Sub)
			if _, err := t.Insert(e); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	// Rebuild: the surviving entries, changed ones replaced, inserted
	// again in SubID order (deterministic) after the matcher is emptied.
	gone := make(map[message.SubID]bool, n)
	for _, s := range del {
		gone[s] = true
	}
	repl := make(map[message.SubID]Entry, len(put))
	for _, e := range put {
		repl[e.Sub] = e
	}
	var all []Entry
	for _, e := range t.Entries() {
		if gone[e.Sub] {
			continue
		}
		if r, ok := repl[e.Sub]; ok {
			delete(repl, e.Sub)
			all = append(all, r)
			continue
		}
		all = append(all, *e)
	}
	fresh := make([]Entry, 0, len(repl))
	for _, e := range put { // new Subs, in the order given (the last put of a Sub wins)
		if r, ok := repl[e.Sub]; ok {
			delete(repl, e.Sub)
			fresh = append(fresh, r)
		}
	}
	t.reset()
	var first error
	for _, e := range append(all, fresh...) {
		// Only the exported fields: the covering links of the old table
		// must not leak into the new one.
		c := Entry{Sub: e.Sub, Filter: e.Filter, From: e.From, Dir: e.Dir, Local: e.Local, Client: e.Client}
		if _, err := t.Insert(c); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// reset empties the table (and its matcher), keeping Max and NoCovering.
func (t *Table) reset() {
	for _, e := range t.slots {
		if e != nil && e.coveredBy == nil {
			t.m.Delete(e.key)
		}
	}
	t.ids.reset()
	t.slots, t.free = t.slots[:0], t.free[:0]
	clear(t.fromIdx)
	t.froms = t.froms[:0]
	t.byRank = t.byRank[:0]
	t.rrank = t.rrank[:0]
	clear(t.routeIdx)
	t.routes = t.routes[:0]
	t.remote, t.locals = 0, 0
	t.exNames, t.exSkip, t.exIdx, t.exNext = [4]message.BrokerID{}, [4]uint64{}, [4]int32{}, 0
	t.fast = t.om != nil
	t.icache = [64]int32{}
	t.rcache = [64]uint32{}
	t.local = 0
	clear(t.bslots)
	t.bn = 0
	clear(t.routeBuckets)
	t.routeBuckets = t.routeBuckets[:0]
	t.nOther = 0
}

// Indexed is the number of entries in the matcher (the others are
// covered by an indexed entry with the same from-pointer).
func (t *Table) Indexed() int {
	n := 0
	for _, e := range t.slots {
		if e != nil && e.coveredBy == nil {
			n++
		}
	}
	return n
}

// Match calls fn for every entry matching p, in the matcher's
// (deterministic) order. fn must not modify the table.
func (t *Table) Match(p *matching.Publication, fn func(*Entry)) {
	// No sort: the matcher's order is deterministic for a given history
	// of inserts and deletes, which is all determinism needs.
	t.buf = t.m.Match(p, t.buf[:0])
	for _, k := range t.buf {
		if s := slotOf(k); s < uint32(len(t.slots)) {
			if e := t.slots[s]; e != nil {
				fn(e)
			}
		}
	}
}

// Entries returns every entry sorted by SubID (for state transfer and
// status).
func (t *Table) Entries() []*Entry {
	out := make([]*Entry, 0, t.ids.n)
	for _, e := range t.slots {
		if e != nil {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return SubLess(out[i].Sub, out[j].Sub) })
	return out
}

// SubLess orders SubIDs (edge, epoch, counter).
func SubLess(a, b message.SubID) bool {
	if a.Edge != b.Edge {
		return a.Edge < b.Edge
	}
	if a.Epoch != b.Epoch {
		return a.Epoch < b.Epoch
	}
	return a.N < b.N
}

// Recipients appends to dst the distinct from-pointers of the entries
// matching p whose direction is not except (the direction p came from),
// sorted, and reports whether a local entry matched (via local, called for
// each, once). Recipients never includes "" (local entries are reported
// through local instead).
func (t *Table) Recipients(p *matching.Publication, except message.BrokerID, dst []message.BrokerID, local func(*Entry)) []message.BrokerID {
	if local != nil && repeatsName(p.Attrs) {
		// The index reports an entry once per copy of a repeated
		// attribute: each local entry once, or a subscriber gets the
		// publication twice. Edges refuse such publications
		// (matching.ValidateAttrs); a peer running older code may still
		// forward one.
		var done []*Entry
		inner := local
		local = func(e *Entry) {
			if !slices.Contains(done, e) {
				done = append(done, e)
				inner(e)
			}
		}
	}
	var skip uint64 // the routes toward except (below 64)
	c := -1         // except's slot in exNames
	if except != "" {
		for k := range t.exNames {
			if t.exNames[k] == except {
				c = k
				break
			}
		}
		if c < 0 {
			if i, ok := t.fromIdx[except]; ok {
				c = int(t.exNext % 4)
				t.exNext++
				t.exNames[c], t.exIdx[c], t.exSkip[c] = except, i, 0
				for r := range min(len(t.routes), 64) {
					if rt := &t.routes[r]; !rt.local && rt.dir == i {
						t.exSkip[c] |= 1 << r
					}
				}
			}
		}
		if c >= 0 {
			skip = t.exSkip[c]
		}
	}
	if t.fast {
		// Every route has its bit: MatchOnce leaves out the routes
		// toward except and returns each other route at most once; the
		// recipients are the ranks of their from-pointers.
		t.buf = t.om.MatchOnce(p, t.buf[:0], t.remote, skip)
		var set uint64
		for _, k := range t.buf {
			ri := k >> 32
			if ri >= uint64(len(t.rrank)) {
				continue
			}
			if t.locals>>ri&1 != 0 {
				if local != nil {
					if e := t.slots[slotOf(k)]; e != nil {
						local(e)
					}
				}
				continue
			}
			set |= 1 << t.rrank[ri]
		}
		for ; set != 0; set &= set - 1 {
			dst = append(dst, t.byRank[bits.TrailingZeros64(set)])
		}
		return dst
	}
	ex := int32(-2) // matches no dir
	if c >= 0 {
		ex = t.exIdx[c]
	}
	t.gen++
	if t.gen == 0 { // wrapped: reset the marks
		for i := range t.froms {
			t.froms[i].mark = 0
		}
		t.gen = 1
	}
	if t.om != nil {
		t.buf = t.om.MatchOnce(p, t.buf[:0], t.remote, skip)
	} else {
		t.buf = t.m.Match(p, t.buf[:0])
	}
	// The from indices found are written over the keys already read.
	picked := t.buf[:0]
	for _, k := range t.buf {
		ri := k >> 32
		if ri >= uint64(len(t.routes)) {
			continue
		}
		r := t.routes[ri]
		if r.local {
			if local != nil {
				if e := t.slots[slotOf(k)]; e != nil {
					local(e)
				}
			}
			continue
		}
		if r.dir == ex {
			continue
		}
		if f := &t.froms[r.from]; f.mark != t.gen {
			f.mark = t.gen
			picked = append(picked, uint64(r.from))
		}
	}
	// Sorted by name: the interned indices ordered by their names' ranks.
	if len(picked) <= 12 {
		for i := 1; i < len(picked); i++ {
			for j := i; j > 0 && t.froms[picked[j]].rank < t.froms[picked[j-1]].rank; j-- {
				picked[j], picked[j-1] = picked[j-1], picked[j]
			}
		}
	} else {
		slices.SortFunc(picked, func(x, y uint64) int { return int(t.froms[x].rank) - int(t.froms[y].rank) })
	}
	for _, f := range picked {
		dst = append(dst, t.froms[f].name)
	}
	return dst
}

// repeatsName reports whether two attributes have the same name.
func repeatsName(attrs []matching.Attr) bool {
	for i := 1; i < len(attrs); i++ {
		for j := 0; j < i; j++ {
			if attrs[i].Name == attrs[j].Name {
				return true
			}
		}
	}
	return false
}

// linearMatcher is the brute-force Matcher: a scan over every filter.
type linearMatcher struct {
	keys    []uint64
	filters map[uint64]matching.Filter
}

func newLinear() *linearMatcher { return &linearMatcher{filters: map[uint64]matching.Filter{}} }

func (l *linearMatcher) Insert(id uint64, f matching.Filter) error {
	if _, ok := l.filters[id]; ok {
		return fmt.Errorf("routing: key %d inserted twice", id)
	}
	l.filters[id] = f
	l.keys = append(l.keys, id)
	return nil
}

func (l *linearMatcher) Delete(id uint64) bool {
	if _, ok := l.filters[id]; !ok {
		return false
	}
	delete(l.filters, id)
	for i, k := range l.keys {
		if k == id {
			l.keys = append(l.keys[:i], l.keys[i+1:]...)
			break
		}
	}
	return true
}

func (l *linearMatcher) Match(p *matching.Publication, dst []uint64) []uint64 {
	for _, k := range l.keys {
		if f := l.filters[k]; f.Match(p) {
			dst = append(dst, k)
		}
	}
	return dst
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
