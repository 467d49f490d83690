package overlay

import (
	"testing"

	"github.com/deltapub/deltapub/message"
)

// joiner returns a node that joins through the given joinpoints, each
// linked at once.
func joiner(t *testing.T, jps ...message.BrokerID) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.Addr, cfg.Seed = "J", "addr-J", 7
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var peers []Peer
	for _, id := range jps {
		peers = append(peers, Peer{ID: id, Addr: "addr-" + string(id)})
	}
	n.Join(peers)
	for _, id := range jps {
		n.LinkUp(id)
	}
	return n
}

// A joinpoint that refuses at once (it is itself recovering) is asked
// again only after a backoff: never in a loop faster than the tick, and
// within the bound RetryMaxTicks sets (the unpaced loop this replaces sent
// one JoinRequest per round trip: thousands per second).
func TestRefusedJoinIsRetriedWithBackoff(t *testing.T) {
	for _, jps := range [][]message.BrokerID{{"P"}, {"P", "Q", "R"}} {
		n := joiner(t, jps...)
		const ticks = 2000
		requests := 0
		var first, last int
		for tick := 0; tick < ticks; tick++ {
			// The joinpoints are alive (they heartbeat, not joined) and
			// refuse every JoinRequest at once, before the next tick.
			for _, id := range jps {
				n.Step(id, &message.Heartbeat{Epoch: 1})
			}
			for round := 0; round < 100; round++ {
				refused := false
				r := n.Ready()
				for _, d := range r.Dials {
					n.LinkUp(d.ID)
				}
				for _, e := range r.Messages {
					if _, ok := e.Msg.(*message.JoinRequest); ok {
						requests++
						if first == 0 {
							first = tick
						}
						last = tick
						n.Step(e.To, &message.JoinReply{Err: "joinpoint " + string(e.To) + " is not a joined member"})
						refused = true
					}
				}
				if !refused {
					break
				}
			}
			n.Tick()
		}
		cfg := n.cfg
		// Each round asks every joinpoint once; rounds are at least half
		// of the first backoff apart, and at most RetryMaxTicks apart.
		minPause := max(cfg.JoinRetryTicks/4, 1)
		if max := len(jps) * (ticks/minPause + 1); requests > max {
			t.Errorf("%d joinpoints: %d JoinRequests in %d ticks, want at most %d", len(jps), requests, ticks, max)
		}
		if min := len(jps) * (ticks / (cfg.RetryMaxTicks + 1)); requests < min {
			t.Errorf("%d joinpoints: %d JoinRequests in %d ticks, want at least %d (retries must go on)", len(jps), requests, ticks, min)
		}
		if last-first < ticks/2 {
			t.Errorf("%d joinpoints: retries stopped at tick %d", len(jps), last)
		}
	}
}

// A restarted broker refused by its first joinpoint goes on to the next
// at once, and is admitted there (a joined member).
func TestRefusalMovesOnToTheNextJoinpoint(t *testing.T) {
	n := joiner(t, "P", "Q")
	asked := map[message.BrokerID]bool{}
	for _, e := range n.Ready().Messages {
		if _, ok := e.Msg.(*message.JoinRequest); ok {
			asked[e.To] = true
		}
	}
	if !asked["P"] || asked["Q"] {
		t.Fatalf("first asked %v, want P only", asked)
	}
	n.Step("P", &message.JoinReply{Err: "joinpoint P is not a joined member"})
	asked = map[message.BrokerID]bool{}
	for _, e := range n.Ready().Messages {
		if _, ok := e.Msg.(*message.JoinRequest); ok {
			asked[e.To] = true
		}
	}
	if !asked["Q"] {
		t.Fatalf("after P refused, asked %v, want Q at once", asked)
	}
	// A late refusal from P (given up on already) does not skip Q.
	n.Step("P", &message.JoinReply{Err: "late"})
	if !n.mem.jn.isCurrent("Q") {
		t.Fatalf("a stale refusal moved the join on: current %+v", n.mem.jn.current())
	}
}

// Failed dials of a peer back off: each waits longer, up to the cap.
func TestDialFailuresBackOff(t *testing.T) {
	n := chainNode(t, 2)
	p := n.peer("C")
	var waits []int
	for i := 0; i < 6; i++ {
		n.dial(Peer{ID: "C"}, false)
		n.DialFailed("C")
		waits = append(waits, p.dialWait)
	}
	cap := max(n.cfg.RetryMaxTicks, n.cfg.FailureTicks)
	for i, w := range waits {
		if w < 1 || w > cap {
			t.Fatalf("wait %d = %d ticks, outside [1, %d]: %v", i, w, cap, waits)
		}
	}
	if waits[len(waits)-1] < cap/2 {
		t.Fatalf("waits %v do not grow toward the cap %d", waits, cap)
	}
	n.onHeartbeat(p, &message.Heartbeat{Epoch: 1, Joined: true})
	if p.dialFails != 0 {
		t.Fatalf("a heartbeat left dialFails at %d", p.dialFails)
	}
}

// A recovering broker asks an awaited peer that is linked and heard but
// has not answered again, paced (at most once per failure timeout), and
// never while that peer's answer is arriving in parts: a large state on a
// loaded machine takes longer than a failure timeout, and re-asked at a
// fixed pace every neighbour sent it again and again.
func TestReaskStateIsPacedAndWaitsForParts(t *testing.T) {
	for _, arriving := range []bool{false, true} {
		n := chainNode(t, 2)
		n.mem.joined = false // recovering
		n.rec.stateWait = map[message.BrokerID]bool{"B": true}
		linked(n, "B")
		if arriving {
			n.assembling = map[message.BrokerID]*assembly{"B": {head: &message.StateReply{}, more: 3}}
		}
		n.Ready()
		asks := 0
		const ticks = 300 // below GoneAfterTicks: the recovery is still waiting
		for i := 0; i < ticks; i++ {
			n.Step("B", &message.Heartbeat{Epoch: 1, Joined: true})
			n.Tick()
			for _, e := range n.Ready().Messages {
				if _, ok := e.Msg.(*message.StateRequest); ok && e.To == "B" {
					asks++
				}
			}
		}
		switch {
		case arriving && asks != 0:
			t.Errorf("asked %d times while the answer was arriving in parts, want 0", asks)
		case !arriving && (asks < 2 || asks > ticks/n.cfg.FailureTicks):
			t.Errorf("asked %d times in %d ticks, want 2..%d", asks, ticks, ticks/n.cfg.FailureTicks)
		}
	}
}
