// State transfer and recovery: the subscriptions one broker gives another
// (subsFor, installSubs), StateRequest and StateReply, and a restarted
// broker's collection of its neighbours' state (asking behind the failed ones,
// asking again) until it may become routable (checkRecovery).

package overlay

import (
	"fmt"
	"slices"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
	"github.com/deltapub/deltapub/topology"
)

// subsFor returns the routing state broker x needs from this broker: every
// subscription whose subscriber is not behind x as seen from here, with
// From recomputed for x (PROTOCOL §3), sorted by SubID. For a neighbour,
// "behind x" is "its direction is x". For a broker farther away (a
// recovering broker asking across failed ones) it is "x lies on the path
// from here to From": within δ+1 hops of us, a From strictly before x on
// that path is the subscriber's own edge (a pointer stops short of δ+1
// hops only there), so subscriptions of the failed brokers in between, and
// of branches off the path, are included.
//
// Beyond δ+1 hops (a joinpoint of a restart placed elsewhere than the
// runtime's list assumed), or when our map does not place x at all, a
// pointer δ+1 hops from us that may lie on our way to x does not say on
// which side of x its subscriber is: before x, or behind it. Such a
// subscription is left out. Named, x installed it toward us although its
// subscriber was behind x, took the answer of its own child for a
// duplicate (the first answer wins), became routable, dropped the
// publications for it as coming from that direction and reported them
// discarded, and its upstream purged them (scenarios
// restart_joinpoint_beyond_neighbourhood.txt, restart_joinpoint_not_placing.txt).
// x learns it from the brokers of its own side, whose pointers are exact.
func (n *Node) subsFor(x message.BrokerID) []message.SubState {
	n.geometry()
	d, placed := n.geo.dist[x]
	var out []message.SubState
	for _, e := range n.table.Entries() {
		if e.Local {
			out = append(out, message.SubState{Sub: e.Sub, Filter: e.Filter, From: n.cfg.ID, Durable: n.durStateOf(e)})
			continue
		}
		if placed && d <= 1 {
			if e.Dir == x {
				continue
			}
			out = append(out, message.SubState{Sub: e.Sub, Filter: e.Filter, From: n.topo.FromFor(e.From, d), Durable: n.durStateOf(e)})
			continue
		}
		pf := n.pathTo(e.From)
		if placed && slices.Contains(pf[min(1, len(pf)):], x) {
			continue // behind x
		}
		if placed && e.From != e.Sub.Edge && len(pf)-1 < n.cfg.Delta+1 && slices.Contains(n.pathTo(x), e.From) {
			// A pointer short of δ+1 hops that is not the subscription's
			// edge was set while our map did not reach the edge (it stops
			// at the neighbour the flood came from): the subscriber may
			// be behind x. Named, x installed it toward us, the first
			// answer won over its own child's, and x never forwarded to
			// that child (test TestFarStateReplyLeavesOutTruncatedPointers).
			continue
		}
		if (!placed || d > n.cfg.Delta+1) && len(pf)-1 >= n.cfg.Delta+1 && (!placed || slices.Contains(n.pathTo(x), e.From)) {
			continue // its subscriber may be behind x: we cannot tell
		}
		from := e.From
		if !placed {
			// A pointer short of δ+1 hops is the subscriber's edge, in our
			// map, so not behind x (farther than our map): as it is.
		} else if p := n.topo.Path(x, from); len(p) > n.cfg.Delta+2 {
			from = p[n.cfg.Delta+1]
		} else if p == nil {
			from = n.cfg.ID
		}
		out = append(out, message.SubState{Sub: e.Sub, Filter: e.Filter, From: from, Durable: n.durStateOf(e)})
	}
	return out
}

func (n *Node) installSubs(from message.BrokerID, subs []message.SubState) (added []message.SubID) {
	for _, s := range subs {
		if n.floods.tombstones[s.Sub] || s.Sub.Edge == n.cfg.ID {
			continue
		}
		fp := s.From
		if !n.topo.Has(fp) {
			fp = from
		}
		dir := n.direction(fp)
		if dir == "" {
			dir = n.direction(from)
		}
		if ok, _ := n.table.Insert(routing.Entry{Sub: s.Sub, Filter: s.Filter, From: fp, Dir: dir}); ok {
			added = append(added, s.Sub)
			n.floods.viaState[s.Sub] = true
			if s.Durable != nil {
				n.durRecord(s.Sub, s.Durable) // answered once joined (dursub.go)
			}
		}
	}
	return added
}

func (n *Node) onStateRequest(from message.BrokerID, m *message.StateRequest) {
	if m.Node.ID != from {
		return
	}
	if n.repairOut() {
		// Leaving, and its repair is out: the others' maps no longer hold
		// it, while its own still shows the old tree. Handing that out
		// would put it back in their maps (a restarted neighbour's entry
		// with this broker as its parent: scenario
		// leave_repaired_leaver_answers_not_member.txt). It has no
		// state to give any more.
		n.send(from, &message.StateReply{NotMember: true})
		return
	}
	if !n.mem.member {
		r := &message.StateReply{NotMember: true}
		for _, jp := range n.mem.jn.points {
			r.Joinpoints = append(r.Joinpoints, message.MapNode{ID: jp.ID, Addr: jp.Addr})
		}
		n.send(from, r)
		return
	}
	if !n.topo.Has(from) && m.Node.Parent != "" && (m.Node.Parent == n.cfg.ID || n.topo.Has(m.Node.Parent) || n.topo.Dangling(from)) {
		// A restarted neighbour our (partial) map did not show: learn its
		// place, and re-learn its side's subscriptions once it is joined.
		// Also when its parent is unknown to us but our map names it as a
		// parent (our own, typically: after more than δ restarts in a row
		// our map can hold the edge to it without its entry): left out, the
		// edge is missing on our side only, and neither side routes
		// through it (scenario beyond_restart_parent_not_child.txt).
		n.topo.Put(m.Node)
		n.gaps.resyncDirs[from] = true
	}
	if m.Resync {
		if n.mem.joined {
			n.send(from, &message.StateReply{Map: n.topo.Within(from, n.cfg.Delta+1), Subs: n.subsFor(from)})
		}
		return
	}
	p := n.peer(from)
	if known, ok := n.topo.Get(from); ok && m.Node.Epoch > known.Epoch {
		n.peerRestarted(from, m.Node.Epoch)
	}
	if m.Node.Epoch >= p.epoch {
		p.epoch, p.joined, p.heardHB = m.Node.Epoch, false, true
	}
	n.routesChanged()
	n.mem.pendingState[from] = true
	n.answerStateRequests()
}

// answerStateRequests answers every pending StateRequest whose answer is
// complete here: the requester needs the subscriptions of our other
// directions, so while we are recovering ourselves we answer only once no
// state is awaited from a direction other than the requester's (in a tree
// these dependencies point away from each other: no deadlock between two
// neighbours recovering at once). An awaited peer our map does not hold
// counts on the side where it lies, when that side is known (unplacedSide)
// and so is the requester's: counted on no side, it held the answer to a
// restarted neighbour that was itself waiting for ours, and both waited
// until gone_after, their subscribers' resumes unconfirmed meanwhile (more
// than δ restarted in a row; test
// TestRecoveringAnswersNeighbourWhileAwaitingItsSide). A requester our map
// does not place is answered as before, once every awaited peer is
// unplaced too: given a side, such a peer held the answer to a requester
// behind that very side, and two recoveries waited for each other again.
func (n *Node) answerStateRequests() {
	if len(n.mem.pendingState) == 0 {
		return
	}
	ids := sortedIDs(n.mem.pendingState)
	for _, id := range ids {
		dir := n.direction(id)
		ready := true
		for w := range n.rec.stateWait {
			side := n.direction(w)
			if side == "" && dir != "" {
				side = n.unplacedSide(w)
			}
			if side != dir {
				ready = false
				break
			}
		}
		if !ready {
			continue
		}
		delete(n.mem.pendingState, id)
		n.send(id, &message.StateReply{Map: n.topo.Within(id, n.cfg.Delta+1), Subs: n.subsFor(id)})
	}
}

// unplacedSide is the side of an awaited peer our map does not hold: the
// side of the restarted broker whose NotMember named it (namedBy), unless
// that broker is on a child's side and the peer may be one of our
// ancestors (the names are that broker's joinpoints, its ancestors among
// them, which from a child's side are ours too); else the side of a
// broker our map shows as its child (Map.Dangling), which reaches us
// through its own children, so its parent lies beyond it. "" when neither
// places it.
func (n *Node) unplacedSide(w message.BrokerID) message.BrokerID {
	if y, ok := n.rec.namedBy[w]; ok {
		if d := n.direction(y); d != "" && (d == n.topo.Parent(n.cfg.ID) || !n.mayBeAncestor(w)) {
			return d
		}
	}
	for _, x := range n.topo.ChildrenOf(w) {
		if x != n.cfg.ID {
			if d := n.direction(x); d != "" {
				return d
			}
		}
	}
	return ""
}

// mayBeAncestor reports whether w may be one of our ancestors within δ
// hops: the farthest a broker on our child's side names among its
// joinpoints (the runtime lists δ+1 ancestors). Our map shows the
// ancestors it holds; past the first it does not hold, any may be w.
func (n *Node) mayBeAncestor(w message.BrokerID) bool {
	a := n.topo.Parent(n.cfg.ID)
	for d := 1; a != "" && d <= n.cfg.Delta; d++ {
		if a == w || !n.topo.Has(a) {
			return true
		}
		a = n.topo.Parent(a)
	}
	return false
}

func (n *Node) onStateReply(from message.BrokerID, m *message.StateReply) {
	if n.mem.joined && n.rec.stateWait == nil && !m.NotMember {
		// A resync after a partition healed: learn what we missed.
		if topology.Validate(m.Map) == nil {
			self := n.self
			self.Parent = n.topo.Parent(n.cfg.ID)
			n.topo.Merge(m.Map)
			n.topo.Put(self)
		}
		added := n.installSubs(from, m.Subs)
		for _, sub := range added {
			// New to us, so possibly to the brokers behind us too: flood
			// it on (those that have it answer at once), paced.
			if !n.gaps.onwardSet[sub] {
				n.gaps.onwardSet[sub] = true
				n.gaps.onward = append(n.gaps.onward, sub)
			}
		}
		n.routesChanged()
		n.answerLearned(added)
		n.replayUnplaced() // floods from brokers the map may place now
		return
	}
	if !n.mem.member || n.rec.stateWait == nil || !n.rec.stateWait[from] {
		return
	}
	if m.NotMember {
		// It restarted and has no state (its own subscriptions died with
		// it): ask the brokers behind it directly — those our map shows,
		// and its former neighbours, which it told us — and stop waiting
		// for it (it may be waiting for us to join). A broker that has
		// answered NotMember once is not asked again in this recovery:
		// two restarted neighbours naming each other as former neighbours
		// would otherwise be asked in turn forever while both wait for us
		// (a chain of restarted brokers with nobody stateful behind it has
		// no subscriptions to give: they died with its brokers, and a
		// not-joined broker accepts no new ones).
		n.rec.stateless[from] = true
		n.askBehind(from)
		// Naming us as its former neighbour, it is a tree neighbour our
		// partial map may not hold (unplaced).
		nb := n.isNeighbour(from) || slices.ContainsFunc(m.Joinpoints, func(jp message.MapNode) bool { return jp.ID == n.cfg.ID })
		for _, jp := range m.Joinpoints {
			if jp.ID == n.cfg.ID || jp.ID == from || n.rec.stateless[jp.ID] || n.rec.stateWait[jp.ID] {
				continue
			}
			if nb && !n.topo.Has(jp.ID) {
				n.rec.namedBy[jp.ID] = from // 2 hops from us (unplaced)
			}
			n.askState(Peer{ID: jp.ID, Addr: jp.Addr})
		}
		if n.topo.Has(from) {
			delete(n.rec.stateWait, from)
		} else {
			n.dropLeft(from)
		}
		n.checkRecovery()
		return
	}
	before := n.topo.Neighbours(n.cfg.ID)
	if topology.Validate(m.Map) == nil {
		self := n.self
		for _, e := range m.Map {
			if e.ID == n.cfg.ID {
				self.Parent = e.Parent
			}
		}
		n.topo.Merge(m.Map)
		n.topo.Put(self)
		n.rec.mapFrom[from] = true
	}
	n.installSubs(from, m.Subs)
	delete(n.rec.stateWait, from)
	// The map we started from (the joinpoint's) shows our tree neighbours
	// only within δ+1 hops of the joinpoint: a joinpoint farther up than
	// our parent does not hold our children. This reply's map may show
	// them: ask them too, or we become routable without their side.
	n.askNewNeighbours(before)
	n.checkRecovery()
	n.routesChanged()
	n.answerStateRequests()
	n.replayUnplaced()
}

// checkRecovery replaces awaited peers that turned out failed by the live
// brokers behind them, and completes the recovery when every direction
// has answered. A recovery still incomplete after GoneAfterTicks completes
// anyway (more than δ failed around us: the state of the missing
// directions arrives with later floods only), with a notice.
func (n *Node) checkRecovery() {
	if n.rec.stateWait == nil {
		return
	}
	ids := make([]message.BrokerID, 0, len(n.rec.stateWait))
	for id := range n.rec.stateWait {
		ids = append(ids, id)
	}
	sortIDs(ids)
	for _, id := range ids {
		p := n.peer(id)
		if p.gone {
			// Gone, or a leaver whose repair is applied: no state to give.
			// Asked on behalf of an awaited broker, that one's side is
			// asked again on the repaired map (dropLeft): a leaver's
			// repair that arrived before its NotMember otherwise left the
			// side behind it unasked (restart_beside_draining_leaver.txt).
			n.dropLeft(id)
			continue
		}
		if n.rec.strangers[id] {
			if p.suspected {
				delete(n.rec.stateWait, id) // an extra source of state, not a side of ours
			}
			continue
		}
		if !n.topo.Has(id) && (p.suspected || n.rec.stateWaitT >= n.cfg.FailureTicks) && !n.unplaced(id) {
			// A joinpoint our map does not hold (the joinpoint's map,
			// complete within δ, does not place it within δ+1 hops of us:
			// it left, or was removed as gone) that has not answered
			// within a failure timeout, or is suspected: it holds no state
			// of our neighbourhood. Waiting for it would hold the recovery
			// until gone_after (a broker crashed next to a leaver restarts
			// with the leaver among its joinpoints: scenario
			// restart_joinpoint_left.txt; a removed broker's link is not
			// even monitored, so it may never be suspected: scenario
			// restart_joinpoint_leaving_unsuspected.txt).
			n.dropLeft(id)
			continue
		}
		if !p.suspected {
			continue
		}
		if n.askBehind(id) > 0 {
			delete(n.rec.stateWait, id)
		}
		// Nobody to ask behind it (a leaf, or a side our map does not
		// show): keep waiting for it (a cut heals, a frozen broker
		// resumes) rather than become routable without its side's
		// subscriptions, which would swallow publications for them; and
		// ask behind it again at the next tick, as a StateReply may have
		// shown that side meanwhile (once our map held the brokers behind
		// a crashed child, they were never asked: scenario
		// restart_asks_behind_child_once_map_shows_it.txt).
	}
	n.askStrangers()
	if len(n.rec.stateWait) == 0 || n.rec.stateWaitT > n.cfg.GoneAfterTicks && !n.awaitingVerdict() {
		if len(n.rec.stateWait) > 0 {
			n.notice(NoticeGap, "", fmt.Sprintf("recovery completed without the state of %d peers", len(n.rec.stateWait)))
			// Re-learn those sides once they are reachable again.
			for id := range n.rec.stateWait {
				if d := n.direction(id); d != "" {
					n.gaps.resyncDirs[d] = true
				}
			}
		}
		n.rec.stateWait = nil
		n.becomeJoined()
	}
}

// askStrangers asks for their state the linked, joined peers our map does
// not hold, while an awaited peer is suspected with nobody behind it on our
// map. A restarted broker rebuilds its map from a joinpoint's, complete
// within δ+1 hops of that joinpoint only: when its parent's handshake is
// slow and a grandparent answers, the map ends at its crashed child, and
// the brokers behind that child, which bypass it and link to us, are the
// only ones holding that side's subscriptions. Waited for until the
// child's gone verdict, the recovery completed without them, became
// routable and swallowed every publication for that side (scenario
// restart_child_side_unknown_to_map.txt). Each stranger is asked
// once per recovery; its answer places it (its map) and gives its side's
// subscriptions; one suspected before answering is no longer awaited.
func (n *Node) askStrangers() {
	hole := false
	for id := range n.rec.stateWait {
		if p := n.peers[id]; p != nil && p.suspected && !n.rec.strangers[id] {
			hole = true
			break
		}
	}
	if !hole {
		return
	}
	for _, id := range n.sortedPeers() {
		p := n.peers[id]
		if !p.up || !p.heardHB || !p.joined || p.suspected || n.topo.Has(id) ||
			n.rec.strangers[id] || n.rec.stateWait[id] || n.rec.stateless[id] {
			continue
		}
		n.rec.strangers[id] = true
		n.askState(Peer{ID: id})
	}
}

// awaitingVerdict reports whether the recovery, past GoneAfterTicks,
// still waits for the gone verdict on an awaited peer: one suspected, not
// yet gone, whose verdict is ours (a tree neighbour: a leaf child frozen
// while we were down has nobody behind it to ask). Its verdict comes
// GoneAfterTicks after its suspicion, which began after our restart; until
// then it is a live broker with clients. Completed at our own
// GoneAfterTicks, we became routable without its subscriptions, took the
// publications held for it upstream and dropped them: lost to its
// subscriber when it resumed in between (scenario
// restart_waits_for_frozen_child_verdict.txt). Bounded: at 2×GoneAfterTicks
// the recovery completes as before.
func (n *Node) awaitingVerdict() bool {
	if n.rec.stateWaitT > 2*n.cfg.GoneAfterTicks {
		return false
	}
	for id := range n.rec.stateWait {
		if p := n.peers[id]; p != nil && p.suspected && !p.gone && n.ownsGoneVerdict(id) {
			return true
		}
	}
	return false
}

// unplaced reports whether id, an awaited peer our map does not hold, may
// still be a member that our map merely does not show, so that its silence
// is no sign that it left.
//
// Rule: id is unplaced when our map names it as a parent (Map.Dangling),
// or when a restarted tree neighbour y named it as its former neighbour
// (NotMember) and no broker whose map we merged in this recovery, and that
// was not heard not joined while we were not joined, is within δ hops of
// y. An unplaced peer is waited for like a suspected neighbour with nobody
// to ask behind it (until it answers, or gone_after); any other silent
// peer our map does not hold is dropped as a broker that left.
//
// Argument: a merged map is complete within δ+1 hops of its holder, so a
// holder within δ of y would show id, 2 hops from us, if id were a member:
// absent there, id left, and waiting for it would hold the recovery (and a
// restarted neighbour's join) until gone_after (restart_named_leaver_dropped.txt).
// Without such a map, more than δ brokers in a row restarted and rebuilt
// their maps from partial ones, and nothing says id left: dropped, we
// became routable without its side, a subscription flood ended here as at
// a leaf and was confirmed, and the publications from that side were lost
// with no gap notice (beyond_restart_named_peer_awaited.txt). A broker
// heard not joined while we were not joined restarted in the same incident
// and rebuilt its map from partial maps too, so its map proves nothing
// (beyond_restart_map_of_restarted_not_trusted.txt). And y counts as a
// tree neighbour when its NotMember names us among its former neighbours,
// even if our rebuilt map does not hold y (beyond_restart_notmember_names_us.txt).
// A joinpoint of this restart is named by us: the runtime lists our former
// neighbours among them, so it is unplaced unless a merged map is held
// within δ of us (whose map would show our neighbours). A joinpoint that
// answered from farther (our parent's handshake was slow) merged a map
// that ends before our children; a child whose handshake was slow too was
// dropped at a failure timeout, we became routable without its side and
// swallowed its subscribers' publications (restart_slow_child_awaited.txt).
// Scenario files are in internal/sim/testdata.
func (n *Node) unplaced(id message.BrokerID) bool {
	if n.topo.Dangling(id) {
		return true
	}
	y, ok := n.rec.namedBy[id]
	if !ok {
		if !slices.ContainsFunc(n.mem.jn.points, func(jp Peer) bool { return jp.ID == id }) {
			return false
		}
		// A joinpoint of this restart, named as a former neighbour of ours:
		// placed by any merged map held within δ of us.
		for s := range n.rec.mapFrom {
			if d := n.topo.Dist(s, n.cfg.ID); d >= 0 && d <= n.cfg.Delta {
				return false
			}
		}
		return true
	}
	for s := range n.rec.mapFrom {
		if n.rec.unjoinedSeen[s] {
			continue
		}
		if d := n.topo.Dist(s, y); d >= 0 && d <= n.cfg.Delta {
			return false
		}
	}
	return true
}

// askBehind sends a StateRequest to the closest usable brokers behind id
// (which cannot answer: failed, or not a member itself).
func (n *Node) askBehind(id message.BrokerID) int {
	dir := n.direction(id)
	if dir == "" {
		return 0
	}
	n.geometry()
	front, hole := n.topo.Frontier(dir, func(b message.BrokerID) bool { return b == id || n.unusable(b) })
	asked := 0
	for _, f := range front {
		if f != id && n.geo.dist[f] > n.geo.dist[id] {
			asked++
		}
	}
	if hole || asked == 0 {
		// Part of that side is unreachable (more than δ failed in a row),
		// or unknown to our map: re-learn its subscriptions (and map) once
		// it is reachable again.
		n.gaps.resyncDirs[dir] = true
	}
	for _, f := range front {
		if f == id || n.geo.dist[f] <= n.geo.dist[id] || n.rec.stateWait[f] || n.rec.stateless[f] {
			continue
		}
		n.rec.askedFor[f] = id
		n.askState(Peer{ID: f})
	}
	return asked
}

// dropLeft stops waiting for f, which left our map (a leaver: it holds
// no state to give). If it was asked on behalf of an awaited broker x (it
// was the closest live one behind x), x's side is asked again on the map
// as it is now: the leave's repair put other brokers behind x. (A broker
// restarting next to two crashed ones asked the next one behind them,
// which was leaving; its NotMember left that whole side unasked, the
// recovery completed without its subscriptions, and the publications for
// them were swallowed.)
func (n *Node) dropLeft(f message.BrokerID) {
	delete(n.rec.stateWait, f)
	x, ok := n.rec.askedFor[f]
	delete(n.rec.askedFor, f)
	if !ok || x == f || n.rec.stateless[x] || !n.topo.Has(x) {
		return
	}
	n.rec.stateWait[x] = true // checkRecovery asks behind it again
}

// reaskState sends the StateRequest again, once per failure timeout of the
// recovery, to every awaited peer that is linked and heard but has not
// answered. An awaited peer either answers, or falls silent and is
// suspected (then the brokers behind it are asked): one that stays alive
// without answering is waited for until GoneAfterTicks, and the recovery
// then completes without its side, which makes this broker routable
// without that side's subscriptions (it swallows the publications for
// them). Defence in depth: a runtime must not lose a request on a link its
// sender sees up (it holds what arrives before its core starts), but if one
// is lost it is asked again. A duplicate request is harmless: it is answered once more
// (pendingState is a set), and an answer that is no longer awaited is
// ignored.
//
// Paced per peer: the first re-ask a failure timeout after the recovery
// began, each next one after a backoff (retry.go), and none while a state
// answer of that peer is arriving in parts. A large state (thousands of
// subscriptions) on a loaded machine takes longer than a failure timeout to
// arrive; asked again at a fixed pace, every neighbour sent it again and
// again, and the recovering broker drowned in copies and never finished.
func (n *Node) reaskState() {
	for _, id := range sortedIDs(n.rec.stateWait) {
		p := n.peers[id]
		if p == nil || !p.up || !p.heardHB || p.suspected || n.assembling[id] != nil {
			continue
		}
		if n.rec.reaskAt == nil {
			n.rec.reaskAt = map[message.BrokerID]int64{}
			n.rec.reaskN = map[message.BrokerID]int{}
		}
		at, ok := n.rec.reaskAt[id]
		if !ok {
			n.rec.reaskAt[id] = n.now + int64(n.cfg.FailureTicks)
			continue
		}
		if n.now < at {
			continue
		}
		n.rec.reaskN[id]++
		n.rec.reaskAt[id] = n.now + int64(n.backoff(n.cfg.FailureTicks, n.rec.reaskN[id]))
		n.send(id, &message.StateRequest{Node: n.self})
	}
}

// askState awaits p's state in this recovery: a StateRequest now if its
// link is up, or once the dial brings the link up.
func (n *Node) askState(p Peer) {
	n.rec.stateWait[p.ID] = true
	if p.Addr != "" && !n.topo.Has(p.ID) {
		n.peer(p.ID).namedAddr = p.Addr // probed by this address if it fails (Tick)
	}
	if n.peer(p.ID).up {
		n.send(p.ID, &message.StateRequest{Node: n.self})
	} else {
		n.dial(p, false)
	}
}
