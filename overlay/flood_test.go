package overlay

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// starNode returns node A with tree neighbours B, C, D (each with one
// broker behind it: B-E, C-F, D-G), all linked and joined.
func starNode(t *testing.T) *Node {
	t.Helper()
	n := nodeA(t, 1)
	n.Bootstrap()
	for _, e := range [][2]message.BrokerID{{"B", "A"}, {"C", "A"}, {"D", "A"}, {"E", "B"}, {"F", "C"}, {"G", "D"}} {
		n.topo.Put(message.MapNode{ID: e[0], Addr: "addr-" + string(e[0]), Epoch: 1, Parent: e[1]})
	}
	for _, id := range []message.BrokerID{"B", "C", "D"} {
		linked(n, id)
	}
	return n
}

// floodTargets' cache of the neighbours (per map version and peer set)

// floodTargets: past every unusable neighbour, the brokers behind it
// (and the neighbour itself while its link is up and it is not
// suspected); with all, the unusable brokers walked past unless gone, and
// whether a direction is cut off beyond δ.
func TestFloodTargets(t *testing.T) {
	n := starNode(t)
	check := func(step string, except message.BrokerID, all bool, want string, wantHole bool) {
		t.Helper()
		ts, hole := n.floodTargets(except, all)
		var got []string
		for _, tg := range ts {
			got = append(got, fmt.Sprintf("%s@%d", tg.id, tg.dist))
		}
		if g := strings.Join(got, " "); g != want || hole != wantHole {
			t.Fatalf("%s: floodTargets(%q, %v) = %q hole %v, want %q hole %v", step, except, all, g, hole, want, wantHole)
		}
	}
	check("all usable", "", false, "B@1 C@1 D@1", false)
	check("all usable, from B", "B", true, "C@1 D@1", false)
	n.peer("C").suspected = true
	check("C suspected", "B", false, "F@2 D@1", false)
	check("C suspected, all", "B", true, "F@2 C@1 D@1", false)
	n.peer("F").suspected = true
	check("C and F suspected", "B", false, "D@1", false)
	check("C and F suspected, all", "B", true, "C@1 F@2 D@1", true)
	n.peer("C").suspected, n.peer("F").suspected = false, false
	n.peer("D").joined = false
	check("D recovering", "", false, "B@1 C@1 D@1 G@2", false)
	n.peer("D").joined = true
	n.peer("B").gone = true
	n.peer("B").up = false
	check("B gone", "C", true, "E@2 D@1", false)
	n.topo.Put(message.MapNode{ID: "H", Addr: "addr-H", Epoch: 1, Parent: "A"})
	check("new neighbour H, no peer yet", "C", false, "E@2 D@1 H@1", false)
}

// A relayed subscription flood is confirmed upstream once every target
// has answered, whatever the order of the answers and across floods;
// duplicate answers are ignored.
func TestFloodAcks(t *testing.T) {
	n := starNode(t)
	sub := func(i uint64) message.SubID { return message.SubID{Edge: "E", Epoch: 1, N: i} }
	flood := func(i uint64) {
		n.Step("B", &message.SubFlood{Sub: sub(i), Filter: classFilter(fmt.Sprint(i)), From: "E"})
	}
	confirm := func(from message.BrokerID, i uint64) {
		n.Step(from, &message.SubConfirm{Sub: sub(i)})
	}
	confirmed := func() []uint64 {
		var got []uint64
		for _, e := range n.Ready().Messages {
			if sc, ok := e.Msg.(*message.SubConfirm); ok && e.To == "B" {
				got = append(got, sc.Sub.N)
			}
		}
		return got
	}
	n.Ready()
	for i := uint64(1); i <= 4; i++ {
		flood(i)
	}
	confirm("C", 2) // out of order: found by key
	confirm("D", 2)
	confirm("C", 1)
	confirm("C", 1) // a duplicate answer: ignored
	confirm("D", 1)
	if got := confirmed(); !slices.Equal(got, []uint64{2, 1}) {
		t.Fatalf("confirmed %v, want [2 1]", got)
	}
	// Floods 5 and 6 start while 3 and 4 are pending.
	flood(5)
	flood(6)
	confirm("D", 6)
	confirm("C", 6)
	confirm("C", 3)
	confirm("D", 3)
	confirm("D", 5)
	confirm("C", 4)
	confirm("D", 4)
	confirm("C", 5)
	if got := confirmed(); !slices.Equal(got, []uint64{6, 3, 4, 5}) {
		t.Fatalf("confirmed %v, want [6 3 4 5]", got)
	}
	if len(n.floods.pending) != 0 {
		t.Fatalf("%d floods pending, want none", len(n.floods.pending))
	}
}

// Status reports the control messages sent by type name, counted by type
// index in send.
func TestControlCounts(t *testing.T) {
	n := starNode(t)
	before := n.Status().Counters.Control
	for i := 0; i < 3; i++ {
		n.send("B", &message.SubConfirm{Sub: message.SubID{Edge: "E", Epoch: 1, N: uint64(i)}})
	}
	n.send("C", &message.TopoAck{Origin: "E", Seq: 1})
	n.send("X", &message.TopoAck{Origin: "E", Seq: 2}) // no link: not sent
	after := n.Status().Counters.Control
	want := map[string]uint64{message.TypeSubConfirm.String(): 3, message.TypeTopoAck.String(): 1}
	for k, v := range after {
		if v-before[k] != want[k] {
			t.Errorf("%s: %d sent, want %d", k, v-before[k], want[k])
		}
	}
	for k := range want {
		if _, ok := after[k]; !ok {
			t.Errorf("%s missing", k)
		}
	}
}

// A SubFlood of a known subscription is answered at once, without a
// flood or a notice, also when the table is full; a new one with the
// table full is answered with a notice.
func TestSubFloodKnownAnsweredAtOnce(t *testing.T) {
	n := starNode(t)
	s := message.SubID{Edge: "E", Epoch: 1, N: 1}
	n.Step("B", &message.SubFlood{Sub: s, Filter: classFilter("x"), From: "E"})
	n.Step("C", &message.SubConfirm{Sub: s})
	n.Step("D", &message.SubConfirm{Sub: s})
	n.Ready()
	for _, full := range []bool{false, true} {
		if full {
			n.table.Max = n.table.Len()
		}
		n.Step("D", &message.SubFlood{Sub: s, Filter: classFilter("x"), From: "E"})
		r := n.Ready()
		if len(r.Messages) != 1 || r.Messages[0].To != "D" || len(r.Notices) != 0 {
			t.Fatalf("full %v: known subscription flooded again: %+v", full, r)
		}
		if sc, ok := r.Messages[0].Msg.(*message.SubConfirm); !ok || sc.Sub != s {
			t.Fatalf("full %v: answer %+v, want SubConfirm of %v", full, r.Messages[0].Msg, s)
		}
	}
	s2 := message.SubID{Edge: "E", Epoch: 1, N: 2}
	n.Step("B", &message.SubFlood{Sub: s2, Filter: classFilter("y"), From: "E"})
	r := n.Ready()
	if len(r.Messages) != 1 || r.Messages[0].To != "B" || len(r.Notices) != 1 || r.Notices[0].Kind != NoticeGap {
		t.Fatalf("new subscription, table full: %+v", r)
	}
}

// At a leaf of the flood (no target past the sender), a new subscription
// is installed and answered at once, with nothing left pending.
func TestSubFloodLeafAnsweredAtOnce(t *testing.T) {
	n := chainNode(t, 3) // A's only neighbour is B
	linked(n, "B")
	n.Ready()
	s := message.SubID{Edge: "F", Epoch: 1, N: 1}
	n.Step("B", &message.SubFlood{Sub: s, Filter: classFilter("x"), From: "D"})
	r := n.Ready()
	if len(r.Messages) != 1 || r.Messages[0].To != "B" {
		t.Fatalf("leaf: %+v, want one SubConfirm to B", r.Messages)
	}
	if sc, ok := r.Messages[0].Msg.(*message.SubConfirm); !ok || sc.Sub != s {
		t.Fatalf("leaf answered %+v", r.Messages[0].Msg)
	}
	if e, ok := n.table.Get(s); !ok || e.From != "D" || e.Dir != "B" {
		t.Fatalf("entry %+v, %v; want From D, Dir B", e, ok)
	}
	if len(n.floods.pending) != 0 {
		t.Fatalf("%d floods pending at a leaf", len(n.floods.pending))
	}
}
