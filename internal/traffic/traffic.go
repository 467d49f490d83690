// Package traffic holds the two liveness rules that the simulator's checker
// and the testbed's verdict share: no broker storms (its control traffic
// stays within a bound relative to its own steady state), and every
// restarted broker rejoins within a bound after the last fault.
//
// The rules are judged on counts, never on wall-clock timing assertions:
// the caller samples, per broker and per message type, how many control
// messages the broker sent in each window (virtual time in the simulator,
// the sampling period in the testbed), and Storms reads those samples.
package traffic

import (
	"fmt"
	"sort"
	"time"
)

// Bound is the storm rule's configuration.
type Bound struct {
	// Window is the length of one sample (the rate is count / Window).
	Window time.Duration
	// Factor: a broker storms when, in one window after the steady phase,
	// its sending of one control message type exceeds Factor times its
	// steady-state control rate (all types together) ...
	Factor float64
	// Floor: ... and also exceeds Floor messages per second (a quiet
	// broker's steady state is a few heartbeats: recovery bursts of a
	// few hundred messages are legitimate).
	Floor float64
}

// DefaultBound is the bound both checkers apply unless told otherwise: a
// retry loop paced at most once per tick (100/s at 10 ms ticks per link)
// stays under it; the unpaced loops it exists to catch ran at 7,500 to
// 20,000 messages per second against ~100 in the steady state.
func DefaultBound() Bound {
	return Bound{Window: time.Second, Factor: 10, Floor: 1000}
}

// Sample is what one broker sent of one control message type in the
// window (At − Window, At].
type Sample struct {
	At     time.Duration
	Broker string
	Type   string
	Count  int64
}

// Storm is one broker's violation of the bound for one message type (the
// worst window).
type Storm struct {
	Broker string
	Type   string
	At     time.Duration // end of the worst window
	Rate   float64       // messages per second in that window
	Steady float64       // the broker's steady-state control rate (all types)
	Limit  float64       // the bound it exceeded
}

func (s Storm) String() string {
	return fmt.Sprintf("storm: %s sent %s at %.0f/s in the window ending %v (steady state %.0f/s, bound %.0f/s)",
		s.Broker, s.Type, s.Rate, s.At.Round(time.Millisecond), s.Steady, s.Limit)
}

// Storms judges samples: the steady state of a broker is its mean control
// rate over the windows that end at or before steadyUntil (typically the
// first fault); every later window is held to the bound. A broker with no
// steady window (it started after steadyUntil) is held to Floor. One Storm
// per (broker, type): the worst window, sorted by broker then type.
func Storms(b Bound, samples []Sample, steadyUntil time.Duration) []Storm {
	if b.Window <= 0 {
		b = DefaultBound()
	}
	secs := b.Window.Seconds()
	type win struct {
		broker string
		at     time.Duration
	}
	steadyTotal := map[string]int64{}
	steadyWins := map[string]map[time.Duration]bool{}
	for _, s := range samples {
		if s.At > steadyUntil || s.At < b.Window {
			continue // a partial first window does not set the steady state
		}
		steadyTotal[s.Broker] += s.Count
		if steadyWins[s.Broker] == nil {
			steadyWins[s.Broker] = map[time.Duration]bool{}
		}
		steadyWins[s.Broker][s.At] = true
	}
	steady := func(broker string) float64 {
		n := len(steadyWins[broker])
		if n == 0 {
			return 0
		}
		return float64(steadyTotal[broker]) / (float64(n) * secs)
	}
	worst := map[[2]string]Storm{}
	for _, s := range samples {
		if s.At <= steadyUntil {
			continue
		}
		st := steady(s.Broker)
		limit := max(b.Factor*st, b.Floor)
		rate := float64(s.Count) / secs
		if rate <= limit {
			continue
		}
		k := [2]string{s.Broker, s.Type}
		if w, ok := worst[k]; !ok || rate > w.Rate {
			worst[k] = Storm{Broker: s.Broker, Type: s.Type, At: s.At, Rate: rate, Steady: st, Limit: limit}
		}
	}
	out := make([]Storm, 0, len(worst))
	for _, s := range worst {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Broker != out[j].Broker {
			return out[i].Broker < out[j].Broker
		}
		return out[i].Type < out[j].Type
	})
	return out
}

// Reading is one broker's cumulative control counters, by type, read at
// At: what callers that read running totals have (the testbed's admin
// endpoint, the simulator's counters).
type Reading struct {
	At     time.Duration
	Broker string
	Counts map[string]int64 // cumulative, by type
}

// Windows turns readings (sorted by time) into per-window samples: the
// difference between consecutive readings of a broker. A counter that
// went down (the broker restarted and counts from zero) starts anew.
func Windows(readings []Reading) []Sample {
	last := map[string]map[string]int64{}
	var out []Sample
	for _, r := range readings {
		prev := last[r.Broker]
		for t, c := range r.Counts {
			p := int64(0)
			if prev != nil {
				p = prev[t]
			}
			if c < p {
				p = 0 // restarted: counts anew
			}
			if d := c - p; d > 0 {
				out = append(out, Sample{At: r.At, Broker: r.Broker, Type: t, Count: d})
			}
		}
		last[r.Broker] = r.Counts
	}
	return out
}

// Rejoin is the rejoin rule's bound: a broker restarted within δ must be
// a joined member again within After of the later of its restart and the
// last fault of the run.
type Rejoin struct {
	After time.Duration
}

// RejoinBound is the default: a recovery waits at most gone_after for an
// awaited peer before completing anyway, and a join retry backs off to at
// most a few failure timeouts; twice both, plus a margin for a loaded
// machine, is ample.
func RejoinBound(goneAfter, failureTimeout time.Duration) Rejoin {
	return Rejoin{After: 2*goneAfter + 10*failureTimeout}
}

// Restart is one restart the rejoin rule judges.
type Restart struct {
	Broker   string
	At       time.Duration // when it was started again
	JoinedAt time.Duration // when it said it was joined; < 0: never (in the run)
}

// NotRejoined lists, as readable reasons, the restarts that did not rejoin
// within the bound: since max(At, lastFault), judged only when the run
// lasted past the deadline (end is the end of the observation).
func (r Rejoin) NotRejoined(restarts []Restart, lastFault, end time.Duration) []string {
	var out []string
	for _, x := range restarts {
		deadline := max(x.At, lastFault) + r.After
		switch {
		case x.JoinedAt >= 0 && x.JoinedAt <= deadline:
		case x.JoinedAt > deadline:
			out = append(out, fmt.Sprintf("rejoin: %s restarted at %v rejoined only at %v (bound %v after %v)",
				x.Broker, x.At.Round(time.Millisecond), x.JoinedAt.Round(time.Millisecond), r.After, max(x.At, lastFault).Round(time.Millisecond)))
		case end >= deadline:
			out = append(out, fmt.Sprintf("rejoin: %s restarted at %v had not rejoined by %v (bound %v after %v)",
				x.Broker, x.At.Round(time.Millisecond), end.Round(time.Millisecond), r.After, max(x.At, lastFault).Round(time.Millisecond)))
		}
	}
	return out
}
