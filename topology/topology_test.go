package topology

import (
	"reflect"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// The test tree (parent in brackets):
//
//	A - B - C - D - E - F
//	    |       |
//	    G       H - I
func testTree() []message.MapNode {
	parent := map[BrokerID]BrokerID{"A": "", "B": "A", "C": "B", "D": "C", "E": "D", "F": "E", "G": "B", "H": "D", "I": "H"}
	var out []message.MapNode
	for id, p := range parent {
		out = append(out, message.MapNode{ID: id, Addr: "addr-" + string(id), Epoch: 1, Parent: p})
	}
	return out
}

func mapOf(self BrokerID, delta int) *Map {
	m := New(message.MapNode{ID: self}, delta)
	for _, n := range testTree() {
		if n.ID == self {
			m.Put(n)
		}
	}
	for _, n := range testTree() {
		m.Put(n)
	}
	m.Prune()
	return m
}

func ids(s ...BrokerID) []BrokerID { return s }

func TestPathAndPrune(t *testing.T) {
	tests := []struct {
		self   BrokerID
		delta  int
		a, b   BrokerID
		path   []BrokerID
		mapLen int
	}{
		{"C", 2, "C", "F", ids("C", "D", "E", "F"), 9}, // everything within 3 hops of C
		{"C", 1, "C", "F", nil, 7},                     // F is 3 hops away: pruned with δ+1 = 2 (A B C D E G H)
		{"A", 1, "A", "C", ids("A", "B", "C"), 4},      // A B C G
		{"D", 2, "G", "I", ids("G", "B", "C", "D", "H", "I"), 9},
		{"D", 2, "I", "I", ids("I"), 9},
	}
	for _, tc := range tests {
		m := mapOf(tc.self, tc.delta)
		if got := m.Len(); got != tc.mapLen {
			t.Errorf("self=%s δ=%d: map has %d brokers, want %d: %v", tc.self, tc.delta, got, tc.mapLen, m.Nodes())
		}
		if got := m.Path(tc.a, tc.b); !reflect.DeepEqual(got, tc.path) {
			t.Errorf("self=%s δ=%d: Path(%s,%s) = %v, want %v", tc.self, tc.delta, tc.a, tc.b, got, tc.path)
		}
	}
}

// TestFromFor checks the from-pointer recomputation of PROTOCOL §3: as far
// toward the subscriber as possible while within δ+1 hops of the broker
// the pointer is for.
func TestFromFor(t *testing.T) {
	tests := []struct {
		name  string
		self  BrokerID
		delta int
		from  BrokerID
		extra int
		want  BrokerID
	}{
		{"near: keep the edge", "D", 2, "F", 1, "F"},            // dist(D,F)=2, +1 = 3 ≤ 3
		{"far: one step back", "C", 2, "F", 1, "E"},             // dist(C,F)=3, +1 > 3: the broker 2 hops from C
		{"far, δ=1", "C", 1, "E", 1, "D"},                       // dist 2 +1 > 2: 1 hop from C
		{"across a bypass of 2", "C", 2, "F", 2, "D"},           // 1 hop from C
		{"extra = δ+1: the holder itself", "C", 2, "E", 3, "C"}, //
		{"from is self", "C", 2, "C", 1, "C"},
		{"unknown from: the holder", "C", 1, "Z", 1, "C"},
		{"branch", "B", 2, "H", 1, "D"}, // B-C-D-H: dist 3, +1 > 3 → 2 hops from B
	}
	for _, tc := range tests {
		m := mapOf(tc.self, tc.delta)
		if got := m.FromFor(tc.from, tc.extra); got != tc.want {
			t.Errorf("%s: FromFor(%s, %d) at %s δ=%d = %s, want %s", tc.name, tc.from, tc.extra, tc.self, tc.delta, got, tc.want)
		}
	}
}

// TestClosestLive checks "the closest live broker on the path toward X
// given the suspected set".
func TestClosestLive(t *testing.T) {
	tests := []struct {
		name      string
		self      BrokerID
		to        BrokerID
		down      []BrokerID
		want      BrokerID
		skipped   int
		ok        bool
		delta     int
		frontHole bool
	}{
		{"all up", "B", "E", nil, "C", 0, true, 3, false},
		{"one down", "B", "E", ids("C"), "D", 1, true, 3, false},
		{"δ in a row", "B", "F", ids("C", "D", "E"), "F", 3, true, 3, false},
		{"target down too", "B", "D", ids("C", "D"), "", 2, false, 3, false},
		{"target itself is next", "C", "D", nil, "D", 0, true, 2, false},
		{"toward self", "C", "C", nil, "", 0, false, 2, false},
		{"unknown", "C", "Z", nil, "", 0, false, 2, false},
	}
	for _, tc := range tests {
		m := mapOf(tc.self, tc.delta)
		down := map[BrokerID]bool{}
		for _, d := range tc.down {
			down[d] = true
		}
		got, skipped, ok := m.ClosestLive(tc.to, func(b BrokerID) bool { return down[b] })
		if got != tc.want || skipped != tc.skipped || ok != tc.ok {
			t.Errorf("%s: ClosestLive(%s) = %s,%d,%v, want %s,%d,%v", tc.name, tc.to, got, skipped, ok, tc.want, tc.skipped, tc.ok)
		}
	}
}

func TestFrontier(t *testing.T) {
	tests := []struct {
		name    string
		self    BrokerID
		delta   int
		dir     BrokerID
		down    []BrokerID
		front   []BrokerID
		skipped []BrokerID
		hole    bool
	}{
		{"neighbour up", "C", 2, "D", nil, ids("D"), nil, false},
		{"neighbour down: its other neighbours", "C", 2, "D", ids("D"), ids("E", "H"), ids("D"), false},
		{"two down in a row", "C", 2, "D", ids("D", "E"), ids("F", "H"), ids("D", "E"), false},
		{"δ+1 down in a row: a hole", "C", 1, "D", ids("D", "E"), ids("H"), ids("D", "E"), true},
		{"branch behind B", "C", 2, "B", ids("B"), ids("A", "G"), ids("B"), false},
		{"not a neighbour", "C", 2, "Z", nil, nil, nil, false},
	}
	for _, tc := range tests {
		m := mapOf(tc.self, tc.delta)
		down := map[BrokerID]bool{}
		for _, d := range tc.down {
			down[d] = true
		}
		front, skipped, hole := m.FrontierSkipped(tc.dir, func(b BrokerID) bool { return down[b] })
		if !reflect.DeepEqual(front, tc.front) || !reflect.DeepEqual(skipped, tc.skipped) || hole != tc.hole {
			t.Errorf("%s: Frontier(%s) = %v %v %v, want %v %v %v", tc.name, tc.dir, front, skipped, hole, tc.front, tc.skipped, tc.hole)
		}
	}
}

// TestJoinMapTransfer checks what a joinpoint hands a joiner: exactly the
// joiner's (δ+1)-neighbourhood, enough for the joiner's own map.
func TestJoinMapTransfer(t *testing.T) {
	for _, delta := range []int{1, 2, 3} {
		p := mapOf("D", delta)
		j := message.MapNode{ID: "J", Addr: "addr-J", Epoch: 1, Parent: "D"}
		p.Put(j)
		sent := p.Within("J", delta+1)
		jm := New(j, delta)
		jm.Merge(sent)
		full := New(j, delta)
		for _, n := range testTree() {
			full.Put(n)
		}
		full.Put(j)
		full.Prune()
		if !reflect.DeepEqual(jm.Nodes(), full.Nodes()) {
			t.Errorf("δ=%d: joiner's map %v, want its full neighbourhood %v", delta, jm.Nodes(), full.Nodes())
		}
	}
}

func TestValidate(t *testing.T) {
	if err := Validate([]message.MapNode{{ID: "A"}, {ID: "A"}}); err == nil {
		t.Error("a duplicate id was accepted")
	}
	if err := Validate([]message.MapNode{{ID: "A", Parent: "A"}}); err == nil {
		t.Error("a self-parent was accepted")
	}
	if err := Validate([]message.MapNode{{ID: ""}}); err == nil {
		t.Error("an empty id was accepted")
	}
	if err := Validate(testTree()); err != nil {
		t.Error(err)
	}
}

// Dangling: a broker not in the map that some entry names as its parent
// (the owner's own parent, in a map rebuilt from partial ones after a
// restart); not a broker in the map, not one nobody names.
func TestDangling(t *testing.T) {
	m := New(message.MapNode{ID: "C", Epoch: 2, Parent: "B"}, 1)
	m.Put(message.MapNode{ID: "D", Epoch: 1, Parent: "C"})
	m.Put(message.MapNode{ID: "E", Epoch: 1, Parent: "D"})
	for id, want := range map[BrokerID]bool{"B": true, "C": false, "D": false, "A": false, "": false} {
		if got := m.Dangling(id); got != want {
			t.Errorf("Dangling(%q) = %v, want %v", id, got, want)
		}
	}
	if nb := m.Neighbours("C"); !reflect.DeepEqual(nb, []BrokerID{"D"}) {
		t.Errorf("Neighbours(C) = %v: a parent not in the map is no edge", nb)
	}
	m.Put(message.MapNode{ID: "B", Epoch: 2, Parent: "A"})
	if m.Dangling("B") {
		t.Error("Dangling(B) after B was put")
	}
	if nb := m.Neighbours("C"); !reflect.DeepEqual(nb, []BrokerID{"B", "D"}) {
		t.Errorf("Neighbours(C) = %v, want [B D]", nb)
	}
}
