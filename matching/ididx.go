package matching

// idIndex maps a filter id to its slot in Index.subs: an open-addressing
// table (linear probing, backward-shift removal) of 16-byte (id, slot+1)
// pairs, 0 marking a free pair. It replaces a map[uint64]uint32: a routing
// table inserts into an index that a hundred other tables' inserts have
// left cold, and a probe here usually reads one cache line (the map read a
// control word, then the slot), with no pointers for the collector.
type idIndex struct {
	s []idSlot // power of two; nil until the first put
	n int
}

type idSlot struct {
	id uint64
	v  uint32 // slot+1; 0: free
}

func idHash(id uint64) uint32 { return uint32((id * 0x9e3779b97f4a7c15) >> 32) }

// find returns the position of id (ok) or of the free pair where it
// would go (-1: no pairs yet).
func (x *idIndex) find(id uint64) (int, bool) {
	if len(x.s) == 0 {
		return -1, false
	}
	mask := uint32(len(x.s) - 1)
	for i := idHash(id) & mask; ; i = (i + 1) & mask {
		p := &x.s[i]
		if p.v == 0 {
			return int(i), false
		}
		if p.id == id {
			return int(i), true
		}
	}
}

func (x *idIndex) get(id uint64) (uint32, bool) {
	i, ok := x.find(id)
	if !ok {
		return 0, false
	}
	return x.s[i].v - 1, true
}

// put records slot for id, which must be absent.
func (x *idIndex) put(id uint64, slot uint32) {
	if len(x.s) == 0 || (x.n+1)*4 > len(x.s)*3 {
		x.grow()
	}
	i, _ := x.find(id)
	x.s[i] = idSlot{id: id, v: slot + 1}
	x.n++
}

func (x *idIndex) grow() {
	old := x.s
	x.s = make([]idSlot, max(4*len(old), 64)) // few rehashes: each reads a cold table
	for _, p := range old {
		if p.v != 0 {
			i, _ := x.find(p.id)
			x.s[i] = p
		}
	}
}

// del removes id (false: absent), shifting back the pairs after it that
// may not stay behind the hole.
func (x *idIndex) del(id uint64) bool {
	i, ok := x.find(id)
	if !ok {
		return false
	}
	mask := len(x.s) - 1
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		p := x.s[j]
		if p.v == 0 {
			break
		}
		home := int(idHash(p.id)) & mask
		// p may move to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.s[i] = p
			i = j
		}
	}
	x.s[i] = idSlot{}
	x.n--
	return true
}
