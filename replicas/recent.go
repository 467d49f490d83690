package replicas

import "github.com/deltapub/deltapub/message"

// A false suspicion (a replica slow or frozen for FailureTicks, alive) made
// every replica upstream skip it: the publications sent meanwhile never
// reached it, its held ones waited for a hole no one would fill, and it was
// given up (a Gap) although nothing had failed. So each replica keeps the
// last maxRecent publications it sent to each virtual node, and a replica
// heard again in the incarnation that was suspected gets them again; it
// drops the copies it had as duplicates. A suspicion longer than the
// window still loses the older ones (a Gap says so): the baseline keeps no
// log to repair from, as the sources describe it.

// maxRecent bounds the publications remembered per virtual node.
const maxRecent = 4096

// remember records m as sent to virtual node vn.
func (n *Node) remember(vn int, m *message.ReplicaPub) {
	if n.recent == nil {
		n.recent = map[int][]*message.ReplicaPub{}
	}
	l := n.recent[vn]
	if len(l) == maxRecent {
		copy(l, l[1:])
		l = l[:maxRecent-1]
	}
	n.recent[vn] = append(l, m)
}

// resendAfterSuspicion sends p, just heard, the recent publications of its
// virtual node if it was suspected in the incarnation it speaks in now. A
// new incarnation learns its state anew (a restart): nothing is resent.
func (n *Node) resendAfterSuspicion(p *peer) {
	if !p.missed {
		return
	}
	p.missed = false
	if p.epoch != p.missedEpoch || !p.up {
		return
	}
	for _, m := range n.recent[p.vn] {
		n.c.Resent++
		n.send(p, m)
	}
}
