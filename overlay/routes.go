// Next hops: the hop toward each recipient (its tree neighbour, or a bypass
// around unusable brokers up to the frontier), recomputed whenever the map or
// a broker's usability changes, with the retransmission a new next hop gets
// (reroute).

package overlay

import "github.com/deltapub/deltapub/message"

// hopInfo is the current next hop toward one recipient.
type hopInfo struct {
	to      message.BrokerID
	skipped int
	ok      bool
}

// geoCache caches, for the map version ver, the tree distance of every
// broker in the map from this one and the tree neighbour toward it
// (topology.Map Distances and Direction). It stays true because every
// change to the map bumps its Version and every reader calls geometry()
// first (itself or its caller), which recomputes both when the version
// moved.
type geoCache struct {
	ver  uint64
	side map[message.BrokerID]message.BrokerID
	dist map[message.BrokerID]int
}

// geometry caches, per map version, each known broker's distance and
// direction (the tree neighbour toward it).
func (n *Node) geometry() {
	if n.geo.ver == n.topo.Version() {
		return
	}
	n.geo.ver = n.topo.Version()
	n.geo.dist = n.topo.Distances(n.cfg.ID)
	n.geo.side = map[message.BrokerID]message.BrokerID{}
	for id := range n.geo.dist {
		if id != n.cfg.ID {
			n.geo.side[id] = n.topo.Direction(id)
		}
	}
}

// pathTo returns the tree path from this broker to r (both included;
// cached by the map, not to be modified).
func (n *Node) pathTo(r message.BrokerID) []message.BrokerID { return n.topo.Path(n.cfg.ID, r) }

// direction returns the tree neighbour toward b ("" when unknown/self).
func (n *Node) direction(b message.BrokerID) message.BrokerID {
	n.geometry()
	return n.geo.side[b]
}

// routesChanged is called whenever usability or the map changed: next hops
// are recomputed, and every broker that became the next hop toward some
// recipient gets, before anything new, every queued publication routed to
// it, in stamp order (the switch rule that keeps per-source "highest
// sequence seen" a sound duplicate filter; docs/protocol.md).
func (n *Node) routesChanged() { n.reroute("") }

// reroute is routesChanged; it reports whether it retransmitted to peer
// linked (a next hop it gained).
func (n *Node) reroute(linked message.BrokerID) (retransmitted bool) {
	n.geometry()
	gained := map[message.BrokerID]bool{}
	ids := sortedIDs(n.fwd.hops)
	for _, r := range ids {
		old := n.fwd.hops[r]
		h := n.computeHop(r)
		n.fwd.hops[r] = h
		if h.ok && (!old.ok || old.to != h.to) {
			gained[h.to] = true
			if h.skipped > 0 {
				n.notice(NoticeBypassUp, h.to, "next hop toward "+string(r))
			}
		}
		if old.ok && old.skipped > 0 && (!h.ok || h.to != old.to) {
			n.notice(NoticeBypassDown, old.to, "no longer next hop toward "+string(r))
		}
	}
	tos := make([]message.BrokerID, 0, len(gained))
	for t := range gained {
		tos = append(tos, t)
	}
	sortIDs(tos)
	for _, t := range tos {
		if p := n.peer(t); p.up {
			n.retransmitTo(t)
			retransmitted = retransmitted || t == linked
		} else {
			n.dial(Peer{ID: t}, false)
		}
	}
	for _, r := range ids {
		if h := n.fwd.hops[r]; h.ok && h.skipped > 0 {
			n.prefetchDials(r, h)
		}
	}
	n.probeFrontiers()
	n.floodsReroute()
	n.checkHoles()
	return retransmitted
}

// probeFrontiers dials, behind every unusable tree neighbour, the closest
// brokers not yet known to be unusable (up to δ+1 hops), whether or not a
// route needs them yet: a dead one is then found by its failed dial, so a
// bypass past k failed brokers costs one dial timeout instead of k, and a
// hole longer than δ is detected (checkHoles) even where no route goes.
//
// Not behind a leaver that drains (linked, heard, not suspected): it is
// alive and still forwards what it holds, nothing says a broker behind it
// failed, the bypass hops the routes need are dialled anyway
// (routesChanged), and its frontier is every broker behind it: when
// the centre of a star leaves, each child dialled every other one, n(n−1)
// handshakes at once. On real processes (19 brokers on a 2-core machine)
// those dials outlasted the dial timeout, each failed dial
// made a live broker suspected, the bypass and then the repaired tree's
// links could not come up, and a subscriber's edge got nothing for 2 s
// (its publications were lost when it crashed later). The simulator's
// dials cost nothing and take one round trip, whatever their number, so
// the rule is checked by counting dials (TestLeaveStarRootDialsOnlyWhatRoutesNeed).
func (n *Node) probeFrontiers() {
	if !n.mem.member || n.mem.left {
		return
	}
	for _, f := range n.frontier() {
		if p := n.peer(f); !p.up && !p.dialing && !p.suspected {
			n.dial(Peer{ID: f}, false)
		}
	}
}

// frontier lists, behind every unusable tree neighbour but a draining
// leaver, the closest brokers not known to be unusable (probeFrontiers).
func (n *Node) frontier() []message.BrokerID {
	var out []message.BrokerID
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if !n.unusable(nb) || n.leavingAlive(nb) {
			continue
		}
		front, _ := n.topo.Frontier(nb, n.unusable)
		out = append(out, front...)
	}
	return out
}

// computeHop returns the next hop toward r: the closest broker on the
// path not known unusable (topology.ClosestLive). When that is a bypass
// hop whose link is not up yet (its dial is pending: after δ adjacent
// crashes it is often dead too, and a failed dial takes a dial timeout),
// and a broker further along the path is already linked and known joined
// (probeFrontiers and prefetchDials dialled it at the same time), that one
// is used at once instead of waiting for the dial's outcome. Skipping a
// broker that turns out alive is harmless: it is a bypass like any other,
// and the route switches back to it, with retransmission (switch rule),
// as soon as its link is up. A tree neighbour whose link is merely down
// (skipped = 0) is never skipped this way.
func (n *Node) computeHop(r message.BrokerID) hopInfo {
	to, skipped, ok := n.topo.ClosestLive(r, n.unusable)
	if !ok || skipped == 0 || n.peer(to).up {
		return hopInfo{to: to, skipped: skipped, ok: ok}
	}
	path := n.pathTo(r)
	for i := skipped + 2; i < len(path) && i <= n.cfg.Delta+1; i++ {
		if b := path[i]; n.knownJoined(b) {
			return hopInfo{to: b, skipped: i - 1, ok: true}
		}
	}
	return hopInfo{to: to, skipped: skipped, ok: ok}
}

// hop returns the current next hop toward recipient r.
func (n *Node) hop(r message.BrokerID) hopInfo {
	if h, ok := n.fwd.hops[r]; ok {
		return h
	}
	h := n.computeHop(r)
	n.fwd.hops[r] = h
	if h.ok && !n.peer(h.to).up {
		n.dial(Peer{ID: h.to}, false)
	}
	return h
}

// prefetchDials dials, when the next hop toward r is not linked yet, the
// brokers behind it on the path to r as well: if the hop turns out dead,
// the next candidate is already linked (F7: one dial timeout, not k).
func (n *Node) prefetchDials(r message.BrokerID, h hopInfo) {
	if !h.ok || n.peer(h.to).up {
		return
	}
	past := false
	for _, b := range n.pathTo(r) {
		if b == h.to {
			past = true
			continue
		}
		if past {
			if p := n.peer(b); !p.up && !p.dialing && !p.suspected {
				n.dial(Peer{ID: b}, false)
			}
		}
	}
}

// bypassInUse reports whether some next hop is a bypass hop: a newly
// linked broker may then change routes (computeHop: a linked broker behind
// a pending bypass hop, or a skipped broker that turned out alive).
func (n *Node) bypassInUse() bool {
	for _, h := range n.fwd.hops {
		if h.ok && h.skipped > 0 {
			return true
		}
	}
	return false
}
