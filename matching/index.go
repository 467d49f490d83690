package matching

import (
	"fmt"
	"math"
	"strings"
)

// Index finds the subscriptions matching a publication among many, with
// insert and delete, without a linear scan. docs/index.md explains the
// design; in short, each filter is filed under one access equality
// predicate (the one shared by the fewest filters, found by hashing), and
// inside that bucket under one numeric bound (kept sorted, so a
// publication walks only the bounds it satisfies) or, without one, in a
// short list. Candidates found that way are checked against their other
// predicates.
//
// An Index is not safe for concurrent use: one goroutine owns it (the
// protocol core does).
type Index struct {
	ids     map[uint64]uint32 // subscription id -> slot in subs
	subs    []subRec
	free    []uint32 // unused slots, reused first
	attrIDs map[string]uint32
	names   []string // attribute id -> name
	buckets map[bucketKey]*bucket

	scratch []pubAttr // the publication being matched, resolved to ids
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

type subRec struct {
	id     uint64
	preds  []cpred // nil for a free slot
	bkt    *bucket
	eqIdx  int16 // index in preds of the access equality predicate
	rngIdx int16 // index in preds of the access bound, or -1 when in bkt.rest
	pos    int32 // position in bkt.rest when rngIdx < 0
}

type bucketKey struct {
	attr uint32
	kind uint8 // 1 string, 2 number (num holds a numKey)
	num  numKey
	str  string
}

type bucket struct {
	key    bucketKey
	freq   int32 // filters having this equality predicate (filed here or not)
	rest   []uint32
	ranges []attrRanges
}

type attrRanges struct {
	attr  uint32
	lower sortedList // > and >= bounds: satisfied by values above
	upper sortedList // < and <= bounds: satisfied by values below
}

type pubAttr struct {
	attr uint32
	v    Value
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{
		ids:     make(map[uint64]uint32),
		attrIDs: make(map[string]uint32),
		buckets: make(map[bucketKey]*bucket),
	}
}

// Len returns the number of filters in the index.
func (ix *Index) Len() int { return len(ix.ids) }

func eqKey(attr uint32, v Value) bucketKey {
	if v.Kind == KindString {
		return bucketKey{attr: attr, kind: 1, str: v.Str}
	}
	return bucketKey{attr: attr, kind: 2, num: keyOf(v)}
}

func isEq(c *cpred) bool { return c.op == OpEq || c.op == OpNumEq }

func isBound(c *cpred) bool { return c.op == OpLt || c.op == OpLe || c.op == OpGt || c.op == OpGe }

// Insert adds filter f under id. It fails if f is not valid (see
// Filter.Validate), if id is already present, or at MaxIndexAttrs.
func (ix *Index) Insert(id uint64, f Filter) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if _, dup := ix.ids[id]; dup {
		return fmt.Errorf("matching: index: id %d already present", id)
	}
	newNames := 0
	for _, p := range f.Preds {
		if _, ok := ix.attrIDs[p.Attr]; !ok {
			newNames++
		}
	}
	if len(ix.names)+newNames > MaxIndexAttrs {
		return fmt.Errorf("matching: index: more than %d distinct attribute names", MaxIndexAttrs)
	}
	preds := make([]cpred, len(f.Preds))
	for i, p := range f.Preds {
		a, ok := ix.attrIDs[p.Attr]
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
	// Count every equality predicate, then file the filter under the
	// rarest one. The class predicate is shared by every filter of its
	// class, so it is chosen only when nothing rarer exists.
	var best *bucket
	eqIdx := -1
	for i := range preds {
		c := &preds[i]
		if !isEq(c) {
			continue
		}
		k := eqKey(c.attr, c.value())
		b := ix.buckets[k]
		if b == nil {
			b = &bucket{key: k}
			ix.buckets[k] = b
		}
		b.freq++
		if best == nil || b.freq < best.freq {
			best, eqIdx = b, i
		}
	}
	// Validate guarantees the class predicate, so best != nil.
	rec := subRec{id: id, preds: preds, bkt: best, eqIdx: int16(eqIdx), rngIdx: -1}
	for i := range preds {
		if i != eqIdx && isBound(&preds[i]) {
			rec.rngIdx = int16(i)
			break
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
		ar := best.rangesFor(c.attr)
		e := entry{bits: c.num, slot: slot, kind: c.kind, op: c.op}
		if c.op == OpGt || c.op == OpGe {
			ar.lower.insert(e)
		} else {
			ar.upper.insert(e)
		}
	} else {
		rec.pos = int32(len(best.rest))
		best.rest = append(best.rest, slot)
	}
	ix.subs[slot] = rec
	ix.ids[id] = slot
	return nil
}

func (b *bucket) rangesFor(attr uint32) *attrRanges {
	for i := range b.ranges {
		if b.ranges[i].attr == attr {
			return &b.ranges[i]
		}
	}
	b.ranges = append(b.ranges, attrRanges{attr: attr})
	return &b.ranges[len(b.ranges)-1]
}

// Delete removes the filter with the given id and reports whether it was
// present.
func (ix *Index) Delete(id uint64) bool {
	slot, ok := ix.ids[id]
	if !ok {
		return false
	}
	rec := &ix.subs[slot]
	b := rec.bkt
	if rec.rngIdx >= 0 {
		c := &rec.preds[rec.rngIdx]
		ar := b.rangesFor(c.attr)
		e := entry{bits: c.num, slot: slot, kind: c.kind, op: c.op}
		if c.op == OpGt || c.op == OpGe {
			ar.lower.remove(e)
		} else {
			ar.upper.remove(e)
		}
	} else {
		last := len(b.rest) - 1
		moved := b.rest[last]
		b.rest[rec.pos] = moved
		ix.subs[moved].pos = rec.pos
		b.rest = b.rest[:last]
	}
	for i := range rec.preds {
		c := &rec.preds[i]
		if !isEq(c) {
			continue
		}
		k := eqKey(c.attr, c.value())
		if eb := ix.buckets[k]; eb != nil {
			eb.freq--
			if eb.freq <= 0 {
				delete(ix.buckets, k)
			}
		}
	}
	*rec = subRec{}
	delete(ix.ids, id)
	ix.free = append(ix.free, slot)
	return true
}

// Filter returns the filter stored under id.
func (ix *Index) Filter(id uint64) (Filter, bool) {
	slot, ok := ix.ids[id]
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
	pa := ix.scratch[:0]
	for i := range p.Attrs {
		if id, ok := ix.attrIDs[p.Attrs[i].Name]; ok {
			pa = append(pa, pubAttr{attr: id, v: p.Attrs[i].Value})
		}
	}
	ix.scratch = pa
	for i := range pa {
		b := ix.buckets[eqKey(pa[i].attr, pa[i].v)]
		if b == nil {
			continue
		}
		for _, slot := range b.rest {
			if ix.check(slot, pa) {
				dst = append(dst, ix.subs[slot].id)
			}
		}
		for j := range b.ranges {
			ar := &b.ranges[j]
			v, ok := lookup(pa, ar.attr)
			if !ok || !v.IsNumber() {
				continue
			}
			dst = ar.lower.scanBelow(v, ix, pa, dst)
			dst = ar.upper.scanAbove(v, ix, pa, dst)
		}
	}
	return dst
}

func lookup(pa []pubAttr, attr uint32) (Value, bool) {
	for i := range pa {
		if pa[i].attr == attr {
			return pa[i].v, true
		}
	}
	return Value{}, false
}

// check verifies the predicates of the filter in slot other than the two
// that led the search to it.
func (ix *Index) check(slot uint32, pa []pubAttr) bool {
	rec := &ix.subs[slot]
	for i := range rec.preds {
		if i == int(rec.eqIdx) || i == int(rec.rngIdx) {
			continue
		}
		c := &rec.preds[i]
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

// entry is one numeric bound in a sortedList: 16 bytes.
type entry struct {
	bits uint64
	slot uint32
	kind Kind
	op   Op
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
		b := make([]entry, 1, blockCap)
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
	intFast := v.Kind == KindInt
	for _, b := range l.blocks {
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
					return dst
				}
				continue // equal bounds of > and >= interleave; keep going
			}
			if ix.check(e.slot, pa) {
				dst = append(dst, ix.subs[e.slot].id)
			}
		}
	}
	return dst
}

// scanAbove visits the < and <= bounds that v satisfies, from the largest
// down.
func (l *sortedList) scanAbove(v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	intFast := v.Kind == KindInt
	for bi := len(l.blocks) - 1; bi >= 0; bi-- {
		b := l.blocks[bi]
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
					return dst
				}
				continue
			}
			if ix.check(e.slot, pa) {
				dst = append(dst, ix.subs[e.slot].id)
			}
		}
	}
	return dst
}
