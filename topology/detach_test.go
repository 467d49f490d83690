package topology

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// parentsOf renders entries as "ID<Parent" pairs (sorted) for comparisons.
func parentsOf(nodes []message.MapNode) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, string(n.ID)+"<"+string(n.Parent))
	}
	sort.Strings(out)
	return out
}

// repaired returns the test tree with x removed and repaired the way
// Detach describes, computed independently (the expected global tree).
func repaired(tree []message.MapNode, x BrokerID) []message.MapNode {
	parent := map[BrokerID]BrokerID{}
	for _, n := range tree {
		parent[n.ID] = n.Parent
	}
	var kids []BrokerID
	for id, p := range parent {
		if p == x {
			kids = append(kids, id)
		}
	}
	sort.Slice(kids, func(i, j int) bool { return kids[i] < kids[j] })
	np := parent[x]
	if np == "" && len(kids) > 0 {
		np = kids[0]
		parent[kids[0]] = ""
		kids = kids[1:]
	}
	for _, k := range kids {
		parent[k] = np
	}
	var out []message.MapNode
	for _, n := range tree {
		if n.ID != x {
			n.Parent = parent[n.ID]
			out = append(out, n)
		}
	}
	return out
}

func TestDetach(t *testing.T) {
	tests := []struct {
		x    BrokerID
		want []string // reparented entries
	}{
		{"A", []string{"B<"}},         // the root with one child: B becomes the root
		{"B", []string{"C<A", "G<A"}}, // interior: its children join its parent
		{"D", []string{"E<C", "H<C"}}, // interior with two children
		{"F", nil},                    // a leaf: nothing to re-attach
		{"H", []string{"I<D"}},        // a chain link
		{"I", nil},                    // a leaf
		{"C", []string{"D<B"}},        // one child
		{"E", []string{"F<D"}},        // one child
		{"G", nil},                    // a leaf
	}
	for _, tc := range tests {
		for _, delta := range []int{1, 2, 3} {
			m := mapOf(tc.x, delta)
			v := m.Version()
			got, err := m.Detach(tc.x)
			if err != nil {
				t.Fatalf("Detach(%s) δ=%d: %v", tc.x, delta, err)
			}
			if g := parentsOf(got); !reflect.DeepEqual(g, tc.want) && !(len(g) == 0 && len(tc.want) == 0) {
				t.Errorf("Detach(%s) δ=%d = %v, want %v", tc.x, delta, g, tc.want)
			}
			if m.Version() != v {
				t.Errorf("Detach(%s) changed the map", tc.x)
			}
		}
	}
}

func TestDetachRootWithSeveralChildren(t *testing.T) {
	// R is the root with children B, A, C: A (smallest) becomes the root.
	m := New(message.MapNode{ID: "R", Epoch: 1}, 2)
	for _, n := range []message.MapNode{{ID: "B", Parent: "R"}, {ID: "A", Parent: "R"}, {ID: "C", Parent: "R"}, {ID: "D", Parent: "C"}} {
		m.Put(n)
	}
	got, err := m.Detach("R")
	if err != nil {
		t.Fatal(err)
	}
	if g, want := parentsOf(got), []string{"A<", "B<A", "C<A"}; !reflect.DeepEqual(g, want) {
		t.Fatalf("Detach(R) = %v, want %v", g, want)
	}
}

func TestDetachErrors(t *testing.T) {
	m := mapOf("C", 1)
	if _, err := m.Detach("Z"); err == nil {
		t.Error("Detach of an unknown broker: no error")
	}
	// A map of D with δ=0 does not hold C's parent B... build one where the
	// parent is missing: E's map with δ=0 knows D, E, F only.
	m0 := New(message.MapNode{ID: "E", Epoch: 1, Parent: "D"}, 0)
	m0.Put(message.MapNode{ID: "D", Epoch: 1, Parent: "C"})
	if _, err := m0.Detach("D"); err == nil {
		t.Error("Detach with the parent outside the map: no error")
	}
}

// TestApplyDetachEveryMap checks, for every leaver x, every broker y and
// δ = 1..3, that y's map after ApplyDetach (with the leaver's reparented
// entries and the leaver's whole map as extra) is exactly y's
// (δ+1)-neighbourhood in the repaired tree, for every y within δ+1 hops
// of x (the brokers the repair flood reaches); farther maps are unaffected
// by the leave (their neighbourhood does not change).
func TestApplyDetachEveryMap(t *testing.T) {
	tree := testTree()
	for _, delta := range []int{1, 2, 3} {
		for _, x := range tree {
			xm := mapOf(x.ID, delta)
			rep, err := xm.Detach(x.ID)
			if err != nil {
				t.Fatal(err)
			}
			after := repaired(tree, x.ID)
			for _, y := range tree {
				if y.ID == x.ID {
					continue
				}
				name := fmt.Sprintf("δ=%d leaver=%s map of %s", delta, x.ID, y.ID)
				ym := mapOf(y.ID, delta)
				if d := ym.Dist(y.ID, x.ID); d < 0 || d > delta+1 {
					continue // not reached by the flood: checked below
				}
				ym.ApplyDetach(x.ID, rep, xm.Nodes())
				want := globalWithin(after, y.ID, delta+1)
				if got := parentsOf(ym.Nodes()); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: got %v, want %v", name, got, want)
				}
			}
		}
	}
}

// TestLeaveNeighbourhoodUnchangedFar: a broker farther than δ+1 from the
// leaver has the same neighbourhood before and after (so it needs no
// update), apart from parents it cannot see.
func TestLeaveNeighbourhoodUnchangedFar(t *testing.T) {
	tree := testTree()
	for _, delta := range []int{1, 2} {
		for _, x := range tree {
			after := repaired(tree, x.ID)
			for _, y := range tree {
				if y.ID == x.ID {
					continue
				}
				if d := mapOf(y.ID, 10).Dist(y.ID, x.ID); d <= delta+1 {
					continue
				}
				before := idsOnly(globalWithin(tree, y.ID, delta+1))
				now := idsOnly(globalWithin(after, y.ID, delta+1))
				if !reflect.DeepEqual(before, now) {
					t.Errorf("δ=%d leaver=%s: %s's neighbourhood changed: %v -> %v", delta, x.ID, y.ID, before, now)
				}
			}
		}
	}
}

func globalWithin(tree []message.MapNode, center BrokerID, hops int) []string {
	g := New(message.MapNode{ID: "__none__"}, 100)
	for _, n := range tree {
		g.Put(n)
	}
	return parentsOf(g.Within(center, hops))
}

func idsOnly(pairs []string) []string {
	out := make([]string, len(pairs))
	for i, p := range pairs {
		for j := 0; j < len(p); j++ {
			if p[j] == '<' {
				out[i] = p[:j]
				break
			}
		}
	}
	return out
}

// TestRemovedStaysRemoved: a stale copy of a removed broker (another
// repair's Add, computed before) does not bring it back; a new epoch does.
func TestRemovedStaysRemoved(t *testing.T) {
	m := mapOf("C", 2)
	xm := mapOf("D", 2)
	rep, err := xm.Detach("D")
	if err != nil {
		t.Fatal(err)
	}
	m.ApplyDetach("D", rep, xm.Nodes())
	if m.Has("D") || !m.Removed("D") {
		t.Fatalf("D not removed: %v", m.Nodes())
	}
	stale := message.MapNode{ID: "D", Addr: "addr-D", Epoch: 1, Parent: "C"}
	m.Merge([]message.MapNode{stale})
	m.Put(stale)
	if m.Has("D") {
		t.Fatal("a stale copy brought D back")
	}
	// E was re-attached to C; a stale copy still under D is ignored.
	m.Merge([]message.MapNode{{ID: "E", Addr: "addr-E", Epoch: 1, Parent: "D"}})
	if e, _ := m.Get("E"); e.Parent != "C" {
		t.Fatalf("a stale copy moved E back under the removed D: %+v", e)
	}
	again := stale
	again.Epoch = 2
	m.Put(again)
	if !m.Has("D") || m.Removed("D") {
		t.Fatal("D under a new epoch not accepted")
	}
}
