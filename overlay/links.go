package overlay

import (
	"slices"

	"github.com/deltapub/deltapub/message"
)

// Links nobody needs any more are closed by the broker that dialled them.
//
// Links come and go for reasons that end: a probe of a suspected broker
// (every broker whose map holds it dials it now and then), a bypass around
// a crashed neighbour, a flood to the live broker behind an unusable one,
// a recovery's state request. When the reason ends the link stays up, and
// every up link carries a heartbeat each heartbeat period in both
// directions. A broker that restarts after a crash is dialled by the probe
// of every broker whose map held it; without this rule it kept all those
// links, and its heartbeat traffic rose for good to tens of times its
// steady state (scenario restart_probes_closed_when_unneeded.txt).
//
// *Rule: a joined broker closes a link it dialled once the link has served
// nothing for a while* (docs/protocol.md §7): the peer is not a tree
// neighbour and not a next hop, no flood or state transfer involves it, and
// both sides are joined and staying (linkUsed, linkSettling). Only the
// dialler closes: the other side, if it still needs the link, dials it
// again and is then the dialler of a link it needs, so the two sides cannot
// take turns closing and reopening it. A link that served keeps ten failure
// timeouts, through a route that flaps; a link that never served (a probe
// that found its broker back) keeps one, long enough for both sides to hear
// a heartbeat on it and lift their suspicions.

// idleLinkTicks is how long a dialled link must be unneeded before it is
// closed.
func (n *Node) idleLinkTicks(p *peer) int {
	if p.served {
		return 10 * n.cfg.FailureTicks
	}
	return n.cfg.FailureTicks
}

// closeIdleLink counts p's unneeded ticks and closes its link at the bound
// (called once per tick for a peer whose link is up).
func (n *Node) closeIdleLink(p *peer) {
	used := n.linkUsed(p)
	p.served = p.served || used
	if !p.dialled || used || n.linkSettling(p) {
		p.unneeded = 0
		return
	}
	p.unneeded++
	if p.unneeded < n.idleLinkTicks(p) {
		return
	}
	p.up, p.dialled, p.served, p.unneeded = false, false, false, 0
	p.dialWait = n.cfg.HeartbeatTicks
	n.dropAssembly(p.id)
	n.out.Closes = append(n.out.Closes, p.id)
}

// linkSettling reports whether either side is between states, when no
// link is judged: this broker is not a joined member or is leaving, or
// the peer has not said on this link that it is joined and staying.
func (n *Node) linkSettling(p *peer) bool {
	return !n.mem.joined || n.mem.leaving || n.mem.left || p.suspected || !p.heardHB || !p.joined || p.leaving
}

// linkUsed reports whether the link to p serves anything now: p is a tree
// neighbour or a next hop, a flood awaits its answer or waits to answer
// it, it is joining or recovering through this broker, or a message in
// parts is arriving from it.
func (n *Node) linkUsed(p *peer) bool {
	id := p.id
	if n.wanted(id) || n.mem.pendingState[id] {
		return true
	}
	if _, ok := n.mem.admitting[id]; ok {
		return true
	}
	if _, ok := n.assembling[id]; ok {
		return true
	}
	return n.floodInvolves(id)
}

// floodInvolves reports whether a pending flood awaits id's answer or
// waits to answer id. Such a peer's link is dialled again when it goes
// down unsuspected (closed by the other end as unneeded while a flood to
// it was in flight): the flood is sent again on the new link
// (floodsResend), and an answer lost with the old one is given again.
func (n *Node) floodInvolves(id message.BrokerID) bool {
	for _, f := range n.floods.pending {
		if f.isOut(id) || slices.Contains(f.waiters, id) {
			return true
		}
	}
	return false
}
