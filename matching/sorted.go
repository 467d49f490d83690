package matching

import "math"

// The numeric bounds of a group, per attribute: sorted lists of entries
// that a publication's value scans from the satisfied end, stopping at the
// first bound it does not satisfy.

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
	intFast := v.Kind == KindInt
	for _, b := range l.blocks {
		for k := range b {
			e := &b[k]
			c := e.cmpTo(v, intFast)
			if c > 0 {
				return dst
			}
			if c == 0 && e.op == OpGt {
				continue // equal bounds of > and >= interleave; keep going
			}
			if !ix.skips(e.id) && ix.accept(e, pa) {
				dst = append(dst, e.id)
				ix.taken(e.id)
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
			c := e.cmpTo(v, intFast)
			if c < 0 {
				return dst
			}
			if c == 0 && e.op == OpLt {
				continue
			}
			if !ix.skips(e.id) && ix.accept(e, pa) {
				dst = append(dst, e.id)
				ix.taken(e.id)
			}
		}
	}
	return dst
}

// cmpTo compares e's bound with v (intFast: v is an int, so an int bound
// is compared without building a Value).
func (e *entry) cmpTo(v Value, intFast bool) int {
	if intFast && e.kind == KindInt {
		return cmp64(int64(e.bits), v.Int)
	}
	return cmpNum(e.value(), v)
}

// scanNe visits the <> operands that differ from v: all but a run of
// equal ones.
func (l *sortedList) scanNe(v Value, ix *Index, pa []pubAttr, dst []uint64) []uint64 {
	for _, b := range l.blocks {
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
