package overlay

// Place is where this broker would rejoin if it restarted now: the
// brokers of topology.RestartJoinpoints on its current map (its ancestors,
// then the nearest others, δ+1 in all), with their addresses. Each of them
// holds this broker in its map, so a restart through them is a recovery at
// the old place, not a join somewhere else under the same name (a broker
// placed elsewhere than planned, its configured joinpoints beyond its
// neighbourhood, would otherwise sit twice in the tree). Nil unless this
// broker is a joined member that is not leaving (a broker still joining or
// recovering has no place of its own yet, and the runtime keeps the one it
// saved before); empty, not nil, for a member alone in the overlay.
func (n *Node) Place() []Peer {
	if !n.joined || n.leaving || n.left {
		return nil
	}
	out := []Peer{}
	for _, id := range n.topo.RestartJoinpoints() {
		if addr := n.addrOf(id); addr != "" {
			out = append(out, Peer{ID: id, Addr: addr})
		}
	}
	return out
}
