package overlay

// Patience with a peer that was suspected and then heard from again in
// the same incarnation: it was alive, only slow (a starved process, a
// long pause, a queue), and the suspicion cost a closed link, a bypass,
// a redial and a retransmission for nothing. On a machine short of CPU
// those costs starve more brokers, and suspicions feed on each other
// until nothing rejoins. So each refuted suspicion doubles the silence
// this broker waits before it suspects that peer again, up to
// 1 << maxRefuted failure timeouts, and a peer that stays unsuspected
// for GoneAfterTicks earns one doubling back (docs/protocol.md §6, "a
// false suspicion makes the next one slower"). A crash of that peer is
// then detected later, never missed: silence still suspects it, and the
// guarantee does not depend on how fast a crash is detected, only the
// delay of the publications behind it does.

// maxRefuted bounds the patience: at most four failure timeouts.
const maxRefuted = 2

// patience is the silence, in ticks, after which p is suspected.
func (n *Node) patience(p *peer) int {
	return n.cfg.FailureTicks << p.refuted
}

// refuted records that p, suspected, was heard from again. A new
// incarnation refutes nothing: the suspected one did crash.
func (n *Node) refuted(p *peer) {
	if p.epoch > p.suspEpoch {
		return
	}
	p.refuted = min(p.refuted+1, maxRefuted)
	p.calm = 0
}

// forgive counts a tick of p unsuspected and takes one refutation back
// after GoneAfterTicks of them.
func (n *Node) forgive(p *peer) {
	if p.refuted == 0 || p.suspected {
		return
	}
	p.calm++
	if p.calm >= n.cfg.GoneAfterTicks {
		p.refuted--
		p.calm = 0
	}
}
