package sim

import (
	"time"

	"github.com/deltapub/deltapub/internal/traffic"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// The liveness rules of internal/traffic, fed by the simulator: every
// broker's control messages (everything but Pub) counted by type as the
// core outputs them (as the core's own counters.Control, which the
// testbed reads), read once per Config.ControlEvery of virtual time; and
// every restart with the instant its incarnation said it was joined.

// countControl counts one control message of type typ output by b.
func (b *broker) countControl(typ message.Type) {
	if int(typ) >= len(b.ctl) {
		b.ctl = append(b.ctl, make([]int64, int(typ)+1-len(b.ctl))...)
	}
	b.ctl[typ]++
}

// SentControl is what broker id's core has output so far of every control
// message type (cumulative over its incarnations: the simulator's counter
// never restarts from zero, unlike a real process's).
func (s *Sim) SentControl(id message.BrokerID) map[string]int64 {
	b, ok := s.brokers[id]
	if !ok {
		return nil
	}
	out := map[string]int64{}
	for t, n := range b.ctl {
		if n > 0 {
			out[message.Type(t).String()] = n
		}
	}
	return out
}

// ControlReadings are the readings of every broker's SentControl taken
// once per Config.ControlEvery, in time order (traffic.Windows turns them
// into samples).
func (s *Sim) ControlReadings() []traffic.Reading { return s.readings }

// readControl takes one reading of every broker and queues the next.
func (s *Sim) readControl() {
	for _, b := range s.order {
		s.readings = append(s.readings, traffic.Reading{At: s.now, Broker: string(b.id), Counts: s.SentControl(b.id)})
	}
	s.schedule(s.now+s.cfg.ControlEvery, s.readControl)
}

// Restarts lists every restart of the run with when that incarnation said
// it was joined (JoinedAt < 0: not yet). A restart whose incarnation
// crashed again before it joined is left out: the later restart is
// judged instead.
func (s *Sim) Restarts() []traffic.Restart {
	out := make([]traffic.Restart, 0, len(s.restarts))
	for _, r := range s.restarts {
		if !r.dropped {
			out = append(out, r.Restart)
		}
	}
	return out
}

type restartRec struct {
	traffic.Restart
	dropped bool
}

// noteFault records the instant of a fault (crash, restart, freeze,
// resume, cut, heal, leave): the storm rule's steady state ends at the
// first, the rejoin rule counts from the last.
func (s *Sim) noteFault() {
	if s.firstFault < 0 {
		s.firstFault = s.now
	}
	s.lastFault = s.now
}

// SetSteadyUntil ends the storm rule's steady state at t instead of at
// the first fault (a driver whose first faults are part of building the
// overlay, as the fuzzer's crash during a join).
func (s *Sim) SetSteadyUntil(t time.Duration) { s.steadyUntil = t }

// FaultTimes are the instants of the first and the last fault (-1, -1:
// none yet).
func (s *Sim) FaultTimes() (first, last time.Duration) { return s.firstFault, s.lastFault }

// noteJoined marks b's pending restart, if any, joined now.
func (s *Sim) noteJoined(b *broker) {
	if b.restart >= 0 {
		s.restarts[b.restart].JoinedAt = s.now
		b.restart = -1
	}
}

// Storms judges the control readings so far by traffic.DefaultBound, the
// steady state being the windows before SetSteadyUntil's instant, by
// default the first fault (none: every window is steady, nothing is
// judged).
func (s *Sim) Storms() []traffic.Storm {
	until := s.firstFault
	if s.steadyUntil >= 0 {
		until = s.steadyUntil
	}
	if until < 0 {
		until = s.now
	}
	return traffic.Storms(traffic.DefaultBound(), traffic.Windows(s.readings), until)
}

// RejoinBound is traffic.RejoinBound for this run's gone_after and
// failure timeout.
func (s *Sim) RejoinBound() traffic.Rejoin {
	return traffic.RejoinBound(time.Duration(s.cfg.Core.GoneAfterTicks)*s.cfg.Tick, time.Duration(s.cfg.Core.FailureTicks)*s.cfg.Tick)
}

// NotRejoined lists the restarts that did not rejoin within RejoinBound
// (judged only once the run lasted past a restart's deadline).
func (s *Sim) NotRejoined() []string {
	return s.RejoinBound().NotRejoined(s.Restarts(), s.lastFault, s.now)
}

// RejoinDeadline is the instant by which every restart still waiting to
// rejoin can be judged (0: none is waiting): a driver runs until then so
// that the rejoin check is not vacuous.
func (s *Sim) RejoinDeadline() time.Duration {
	var d time.Duration
	for _, r := range s.Restarts() {
		if r.JoinedAt < 0 {
			d = max(d, max(r.At, s.lastFault)+s.RejoinBound().After)
		}
	}
	return d
}

// AllRejoined reports whether every restart so far has rejoined.
func (s *Sim) AllRejoined() bool {
	for _, r := range s.Restarts() {
		if r.JoinedAt < 0 {
			return false
		}
	}
	return true
}

// CheckTraffic records, as problems of the log, the storms of the run and,
// with rejoin (runs within δ), the restarts that did not rejoin in time.
func (s *Sim) CheckTraffic(rejoin bool) {
	for _, st := range s.Storms() {
		s.log.problem(&s.log.Storms, "%s", st.String())
	}
	if rejoin {
		for _, p := range s.NotRejoined() {
			s.log.problem(&s.log.NotRejoined, "%s", p)
		}
	}
}

// checkPhase records an illegal change of b's membership phase (called
// after every input of b's node, before its outputs are carried out).
func (s *Sim) checkPhase(b *broker) {
	ph := b.node.Phase()
	if ph == b.phase {
		return
	}
	if !overlay.LegalPhaseChange(b.phase, ph) {
		s.log.problem(&s.log.Phases, "phase: %s (epoch %d) went from %s to %s at %v", b.id, b.epoch, b.phase, ph, s.now)
	}
	b.phase = ph
}
