// Membership: a join at the joinpoint and at the joiner (JoinRequest,
// JoinReply), the topology floods that change the tree (onTopoChange), and
// a member taken out of it (a leave, a broker declared gone).

package overlay

import (
	"fmt"
	"slices"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/topology"
)

func (n *Node) onJoinRequest(from message.BrokerID, m *message.JoinRequest) {
	j := m.Node
	if j.ID != from {
		n.send(from, &message.JoinReply{Err: fmt.Sprintf("join request for %q arrived from %q", j.ID, from)})
		return
	}
	if !n.mem.joined || n.mem.leaving {
		n.send(from, &message.JoinReply{Err: "joinpoint " + string(n.cfg.ID) + " is not a joined member"})
		return
	}
	p := n.peer(from)
	known, ok := n.topo.Get(j.ID)
	if ep, adm := n.mem.admitting[j.ID]; ok && !(adm && ep == j.Epoch) {
		// A known member (restarted under a new epoch, or retrying a
		// rejoin): it rejoins at its old place and recovers (StateRequest
		// to its neighbours); until it says it is joined it is bypassed.
		if j.Epoch < known.Epoch {
			n.send(from, &message.JoinReply{Err: fmt.Sprintf("epoch %d of %s is older than the known %d", j.Epoch, j.ID, known.Epoch)})
			return
		}
		if j.Epoch > known.Epoch {
			n.peerRestarted(j.ID, j.Epoch)
		}
		known.Epoch, known.Addr = j.Epoch, j.Addr
		n.topo.Put(known)
		p.epoch, p.joined, p.heardHB = j.Epoch, false, true
		n.routesChanged()
		n.send(from, &message.JoinReply{Rejoin: true, Parent: known.Parent, Map: n.topo.Within(j.ID, n.cfg.Delta+1), Subs: n.subsFor(j.ID)})
		return
	}
	if !ok && !n.topo.Removed(j.ID) && n.topo.Dangling(j.ID) {
		// Not in our map, but an entry names it as its parent (our own
		// entry, typically: our map was rebuilt from partial ones after we
		// restarted, more than δ of us in a row): it has a place in the
		// tree that we cannot give it. Admitted as our new child it would
		// close a cycle (it under us, and we, or a broker beyond us, under
		// it: scenario beyond_restart_parent_not_child.txt), the two sides
		// disagreeing on its place for good. Refused, it tries its other
		// joinpoints (its former neighbours), one of which holds its place.
		n.send(from, &message.JoinReply{Err: "joinpoint " + string(n.cfg.ID) + " does not hold the place of " + string(j.ID) + " (named as a parent only)"})
		return
	}
	retry := ok
	n.mem.admitting[j.ID] = j.Epoch
	j.Parent = n.cfg.ID
	n.topo.Put(j)
	// A broker removed from the tree as gone (or a leaver) that restarts
	// and joins here anew is a member again: left marked gone (the removal
	// cleared its suspicion, so no unsuspect clears it), it stayed
	// unusable for good, and publications for its side stayed queued here
	// (scenario gone_rejoin_anew.txt).
	p.gone = false
	p.epoch, p.joined, p.heardHB = j.Epoch, false, true
	n.routesChanged()
	n.send(from, &message.JoinReply{Parent: n.cfg.ID, Map: n.topo.Within(j.ID, n.cfg.Delta+1), Subs: n.subsFor(j.ID)})
	if retry {
		for _, f := range n.floods.pending {
			if f.key.kind == fkTopo && f.key.origin == n.cfg.ID {
				return // the propagation is still running: it confirms
			}
		}
		n.send(from, &message.JoinConfirm{Origin: n.cfg.ID})
		return
	}
	n.floods.topoSeq++
	key := floodKey{kind: fkTopo, origin: n.cfg.ID, seq: n.floods.topoSeq}
	n.rememberTopo(key)
	add := []message.MapNode{j}
	n.startFlood(&flood{key: key, except: j.ID, budget: n.cfg.Delta,
		msg: func(to message.BrokerID, dist int) message.Message {
			return &message.TopoChange{Origin: key.origin, Seq: key.seq, Hops: n.cfg.Delta - dist, Add: add}
		},
		done: func() {
			delete(n.mem.admitting, j.ID)
			n.send(j.ID, &message.JoinConfirm{Origin: n.cfg.ID})
		}})
}

func (n *Node) onJoinReply(from message.BrokerID, m *message.JoinReply) {
	if n.mem.member || len(n.mem.jn.points) == 0 {
		return
	}
	if m.Err != "" || topology.Validate(m.Map) != nil {
		// A refusal (or a map we cannot use) moves on to the next
		// joinpoint, paced by tryJoinpoint. A late answer of a joinpoint
		// we already gave up on does not move us on twice.
		if n.mem.jn.isCurrent(from) {
			why := m.Err
			if why == "" {
				why = topology.Validate(m.Map).Error()
			}
			n.notice(NoticeJoinFailed, from, why)
			n.nextJoinpoint()
		}
		return
	}
	n.self.Parent = m.Parent
	n.topo.Put(n.self)
	n.topo.Merge(m.Map)
	n.mem.member = true
	n.mem.rejoin = m.Rejoin
	for _, e := range m.Map {
		if p, ok := n.peers[e.ID]; ok && e.Epoch > p.epoch {
			p.epoch = e.Epoch
		}
	}
	n.installSubs(from, m.Subs)
	if n.mem.rejoin {
		n.rec.stateWait = map[message.BrokerID]bool{}
		n.rec.reaskAt, n.rec.reaskN = nil, nil
		clear(n.rec.stateless)
		clear(n.rec.namedBy)
		clear(n.rec.mapFrom)
		clear(n.rec.strangers)
		n.rec.mapFrom[from] = true
		// Ask every tree neighbour, and every joinpoint too: the runtime
		// gives a restarted broker its former neighbours, and the
		// joinpoint's map may not show all of them (it may be recovering
		// from the same failure with a partial map of its own).
		ask := append([]message.BrokerID(nil), n.topo.Neighbours(n.cfg.ID)...)
		for _, jp := range n.mem.jn.points {
			ask = append(ask, jp.ID)
		}
		for _, nb := range ask {
			if nb != from && nb != n.cfg.ID && !n.rec.stateWait[nb] {
				n.askState(Peer{ID: nb})
			}
		}
		n.checkRecovery()
	}
	n.routesChanged()
}

func (n *Node) rememberTopo(k floodKey) {
	n.floods.topoSeen[k] = true
	n.floods.topoOrder = append(n.floods.topoOrder, k)
	if len(n.floods.topoOrder) > maxTopoSeen {
		delete(n.floods.topoSeen, n.floods.topoOrder[0])
		n.floods.topoOrder = n.floods.topoOrder[1:]
	}
}

func (n *Node) onTopoChange(from message.BrokerID, m *message.TopoChange) {
	k := floodKey{kind: fkTopo, origin: m.Origin, seq: m.Seq}
	if !n.mem.member {
		n.sendFloodAck(k, from, 0) // the map transfer that follows includes it
		return
	}
	if f, ok := n.floods.pending[k]; ok {
		if m.Leaver != "" {
			// A leave's repair reaches us on the old and on the new edges
			// (a cycle while it spreads): answer at once, it is applied.
			n.sendFloodAck(k, from, 0)
			return
		}
		f.waiters = append(f.waiters, from)
		return
	}
	if n.floods.topoSeen[k] {
		n.sendFloodAck(k, from, 0)
		return
	}
	n.rememberTopo(k)
	dir := n.direction(from)
	if dir == "" {
		dir = from
	}
	var before []message.BrokerID
	recovering := m.Leaver != "" && n.rec.stateWait != nil && !n.mem.joined
	if recovering {
		before = append(before, n.topo.Neighbours(n.cfg.ID)...)
	}
	if m.Leaver != "" {
		n.keepLeft(m.Logs) // its durable log's range (dursub.go)
		n.applyLeave(m)    // a graceful leave with its tree repair (leave.go)
	} else if err := topology.Validate(m.Add); err == nil {
		for _, a := range m.Add {
			if a.ID == n.cfg.ID {
				continue
			}
			if old, ok := n.topo.Get(a.ID); ok && old.Epoch > a.Epoch {
				continue
			}
			removed := n.topo.Removed(a.ID)
			n.topo.Put(a)
			if p := n.peers[a.ID]; p != nil && removed && !n.topo.Removed(a.ID) {
				// Removed before (a leaver, a gone broker), joined anew
				// under a larger epoch: a member again, not gone (see
				// onJoinRequest); its next heartbeat says whether it is
				// routable.
				p.gone, p.joined, p.heardHB = false, false, false
			}
		}
	}
	if m.Leaver == "" {
		for _, r := range m.Remove {
			n.removeMember(r)
		}
	}
	n.topo.Prune()
	n.routesChanged()
	if recovering {
		n.askNewNeighbours(before)
	}
	hops := m.Hops
	if hops < 0 {
		hops = 0
	}
	n.startFlood(&flood{key: k, except: dir, budget: hops, waiters: []message.BrokerID{from},
		msg: func(to message.BrokerID, dist int) message.Message {
			return &message.TopoChange{Origin: m.Origin, Seq: m.Seq, Hops: hops - dist, Add: m.Add, Remove: m.Remove,
				Leaver: m.Leaver, Reparent: m.Reparent, Via: m.Via, Logs: m.Logs}
		}})
}

// askNewNeighbours asks, while we recover, the tree neighbours a repair
// gave us (not in before) for their state: they stood behind the removed
// broker, and the subscriptions of their side reach us through them now.
// An awaited neighbour that was removed (a leaver, or declared gone) has
// no state to give; without this the recovery completed with neither its
// nor its replacements' side (scenario
// beyond_restart_repair_neighbour_asked.txt: restarted under its crashed
// parent with a map that did not show that parent's parent, a broker
// waited for the parent until it was removed as gone, and became routable
// without its new parent's side: publications for it were lost silently).
func (n *Node) askNewNeighbours(before []message.BrokerID) {
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if slices.Contains(before, nb) || n.rec.stateWait[nb] || n.rec.stateless[nb] || n.rec.mapFrom[nb] {
			continue
		}
		n.askState(Peer{ID: nb})
	}
}

func (n *Node) removeMember(id message.BrokerID) {
	if id == n.cfg.ID {
		return
	}
	n.topo.Remove(id)
	if p, ok := n.peers[id]; ok {
		if p.up {
			n.out.Closes = append(n.out.Closes, id)
		}
		delete(n.peers, id)
		n.peerIDs = nil
	}
	delete(n.fwd.hops, id)
	n.releaseRecipients()
}

// onLeave handles a neighbour's graceful leave (a leaf: its subscriptions
// are already withdrawn and its queue drained).
func (n *Node) onLeave(from message.BrokerID, m *message.LeaveRequest) {
	if m.Drain {
		n.onLeaveDrain(from, m) // any broker's graceful leave (leave.go)
		return
	}
	if m.Node.ID != from || !n.topo.Has(from) {
		return
	}
	n.notice(NoticeMemberLeft, from, "")
	n.removeMember(from)
	n.routesChanged()
	n.floods.topoSeq++
	key := floodKey{kind: fkTopo, origin: n.cfg.ID, seq: n.floods.topoSeq}
	n.rememberTopo(key)
	rm := []message.BrokerID{from}
	n.startFlood(&flood{key: key, budget: n.cfg.Delta,
		msg: func(to message.BrokerID, dist int) message.Message {
			return &message.TopoChange{Origin: key.origin, Seq: key.seq, Hops: n.cfg.Delta - dist, Remove: rm}
		}})
}

// ownsGoneVerdict applies the rule "the gone verdict is the last live hop's"
// (docs/protocol.md §6): a broker declares g gone only if it is g's tree
// neighbour, or if g's tree neighbour on the path from here to g is
// unusable to it. Otherwise that neighbour's verdict withdraws g's
// subscriptions on our side (its withdrawals flood away from g), and ours
// would be a second verdict from a broker that merely stopped hearing g:
// a bypass target it no longer dials, a suspicion it took from a report
// one heartbeat before the report was withdrawn (scenario
// gone_verdict_waits_for_last_hop.txt).
func (n *Node) ownsGoneVerdict(g message.BrokerID) bool {
	path := n.topo.Path(n.cfg.ID, g)
	if len(path) <= 2 {
		return true // a tree neighbour, or g is not in our map any more
	}
	return n.unusable(path[len(path)-2])
}

// declareGone handles a broker suspected for GoneAfterTicks (PROTOCOL
// §6): its subscriptions are withdrawn on its behalf overlay-wide, and
// what was queued only for them is released. It stays in the map (it is
// still a vertex of the tree, bypassed); if it returns it recovers like any
// restarted broker, as a new incarnation. Only the subscriptions of the
// incarnations known when the suspicion began are withdrawn: a newer one
// has been heard of by others since (it subscribed after it restarted),
// and this broker's silence about it says nothing (docs/protocol.md §6).
func (n *Node) declareGone(p *peer) {
	p.gone = true
	p.goneEpoch = max(p.goneEpoch, p.suspEpoch, p.epoch)
	p.goneProbes, p.goneWait, p.goneAddr = maxGoneProbes, n.cfg.FailureTicks, n.addrOf(p.id)
	n.notice(NoticeGone, p.id, fmt.Sprintf("suspected for %d ticks", p.suspTicks))
	var subs []message.SubID
	for _, e := range n.table.Entries() {
		if e.Sub.Edge == p.id && e.Sub.Epoch <= p.suspEpoch {
			subs = append(subs, e.Sub)
		}
	}
	except := n.direction(p.id)
	for _, s := range subs {
		n.withdrawFlood(s, except, "", nil)
	}
	n.releaseRecipients()
	n.goneRepair(p.id) // a tree neighbour removes it from the tree (leave.go)
}
