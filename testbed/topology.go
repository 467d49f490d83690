package testbed

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
)

// Topology is the broker tree of an experiment. Names are in breadth-first
// order from the root (Names[0]), which is also the order brokers are
// started in: every broker's parent (its joinpoint) starts before it.
type Topology struct {
	Names    []string
	Parent   map[string]string // the root maps to ""
	Children map[string][]string
}

// MaxBrokers bounds generated topologies: beyond it a run on one machine
// makes no sense, and a typo (brokers = 100000) is refused rather than
// forking that many processes.
const MaxBrokers = 2000

func (t *Topology) Has(name string) bool { _, ok := t.Parent[name]; return ok }

// Neighbours returns the parent (if any) and children of name.
func (t *Topology) Neighbours(name string) []string {
	var out []string
	if p := t.Parent[name]; p != "" {
		out = append(out, p)
	}
	return append(out, t.Children[name]...)
}

// Leaves returns the brokers without children, in breadth-first order. A
// single-broker tree has its root as its leaf.
func (t *Topology) Leaves() []string {
	var out []string
	for _, n := range t.Names {
		if len(t.Children[n]) == 0 {
			out = append(out, n)
		}
	}
	return out
}

// Subtree returns x and everything below it (rooted at Names[0]), in
// breadth-first order.
func (t *Topology) Subtree(x string) []string {
	out := []string{x}
	for i := 0; i < len(out); i++ {
		out = append(out, t.Children[out[i]]...)
	}
	return out
}

func (t *Topology) ancestors(x string) []string {
	var out []string
	for n := x; n != ""; n = t.Parent[n] {
		out = append(out, n)
	}
	return out
}

// Path returns the brokers on the tree path from a to b, both included.
func (t *Topology) Path(a, b string) []string {
	up := t.ancestors(a)
	pos := map[string]int{}
	for i, n := range up {
		pos[n] = i
	}
	var down []string
	n := b
	for ; n != ""; n = t.Parent[n] {
		if _, ok := pos[n]; ok {
			break
		}
		down = append(down, n)
	}
	path := append([]string(nil), up[:pos[n]+1]...)
	slices.Reverse(down)
	return append(path, down...)
}

// fromParents builds a Topology from parent indexes (parent[0] = -1, every
// other parent[i] < i or at least acyclic) and renames it B1..Bn breadth
// first, keeping the names given in keep (index → name).
func fromParents(parent []int, keep map[int]string) *Topology {
	children := make([][]int, len(parent))
	for i, p := range parent {
		if p >= 0 {
			children[p] = append(children[p], i)
		}
	}
	order := []int{0}
	for i := 0; i < len(order); i++ {
		order = append(order, children[order[i]]...)
	}
	name := make([]string, len(parent))
	next := 1
	for _, i := range order {
		if k, ok := keep[i]; ok {
			name[i] = k
			continue
		}
		name[i] = fmt.Sprintf("B%d", next)
		next++
	}
	t := &Topology{Parent: map[string]string{}, Children: map[string][]string{}}
	for _, i := range order {
		t.Names = append(t.Names, name[i])
		if parent[i] >= 0 {
			t.Parent[name[i]] = name[parent[i]]
		} else {
			t.Parent[name[i]] = ""
		}
		for _, c := range children[i] {
			t.Children[name[i]] = append(t.Children[name[i]], name[c])
		}
	}
	return t
}

func chainParents(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i - 1
	}
	return p
}

func starParents(n int) []int {
	p := make([]int, n)
	p[0] = -1
	return p
}

func balancedParents(n, fanout int) []int {
	p := make([]int, n)
	p[0] = -1
	for i := 1; i < n; i++ {
		p[i] = (i - 1) / fanout
	}
	return p
}

// randomParents attaches each broker to a uniformly chosen earlier one
// with fewer than maxChildren children (0 = unbounded).
func randomParents(n, maxChildren int, rng *rand.Rand) []int {
	p := make([]int, n)
	p[0] = -1
	kids := make([]int, n)
	for i := 1; i < n; i++ {
		var open []int
		for j := 0; j < i; j++ {
			if maxChildren == 0 || kids[j] < maxChildren {
				open = append(open, j)
			}
		}
		j := open[rng.IntN(len(open))]
		p[i] = j
		kids[j]++
	}
	return p
}

// SRDS09Brokers is the size of the slides' overlay.
const SRDS09Brokers = 83

// srds09Parents builds the 83-broker overlay of the SRDS 2009 experiment
// (δ = 3). The slides show only that R1, R2 and R3 are adjacent in a row on
// the path between publishers and subscribers; the rest is our choice:
//
//   - a publisher side: the root B1 and a balanced subtree of 13 brokers
//     (fanout 3, the 9 leaves host the publishers);
//   - the row B1 – R1 – R2 – R3 – H, where H roots the subscriber side;
//   - each of R1, R2, R3 carries a side branch of 4 brokers (one child with
//     3 leaves), so a failed R has downstream neighbours in two directions
//     and the bypass must reach both;
//   - the subscriber side: a balanced subtree of 55 brokers (fanout 3) under
//     H, whose leaves host most subscribers.
//
// 13 + 3 + 12 + 55 = 83. Index 13, 14, 15 are R1, R2, R3.
func srds09Parents() ([]int, map[int]string) {
	var p []int
	add := func(parent int) int { p = append(p, parent); return len(p) - 1 }
	root := add(-1)
	pub := []int{root}
	for i := 0; len(p) < 13; i++ {
		for k := 0; k < 3 && len(p) < 13; k++ {
			pub = append(pub, add(pub[i]))
		}
	}
	r1 := add(root)
	r2 := add(r1)
	r3 := add(r2)
	for _, r := range []int{r1, r2, r3} {
		c := add(r)
		for k := 0; k < 3; k++ {
			add(c)
		}
	}
	h := add(r3)
	sub := []int{h}
	for i := 0; len(sub) < 55; i++ {
		for k := 0; k < 3 && len(sub) < 55; k++ {
			sub = append(sub, add(sub[i]))
		}
	}
	return p, map[int]string{r1: "R1", r2: "R2", r3: "R3"}
}

// explicitTopology checks and builds a tree from [[broker]] tables: unique
// names, exactly one root, every join names a broker, no cycle.
func explicitTopology(s *Spec, errs *errList) *Topology {
	if len(s.Brokers) == 0 {
		errs.add(s.lines.line("topology.kind"), `topology kind "explicit" needs [[broker]] tables (name = "B2", join = "B1")`)
		return nil
	}
	if len(s.Brokers) > MaxBrokers {
		errs.add(s.lines.line("broker"), "%d brokers: at most %d", len(s.Brokers), MaxBrokers)
		return nil
	}
	idx := map[string]int{}
	ok := true
	for i, b := range s.Brokers {
		line := s.lines.line(fmt.Sprintf("broker[%d].name", i))
		if b.Name == "" {
			errs.add(line, "broker %d has no name", i+1)
			ok = false
			continue
		}
		if !validName(b.Name) {
			errs.add(line, "broker name %q: use letters, digits, '-' and '_'", b.Name)
			ok = false
		}
		if j, dup := idx[b.Name]; dup {
			errs.add(line, "broker %q defined twice (first as broker %d)", b.Name, j+1)
			ok = false
			continue
		}
		idx[b.Name] = i
	}
	roots := 0
	parent := make([]int, len(s.Brokers))
	for i, b := range s.Brokers {
		line := s.lines.line(fmt.Sprintf("broker[%d].join", i))
		if b.Join == "" {
			roots++
			parent[i] = -1
			if roots > 1 {
				errs.add(s.lines.line(fmt.Sprintf("broker[%d]", i)), "broker %q has no join but is not the first root: an overlay has exactly one root", b.Name)
				ok = false
			}
			continue
		}
		j, found := idx[b.Join]
		if !found {
			errs.add(line, "broker %q joins unknown broker %q", b.Name, b.Join)
			ok = false
			continue
		}
		if j == i {
			errs.add(line, "broker %q joins itself", b.Name)
			ok = false
			continue
		}
		parent[i] = j
	}
	if roots == 0 && ok {
		errs.add(s.lines.line("broker[0]"), "no root broker (one [[broker]] must have no join): the joins form a cycle")
		return nil
	}
	if !ok {
		return nil
	}
	// Every broker must reach the root; one that does not sits on a cycle
	// or hangs below one.
	for i := range parent {
		seen := map[int]bool{}
		for j := i; j >= 0; j = parent[j] {
			if seen[j] {
				var cyc []string
				for k, start := j, true; start || k != j; k, start = parent[k], false {
					cyc = append(cyc, s.Brokers[k].Name)
				}
				errs.add(s.lines.line(fmt.Sprintf("broker[%d].join", j)), "the joins form a cycle: %s → %s", joinArrow(cyc), cyc[0])
				return nil
			}
			seen[j] = true
		}
	}
	// Reorder so the root is index 0 and build with the given names.
	rootIdx := slices.Index(parent, -1)
	perm := []int{rootIdx}
	for i := range parent {
		if i != rootIdx {
			perm = append(perm, i)
		}
	}
	inv := make([]int, len(perm))
	for k, i := range perm {
		inv[i] = k
	}
	p2 := make([]int, len(parent))
	keep := map[int]string{}
	for k, i := range perm {
		if parent[i] < 0 {
			p2[k] = -1
		} else {
			p2[k] = inv[parent[i]]
		}
		keep[k] = s.Brokers[i].Name
	}
	return fromParents(p2, keep)
}

func joinArrow(names []string) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += " → "
		}
		out += n
	}
	return out
}

func validName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// selectBrokers resolves a brokers = ... selector to count placements,
// round-robin over the selected brokers ("random" draws each placement).
func selectBrokers(t *Topology, sel any, count int, rng *rand.Rand) ([]string, error) {
	var pool []string
	random := false
	switch v := sel.(type) {
	case nil:
		pool = t.Leaves()
	case string:
		p, r, err := resolveSelector(t, v)
		if err != nil {
			return nil, err
		}
		pool, random = p, r
	case []any:
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("brokers: list elements must be strings, got %v", e)
			}
			p, r, err := resolveSelector(t, s)
			if err != nil {
				return nil, err
			}
			if r {
				return nil, fmt.Errorf(`brokers: "random" cannot be mixed into a list`)
			}
			pool = append(pool, p...)
		}
	default:
		return nil, fmt.Errorf("brokers: want a name, a list of names, or \"leaves\" | \"all\" | \"random\", got %v", v)
	}
	if len(pool) == 0 {
		return nil, fmt.Errorf("brokers: the selector matches no broker")
	}
	out := make([]string, count)
	for i := range out {
		if random {
			out[i] = pool[rng.IntN(len(pool))]
		} else {
			out[i] = pool[i%len(pool)]
		}
	}
	return out, nil
}

func resolveSelector(t *Topology, s string) ([]string, bool, error) {
	switch s {
	case "leaves":
		return t.Leaves(), false, nil
	case "all":
		return t.Names, false, nil
	case "random":
		return t.Names, true, nil
	}
	var arg string
	if n, _ := fmt.Sscanf(s, "leaves(%s", &arg); n == 1 && len(arg) > 1 && arg[len(arg)-1] == ')' {
		x := arg[:len(arg)-1]
		if !t.Has(x) {
			return nil, false, fmt.Errorf("brokers: unknown broker %q in %q", x, s)
		}
		return leavesIn(t, t.Subtree(x)), false, nil
	}
	if n, _ := fmt.Sscanf(s, "leaves-outside(%s", &arg); n == 1 && len(arg) > 1 && arg[len(arg)-1] == ')' {
		x := arg[:len(arg)-1]
		if !t.Has(x) {
			return nil, false, fmt.Errorf("brokers: unknown broker %q in %q", x, s)
		}
		in := map[string]bool{}
		for _, n := range t.Subtree(x) {
			in[n] = true
		}
		var rest []string
		for _, n := range t.Names {
			if !in[n] {
				rest = append(rest, n)
			}
		}
		return leavesIn(t, rest), false, nil
	}
	if !t.Has(s) {
		return nil, false, fmt.Errorf("brokers: unknown broker %q (have %s)", s, describeNames(t.Names))
	}
	return []string{s}, false, nil
}

func leavesIn(t *Topology, set []string) []string {
	var out []string
	for _, n := range set {
		if len(t.Children[n]) == 0 {
			out = append(out, n)
		}
	}
	return out
}

// describeNames abbreviates a long list of broker names for messages.
func describeNames(names []string) string {
	if len(names) <= 8 {
		return fmt.Sprint(names)
	}
	s := append([]string(nil), names...)
	sort.Strings(s)
	return fmt.Sprintf("%d brokers: %v … %v", len(s), s[:4], s[len(s)-2:])
}

// Render draws the tree as indented text, one broker per line.
func (t *Topology) Render() string {
	var b []byte
	var walk func(n string, depth int)
	walk = func(n string, depth int) {
		for i := 0; i < depth; i++ {
			b = append(b, "  "...)
		}
		b = append(b, n...)
		b = append(b, '\n')
		for _, c := range t.Children[n] {
			walk(c, depth+1)
		}
	}
	if len(t.Names) > 0 {
		walk(t.Names[0], 0)
	}
	return string(b)
}

// clone returns a copy of t that detach can change: the tree as a run
// believes it to be, after the leaves so far.
func (t *Topology) clone() *Topology {
	c := &Topology{Names: slices.Clone(t.Names), Parent: make(map[string]string, len(t.Parent)), Children: make(map[string][]string, len(t.Children))}
	for k, v := range t.Parent {
		c.Parent[k] = v
	}
	for k, v := range t.Children {
		c.Children[k] = slices.Clone(v)
	}
	return c
}

// detach removes x from the tree the way the overlay repairs itself when x
// leaves gracefully (topology.Map.Detach, docs/protocol.md §3): x's
// children become children of x's parent; when x is the root, its child
// with the smallest name becomes the root and adopts the others. A later
// restart of another broker then rejoins through its current ancestors,
// not through the broker that left. (The overlay's real tree can differ
// from this plan after crashes and restarts; joins try several joinpoints
// for that reason.)
func (t *Topology) detach(x string) {
	if !t.Has(x) {
		return
	}
	parent := t.Parent[x]
	kids := slices.Clone(t.Children[x])
	if parent == "" && len(kids) > 0 {
		root := slices.Min(kids)
		kids = slices.DeleteFunc(kids, func(k string) bool { return k == root })
		t.Parent[root] = ""
		parent = root
		// The new root goes first, as the root does in Names.
		t.Names = slices.DeleteFunc(t.Names, func(n string) bool { return n == root })
		t.Names = slices.Insert(t.Names, 0, root)
	}
	for _, k := range kids {
		t.Parent[k] = parent
	}
	if parent != "" {
		t.Children[parent] = slices.DeleteFunc(t.Children[parent], func(n string) bool { return n == x })
		t.Children[parent] = append(t.Children[parent], kids...)
	}
	delete(t.Parent, x)
	delete(t.Children, x)
	t.Names = slices.DeleteFunc(t.Names, func(n string) bool { return n == x })
}
