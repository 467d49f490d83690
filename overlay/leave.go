package overlay

import (
	"fmt"
	"sort"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
	"github.com/deltapub/deltapub/topology"
)

// ErrLeaving is the error a leaving broker gives its clients: their
// subscriptions end (UnsubAck{Err}) and publications are refused
// (PubAck{Err}); they must reconnect to another broker.
const ErrLeaving = "leaving: this broker is leaving the overlay; reconnect to another broker"

// leaveState is the progress of this broker's graceful leave (see Leave).
type leaveState struct {
	await     map[message.BrokerID]bool // peers whose LeaveRequest{Ack} is awaited
	repairing bool                      // the repair flood was started
	repaired  bool                      // ... and it completed
	ticks     int                       // ticks since the repair flood started
	detail    string                    // for the final NoticeLeft
}

// leaveRepairBound bounds, in failure timeouts, how long a leaver waits
// for the repair flood to be confirmed; at the bound it leaves anyway (a
// broker that did not apply the repair treats it as crashed, as before).
const leaveRepairBound = 4

// Leave starts a graceful leave of any broker: leaf, interior or root
// (docs/protocol.md §3). In order:
//
//  1. Local clients are told (UnsubAck{Err: ErrLeaving} per subscription;
//     publications are refused from now on) and the local subscriptions
//     are withdrawn.
//  2. Drain: every peer is sent LeaveRequest{Drain}; it stops routing
//     through this broker (as through a recovering one: the switch rule
//     retransmits what it still holds over the bypass) and answers Ack.
//     Once every peer answered (or is suspected), the local floods are
//     done and the queue is empty (everything forwarded here is safe
//     downstream, DACK), no publication can still need this broker.
//  3. Repair: a TopoChange{Leaver} flood, δ+2 hops, removes this broker,
//     attaches its children to its parent (or, for the root, to its
//     smallest child, the new root), gives the brokers whose
//     neighbourhood grew the entries they now need, and re-points the
//     from-pointers that named this broker (Via).
//  4. When the flood is confirmed and the queue still empty, the node is
//     left (NoticeLeft) and closes its links.
//
// A leave asked while the broker is joining or recovering (a member not
// routable yet) takes effect once it is joined: until then it holds
// nothing its neighbours need (they bypass it), but gone without a leave
// it would count as a crash toward δ, and its place would stay in the
// tree until gone_after.
func (n *Node) Leave() {
	if n.mem.member && !n.mem.joined && !n.mem.leaving {
		n.mem.leaveWhenJoined = true
		return
	}
	if !n.mem.joined || n.mem.leaving {
		return
	}
	n.mem.leaving = true
	n.mem.lv = &leaveState{await: map[message.BrokerID]bool{}}
	for _, c := range n.sortedClients() {
		cs := n.clients[c]
		subs := make([]message.SubID, 0, len(cs.subs))
		for s := range cs.subs {
			subs = append(subs, s)
		}
		sort.Slice(subs, func(i, j int) bool { return routing.SubLess(subs[i], subs[j]) })
		for _, s := range subs {
			n.toClient(c, &message.UnsubAck{Sub: s, Err: ErrLeaving})
		}
		n.dropClientSubs(c)
	}
	n.endAllAway() // resume.go: a resume floods, at another edge
	for _, id := range n.sortedPeers() {
		if p := n.peers[id]; p.up {
			n.leaveAnnounce(id)
		}
	}
}

// leaveAnnounce tells peer id that this broker is leaving and waits for
// its Ack (a heartbeat, which now says not joined, goes first).
func (n *Node) leaveAnnounce(id message.BrokerID) {
	n.send(id, n.heartbeat())
	n.send(id, &message.LeaveRequest{Node: n.self, Drain: true, Logs: n.leftLogs()})
	n.mem.lv.await[id] = true
}

// leaveLinkUp is LinkUp's hook while leaving: a peer linked now may not
// know yet that it must not route through this broker.
func (n *Node) leaveLinkUp(id message.BrokerID) {
	if n.mem.leaving && n.mem.lv != nil && !n.mem.lv.repairing {
		n.leaveAnnounce(id)
	}
}

// onLeaveDrain handles LeaveRequest{Drain}: from a leaving peer (stop
// routing through it, then Ack: by FIFO, everything sent to it before
// arrives before the Ack), or the Ack of a peer we announced our leave to.
func (n *Node) onLeaveDrain(from message.BrokerID, m *message.LeaveRequest) {
	if m.Node.ID != from {
		return
	}
	if m.Ack {
		if n.mem.lv != nil {
			delete(n.mem.lv.await, from)
		}
		return
	}
	p := n.peer(from)
	if m.Node.Epoch >= p.epoch {
		was := n.unusable(from)
		p.epoch, p.joined, p.heardHB, p.leaving = m.Node.Epoch, false, true, true
		if !was {
			n.notice(NoticeNotRoutable, from, "leaving")
			n.routesChanged()
		}
	}
	n.keepLeft(m.Logs)
	n.send(from, &message.LeaveRequest{Node: n.self, Drain: true, Ack: true})
}

// leaveTick is Tick's hook while leaving: it moves the leave on.
func (n *Node) leaveTick() {
	lv := n.mem.lv
	if lv == nil {
		// Leave was started by an older path (cannot happen today); finish
		// as a leaf would.
		lv = &leaveState{await: map[message.BrokerID]bool{}}
		n.mem.lv = lv
	}
	for id := range lv.await {
		if p := n.peers[id]; p == nil || p.suspected || !p.up {
			delete(lv.await, id) // down: it routes around us anyway
		}
	}
	if !lv.repairing {
		if len(lv.await) == 0 && n.fwd.queueLen == 0 && !n.localFloodsPending() && !n.neighbourLeavesFirst() {
			n.startRepair()
		}
		return
	}
	lv.ticks++
	if (lv.repaired && n.fwd.queueLen == 0) || lv.ticks > leaveRepairBound*n.cfg.FailureTicks+n.cfg.GoneAfterTicks {
		detail := lv.detail
		if !lv.repaired {
			detail = fmt.Sprintf("repair not confirmed after %d ticks: leaving anyway", lv.ticks)
		} else if n.fwd.queueLen > 0 {
			detail = fmt.Sprintf("%d publications still queued", n.fwd.queueLen)
		}
		n.finishLeave(detail)
	}
}

// neighbourLeavesFirst reports whether a tree neighbour with a smaller id
// is alive but not routable (leaving, or joining/recovering): two adjacent
// leavers computing their repairs on the same old edges would re-attach
// subtrees to each other, so the smaller id repairs first and the other
// one computes its repair on the map that repair gave it.
func (n *Node) neighbourLeavesFirst() bool {
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if p := n.peers[nb]; nb < n.cfg.ID && p != nil && p.up && !p.suspected && !p.gone && p.heardHB && !p.joined {
			return true
		}
	}
	return false
}

// startRepair floods the tree repair (step 3 of Leave).
func (n *Node) startRepair() {
	lv := n.mem.lv
	lv.repairing = true
	rep, err := n.topo.Detach(n.cfg.ID)
	if err != nil {
		// Our own map always holds our neighbours; if not, leave without
		// a repair (the neighbourhood treats us as crashed).
		lv.detail = "left without a repair: " + err.Error()
		lv.repaired = true
		return
	}
	extra := n.mapWithout(n.cfg.ID)
	// Our routes, grouped by from-pointer (few groups: the brokers δ+1
	// hops away and the edges closer than that).
	byFrom := map[message.BrokerID][]message.SubID{}
	for _, e := range n.table.Entries() { // sorted by SubID
		if !e.Local && e.From != n.cfg.ID {
			byFrom[e.From] = append(byFrom[e.From], e.Sub)
		}
	}
	via := n.routesVia(byFrom, nil)
	n.floods.topoSeq++
	key := floodKey{kind: fkTopo, origin: n.cfg.ID, seq: n.floods.topoSeq}
	n.rememberTopo(key)
	// δ+2 hops: a broker δ+2 hops away sees a re-attached neighbour of ours
	// at δ+1 hops, and its map must show that neighbour's new parent.
	budget := n.cfg.Delta + 2
	rm := []message.BrokerID{n.cfg.ID}
	logs := n.leftLogs()
	n.startFlood(&flood{key: key, budget: budget,
		msg: func(to message.BrokerID, dist int) message.Message {
			return &message.TopoChange{Origin: key.origin, Seq: key.seq, Hops: budget - dist,
				Remove: rm, Leaver: n.cfg.ID, Reparent: rep, Add: extra, Via: via, Logs: logs}
		},
		done: func() { lv.repaired = true }})
}

// finishLeave completes the leave: the node stops and closes its links.
func (n *Node) finishLeave(detail string) {
	n.mem.left = true
	n.mem.joined = false
	for _, id := range n.sortedPeers() {
		if p := n.peers[id]; p.up {
			p.up = false
			n.out.Closes = append(n.out.Closes, id)
		}
	}
	n.notice(NoticeLeft, "", detail)
}

// applyLeave applies a repair (TopoChange{Leaver}: a graceful leave, or a
// gone broker's removal, see goneRepair) at a broker of the neighbourhood:
// the map is repaired, routing entries whose route went through the
// removed broker get their from-pointer pushed out to δ+1 hops along the
// routes in m.Via (a pointer naming the removed broker that no route
// covers becomes the last broker before it), every entry's direction is
// recomputed on the new tree, and queued publications get their
// recipients recomputed. A gone broker is removed by each of its tree
// neighbours (each knows the routes on its own side): a neighbour that
// learns the removal from another one sends its own first.
func (n *Node) applyLeave(m *message.TopoChange) {
	x := m.Leaver
	if x == n.cfg.ID {
		return
	}
	if topology.Validate(m.Reparent) != nil || topology.Validate(m.Add) != nil {
		m = &message.TopoChange{Origin: m.Origin, Leaver: x}
	}
	if m.Origin != x && m.Origin != n.cfg.ID && n.isNeighbour(x) {
		n.goneRepair(x) // removes x here too
	}
	known := n.topo.Has(x)
	n.geometry()
	// Before the map changes: the last broker before x on our path, the
	// old next hop toward x.
	fallback := message.BrokerID("")
	if before := n.pathTo(x); len(before) >= 3 {
		fallback = before[len(before)-2]
	}
	oldHop, hadHop := n.fwd.hops[x]

	n.topo.ApplyDetach(x, m.Reparent, m.Add)
	if e, ok := n.topo.Get(n.cfg.ID); ok {
		n.self.Parent = e.Parent
	}
	if p := n.peers[x]; p != nil {
		// Not a member any more: never routed through, never waited for
		// by a flood (floodGaveUp), never probed. The link, if any, stays
		// until the leaver closes it (our TopoAck travels on it).
		p.gone, p.joined, p.heardHB, p.suspected = true, false, true, false
		p.goneEpoch = max(p.goneEpoch, p.epoch)
	}
	delete(n.fwd.hops, x)
	if known && m.Origin == x {
		n.notice(NoticeMemberLeft, x, "")
	} else if known {
		n.notice(NoticeMemberLeft, x, "gone: removed from the tree by "+string(m.Origin))
	}

	// The removed broker's own subscriptions are dead (a leaver withdrew
	// them when it started to leave; a gone broker's clients are gone). A
	// broker that was falsely suspected meanwhile missed that withdrawal:
	// it drops them here, or it would keep routing and queueing toward the
	// removed broker for good (scenario
	// freeze_misses_leaver_withdrawal.txt). Brokers that
	// do not apply the repair were reached by the withdrawal itself.
	var dead []message.SubID
	for _, e := range n.table.Entries() {
		if e.Sub.Edge == x && !e.Local {
			dead = append(dead, e.Sub)
			delete(n.floods.viaState, e.Sub)
			n.tombstone(e.Sub)
		}
	}
	_ = n.table.Replace(dead, nil) // deleting cannot fail

	// Routing entries: every route through the removed broker gets its
	// from-pointer pushed out to δ+1 hops again (distances through it
	// shrank by one; a pointer left at δ hops would let δ crashes hide
	// every broker between us and it). A route p of m.Via starts at a
	// neighbour of x; it is ours if our tree path to one of its brokers
	// passes through p[0] (then it continues along p), and the farthest
	// such broker within δ+1 hops is our pointer. A broker on p, or on the
	// far side of p[0], or whose route goes elsewhere, keeps its own.
	// (Routes may name brokers another repair already removed: only the
	// ones we know are used.)
	//
	// A route that starts at a child of x the repair re-attached under R
	// (x's parent, or for a leaving root its smallest child) is entered
	// through R by every broker not behind its first broker: x's place on
	// the path is taken by R, so the distance does not shrink and R, not
	// only a broker of p, may be the one at δ+1 hops. Such a route is taken
	// as R followed by p. (On p alone, a broker that knew no broker of p
	// within δ+1 fell back to the last broker before x, δ hops away, and
	// one crash there hid the subscription's side: scenarios
	// leave_root_repoint_through_new_root.txt,
	// leave_interior_repoint_through_parent.txt.)
	routes := map[message.SubID][]message.BrokerID{}
	for _, g := range m.Via {
		for _, s := range g.Subs {
			routes[s] = g.Path
		}
	}
	adopter := map[message.BrokerID]message.BrokerID{}
	for _, r := range m.Reparent {
		if r.Parent != "" {
			adopter[r.ID] = r.Parent
		}
	}
	n.geometry()
	var repointed []routing.Entry
	for _, e := range n.table.Entries() {
		if e.Local {
			continue
		}
		from := e.From
		p, ok := routes[e.Sub]
		if ok && len(p) > 0 {
			if r, ok := adopter[p[0]]; ok && r != n.cfg.ID && !onPath(p, r) {
				if _, known := n.geo.dist[r]; known && !onPath(n.pathTo(r), p[0]) {
					p = append([]message.BrokerID{r}, p...)
				}
			}
		}
		if ok && len(p) > 0 && !onPath(p, n.cfg.ID) {
			// j: the farthest broker of p we know whose path from us
			// enters p at p[0] (then our route continues along p up to it).
			j := -1
			for i := len(p) - 1; i >= 1 && j < 0; i-- {
				if _, ok := n.geo.dist[p[i]]; ok && onPath(n.pathTo(p[i]), p[0]) {
					j = i
				}
			}
			if _, ok := n.geo.dist[p[0]]; j < 0 && ok {
				// Only p[0] known: it is on our route if we do not reach
				// it from p[1]'s side and our route went that way (or
				// through the removed broker).
				behind := len(p) > 1 && onPath(n.pathTo(p[0]), p[1])
				sameWay := e.Dir == x || e.Dir == n.direction(p[0]) || !n.topo.Has(e.Dir)
				if !behind && sameWay {
					j = 0
				}
			}
			for i := j; i >= 0; i-- {
				if d, ok := n.geo.dist[p[i]]; ok && d <= n.cfg.Delta+1 {
					from = p[i]
					break
				}
			}
		}
		if from == x && fallback != "" && n.topo.Has(fallback) {
			from = fallback // a route nobody told us: the last broker before x
		}
		dir := n.direction(from)
		if from == e.From && dir == e.Dir {
			continue
		}
		if dir == "" {
			continue // nothing better known: left as it is
		}
		repointed = append(repointed, routing.Entry{Sub: e.Sub, Filter: e.Filter, From: from, Dir: dir, Client: e.Client})
	}
	// One batch: re-pointing entry by entry is quadratic when filters
	// cover each other (routing.Table.Replace).
	if err := n.table.Replace(nil, repointed); err != nil {
		n.notice(NoticeGap, x, "re-pointing routes after a leave: "+err.Error())
	}

	// Pending floods that came from the removed broker's direction now
	// come from the direction of their origin on the new tree (a
	// subscription's entry direction, recomputed above; a topology
	// change's origin). Left at x, which no longer is a direction, the
	// reroute below would send them back toward their origin: a broker
	// there would take the subscription as coming from our side, with the
	// wrong direction, and never route toward it (fuzz with leaves, seed
	// 30981: a subscription flooded past a cut link while its path's
	// broker left).
	for _, k := range n.floodKeys() {
		f := n.floods.pending[k]
		if f.except != x {
			continue
		}
		var d message.BrokerID
		switch k.kind {
		case fkTopo:
			d = n.direction(k.origin)
		default:
			if e, ok := n.table.Get(k.sub); ok && !e.Local {
				d = e.Dir
			} else {
				d = n.direction(k.sub.Edge)
			}
		}
		f.except = d
	}

	// Queued publications: recipients recomputed on the re-pointed table
	// (a recipient kept keeps its safe flag). A publication that came
	// from the removed broker's direction now comes from the direction of
	// the broker before it, on the new tree: the nearest upstream stamper
	// we know (its stamps name the brokers it passed). It is not routed
	// back that way: a broker there that lacks it is some upstream
	// broker's recipient, which holds it queued and sends it in stamp order
	// (the switch rule). Routed back, it could overtake older publications
	// of its source still queued for that broker, which would then drop
	// them as duplicates: lost (scenario
	// leave_queued_keeps_off_source_side.txt: a broker cut off from the
	// publisher's edge while the bypass past it, through the leaver,
	// carried newer ones). With no stamper known it is routed
	// everywhere: copies the brokers there drop as duplicates.
	var newRecips []message.BrokerID
	for _, e := range n.fwd.queue {
		if e.purged {
			continue
		}
		if e.except == x {
			e.except = ""
			for _, st := range e.pub.Stamps[1:] {
				if d := n.direction(st.B); st.B != x && d != "" {
					e.except = d
					break
				}
			}
		}
		pm := matching.Publication{Attrs: e.pub.Attrs}
		now := n.table.Recipients(&pm, e.except, nil, nil)
		safe := make([]bool, len(now))
		for i, r := range now {
			found := false
			for j, o := range e.recips {
				if o == r {
					safe[i], found = e.safe[j], true
					break
				}
			}
			if !found {
				newRecips = append(newRecips, r)
			}
		}
		e.recips, e.safe = now, safe
	}
	n.routesChanged()
	// A new recipient whose next hop is not the one the leaver had: send
	// it everything queued for it, in stamp order (the switch rule).
	gained := map[message.BrokerID]bool{}
	for _, r := range newRecips {
		h := n.hop(r)
		if h.ok && (!hadHop || !oldHop.ok || h.to != oldHop.to) {
			gained[h.to] = true
		}
	}
	tos := make([]message.BrokerID, 0, len(gained))
	for t := range gained {
		tos = append(tos, t)
	}
	sortIDs(tos)
	for _, t := range tos {
		if p := n.peers[t]; p != nil && p.up {
			n.retransmitTo(t)
		}
	}
	n.fwd.purgeDirty = true
}

// repairOut reports whether this broker is leaving and its repair has
// been sent: the others drop it from their maps, its own still shows the
// old tree, so it neither passes floods on nor hands out its state.
func (n *Node) repairOut() bool { return n.mem.lv != nil && n.mem.lv.repairing }

// Leaving reports whether Leave was called (cheap; the leave is complete
// when Joined is false as well).
func (n *Node) Leaving() bool { return n.mem.leaving }

func onPath(path []message.BrokerID, b message.BrokerID) bool {
	for _, x := range path {
		if x == b {
			return true
		}
	}
	return false
}

// isNeighbour reports whether b is a tree neighbour of this broker.
func (n *Node) isNeighbour(b message.BrokerID) bool {
	return onPath(n.topo.Neighbours(n.cfg.ID), b)
}

// goneRepair removes a tree neighbour declared gone (PROTOCOL §6) from the
// tree the way a leave does (docs/protocol.md §3): it stops counting
// toward the δ crashed-in-a-row budget, and its subtrees are re-attached.
// Every tree neighbour of the gone broker sends this repair (it is
// computed the same way from any of their maps) with the routes on its
// own side (Via: itself, then its path to its from-pointer) and its map
// (Add), δ+3 hops (δ+2 from the gone broker). Only an isolated gone
// broker is removed (every other neighbour of it usable): beyond that the
// sides may not hear of each other's repair. If the gone broker comes
// back it is a stranger: a restart rejoins as a new member.
func (n *Node) goneRepair(g message.BrokerID) {
	if !n.mem.joined || n.mem.leaving || !n.isNeighbour(g) {
		return
	}
	for _, nb := range n.topo.Neighbours(g) {
		if nb != n.cfg.ID && n.unusable(nb) {
			// Adjacent failures: the other sides may be cut off from us
			// and would repair differently (or not at all); the gone
			// broker stays a bypassed vertex, as before.
			return
		}
	}
	rep, err := n.topo.Detach(g)
	if err != nil {
		return
	}
	extra := n.mapWithout(g)
	byFrom := map[message.BrokerID][]message.SubID{}
	for _, e := range n.table.Entries() {
		if e.Dir == g {
			continue // behind the gone broker: not our side
		}
		f := e.From
		if e.Local {
			f = n.cfg.ID
		}
		byFrom[f] = append(byFrom[f], e.Sub)
	}
	via := n.routesVia(byFrom, []message.BrokerID{n.cfg.ID})
	n.floods.topoSeq++
	key := floodKey{kind: fkTopo, origin: n.cfg.ID, seq: n.floods.topoSeq}
	n.rememberTopo(key)
	budget := n.cfg.Delta + 3
	rm := []message.BrokerID{g}
	msg := &message.TopoChange{Origin: n.cfg.ID, Seq: key.seq, Remove: rm, Leaver: g, Reparent: rep, Add: extra, Via: via}
	n.applyLeave(msg)
	n.routesChanged()
	n.startFlood(&flood{key: key, budget: budget,
		msg: func(to message.BrokerID, dist int) message.Message {
			c := *msg
			c.Hops = budget - dist
			return &c
		}})
}

// mapWithout is this broker's map without broker x (a repair's Add).
func (n *Node) mapWithout(x message.BrokerID) []message.MapNode {
	var out []message.MapNode
	for _, e := range n.topo.Nodes() {
		if e.ID != x {
			out = append(out, e)
		}
	}
	return out
}

// routesVia turns subscriptions grouped by from-pointer into a repair's
// routes, by from-pointer in order: prefix, then our tree path toward it
// (ourselves excluded). A route with no broker at all is left out.
func (n *Node) routesVia(byFrom map[message.BrokerID][]message.SubID, prefix []message.BrokerID) []message.SubsVia {
	froms := make([]message.BrokerID, 0, len(byFrom))
	for id := range byFrom {
		froms = append(froms, id)
	}
	sortIDs(froms)
	via := make([]message.SubsVia, 0, len(froms))
	for _, f := range froms {
		path := append([]message.BrokerID(nil), prefix...)
		if p := n.pathTo(f); len(p) >= 2 {
			path = append(path, p[1:]...)
		}
		if len(path) > 0 {
			via = append(via, message.SubsVia{Path: path, Subs: byFrom[f]})
		}
	}
	return via
}
