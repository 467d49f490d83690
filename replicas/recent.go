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

// recentPubs is the last maxRecent publications sent to one virtual node,
// a ring once full (each publication sent costs one slot write).
type recentPubs struct {
	buf  []*message.ReplicaPub
	next int // once full: the oldest, overwritten next
}

func (r *recentPubs) add(m *message.ReplicaPub) {
	if len(r.buf) < maxRecent {
		r.buf = append(r.buf, m)
		return
	}
	r.buf[r.next] = m
	r.next = (r.next + 1) % maxRecent
}

// each calls f on the publications, oldest first.
func (r *recentPubs) each(f func(*message.ReplicaPub)) {
	for i := range r.buf {
		f(r.buf[(r.next+i)%len(r.buf)])
	}
}

// remember records m as sent to virtual node vn.
func (n *Node) remember(vn int, m *message.ReplicaPub) {
	if n.recent == nil {
		n.recent = map[int]*recentPubs{}
	}
	r := n.recent[vn]
	if r == nil {
		r = &recentPubs{}
		n.recent[vn] = r
	}
	r.add(m)
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
	if r := n.recent[p.vn]; r != nil {
		r.each(func(m *message.ReplicaPub) {
			n.c.Resent++
			n.send(p, m)
		})
	}
}
