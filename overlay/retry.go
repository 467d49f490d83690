package overlay

import (
	"fmt"

	"github.com/deltapub/deltapub/message"
)

// Every retry of the core is paced here, in ticks, so that the simulator
// runs exactly the pacing the runtime runs (ARCHITECTURE.md, "The simulator
// and the runtime must agree"). docs/operations.md lists each retry, its
// bound and what happens at the bound.

// backoff returns the pause before retry number attempt (0 for the first
// retry): base doubled per attempt, capped at RetryMaxTicks, then drawn
// uniformly from its upper half (seeded jitter, so that brokers restarted
// together do not retry in lockstep). Always at least one tick.
func (n *Node) backoff(base, attempt int) int {
	d := max(base, 1)
	for i := 0; i < attempt && d < n.cfg.RetryMaxTicks; i++ {
		d *= 2
	}
	d = min(d, max(n.cfg.RetryMaxTicks, base))
	lo := max(d/2, 1)
	return lo + n.rng.IntN(d-lo+1)
}

// joining is a joining broker's walk over its joinpoints: each in order
// gets JoinRetryTicks to admit it; a refusal or a failed dial moves on to
// the next at once (another broker), and after a whole round in vain the
// next round waits a backoff (the same brokers would be asked again).
type joining struct {
	points []Peer
	idx    int  // the joinpoint being tried
	wait   int  // ticks left for it to answer
	asked  bool // its JoinRequest is out
	rounds int  // rounds in vain so far
	pause  int  // ticks before the next round starts (0: not pausing)
}

// current is the joinpoint being tried, or nil while pausing (or not
// joining).
func (j *joining) current() *Peer {
	if len(j.points) == 0 || j.pause > 0 || j.idx >= len(j.points) {
		return nil
	}
	return &j.points[j.idx]
}

// isCurrent reports whether id is the joinpoint being tried.
func (j *joining) isCurrent(id message.BrokerID) bool {
	c := j.current()
	return c != nil && c.ID == id
}

// Join joins the overlay through the first joinpoint that admits it (or,
// for a restarted broker, rejoins at its old place). Joinpoints are tried
// in order, each for JoinRetryTicks; see joining.
func (n *Node) Join(joinpoints []Peer) {
	if n.mem.member || len(joinpoints) == 0 {
		if len(joinpoints) == 0 {
			n.notice(NoticeJoinFailed, "", "no joinpoint given")
		}
		return
	}
	n.mem.jn = joining{points: append([]Peer(nil), joinpoints...)}
	n.tryJoinpoint()
}

// nextJoinpoint gives up on the current joinpoint (it refused, its dial
// failed, or it did not answer in time) and tries the next.
func (n *Node) nextJoinpoint() {
	n.mem.jn.idx++
	n.tryJoinpoint()
}

// tryJoinpoint asks the joinpoint at jn.idx (skipping ourselves), or,
// past the last one, pauses before the next round.
func (n *Node) tryJoinpoint() {
	j := &n.mem.jn
	for j.idx < len(j.points) && j.points[j.idx].ID == n.cfg.ID {
		j.idx++
	}
	if j.idx >= len(j.points) {
		j.idx = 0
		j.pause = n.backoff(n.cfg.JoinRetryTicks/2, j.rounds)
		j.rounds++
		n.notice(NoticeJoinFailed, "", fmt.Sprintf("no joinpoint of %d admitted us; round %d, next in %d ticks", len(j.points), j.rounds, j.pause))
		return
	}
	jp := j.points[j.idx]
	j.wait = n.cfg.JoinRetryTicks
	j.asked = false
	if n.peer(jp.ID).up {
		n.askJoin(jp.ID)
		return
	}
	n.dial(Peer{ID: jp.ID, Addr: jp.Addr}, true)
	n.peer(jp.ID).joinDial = true
}

// askJoin sends the current joinpoint our JoinRequest, which it gets
// JoinRetryTicks to answer from now. Counted from the try, a dial that
// took most of it left the joinpoint a few milliseconds; the walk moved on
// and asked the next one too, both admitted us, and the overlay placed us
// under two parents (the later topology flood won at some brokers, and a
// subscription flood stopped at the joinpoint whose map no longer showed
// us as its child: TestJoinAnswerTimedFromTheRequest).
func (n *Node) askJoin(id message.BrokerID) {
	n.mem.jn.asked = true
	n.mem.jn.wait = n.cfg.JoinRetryTicks
	n.send(id, &message.JoinRequest{Node: n.self})
}

// joinTick advances a join by one tick: the pause between rounds, or the
// current joinpoint's time to answer.
func (n *Node) joinTick() {
	j := &n.mem.jn
	if n.mem.member || len(j.points) == 0 {
		return
	}
	if j.pause > 0 {
		if j.pause--; j.pause == 0 {
			n.tryJoinpoint()
		}
		return
	}
	if j.wait--; j.wait <= 0 {
		n.nextJoinpoint()
	}
}
