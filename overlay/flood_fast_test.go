package overlay

import (
	"fmt"
	"slices"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// refFloodTargets is floodTargets without its fast path or caches (the
// plain frontier walk), to check the cached result against.
func refFloodTargets(n *Node, except message.BrokerID, all bool) ([]target, bool) {
	n.geometry()
	hole := false
	var out []target
	add := func(id message.BrokerID) {
		for _, t := range out {
			if t.id == id {
				return
			}
		}
		out = append(out, target{id, n.dist[id]})
	}
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if nb == except {
			continue
		}
		if !n.unusable(nb) {
			add(nb)
			continue
		}
		if p := n.peers[nb]; p != nil && p.up && !p.suspected {
			add(nb)
		}
		front, skipped, h := n.topo.FrontierSkipped(nb, n.unusable)
		for _, f := range front {
			add(f)
		}
		if h && all {
			hole = true
		}
		if all {
			for _, s := range skipped {
				if p := n.peers[s]; p == nil || !p.gone {
					add(s)
				}
			}
		}
	}
	return out, hole
}

// starNode returns node A with tree neighbours B, C, D (each with one
// broker behind it: B-E, C-F, D-G), all linked and joined.
func starNode(t *testing.T) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.Addr, cfg.Delta = "A", "addr-A", 1
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
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
// and its all-usable fast path give the plain walk's answer after every
// change of the map, the peer set or a neighbour's usability.
func TestFloodTargetsCacheFollowsChanges(t *testing.T) {
	n := starNode(t)
	check := func(step string) {
		t.Helper()
		for _, except := range []message.BrokerID{"", "B", "C", "D", "E", "X"} {
			for _, all := range []bool{false, true} {
				want, wantHole := refFloodTargets(n, except, all)
				got := slices.Clone(n.floodTargets(except, all))
				if !slices.Equal(got, want) || n.floodHole != wantHole {
					t.Fatalf("%s: floodTargets(%q, %v) = %v hole %v, want %v hole %v", step, except, all, got, n.floodHole, want, wantHole)
				}
			}
		}
	}
	check("initial")
	n.peer("C").suspected = true
	check("C suspected")
	n.peer("C").suspected = false
	check("C unsuspected")
	n.peer("D").joined = false
	check("D recovering (heartbeat says not joined)")
	n.peer("D").joined = true
	n.peer("B").gone = true
	check("B gone")
	n.peer("B").gone = false
	check("B back")
	n.topo.Put(message.MapNode{ID: "H", Addr: "addr-H", Epoch: 1, Parent: "A"})
	check("new neighbour H in the map, no peer yet")
	linked(n, "H")
	check("H linked (peer set changed)")
	n.peer("H").suspected = true
	check("H suspected")
	n.removeMember("H")
	check("H removed (map and peer set)")
	n.topo.Put(message.MapNode{ID: "H", Addr: "addr-H", Epoch: 2, Parent: "A"})
	n.peer("H").heardHB = true // a new peer record, not joined
	check("H back, recovering")
	n.peer("H").joined = true
	check("H joined")
}

// ackHint: answers in send order are found at the queue's head, answers
// out of order by key; entries of completed floods (whose records are
// reused) never match a later flood.
func TestFloodAckQueue(t *testing.T) {
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
	if q := n.fl.acks["C"]; q == nil || len(q.ents)-q.head != 4 {
		t.Fatalf("queue of C: %+v, want 4 entries", q)
	}
	confirm("C", 2) // out of order: found by key
	confirm("D", 2)
	confirm("C", 1)
	confirm("C", 1) // a duplicate answer: ignored
	confirm("D", 1)
	if got := confirmed(); !slices.Equal(got, []uint64{2, 1}) {
		t.Fatalf("confirmed %v, want [2 1]", got)
	}
	// Floods 1 and 2 are complete: their records are reused by 5 and 6,
	// sent after 3 and 4; C's queue still lists 2 (stale) after 1.
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
	if n.floods.len() != 0 {
		t.Fatalf("%d floods pending, want none", n.floods.len())
	}
	// Entries of completed floods are dropped lazily: at most the stale
	// ones past the last answer remain.
	if q := n.fl.acks["C"]; len(q.ents)-q.head > 1 {
		t.Fatalf("C's queue keeps %d entries after every flood completed", len(q.ents)-q.head)
	}
}

// A queue is bounded: a target that never answers does not make it grow
// without end (the answers found later by key still count).
func TestFloodAckQueueBounded(t *testing.T) {
	n := starNode(t)
	f := n.newFlood()
	f.key, f.budget = floodKey{kind: fkSub, sub: message.SubID{Edge: "A", Epoch: 1, N: 1}}, -1
	for i := 0; i < maxAckQueue+10; i++ {
		n.ackSent(f, "C")
	}
	if q := n.fl.acks["C"]; len(q.ents)-q.head > maxAckQueue {
		t.Fatalf("queue holds %d entries, bound %d", len(q.ents)-q.head, maxAckQueue)
	}
}

// floodMap: lookups by key of every kind; a displaced flood's completion
// deletes what is registered under its key (the plain map's behaviour);
// the interned names are forgotten once past the bound with nothing
// pending.
func TestFloodMap(t *testing.T) {
	var fm floodMap
	sk := floodKey{kind: fkSub, sub: message.SubID{Edge: "E", Epoch: 2, N: 7}}
	uk := floodKey{kind: fkUnsub, sub: sk.sub}
	tk := floodKey{kind: fkTopo, origin: "E", seq: 7}
	fs, fu, ft := &flood{key: sk}, &flood{key: uk}, &flood{key: tk}
	fm.put(sk, fs)
	fm.put(uk, fu)
	fm.put(tk, ft)
	for _, c := range []struct {
		k floodKey
		f *flood
	}{{sk, fs}, {uk, fu}, {tk, ft}} {
		if g, ok := fm.get(c.k); !ok || g != c.f {
			t.Fatalf("get(%+v) = %p, %v; want %p", c.k, g, ok, c.f)
		}
	}
	if _, ok := fm.get(floodKey{kind: fkSub, sub: message.SubID{Edge: "E", Epoch: 7, N: 2}}); ok {
		t.Fatal("epoch and number swapped: found")
	}
	if _, ok := fm.get(floodKey{kind: fkSub, sub: message.SubID{Edge: "Z", Epoch: 2, N: 7}}); ok {
		t.Fatal("unknown edge: found")
	}
	fm.del(uk)
	if _, ok := fm.get(uk); ok || fm.len() != 2 {
		t.Fatalf("after del: found %v, len %d", ok, fm.len())
	}
	fm.del(sk)
	fm.del(tk)
	for i := 0; i <= maxFloodIDs; i++ {
		k := floodKey{kind: fkTopo, origin: message.BrokerID(fmt.Sprint("b", i)), seq: 1}
		fm.put(k, &flood{key: k})
		fm.del(k)
	}
	if fm.len() != 0 || len(fm.ids) > maxFloodIDs {
		t.Fatalf("len %d, %d names interned; want none pending, at most %d names", fm.len(), len(fm.ids), maxFloodIDs)
	}
}
