package overlay

import "slices"

// Place is where this broker would rejoin if it restarted now: the
// brokers of topology.RestartJoinpoints on its current map (its ancestors,
// then the nearest others, δ+1 in all), then its other tree neighbours,
// with their addresses (at most maxPlace). Each of them holds this broker
// in its map, so a restart through them is a recovery at the old place,
// not a join somewhere else under the same name (a broker placed elsewhere
// than planned, its configured joinpoints beyond its neighbourhood, would
// otherwise sit twice in the tree). The tree neighbours are there because
// a recovery asks every joinpoint for its state and only a tree
// neighbour's map surely shows all of them: answered only by an ancestor
// two hops up (its parent slow or down), a restart became routable without
// knowing its children and dropped their publications.
//
// Nil unless this broker is a joined member that is not leaving (a broker
// joining or recovering has no place of its own yet: the runtime keeps the
// one it saved before); empty, not nil, for a member alone in the overlay.
func (n *Node) Place() []Peer {
	if !n.mem.joined || n.mem.leaving || n.mem.left {
		return nil
	}
	out := []Peer{}
	ids := n.topo.RestartJoinpoints()
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if !slices.Contains(ids, nb) {
			ids = append(ids, nb)
		}
	}
	for _, id := range ids[:min(len(ids), maxPlace)] {
		if addr := n.addrOf(id); addr != "" {
			out = append(out, Peer{ID: id, Addr: addr})
		}
	}
	return out
}

// maxPlace bounds a place (the runtime tries at most 16 joinpoints).
const maxPlace = 16
