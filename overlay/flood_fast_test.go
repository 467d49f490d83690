package overlay

import (
	"fmt"
	"math/rand/v2"
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
		out = append(out, target{id: id, dist: n.dist[id]})
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
				var got []target
				for _, tg := range n.floodTargets(except, all) {
					if tg.nb > 0 {
						nb := n.fl.nb[tg.nb-1]
						if nb.id != tg.id || (nb.p != nil && n.peers[tg.id] != nb.p) || n.fl.acks[tg.id] != nb.q {
							t.Fatalf("%s: target %s with stale neighbour data %+v", step, tg.id, nb)
						}
					}
					got = append(got, target{id: tg.id, dist: tg.dist})
				}
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
	n.peer("H").heardHB, n.peer("H").heardAny = true, true // a new peer record, not joined
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
		n.ackSent(f, "C", nil)
	}
	if q := n.fl.acks["C"]; len(q.ents)-q.head > maxAckQueue {
		t.Fatalf("queue holds %d entries, bound %d", len(q.ents)-q.head, maxAckQueue)
	}
}

// floodMap against a plain map of the same puts and deletes: keys in
// and out of the edges' windows (other epochs, numbers below the window
// or past its span, topology floods), every kind; a flood replaced under
// its key is no longer found by ackHint (its generation changes).
func TestFloodMap(t *testing.T) {
	var fm floodMap
	ref := map[floodKey]*flood{}
	check := func(step string) {
		t.Helper()
		if fm.len() != len(ref) {
			t.Fatalf("%s: len %d, want %d", step, fm.len(), len(ref))
		}
		checkFloodMap(t, step, &fm, ref)
	}
	sub := func(kind floodKind, edge message.BrokerID, epoch, n uint64) floodKey {
		return floodKey{kind: kind, sub: message.SubID{Edge: edge, Epoch: epoch, N: n}}
	}
	put := func(k floodKey) *flood {
		f := &flood{key: k, pooled: true}
		fm.put(k, f)
		ref[k] = f
		return f
	}
	del := func(k floodKey) {
		fm.del(k)
		delete(ref, k)
	}
	var keys []floodKey
	for n := uint64(10); n < 20; n++ {
		keys = append(keys, sub(fkSub, "E", 1, n), sub(fkUnsub, "E", 1, n), sub(fkMark, "E", 1, n))
	}
	keys = append(keys,
		sub(fkSub, "E", 1, 5),                 // below the window
		sub(fkSub, "E", 1, 10+maxFloodWindow), // past its span
		sub(fkSub, "E", 2, 11),                // another epoch
		sub(fkSub, "F", 2, 11),                // another edge
		floodKey{kind: fkTopo, origin: "E", seq: 11},
		floodKey{kind: fkTopo, origin: "F", seq: 11})
	for _, k := range keys {
		put(k)
	}
	check("all put")
	if _, ok := fm.get(sub(fkSub, "E", 11, 1)); ok {
		t.Fatal("epoch and number swapped: found")
	}
	if _, ok := fm.get(sub(fkSub, "G", 1, 10)); ok {
		t.Fatal("unknown edge: found")
	}
	old := ref[keys[0]]
	gen := old.gen
	put(keys[0])
	if old.gen == gen {
		t.Fatal("replaced flood: generation unchanged")
	}
	check("replaced")
	// Delete from the window's front, middle and back, then the rest.
	for _, i := range []int{0, 1, 2, 15, 29, 28, 27} {
		del(keys[i])
		check(fmt.Sprintf("deleted %+v", keys[i]))
	}
	// Epoch 2 of E fits the window once epoch 1's floods are gone.
	for _, k := range keys {
		del(k)
	}
	check("all deleted")
	put(sub(fkSub, "E", 2, 3))
	put(sub(fkSub, "E", 2, 4))
	if e := fm.edges["E"]; e == nil || e.epoch != 2 || e.n != 2 {
		t.Fatalf("E's window after its epoch-1 floods completed: %+v", e)
	}
	check("epoch 2")
	// A key kept in the map, then in the window (the window moved).
	del(sub(fkSub, "E", 2, 3))
	del(sub(fkSub, "E", 2, 4))
	put(sub(fkSub, "E", 2, 100))
	put(sub(fkSub, "E", 2, 99)) // below: map
	del(sub(fkSub, "E", 2, 100))
	put(sub(fkSub, "E", 2, 98)) // window restarts at 98
	put(sub(fkSub, "E", 2, 99)) // now in the window; the map's copy goes
	check("moved window")
	if len(fm.m) != 0 {
		t.Fatalf("map keeps %d floods, want 0", len(fm.m))
	}
}

// floodMap against a plain map over random puts and deletes: numbers
// mostly increasing per edge with completions out of order (the windows
// move, wrap around their rings and grow), some epochs and kinds mixed.
func TestFloodMapRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var fm floodMap
	ref := map[floodKey]*flood{}
	next := map[message.BrokerID]uint64{}
	var live []floodKey
	for step := 0; step < 20000; step++ {
		if len(live) > 0 && rng.IntN(100) < 48 {
			i := rng.IntN(len(live))
			if rng.IntN(4) > 0 {
				i = rng.IntN(min(len(live), 4)) // mostly the oldest
			}
			k := live[i]
			live = append(live[:i], live[i+1:]...)
			if f := ref[k]; f != nil && rng.IntN(2) == 0 {
				fm.done(f)
			} else {
				fm.del(k)
			}
			delete(ref, k)
		} else {
			edge := message.BrokerID(fmt.Sprint("e", rng.IntN(3)))
			next[edge]++
			n := next[edge]
			if rng.IntN(20) == 0 {
				n = uint64(rng.IntN(int(n))) + 1 // an older number
			}
			epoch := uint64(1)
			if rng.IntN(50) == 0 {
				epoch = 2
			}
			kind := []floodKind{fkSub, fkSub, fkSub, fkUnsub, fkMark, fkTopo}[rng.IntN(6)]
			k := floodKey{kind: kind, sub: message.SubID{Edge: edge, Epoch: epoch, N: n}}
			if kind == fkTopo {
				k = floodKey{kind: kind, origin: edge, seq: n}
			}
			f := &flood{key: k, pooled: true}
			if _, ok := ref[k]; !ok {
				live = append(live, k)
			}
			fm.put(k, f)
			ref[k] = f
		}
		if fm.len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", step, fm.len(), len(ref))
		}
		if step%97 == 0 {
			checkFloodMap(t, fmt.Sprintf("step %d", step), &fm, ref)
		}
	}
}

// The edges kept with an empty window are bounded; a flood whose window
// was dropped meanwhile is still found and removed by key.
func TestFloodMapEdgesBounded(t *testing.T) {
	var fm floodMap
	key := func(i int) floodKey {
		return floodKey{kind: fkSub, sub: message.SubID{Edge: message.BrokerID(fmt.Sprint("e", i)), Epoch: 1, N: 1}}
	}
	kept := &flood{key: key(0), pooled: true}
	fm.put(kept.key, kept)
	for i := 1; i <= maxFloodEdges+10; i++ {
		f := &flood{key: key(i), pooled: true}
		fm.put(f.key, f)
		fm.done(f)
	}
	if len(fm.edges) > maxFloodEdges+1 {
		t.Fatalf("%d edges kept, bound %d", len(fm.edges), maxFloodEdges)
	}
	if g, ok := fm.get(kept.key); !ok || g != kept {
		t.Fatalf("pending flood of e0 lost: %p, %v", g, ok)
	}
	fm.done(kept)
	if fm.len() != 0 {
		t.Fatalf("len %d after every flood completed", fm.len())
	}
	// A window dropped while a (displaced) flood still points to it.
	a := &flood{key: key(5000), pooled: true}
	fm.put(a.key, a)
	b := &flood{key: a.key, pooled: true}
	fm.put(b.key, b) // a displaced
	fm.done(b)
	if len(fm.edges) > maxFloodEdges+1 || fm.len() != 0 {
		t.Fatalf("edges %d, len %d", len(fm.edges), fm.len())
	}
	fm.done(a) // its key: nothing registered
	if fm.len() != 0 {
		t.Fatalf("len %d", fm.len())
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

// fromFor's per-edge cache gives topo.FromFor's answer across changes of
// the from-pointer, the distance and the map.
func TestFromForCache(t *testing.T) {
	n := chainNode(t, 2) // A-B-C-D-E-F, δ = 2
	win := &edgeFloods{}
	check := func(step string, from message.BrokerID, dist int) {
		t.Helper()
		if got, want := n.fromFor(from, dist, win), n.topo.FromFor(from, dist); got != want {
			t.Fatalf("%s: fromFor(%s, %d) = %s, want %s", step, from, dist, got, want)
		}
	}
	check("first", "E", 1)
	check("same", "E", 1)
	check("other distance", "E", 2)
	check("other from", "D", 2)
	check("back", "E", 1)
	// D re-attached under A: E is now 3 hops away, not 4.
	n.topo.Put(message.MapNode{ID: "D", Addr: "addr-D", Epoch: 1, Parent: "A"})
	check("map changed", "E", 1)
	n.topo.Remove("E")
	check("E removed", "E", 1)
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
	if n.floods.len() != 0 {
		t.Fatalf("%d floods pending at a leaf", n.floods.len())
	}
}

// floodDirection is direction, for neighbours, brokers behind them,
// unknown brokers and after a change of the map.
func TestFloodDirection(t *testing.T) {
	n := starNode(t)
	check := func(step string) {
		t.Helper()
		for _, id := range []message.BrokerID{"A", "B", "C", "D", "E", "F", "G", "H", "X"} {
			if got, want := n.floodDirection(id), n.direction(id); got != want {
				t.Fatalf("%s: floodDirection(%s) = %q, want %q", step, id, got, want)
			}
		}
	}
	check("initial")
	n.topo.Put(message.MapNode{ID: "H", Addr: "addr-H", Epoch: 1, Parent: "A"})
	check("H added")
	n.topo.Put(message.MapNode{ID: "E", Addr: "addr-E", Epoch: 1, Parent: "A"})
	check("E re-attached to A")
	n.removeMember("B")
	check("B removed")
}

// floodFromPointer's per-edge cache gives the plain choice (the SubFlood's
// From if in the map, else the sender if in it, else the direction)
// across changes of its inputs and of the map.
func TestFloodFromPointerCache(t *testing.T) {
	n := chainNode(t, 3)
	k := floodKey{kind: fkSub, sub: message.SubID{Edge: "F", Epoch: 1, N: 1}}
	n.floods.put(k, &flood{key: k}) // F has a window
	ref := func(mFrom, from, dir message.BrokerID) message.BrokerID {
		fp := mFrom
		if !n.topo.Has(fp) {
			fp = from
			if !n.topo.Has(fp) {
				fp = dir
			}
		}
		return fp
	}
	check := func(step string, mFrom, from, dir message.BrokerID) {
		t.Helper()
		if got, want := n.floodFromPointer("F", mFrom, from, dir), ref(mFrom, from, dir); got != want {
			t.Fatalf("%s: floodFromPointer(%s, %s, %s) = %s, want %s", step, mFrom, from, dir, got, want)
		}
	}
	check("in map", "D", "B", "B")
	check("again", "D", "B", "B")
	check("From unknown", "Z", "B", "B")
	check("both unknown", "Z", "Y", "B")
	check("From known again", "E", "Y", "B")
	n.topo.Remove("E")
	check("E removed from the map", "E", "Y", "B")
	n.topo.Put(message.MapNode{ID: "E", Addr: "addr-E", Epoch: 1, Parent: "D"})
	check("E back", "E", "Y", "B")
	if got := n.floodFromPointer("G", "Z", "B", "B"); got != "B" {
		t.Fatalf("edge without a window: %s, want B", got)
	}
}

// checkFloodMap fails unless fm holds exactly the floods of ref: all
// yields each once, get finds each.
func checkFloodMap(t *testing.T, step string, fm *floodMap, ref map[floodKey]*flood) {
	t.Helper()
	seen := 0
	for f := range fm.all {
		if ref[f.key] != f {
			t.Fatalf("%s: all yields %+v, not pending", step, f.key)
		}
		seen++
	}
	if seen != len(ref) {
		t.Fatalf("%s: all yields %d floods, want %d", step, seen, len(ref))
	}
	for k, f := range ref {
		if g, ok := fm.get(k); !ok || g != f {
			t.Fatalf("%s: get(%+v) = %p, %v; want %p", step, k, g, ok, f)
		}
	}
}
