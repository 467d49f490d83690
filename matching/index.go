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
	subs       []subRec
	access     []map[string]*accessList // by attribute id, then operand (accessOf)
	attrIDs    map[string]uint32

	ids    idIndex           // subscription id -> slot in subs
	free   []uint32          // unused slots, reused first
	groups map[string]*group // by the encoded set of equality predicates
	keybuf []byte
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
	freq   int32
	groups []*group
}

type group struct {
	key    string
	access bucketKey // the list it is filed under
	eqs    []cpred   // the group's equality predicates
	n      int32     // filters in the group
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
		al := ix.accessOf(k)
		if al == nil {
			al = &accessList{}
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
		g = &group{key: gk, access: bestKey}
		for i := range preds {
			if isEq(&preds[i]) {
				g.eqs = append(g.eqs, preds[i])
			}
		}
		ix.groups[gk] = g
		best.groups = append(best.groups, g)
	}
	g.n++
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
	return ix.match(p, dst)
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
	dst = ix.match(p, dst)
	ix.done, ix.once = 0, 0
	return dst
}

// skips reports whether id is left out (see MatchOnce); taken records
// that id is reported.
func (ix *Index) skips(id uint64) bool { return ix.done>>(id>>32)&1 != 0 }

func (ix *Index) taken(id uint64) { ix.done |= ix.once & (1 << (id >> 32)) }

// match is Match and MatchOnce: it resolves p's attributes to ids, then
// walks the groups filed under each of p's string values.
func (ix *Index) match(p *Publication, dst []uint64) []uint64 {
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
		if al := ix.accessOf(eqKey(pa[i].attr, *pa[i].v)); al != nil {
			dst = ix.matchGroups(al, pa, dst)
		}
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
