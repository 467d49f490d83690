// The fuzzer's fault plans: where and when a random run's faults strike
// (crashes and restarts, freezes and stalls, cuts, a graceful leave), drawn
// adversarially near the publishers, the subscribers and the paths between
// them.

package sim

import (
	"math/rand/v2"
	"time"

	"github.com/deltapub/deltapub/message"
)

// fault is one planned fault on one slot: a broker crash (and restart), a
// freeze (and resume) or a link cut (and heal), active in [at, until).
type fault struct {
	kind   string // crash, freeze, slow, cut
	b, b2  message.BrokerID
	at     time.Duration
	until  time.Duration
	rejoin []message.BrokerID
	// stale (crash): the peers hold the old incarnation's links until
	// stale after the restart (RestartOptions.StaleLink; < 0: no).
	stale time.Duration
	// stalls (slow): the stalls, each shorter than the failure timeout,
	// from at on.
	stalls []time.Duration
}

// planLeave picks a broker that no fault touches to leave gracefully,
// next to a fault's broker half of the time (adjacent to a crash, a freeze
// or a cut: the leave and the failure handling interleave), at a random
// instant around the fault wave.
func planLeave(lr *rand.Rand, t Tree, faults []fault, waveAt time.Duration) (message.BrokerID, time.Duration) {
	busy := map[message.BrokerID]bool{}
	for _, f := range faults {
		busy[f.b] = true
		if f.b2 != "" {
			busy[f.b2] = true
		}
	}
	var cands []message.BrokerID
	if lr.IntN(2) == 0 {
		for _, f := range faults {
			for _, nb := range t.Neighbours(f.b) {
				if !busy[nb] {
					cands = append(cands, nb)
				}
			}
		}
	}
	if len(cands) == 0 {
		for _, b := range t.Order {
			if !busy[b] {
				cands = append(cands, b)
			}
		}
	}
	if len(cands) == 0 {
		return "", 0
	}
	at := waveAt - 200*time.Millisecond + time.Duration(lr.IntN(700))*time.Millisecond
	return cands[lr.IntN(len(cands))], at
}

// planFaults places k concurrent faults adversarially: a row of adjacent
// brokers next to a publisher's or a subscriber's edge, or in the middle of
// a path between them, or spread at random; crashes (with restarts, some
// late enough to be declared gone), freezes (false suspicions) and cuts.
// Beyond δ every fault is a crash in one row (a partition).
//
// The draws of real processes come from rr (nil: none, FuzzOptions.Ideal): a row may start at the root
// and a child of it; the crashes of a row may restart together (in any
// order, milliseconds to seconds apart); a restarted broker's peers may
// hold its old links for a while; some freezes are short stalls instead
// (a slow broker, not a dead one), and brokers outside the row may stall
// too. A restarted broker rejoins through Tree.RestartJoinpoints, the
// testbed's policy (some of which may be recovering themselves).
func planFaults(pr, rr *rand.Rand, t Tree, k, delta int, pubs, subs []message.BrokerID, at, failTimeout, maxDown time.Duration, goneTicks int, tick time.Duration) []fault {
	if k == 0 {
		return nil
	}
	p, q := pubs[pr.IntN(len(pubs))], subs[pr.IntN(len(subs))]
	path := t.Path(p, q)
	var inner []message.BrokerID
	if len(path) > 2 {
		inner = path[1 : len(path)-1]
	}
	var row []message.BrokerID
	mode := pr.IntN(4)
	if k > delta {
		mode = pr.IntN(3)
	}
	chosen := map[message.BrokerID]bool{}
	add := func(b message.BrokerID) {
		if !chosen[b] {
			chosen[b] = true
			row = append(row, b)
		}
	}
	ideal := rr == nil
	if !ideal && k >= 2 && rr.IntN(6) == 0 {
		// The root and a child of it (the root's joinpoints are its
		// children, and a child of the root may have no other).
		root := t.Order[0]
		add(root)
		if ch := t.Neighbours(root); len(ch) > 0 {
			add(ch[rr.IntN(len(ch))])
		}
		mode = -1
	}
	switch mode {
	case 0: // next to the publisher
		for _, b := range inner {
			if len(row) < k {
				add(b)
			}
		}
	case 1: // next to the subscriber
		for i := len(inner) - 1; i >= 0 && len(row) < k; i-- {
			add(inner[i])
		}
	case 2: // in the middle
		if len(inner) > k {
			off := (len(inner) - k) / 2
			inner = inner[off:]
		}
		for _, b := range inner {
			if len(row) < k {
				add(b)
			}
		}
	}
	// Extend the row with neighbours (keeping adjacency), then at random.
	for guard := 0; len(row) < k && guard < 1000; guard++ {
		var cands []message.BrokerID
		if mode != 3 && len(row) > 0 {
			for _, b := range row {
				for _, nb := range t.Neighbours(b) {
					if !chosen[nb] {
						cands = append(cands, nb)
					}
				}
			}
		}
		if len(cands) == 0 {
			cands = []message.BrokerID{t.Order[pr.IntN(len(t.Order))]}
		}
		add(cands[pr.IntN(len(cands))])
		if len(row) == len(t.Order) {
			break
		}
	}
	stagger := pr.IntN(2) == 0
	var out []fault
	for _, b := range row {
		f := fault{b: b, at: at}
		if stagger {
			f.at += time.Duration(pr.IntN(300)) * time.Millisecond
		}
		r := pr.IntN(100)
		switch {
		case k > delta || r < 60:
			f.kind = "crash"
			down := 100*time.Millisecond + time.Duration(pr.Int64N(int64(maxDown-100*time.Millisecond)))
			if pr.IntN(10) == 0 {
				// Down longer than gone_after: declared gone, rejoins as new.
				down = time.Duration(goneTicks)*tick + time.Duration(pr.IntN(1000))*time.Millisecond
			}
			f.until = f.at + down
			f.rejoin = t.Neighbours(b)
			if !ideal {
				f.rejoin = t.RestartJoinpoints(b, delta)
			}
			f.stale = -1
			if !ideal && rr.IntN(2) == 0 {
				f.stale = time.Duration(rr.Int64N(int64(3*failTimeout) + 1))
			}
		case r < 85 && !ideal && rr.IntN(3) == 0:
			f.kind = "slow"
			f.stalls = stalls(rr, 1+rr.IntN(3), tick, failTimeout)
			f.until = stallsEnd(f.at, f.stalls, failTimeout)
		case r < 85:
			f.kind = "freeze"
			// A false suspicion: long enough to be suspected, never gone.
			f.until = f.at + failTimeout/2 + time.Duration(pr.Int64N(int64(min(5*failTimeout, time.Duration(goneTicks)*tick/2))))
			if !ideal && rr.IntN(8) == 0 {
				// A stall past gone_after (a starved or stopped process):
				// removed from the tree while alive, it must restart as a
				// new incarnation when it resumes (docs/protocol.md §6).
				f.until = f.at + time.Duration(goneTicks)*tick + failTimeout/2 + time.Duration(rr.Int64N(int64(2*failTimeout)))
			}
		default:
			nb := t.Neighbours(b)
			f.kind, f.b2 = "cut", nb[pr.IntN(len(nb))]
			// Shorter than gone_after/2: a cut peer looks crashed from the
			// other side, and past gone_after it would be declared gone and
			// its subscriptions withdrawn while it is alive -- outside the
			// fault model (a broker down, not a link).
			gone := time.Duration(goneTicks) * tick
			f.until = f.at + 100*time.Millisecond + time.Duration(pr.Int64N(int64(min(2*time.Second, gone/2-100*time.Millisecond))))
		}
		out = append(out, f)
	}
	// The crashes of a row restarting together: from the latest planned
	// restart on, in a random order within a spread of milliseconds to
	// seconds (a restarted broker's joinpoint may still be down, or just
	// up and recovering itself).
	var crashes []int
	for i, f := range out {
		if f.kind == "crash" {
			crashes = append(crashes, i)
		}
	}
	if !ideal && len(crashes) >= 2 && rr.IntN(3) == 0 {
		var base time.Duration
		for _, i := range crashes {
			base = max(base, out[i].until)
		}
		spread := [...]time.Duration{20 * time.Millisecond, 500 * time.Millisecond, 3 * time.Second}[rr.IntN(3)]
		for _, i := range crashes {
			out[i].until = base + time.Duration(rr.Int64N(int64(spread)+1))
		}
	}
	// Brokers outside the row stalling briefly during the wave: slow, not
	// suspected (silence of a stall plus a heartbeat period stays below
	// the failure timeout), so they are no fault of the δ budget.
	if !ideal && rr.IntN(3) == 0 {
		for i := 1 + rr.IntN(3); i > 0; i-- {
			b := t.Order[rr.IntN(len(t.Order))]
			if chosen[b] {
				continue
			}
			chosen[b] = true
			f := fault{kind: "slow", b: b, at: at + time.Duration(rr.IntN(1000))*time.Millisecond,
				stalls: stalls(rr, 1+rr.IntN(3), tick, failTimeout)}
			f.until = stallsEnd(f.at, f.stalls, failTimeout)
			out = append(out, f)
		}
	}
	return out
}

// stallsEnd is when the last of stalls from at ends (one failure timeout
// between two).
func stallsEnd(at time.Duration, stalls []time.Duration, failTimeout time.Duration) time.Duration {
	for _, d := range stalls {
		at += d + failTimeout
	}
	return at
}

// stalls draws n scheduling stalls shorter than half the failure timeout.
func stalls(rr *rand.Rand, n int, tick, failTimeout time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = tick + time.Duration(rr.Int64N(int64(max(failTimeout/2-tick, 1))))
	}
	return out
}
