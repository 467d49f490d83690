package topology

// RestartJoinpoints is where a restarted broker rejoins, in the runtime
// (from its data directory), the testbed and the simulator alike: its
// ancestors nearest first (up to δ+1 of them), then, while there are fewer
// than δ+1, the nearest other brokers (breadth first: its children, then
// their children and its siblings, ...). A root and its child restarted
// together, each given only the other, were two brokers that are not
// members asking each other forever; with δ+1 distinct joinpoints at least
// one is up whenever at most δ brokers are down, and each is within δ+1
// hops, so its map holds the restarted broker and it re-admits it at its
// old place.
func RestartJoinpoints[ID comparable](id ID, delta int, parent func(ID) (ID, bool), neighbours func(ID) []ID) []ID {
	var out []ID
	in := map[ID]bool{id: true}
	for n, ok := parent(id); ok && len(out) < delta+1; n, ok = parent(n) {
		if in[n] {
			break // a cycle in a corrupt map: stop rather than loop
		}
		out = append(out, n)
		in[n] = true
	}
	seen := map[ID]bool{id: true}
	queue := []ID{id}
	for len(queue) > 0 && len(out) < delta+1 {
		x := queue[0]
		queue = queue[1:]
		for _, y := range neighbours(x) {
			if seen[y] {
				continue
			}
			seen[y] = true
			queue = append(queue, y)
			if !in[y] && len(out) < delta+1 {
				in[y] = true
				out = append(out, y)
			}
		}
	}
	return out
}

// RestartJoinpoints is the policy on the map: where its owner should
// rejoin if it restarted now.
func (m *Map) RestartJoinpoints() []BrokerID {
	parent := func(x BrokerID) (BrokerID, bool) {
		n, ok := m.nodes[x]
		return n.Parent, ok && n.Parent != "" && m.Has(n.Parent)
	}
	return RestartJoinpoints(m.self, m.delta, parent, m.Neighbours)
}
