// The simulated network: links between brokers, dials and handshakes, cuts and
// heals, and messages in flight (delays, loss when a link breaks, the wire
// codec when Config.Wire is set).

package sim

import (
	"fmt"
	"sort"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

type linkKey struct{ a, b message.BrokerID }

func keyOf(x, y message.BrokerID) linkKey {
	if x > y {
		x, y = y, x
	}
	return linkKey{x, y}
}

// link is one established connection between two broker incarnations.
type link struct {
	id     uint64
	k      linkKey
	incA   int
	incB   int
	bA, bB *broker // the brokers of k.a and k.b (brokers are never removed)
	since  time.Duration
	up     bool // not closed or reported down
	broken bool // cut or closed: nothing more arrives
	// replaced: a newer link took k's place in Sim.links (links are never
	// removed from it), i.e. s.links[l.k] != l, without hashing the key.
	replaced bool
	last     [2]time.Duration
	// upAt is when each direction's sender is told LinkUp (Config.AcceptDelay):
	// it sends nothing on the link before.
	upAt [2]time.Duration
	// told: the end (0: k.a, 1: k.b) was told LinkDown for this link.
	told [2]bool
	// q holds the messages in flight in each direction behind the one in
	// the event heap (see fifo).
	q [2]fifo
}

// Cut breaks the link between a and b (both stay up): in-flight messages
// are lost, dials between them fail until Heal.
func (s *Sim) Cut(a, b message.BrokerID) error {
	if _, err := s.broker(a); err != nil {
		return err
	}
	if _, err := s.broker(b); err != nil {
		return err
	}
	k := keyOf(a, b)
	if s.cuts[k] {
		return fmt.Errorf("sim: cut %s-%s: already cut", a, b)
	}
	s.tracef("CUT %s-%s", a, b)
	s.noteFault()
	s.cuts[k] = true
	if l := s.links[k]; l != nil && !l.broken {
		l.broken = true
		s.reportDown(l, "")
	}
	return nil
}

// Heal ends a cut; the nodes must dial again to use the link.
func (s *Sim) Heal(a, b message.BrokerID) error {
	k := keyOf(a, b)
	if !s.cuts[k] {
		return fmt.Errorf("sim: heal %s-%s: not cut", a, b)
	}
	s.tracef("HEAL %s-%s", a, b)
	s.noteFault()
	delete(s.cuts, k)
	return nil
}

// linksOf lists b's links in a deterministic order.
func (s *Sim) linksOf(id message.BrokerID) []*link {
	var out []*link
	for k, l := range s.links {
		if k.a == id || k.b == id {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// reportDown tells the surviving end(s) of a broken link LinkDown after the
// idle timeout, unless the link has been replaced meanwhile. dead names the
// crashed end ("" for a cut).
func (s *Sim) reportDown(l *link, dead message.BrokerID) {
	if s.cfg.LinkDownAfter < 0 {
		return
	}
	for _, end := range []message.BrokerID{l.k.a, l.k.b} {
		if end == dead {
			continue
		}
		b := s.brokers[end]
		peer := l.k.a
		if peer == end {
			peer = l.k.b
		}
		s.input(b, s.cfg.LinkDownAfter, func() { s.staleDown(l, b, peer, "idle timeout") })
	}
}

// staleDown tells b, an end of the broken link l, LinkDown for it (at the
// idle timeout, or when a restarted peer resets it), unless the link was
// replaced, closed, or already reported to b.
func (s *Sim) staleDown(l *link, b *broker, peer message.BrokerID, why string) {
	end := l.endOf(b.id)
	if s.links[l.k] != l || !l.up || l.told[end] {
		return
	}
	l.told[end] = true
	s.tracef("%s linkdown %s (%s)", b.id, peer, why)
	b.node.LinkDown(peer)
}

// endOf is 0 for l.k.a, 1 for l.k.b.
func (l *link) endOf(id message.BrokerID) int {
	if id == l.k.a {
		return 0
	}
	return 1
}

func (l *link) incOf(id message.BrokerID) int {
	if id == l.k.a {
		return l.incA
	}
	return l.incB
}

func (s *Sim) alive(l *link) bool {
	if l == nil || !l.up || l.broken || len(s.cuts) > 0 && s.cuts[l.k] {
		return false
	}
	a, b := l.bA, l.bB
	return a.inc == l.incA && b.inc == l.incB && a.state != stateCrashed && b.state != stateCrashed
}

func (s *Sim) delay() time.Duration {
	d := s.cfg.LinkDelay
	if s.cfg.LinkJitter > 0 {
		d += time.Duration(s.rng.Int64N(int64(s.cfg.LinkJitter)))
	}
	return d
}

type slowDial struct {
	inc   int // the incarnation that dialled
	asked bool
}

func (s *Sim) dial(b *broker, to message.BrokerID) {
	if sd := b.slowDials[to]; sd != nil && sd.inc == b.inc {
		sd.asked = true // the runtime's dial in flight answers (runtime.Runtime.dial)
		return
	}
	s.stats.Dials++
	inc := b.inc
	reqAt := s.now
	t, ok := s.brokers[to]
	if !ok || to == b.id {
		s.stats.DialsFailed++
		s.tracef("%s dial %s: no such broker", b.id, to)
		s.input(b, 0, func() { b.node.DialFailed(to) })
		return
	}
	k := keyOf(b.id, to)
	s.schedule(s.now+2*s.cfg.LinkDelay, s.dialDone(b, t, to, inc, reqAt, k))
}

// dialDone is the completion of b's dial to t (to) requested at reqAt.
func (s *Sim) dialDone(b, t *broker, to message.BrokerID, inc int, reqAt time.Duration, k linkKey) func() {
	return func() {
		if b.inc != inc {
			return
		}
		lostHandshake := t.state == stateUp && !s.cuts[k] && s.cfg.DialFailLive > 0 && s.rng.IntN(1000) < s.cfg.DialFailLive
		if t.state != stateUp || s.cuts[k] || lostHandshake {
			s.stats.DialsFailed++
			failAt := reqAt + s.cfg.DialTimeout // a frozen or cut-off peer: the timeout
			if s.cfg.DialFailDraw && t.state == stateCrashed || lostHandshake {
				failAt = s.now + time.Duration(s.rng.Int64N(int64(reqAt+s.cfg.DialTimeout-s.now)+1))
			}
			switch {
			case lostHandshake:
				s.tracef("%s dial %s: failed (lost handshake), answered at %s", b.id, to, fmtTime(failAt))
			case s.cfg.DialFailDraw:
				s.tracef("%s dial %s: failed (%s, cut=%v), answered at %s", b.id, to, t.state, s.cuts[k], fmtTime(failAt))
			default:
				s.tracef("%s dial %s: failed (%s, cut=%v)", b.id, to, t.state, s.cuts[k])
			}
			s.scheduleFor(failAt, b, func() { b.node.DialFailed(to) })
			return
		}
		if d, ok := s.slowNext[[2]message.BrokerID{b.id, to}]; ok {
			delete(s.slowNext, [2]message.BrokerID{b.id, to})
			if d > s.cfg.DialTimeout {
				s.slowHandshake(b, t, to, inc, reqAt, k, reqAt+d)
				return
			}
		}
		if s.cfg.SlowHandshake > 0 && s.slowRng.IntN(1000) < s.cfg.SlowHandshake {
			failAt := reqAt + s.cfg.DialTimeout
			s.slowHandshake(b, t, to, inc, reqAt, k, failAt+time.Duration(s.slowRng.Int64N(int64(s.cfg.DialPatience-s.cfg.DialTimeout)+1)))
			return
		}
		s.linkDialled(b, t, to, reqAt, k)
	}
}

// SlowDial makes the next dial from a to b a handshake that takes d (a
// starved machine): longer than the dial timeout, the core is told
// DialFailed at the timeout and the link comes up at d (as the runtime's
// slow handshakes, SlowHandshake), unless b is down or cut off by then.
func (s *Sim) SlowDial(a, b message.BrokerID, d time.Duration) {
	if s.slowNext == nil {
		s.slowNext = map[[2]message.BrokerID]time.Duration{}
	}
	s.slowNext[[2]message.BrokerID{a, b}] = d
}

// slowHandshake is a dial of a live peer whose handshake outlasts the dial
// timeout: DialFailed at the timeout, the link at upAt (SlowHandshake,
// SlowDial).
func (s *Sim) slowHandshake(b, t *broker, to message.BrokerID, inc int, reqAt time.Duration, k linkKey, upAt time.Duration) {
	failAt := reqAt + s.cfg.DialTimeout
	s.tracef("%s dial %s: slow handshake, answered at %s, up at %s", b.id, to, fmtTime(failAt), fmtTime(upAt))
	sd := &slowDial{inc: inc}
	if b.slowDials == nil {
		b.slowDials = map[message.BrokerID]*slowDial{}
	}
	b.slowDials[to] = sd
	s.scheduleFor(failAt, b, func() { b.node.DialFailed(to) })
	s.schedule(upAt, func() {
		if b.inc != inc {
			return
		}
		if b.slowDials[to] == sd {
			delete(b.slowDials, to)
		}
		if t.state != stateUp || s.cuts[k] {
			s.tracef("%s dial %s: slow handshake failed (%s, cut=%v; asked again: %v)", b.id, to, t.state, s.cuts[k], sd.asked)
			if sd.asked {
				s.scheduleFor(s.now, b, func() { b.node.DialFailed(to) })
			}
			return
		}
		s.linkDialled(b, t, to, reqAt, k)
	})
}

// linkDialled brings up the link b dialled to t at reqAt (unless one is
// up already) and tells both ends.
func (s *Sim) linkDialled(b, t *broker, to message.BrokerID, reqAt time.Duration, k linkKey) {
	{
		if l := s.links[k]; s.alive(l) {
			if l.since >= reqAt {
				// Both dialled at once: the transport keeps one link and
				// each side sees exactly one LinkUp for it.
				s.tracef("%s dial %s: merged with simultaneous dial", b.id, to)
				return
			}
			s.tracef("%s dial %s: already up", b.id, to)
			s.scheduleFor(s.now, b, func() { b.node.LinkUp(to) })
			return
		}
		s.nextLink++
		l := &link{id: s.nextLink, k: k, since: s.now, up: true}
		if k.a == b.id {
			l.incA, l.incB, l.bA, l.bB = b.inc, t.inc, b, t
		} else {
			l.incA, l.incB, l.bA, l.bB = t.inc, b.inc, t, b
		}
		var acc time.Duration // t, the acceptor, is told LinkUp acc later
		if s.cfg.AcceptDelay > 0 {
			acc = time.Duration(s.rng.Int64N(int64(s.cfg.AcceptDelay) + 1))
		}
		toT := l.endOf(b.id) // the direction from b to t
		l.last[toT] = s.now + acc
		l.upAt[1-toT] = s.now + acc
		old := s.links[k]
		if old != nil {
			old.replaced = true
		}
		s.links[k] = l
		for _, x := range [2]*broker{b, t} {
			if x.linkTo == nil {
				x.linkTo = map[message.BrokerID]*link{}
			}
		}
		b.linkTo[to] = l
		t.linkTo[b.id] = l
		if acc > 0 {
			s.tracef("link %s-%s up (#%d, dialled by %s, accepted %v later)", b.id, to, l.id, b.id, acc)
		} else {
			s.tracef("link %s-%s up (#%d, dialled by %s)", b.id, to, l.id, b.id)
		}
		// An end that still holds the link l replaces (of the same
		// incarnation, never told it went down) is told LinkDown first,
		// as the runtime does when a new link replaces an old one.
		for _, x := range [2]struct {
			b    *broker
			peer message.BrokerID
			at   time.Duration
		}{{b, to, s.now}, {t, b.id, s.now + acc}} {
			if e := old.endOfOrNeg(x.b.id); s.cfg.ReplacedDown && e >= 0 && old.up && !old.told[e] && old.incOf(x.b.id) == x.b.inc {
				old.told[e] = true
				x := x
				s.scheduleFor(x.at, x.b, func() {
					s.tracef("%s linkdown %s (replaced by a new link)", x.b.id, x.peer)
					x.b.node.LinkDown(x.peer)
				})
			}
		}
		s.scheduleFor(s.now, b, func() { b.node.LinkUp(to) })
		s.scheduleFor(s.now+acc, t, func() { t.node.LinkUp(b.id) })
	}
}

func (s *Sim) closeLink(b *broker, to message.BrokerID) {
	k := keyOf(b.id, to)
	l := s.links[k]
	if l == nil || !l.up || l.incOf(b.id) != b.inc {
		return
	}
	s.tracef("%s close %s", b.id, to)
	wasAlive := s.alive(l)
	l.broken = true
	l.up = false
	if t := s.brokers[to]; wasAlive {
		// The peer learns of a graceful close after one link delay.
		s.input(t, s.cfg.LinkDelay, func() {
			if s.links[k] == l {
				t.node.LinkDown(b.id)
			}
		})
	}
}

func (s *Sim) send(b *broker, env overlay.Envelope) {
	typ := env.Msg.Type()
	name := s.countType(typ)
	if !message.IsPublication(typ) {
		b.countControl(typ) // what the core output, sent or not (as its own counters)
	}
	l := b.linkTo[env.To] // s.links[keyOf(b.id, env.To)]
	// dir 0: b is l.k.a (brokers are unique by id: pointers compare).
	dir, inc := 0, 0
	if l != nil {
		inc = l.incA
		if l.bA != b {
			dir, inc = 1, l.incB
		}
	}
	if l == nil || !l.up || inc != b.inc || s.now < l.upAt[dir] {
		s.stats.NoLinkDrops++
		s.tracef("%s -> %s DROPPED (no link) %s", b.id, env.To, name)
		return
	}
	s.msgCount[typ]++
	at := s.now + s.delay()
	if at < l.last[dir] {
		at = l.last[dir] // FIFO per link direction
	}
	l.last[dir] = at
	t := l.bB // the other end (brokers are never removed: s.brokers[env.To])
	if dir == 1 {
		t = l.bA
	}
	if s.cfg.Trace != nil {
		s.tracef("%s -> %s %s %+v", b.id, env.To, name, env.Msg)
	}
	msg := env.Msg
	var frame []byte
	if s.cfg.Wire {
		var err error
		if s.enc == nil {
			s.enc = wire.NewEncoder()
		}
		if frame, err = s.enc.AppendFrame(nil, msg); err != nil {
			s.log.problem(&s.log.Errors, "%s -> %s %s: cannot encode: %v", b.id, env.To, name, err)
			return
		}
	}
	d := s.newDelivery()
	d.l, d.dir, d.to, d.msg = l, int32(dir), t, msg
	if frame != nil {
		d.frame = frame
	}
	s.enqueue(at, t, nil, d)
}

// deliver hands a message in flight to its receiver t (an up broker of
// the incarnation it was sent to), unless its link broke meanwhile.
func (s *Sim) deliver(t *broker, d *delivery) {
	msg := d.msg
	from := d.l.k.a // the sender (see send)
	if d.dir == 1 {
		from = d.l.k.b
	}
	if d.l.replaced || !s.alive(d.l) { // d.l was s.links[keyOf(from, t.id)] when sent
		s.stats.InFlightLost++
		s.tracef("%s -> %s LOST in flight %s", from, t.id, s.countType(msg.Type()))
		s.releaseDelivery(d)
		return
	}
	if s.cfg.Wire { // (then send set d.frame; not read otherwise: its cache line stays cold)
		limit := len(d.frame) + 16
		if s.cfg.MaxFrame > 0 {
			limit = s.cfg.MaxFrame // a real reader refuses a larger frame
		}
		m, _, err := wire.Decode(d.frame, limit)
		if err != nil {
			s.log.problem(&s.log.Errors, "%s -> %s %s: cannot decode: %v", from, t.id, s.countType(msg.Type()), err)
			s.releaseDelivery(d)
			return
		}
		msg = m
	}
	s.releaseDelivery(d)
	t.node.Step(from, msg)
}

// endOfOrNeg is endOf for a possibly nil link (-1 when nil).
func (l *link) endOfOrNeg(id message.BrokerID) int {
	if l == nil {
		return -1
	}
	return l.endOf(id)
}
