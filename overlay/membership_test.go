package overlay

import (
	"testing"

	"github.com/deltapub/deltapub/message"
)

// The phases a broker passes through a join, a crash and recovery, and a
// leave, each seen after every round, are those of the state machine, in
// its order.
func TestPhasesOfJoinRecoveryLeave(t *testing.T) {
	h := newHarness(t, 1)
	h.buildTree("A", [][2]message.BrokerID{{"B", "A"}, {"C", "B"}})
	if got := h.nodes["B"].Phase(); got != PhaseJoined {
		t.Fatalf("B after its join: %s, want joined", got)
	}
	fresh, err := NewNode(Config{ID: "X", Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := fresh.Phase(); got != PhaseNew {
		t.Fatalf("a new node: %s, want new", got)
	}

	// B crashes and restarts: its new incarnation walks, recovers, joins.
	h.crash("B")
	h.run(4 * h.cfg.FailureTicks)
	h.restart("B", 2, "A", "C")
	seen := []Phase{h.nodes["B"].Phase()}
	note := func() {
		if ph := h.nodes["B"].Phase(); ph != seen[len(seen)-1] {
			if !LegalPhaseChange(seen[len(seen)-1], ph) {
				t.Fatalf("B went from %s to %s (seen %v)", seen[len(seen)-1], ph, seen)
			}
			seen = append(seen, ph)
		}
	}
	for i := 0; i < 400 && h.nodes["B"].Phase() != PhaseJoined; i++ {
		h.round()
		note()
	}
	if seen[0] != PhaseJoining || seen[len(seen)-1] != PhaseJoined {
		t.Fatalf("B's restart passed %v, want joining … joined", seen)
	}

	h.do("B", func(n *Node) { n.Leave() })
	note()
	for i := 0; i < 400 && h.nodes["B"].Phase() != PhaseLeft; i++ {
		h.round()
		note()
	}
	want := []Phase{PhaseJoined, PhaseLeaving, PhaseLeft}
	if tail := seen[len(seen)-3:]; tail[0] != want[0] || tail[1] != want[1] || tail[2] != want[2] {
		t.Fatalf("B's leave passed %v, want … %v", seen, want)
	}
}

func TestLegalPhaseChange(t *testing.T) {
	legal := [][2]Phase{
		{PhaseNew, PhaseJoining}, {PhaseNew, PhaseJoined}, {PhaseJoining, PhaseAdmitted},
		{PhaseJoining, PhaseRecovering}, {PhaseJoining, PhaseJoined}, {PhaseAdmitted, PhaseJoined},
		{PhaseRecovering, PhaseJoined}, {PhaseJoined, PhaseLeaving}, {PhaseLeaving, PhaseLeft},
	}
	ok := map[[2]Phase]bool{}
	for _, c := range legal {
		ok[c] = true
	}
	for from := PhaseNew; from <= PhaseLeft; from++ {
		for to := PhaseNew; to <= PhaseLeft; to++ {
			if got := LegalPhaseChange(from, to); got != ok[[2]Phase{from, to}] {
				t.Errorf("LegalPhaseChange(%s, %s) = %v", from, to, got)
			}
		}
	}
	if s := Phase(99).String(); s != "phase(99)" {
		t.Errorf("Phase(99) = %q", s)
	}
}

// A joinpoint whose link came up late in its turn (a slow handshake) gets
// JoinRetryTicks from the JoinRequest to answer: the walk does not move on
// to the next joinpoint while the first answers, so only one admits the
// joiner. Timed from the try, the walk asked B1 as well a tick after B3,
// both admitted B4 under themselves, and the overlay's maps disagreed on
// B4's parent.
func TestJoinAnswerTimedFromTheRequest(t *testing.T) {
	h := newHarness(t, 1)
	h.buildTree("B1", [][2]message.BrokerID{{"B2", "B1"}, {"B3", "B1"}})
	h.gated = map[[2]message.BrokerID]bool{pair("B4", "B3"): true}
	h.slow = map[[2]message.BrokerID]bool{{"B3", "B4"}: true} // B3's answer takes its time
	h.add("B4", 1)
	h.do("B4", func(n *Node) {
		n.Join([]Peer{{ID: "B3", Addr: "addr-B3"}, {ID: "B1", Addr: "addr-B1"}})
	})
	h.run(h.cfg.JoinRetryTicks - 2)
	h.openGated("B4", "B3") // late in B3's turn: B4 asks B3 now
	h.run(4)                // past the end of the turn counted from the try
	h.releaseSlow()
	h.runUntil(200, "B4 joined", func() bool { return h.nodes["B4"].Joined() })
	for _, d := range h.dials {
		if d == [2]message.BrokerID{"B4", "B1"} {
			t.Fatalf("B4 dialled B1 while B3 was answering its JoinRequest")
		}
	}
	h.run(20)
	for _, id := range []message.BrokerID{"B1", "B3", "B4"} { // B2 is beyond δ+1 hops of B4
		if p := h.nodes[id].topo.Parent("B4"); p != "B3" {
			t.Errorf("%s places B4 under %q, want B3", id, p)
		}
	}
}
