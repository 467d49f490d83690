package matching

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Index finds the subscriptions matching a publication among many, with
// insert and delete, without a linear scan. docs/index.md explains the
// design. In short: filters with the same equality predicates form a
// group; each group is filed under one of its equality predicates, the
// one shared by the fewest filters (its access key), in a hash map; inside
// a group each filter sits under one numeric bound in a sorted list (or a
// list of <> operands, or a short rest list). A publication looks up its
// attribute values in the hash map, checks each group's equalities once,
// walks only the bounds its values satisfy, and checks a candidate's
// remaining predicates only if it has any.
//
// An Index is not safe for concurrent use: one goroutine owns it (the
// protocol core does).
type Index struct {
	// What Match reads comes first (few cache lines per call).
	names   []string  // attribute id -> name
	scratch []pubAttr // the publication being matched, resolved to ids
	// done and once are MatchOnce's tag sets (zero for Match): an id
	// whose tag (id>>32, below 64) is in done is neither checked nor
	// reported; reporting an id whose tag is in once adds the tag to done.
	done, once uint64
	// acache is a direct-mapped cache in front of access (Match's lookup
	// of a publication's string values): one slot read instead of the
	// map's header, directory and group. A miss, a collision or an
	// absent key falls back to the map. Power-of-two length (or empty).
	acache  []accessSlot
	subs    []subRec
	access  []map[string]*accessList // by attribute id, then operand (accessOf)
	attrIDs map[string]uint32

	ids     idIndex           // subscription id -> slot in subs
	free    []uint32          // unused slots, reused first
	groups  map[string]*group // by the encoded set of equality predicates
	keybuf  []byte
	nAccess int // access lists in access
}

// accessSlot is a cached access list with its key (so that a hit does
// not read the list's key) and, once ready, its compiled entries (so that
// a hit does not read the list at all; only lists without equalities
// besides their key): 64 bytes, a cache line.
type accessSlot struct {
	str   string
	al    *accessList
	ents  []pent
	h     uint32 // accessHash, low bits
	attr  uint32
	ready bool
	_     [7]byte
}

// acacheMax bounds the slots of Index.acache (512 KB).
const acacheMax = 1 << 13

// dirty marks al changed: its compiled copy (and the cache's) is stale.
func (ix *Index) dirty(al *accessList) {
	al.compiled = false
	if !al.slotted {
		return // no slot holds its entries: leave the cache untouched (cold)
	}
	al.slotted = false
	if n := len(ix.acache); n > 0 {
		if sl := &ix.acache[accessHash(al.key.attr, al.key.str)&uint64(n-1)]; sl.al == al {
			sl.ents, sl.ready = nil, false
		}
	}
}

// accessHash is FNV-1a of the operand mixed with the attribute id. Fixed
// (no seed): a collision costs only the map lookup it stands for.
func accessHash(attr uint32, s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= uint64(attr)
	h *= 1099511628211
	return h
}

// accessOfCached is accessOf through acache; sl is the list's slot (nil:
// none).
func (ix *Index) accessOfCached(attr uint32, str string) (al *accessList, sl *accessSlot) {
	if len(ix.acache) == 0 {
		return ix.accessOf(bucketKey{attr: attr, str: str}), nil
	}
	h := accessHash(attr, str)
	sl = &ix.acache[h&uint64(len(ix.acache)-1)]
	if sl.h == uint32(h) && sl.al != nil && sl.attr == attr && sl.str == str {
		return sl.al, sl
	}
	al = ix.accessOf(bucketKey{attr: attr, str: str})
	if al == nil {
		return nil, nil
	}
	*sl = accessSlot{str: al.key.str, al: al, h: uint32(h), attr: attr}
	return al, sl
}

// MaxIndexAttrs bounds the distinct attribute names an Index interns (names
// are never forgotten); Insert fails with an error past it.
const MaxIndexAttrs = 1 << 20

// cpred is a predicate compiled for the index: the attribute as an id and
// the operand packed (32 bytes instead of 64).
type cpred struct {
	attr uint32
	op   Op
	kind Kind
	num  uint64 // int64 or float64 bits
	str  string
}

func (c *cpred) value() Value {
	switch c.kind {
	case KindInt:
		return Int(int64(c.num))
	case KindFloat:
		return Float(math.Float64frombits(c.num))
	}
	return Str(c.str)
}

// Where a filter sits inside its group.
const (
	inRest uint8 = iota
	inLower
	inUpper
	inNe
	inEq
)

type subRec struct {
	preds  []cpred // nil for a free slot
	grp    *group
	rngIdx int16 // index in preds of the access bound (in != inRest)
	in     uint8
	resid  bool  // has predicates besides the group's equalities and the access bound
	pos    int32 // position in grp.rest when in == inRest
}

// bucketKey is a string equality: attribute id and operand.
type bucketKey struct {
	attr uint32
	str  string
}

// accessList is what one equality predicate leads to: freq counts the
// filters having it (the choice of access key prefers rare ones); groups
// are those filed under it.
type accessList struct {
	// prog is the groups laid out flat for Match (valid if compiled):
	// walking the groups, their lists and blocks costs a cache miss per
	// pointer when many indexes share the caches (the simulator's 83
	// routing tables); the flat copy is a few sequential arrays. Any change
	// to the groups clears compiled; Match compiles again on demand.
	// compiled and prog.ents lie in the first 64 bytes (the struct is
	// 128 bytes, a size class aligned to 64): one cache line.
	compiled bool
	slotted  bool // a cache slot may hold prog.ents (see dirty)
	freq     int32
	prog     prog
	key      bucketKey
	groups   []*group
	_        [3]uint64 // to 128 bytes
}

// prog is an access list's groups for Match, in one array of 32-byte
// entries: for each group a header, its rest list (packed, three ids to
// an entry, when none has predicates to check: header a = 1), then per
// attribute with bounds a header and the four sorted lists (lower,
// upper, <>, =).
// A group header holds its range headers' count and its rest list's
// length (bits, low and high half), its equalities other than the list's
// own key (eqs[id low:id high]; every group of the list has the key's
// equality, which Match checks once for the list) and its length after
// the header (rbits). A range header holds the attribute (slot), the
// four lists' lengths (bits and id, low and high halves) and the set of
// their ids' tags (rbits, see tagBit: MatchOnce skips the lists when it
// leaves out every one).
type prog struct {
	ents []pent
	eqs  []cpred
}

// pent is an entry of a compiled list: entry in 32 bytes (the attribute
// of the inline residual in 16 bits, operators and kinds packed).
type pent struct {
	bits  uint64
	id    uint64
	rbits uint64
	slot  uint32
	rattr uint16
	a     uint8 // op | kind<<5 | more<<7 (more: residMore)
	b     uint8 // rop | rkind<<5
}

func (e *pent) op() Op     { return Op(e.a & 31) }
func (e *pent) kind() Kind { return Kind(e.a >> 5 & 3) }

func (e *pent) value() Value {
	if e.kind() == KindInt {
		return Int(int64(e.bits))
	}
	return Float(math.Float64frombits(e.bits))
}

func packEntry(e *entry) pent {
	p := pent{bits: e.bits, id: e.id, rbits: e.rbits, slot: e.slot, rattr: uint16(e.rattr),
		a: uint8(e.op) | uint8(e.kind)<<5, b: uint8(e.rop) | uint8(e.rkind)<<5}
	if e.resid == residMore {
		p.a |= 128
	}
	return p
}

// progMax bounds the entries of an access list that Match compiles: a
// compilation copies them all, so a list changing between every two
// matches costs its size per match; beyond the bound Match walks the
// groups. A variable for the tests (0: never compile).
var progMax = 2048

type group struct {
	key    string
	access bucketKey
	al     *accessList // the list it is filed under (at access)
	eqs    []cpred     // the group's equality predicates
	n      int32       // filters in the group
	rest   []restEntry
	ranges []attrRanges
}

type restEntry struct {
	id    uint64
	slot  uint32
	resid bool
}

type attrRanges struct {
	attr  uint32
	lower sortedList // > and >= bounds: satisfied by values above
	upper sortedList // < and <= bounds: satisfied by values below
	ne    sortedList // <> operands: satisfied by every other number
	eq    sortedList // = operands: satisfied by an equal number
}

// pubAttr is an attribute of the publication being matched: its id and
// its value in the publication (16 bytes; a copy of the value made the
// scratch slice three cache lines to write per match).
type pubAttr struct {
	attr uint32
	v    *Value
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{
		attrIDs: make(map[string]uint32),
		groups:  make(map[string]*group),
	}
}

// Len returns the number of filters in the index.
func (ix *Index) Len() int { return ix.ids.n }

func eqKey(attr uint32, v Value) bucketKey { return bucketKey{attr: attr, str: v.Str} }

// accessOf returns the access list of k (nil: none). The lists are kept
// per attribute id in a map by operand: Match hashes one string per
// string attribute of a publication, cheaper than hashing the
// (attribute, operand) pair.
func (ix *Index) accessOf(k bucketKey) *accessList {
	if int(k.attr) >= len(ix.access) {
		return nil
	}
	return ix.access[k.attr][k.str]
}

// setAccess files al under k. Bounded by the attribute ids (themselves
// bounded by the attributes the stored filters name).
func (ix *Index) setAccess(k bucketKey, al *accessList) {
	for int(k.attr) >= len(ix.access) {
		ix.access = append(ix.access, nil)
	}
	if ix.access[k.attr] == nil {
		ix.access[k.attr] = map[string]*accessList{}
	}
	ix.access[k.attr][k.str] = al
	ix.nAccess++
	if n := len(ix.acache); n < acacheMax && ix.nAccess*2 > n {
		// A new, larger cache (empty: it fills as Match looks up).
		ix.acache = make([]accessSlot, max(64, 2*n))
	}
}

// isEq reports whether c is a string equality: those group filters and
// are found by hashing. Numeric = is kept in sorted lists instead (one
// hash group per distinct number would cost more memory than it saves
// time).
func isEq(c *cpred) bool { return c.op == OpEq }

func isBound(c *cpred) bool { return c.op.IsNumeric() }

// boundRank orders the numeric operators by how much they narrow a
// search: = first, then one-sided ranges, then <>.
func boundRank(op Op) int {
	switch op {
	case OpNumEq:
		return 0
	case OpNumNe:
		return 2
	}
	return 1
}

// groupKey encodes the equality predicates of preds in ix.keybuf
// (Validate ensures one predicate per attribute, so sorting by attribute
// makes it canonical).
func (ix *Index) groupKey(preds []cpred) {
	b := ix.keybuf[:0]
	var idx [8]int
	eqs := idx[:0]
	for i := range preds {
		if isEq(&preds[i]) {
			eqs = append(eqs, i)
		}
	}
	slices.SortFunc(eqs, func(x, y int) int { return cmp.Compare(preds[x].attr, preds[y].attr) })
	for _, i := range eqs {
		c := &preds[i]
		b = binary.LittleEndian.AppendUint32(b, c.attr)
		if c.kind == KindString {
			b = append(b, 1)
			b = binary.LittleEndian.AppendUint32(b, uint32(len(c.str)))
			b = append(b, c.str...)
		}
	}
	ix.keybuf = b
}

// Insert adds filter f under id. It fails if f is not valid (see
// Filter.Validate), if id is already present, or at MaxIndexAttrs.
func (ix *Index) Insert(id uint64, f Filter) error {
	if err := f.Validate(); err != nil {
		return err
	}
	return ix.InsertValid(id, f)
}

// InsertValid is Insert of a filter that passed Validate (and has not
// changed since): the routing table validates every filter it inserts
// before it reaches the index.
func (ix *Index) InsertValid(id uint64, f Filter) error {
	if _, dup := ix.ids.find(id); dup {
		return fmt.Errorf("matching: index: id %d already present", id)
	}
	newNames := 0
	for _, p := range f.Preds {
		if _, ok := ix.attrID(p.Attr); !ok {
			newNames++
		}
	}
	if len(ix.names)+newNames > MaxIndexAttrs {
		return fmt.Errorf("matching: index: more than %d distinct attribute names", MaxIndexAttrs)
	}
	preds := make([]cpred, len(f.Preds))
	for i, p := range f.Preds {
		a, ok := ix.attrID(p.Attr)
		if !ok {
			a = uint32(len(ix.names))
			ix.attrIDs[p.Attr] = a
			ix.names = append(ix.names, p.Attr)
		}
		c := cpred{attr: a, op: p.Op, kind: p.Value.Kind}
		switch p.Value.Kind {
		case KindString:
			c.str = p.Value.Str
		case KindInt:
			c.num = uint64(p.Value.Int)
		case KindFloat:
			c.num = math.Float64bits(p.Value.Float)
		}
		preds[i] = c
	}
	// Count every equality predicate; a new group is filed under the
	// rarest. The class predicate is shared by every filter of its class,
	// so it is the access key only when the filter has no other equality.
	var best *accessList
	var bestKey bucketKey
	nEq := 0
	for i := range preds {
		c := &preds[i]
		if !isEq(c) {
			continue
		}
		nEq++
		k := eqKey(c.attr, c.value())
		al, _ := ix.accessOfCached(k.attr, k.str)
		if al == nil {
			al = &accessList{key: k}
			ix.setAccess(k, al)
		}
		al.freq++
		if best == nil || al.freq < best.freq {
			best, bestKey = al, k
		}
	}
	var g *group
	if nEq == 1 {
		// The only equality is best's key: its group (if any) is the one
		// group filed under best with no other equality (a group is filed
		// under one of its own equalities), found without encoding the key
		// and looking it up.
		for _, x := range best.groups {
			if len(x.eqs) == 1 {
				g = x
				break
			}
		}
	}
	if g == nil {
		ix.groupKey(preds)
		g = ix.groups[string(ix.keybuf)] // no allocation for the lookup
	}
	if g == nil {
		gk := string(ix.keybuf)
		// Validate guarantees the class predicate, so best != nil.
		g = &group{key: gk, access: bestKey, al: best}
		for i := range preds {
			if isEq(&preds[i]) {
				g.eqs = append(g.eqs, preds[i])
			}
		}
		ix.groups[gk] = g
		best.groups = append(best.groups, g)
	}
	g.n++
	ix.dirty(g.al)
	rec := subRec{preds: preds, grp: g, rngIdx: -1, in: inRest}
	// The access bound: the first =, else the first <, <=, >, >=, else
	// the first <>.
	for i := range preds {
		c := &preds[i]
		if isBound(c) && (rec.rngIdx < 0 || boundRank(c.op) < boundRank(preds[rec.rngIdx].op)) {
			rec.rngIdx = int16(i)
		}
	}
	// The residual predicates: the first numeric one is copied into the
	// list entry, so the common case (one residual bound, as in a stock
	// filter with a volume range) is checked without touching the filter.
	inl := -1
	nres := 0
	for i := range preds {
		if !isEq(&preds[i]) && i != int(rec.rngIdx) {
			rec.resid = true
			nres++
			if inl < 0 && preds[i].op.IsNumeric() {
				inl = i
			}
		}
	}
	var slot uint32
	if n := len(ix.free); n > 0 {
		slot = ix.free[n-1]
		ix.free = ix.free[:n-1]
	} else {
		slot = uint32(len(ix.subs))
		ix.subs = append(ix.subs, subRec{})
	}
	if rec.rngIdx >= 0 {
		c := &preds[rec.rngIdx]
		ar := g.rangesFor(c.attr)
		e := entry{bits: c.num, id: id, slot: slot, kind: c.kind, op: c.op}
		switch {
		case !rec.resid:
		case inl >= 0:
			r := &preds[inl]
			e.rattr, e.rbits, e.rkind, e.rop = r.attr, r.num, r.kind, r.op
			e.resid = residInline
			if nres > 1 {
				e.resid = residMore
			}
		default:
			e.resid = residMore
		}
		switch c.op {
		case OpGt, OpGe:
			rec.in = inLower
			ar.lower.insert(e)
		case OpLt, OpLe:
			rec.in = inUpper
			ar.upper.insert(e)
		case OpNumEq:
			rec.in = inEq
			ar.eq.insert(e)
		default:
			rec.in = inNe
			ar.ne.insert(e)
		}
	} else {
		rec.pos = int32(len(g.rest))
		g.rest = append(g.rest, restEntry{id: id, slot: slot, resid: rec.resid})
	}
	ix.subs[slot] = rec
	ix.ids.put(id, slot)
	return nil
}

// attrID is attrIDs[name]: a scan of names while they are few (they
// are: filters name a handful of attributes; often the same strings).
func (ix *Index) attrID(name string) (uint32, bool) {
	if len(ix.names) <= 8 {
		for i, s := range ix.names {
			if s == name {
				return uint32(i), true
			}
		}
		return 0, false
	}
	a, ok := ix.attrIDs[name]
	return a, ok
}

func (g *group) rangesFor(attr uint32) *attrRanges {
	for i := range g.ranges {
		if g.ranges[i].attr == attr {
			return &g.ranges[i]
		}
	}
	g.ranges = append(g.ranges, attrRanges{attr: attr})
	return &g.ranges[len(g.ranges)-1]
}

// Delete removes the filter with the given id and reports whether it was
// present.
func (ix *Index) Delete(id uint64) bool {
	slot, ok := ix.ids.get(id)
	if !ok {
		return false
	}
	rec := &ix.subs[slot]
	g := rec.grp
	ix.dirty(g.al)
	if rec.in != inRest {
		c := &rec.preds[rec.rngIdx]
		ar := g.rangesFor(c.attr)
		e := entry{bits: c.num, id: id, slot: slot, kind: c.kind, op: c.op}
		switch rec.in {
		case inLower:
			ar.lower.remove(e)
		case inUpper:
			ar.upper.remove(e)
		case inEq:
			ar.eq.remove(e)
		default:
			ar.ne.remove(e)
		}
	} else {
		last := len(g.rest) - 1
		moved := g.rest[last]
		g.rest[rec.pos] = moved
		ix.subs[moved.slot].pos = rec.pos
		g.rest = g.rest[:last]
	}
	g.n--
	if g.n == 0 {
		delete(ix.groups, g.key)
		if al := ix.accessOf(g.access); al != nil {
			if i := slices.Index(al.groups, g); i >= 0 {
				al.groups = slices.Delete(al.groups, i, i+1)
			}
		}
	}
	for i := range rec.preds {
		c := &rec.preds[i]
		if !isEq(c) {
			continue
		}
		k := eqKey(c.attr, c.value())
		if al := ix.accessOf(k); al != nil {
			al.freq--
			if al.freq <= 0 {
				delete(ix.access[k.attr], k.str)
				ix.nAccess--
				if n := len(ix.acache); n > 0 {
					if sl := &ix.acache[accessHash(k.attr, k.str)&uint64(n-1)]; sl.al == al {
						*sl = accessSlot{}
					}
				}
			}
		}
	}
	*rec = subRec{}
	ix.ids.del(id)
	ix.free = append(ix.free, slot)
	return true
}

// Filter returns the filter stored under id.
func (ix *Index) Filter(id uint64) (Filter, bool) {
	slot, ok := ix.ids.get(id)
	if !ok {
		return Filter{}, false
	}
	rec := &ix.subs[slot]
	f := Filter{Preds: make([]Predicate, len(rec.preds))}
	for i := range rec.preds {
		c := &rec.preds[i]
		f.Preds[i] = Predicate{Attr: ix.names[c.attr], Op: c.op, Value: c.value()}
	}
	return f, true
}

// Match appends to dst the id of every filter matching p, each once, in
// no particular order, and returns the extended slice.
func (ix *Index) Match(p *Publication, dst []uint64) []uint64 {
	ix.done, ix.once = 0, 0
	return ix.match(p, dst, true)
}

// MatchOnce is Match restricted by the ids' tags (an id's tag is its high
// 32 bits; only tags below 64 are restricted): an id whose tag is in skip
// (bit tag set) is not reported, and of the ids whose tag is in once only
// the first found is reported; the others are not checked at all. The ids
// reported are those Match would report, in the same order, less the
// ones left out. The routing table uses it to find each from-pointer
// once and none toward the direction a publication came from.
func (ix *Index) MatchOnce(p *Publication, dst []uint64, once, skip uint64) []uint64 {
	ix.done, ix.once = skip, once
	dst = ix.match(p, dst, true)
	ix.done, ix.once = 0, 0
	return dst
}

// skips reports whether id is left out (see MatchOnce); taken records
// that id is reported.
func (ix *Index) skips(id uint64) bool { return ix.done>>(id>>32)&1 != 0 }

func (ix *Index) taken(id uint64) { ix.done |= ix.once & (1 << (id >> 32)) }

// tagBit is id's tag as a set (see MatchOnce): every tag for an id whose
// tag is 64 or more (never left out).
func tagBit(id uint64) uint64 {
	if t := id >> 32; t < 64 {
		return 1 << t
	}
	return ^uint64(0)
}

// match is Match; with compiled false it walks the groups of every access
// list, compiled or not (the tests compare both).
func (ix *Index) match(p *Publication, dst []uint64, compiled bool) []uint64 {
	pa := ix.scratch[:0]
	if len(ix.names) <= 8 {
		// A few names (the usual case): comparing strings (often the
		// same pointer) is cheaper than hashing them.
		for i := range p.Attrs {
			for id, n := range ix.names {
				if n == p.Attrs[i].Name {
					pa = append(pa, pubAttr{attr: uint32(id), v: &p.Attrs[i].Value})
					break
				}
			}
		}
	} else {
		for i := range p.Attrs {
			if id, ok := ix.attrIDs[p.Attrs[i].Name]; ok {
				pa = append(pa, pubAttr{attr: id, v: &p.Attrs[i].Value})
			}
		}
	}
	ix.scratch = pa
	for i := range pa {
		if pa[i].v.Kind != KindString {
			continue
		}
		if !compiled {
			if al := ix.accessOf(eqKey(pa[i].attr, *pa[i].v)); al != nil {
				dst = ix.matchGroups(al, pa, dst)
			}
			continue
		}
		al, sl := ix.accessOfCached(pa[i].attr, pa[i].v.Str)
		if al == nil {
			continue
		}
		if sl == nil || !sl.ready {
			if !al.compiled {
				al.compile()
			}
			if al.compiled && sl != nil && len(al.prog.eqs) == 0 {
				sl.ents, sl.ready = al.prog.ents, true
				al.slotted = true
			}
		}
		if sl != nil && sl.ready || al.compiled {
			// Every group of al has its key's equality: it holds if pa[i]
			// is the first value of its attribute (the one lookup finds).
			if v, _ := lookup(pa, pa[i].attr); v.Str != pa[i].v.Str || v.Kind != KindString {
				continue
			}
			if sl != nil && sl.ready {
				dst = ix.matchProg(sl.ents, nil, pa, dst)
			} else {
				dst = ix.matchProg(al.prog.ents, al.prog.eqs, pa, dst)
			}
			continue
		}
		dst = ix.matchGroups(al, pa, dst)
	}
	return dst
}

// compile lays out al's groups flat (prog), if they hold at most progMax
// entries and name attribute ids that fit 16 bits.
func (al *accessList) compile() {
	n := 0
	for _, g := range al.groups {
		n += int(g.n)
	}
	if n > progMax {
		al.prog = prog{}
		return
	}
	pr := &al.prog
	pr.eqs, pr.ents = pr.eqs[:0], pr.ents[:0]
	for _, g := range al.groups {
		gi := len(pr.ents)
		pr.ents = append(pr.ents, pent{})
		eq0 := len(pr.eqs)
		for j := range g.eqs {
			if c := &g.eqs[j]; c.attr != al.key.attr || c.str != al.key.str {
				pr.eqs = append(pr.eqs, *c)
			}
		}
		packed := len(g.rest) > 0
		for _, r := range g.rest {
			packed = packed && !r.resid
		}
		if packed {
			// Nothing to check: only the ids, three to an entry.
			for j := 0; j < len(g.rest); j += 3 {
				e := pent{bits: g.rest[j].id}
				if j+1 < len(g.rest) {
					e.id = g.rest[j+1].id
				}
				if j+2 < len(g.rest) {
					e.rbits = g.rest[j+2].id
				}
				pr.ents = append(pr.ents, e)
			}
			pr.ents[gi].a = 1
		} else {
			for _, r := range g.rest {
				e := pent{id: r.id, slot: r.slot}
				if r.resid {
					e.a = 128
				}
				pr.ents = append(pr.ents, e)
			}
		}
		pr.ents[gi].bits = uint64(len(g.ranges)) | uint64(len(g.rest))<<32
		pr.ents[gi].id = uint64(eq0) | uint64(len(pr.eqs))<<32
		for j := range g.ranges {
			ar := &g.ranges[j]
			var ln [4]int
			for k, l := range [4]*sortedList{&ar.lower, &ar.upper, &ar.ne, &ar.eq} {
				for _, b := range l.blocks {
					ln[k] += len(b)
				}
			}
			hi := len(pr.ents)
			pr.ents = append(pr.ents, pent{slot: ar.attr,
				bits: uint64(ln[0]) | uint64(ln[1])<<32, id: uint64(ln[2]) | uint64(ln[3])<<32})
			var tags uint64
			for _, l := range [4]*sortedList{&ar.lower, &ar.upper, &ar.ne, &ar.eq} {
				for _, b := range l.blocks {
					for k := range b {
						if b[k].rattr > math.MaxUint16 {
							al.prog = prog{}
							return
						}
						pr.ents = append(pr.ents, packEntry(&b[k]))
						tags |= tagBit(b[k].id)
					}
				}
			}
			pr.ents[hi].rbits = tags
		}
		pr.ents[gi].rbits = uint64(len(pr.ents) - gi - 1)
	}
	al.compiled = true
}

// matchProg is matchGroups over a compiled access list: the same visits
// in the same order.
func (ix *Index) matchProg(ents []pent, eqs []cpred, pa []pubAttr, dst []uint64) []uint64 {
groups:
	for i := 0; i < len(ents); {
		g := &ents[i]
		end := i + 1 + int(g.rbits)
		nr, nrest := int(uint32(g.bits)), int(g.bits>>32)
		for j := int(uint32(g.id)); j < int(g.id>>32); j++ {
			c := &eqs[j]
			v, ok := lookup(pa, c.attr)
			if !ok || !holdsC(c, v) {
				i = end
				continue groups
			}
		}
		k := i + 1
		if g.a&1 != 0 {
			// The rest list packed: ids only, three to an entry.
			for left := nrest; left > 0; left -= 3 {
				e := &ents[k]
				k++
				ids := [3]uint64{e.bits, e.id, e.rbits}
				for _, id := range ids[:min(left, 3)] {
					if !ix.skips(id) {
						dst = append(dst, id)
						ix.taken(id)
					}
				}
			}
		} else {
			for j := k; j < k+nrest; j++ {
				if e := &ents[j]; !ix.skips(e.id) && (e.a&128 == 0 || ix.check(e.slot, pa)) {
					dst = append(dst, e.id)
					ix.taken(e.id)
				}
			}
			k += nrest
		}
		for range nr {
			h := &ents[k]
			nl, nu, nn, ne := int(uint32(h.bits)), int(h.bits>>32), int(uint32(h.id)), int(h.id>>32)
			k++
			lo := k
			k += nl + nu + nn + ne
			if h.rbits&^ix.done == 0 {
				continue // every entry's tag is left out (MatchOnce)
			}
			v, ok := lookup(pa, h.slot)
			if !ok || !v.IsNumber() {
				continue
			}
			if nl > 0 {
				dst = scanBelowP(ents[lo:lo+nl], v, ix, pa, dst)
			}
			lo += nl
			if nu > 0 {
				dst = scanAboveP(ents[lo:lo+nu], v, ix, pa, dst)
			}
			lo += nu
			if nn > 0 {
				dst = scanNeP(ents[lo:lo+nn], v, ix, pa, dst)
			}
			lo += nn
			if ne > 0 {
				dst = scanEqP(ents[lo:lo+ne], v, ix, pa, dst)
			}
		}
		i = end
	}
	return dst
}

// matchGroups matches the groups of al by walking them.
func (ix *Index) matchGroups(al *accessList, pa []pubAttr, dst []uint64) []uint64 {
groups:
	for _, g := range al.groups {
		for j := range g.eqs {
			c := &g.eqs[j]
			v, ok := lookup(pa, c.attr)
			if !ok || !holdsC(c, v) {
				continue groups
			}
		}
		for _, r := range g.rest {
			if !ix.skips(r.id) && (!r.resid || ix.check(r.slot, pa)) {
				dst = append(dst, r.id)
				ix.taken(r.id)
			}
		}
		for j := range g.ranges {
			ar := &g.ranges[j]
			v, ok := lookup(pa, ar.attr)
			if !ok || !v.IsNumber() {
				continue
			}
			dst = ar.lower.scanBelow(v, ix, pa, dst)
			dst = ar.upper.scanAbove(v, ix, pa, dst)
			dst = ar.ne.scanNe(v, ix, pa, dst)
			dst = ar.eq.scanEq(v, ix, pa, dst)
		}
	}
	return dst
}

func lookup(pa []pubAttr, attr uint32) (Value, bool) {
	for i := range pa {
		if pa[i].attr == attr {
			return *pa[i].v, true
		}
	}
	return Value{}, false
}

// check verifies the predicates of the filter in slot other than its
// group's equalities and its access bound.
func (ix *Index) check(slot uint32, pa []pubAttr) bool {
	rec := &ix.subs[slot]
	for i := range rec.preds {
		c := &rec.preds[i]
		if i == int(rec.rngIdx) || isEq(c) {
			continue
		}
		v, ok := lookup(pa, c.attr)
		if !ok || !holdsC(c, v) {
			return false
		}
	}
	return true
}

func holdsC(c *cpred, v Value) bool {
	switch c.kind {
	case KindString:
		if v.Kind != KindString {
			return false
		}
		switch c.op {
		case OpEq:
			return v.Str == c.str
		case OpNeq:
			return v.Str != c.str
		case OpStrPrefix:
			return strings.HasPrefix(v.Str, c.str)
		}
	case KindInt:
		if v.Kind == KindInt {
			switch c.op {
			case OpLt:
				return v.Int < int64(c.num)
			case OpLe:
				return v.Int <= int64(c.num)
			case OpGt:
				return v.Int > int64(c.num)
			case OpGe:
				return v.Int >= int64(c.num)
			}
		}
	}
	return holds(c.op, c.value(), v)
}

// entry is one numeric bound in a sortedList, with what a match needs
// without touching the filter: its id, whether it has predicates left to
// check, and a copy of the first numeric one (40 bytes).
type entry struct {
	bits  uint64
	id    uint64
	rbits uint64 // the inline residual predicate's operand, if rop != OpInvalid
	slot  uint32
	rattr uint32
	kind  Kind
	op    Op
	rkind Kind
	rop   Op
	resid uint8 // residNone, residInline or residMore
}

const (
	residNone   = iota // nothing left to check
	residInline        // only the inline predicate is left
	residMore          // check the filter (the inline predicate, if any, first)
)

// accept reports whether the filter behind e matches, given that its
// group's equalities and its access bound hold.
func (ix *Index) accept(e *entry, pa []pubAttr) bool {
	if e.resid == residNone {
		return true
	}
	if e.rop != OpInvalid {
		v, ok := lookup(pa, e.rattr)
		if !ok {
			return false
		}
		if !inlineHolds(e.rop, e.rkind, e.rbits, v) {
			return false
		}
		if e.resid == residInline {
			return true
		}
	}
	return ix.check(e.slot, pa)
}

func (e *entry) value() Value {
	if e.kind == KindInt {
		return Int(int64(e.bits))
	}
	return Float(math.Float64frombits(e.bits))
}

// less orders entries by bound value, then slot (a total order, so an
// entry can be found again for removal).
func (e *entry) less(f *entry) bool {
	if c := cmpNum(e.value(), f.value()); c != 0 {
		return c < 0
	}
	return e.slot < f.slot
}

// sortedList keeps entries sorted in blocks of at most blockCap, so an
// insert or a removal moves at most blockCap entries plus one block
// pointer per blockCap entries, and a scan walks entries in order.
type sortedList struct {
	blocks [][]entry
}

const blockCap = 128

// find returns the block that holds e or where e belongs.
func (l *sortedList) find(e *entry) int {
	lo, hi := 0, len(l.blocks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		b := l.blocks[m]
		if b[len(b)-1].less(e) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(l.blocks) {
		lo--
	}
	return lo
}

func posIn(b []entry, e *entry) int {
	lo, hi := 0, len(b)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b[m].less(e) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (l *sortedList) insert(e entry) {
	if len(l.blocks) == 0 {
		// Most lists stay short (one per attribute and group): start
		// small and let append grow the block up to blockCap, instead
		// of 6 KB per list (75 MB of garbage building srds09's tables).
		b := make([]entry, 1, 4)
		b[0] = e
		l.blocks = append(l.blocks, b)
		return
	}
	bi := l.find(&e)
	b := l.blocks[bi]
	i := posIn(b, &e)
	if len(b) < blockCap {
		b = append(b, entry{})
		copy(b[i+1:], b[i:])
		b[i] = e
		l.blocks[bi] = b
		return
	}
	// Split a full block in two halves, then insert into the right one.
	h := blockCap / 2
	left := make([]entry, h, blockCap)
	right := make([]entry, blockCap-h, blockCap)
	copy(left, b[:h])
	copy(right, b[h:])
	l.blocks = append(l.blocks, nil)
	copy(l.blocks[bi+2:], l.blocks[bi+1:])
	l.blocks[bi], l.blocks[bi+1] = left, right
	if i <= h {
		left = append(left, entry{})
		copy(left[i+1:], left[i:])
		left[i] = e
		l.blocks[bi] = left
	} else {
		i -= h
		right = append(right, entry{})
		copy(right[i+1:], right[i:])
		right[i] = e
		l.blocks[bi+1] = right
	}
}

func (l *sortedList) remove(e entry) bool {
	if len(l.blocks) == 0 {
		return false
	}
	bi := l.find(&e)
	b := l.blocks[bi]
	i := posIn(b, &e)
	if i == len(b) || b[i].slot != e.slot {
		return false
	}
	copy(b[i:], b[i+1:])
	b = b[:len(b)-1]
	if len(b) == 0 {
		copy(l.blocks[bi:], l.blocks[bi+1:])
		l.blocks[len(l.blocks)-1] = nil
		l.blocks = l.blocks[:len(l.blocks)-1]
	} else {
		l.blocks[bi] = b
	}
	return true
}

// scanBelow visits the > and >= bounds that v satisfies (bounds below v,
// and equal ones for >=), from the smallest up, and stops at the first
// bound v does not satisfy.
func (l *sortedList) scanBelow(v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	for _, b := range l.blocks {
		var done bool
		if dst, done = scanBelow(b, v, ix, pa, dst); done {
			break
		}
	}
	return dst
}

// scanBelow is sortedList.scanBelow over one sorted run of entries; done
// reports a bound v does not satisfy (the scan stops there).
func scanBelow(b []entry, v Value, ix *Index, pa []pubAttr, dst []uint64) (_ []uint64, done bool) {
	intFast := v.Kind == KindInt
	for k := range b {
		e := &b[k]
		var c int
		if intFast && e.kind == KindInt {
			c = cmp64(int64(e.bits), v.Int)
		} else {
			c = cmpNum(e.value(), v)
		}
		if c > 0 || c == 0 && e.op == OpGt {
			if c > 0 {
				return dst, true
			}
			continue // equal bounds of > and >= interleave; keep going
		}
		if !ix.skips(e.id) && ix.accept(e, pa) {
			dst = append(dst, e.id)
			ix.taken(e.id)
		}
	}
	return dst, false
}

// scanAbove visits the < and <= bounds that v satisfies, from the largest
// down.
func (l *sortedList) scanAbove(v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	for bi := len(l.blocks) - 1; bi >= 0; bi-- {
		var done bool
		if dst, done = scanAbove(l.blocks[bi], v, ix, pa, dst); done {
			break
		}
	}
	return dst
}

// scanAbove is sortedList.scanAbove over one sorted run of entries.
func scanAbove(b []entry, v Value, ix *Index, pa []pubAttr, dst []uint64) (_ []uint64, done bool) {
	intFast := v.Kind == KindInt
	for k := len(b) - 1; k >= 0; k-- {
		e := &b[k]
		var c int
		if intFast && e.kind == KindInt {
			c = cmp64(int64(e.bits), v.Int)
		} else {
			c = cmpNum(e.value(), v)
		}
		if c < 0 || c == 0 && e.op == OpLt {
			if c < 0 {
				return dst, true
			}
			continue
		}
		if !ix.skips(e.id) && ix.accept(e, pa) {
			dst = append(dst, e.id)
			ix.taken(e.id)
		}
	}
	return dst, false
}

// scanNe visits the <> operands that differ from v: all but a run of
// equal ones.
func (l *sortedList) scanNe(v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	for _, b := range l.blocks {
		dst = scanNe(b, v, ix, pa, dst)
	}
	return dst
}

// scanNe is sortedList.scanNe over a run of entries.
func scanNe(b []entry, v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	for k := range b {
		e := &b[k]
		if cmpNum(e.value(), v) == 0 {
			continue
		}
		if !ix.skips(e.id) && ix.accept(e, pa) {
			dst = append(dst, e.id)
			ix.taken(e.id)
		}
	}
	return dst
}

// scanEq visits the = operands equal to v.
func (l *sortedList) scanEq(v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	if len(l.blocks) == 0 {
		return dst
	}
	probe := entry{slot: 0}
	switch v.Kind {
	case KindInt:
		probe.kind, probe.bits = KindInt, uint64(v.Int)
	default:
		probe.kind, probe.bits = KindFloat, math.Float64bits(v.Float)
	}
	// Equal numbers may be written as int or float: the probe sorts
	// before all of them only if compared by value then slot, which less
	// does; slot 0 is the smallest.
	bi := l.find(&probe)
	for ; bi < len(l.blocks); bi++ {
		b := l.blocks[bi]
		for k := posIn(b, &probe); k < len(b); k++ {
			e := &b[k]
			if cmpNum(e.value(), v) != 0 {
				return dst
			}
			if !ix.skips(e.id) && ix.accept(e, pa) {
				dst = append(dst, e.id)
				ix.taken(e.id)
			}
		}
	}
	return dst
}

// inlineHolds reports whether an entry's inline numeric predicate (op,
// operand kind and bits) holds for v; int against int without building a
// Value (the common case).
func inlineHolds(op Op, kind Kind, bits uint64, v Value) bool {
	if kind == KindInt && v.Kind == KindInt {
		c := cmp64(v.Int, int64(bits))
		switch op {
		case OpLt:
			return c < 0
		case OpLe:
			return c <= 0
		case OpGt:
			return c > 0
		case OpGe:
			return c >= 0
		case OpNumEq:
			return c == 0
		}
		return c != 0 // OpNumNe
	}
	c := Float(math.Float64frombits(bits))
	if kind == KindInt {
		c = Int(int64(bits))
	}
	return holds(op, c, v)
}

// acceptP is accept for a compiled entry.
func (ix *Index) acceptP(e *pent, pa []pubAttr) bool {
	rop := Op(e.b & 31)
	more := e.a&128 != 0
	if rop == OpInvalid {
		return !more || ix.check(e.slot, pa)
	}
	v, ok := lookup(pa, uint32(e.rattr))
	if !ok {
		return false
	}
	if !inlineHolds(rop, Kind(e.b>>5&3), e.rbits, v) {
		return false
	}
	return !more || ix.check(e.slot, pa)
}

// cmpTo compares e's bound with v (intFast: v is an int, so an int bound
// is compared without building a Value).
func (e *pent) cmpTo(v Value, intFast bool) int {
	if intFast && e.kind() == KindInt {
		return cmp64(int64(e.bits), v.Int)
	}
	return cmpNum(e.value(), v)
}

// scanBelowP is scanBelow over compiled entries.
func scanBelowP(b []pent, v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	intFast := v.Kind == KindInt
	for k := range b {
		e := &b[k]
		c := e.cmpTo(v, intFast)
		if c > 0 || c == 0 && e.op() == OpGt {
			if c > 0 {
				return dst
			}
			continue
		}
		if !ix.skips(e.id) && ix.acceptP(e, pa) {
			dst = append(dst, e.id)
			ix.taken(e.id)
		}
	}
	return dst
}

// scanAboveP is scanAbove over compiled entries.
func scanAboveP(b []pent, v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	intFast := v.Kind == KindInt
	for k := len(b) - 1; k >= 0; k-- {
		e := &b[k]
		c := e.cmpTo(v, intFast)
		if c < 0 || c == 0 && e.op() == OpLt {
			if c < 0 {
				return dst
			}
			continue
		}
		if !ix.skips(e.id) && ix.acceptP(e, pa) {
			dst = append(dst, e.id)
			ix.taken(e.id)
		}
	}
	return dst
}

// scanNeP is scanNe over compiled entries.
func scanNeP(b []pent, v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	intFast := v.Kind == KindInt
	for k := range b {
		e := &b[k]
		if e.cmpTo(v, intFast) == 0 {
			continue
		}
		if !ix.skips(e.id) && ix.acceptP(e, pa) {
			dst = append(dst, e.id)
			ix.taken(e.id)
		}
	}
	return dst
}

// scanEqP is scanEq over compiled entries: from the first bound not below
// v (where scanEq's probe lands), the bounds equal to v.
func scanEqP(b []pent, v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	intFast := v.Kind == KindInt
	lo, hi := 0, len(b)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b[m].cmpTo(v, intFast) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	for k := lo; k < len(b); k++ {
		e := &b[k]
		if e.cmpTo(v, intFast) != 0 {
			return dst
		}
		if !ix.skips(e.id) && ix.acceptP(e, pa) {
			dst = append(dst, e.id)
			ix.taken(e.id)
		}
	}
	return dst
}
