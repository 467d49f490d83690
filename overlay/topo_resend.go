package overlay

import (
	"slices"

	"github.com/deltapub/deltapub/message"
)

// A topology flood (a join, a removal, a leave's repair) gives up on
// targets that are unusable when it passes: the brokers behind them get it
// through the frontier, but the suspected broker itself does not. A
// crashed broker learns the map again when it recovers; a falsely
// suspected one (frozen, cut off) resumes with its old map: it would keep a
// broker that left as a neighbour, wait for it in every subscription flood
// and route around it until gone_after (scenario
// freeze_misses_leave_repair.txt: a broker frozen while its child left).
// So every broker keeps the
// topology floods it started or relayed lately, and sends a peer that
// speaks again after a suspicion those passed on since its silence began,
// for it alone (Hops 0: the brokers behind it were reached). The receiver
// applies each once (topoSeen) and answers a TopoAck nobody waits for.

// recentTopo is one topology flood passed on by this broker.
type recentTopo struct {
	at  int64 // tick
	key floodKey
	msg func(to message.BrokerID, dist int) message.Message
}

// maxRecentTopo bounds the kept floods; at the bound the oldest is
// forgotten (a peer suspected for longer than that many topology changes
// then waits for gone_after, as without this).
const maxRecentTopo = 32

func (n *Node) recordTopo(f *flood) {
	if len(n.floods.recentTopo) == maxRecentTopo {
		copy(n.floods.recentTopo, n.floods.recentTopo[1:])
		n.floods.recentTopo = n.floods.recentTopo[:maxRecentTopo-1]
	}
	n.floods.recentTopo = append(n.floods.recentTopo, recentTopo{at: n.now, key: f.key, msg: f.msg})
}

// resendTopo sends p the topology floods passed on here since p fell
// silent (within gone_after: older ones would have made p gone). Its
// silence began a failure timeout before the suspicion: what was sent to
// it meanwhile waited unprocessed and was lost when the link was closed
// (scenario freeze_misses_repair_before_suspicion.txt: a leave's repair
// passed on just before the suspicion). And if p, the same incarnation,
// had no link since earlier, since then: a flood that found its link
// closed (as unneeded) gave p up when the dial for it failed, and that
// suspicion began after the flood; p, a broker within δ+1 hops of a join,
// never placed the joiner, pointed its subscriptions at the broker before
// it, and waited for that broker when it was cut off instead of bypassing
// it (test TestTopologyFloodResentAfterAFailedDialOfAClosedLink). A
// restarted p rebuilds its map in its recovery: older floods would undo
// what came after them there.
func (n *Node) resendTopo(p *peer) {
	horizon := n.now - int64(n.cfg.GoneAfterTicks)
	since := p.suspAt - int64(n.cfg.FailureTicks) - 1
	if p.upEpoch == p.epoch {
		since = min(since, p.upAt)
	}
	for _, r := range n.floods.recentTopo {
		if r.at < since || r.at < horizon || r.key.origin == p.id {
			continue
		}
		m, ok := r.msg(p.id, 0).(*message.TopoChange)
		if !ok || m.Leaver == p.id || slices.Contains(m.Remove, p.id) {
			continue // about p itself: its own recovery handles that
		}
		c := *m
		c.Hops = 0
		n.send(p.id, &c)
	}
}
