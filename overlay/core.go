// The Node: its state, grouped by concern in sub-structs; NewNode and
// Bootstrap; Tick (timers, suspicion, purge and DACK periods); Step (the
// dispatch of a peer's message); and its status.

package overlay

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"sort"

	"github.com/deltapub/deltapub/dack"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
	"github.com/deltapub/deltapub/topology"
)

// clientState is one local client session.
type clientState struct {
	src     message.Source
	hello   bool
	subs    map[message.SubID]uint64 // sub → Req
	unsubOK map[message.SubID]bool   // unsubscriptions awaiting confirmation
}

// Node is the pure protocol core of one broker: inputs in, outputs
// collected until Ready. It does no I/O, reads no clock, starts no
// goroutine and is not safe for concurrent use: one goroutine owns it.
type Node struct {
	cfg  Config
	out  Ready
	self message.MapNode
	now  int64 // ticks since NewNode

	topo  *topology.Map
	table *routing.Table
	store *dack.Store
	peers map[message.BrokerID]*peer
	// peerIDs caches the keys of peers, sorted (sortedPeers, every tick);
	// nil once a peer is added or removed. A caller may range over it
	// while peers change: a change drops it for a new one, never edits it.
	peerIDs []message.BrokerID
	// assembling: heads whose parts are arriving, per peer (parts.go).
	assembling map[message.BrokerID]*assembly

	mem    membership
	rec    recovery
	fwd    forwarding
	geo    geoCache
	floods floodState
	gaps   gapState
	dur    durableState // the publication log (durable.go)
	dsub   durSubs      // durable subscriptions (dursub.go)
	held   heldOut      // what they hold, reported to persist (held.go)

	clients map[message.ClientID]*clientState
	subN    uint64

	counters Counters
	rng      *rand.Rand // seeded from Config.Seed: the backoffs' jitter (retry.go)
}

// membership is where this broker stands in the overlay: joining, joined,
// leaving, and what it does as a joinpoint for others.
type membership struct {
	member          bool // has a map (bootstrapped, or a JoinReply arrived)
	joined          bool // full member: routable
	leaving         bool
	leaveWhenJoined bool // Leave was asked while not joined yet (leave.go)
	left            bool
	removed         bool        // told it was removed from the tree while alive (NoticeRemoved): dead to the overlay
	lv              *leaveState // graceful leave in progress (leave.go)
	jn              joining     // the walk over the joinpoints while not a member (retry.go)
	rejoin          bool
	admitting       map[message.BrokerID]uint64 // joinpoint: joiners admitted here (epoch), until confirmed
	pendingState    map[message.BrokerID]bool   // StateRequests not answered yet (see answerStateRequests)
}

// recovery is a restarted (or rejoining) broker's collection of its
// neighbours' state before it becomes routable again (recovery.go).
type recovery struct {
	stateWait    map[message.BrokerID]bool             // peers whose StateReply is awaited (nil: not recovering)
	stateWaitT   int                                   // ticks spent recovering
	askedFor     map[message.BrokerID]message.BrokerID // a broker asked behind an awaited one -> that one (recovery.go dropLeft)
	stateless    map[message.BrokerID]bool             // peers that answered NotMember (no state to give)
	namedBy      map[message.BrokerID]message.BrokerID // a peer not in our map named by a restarted tree neighbour's NotMember -> that neighbour (recovery.go unplaced)
	mapFrom      map[message.BrokerID]bool             // brokers whose map we merged (JoinReply, StateReply)
	unjoinedSeen map[message.BrokerID]bool             // peers whose heartbeat said not joined while we were not joined (recovery.go unplaced)
	strangers    map[message.BrokerID]bool             // linked joined peers our map does not hold, asked for their side (recovery.go askStrangers)
	reaskAt      map[message.BrokerID]int64            // when an awaited peer is asked again (recovery.go reaskState)
	reaskN       map[message.BrokerID]int              // how often it was asked again
}

// forwarding is the publication path: the message queue, the stamps, the
// per-source duplicate filter and the next hop toward each recipient
// (forward.go; the next hops: routes.go).
type forwarding struct {
	queue      []*qentry
	queueLen   int
	purgeDirty bool // queued recipients changed (leave.go): a purge pass is due
	discDirty  bool // own discarded watermarks may be stale (queue or arrivals changed)
	// dupHolds: the upstream stamps of duplicate copies of publications
	// still queued here (received under other stamps on another path):
	// each caps the discarded watermark about its (B, E) below it until
	// the queued copy leaves (updateDiscarded; docs/protocol.md §6).
	dupHolds  []dupHold
	stampSeq  uint64
	seen      map[message.Source]*srcState
	seenOrder []message.Source
	hops      map[message.BrokerID]hopInfo
}

// floodState is the subscription, unsubscription and topology floods:
// those pending here, what they left behind (tombstones, entries learned
// by state transfer) and the duplicate filter of topology floods (flood.go,
// topo_resend.go).
type floodState struct {
	pending    map[floodKey]*flood    // pending, by key
	viaState   map[message.SubID]bool // entries learned by state transfer, not by a flood
	tombstones map[message.SubID]bool
	tombOrder  []message.SubID
	heldFloods map[message.BrokerID][]message.SubFlood // floods from senders the map cannot place, until a StateReply does (flood.go holdUnplaced)
	heldAsked  map[message.BrokerID]bool               // senders of held floods asked for a resync on the current link (flood.go askUnplaced)
	topoSeq    uint64
	topoSeen   map[floodKey]bool
	topoOrder  []floodKey
	recentTopo []recentTopo // topology floods started here lately (topo_resend.go)
}

// gapState is the partitions beyond δ: the tree directions cut off now,
// the gap floods seen, and the directions to re-learn subscriptions from
// once they are reachable again (gaps.go).
type gapState struct {
	holes      map[message.BrokerID]bool // directions currently cut off beyond δ
	resyncDirs map[message.BrokerID]bool // directions to re-learn subscriptions from once reachable
	onward     []message.SubID           // subscriptions a resync taught us, to flood on (paced: floodOnward)
	onwardSet  map[message.SubID]bool    // what onward holds
	seq        uint64                    // number of the last gap flood started here
	seen       map[gapKey]bool
	order      []gapKey
}

// NewNode validates cfg and returns a node that has not joined any overlay
// yet: call Bootstrap or Join.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	self := message.MapNode{ID: cfg.ID, Addr: cfg.Addr, Epoch: cfg.Epoch}
	n := &Node{
		cfg:     cfg,
		self:    self,
		topo:    topology.New(self, cfg.Delta),
		table:   routing.New(newMatcher()),
		store:   dack.NewStore(cfg.ID, cfg.Epoch),
		peers:   map[message.BrokerID]*peer{},
		clients: map[message.ClientID]*clientState{},
		rng:     rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Epoch))),
	}
	n.mem.admitting = map[message.BrokerID]uint64{}
	n.mem.pendingState = map[message.BrokerID]bool{}
	n.rec.askedFor = map[message.BrokerID]message.BrokerID{}
	n.rec.stateless = map[message.BrokerID]bool{}
	n.rec.namedBy = map[message.BrokerID]message.BrokerID{}
	n.rec.mapFrom = map[message.BrokerID]bool{}
	n.rec.unjoinedSeen = map[message.BrokerID]bool{}
	n.rec.strangers = map[message.BrokerID]bool{}
	n.fwd.seen = map[message.Source]*srcState{}
	n.fwd.hops = map[message.BrokerID]hopInfo{}
	n.floods.pending = map[floodKey]*flood{}
	n.floods.viaState = map[message.SubID]bool{}
	n.floods.tombstones = map[message.SubID]bool{}
	n.floods.topoSeen = map[floodKey]bool{}
	n.gaps.holes = map[message.BrokerID]bool{}
	n.gaps.onwardSet = map[message.SubID]bool{}
	n.gaps.resyncDirs = map[message.BrokerID]bool{}
	n.gaps.seen = map[gapKey]bool{}
	n.counters.Control = map[string]uint64{}
	n.dur.init(&n.cfg)
	n.geo.ver = ^uint64(0)
	// Topology and gap floods are named (origin, seq): a restarted broker
	// numbers them above every number its earlier incarnations used, or
	// the brokers that remember those would take its first floods for
	// duplicates (a restarted joinpoint's join, or its leave's repair,
	// never applied: scenario restart_then_leave_topo_numbering.txt).
	n.floods.topoSeq, n.gaps.seq = cfg.Epoch<<32, cfg.Epoch<<32
	return n, nil
}

// Bootstrap makes this broker the first broker (root) of a new overlay.
func (n *Node) Bootstrap() {
	if n.mem.member {
		return
	}
	n.mem.member = true
	n.becomeJoined()
}

func (n *Node) becomeJoined() {
	if n.mem.joined {
		return
	}
	n.mem.joined = true
	clear(n.rec.unjoinedSeen)
	if n.mem.leaveWhenJoined {
		n.mem.leaveWhenJoined = false
		defer n.Leave() // after the joined heartbeats and the answers below
	}
	defer n.answerStateRequests()
	n.notice(NoticeJoined, "", "")
	for _, id := range n.sortedPeers() {
		if p := n.peers[id]; p.up {
			n.send(id, n.heartbeat())
		}
	}
	n.answerRecovered() // before the log's publications (dursub.go)
	n.reoffer()         // the log's publications, before any new one (durable.go)
	n.reinstallHeld()   // held.go
	for _, id := range sortedIDs(n.floods.heldFloods) {
		n.askUnplaced(id) // floods held while we recovered (flood.go holdUnplaced)
	}
}

// Tick tells the node that one unit of time passed.
func (n *Node) Tick() {
	n.now++
	if n.mem.left {
		return
	}
	n.durableTick()
	n.durableSilenceTick()
	n.expireAway() // resume.go
	n.joinTick()
	if n.mem.member && !n.mem.joined && n.rec.stateWait != nil {
		n.rec.stateWaitT++
		n.reaskState()
		n.checkRecovery()
	}
	changed := false
	for _, id := range n.sortedPeers() {
		p := n.peers[id]
		if p.dialWait > 0 {
			p.dialWait--
		}
		if p.up {
			p.upAt, p.upEpoch = n.now, p.epoch
			p.idle++
			if p.idle >= n.cfg.HeartbeatTicks {
				n.send(id, n.heartbeat())
			}
			n.closeIdleLink(p)
		}
		n.forgive(p)
		if p.up && !p.gone || n.monitored(p) { // (an up link is monitored unless its peer is gone)
			p.silent++
			if !p.suspected && p.silent >= n.patience(p) {
				n.suspect(p, fmt.Sprintf("silent for %d ticks", p.silent))
				changed = true
			}
		}
		if p.suspected && !p.gone {
			p.suspTicks++
			if p.suspTicks >= n.cfg.GoneAfterTicks && n.now-p.vouchedAt > int64(n.cfg.FailureTicks) && n.ownsGoneVerdict(p.id) {
				n.declareGone(p)
				changed = true
			}
			// Probe: a suspected broker that matters is dialled again now
			// and then, so that its return (or a healed cut) is noticed:
			// one our map holds, or one this recovery awaits. (An awaited
			// peer our map does not hold, not probed, held the recovery
			// until gone_after after it had restarted: more than δ in a
			// row, test TestRecoveryProbesAnAwaitedPeerItsMapDoesNotHold.)
			if !p.up && !p.dialing && p.dialWait == 0 && (n.topo.Has(id) || n.rec.stateWait[id] && n.addrOf(id) != "") && !n.reporterWatches(p) {
				n.dial(Peer{ID: id, Addr: n.addrOf(id)}, false)
			}
		}
		if p.gone && p.goneProbes > 0 && !p.up && !p.dialing {
			// A broker we declared gone may have been stalled, not dead:
			// probed a few times, one failure timeout after the verdict
			// and then once per gone_after, it hears that it was removed
			// if it is alive (removedWhileAlive).
			if p.goneWait--; p.goneWait <= 0 && p.goneAddr != "" {
				p.goneProbes--
				p.goneWait = n.cfg.GoneAfterTicks
				n.dial(Peer{ID: id, Addr: p.goneAddr}, false)
			}
		}
		// A peer unlinked and unsuspected that a route, a flood or this
		// recovery needs is dialled (also one whose reported suspicion its
		// reporter lifted: nobody probed it meanwhile, reporterWatches).
		if !p.up && !p.suspected && !p.dialing && p.dialWait == 0 && (n.wanted(id) || n.floodInvolves(id) || n.rec.stateWait[id]) {
			n.dial(Peer{ID: id, Addr: n.addrOf(id)}, false)
		}
	}
	if changed {
		n.routesChanged()
	}
	if n.mem.member {
		if n.now%int64(n.cfg.DACKTicks) == 0 {
			// A purge pass per period besides those on DACK receipt:
			// paths change with the map and with usability.
			n.purge()
			n.fwd.discDirty = true
		} else if n.fwd.purgeDirty {
			n.purge()
		}
		n.dackLinks()
	}
	if n.mem.joined {
		n.floodOnward()
	}
	if n.mem.leaving && !n.mem.left {
		n.leaveTick()
	}
}

// Step processes a message from a peer, received on an up link.
func (n *Node) Step(from message.BrokerID, m message.Message) {
	if n.mem.left || from == n.cfg.ID || m == nil {
		return
	}
	p := n.peer(from)
	p.silent = 0
	if _, ok := m.(*message.Pub); ok && p.isZombie() {
		n.counters.ZombiePubs++ // peers.go
		return
	}
	if pm, ok := m.(*message.Pub); ok && !p.suspected {
		// The common case first: a publication (never in parts) from an
		// unsuspected peer.
		n.counters.PubsIn++
		n.onPub(from, pm)
		return
	}
	if p.suspected {
		// Unsuspect only after the message is processed: the first message
		// on a link is the peer's heartbeat, which says whether it is
		// routable (a restarted peer is not, until it has recovered).
		defer func() {
			if p.suspected && n.peers[from] == p {
				n.unsuspect(p)
				n.routesChanged()
			}
		}()
	}
	if m = n.reassemble(from, m); m == nil {
		return // a part of a larger message (parts.go)
	}
	switch m := m.(type) {
	case *message.Heartbeat:
		n.onHeartbeat(p, m)
	case *message.JoinRequest:
		n.onJoinRequest(from, m)
	case *message.JoinReply:
		n.onJoinReply(from, m)
	case *message.JoinConfirm:
		if n.mem.member && !n.mem.joined && !n.mem.rejoin {
			n.becomeJoined()
		}
	case *message.TopoChange:
		n.onTopoChange(from, m)
	case *message.TopoAck:
		n.floodAck(floodKey{kind: fkTopo, origin: m.Origin, seq: m.Seq}, from)
	case *message.SubFlood:
		n.onSubFlood(from, m)
	case *message.SubConfirm:
		k := floodKey{kind: fkSub, sub: m.Sub}
		if m.Unsub {
			k.kind = fkUnsub
			if m.Mark {
				k.kind = fkMark
			}
		}
		if r := n.floodRound(m.Sub); k.kind == fkSub && m.Round != 0 && r != 0 && m.Round != r {
			// A late answer to the durable subscription's other flood
			// (sendFloodAck): not an answer to the one pending here.
			return
		}
		n.floodAck(k, from)
	case *message.Pub:
		n.counters.PubsIn++
		n.onPub(from, m)
	case *message.DAck:
		n.onDAck(from, m)
	case *message.StateRequest:
		n.onStateRequest(from, m)
	case *message.StateReply:
		n.onStateReply(from, m)
	case *message.Routable:
		if m.Epoch >= p.epoch {
			p.epoch, p.joined, p.heardHB = m.Epoch, true, true
			n.routesChanged()
		}
	case *message.LeaveRequest:
		n.onLeave(from, m)
	case *message.GapFlood:
		n.onGapFlood(from, m)
	case *message.Catchup:
		n.onCatchup(from, m)
	default:
		// A newer peer's message: ignored (PROTOCOL compatibility rule).
	}
}

func (n *Node) sortedClients() []message.ClientID {
	ids := make([]message.ClientID, 0, len(n.clients))
	for id := range n.clients {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (n *Node) toClient(c message.ClientID, m message.Message) {
	n.out.ToClients = append(n.out.ToClients, ClientEnvelope{To: c, Msg: m})
}

func (n *Node) notice(k NoticeKind, p message.BrokerID, detail string) {
	n.out.Notices = append(n.out.Notices, Notice{Kind: k, Peer: p, Detail: detail})
}

// Status returns a read-only snapshot.
func (n *Node) Status() Status {
	st := Status{
		ID: n.cfg.ID, Epoch: n.cfg.Epoch, Joined: n.mem.joined, Leaving: n.mem.leaving, Left: n.mem.left,
		Parent: n.topo.Parent(n.cfg.ID), Map: n.topo.Nodes(),
		Subs: n.table.Len(), QueueLen: n.fwd.queueLen,
		Arrived: map[string]uint64{}, Discarded: map[string]uint64{},
		Counters: n.counters,
		Log:      n.logStatus(),
		Durable:  n.durableStatus(),
	}
	st.Counters.Control = maps.Clone(n.counters.Control)
	nb := map[message.BrokerID]bool{}
	for _, id := range n.topo.Neighbours(n.cfg.ID) {
		nb[id] = true
	}
	for _, id := range n.sortedPeers() {
		p := n.peers[id]
		st.Links = append(st.Links, LinkStatus{Peer: id, Up: p.up, Tree: nb[id], Suspected: p.suspected, Silent: p.silent})
		if p.suspected {
			st.Suspected = append(st.Suspected, id)
		}
		if p.gone {
			st.Gone = append(st.Gone, id)
		}
	}
	byp := map[message.BrokerID]bool{}
	for _, h := range n.fwd.hops {
		if h.ok && !nb[h.to] {
			byp[h.to] = true
		}
	}
	for id := range byp {
		st.Bypasses = append(st.Bypasses, id)
	}
	sort.Slice(st.Bypasses, func(i, j int) bool { return st.Bypasses[i] < st.Bypasses[j] })
	st.LocalSubs = n.table.LocalLen()
	for _, k := range n.store.OwnKeys() {
		key := fmt.Sprintf("%s/%d", k.B, k.E)
		r, _ := n.store.Own(k.B, k.E)
		st.Arrived[key] = r.Arrived
		st.Discarded[key] = r.Discarded
	}
	return st
}

// QueueLen is the number of publications in the message queue (cheap, for
// checkers that poll often; Status builds a full snapshot).
func (n *Node) QueueLen() int { return n.fwd.queueLen }

// Joined reports whether the node is a full member (cheap).
func (n *Node) Joined() bool { return n.mem.joined }

// Parent is this broker's parent in the tree ("" for the root or before
// it joined).
func (n *Node) Parent() message.BrokerID { return n.self.Parent }
