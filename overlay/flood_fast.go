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
	pool  []*flood
	chunk []flood // new records are allocated in chunks
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
	q    *ackQueue
	self bool // id is this broker's (never, in a sane map)
}

const (
	msgChunk   = 128
	floodChunk = 32
)

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
	if len(fs.chunk) == 0 {
		fs.chunk = make([]flood, floodChunk)
	}
	f := &fs.chunk[0]
	fs.chunk = fs.chunk[1:]
	f.pooled = true
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
	// Cleared as newFlood's callers expect (they set key and budget).
	clear(f.targets)
	clear(f.waiters)
	f.targets, f.waiters = f.targets[:0], f.waiters[:0]
	f.nOut, f.hole, f.except, f.msg, f.done, f.win = 0, false, "", nil, nil, nil
	fs.pool = append(fs.pool, f)
}

// ackSent records that pooled flood f was sent to id (ackHint).
// (q: id's queue when known, else nil.)
func (n *Node) ackSent(f *flood, id message.BrokerID, q *ackQueue) {
	if !f.pooled {
		return
	}
	if q == nil {
		q = n.ackQueueOf(id)
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

// ackQueueOf returns id's queue, made if needed.
func (n *Node) ackQueueOf(id message.BrokerID) *ackQueue {
	fs := &n.fl
	q := fs.acks[id]
	if q == nil {
		if fs.acks == nil {
			fs.acks = map[message.BrokerID]*ackQueue{}
		}
		q = &ackQueue{}
		fs.acks[id] = q
	}
	return q
}

// ackHint returns the pending flood k if it is the first one sent to
// from that still awaits from's answer (dropping the entries before it
// that are answered or complete), or nil: then look k up.
func (n *Node) ackHint(k floodKey, from message.BrokerID) *flood {
	// A queue is never replaced: the neighbour cache's (even stale) is
	// from's queue, found without a lookup by name.
	var q *ackQueue
	for i := range n.fl.nb {
		if n.fl.nb[i].id == from {
			q = n.fl.nb[i].q
			break
		}
	}
	if q == nil {
		if q = n.fl.acks[from]; q == nil {
			return nil
		}
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
		return n.subFloodTo(f.key.sub, dist, f.win)
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
// (win, if not nil: the window of sub's edge, which caches the last
// from-pointer computed for its floods.)
func (n *Node) subFloodTo(sub message.SubID, dist int, win *edgeFloods) *message.SubFlood {
	m := n.newSubFlood()
	if h := n.fl.hint; h != nil && h.Sub == sub {
		m.Sub, m.Filter, m.From = sub, h.Filter, n.fromFor(n.fl.hintFrom, dist, win)
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

// fromFor is topo.FromFor(from, dist), remembered in win (if not nil)
// for the map version: the floods of one edge mostly carry the same
// from-pointer.
func (n *Node) fromFor(from message.BrokerID, dist int, win *edgeFloods) message.BrokerID {
	if win == nil {
		return n.topo.FromFor(from, dist)
	}
	ff := &win.from
	if v := n.topo.Version(); !ff.ok || ff.ver != v || ff.dist != dist || ff.from != from {
		*ff = fromCache{ok: true, ver: v, dist: dist, from: from, res: n.topo.FromFor(from, dist)}
	}
	return ff.res
}

// floodFromPointer is the from-pointer of a new entry of edge's learned
// from a SubFlood sent by from (in direction dir) with From mFrom: mFrom
// if in our map, else from if in it, else dir. Remembered in the edge's
// window (when it has one) for the map version: an edge's floods mostly
// come alike.
func (n *Node) floodFromPointer(edge, mFrom, from, dir message.BrokerID) message.BrokerID {
	e := n.edgeWindow(edge)
	v := n.topo.Version()
	if e != nil {
		if c := &e.fp; c.ok && c.ver == v && c.mFrom == mFrom && c.from == from && c.dir == dir {
			return c.res
		}
	}
	fp := mFrom
	if !n.topo.Has(fp) {
		fp = from
		if !n.topo.Has(fp) {
			fp = dir
		}
	}
	if e != nil {
		e.fp = fpCache{ok: true, ver: v, mFrom: mFrom, from: from, dir: dir, res: fp}
	}
	return fp
}

type fpCache struct {
	ok                    bool
	ver                   uint64
	mFrom, from, dir, res message.BrokerID
}

type fromCache struct {
	ok        bool
	ver       uint64
	dist      int
	from, res message.BrokerID
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
		fs.nb = append(fs.nb, nbInfo{id: id, p: n.peers[id], dist: n.dist[id], q: n.ackQueueOf(id), self: id == n.cfg.ID})
	}
	fs.nbOK, fs.nbVer, fs.nbPeers = true, n.topo.Version(), ids
	return fs.nb
}

// floodDirection is direction(from) for the sender of a flood: usually
// a tree neighbour, which is its own direction (found in the neighbour
// cache instead of the map of directions).
func (n *Node) floodDirection(from message.BrokerID) message.BrokerID {
	n.geometry()
	for _, nb := range n.neighbours() {
		if nb.id == from {
			// (The map's string: the flood's target scans compare it
			// with their neighbours' names, which then share its bytes.)
			return nb.id
		}
	}
	return n.side[from]
}

// floodTargetsUsable is floodTargets when every tree neighbour is usable
// (the usual case): the neighbours other than except. ok is false
// otherwise (floodTargets then walks the frontiers).
func (n *Node) floodTargetsUsable(except message.BrokerID) ([]target, bool) {
	nbs := n.neighbours()
	for i := range nbs {
		if p := nbs[i].p; p != nil && !nbs[i].self && (p.suspected || p.gone || (p.heardHB && !p.joined)) {
			return nil, false // unusable (see unusable)
		}
	}
	out := n.fl.tgt[:0]
	for i := range nbs {
		if nbs[i].id != except {
			out = append(out, target{id: nbs[i].id, dist: nbs[i].dist, nb: i + 1})
		}
	}
	n.fl.tgt = out
	return out, true
}

// floodMap holds the pending floods by key.
//
// Subscription floods are kept by edge broker, in a window indexed by
// subscription number: an edge numbers its subscriptions 1, 2, 3, ... and
// their floods reach any broker in that order (they all come the same
// way, on FIFO links), so the floods of one edge pending here have close
// numbers, and consecutive ones share cache lines. A lookup is the edge's
// name (a small map, or the last edge seen) and an index: no hashing of
// the key, no probing. Keys that do not fit (another epoch of the edge
// while floods of the current one are pending, a number below the window
// or too far above it), the (rarer) unsubscription floods and topology
// floods go to the map m (which thus holds every topology flood).
type floodMap struct {
	m     map[floodKey]*flood
	edges map[message.BrokerID]*edgeFloods
	last  *edgeFloods // the edge of the last lookup
	n     int         // floods in the windows
}

// edgeFloods is the window of one edge broker's pending subscription
// floods: logical slot i holds the flood of subscription base+i of epoch
// epoch. The slots are a ring (a power of two long) starting at head;
// size slots are in use.
type edgeFloods struct {
	edge  message.BrokerID
	epoch uint64
	base  uint64
	ring  []*flood
	head  int
	size  int
	n     int  // floods in the window
	dead  bool // dropped from floodMap.edges (flood.win may still point here)
	from  fromCache
	// For the route generation gen-1 (Node.rtGen; 0: none): peer is
	// n.peers[edge] (edgePeer), and hopFor's next hop is known (ensureHop).
	peerGen, hopGen uint64
	peer            *peer
	hopFor          message.BrokerID
	fp              fpCache
}

// edgeWindow is the window of edge's floods, made when missing while
// under the bound (nil otherwise): the caches of onSubFlood live there.
func (n *Node) edgeWindow(edge message.BrokerID) *edgeFloods {
	e := n.floods.edge(edge)
	if e == nil && len(n.floods.edges) < maxFloodEdges {
		// A leaf of the floods keeps no flood pending: made here, the
		// edge's (empty) window keeps the caches, and later lookups of
		// the edge find it.
		e = n.floods.edgeMake(edge)
	}
	return e
}

// edgePeer is n.peers[edge], remembered in edge's window e (if not nil)
// while the route generation holds (it changes whenever the peer set
// does): most edges are no peers, and hashing their names costs more than
// the window's line that floodFromPointer reads anyway.
func (n *Node) edgePeer(e *edgeFloods, edge message.BrokerID) *peer {
	if e != nil && e.peerGen == n.rtGen+1 {
		return e.peer
	}
	p := n.peers[edge]
	if e != nil {
		e.peer, e.peerGen = p, n.rtGen+1
	}
	return p
}

// ensureHop is hop(fp) (the next hop toward fp computed, and dialled,
// when unknown), skipped when e remembers it done for fp in this route
// generation: n.hops then still holds fp (rtGen changes whenever an entry
// of n.hops is removed), and hop would return it without a side effect.
func (n *Node) ensureHop(e *edgeFloods, fp message.BrokerID) {
	if e != nil && e.hopGen == n.rtGen+1 && e.hopFor == fp {
		return
	}
	n.hopSlot(fp) // may add a peer: the generation to remember is the one after
	if e != nil {
		e.hopFor, e.hopGen = fp, n.rtGen+1
	}
}

const (
	// maxFloodWindow bounds a window's span (a flood pending long, e.g.
	// behind a hole, must not make it grow without end: numbers past
	// the span go to the map).
	maxFloodWindow = 1 << 12
	// maxFloodEdges bounds the edges kept with an empty window.
	maxFloodEdges = 1 << 10
)

// at is logical slot i (< size) of e's window.
func (e *edgeFloods) at(i uint64) **flood {
	return &e.ring[(e.head+int(i))&(len(e.ring)-1)]
}

// place returns k's place in e's window, or nil when k is not in it now.
func (e *edgeFloods) place(k floodKey) **flood {
	if e.dead || e.epoch != k.sub.Epoch || k.sub.N < e.base || k.sub.N-e.base >= uint64(e.size) {
		return nil
	}
	return e.at(k.sub.N - e.base)
}

func (fm *floodMap) edge(id message.BrokerID) *edgeFloods {
	if e := fm.last; e != nil && e.edge == id {
		return e
	}
	e := fm.edges[id]
	if e != nil {
		fm.last = e
	}
	return e
}

// slot returns k's place in its edge's window (and the edge), or nil
// when k is not kept in a window now.
func (fm *floodMap) slot(k floodKey) (**flood, *edgeFloods) {
	if k.kind != fkSub {
		return nil, nil
	}
	e := fm.edge(k.sub.Edge)
	if e == nil {
		return nil, nil
	}
	return e.place(k), e
}

func (fm *floodMap) get(k floodKey) (*flood, bool) {
	if p, _ := fm.slot(k); p != nil && *p != nil {
		return *p, true
	}
	if len(fm.m) == 0 {
		return nil, false
	}
	f, ok := fm.m[k]
	return f, ok
}

// put registers f under k, replacing the flood registered there (which
// then is no longer found, nor by ackHint).
func (fm *floodMap) put(k floodKey, f *flood) {
	displace := func(old *flood) {
		if old != f && old.pooled {
			old.gen++
		}
	}
	if p, e := fm.window(k); p != nil {
		if *p != nil {
			displace(*p)
		} else {
			fm.n++
			e.n++
		}
		*p, f.win = f, e
		if old, ok := fm.m[k]; ok { // not found any more: under k is f
			displace(old)
			delete(fm.m, k)
		}
		return
	}
	if p, e := fm.slot(k); p != nil && *p != nil {
		displace(*p)
		fm.clear(e, p)
	}
	if fm.m == nil {
		fm.m = map[floodKey]*flood{}
	}
	if old, ok := fm.m[k]; ok {
		displace(old)
	}
	fm.m[k], f.win = f, nil
}

// edgeMake is edge(id), made (with an empty window) when missing.
func (fm *floodMap) edgeMake(id message.BrokerID) *edgeFloods {
	e := fm.edge(id)
	if e == nil {
		if fm.edges == nil {
			fm.edges = map[message.BrokerID]*edgeFloods{}
		}
		e = &edgeFloods{edge: id}
		fm.edges[id] = e
		fm.last = e
	}
	return e
}

// window returns k's place in its edge's window, making room for it, or
// nil when k does not fit there.
func (fm *floodMap) window(k floodKey) (**flood, *edgeFloods) {
	if k.kind != fkSub {
		return nil, nil
	}
	e := fm.edgeMake(k.sub.Edge)
	if e.n == 0 {
		e.epoch, e.base, e.head, e.size = k.sub.Epoch, k.sub.N, 0, 0
	}
	if e.epoch != k.sub.Epoch || k.sub.N < e.base || k.sub.N-e.base >= maxFloodWindow {
		return nil, nil
	}
	i := int(k.sub.N - e.base)
	if i >= len(e.ring) {
		c := max(len(e.ring), 32)
		for c <= i {
			c *= 2
		}
		ring := make([]*flood, c)
		if e.size > 0 {
			k := copy(ring[:e.size], e.ring[e.head:])
			copy(ring[k:e.size], e.ring)
		}
		e.ring, e.head = ring, 0
	}
	e.size = max(e.size, i+1)
	return e.at(uint64(i)), e
}

// clear empties place p of e's window, trimming the window's empty front.
func (fm *floodMap) clear(e *edgeFloods, p **flood) {
	*p = nil
	fm.n--
	e.n--
	if e.n == 0 {
		for j := 0; j < e.size; j++ {
			*e.at(uint64(j)) = nil
		}
		e.head, e.size = 0, 0
		if len(fm.edges) > maxFloodEdges {
			delete(fm.edges, e.edge)
			e.dead = true
			fm.last = nil
		}
		return
	}
	for e.size > 0 && *e.at(0) == nil {
		e.head = (e.head + 1) & (len(e.ring) - 1)
		e.base++
		e.size--
	}
}

func (fm *floodMap) del(k floodKey) {
	if p, e := fm.slot(k); p != nil && *p != nil {
		fm.clear(e, p)
		return
	}
	if len(fm.m) > 0 {
		delete(fm.m, k)
	}
}

// done is del(f.key) for a flood that completed, found through the
// window it was put in (no lookup of its edge) when still there.
func (fm *floodMap) done(f *flood) {
	if e := f.win; e != nil {
		if p := e.place(f.key); f.key.kind == fkSub && p != nil && *p == f {
			fm.clear(e, p)
			return
		}
	}
	fm.del(f.key)
}

func (fm *floodMap) len() int { return len(fm.m) + fm.n }

// all yields every pending flood (in no particular order).
func (fm *floodMap) all(yield func(*flood) bool) {
	for _, f := range fm.m {
		if !yield(f) {
			return
		}
	}
	for _, e := range fm.edges {
		for i := 0; i < e.size; i++ {
			if f := *e.at(uint64(i)); f != nil && !yield(f) {
				return
			}
		}
	}
}
