// Package topology holds a broker's view of the overlay tree: its
// (δ+1)-neighbourhood map (brokers, tree edges, addresses, epochs), tree
// paths inside it, from-pointer recomputation (PROTOCOL §3), and "the
// closest live broker on the path toward X" given the brokers currently
// unusable (PROTOCOL §6). It is pure: no I/O, no clock.
package topology

import (
	"fmt"
	"slices"
	"sort"

	"github.com/deltapub/deltapub/message"
)

// BrokerID is a broker's name.
type BrokerID = message.BrokerID

// Map is the (δ+1)-neighbourhood of one broker. The tree edges are the
// (ID, Parent) pairs of its nodes. A Map is not safe for concurrent use.
type Map struct {
	self  BrokerID
	delta int
	nodes map[BrokerID]message.MapNode
	// adj is rebuilt lazily from nodes after every change (changes are
	// rare: joins, leaves, restarts); nil means stale.
	adj map[BrokerID][]BrokerID
	// pathCache caches the tree paths from the owner (Path(self, b): next
	// hops, from-pointers, the purge's safety rule). It stays true because
	// every change of nodes goes through changed(), which drops it with
	// adj. Without it the srds09 simulation takes about 1.5× the CPU.
	pathCache map[BrokerID][]BrokerID
	// version increases on every change, so callers can cache what they
	// derive from the map (next hops, from-pointers).
	version uint64
	// removed remembers brokers taken out of the tree (ApplyDetach) with
	// their epoch, so that a stale copy of the map (another repair's Add,
	// a join reply computed before) does not bring them back; a larger
	// epoch (a restart, joining anew) is accepted. Bounded by maxRemoved:
	// at the bound the oldest is forgotten (a copy that stale no longer
	// circulates).
	removed      map[BrokerID]uint64
	removedOrder []BrokerID
}

// maxRemoved bounds Map.removed.
const maxRemoved = 1024

// New returns the map of a broker that knows only itself.
func New(self message.MapNode, delta int) *Map {
	m := &Map{self: self.ID, delta: delta, nodes: map[BrokerID]message.MapNode{}}
	m.nodes[self.ID] = self
	return m
}

// Self is the owner of the map.
func (m *Map) Self() BrokerID { return m.self }

// Delta is δ.
func (m *Map) Delta() int { return m.delta }

// Version changes whenever the map does.
func (m *Map) Version() uint64 { return m.version }

// Len is the number of brokers in the map.
func (m *Map) Len() int { return len(m.nodes) }

// Get returns the entry of id.
func (m *Map) Get(id BrokerID) (message.MapNode, bool) {
	n, ok := m.nodes[id]
	return n, ok
}

// Has reports whether id is in the map.
func (m *Map) Has(id BrokerID) bool { _, ok := m.nodes[id]; return ok }

// Put adds or replaces an entry. It does not prune: call Prune after a
// batch of changes.
func (m *Map) Put(n message.MapNode) {
	if old, ok := m.nodes[n.ID]; ok && old == n {
		return
	}
	if e, ok := m.removed[n.ID]; ok {
		if n.Epoch <= e {
			return // removed from the tree: a stale copy
		}
		delete(m.removed, n.ID)
	}
	if _, ok := m.removed[n.Parent]; ok {
		if cur, known := m.nodes[n.ID]; known && cur.Epoch >= n.Epoch {
			return // a stale copy still hanging it under a removed broker
		}
	}
	m.nodes[n.ID] = n
	m.changed()
}

// Remove deletes id. Its children, if any, keep a dangling Parent until
// they are re-attached with Put.
func (m *Map) Remove(id BrokerID) {
	if _, ok := m.nodes[id]; !ok || id == m.self {
		return
	}
	delete(m.nodes, id)
	m.changed()
}

func (m *Map) changed() { m.adj = nil; m.pathCache = nil; m.version++ }

func (m *Map) adjacency() map[BrokerID][]BrokerID {
	if m.adj != nil {
		return m.adj
	}
	adj := make(map[BrokerID][]BrokerID, len(m.nodes))
	for _, n := range m.nodes {
		if n.Parent == "" || n.Parent == n.ID {
			continue
		}
		if _, ok := m.nodes[n.Parent]; !ok {
			continue
		}
		adj[n.ID] = append(adj[n.ID], n.Parent)
		adj[n.Parent] = append(adj[n.Parent], n.ID)
	}
	for _, l := range adj {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	}
	m.adj = adj
	return adj
}

// Neighbours returns the tree neighbours of id known to the map, sorted.
func (m *Map) Neighbours(id BrokerID) []BrokerID { return m.adjacency()[id] }

// Dangling reports whether id is not in the map while some entry names it
// as its parent: a broker with a place in the tree that this map does not
// hold (a map rebuilt from others' partial ones after a restart can name
// its owner's parent without holding it).
func (m *Map) Dangling(id BrokerID) bool {
	return id != "" && !m.Has(id) && len(m.ChildrenOf(id)) > 0
}

// ChildrenOf returns the entries that name id as their parent, sorted by
// ID, whether or not the map holds id itself.
func (m *Map) ChildrenOf(id BrokerID) []BrokerID {
	var out []BrokerID
	for _, n := range m.nodes {
		if n.Parent == id && n.ID != id {
			out = append(out, n.ID)
		}
	}
	slices.Sort(out)
	return out
}

// Parent returns the parent of id ("" for the root or when unknown).
func (m *Map) Parent(id BrokerID) BrokerID { return m.nodes[id].Parent }

// Path returns the tree path from a to b, both ends included, or nil when
// either is unknown or they are not connected inside the map. The result
// may be shared: callers must not modify it.
func (m *Map) Path(a, b BrokerID) []BrokerID {
	if a != m.self {
		return m.path(a, b)
	}
	if p, ok := m.pathCache[b]; ok {
		return p
	}
	p := m.path(a, b)
	if m.pathCache == nil {
		m.pathCache = map[BrokerID][]BrokerID{}
	}
	m.pathCache[b] = p
	return p
}

func (m *Map) path(a, b BrokerID) []BrokerID {
	if !m.Has(a) || !m.Has(b) {
		return nil
	}
	if a == b {
		return []BrokerID{a}
	}
	adj := m.adjacency()
	prev := map[BrokerID]BrokerID{a: a}
	queue := []BrokerID{a}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		for _, y := range adj[x] {
			if _, seen := prev[y]; seen {
				continue
			}
			prev[y] = x
			if y == b {
				var rev []BrokerID
				for z := b; z != a; z = prev[z] {
					rev = append(rev, z)
				}
				rev = append(rev, a)
				for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
					rev[i], rev[j] = rev[j], rev[i]
				}
				return rev
			}
			queue = append(queue, y)
		}
	}
	return nil
}

// Distances returns the hop distance from a to every broker of the map
// reachable from a.
func (m *Map) Distances(a BrokerID) map[BrokerID]int {
	d := map[BrokerID]int{}
	if !m.Has(a) {
		return d
	}
	adj := m.adjacency()
	d[a] = 0
	queue := []BrokerID{a}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		for _, y := range adj[x] {
			if _, seen := d[y]; !seen {
				d[y] = d[x] + 1
				queue = append(queue, y)
			}
		}
	}
	return d
}

// Dist is the hop distance from a to b, or -1 when unknown.
func (m *Map) Dist(a, b BrokerID) int {
	p := m.Path(a, b)
	return len(p) - 1
}

// Direction returns the tree neighbour of the owner on the path toward x
// (x itself when it is a neighbour), or "" when x is the owner or unknown.
func (m *Map) Direction(x BrokerID) BrokerID {
	p := m.Path(m.self, x)
	if len(p) < 2 {
		return ""
	}
	return p[1]
}

// Prune drops every broker farther than δ+1 hops from the owner (and any
// broker not connected to it inside the map). It returns the dropped ids.
func (m *Map) Prune() []BrokerID {
	d := m.Distances(m.self)
	var dropped []BrokerID
	for id := range m.nodes {
		if dist, ok := d[id]; !ok || dist > m.delta+1 {
			dropped = append(dropped, id)
		}
	}
	sort.Slice(dropped, func(i, j int) bool { return dropped[i] < dropped[j] })
	for _, id := range dropped {
		delete(m.nodes, id)
	}
	if len(dropped) > 0 {
		m.changed()
	}
	return dropped
}

// Nodes returns every entry, sorted by ID.
func (m *Map) Nodes() []message.MapNode {
	out := make([]message.MapNode, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Within returns the entries within hops of center, sorted by ID: the part
// of this map another broker needs (a joiner's neighbourhood).
func (m *Map) Within(center BrokerID, hops int) []message.MapNode {
	d := m.Distances(center)
	var out []message.MapNode
	for id, dist := range d {
		if dist <= hops {
			out = append(out, m.nodes[id])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Merge puts every entry of nodes whose epoch is not older than the one
// already known, then prunes. It returns whether anything changed.
func (m *Map) Merge(nodes []message.MapNode) bool {
	v := m.version
	for _, n := range nodes {
		if n.ID == m.self {
			continue
		}
		if old, ok := m.nodes[n.ID]; ok && old.Epoch > n.Epoch {
			continue
		}
		m.Put(n)
	}
	m.Prune()
	return m.version != v
}

// FromFor recomputes a from-pointer (PROTOCOL §3). The owner holds from,
// at most δ+1 hops away toward the subscriber; extra is the distance from
// the owner to the broker the pointer is for, on the far side of the
// owner from from (1 for a tree neighbour, more across a bypass). The
// result is the broker on the path owner→from that is as far toward the
// subscriber as possible while within δ+1 hops of that broker: from
// itself when dist(owner, from)+extra ≤ δ+1. When from is unknown to the
// map the owner itself is returned (the nearest broker on the path that is
// certainly known).
func (m *Map) FromFor(from BrokerID, extra int) BrokerID {
	p := m.Path(m.self, from)
	if p == nil {
		return m.self
	}
	limit := m.delta + 1 - extra // hops from the owner still allowed
	if limit < 0 {
		limit = 0
	}
	if len(p)-1 <= limit {
		return from
	}
	return p[limit]
}

// ClosestLive returns the first broker on the path from the owner toward
// x (x included, the owner excluded) that is not unusable, and how many
// unusable brokers were skipped to reach it. ok is false when x is unknown,
// when x is the owner, or when every broker on the path is unusable (more
// than δ failed in a row, or x itself failed).
func (m *Map) ClosestLive(x BrokerID, unusable func(BrokerID) bool) (live BrokerID, skipped int, ok bool) {
	p := m.Path(m.self, x)
	if len(p) < 2 {
		return "", 0, false
	}
	for i, b := range p[1:] {
		if !unusable(b) {
			return b, i, true
		}
	}
	return "", len(p) - 1, false
}

// Frontier returns the closest usable brokers in the direction of the
// owner's tree neighbour dir: dir itself if usable, otherwise, recursively,
// the frontier of each of dir's other neighbours, at most δ+1 hops from the
// owner. hole is true when some branch holds δ+1 unusable brokers in a row
// (a branch cut off beyond the guarantee). Sorted, no duplicates.
func (m *Map) Frontier(dir BrokerID, unusable func(BrokerID) bool) (front []BrokerID, hole bool) {
	front, _, hole = m.FrontierSkipped(dir, unusable)
	return front, hole
}

// FrontierSkipped is Frontier that also returns the unusable brokers it
// walked past (sorted).
func (m *Map) FrontierSkipped(dir BrokerID, unusable func(BrokerID) bool) (front, skipped []BrokerID, hole bool) {
	adj := m.adjacency()
	var walk func(x, from BrokerID, depth int)
	walk = func(x, from BrokerID, depth int) {
		if !unusable(x) {
			front = append(front, x)
			return
		}
		skipped = append(skipped, x)
		if depth >= m.delta+1 {
			hole = true
			return
		}
		for _, y := range adj[x] {
			if y != from {
				walk(y, x, depth+1)
			}
		}
	}
	if !m.Has(dir) {
		return nil, nil, false
	}
	walk(dir, m.self, 1)
	sort.Slice(front, func(i, j int) bool { return front[i] < front[j] })
	sort.Slice(skipped, func(i, j int) bool { return skipped[i] < skipped[j] })
	return front, skipped, hole
}

// Validate checks that the map is a tree around its owner (every parent
// known or outside, no cycle) — used on maps received from peers.
func Validate(nodes []message.MapNode) error {
	seen := map[BrokerID]bool{}
	for _, n := range nodes {
		if n.ID == "" {
			return fmt.Errorf("topology: map entry with an empty id")
		}
		if seen[n.ID] {
			return fmt.Errorf("topology: broker %q twice in a map", n.ID)
		}
		seen[n.ID] = true
		if n.Parent == n.ID {
			return fmt.Errorf("topology: broker %q is its own parent", n.ID)
		}
	}
	return nil
}

// Detach computes how the tree is repaired when broker x leaves it (a
// graceful leave, docs/protocol.md §3): x's children become children of
// x's parent; when x is the root, its child with the smallest id becomes
// the root and x's other children become its children. Every other edge
// is kept, so each of x's subtrees stays connected, and no distance grows
// (a path through x shrinks by one hop or stays as long).
//
// It returns the entries whose Parent changes, sorted by ID, and leaves
// the map itself unchanged (the caller floods the change; see Apply). x
// and all of its tree neighbours must be in the map: the leaver's own map
// always qualifies.
func (m *Map) Detach(x BrokerID) ([]message.MapNode, error) {
	xe, ok := m.nodes[x]
	if !ok {
		return nil, fmt.Errorf("topology: detach %q: not in the map", x)
	}
	parent := xe.Parent
	if parent != "" && !m.Has(parent) {
		return nil, fmt.Errorf("topology: detach %q: its parent %q is not in the map", x, parent)
	}
	var children []BrokerID
	for _, nb := range m.Neighbours(x) {
		if nb != parent {
			children = append(children, nb) // sorted: Neighbours is
		}
	}
	if len(children) == 0 {
		return nil, nil
	}
	newParent := parent
	var out []message.MapNode
	if parent == "" {
		// x is the root: its smallest child takes its place.
		newParent = children[0]
		root := m.nodes[children[0]]
		root.Parent = ""
		out = append(out, root)
		children = children[1:]
	}
	for _, c := range children {
		e := m.nodes[c]
		e.Parent = newParent
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// ApplyDetach removes x and re-attaches its neighbours as reparented
// says (the result of Detach on the leaver's map), then merges extra (map
// entries the leaver knew, so that brokers whose (δ+1)-neighbourhood grew
// learn the brokers now within reach; entries older than known are
// ignored) and prunes. An entry of reparented that is not in the map is
// added: it may now be within δ+1 hops. It returns whether anything
// changed.
func (m *Map) ApplyDetach(x BrokerID, reparented, extra []message.MapNode) bool {
	if x == m.self {
		return false
	}
	v := m.version
	for _, e := range extra {
		if e.ID == x || e.ID == m.self {
			continue
		}
		if old, ok := m.nodes[e.ID]; ok && old.Epoch > e.Epoch {
			continue
		}
		if _, ok := m.nodes[e.ID]; ok {
			continue // what we know of a broker already in the map stays
		}
		m.Put(e)
	}
	if old, ok := m.nodes[x]; ok {
		delete(m.nodes, x)
		m.changed()
		m.forget(x, old.Epoch)
	}
	for _, e := range reparented {
		if e.ID == x {
			continue
		}
		cur, ok := m.nodes[e.ID]
		if !ok {
			m.Put(e)
			continue
		}
		if cur.Epoch > e.Epoch {
			// A newer incarnation: it rejoined at its old place (under x's
			// parent, or x's successor) and learns its place from there.
			cur.Parent = e.Parent
			m.Put(cur)
			continue
		}
		m.Put(e)
	}
	m.Prune()
	return m.version != v
}

// forget records x (epoch e) as removed from the tree (see Map.removed).
func (m *Map) forget(x BrokerID, e uint64) {
	if m.removed == nil {
		m.removed = map[BrokerID]uint64{}
	}
	if _, ok := m.removed[x]; !ok {
		m.removedOrder = append(m.removedOrder, x)
	}
	m.removed[x] = e
	if len(m.removedOrder) > maxRemoved {
		delete(m.removed, m.removedOrder[0])
		m.removedOrder = m.removedOrder[1:]
	}
}

// Removed reports whether id was removed from the tree (a leave or a gone
// broker's removal) and has not come back under a larger epoch.
func (m *Map) Removed(id BrokerID) bool { _, ok := m.removed[id]; return ok }
