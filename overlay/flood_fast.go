package overlay

import (
	"github.com/deltapub/deltapub/message"
)

// The hot paths of subscription floods: during a setup every broker
// relays every subscription once (a SubFlood in, one per further
// direction out, a SubConfirm per target in, one out). What is here only
// avoids work (allocations, lookups, recomputation); the messages sent
// and their order are exactly those of the plain code in flood.go.

// floodState holds the pools, scratch and caches of the flood hot paths
// (newFlood, freeFlood, floodMsg, floodTargetsUsable, subConfirm).
type floodState struct {
	pool []*flood
	// tgt: floodTargets' result (scratch, valid until the next call).
	tgt []target
	// Tree neighbours with their peers and distances, for the map version
	// nbVer and the peer set nbPeers (a sortedPeers slice: a new one
	// whenever a peer is added or removed).
	nb      []nbInfo
	nbOK    bool
	nbVer   uint64
	nbPeers []message.BrokerID
	// hint, hintFrom: the SubFlood whose entry was just inserted (with
	// from-pointer hintFrom), set while its flood is being started
	// (onSubFlood): its messages need no table lookup.
	hint     *message.SubFlood
	hintFrom message.BrokerID
	// Messages are allocated in chunks (one allocation per chunk).
	subFloods   []message.SubFlood
	subConfirms []message.SubConfirm
	// acks: per target, the pooled floods sent to it in order (ackHint).
	acks map[message.BrokerID]*ackQueue
}

// ackQueue lists, in the order sent, the pooled floods sent to one
// broker: it answers them mostly in that order (the same subtree lies
// behind it for every flood that we send it), so the flood an answer is
// for is usually the queue's head, found without a lookup by key. A hint
// only: entries go stale (gen) when their flood completes, and an answer
// that does not match the head is looked up by key.
type ackQueue struct {
	ents []ackEnt
	head int
}

type ackEnt struct {
	f   *flood
	gen uint32
}

// maxAckQueue bounds a queue (its oldest entries are dropped: a flood
// waiting long, e.g. behind a hole, must not make it grow without end).
const maxAckQueue = 1 << 14

type nbInfo struct {
	id   message.BrokerID
	p    *peer // nil: no peer yet (usable)
	dist int
}

const msgChunk = 128

// maxFloodPool bounds the flood records kept for reuse.
const maxFloodPool = 1 << 12

// newFlood returns a cleared flood record, reused when one is pooled
// (with its targets' and waiters' storage).
func (n *Node) newFlood() *flood {
	fs := &n.fl
	if k := len(fs.pool); k > 0 {
		f := fs.pool[k-1]
		fs.pool[k-1] = nil
		fs.pool = fs.pool[:k-1]
		return f
	}
	f := &flood{pooled: true}
	f.targets, f.waiters = f.inl[:0], f.inw[:0]
	return f
}

// freeFlood hands back a completed flood (only pooled ones: others may be
// kept by tests or callers).
func (n *Node) freeFlood(f *flood) {
	fs := &n.fl
	if !f.pooled {
		return
	}
	f.gen++ // its ackQueue entries are stale
	if len(fs.pool) >= maxFloodPool {
		return
	}
	clear(f.targets)
	clear(f.waiters)
	*f = flood{targets: f.targets[:0], waiters: f.waiters[:0], pooled: true, gen: f.gen}
	fs.pool = append(fs.pool, f)
}

// ackSent records that pooled flood f was sent to id (ackHint).
func (n *Node) ackSent(f *flood, id message.BrokerID) {
	if !f.pooled {
		return
	}
	fs := &n.fl
	q := fs.acks[id]
	if q == nil {
		if fs.acks == nil {
			fs.acks = map[message.BrokerID]*ackQueue{}
		}
		q = &ackQueue{}
		fs.acks[id] = q
	}
	if len(q.ents)-q.head >= maxAckQueue {
		q.ents[q.head] = ackEnt{}
		q.head++
	}
	if q.head > 0 && q.head >= len(q.ents)/2 && len(q.ents) == cap(q.ents) {
		k := copy(q.ents, q.ents[q.head:])
		clear(q.ents[k:])
		q.ents, q.head = q.ents[:k], 0
	}
	q.ents = append(q.ents, ackEnt{f, f.gen})
}

// ackHint returns the pending flood k if it is the first one sent to
// from that still awaits from's answer (dropping the entries before it
// that are answered or complete), or nil: then look k up.
func (n *Node) ackHint(k floodKey, from message.BrokerID) *flood {
	q := n.fl.acks[from]
	if q == nil {
		return nil
	}
	for q.head < len(q.ents) {
		e := q.ents[q.head]
		if e.f.gen == e.gen && e.f.isOut(from) {
			if e.f.key != k {
				return nil
			}
			q.ents[q.head] = ackEnt{}
			q.head++
			return e.f
		}
		q.ents[q.head] = ackEnt{}
		q.head++
	}
	q.ents, q.head = q.ents[:0], 0
	return nil
}

// floodMsg is the message of flood f for target to at distance dist.
func (n *Node) floodMsg(f *flood, to message.BrokerID, dist int) message.Message {
	if f.msg != nil {
		return f.msg(to, dist)
	}
	switch f.key.kind {
	case fkSub:
		return n.subFloodTo(f.key.sub, dist)
	case fkUnsub:
		m := n.newSubFlood()
		m.Sub, m.Unsub = f.key.sub, true
		return m
	case fkMark:
		m := n.newSubFlood()
		m.Sub, m.Unsub, m.Mark = f.key.sub, true, true
		return m
	}
	panic("overlay: flood without a message")
}

// subFloodTo builds the SubFlood of sub's entry for a target at distance
// dist (From recomputed for it); the withdrawal when the entry is gone.
func (n *Node) subFloodTo(sub message.SubID, dist int) *message.SubFlood {
	m := n.newSubFlood()
	if h := n.fl.hint; h != nil && h.Sub == sub {
		m.Sub, m.Filter, m.From = sub, h.Filter, n.topo.FromFor(n.fl.hintFrom, dist)
		return m
	}
	e, ok := n.table.Get(sub)
	if !ok {
		m.Sub, m.Unsub = sub, true
		return m
	}
	from := n.cfg.ID
	if !e.Local {
		from = n.topo.FromFor(e.From, dist)
	}
	m.Sub, m.Filter, m.From = sub, e.Filter, from
	return m
}

func (n *Node) newSubFlood() *message.SubFlood {
	fs := &n.fl
	if len(fs.subFloods) == 0 {
		fs.subFloods = make([]message.SubFlood, msgChunk)
	}
	m := &fs.subFloods[0]
	fs.subFloods = fs.subFloods[1:]
	return m
}

func (n *Node) subConfirm(sub message.SubID, unsub, mark bool) *message.SubConfirm {
	fs := &n.fl
	if len(fs.subConfirms) == 0 {
		fs.subConfirms = make([]message.SubConfirm, msgChunk)
	}
	m := &fs.subConfirms[0]
	fs.subConfirms = fs.subConfirms[1:]
	m.Sub, m.Unsub, m.Mark = sub, unsub, mark
	return m
}

// neighbours returns the tree neighbours with their peers and distances,
// cached while the map version and the peer set are unchanged (call
// geometry first).
func (n *Node) neighbours() []nbInfo {
	fs := &n.fl
	ids := n.sortedPeers()
	if fs.nbOK && fs.nbVer == n.topo.Version() && len(ids) == len(fs.nbPeers) && (len(ids) == 0 || &ids[0] == &fs.nbPeers[0]) {
		return fs.nb
	}
	fs.nb = fs.nb[:0]
	for _, id := range n.topo.Neighbours(n.cfg.ID) {
		fs.nb = append(fs.nb, nbInfo{id: id, p: n.peers[id], dist: n.dist[id]})
	}
	fs.nbOK, fs.nbVer, fs.nbPeers = true, n.topo.Version(), ids
	return fs.nb
}

// floodTargetsUsable is floodTargets when every tree neighbour is usable
// (the usual case): the neighbours other than except. ok is false
// otherwise (floodTargets then walks the frontiers).
func (n *Node) floodTargetsUsable(except message.BrokerID) ([]target, bool) {
	nbs := n.neighbours()
	for i := range nbs {
		if p := nbs[i].p; p != nil && nbs[i].id != n.cfg.ID && (p.suspected || p.gone || (p.heardHB && !p.joined)) {
			return nil, false // unusable (see unusable)
		}
	}
	out := n.fl.tgt[:0]
	for i := range nbs {
		if nbs[i].id != except {
			out = append(out, target{nbs[i].id, nbs[i].dist})
		}
	}
	n.fl.tgt = out
	return out, true
}

// floodMap holds the pending floods by key. Its map is keyed by a compact
// copy of the key without strings (the broker name interned to a number):
// cheaper to hash and compare, and half the size, than floodKey.
type floodMap struct {
	m   map[ckey]*flood
	ids map[message.BrokerID]uint32 // interned edge and origin names
}

// ckey is a floodKey with its broker name interned: (kind, edge, epoch,
// n) for an (un)subscription, (kind, origin, 0, seq) for a topology
// change (a floodKey sets only one of the two halves).
type ckey struct {
	b, kind uint32
	x, y    uint64
}

// maxFloodIDs bounds the interned names: past it they are forgotten once
// no flood is pending.
const maxFloodIDs = 1 << 12

func (fm *floodMap) ckey(k floodKey, add bool) (ckey, bool) {
	name, x, y := k.sub.Edge, k.sub.Epoch, k.sub.N
	if k.kind == fkTopo {
		name, x, y = k.origin, 0, k.seq
	}
	b, ok := fm.ids[name]
	if !ok {
		if !add {
			return ckey{}, false
		}
		if fm.ids == nil {
			fm.ids = map[message.BrokerID]uint32{}
		}
		b = uint32(len(fm.ids))
		fm.ids[name] = b
	}
	return ckey{b: b, kind: uint32(k.kind), x: x, y: y}, true
}

func (fm *floodMap) get(k floodKey) (*flood, bool) {
	c, ok := fm.ckey(k, false)
	if !ok {
		return nil, false
	}
	f, ok := fm.m[c]
	return f, ok
}

func (fm *floodMap) put(k floodKey, f *flood) {
	if fm.m == nil {
		fm.m = map[ckey]*flood{}
	}
	c, _ := fm.ckey(k, true)
	if old, ok := fm.m[c]; ok && old != f && old.pooled {
		old.gen++ // no longer the pending flood of k (ackHint)
	}
	fm.m[c] = f
}

func (fm *floodMap) del(k floodKey) {
	if c, ok := fm.ckey(k, false); ok {
		delete(fm.m, c)
	}
	if len(fm.m) == 0 && len(fm.ids) > maxFloodIDs {
		fm.ids = nil
	}
}

func (fm *floodMap) len() int { return len(fm.m) }
