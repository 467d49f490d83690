package overlay

import (
	"github.com/deltapub/deltapub/dack"
	"github.com/deltapub/deltapub/message"
)

// Caches and allocation of the DACK pass (dackLinks) and of purge: what
// they derive from the map and the store is kept while the versions it
// depends on are unchanged, so that a period costs what changed.

// relayOf returns dackRelays' verdict on the entry at c for any link,
// packed (relayOK, relayRelayed, and the interned sides of the broker it
// is about and of its reporter: carries tests it against a link's side).
// An entry's (reporter, about) never changes, so the verdict is kept in
// the entry (Cursor.Aux: the map version + 1 it holds for, and the
// verdict) while the geometry is unchanged. The geometry must be current.
func (n *Node) relayOf(c dack.Cursor) uint64 {
	aux := c.Aux()
	if aux[0] == n.geoVer+1 {
		return aux[1]
	}
	e := c.Entry()
	var v uint64
	if e.About != n.cfg.ID {
		as := n.side[e.About]
		if as == "" {
			as = e.About
		}
		v = relayOK | uint64(n.sideIndex(as))<<2
		if e.Reporter != n.cfg.ID {
			rs, known := n.side[e.Reporter]
			v |= relayRelayed | uint64(n.sideIndex(rs))<<33
			if !known || n.dist[e.Reporter]+n.dist[e.About] > n.cfg.Delta+1 {
				v &^= relayOK
			}
		}
	}
	aux[0], aux[1] = n.geoVer+1, v
	return v
}

// The bits of relayOf's verdict: bit 0 relayOK (about another broker
// and, if relayed, within δ+1 hops), bit 1 relayRelayed (reported by
// another broker), bits 2-32 the side of the broker it is about, bits
// 33-63 its reporter's (sideIndex).
const (
	relayOK      = 1 << 0
	relayRelayed = 1 << 1
)

// carries is dackRelays(reporter, about, pside) from a verdict of
// relayOf, for the link toward the side of index pside.
func carries(v uint64, pside uint32) bool {
	as, rs := uint32(v>>2)&(1<<31-1), uint32(v>>33)&(1<<31-1)
	return v&relayOK != 0 && as == pside && (v&relayRelayed == 0 || rs != pside)
}

// sideIndex interns a side's name for the current geometry: equal names,
// equal indices (< 2³¹; the table starts over with the map version).
func (n *Node) sideIndex(b message.BrokerID) uint32 {
	if n.sideIdxGeo != n.geoVer || n.sideIdx == nil {
		n.sideIdx = map[message.BrokerID]uint32{}
		n.sideIdxGeo = n.geoVer
	}
	i, ok := n.sideIdx[b]
	if !ok {
		i = uint32(len(n.sideIdx))
		n.sideIdx[b] = i
	}
	return i
}

// dackSlabN is how many DACK entries (and DAck messages) dackLinks
// allocates at once.
const dackSlabN = 512

// dackBuf returns room to append the entries of one DACK to (len 0, at
// least a few entries of capacity, the rest of the current slab); carve
// the DACK from it with takeDAck.
func (n *Node) dackBuf() []message.DAckEntry {
	if cap(n.dackSlab) < 16 {
		n.dackSlab = make([]message.DAckEntry, 0, dackSlabN)
	}
	return n.dackSlab[:0]
}

// takeDAck returns a DAck carrying entries (appended to dackBuf's slice,
// possibly reallocated by append) and keeps what follows them as the
// slab: one allocation per many DACKs instead of two each. The entries'
// capacity ends at their length, so nothing appends into a neighbour's.
// Slabs are never reused; the GC frees one once none of its DACKs is
// referenced.
func (n *Node) takeDAck(entries []message.DAckEntry) *message.DAck {
	k := len(entries)
	n.dackSlab = entries[k:k:cap(entries)]
	if len(n.dackMsgs) == 0 {
		n.dackMsgs = make([]message.DAck, dackSlabN/8)
	}
	m := &n.dackMsgs[0]
	n.dackMsgs = n.dackMsgs[1:]
	m.Entries = entries[:k:k]
	return m
}

// recipTh is purge's threshold of one recipient: the tree path to it
// resolved to the store's reports about this broker, and the threshold
// for the store's AboutVersion about.
type recipTh struct {
	path  dack.PathRef
	th    uint64
	about uint64
	ok    bool
}

// recipTh returns the threshold cache of recipient r (its path holds for
// the map version n.rthTopo).
func (n *Node) recipTh(r message.BrokerID) *recipTh {
	rt := n.rth[r]
	if rt == nil {
		// Carved from a slab: the thresholds purge reads lie together.
		if len(n.rthSlab) == 0 {
			n.rthSlab = make([]recipTh, 32)
		}
		rt = &n.rthSlab[0]
		n.rthSlab = n.rthSlab[1:]
		if path := n.pathTo(r); len(path) > 1 {
			rt.path.SetPath(path[1:])
		}
		n.rth[r] = rt
	}
	return rt
}

// rtSlot is an entry of recipThCached's table.
type rtSlot struct {
	name message.BrokerID
	rt   *recipTh
}

// recipThCached is recipTh through a small table indexed by a cheap hash
// of the name (its length and last bytes), checked by comparing the
// name: the recipients of a broker's queued publications are a few dozen
// names, found there without the map's hashing and probing. Cleared
// with the map (purge).
func (n *Node) recipThCached(r message.BrokerID) *recipTh {
	h := uint32(len(r)) * 16777619
	for i := max(0, len(r)-8); i < len(r); i++ {
		h = (h ^ uint32(r[i])) * 16777619
	}
	sl := &n.rtTab[h%uint32(len(n.rtTab))]
	if sl.rt != nil && sl.name == r {
		return sl.rt
	}
	rt := n.recipTh(r)
	sl.name, sl.rt = r, rt
	return rt
}

// recipThreshold returns dack.Threshold(path to r without this broker,
// store.About) (0 when r is unknown or this broker) for the store's
// AboutVersion about, through the per-recipient cache.
func (n *Node) recipThreshold(r message.BrokerID, about uint64) uint64 {
	rt := n.recipTh(r)
	if !rt.ok || rt.about != about {
		rt.th, rt.about, rt.ok = n.store.PathThreshold(&rt.path), about, true
	}
	return rt.th
}

// purgeEntryR is how many recipients a purgeEntry holds (an entry with
// more is purged from the entry itself, slow).
const purgeEntryR = 64

// purgeEntry is purge's dense copy of one queued entry: its stamp, the
// recipients it is not yet safe for (bit i: e.safe[i] false) and their
// thresholds (rt[i]: recipient i's; nil rt: more than purgeEntryR
// recipients, read e itself).
type purgeEntry struct {
	e      *qentry
	stamp  uint64
	unsafe uint64
	rt     []*recipTh
	// The entry's upstream stamps (pub.Stamps[1:]) as minqBuf indices
	// and stamp numbers, for minqFromCache (nup < 0: more than fit, read
	// the entry).
	upJ [4]int32
	upS [4]uint64
	nup int
}

// purgeCache returns n.qcache brought up to date with the queue:
// n.qcache[i] is about n.queue[i]. The queue only grows at its end
// between purges (enqueue) and purge itself compacts both; an entry's
// recipients change only in leave.go (which sets purgeDirty) and in
// releaseRecipients (which does too): those, a map change (the
// thresholds' paths) and any misalignment rebuild it all (stale).
func (n *Node) purgeCache(stale bool) []purgeEntry {
	qc := n.qcache
	if !stale && len(qc) <= len(n.queue) {
		for i := range qc {
			if qc[i].e != n.queue[i] {
				stale = true
				break
			}
		}
	} else {
		stale = true
	}
	if stale {
		clear(qc)
		qc = qc[:0]
	}
	n.qcache = qc
	n.cacheTail()
	return n.qcache
}

// cacheTail adds to purge's copy of the queue the entries queued since
// (mergeMinq calls it too, when enqueue has just queued one: its data
// is then in the CPU cache, while a purge pass comes a tick later).
func (n *Node) cacheTail() {
	for _, e := range n.queue[len(n.qcache):] {
		c := purgeEntry{e: e, stamp: e.stamp}
		if k := len(e.recips); k <= purgeEntryR {
			// Carved from a slab: one allocation per many entries.
			if cap(n.rtSlab)-len(n.rtSlab) < k {
				n.rtSlab = make([]*recipTh, 0, max(1024, k))
			}
			l := len(n.rtSlab)
			c.rt, n.rtSlab = n.rtSlab[l:l+k:l+k], n.rtSlab[:l+k]
			for i, r := range e.recips {
				if e.safe[i] {
					continue
				}
				c.unsafe |= 1 << i
				c.rt[i] = n.recipThCached(r)
			}
		}
		if up := e.pub.Stamps[1:]; len(up) <= len(c.upJ) {
			c.nup = len(up)
			for u, st := range up {
				c.upJ[u], c.upS[u] = int32(n.minqIndexAt(u, st)), st.S
			}
		} else {
			c.nup = -1
		}
		n.qcache = append(n.qcache, c)
	}
}

// minqIndexAt is minqIndex for the upstream stamp at position u of a
// publication: tried first where that position's pair was found last
// (consecutive publications mostly come the same way).
func (n *Node) minqIndexAt(u int, s message.Stamp) int {
	if u < len(n.minqHint) {
		if h := n.minqHint[u]; h < len(n.minqBuf) && n.minqBuf[h].B == s.B && n.minqBuf[h].E == s.E {
			return h
		}
		j := n.minqIndex(s)
		n.minqHint[u] = j
		return j
	}
	return n.minqIndex(s)
}

// minqIndex returns the index of (s.B, s.E) in minqBuf, adding the pair
// (without a queued stamp) if missing.
func (n *Node) minqIndex(s message.Stamp) int {
	if j := findStamp(n.minqBuf, s); j >= 0 {
		return j
	}
	n.minqBuf = append(n.minqBuf, message.Stamp{B: s.B, E: s.E})
	n.minqIn = append(n.minqIn, false)
	n.minqLay++
	return len(n.minqBuf) - 1
}

// minqFromCache sets minqBuf to the lowest stamp per upstream pair over
// the queue, from purge's copy qc of it (what updateDiscarded's scan
// would find), after a purge removed entries: the scan over the entries
// themselves is not needed.
func (n *Node) minqFromCache(qc []purgeEntry) {
	clear(n.minqIn)
	minq, in := n.minqBuf, n.minqIn
	for i := range qc {
		c := &qc[i]
		if c.nup < 0 {
			for _, s := range c.e.pub.Stamps[1:] {
				j := n.minqIndex(s)
				minq, in = n.minqBuf, n.minqIn
				if !in[j] || s.S < minq[j].S {
					minq[j].S, in[j] = s.S, true
				}
			}
			continue
		}
		for u := 0; u < c.nup; u++ {
			j, s := c.upJ[u], c.upS[u]
			if !in[j] || s < minq[j].S {
				minq[j].S, in[j] = s, true
			}
		}
	}
	n.minqOK = true
	n.compactMinq()
}
