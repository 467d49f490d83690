// Partitions beyond δ: holes in a tree direction, the gap floods that tell
// the subscriptions on this side what may be missing, and the resync of a
// direction once it is reachable again (PROTOCOL §8).

package overlay

import (
	"fmt"
	"sort"

	"github.com/deltapub/deltapub/message"
)

type gapKey struct {
	origin message.BrokerID
	seq    uint64
}

// checkHoles detects, per tree direction, a hole longer than δ (every
// broker of some branch down to δ+1 hops unusable: the overlay is
// partitioned there, beyond the guarantee, PROTOCOL §8) and notifies the
// subscriptions on this side with Gaps. See docs/protocol.md for what a
// Gap promises.
func (n *Node) checkHoles() {
	if !n.mem.joined {
		return
	}
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		_, hole := n.topo.Frontier(nb, n.unusable)
		if hole && !n.gaps.holes[nb] {
			n.gaps.holes[nb] = true
			reason := fmt.Sprintf("more than %d brokers failed in a row beyond %s (seen from %s)", n.cfg.Delta, nb, n.cfg.ID)
			n.notice(NoticeGap, nb, reason)
			targets, _ := n.floodTargets(nb, false)
			for _, g := range n.gapFloods(n.gapRanges(nb), reason) {
				n.rememberGap(gapKey{n.cfg.ID, g.Seq})
				n.deliverGap(g)
				for _, t := range targets {
					n.send(t.id, g)
				}
			}
		} else if !hole && n.gaps.holes[nb] {
			delete(n.gaps.holes, nb)
			n.notice(NoticeGap, nb, "healed")
			n.gaps.resyncDirs[nb] = true
		}
	}
	// Subscriptions made on the far side of a partition never reached us
	// (their floods stop at the hole): ask the brokers of that side for
	// their state once it is reachable again.
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if !n.gaps.resyncDirs[nb] {
			continue
		}
		front, skipped, hole := n.topo.FrontierSkipped(nb, n.unusable)
		if hole || len(skipped) > 0 {
			continue
		}
		delete(n.gaps.resyncDirs, nb)
		for _, f := range front {
			n.send(f, &message.StateRequest{Node: n.self, Resync: true})
		}
	}
}

// gapRanges lists what may be missing: for every source known to arrive
// from direction dir, everything after the highest sequence number
// accepted here; and, for sources never seen here, every source.
func (n *Node) gapRanges(dir message.BrokerID) []message.GapRange {
	var out []message.GapRange
	for src, st := range n.fwd.seen {
		if st.dir == dir {
			out = append(out, message.GapRange{Source: src, From: st.seq + 1})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Source.Publisher != out[j].Source.Publisher {
			return out[i].Source.Publisher < out[j].Source.Publisher
		}
		return out[i].Source.Epoch < out[j].Source.Epoch
	})
	out = append(out, message.GapRange{From: 1})
	return out
}

func (n *Node) rememberGap(k gapKey) {
	n.gaps.seen[k] = true
	n.gaps.order = append(n.gaps.order, k)
	if len(n.gaps.order) > maxGapSeen {
		delete(n.gaps.seen, n.gaps.order[0])
		n.gaps.order = n.gaps.order[1:]
	}
}

func (n *Node) deliverGap(g *message.GapFlood) {
	for _, e := range n.table.Entries() {
		if !e.Local {
			continue
		}
		d := n.dsub.subs[e.Sub]
		for _, r := range g.Ranges {
			n.counters.Gaps++
			gap := &message.Gap{Sub: e.Sub, Source: r.Source, From: r.From, To: r.To, Reason: g.Reason}
			if d != nil && d.live {
				n.durNotify(e.Sub, d, gap) // dursub.go
				continue
			}
			n.toClient(e.Client, gap)
		}
	}
}

func (n *Node) onGapFlood(from message.BrokerID, g *message.GapFlood) {
	k := gapKey{g.Origin, g.Seq}
	if n.gaps.seen[k] || !n.mem.member {
		return
	}
	n.rememberGap(k)
	n.deliverGap(g)
	dir := n.direction(from)
	if dir == "" {
		dir = from
	}
	targets, _ := n.floodTargets(dir, false)
	for _, t := range targets {
		n.send(t.id, g)
	}
}

// onwardPerHeartbeat bounds the subscriptions a resync floods on per
// heartbeat interval.
const onwardPerHeartbeat = 50

// floodOnward floods on, paced, the subscriptions a resync taught us
// (onStateReply): at most onwardPerHeartbeat per heartbeat interval.
// Rule (docs/protocol.md §8, "a resync floods on, paced"): a broker that
// recovered without a side's state re-learns the whole side at once, 2,600
// subscriptions in the srds09 run, and flooded each on to every other
// neighbour in the same tick, which confirmed each at once: 7,560
// SubFloods a second from one broker, and 2,000 SubConfirms a second from
// each neighbour, on a machine already short of CPU (a storm by the
// testbed's rule). The brokers behind us almost always hold these
// subscriptions already (they were flooded before the failure); the
// flood on is for the few made while a side was cut off beyond δ, whose
// own floods resume when the hole heals (floodsResend), so pacing delays
// nothing the guarantee counts on.
func (n *Node) floodOnward() {
	if len(n.gaps.onward) == 0 || n.now%int64(n.cfg.HeartbeatTicks) != 0 {
		return
	}
	k := min(onwardPerHeartbeat, len(n.gaps.onward))
	batch := n.gaps.onward[:k]
	n.gaps.onward = n.gaps.onward[k:]
	if len(n.gaps.onward) == 0 {
		n.gaps.onward = nil
	}
	for _, sub := range batch {
		delete(n.gaps.onwardSet, sub)
		e, ok := n.table.Get(sub)
		if !ok {
			continue // withdrawn meanwhile: its withdrawal flooded on instead
		}
		fk := floodKey{kind: fkSub, sub: sub}
		if _, busy := n.floods.pending[fk]; !busy {
			if r := n.dsub.routes[sub]; r != nil && r.df != nil {
				// Durable: flooded on with the position its flood
				// carried, so that the PHBs behind answer it (catch-up,
				// or a Gap for what they no longer hold). Flooded on
				// plain, what its subscriber missed from them was lost
				// without a Gap (test
				// TestResyncFloodsDurableSubscriptionOnAsDurable).
				n.durFloods()[sub] = r.df
			}
			n.startFlood(&flood{key: fk, except: e.Dir, budget: -1})
		}
	}
}
