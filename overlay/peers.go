// Peers: what the node knows of every other broker it has (or had, or wants)
// a link with; failure detection (heartbeats, silence, suspicion, vouching,
// a restart seen); the link events (LinkUp, LinkDown, DialFailed) and dials;
// and sending to a peer.

package overlay

import (
	"slices"

	"github.com/deltapub/deltapub/message"
)

// peer is what the node knows about one other broker it has (or had, or
// wants) a link with.
type peer struct {
	id         message.BrokerID
	up         bool             // a link is established
	silent     int              // ticks since anything arrived (counted while monitored)
	idle       int              // ticks since anything was sent on the link
	suspected  bool             // silent too long, or the dial failed, or reported
	reportedBy message.BrokerID // the suspicion is a tree neighbour's of it, taken from its heartbeat (empty: our own)
	suspTicks  int              // ticks spent suspected (for gone_after)
	suspAt     int64            // tick of the last suspicion (topo_resend.go)
	upAt       int64            // last tick its link was up (topo_resend.go)
	upEpoch    uint64           // its incarnation then
	suspEpoch  uint64           // the newest incarnation known when it was suspected: the one gone_after may declare gone
	gone       bool             // declared gone (PROTOCOL §6)
	vouchedAt  int64            // last tick a joined tree neighbour of it said it does not suspect it (gone waits)
	epoch      uint64           // last incarnation heard from it
	joined     bool             // its last heartbeat said it is routable
	heardHB    bool             // a heartbeat arrived on the current link
	heardAny   bool             // a heartbeat arrived on some link: joined is what it last said
	leaving    bool             // it said it is leaving (routable before, not now, same epoch; or LeaveRequest{Drain})
	dialing    bool             // a dial was requested and not answered
	joinDial   bool             // that dial was the join walk's (tryJoinpoint)
	dialWait   int              // ticks before the next dial may be requested
	dialFails  int              // dials in a row that failed (or brought a link that died before a heartbeat): the backoff's attempt
	dialled    bool             // the current link came up on a dial of ours (links.go: the dialler closes it when unneeded)
	unneeded   int              // ticks in a row the current link served nothing (links.go)
	served     bool             // the current link was needed once its first heartbeat arrived (links.go)
	dackSent   uint64           // store version covered by the last DACK on this link
	dackAt     int64            // tick of the last DACK on this link (at most one per DACKTicks)
	dackIn     int64            // tick of the last DACK received from it (0: none)
	refuted    int              // its suspicions it refuted (heard again, same incarnation), not yet forgiven: patience.go
	calm       int              // ticks since the last refutation or suspicion (patience.go)
	toldGone   int64            // tick it was last told it was removed while alive (0: never)
	zombie     bool             // it was told so: it spoke as a member in an incarnation declared gone (isZombie)
	goneEpoch  uint64           // the newest incarnation declared gone or removed from the tree (removedWhileAlive tells only those)
	// After we declared it gone: a few slow probes, so that a live one (a
	// stall past gone_after) hears it was removed (removedWhileAlive).
	goneProbes int    // probes left
	goneWait   int    // ticks to the next one
	goneAddr   string // its address when declared gone (a removal drops it from the map)
	namedAddr  string // its address as a NotMember named it (recovery.go askState): for a peer our map does not hold
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
	if !n.mem.member {
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
	if !n.mem.member || n.mem.left {
		return false
	}
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if nb == id {
			return true
		}
	}
	for _, h := range n.fwd.hops {
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
	p.reportedBy = ""
	p.suspTicks = 0
	p.calm = 0
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
	p.reportedBy = ""
	n.refuted(p)
	n.notice(NoticeUnsuspected, p.id, "")
	n.resendTopo(p)
}

// hintPatience is how long, in failure timeouts, a suspicion taken from a
// reporter that is still heard waits for that reporter to lift it before
// this broker probes the suspect itself (probing, core.go Tick).
const hintPatience = 4

// reporterWatches reports whether p's suspicion is a report, standing for
// less than hintPatience failure timeouts, whose reporter is still a
// usable link of ours: that reporter, a tree neighbour of p, monitors
// p and lifts the suspicion in its next heartbeat when p speaks again
// (liftReported), so a probe of ours would only add a handshake. *Rule: a
// reported suspicion is its reporter's to lift* (docs/protocol.md §7).
func (n *Node) reporterWatches(p *peer) bool {
	if p.reportedBy == "" || p.suspTicks >= hintPatience*n.cfg.FailureTicks {
		return false
	}
	r := n.peers[p.reportedBy]
	return r != nil && r.up && !n.unusable(r.id)
}

// liftReported lifts the suspicions taken from reporter's heartbeats that
// its latest one, m, no longer lists, of brokers still its tree neighbours
// in our map: it hears them again (it monitors its tree neighbours).
func (n *Node) liftReported(reporter message.BrokerID, m *message.Heartbeat) bool {
	lifted := false
	for _, x := range n.topo.Neighbours(reporter) {
		q := n.peers[x]
		if q == nil || !q.suspected || q.gone || q.reportedBy != reporter || slices.Contains(m.Suspects, x) {
			continue
		}
		n.unsuspect(q)
		lifted = true
	}
	return lifted
}

// heartbeat builds this broker's heartbeat: epoch, joined, and the tree
// neighbours it suspects.
func (n *Node) heartbeat() *message.Heartbeat {
	hb := &message.Heartbeat{Epoch: n.cfg.Epoch, Joined: n.mem.joined && !n.mem.leaving} // a leaver is not routed through
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if p := n.peers[nb]; p != nil && p.suspected {
			hb.Suspects = append(hb.Suspects, nb)
		}
	}
	return hb
}

func (n *Node) onHeartbeat(p *peer, m *message.Heartbeat) {
	if n.removedWhileAlive(p, m) {
		return
	}
	p.dialFails = 0 // the link works: the next dial of it starts a fresh backoff
	// Suspicion hints from a broker adjacent to the suspect, about brokers
	// we have no link to (never about our own neighbours: those we judge
	// by their own silence).
	hinted := false
	if n.mem.member && len(m.Suspects) > 0 {
		n.geometry()
		for _, x := range m.Suspects {
			if x == n.cfg.ID || n.geo.dist[x] <= 1 || !n.topo.Has(x) {
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
				q.reportedBy = p.id
				hinted = true
			}
		}
	}
	if n.mem.member && m.Joined && m.Epoch >= p.epoch && n.liftReported(p.id, m) {
		hinted = true
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
	if !m.Joined && !n.mem.joined && m.Epoch >= p.epoch {
		n.rec.unjoinedSeen[p.id] = true
	}
	if m.Epoch >= p.epoch {
		if m.Joined && !p.joined && n.rec.stateWait != nil && (n.rec.stateWait[p.id] || n.rec.stateless[p.id]) {
			// It answered NotMember before; now it can give its state.
			// Also when that answer took it off the awaited peers: it
			// joined meanwhile (through another broker), and its side's
			// subscriptions are ours to learn before we become routable
			// (beyond δ: two restarted neighbours each refused the other's
			// join; the one joined later became routable with no
			// subscriptions and swallowed publications: scenario
			// beyond_restart_notmember_asked_again.txt).
			delete(n.rec.stateless, p.id)
			n.rec.stateWait[p.id] = true
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

// maxGoneProbes bounds the probes of a broker declared gone (see peer).
const maxGoneProbes = 3

// removedWhileAlive applies the rule "removed while alive" (docs/protocol.md
// §6): a broker declared gone (by the last live hop toward it:
// ownsGoneVerdict), and, when isolated, removed from the tree,
// that speaks again in the same incarnation was not dead but stalled
// (frozen, starved) for gone_after. Its subscriptions were withdrawn
// overlay-wide (and its neighbours re-attached around it); it still
// believes itself a member, and its subscribers get nothing, for good. The broker that hears
// it tells it so (a heartbeat with Removed, at most once per failure
// timeout); the removed broker reports NoticeRemoved, once, on which the
// runtime restarts it at once as a new incarnation, as after a crash
// (through the place it saved), and its clients reconnect. It reports whether m was
// such a notice to this broker (nothing else in it counts then).
func (n *Node) removedWhileAlive(p *peer, m *message.Heartbeat) bool {
	if m.Removed {
		if !n.mem.joined || n.mem.leaving || n.mem.left || n.mem.removed || m.Epoch < p.epoch {
			return false // a broker joining anew, or leaving, is no zombie
		}
		n.mem.removed = true
		n.notice(NoticeRemoved, p.id, "removed from the tree as gone while alive: restart as a new incarnation")
		return true
	}
	if m.Joined && m.Epoch == p.epoch && p.gone && m.Epoch <= p.goneEpoch &&
		(p.toldGone == 0 || n.now-p.toldGone >= int64(n.cfg.FailureTicks)) {
		p.toldGone, p.zombie = n.now, true
		n.send(p.id, &message.Heartbeat{Epoch: n.cfg.Epoch, Joined: n.mem.joined && !n.mem.leaving, Removed: true})
	}
	return false
}

// isZombie reports whether p speaks in an incarnation removed while alive
// (it was told so). Its publications are dropped: it still forwards on
// the tree it had, which the repair around it changed, so a source of its
// reaches a broker on two paths (through it, and through a neighbour it
// still takes for its child) and a later publication overtakes an earlier
// one that the duplicate filter then drops for good. Its restart (as a
// new incarnation) offers its logged publications again, in order; what
// it relayed for others is retransmitted around it by their edges.
func (p *peer) isZombie() bool {
	return p.zombie && p.gone && p.epoch <= p.goneEpoch
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
	if n.mem.left || id == n.cfg.ID {
		return
	}
	p := n.peer(id)
	p.dialled, p.served, p.unneeded = p.dialing, false, 0
	p.up, p.dialing, p.silent, p.heardHB, p.dackSent = true, false, 0, false, 0
	p.dackAt = n.now - int64(n.cfg.DACKTicks) // a new link may carry a DACK at once
	n.dropAssembly(id)
	delete(n.floods.heldAsked, id)
	n.send(id, n.heartbeat())
	if !n.mem.member && n.mem.jn.isCurrent(id) && !n.mem.jn.asked {
		n.askJoin(id)
		return
	}
	if n.mem.member && !n.mem.joined && n.rec.stateWait != nil && n.rec.stateWait[id] {
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
	if n.mem.member && n.bypassInUse() && n.reroute(id) {
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
	if !n.mem.member && n.mem.jn.isCurrent(id) {
		n.nextJoinpoint()
		return
	}
	if joinDial && n.mem.member && !n.wanted(id) {
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
	for _, jp := range n.mem.jn.points {
		if jp.ID == id {
			return jp.Addr
		}
	}
	if p := n.peers[id]; p != nil {
		return p.namedAddr
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
		n.peerIDs = nil
	}
	return p
}

// sortedPeers returns the peers' names, sorted (not to be modified).
func (n *Node) sortedPeers() []message.BrokerID {
	if n.peerIDs == nil {
		n.peerIDs = sortedIDs(n.peers)
	}
	return n.peerIDs
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
