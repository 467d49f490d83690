package overlay

import (
	"math/rand/v2"
	"testing"

	"github.com/deltapub/deltapub/dack"
	"github.com/deltapub/deltapub/message"
)

// refEntry is the reference model's copy of a queued entry.
type refEntry struct {
	e      *qentry
	recips []message.BrokerID
	safe   []bool
}

// TestDackCachesFollowChanges checks purge's caches (the dense copy of
// the queue, the per-recipient thresholds, the lowest queued stamps) and
// the DACK pass's relay verdicts against their definitions, under random
// reports about this broker, map changes (paths move: a version change),
// new entries (queued with mergeMinq, as enqueue does), recipients
// changed in place (as leave.go does, with purgeDirty) and Forget.
func TestDackCachesFollowChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	n := chainNode(t, 3) // A-B-C-D-E-F, and G under A
	n.topo.Put(message.MapNode{ID: "G", Addr: "addr-G", Epoch: 1, Parent: "A"})
	others := []message.BrokerID{"B", "C", "D", "E", "F"}
	for _, id := range []message.BrokerID{"B", "G", "F"} {
		linked(n, id)
	}
	var ref []*refEntry
	arrived := map[message.BrokerID]uint64{}
	queue := func() {
		k := 1 + r.IntN(3)
		rs := r.Perm(len(others))[:k]
		e := newQentry(k)
		n.stampSeq++
		e.stamp = n.stampSeq
		e.pub.Stamps = []message.Stamp{{B: "A", E: 1, S: e.stamp}}
		for _, u := range r.Perm(3)[:r.IntN(3)] {
			e.pub.Stamps = append(e.pub.Stamps, message.Stamp{B: others[2+u], E: uint64(1 + r.IntN(2)), S: uint64(1 + r.IntN(50))})
		}
		for i, j := range rs {
			e.recips[i] = others[j]
		}
		n.store.Arrive(e.pub.Stamps[1:]) // own reports about the upstream brokers
		n.queue = append(n.queue, e)
		n.queueLen++
		if n.minqOK {
			n.mergeMinq(e.pub.Stamps[1:])
		}
		ref = append(ref, &refEntry{e: e, recips: append([]message.BrokerID(nil), e.recips...), safe: make([]bool, k)})
	}
	for step := 0; step < 3000; step++ {
		switch x := r.IntN(20); {
		case x < 6:
			queue()
		case x < 14: // a DACK from B with reports about A
			var m message.DAck
			for _, b := range others {
				if r.IntN(2) == 0 {
					arrived[b] += uint64(r.IntN(4))
					m.Entries = append(m.Entries, message.DAckEntry{Reporter: b, RE: 1, About: "A", AE: 1,
						Arrived: arrived[b], Discarded: uint64(r.IntN(int(arrived[b]) + 1))})
				}
			}
			if r.IntN(2) == 0 { // a relayed report about another broker
				about := []message.BrokerID{"D", "E", "F", "G"}[r.IntN(4)]
				m.Entries = append(m.Entries, message.DAckEntry{Reporter: others[r.IntN(len(others))], RE: 1, About: about, AE: 1, Arrived: uint64(step)})
			}
			n.onDAck("B", &m)
		case x < 16: // the map changes: F hangs under E, C or G (paths and sides move)
			parent := []message.BrokerID{"E", "C", "G"}[r.IntN(3)]
			n.topo.Put(message.MapNode{ID: "F", Addr: "addr-F", Epoch: 1, Parent: parent})
		case x < 17: // recipients changed in place (leave.go), flagged by purgeDirty
			if len(ref) > 0 {
				re := ref[r.IntN(len(ref))]
				recips := []message.BrokerID{others[r.IntN(len(others))]}
				re.e.recips, re.e.safe = recips, []bool{false}
				re.recips, re.safe = append([]message.BrokerID(nil), recips...), []bool{false}
				n.purgeDirty = true
			}
		case x < 18: // a reporter restarted: its reports are forgotten
			b := others[r.IntN(len(others))]
			n.store.Forget(b, 2)
			delete(arrived, b)
		default:
			n.updateDiscarded() // the first one scans; then purge and mergeMinq keep it
		}
		n.purge() // (again, after onDAck's: a pass on an unchanged state changes nothing)
		// The reference: purge's rule over the entries as queued.
		kept := ref[:0]
		for _, re := range ref {
			all := true
			for i, rc := range re.recips {
				if re.safe[i] {
					continue
				}
				var th uint64
				if path := n.pathTo(rc); len(path) > 1 {
					th = dack.Threshold(path[1:], n.store.About)
				}
				if re.e.stamp <= th {
					re.safe[i] = true
				} else {
					all = false
				}
			}
			if !all {
				kept = append(kept, re)
			}
		}
		ref = kept
		if len(n.queue) != len(ref) || n.queueLen != len(ref) {
			t.Fatalf("step %d: queue holds %d (queueLen %d), want %d", step, len(n.queue), n.queueLen, len(ref))
		}
		for i, re := range ref {
			if n.queue[i] != re.e {
				t.Fatalf("step %d: queue[%d] is another entry", step, i)
			}
			for j := range re.safe {
				if re.e.safe[j] != re.safe[j] {
					t.Fatalf("step %d: entry %d (stamp %d) recipient %s safe = %v, want %v", step, i, re.e.stamp, re.recips[j], re.e.safe[j], re.safe[j])
				}
			}
		}
		// The lowest queued stamps, when kept.
		if n.minqOK {
			for _, re := range ref {
				for _, s := range re.e.pub.Stamps[1:] {
					j := findStamp(n.minqBuf, s)
					if j < 0 || !n.minqIn[j] || n.minqBuf[j].S > s.S {
						t.Fatalf("step %d: lowest queued stamp of %s/%d misses %d", step, s.B, s.E, s.S)
					}
				}
			}
			for j, q := range n.minqBuf {
				if !n.minqIn[j] {
					continue
				}
				found := false
				for _, re := range ref {
					for _, s := range re.e.pub.Stamps[1:] {
						found = found || (s.B == q.B && s.E == q.E && s.S == q.S)
					}
				}
				if !found {
					t.Fatalf("step %d: lowest queued stamp %v is not queued", step, q)
				}
			}
		}
		// The DACK pass, and each link's side it keeps.
		n.now++
		n.dackLinks()
		n.geometry()
		for _, env := range n.out.Messages {
			m, ok := env.Msg.(*message.DAck)
			if !ok {
				continue
			}
			pside := n.side[env.To]
			if pside == "" {
				pside = env.To
			}
			for _, e := range m.Entries {
				if !n.dackRelays(e.Reporter, e.About, pside) {
					t.Fatalf("step %d: the DACK to %s carries %s about %s", step, env.To, e.Reporter, e.About)
				}
			}
		}
		n.out = Ready{}
		for _, p := range n.sortedPeerPtrs() {
			if p.dackSideGeo != n.geoVer+1 {
				continue
			}
			want := n.side[p.id]
			if want == "" {
				want = p.id
			}
			if p.dackSide != n.sideIndex(want) {
				t.Fatalf("step %d: link to %s kept side %d, want %s's %d", step, p.id, p.dackSide, want, n.sideIndex(want))
			}
		}
		// The relay verdicts kept in the store's entries.
		n.geometry()
		for c := n.store.Newest(); c.Valid(); c = c.Prev() {
			e := c.Entry()
			for _, pside := range []message.BrokerID{"B", "F", "G", "X"} {
				if got, want := carries(n.relayOf(c), n.sideIndex(pside)), n.dackRelays(e.Reporter, e.About, pside); got != want {
					t.Fatalf("step %d: entry %s about %s toward %s: carried %v, want %v", step, e.Reporter, e.About, pside, got, want)
				}
			}
		}
	}
}

// TestHeartbeatShared checks that heartbeats saying the same share one
// message, and that a change (a suspected neighbour, a leave) makes a new
// one without touching the message already sent.
func TestHeartbeatShared(t *testing.T) {
	n := chainNode(t, 3)
	linked(n, "B")
	hb := n.heartbeat()
	if again := n.heartbeat(); again != hb {
		t.Fatal("an unchanged heartbeat was built again")
	}
	if !hb.Joined || len(hb.Suspects) != 0 {
		t.Fatalf("heartbeat = %+v", hb)
	}
	n.peer("B").suspected = true
	sus := n.heartbeat()
	if sus == hb || len(sus.Suspects) != 1 || sus.Suspects[0] != "B" || len(hb.Suspects) != 0 {
		t.Fatalf("after B's suspicion: %+v (before: %+v)", sus, hb)
	}
	n.leaving = true
	if lv := n.heartbeat(); lv == sus || lv.Joined || len(lv.Suspects) != 1 || !sus.Joined {
		t.Fatalf("leaving: %+v (before: %+v)", lv, sus)
	}
}
