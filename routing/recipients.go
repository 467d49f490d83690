// Recipients: the distinct from-pointers a publication goes to, read from the
// matcher's keys (an entry's slot and its interned route: from-pointer,
// direction, local), with the interning of names and routes it relies on.

package routing

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

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

// routeHash is rcache's hash of r.
func routeHash(r route) uint32 {
	h := (uint32(r.from)*0x9e3779b1 ^ uint32(r.dir)*0x85ebca6b) >> 26
	if r.local {
		h ^= 1
	}
	return h
}

// routeOf interns r.
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
