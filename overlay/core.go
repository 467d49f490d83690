package overlay

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/deltapub/deltapub/dack"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
	"github.com/deltapub/deltapub/topology"
)

// peer is what the node knows about one other broker it has (or had, or
// wants) a link with.
type peer struct {
	id        message.BrokerID
	up        bool   // a link is established
	silent    int    // ticks since anything arrived (counted while monitored)
	idle      int    // ticks since anything was sent on the link
	suspected bool   // silent too long, or the dial failed
	suspTicks int    // ticks spent suspected (for gone_after)
	suspAt    int64  // tick of the last suspicion (topo_resend.go)
	suspEpoch uint64 // the newest incarnation known when it was suspected: the one gone_after may declare gone
	gone      bool   // declared gone (PROTOCOL §6)
	vouchedAt int64  // last tick a joined tree neighbour of it said it does not suspect it (gone waits)
	epoch     uint64 // last incarnation heard from it
	joined    bool   // its last heartbeat said it is routable
	heardHB   bool   // a heartbeat arrived on the current link
	heardAny  bool   // a heartbeat arrived on some link: joined is what it last said
	leaving   bool   // it said it is leaving (routable before, not now, same epoch; or LeaveRequest{Drain})
	dialing   bool   // a dial was requested and not answered
	joinDial  bool   // that dial was the join walk's (tryJoinpoint)
	dialWait  int    // ticks before the next dial may be requested
	dialFails int    // dials in a row that failed (or brought a link that died before a heartbeat): the backoff's attempt
	dialled   bool   // the current link came up on a dial of ours (links.go: the dialler closes it when unneeded)
	unneeded  int    // ticks in a row the current link served nothing (links.go)
	served    bool   // the current link was needed once its first heartbeat arrived (links.go)
	dackSent  uint64 // store version covered by the last DACK on this link
	dackAt    int64  // tick of the last DACK on this link (at most one per DACKTicks)
	dackIn    int64  // tick of the last DACK received from it (0: none)
}

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
	dur   durableState // the publication log (durable.go)

	// Membership.
	member          bool // has a map (bootstrapped, or a JoinReply arrived)
	joined          bool // full member: routable
	leaving         bool
	leaveWhenJoined bool // Leave was asked while not joined yet (leave.go)
	left            bool
	lv              *leaveState // graceful leave in progress (leave.go)
	jn              joining     // the walk over the joinpoints while not a member (retry.go)
	rejoin          bool
	stateWait       map[message.BrokerID]bool             // recovery: peers whose StateReply is awaited
	admitting       map[message.BrokerID]uint64           // joinpoint: joiners admitted here (epoch), until confirmed
	pendingState    map[message.BrokerID]bool             // StateRequests not answered yet (see answerStateRequests)
	askedBehind     map[message.BrokerID]bool             // recovery: awaited peers whose back side was asked
	askedFor        map[message.BrokerID]message.BrokerID // recovery: a broker asked behind an awaited one -> that one (member.go dropLeft)
	stateless       map[message.BrokerID]bool             // recovery: peers that answered NotMember (no state to give)
	namedBy         map[message.BrokerID]message.BrokerID // recovery: a peer not in our map named by a restarted tree neighbour's NotMember -> that neighbour (member.go unplaced)
	mapFrom         map[message.BrokerID]bool             // recovery: brokers whose map we merged (JoinReply, StateReply)
	unjoinedSeen    map[message.BrokerID]bool             // peers whose heartbeat said not joined while we were not joined (member.go unplaced)
	stateWaitT      int
	reaskAt         map[message.BrokerID]int64     // recovery: when an awaited peer is asked again (member.go reaskState)
	reaskN          map[message.BrokerID]int       // recovery: how often it was asked again
	assembling      map[message.BrokerID]*assembly // heads whose parts are arriving, per peer (parts.go)

	// Publication forwarding.
	queue      []*qentry
	queueLen   int
	purgeDirty bool // queued recipients changed (leave.go): a purge pass is due
	discDirty  bool // own discarded watermarks may be stale (queue or arrivals changed)
	// dupHolds: the upstream stamps of duplicate copies of publications
	// still queued here (received under other stamps on another path):
	// each caps the discarded watermark about its (B, E) below it until
	// the queued copy leaves (updateDiscarded; docs/protocol.md §6).
	dupHolds   []dupHold
	stampSeq   uint64
	seen       map[message.Source]*srcState
	seenOrder  []message.Source
	hops       map[message.BrokerID]hopInfo
	geoVer     uint64
	side       map[message.BrokerID]message.BrokerID
	dist       map[message.BrokerID]int
	holes      map[message.BrokerID]bool // directions currently cut off beyond δ
	resyncDirs map[message.BrokerID]bool // directions to re-learn subscriptions from once reachable
	gapSeq     uint64
	heldFloods map[message.BrokerID][]message.SubFlood // floods from senders the map cannot place, until a StateReply does (flood.go holdUnplaced)
	heldAsked  map[message.BrokerID]bool               // senders of held floods asked for a resync on the current link (flood.go askUnplaced)
	gapSeen    map[gapKey]bool
	gapOrder   []gapKey

	// Floods (subscriptions, unsubscriptions, topology changes).
	floods     map[floodKey]*flood    // pending, by key
	viaState   map[message.SubID]bool // entries learned by state transfer, not by a flood
	tombstones map[message.SubID]bool
	tombOrder  []message.SubID
	topoSeq    uint64
	topoSeen   map[floodKey]bool
	topoOrder  []floodKey
	recentTopo []recentTopo // topology floods started here lately (topo_resend.go)

	clients map[message.ClientID]*clientState
	subN    uint64

	counters Counters
	rng      *rand.Rand // seeded from Config.Seed: the backoffs' jitter (retry.go)

}

// NewNode validates cfg and returns a node that has not joined any overlay
// yet: call Bootstrap or Join.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	self := message.MapNode{ID: cfg.ID, Addr: cfg.Addr, Epoch: cfg.Epoch}
	n := &Node{
		cfg:          cfg,
		self:         self,
		topo:         topology.New(self, cfg.Delta),
		table:        routing.New(newMatcher()),
		store:        dack.NewStore(cfg.ID, cfg.Epoch),
		peers:        map[message.BrokerID]*peer{},
		seen:         map[message.Source]*srcState{},
		hops:         map[message.BrokerID]hopInfo{},
		holes:        map[message.BrokerID]bool{},
		resyncDirs:   map[message.BrokerID]bool{},
		gapSeen:      map[gapKey]bool{},
		viaState:     map[message.SubID]bool{},
		askedBehind:  map[message.BrokerID]bool{},
		askedFor:     map[message.BrokerID]message.BrokerID{},
		stateless:    map[message.BrokerID]bool{},
		namedBy:      map[message.BrokerID]message.BrokerID{},
		mapFrom:      map[message.BrokerID]bool{},
		unjoinedSeen: map[message.BrokerID]bool{},
		floods:       map[floodKey]*flood{},
		tombstones:   map[message.SubID]bool{},
		topoSeen:     map[floodKey]bool{},
		clients:      map[message.ClientID]*clientState{},
		admitting:    map[message.BrokerID]uint64{},
		pendingState: map[message.BrokerID]bool{},
		rng:          rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Epoch))),
	}
	n.counters.Control = map[string]uint64{}
	n.dur.init(&n.cfg)
	n.geoVer = ^uint64(0)
	// Topology and gap floods are named (origin, seq): a restarted broker
	// numbers them above every number its earlier incarnations used, or
	// the brokers that remember those would take its first floods for
	// duplicates (a restarted joinpoint's join, or its leave's repair,
	// never applied: scenario restart_then_leave_topo_numbering.txt).
	n.topoSeq, n.gapSeq = cfg.Epoch<<32, cfg.Epoch<<32
	return n, nil
}

// Bootstrap makes this broker the first broker (root) of a new overlay.
func (n *Node) Bootstrap() {
	if n.member {
		return
	}
	n.member = true
	n.becomeJoined()
}

func (n *Node) becomeJoined() {
	if n.joined {
		return
	}
	n.joined = true
	clear(n.unjoinedSeen)
	if n.leaveWhenJoined {
		n.leaveWhenJoined = false
		defer n.Leave() // after the joined heartbeats and the answers below
	}
	defer n.answerStateRequests()
	n.notice(NoticeJoined, "", "")
	for _, id := range n.sortedPeers() {
		if p := n.peers[id]; p.up {
			n.send(id, n.heartbeat())
		}
	}
	n.reoffer() // the log's publications, before any new one (durable.go)
	for _, id := range sortedIDs(n.heldFloods) {
		n.askUnplaced(id) // floods held while we recovered (flood.go holdUnplaced)
	}
}

// Tick tells the node that one unit of time passed.
func (n *Node) Tick() {
	n.now++
	if n.left {
		return
	}
	n.durableTick()
	n.joinTick()
	if n.member && !n.joined && n.stateWait != nil {
		n.stateWaitT++
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
			p.idle++
			if p.idle >= n.cfg.HeartbeatTicks {
				n.send(id, n.heartbeat())
			}
			n.closeIdleLink(p)
		}
		if p.up && !p.gone || n.monitored(p) { // (an up link is monitored unless its peer is gone)
			p.silent++
			if !p.suspected && p.silent >= n.cfg.FailureTicks {
				n.suspect(p, fmt.Sprintf("silent for %d ticks", p.silent))
				changed = true
			}
		}
		if p.suspected && !p.gone {
			p.suspTicks++
			if p.suspTicks >= n.cfg.GoneAfterTicks && n.now-p.vouchedAt > int64(n.cfg.FailureTicks) {
				n.declareGone(p)
				changed = true
			}
			// Probe: a suspected broker that matters is dialled again now
			// and then, so that its return (or a healed cut) is noticed.
			if !p.up && !p.dialing && p.dialWait == 0 && n.topo.Has(id) {
				n.dial(Peer{ID: id, Addr: n.addrOf(id)}, false)
			}
		}
		if !p.up && !p.suspected && !p.dialing && p.dialWait == 0 && n.wanted(id) {
			n.dial(Peer{ID: id, Addr: n.addrOf(id)}, false)
		}
	}
	if changed {
		n.routesChanged()
	}
	if n.member {
		if n.now%int64(n.cfg.DACKTicks) == 0 {
			// A purge pass per period besides those on DACK receipt:
			// paths change with the map and with usability.
			n.purge()
			n.discDirty = true
		} else if n.purgeDirty {
			n.purge()
		}
		n.dackLinks()
	}
	if n.leaving && !n.left {
		n.leaveTick()
	}
}

// monitored reports whether silence from id counts toward a suspicion:
// tree neighbours once this broker is a member, and any peer with an up
// link.
func (n *Node) monitored(p *peer) bool {
	id := p.id
	if p.gone && n.topo.Removed(id) {
		return false // left or removed from the tree: its silence means nothing (leave.go)
	}
	if p.up {
		return true
	}
	if !n.member {
		return false
	}
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if nb == id {
			return true
		}
	}
	return false
}

// wanted reports whether a link to id should exist: a tree neighbour or a
// current next hop.
func (n *Node) wanted(id message.BrokerID) bool {
	if !n.member || n.left {
		return false
	}
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if nb == id {
			return true
		}
	}
	for _, h := range n.hops {
		if h.ok && h.to == id {
			return true
		}
	}
	return false
}

// vouch records what a joined peer's heartbeat says of the brokers we
// suspect among its tree neighbours: one it does not list is alive to it
// (it monitors its tree neighbours), so it is not gone, whatever our own
// silence from it says. *Rule: a broker is declared gone only while no
// joined tree neighbour of it vouches for it* (docs/protocol.md §4): a
// broker back from a restart that one neighbour could not hear for
// gone_after (its handshakes slow both ways) was removed from the tree by
// that neighbour alone while the others routed through it, and the two
// sides' trees disagreed for good.
func (n *Node) vouch(from message.BrokerID, suspects []message.BrokerID) {
	for _, x := range n.topo.Neighbours(from) {
		if x == n.cfg.ID || slices.Contains(suspects, x) {
			continue
		}
		if q := n.peers[x]; q != nil && q.suspected && !q.gone {
			q.vouchedAt = n.now
		}
	}
}

func (n *Node) suspect(p *peer, why string) {
	p.suspected = true
	p.suspTicks = 0
	p.suspAt = n.now
	p.suspEpoch = p.epoch
	if e, ok := n.topo.Get(p.id); ok && e.Epoch > p.suspEpoch {
		p.suspEpoch = e.Epoch
	}
	if p.up {
		// A silent link is closed: a cut or a frozen peer must be found
		// again through a new link (probing below), on which everything
		// unpurged is retransmitted; the old one may never deliver again.
		p.up = false
		n.out.Closes = append(n.out.Closes, p.id)
	}
	n.notice(NoticeSuspected, p.id, why)
}

func (n *Node) unsuspect(p *peer) {
	if !p.suspected {
		return
	}
	p.suspected = false
	p.suspTicks = 0
	p.gone = false
	n.notice(NoticeUnsuspected, p.id, "")
	n.resendTopo(p)
}

// Step processes a message from a peer, received on an up link.
func (n *Node) Step(from message.BrokerID, m message.Message) {
	if n.left || from == n.cfg.ID || m == nil {
		return
	}
	p := n.peer(from)
	p.silent = 0
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
		if n.member && !n.joined && !n.rejoin {
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
	default:
		// A newer peer's message: ignored (PROTOCOL compatibility rule).
	}
}

// heartbeat builds this broker's heartbeat: epoch, joined, and the tree
// neighbours it suspects.
func (n *Node) heartbeat() *message.Heartbeat {
	hb := &message.Heartbeat{Epoch: n.cfg.Epoch, Joined: n.joined && !n.leaving} // a leaver is not routed through
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if p := n.peers[nb]; p != nil && p.suspected {
			hb.Suspects = append(hb.Suspects, nb)
		}
	}
	return hb
}

func (n *Node) onHeartbeat(p *peer, m *message.Heartbeat) {
	p.dialFails = 0 // the link works: the next dial of it starts a fresh backoff
	// Suspicion hints from a broker adjacent to the suspect, about brokers
	// we have no link to (never about our own neighbours: those we judge
	// by their own silence).
	hinted := false
	if n.member && len(m.Suspects) > 0 {
		n.geometry()
		for _, x := range m.Suspects {
			if x == n.cfg.ID || n.dist[x] <= 1 || !n.topo.Has(x) {
				continue
			}
			adjacent := false
			for _, y := range n.topo.Neighbours(x) {
				if y == p.id {
					adjacent = true
				}
			}
			if q := n.peer(x); adjacent && !q.up && !q.suspected {
				n.suspect(q, "reported by "+string(p.id))
				hinted = true
			}
		}
	}
	if hinted {
		defer n.routesChanged()
	}
	was := n.unusable(p.id)
	if !p.heardHB && m.Joined && n.bypassInUse() {
		// A newly linked broker may stand behind a bypass hop whose dial
		// is still pending, or be a skipped broker that is alive after
		// all: recompute the routes now (computeHop).
		defer n.routesChanged()
	}
	if m.Epoch > p.epoch {
		n.peerRestarted(p.id, m.Epoch)
	}
	if !m.Joined && !n.joined && m.Epoch >= p.epoch {
		n.unjoinedSeen[p.id] = true
	}
	if m.Epoch >= p.epoch {
		if m.Joined && !p.joined && n.stateWait != nil && (n.stateWait[p.id] || n.stateless[p.id]) {
			// It answered NotMember before; now it can give its state.
			// Also when that answer took it off the awaited peers: it
			// joined meanwhile (through another broker), and its side's
			// subscriptions are ours to learn before we become routable
			// (beyond δ: two restarted neighbours each refused the other's
			// join; the one joined later became routable with no
			// subscriptions and swallowed publications: scenario
			// beyond_restart_notmember_asked_again.txt).
			delete(n.stateless, p.id)
			n.stateWait[p.id] = true
			defer n.send(p.id, &message.StateRequest{Node: n.self})
		}
		// Routable before and not now, in the same incarnation: it is
		// leaving (its LeaveRequest follows). Said before the routes are
		// recomputed below (probeFrontiers).
		p.leaving = !m.Joined && m.Epoch == p.epoch && (p.joined || p.leaving)
		p.epoch = m.Epoch
		p.joined = m.Joined
		p.heardHB, p.heardAny = true, true
		if m.Joined {
			n.askUnplaced(p.id) // it holds our map's missing part now (flood.go holdUnplaced)
			n.vouch(p.id, m.Suspects)
		}
	}
	if was != n.unusable(p.id) {
		if !was {
			n.notice(NoticeNotRoutable, p.id, "joining or recovering")
		} else {
			n.notice(NoticeRecovered, p.id, "")
		}
		n.routesChanged()
	}
}

// peerRestarted handles a peer seen under a larger epoch than known: its
// old subscriptions are withdrawn and its old DACK reports forgotten. It
// stays unusable until it says it is joined (recovery complete).
func (n *Node) peerRestarted(id message.BrokerID, epoch uint64) {
	if e, ok := n.topo.Get(id); ok && e.Epoch < epoch {
		e.Epoch = epoch
		n.topo.Put(e)
	}
	n.store.Forget(id, epoch)
	var old []message.SubID
	for _, e := range n.table.Entries() {
		if e.Sub.Edge == id && e.Sub.Epoch < epoch {
			old = append(old, e.Sub)
		}
	}
	for _, s := range old {
		n.withdraw(s, "", true)
	}
}

// LinkUp reports a new link to peer.
func (n *Node) LinkUp(id message.BrokerID) {
	if n.left || id == n.cfg.ID {
		return
	}
	p := n.peer(id)
	p.dialled, p.served, p.unneeded = p.dialing, false, 0
	p.up, p.dialing, p.silent, p.heardHB, p.dackSent = true, false, 0, false, 0
	p.dackAt = n.now - int64(n.cfg.DACKTicks) // a new link may carry a DACK at once
	n.dropAssembly(id)
	delete(n.heldAsked, id)
	n.send(id, n.heartbeat())
	if !n.member && n.jn.isCurrent(id) && !n.jn.asked {
		n.askJoin(id)
		return
	}
	if n.member && !n.joined && n.stateWait != nil && n.stateWait[id] {
		n.send(id, &message.StateRequest{Node: n.self})
	}
	// A new link: nothing sent on an earlier one is known to have arrived.
	n.floodsResend(id)
	// While a bypass passes over a broker not linked yet (computeHop), the
	// link to it coming up changes that route now, not at its first
	// heartbeat: every recipient whose path goes through it is routed
	// through it from this moment, and the retransmission below is one
	// pass, in stamp order, over everything routed there. Retransmitted
	// first only for the recipients it is the next hop of (its own edge),
	// and the rest at its heartbeat, it received a source's newer
	// publications before older ones and dropped those as already sent on
	// (acceptOlder), while the broker behind it, reached by the bypass
	// link too, took the newer ones first from it and dropped the older
	// ones arriving on the bypass link (TestLinkUpReroutesPassedOverHop).
	if n.member && n.bypassInUse() && n.reroute(id) {
		n.leaveLinkUp(id)
		return
	}
	n.retransmitTo(id)
	n.leaveLinkUp(id)
}

// LinkDown reports that the link to peer is gone. It is not a failure by
// itself (heartbeat silence is): the link is dialled again if still wanted.
func (n *Node) LinkDown(id message.BrokerID) {
	p, ok := n.peers[id]
	if !ok {
		return
	}
	p.up, p.dialing = false, false
	n.dropAssembly(id)
	if !p.heardHB {
		// It died before its first heartbeat (refused at the other end,
		// or the peer is going down): as good as a failed dial.
		p.dialFails++
		p.dialWait = n.backoff(n.cfg.HeartbeatTicks, p.dialFails-1)
	} else if p.dialWait == 0 {
		p.dialWait = n.cfg.HeartbeatTicks
	}
}

// DialFailed reports that a requested dial did not succeed: the peer is
// suspected at once (it is unreachable) and the next broker behind it is
// tried.
func (n *Node) DialFailed(id message.BrokerID) {
	p, ok := n.peers[id]
	if !ok {
		return
	}
	joinDial := p.joinDial
	p.dialing, p.joinDial = false, false
	p.dialFails++
	p.dialWait = n.backoff(n.cfg.FailureTicks, p.dialFails-1)
	if !n.member && n.jn.isCurrent(id) {
		n.nextJoinpoint()
		return
	}
	if joinDial && n.member && !n.wanted(id) {
		// A joinpoint the join walk moved past (it answered too late)
		// and that nothing needs now: its failed dial says nothing a
		// route depends on, and suspecting a live broker for it only
		// spreads a false suspicion. (Other dials nothing needs any more
		// still make a suspicion: a flood may be waiting on that peer,
		// and only a suspicion lets it give up.)
		return
	}
	if !p.suspected && !p.up {
		n.suspect(p, "dial failed")
		n.routesChanged()
	}
}

func (n *Node) dial(to Peer, force bool) {
	p := n.peer(to.ID)
	if p.up || (p.dialing && !force) {
		return
	}
	if to.Addr == "" {
		to.Addr = n.addrOf(to.ID)
	}
	p.dialing, p.joinDial = true, false
	p.dialWait = n.cfg.FailureTicks
	n.out.Dials = append(n.out.Dials, to)
}

func (n *Node) addrOf(id message.BrokerID) string {
	if e, ok := n.topo.Get(id); ok {
		return e.Addr
	}
	for _, jp := range n.jn.points {
		if jp.ID == id {
			return jp.Addr
		}
	}
	return ""
}

func (n *Node) peer(id message.BrokerID) *peer {
	p, ok := n.peers[id]
	if !ok {
		p = &peer{id: id}
		if e, ok := n.topo.Get(id); ok {
			p.epoch = e.Epoch
		}
		n.peers[id] = p
	}
	return p
}

// sortedPeers returns the peers' names, sorted.
func (n *Node) sortedPeers() []message.BrokerID { return sortedIDs(n.peers) }

func (n *Node) sortedClients() []message.ClientID {
	ids := make([]message.ClientID, 0, len(n.clients))
	for id := range n.clients {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// send queues m for peer to (only on an up link: the caller retransmits
// what matters on LinkUp).
func (n *Node) send(to message.BrokerID, m message.Message) {
	n.sendP(n.peers[to], to, m)
}

// sendP is send with to's peer p (n.peers[to], nil: none) already known.
func (n *Node) sendP(p *peer, to message.BrokerID, m message.Message) {
	if p == nil || !p.up {
		return
	}
	if n.sendInParts(to, m) {
		return // too large for one frame: sent in parts (parts.go)
	}
	p.idle = 0
	if _, isPub := m.(*message.Pub); isPub {
		n.counters.PubsOut++
	} else {
		n.counters.Control[m.Type().String()]++
	}
	n.out.Messages = append(n.out.Messages, Envelope{To: to, Msg: m})
}

// sendPub is send of a publication to peer p (n.peers[to]).
func (n *Node) sendPub(p *peer, to message.BrokerID, m *message.Pub) {
	if !p.up {
		return
	}
	p.idle = 0
	n.counters.PubsOut++
	n.out.Messages = append(n.out.Messages, Envelope{To: to, Msg: m})
}

func (n *Node) toClient(c message.ClientID, m message.Message) {
	n.out.ToClients = append(n.out.ToClients, ClientEnvelope{To: c, Msg: m})
}

func (n *Node) notice(k NoticeKind, p message.BrokerID, detail string) {
	n.out.Notices = append(n.out.Notices, Notice{Kind: k, Peer: p, Detail: detail})
}

// unusable reports whether b must not be routed through now: suspected,
// gone, or known to be joining/recovering.
func (n *Node) unusable(b message.BrokerID) bool {
	if b == n.cfg.ID {
		return false
	}
	p, ok := n.peers[b]
	if !ok {
		return false
	}
	if p.suspected || p.gone {
		return true
	}
	// Not joined by its last heartbeat, on this link or an earlier one: a
	// new link (a redial, a replaced stale link) does not make a
	// recovering broker routable before it says it is. What an older
	// incarnation said does not count once the map holds a newer one.
	if p.heardHB {
		return !p.joined
	}
	if !p.heardAny || p.joined {
		return false
	}
	e, ok := n.topo.Get(b)
	return !ok || e.Epoch <= p.epoch
}

// leavingAlive reports whether b is unusable only because it is leaving
// (draining) while its link is up and it is heard: alive, unlike a
// suspected or gone broker.
func (n *Node) leavingAlive(b message.BrokerID) bool {
	p, ok := n.peers[b]
	return ok && p.leaving && p.up && p.heardHB && !p.joined && !p.suspected && !p.gone
}

// Status returns a read-only snapshot.
func (n *Node) Status() Status {
	st := Status{
		ID: n.cfg.ID, Epoch: n.cfg.Epoch, Joined: n.joined, Leaving: n.leaving, Left: n.left,
		Parent: n.topo.Parent(n.cfg.ID), Map: n.topo.Nodes(),
		Subs: n.table.Len(), QueueLen: n.queueLen,
		Arrived: map[string]uint64{}, Discarded: map[string]uint64{},
		Counters: n.counters,
		Log:      n.logStatus(),
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
	for _, h := range n.hops {
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
func (n *Node) QueueLen() int { return n.queueLen }

// Joined reports whether the node is a full member (cheap).
func (n *Node) Joined() bool { return n.joined }

// Parent is this broker's parent in the tree ("" for the root or before
// it joined).
func (n *Node) Parent() message.BrokerID { return n.self.Parent }
