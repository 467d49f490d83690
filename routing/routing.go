// Package routing is the subscription routing table of one broker: entries
// with from-pointers (PROTOCOL §3), matching a publication against them,
// the recipient set of a publication, and the bookkeeping of flood
// confirmations (a flood is confirmed hop by hop once every broker behind a
// hop has answered). It is pure: no I/O, no clock.
package routing

import (
	"fmt"
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
	// route is a (From, Dir) pair), class and anchor (see cover.go), each
	// bucket in increasing seq; routeBuckets lists the home buckets of
	// each route. Covering only looks at entries with the same From and Dir,
	// and (docs in coverers and covered) an entry [class,eq,v] can
	// neither cover nor be covered by a satisfiable [class,eq,w] with
	// w ≠ v, so an insert scans its class bucket instead of every entry
	// with its From: with 2,600 subscriptions over 26 classes that is 26×
	// fewer Covers (and within a class, the anchors narrow it down). The
	// buckets are the slots of an open-addressing table (linear probing, one
	// 64-byte slot each, in place: bslots; bn used): an insert finds its
	// table cold, and a lookup usually reads the one line of its bucket
	// (a map keyed by the struct read a control word, then a slot line).
	// routeBuckets lists the home (not alias) buckets of each route (by
	// route index; in no order: a freed place takes the last).
	bslots       []bucket
	bn           int
	routeBuckets [][]bucketKey
	nOther       int // entries in "other" buckets (none: no lookup of them)
	nPinned      int // entries with an anchor (none: no lookup of their buckets)
	nextSeq      uint64
	cands        []cand      // scratch for gather
	keys         []bucketKey // scratch for coverers and covered
	pins         []uint64    // scratch for pinsOf
	// mv is m when it can insert without validating again (nil: it
	// cannot); here, not next to m: Recipients' fields come first.
	mv validInserter
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
	cands, shared := t.coverers(bk, e.Filter)
	for k := range cands {
		if matching.Covers(cands[k].f, e.Filter) {
			c := &cands[k]
			if !shared { // a merged copy: list e in the bucket itself
				c = t.candIn(homeKey(bk.route, c.f), c.seq)
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
	cands, shared = t.covered(bk)
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
	t.nPinned = 0
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
