// Brokers of a simulated overlay: their life cycle (add, bootstrap, join, crash,
// restart, stall, freeze, resume) and the node each one drives.

package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/deltapub/deltapub/internal/storage"
	"github.com/deltapub/deltapub/internal/traffic"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

type brokerState uint8

const (
	stateUp brokerState = iota
	stateFrozen
	stateCrashed
)

func (s brokerState) String() string {
	return [...]string{"up", "frozen", "crashed"}[s]
}

type broker struct {
	id    message.BrokerID
	addr  string
	node  Node
	inc   int // incarnation counter: bumped on crash, invalidates events
	epoch uint64
	state brokerState
	// pending holds the inputs that reached the broker while frozen, in
	// arrival order; they are processed when it resumes.
	pending     []event
	everCrashed bool
	joined      bool
	everJoined  bool // some incarnation was a member
	clients     []*client
	maxQueue    int
	// ctl counts the control messages b's core output, by type (over all
	// incarnations); restart is the index in Sim.restarts of b's restart
	// that has not joined yet (-1: none).
	ctl     []int64
	restart int
	// phase is the membership phase of the current incarnation as last
	// seen (checkPhase).
	phase overlay.Phase
	// place is what the runtime keeps in the broker's data directory
	// (Node.Place, saved while it is a joined member): where a restart
	// with RestartOptions.Place rejoins first.
	place []message.BrokerID
	// linkTo mirrors Sim.links for the links of this broker, by peer
	// (send looks a link up per message: one small, hot map by name
	// instead of hashing the pair). Set where Sim.links is.
	linkTo map[message.BrokerID]*link
	// log is the broker's publication log (Config.Core.Durable), kept
	// across its crashes; durable lists the acknowledged publications of
	// its publishers when it crashed (durable.go).
	log  *storage.MemoryLog
	held *storage.MemoryHeld
	// heldPending: held changes applied but not synced (durable.go
	// syncHeld), synced at heldSyncAt.
	heldPending []overlay.HeldChanges
	heldSyncAt  time.Duration
	durable     []*PubRecord
	// slowDials are this incarnation's slow handshakes in flight
	// (SlowHandshake), by peer: asked records that the core dialled again
	// after it was told the dial failed.
	slowDials map[message.BrokerID]*slowDial
}

// AddBroker creates broker id with a fresh node (epoch 1); it does nothing
// until Bootstrap or Join.
func (s *Sim) AddBroker(id message.BrokerID) error {
	if id == "" {
		return errors.New("sim: empty broker id")
	}
	if _, dup := s.brokers[id]; dup {
		return fmt.Errorf("sim: broker %s already exists", id)
	}
	b := &broker{id: id, addr: "sim://" + string(id), epoch: 0, restart: -1}
	s.brokers[id] = b
	s.order = append(s.order, b)
	return s.start(b)
}

// start creates a new node for b (a new incarnation, a larger epoch) and
// starts its ticks.
func (s *Sim) start(b *broker) error {
	b.epoch++
	c := s.cfg.Core
	c.ID, c.Addr, c.Epoch, c.Seed = b.id, b.addr, b.epoch, s.rng.Int64()
	c.Tick = s.cfg.Tick
	// The runtime's rule: with a log on disk, what durable subscriptions
	// hold is kept too (the held log, durable.go).
	c.PersistHeld = c.Durable && !c.MemoryLog && c.KeepAwayTicks > 0
	if s.cfg.MaxFrame > 0 {
		c.MaxFrame = s.cfg.MaxFrame
	}
	n, err := s.cfg.NewNode(c)
	if err != nil {
		s.err = fmt.Errorf("sim: creating node %s: %w", b.id, err)
		return s.err
	}
	b.node = n
	b.phase = overlay.PhaseNew
	b.state = stateUp
	b.joined = false
	b.pending = nil
	var phase time.Duration
	if s.cfg.TickPhases {
		phase = time.Duration(s.rng.Int64N(int64(s.cfg.Tick)))
	}
	inc := b.inc
	s.schedule(s.now+phase+s.cfg.Tick, func() { s.tick(b, inc) })
	return nil
}

// tick is a tick of incarnation inc of b: delivered to its node if b is
// up, then the next one is queued in s.ticks, Tick later, unless that
// incarnation crashed: its clock stops.
func (s *Sim) tick(b *broker, inc int) {
	if b.inc != inc {
		return
	}
	if b.state == stateUp {
		b.node.Tick()
		s.flush(b)
		s.syncHeld(b) // durable.go
	}
	s.seq++
	s.ticks.push(tickEntry{at: s.now + s.cfg.Tick, seq: s.seq, b: b, inc: inc})
}

func (s *Sim) broker(id message.BrokerID) (*broker, error) {
	b, ok := s.brokers[id]
	if !ok {
		return nil, fmt.Errorf("sim: unknown broker %s", id)
	}
	return b, nil
}

// Bootstrap makes id the first broker of the overlay.
func (s *Sim) Bootstrap(id message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	s.tracef("%s bootstrap", id)
	s.input(b, 0, func() { b.node.Bootstrap() })
	return nil
}

// Join makes id join through the given joinpoints (the first that answers).
func (s *Sim) Join(id message.BrokerID, joinpoints ...message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	peers := make([]overlay.Peer, 0, len(joinpoints))
	for _, j := range joinpoints {
		jb, err := s.broker(j)
		if err != nil {
			return err
		}
		peers = append(peers, overlay.Peer{ID: jb.id, Addr: jb.addr})
	}
	s.tracef("%s join via %v", id, joinpoints)
	s.input(b, 0, func() { b.node.Join(peers) })
	return nil
}

// Joined reports whether id's current incarnation has announced "joined"
// or reports Joined.
func (s *Sim) Joined(id message.BrokerID) bool {
	b, ok := s.brokers[id]
	if !ok || !b.isJoined() {
		return false
	}
	s.noteJoined(b) // a node that reports Joined without a notice
	return true
}

// isJoined is Joined for a known broker (polled every tick while it joins).
func (b *broker) isJoined() bool {
	if b.state == stateCrashed {
		return false
	}
	if !b.joined && b.node.Joined() {
		b.joined, b.everJoined = true, true
	}
	return b.joined
}

// State is "up", "frozen" or "crashed".
func (s *Sim) State(id message.BrokerID) string {
	if b, ok := s.brokers[id]; ok {
		return b.state.String()
	}
	return "unknown"
}

// Brokers lists the brokers in creation order.
func (s *Sim) Brokers() []message.BrokerID {
	out := make([]message.BrokerID, len(s.order))
	for i, b := range s.order {
		out[i] = b.id
	}
	return out
}

// Crash kills a broker: its state and in-flight messages are lost, its
// clients are disconnected (and excluded from the guarantees), and its
// peers are told LinkDown only after Config.LinkDownAfter, if ever.
func (s *Sim) Crash(id message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	if b.state == stateCrashed {
		return fmt.Errorf("sim: crash %s: already crashed", id)
	}
	s.tracef("%s CRASH", id)
	s.noteFault()
	if b.restart >= 0 {
		// Crashed again before it rejoined: the next restart is judged.
		s.restarts[b.restart].dropped = true
		b.restart = -1
	}
	if b.node != nil {
		if p := b.node.Place(); p != nil {
			b.place = b.place[:0]
			for _, jp := range p {
				b.place = append(b.place, jp.ID)
			}
		}
	}
	s.crashDurable(b) // before its clients are excluded (durable.go)
	b.state = stateCrashed
	b.inc++
	b.node = nil
	b.pending = nil
	b.everCrashed = true
	for _, c := range b.clients {
		c.dead = true
		s.log.excludeClient(c)
		if c.dur != nil {
			s.durSessionGone(c) // the subscriber is not: it reconnects elsewhere
		}
	}
	b.clients = nil
	for _, l := range s.linksOf(b.id) {
		if l.broken {
			continue
		}
		l.broken = true
		s.reportDown(l, b.id)
	}
	return nil
}

// Restart starts a crashed broker again with its state lost and a larger
// epoch, rejoining through joinpoints (typically its former neighbours).
func (s *Sim) Restart(id message.BrokerID, joinpoints ...message.BrokerID) error {
	return s.RestartWith(id, RestartOptions{Joinpoints: joinpoints, StaleLink: -1})
}

// RestartOptions are how a broker restarts (RestartWith).
type RestartOptions struct {
	Joinpoints []message.BrokerID
	// StaleLink ≥ 0: the broker comes back on the same address while its
	// peers still hold links of its old incarnation not yet reported down;
	// each such peer is told LinkDown StaleLink after the restart (QUIC
	// notices by a stateless reset or the idle timeout), and what it sends
	// on the link until then is lost. < 0: only Config.LinkDownAfter, if
	// ever, tells them.
	StaleLink time.Duration
	// Resolve: the runtime's resolution of bare joinpoint addresses
	// (runtime.Runtime.resolveJoinpoints) before the core joins: every
	// joinpoint is dialled at once, and the core is given all that
	// answered, in order (a recovering broker answers a dial too); none
	// answering, the round is repeated after a pause that doubles up to
	// 5 s. Without it the joinpoints are known by name ("ID@addr", as the
	// testbed gives them) and the core dials them itself.
	Resolve bool
	// Place: the broker has a data directory: it rejoins through the place
	// it saved there first (broker.place), then through Joinpoints, as
	// the runtime does (runtime.Runtime.joinList).
	Place bool
	// Log: the broker finds its publication log again (Config.Core.Durable;
	// durable.go); otherwise the log is lost with the crash.
	Log bool
}

// RestartWith is Restart with options.
func (s *Sim) RestartWith(id message.BrokerID, o RestartOptions) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	if b.state != stateCrashed {
		return fmt.Errorf("sim: restart %s: it is %s, not crashed", id, b.state)
	}
	if o.StaleLink >= 0 {
		s.tracef("%s RESTART epoch %d (its old links stale for %v)", id, b.epoch+1, o.StaleLink)
	} else {
		s.tracef("%s RESTART epoch %d", id, b.epoch+1)
	}
	s.noteFault()
	var named []message.BrokerID // by name: not resolved (the runtime's ID@addr)
	if o.Place && len(b.place) > 0 {
		named = slices.Clone(b.place)
		o.Joinpoints = placeFirst(b.place, o.Joinpoints)[len(named):]
		s.tracef("%s rejoins through its place %v, then %v", id, named, o.Joinpoints)
	}
	if err := s.start(b); err != nil {
		return err
	}
	s.restoreDurable(b, o.Log)
	b.restart = len(s.restarts)
	s.restarts = append(s.restarts, restartRec{Restart: traffic.Restart{Broker: string(id), At: s.now, JoinedAt: -1}})
	if o.StaleLink >= 0 {
		for _, l := range s.linksOf(id) {
			p := l.bA
			if p == b {
				p = l.bB
			}
			if s.links[l.k] != l || !l.up || l.told[l.endOf(p.id)] || p.inc != l.incOf(p.id) {
				continue // replaced, closed, reported, or its peer restarted too
			}
			l := l
			s.input(p, o.StaleLink, func() { s.staleDown(l, p, id, "stale: the peer restarted") })
		}
	}
	if o.Resolve {
		for _, j := range o.Joinpoints {
			if _, err := s.broker(j); err != nil {
				return err
			}
		}
		s.resolveJoin(b, named, o.Joinpoints, 0, 0)
		return nil
	}
	return s.Join(id, append(named, o.Joinpoints...)...)
}

// placeFirst is the runtime's list of joinpoints for a broker with a
// saved place: the place, then the others not in it, at most 16.
func placeFirst(place, others []message.BrokerID) []message.BrokerID {
	out := slices.Clone(place)
	for _, j := range others {
		if !slices.Contains(place, j) {
			out = append(out, j)
		}
	}
	return out[:min(len(out), 16)]
}

// resolveJoin runs one round of b's runtime resolving its joinpoints
// (RestartOptions.Resolve): every one dialled at once, the core started
// with those that answered once every dial is answered, or another round
// after pause.
func (s *Sim) resolveJoin(b *broker, named, jps []message.BrokerID, round int, pause time.Duration) {
	inc := b.inc
	answered := make([]bool, len(jps))
	pending := len(jps)
	done := func() {
		if pending--; pending > 0 || b.inc != inc {
			return
		}
		var up []message.BrokerID
		for i, ok := range answered {
			if ok {
				up = append(up, jps[i])
			}
		}
		if len(named)+len(up) > 0 {
			s.tracef("%s: joinpoints %v answered (round %d)", b.id, up, round+1)
			_ = s.Join(b.id, append(slices.Clone(named), up...)...)
			return
		}
		s.tracef("%s: no joinpoint of %v answered (round %d); next round in %v", b.id, jps, round+1, pause)
		s.schedule(s.now+pause, func() {
			if b.inc == inc {
				s.resolveJoin(b, named, jps, round+1, min(2*pause, 5*time.Second))
			}
		})
	}
	if pause == 0 {
		failTimeout := time.Duration(s.cfg.Core.FailureTicks) * s.cfg.Tick
		pause = min(max(failTimeout, 200*time.Millisecond), 5*time.Second)
	}
	if len(jps) == 0 {
		if len(named) > 0 {
			_ = s.Join(b.id, named...)
		}
		return
	}
	reqAt := s.now
	for i, j := range jps {
		t := s.brokers[j]
		k := keyOf(b.id, t.id)
		s.stats.Dials++
		s.schedule(s.now+2*s.cfg.LinkDelay, func() {
			if b.inc != inc {
				return
			}
			// A broker that left has exited: nothing answers at its address.
			gone := t.state == stateCrashed || s.HasLeft(t.id)
			lost := t.state == stateUp && !gone && !s.cuts[k] && s.cfg.DialFailLive > 0 && s.rng.IntN(1000) < s.cfg.DialFailLive
			if t.state == stateUp && !gone && !s.cuts[k] && !lost && t != b {
				answered[i] = true
				done()
				return
			}
			s.stats.DialsFailed++
			failAt := reqAt + s.cfg.DialTimeout
			if s.cfg.DialFailDraw && gone || lost {
				failAt = s.now + time.Duration(s.rng.Int64N(int64(reqAt+s.cfg.DialTimeout-s.now)+1))
			}
			s.schedule(failAt, done)
		})
	}
}

// Stall freezes a broker for d (a scheduling stall of a slow process: it
// loses nothing, its peers see silence) and resumes it.
func (s *Sim) Stall(id message.BrokerID, d time.Duration) error {
	if err := s.Freeze(id); err != nil {
		return err
	}
	b := s.brokers[id]
	inc := b.inc
	s.At(s.now+d, func() {
		if b.inc == inc && b.state == stateFrozen {
			_ = s.Resume(id)
		}
	})
	return nil
}

// Freeze stops a broker without losing anything: inputs wait and are
// processed in order when it resumes; its peers see silence.
func (s *Sim) Freeze(id message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	if b.state != stateUp {
		return fmt.Errorf("sim: freeze %s: it is %s", id, b.state)
	}
	s.tracef("%s FREEZE", id)
	s.noteFault()
	b.state = stateFrozen
	return nil
}

// Resume unfreezes a broker and processes, in order, what reached it while
// it was frozen.
func (s *Sim) Resume(id message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	if b.state != stateFrozen {
		return fmt.Errorf("sim: resume %s: it is %s, not frozen", id, b.state)
	}
	s.tracef("%s RESUME (%d inputs waiting)", id, len(b.pending))
	s.noteFault()
	b.state = stateUp
	pending := b.pending
	b.pending = nil
	// Processed synchronously: an event already queued for this instant
	// must not overtake inputs that arrived earlier on the same link.
	for i := range pending {
		s.run(&pending[i])
	}
	return nil
}
