package testbed

import (
	"fmt"
	"sort"
	"time"

	"github.com/deltapub/deltapub/internal/traffic"
)

// The verdict's two liveness rules, shared with the simulator's
// checker through internal/traffic:
//
//   - storm: per broker and control message type, no sampling window
//     after the first fault exceeds traffic.DefaultBound relative to the
//     broker's own steady state before it (a join retried in a tight loop
//     sent 10,000-20,000 messages a second where the steady state is ~100);
//   - rejoin: every broker restarted (and not crashed, frozen or gone
//     again since) reports joined within traffic.RejoinBound(gone_after,
//     failure_timeout) after the later of its restart and the run's last
//     fault.
//
// Both are judged on what the backends read of each broker, every sampling
// period: its cumulative control messages sent by type (the core's
// Status().Counters.Control) and whether it is joined.

// BrokerReading is one reading of one broker's liveness counters.
type BrokerReading struct {
	At     time.Duration
	Broker string
	// Control is the broker's cumulative count of control messages sent,
	// by message type name; nil when it could not be read (down, frozen,
	// its admin endpoint did not answer).
	Control map[string]int64
	// Joined: the broker said it is a full member of the overlay.
	Joined bool
	// Incarnation numbers the broker's starts; a new one counts its
	// control messages from zero.
	Incarnation int
}

// maxReadings bounds the memory of the readings (a reading per broker per
// sampling period: 2,000 brokers for 8 minutes at 1 s).
const maxReadings = 1_000_000

// Reading records a broker reading; At also extends the time the run was
// observed until (the rejoin rule judges a deadline only once passed).
func (r *Recorder) Reading(br BrokerReading) {
	r.mu.Lock()
	if len(r.readings) < maxReadings {
		r.readings = append(r.readings, br)
	}
	if br.At > r.observedUntil {
		r.observedUntil = br.At
	}
	r.mu.Unlock()
}

// StormRecord is one storm in summary.json.
type StormRecord struct {
	Broker string  `json:"broker"`
	Type   string  `json:"type"`
	AtMs   float64 `json:"at_ms"`  // end of the worst window
	Rate   float64 `json:"rate"`   // messages per second in it
	Steady float64 `json:"steady"` // the broker's steady-state control rate
	Limit  float64 `json:"limit"`  // the bound it exceeded
	Text   string  `json:"text"`
}

// restartRec is a restart the rejoin rule judges.
type restartRec struct {
	broker string
	at     time.Duration
}

// stormBound is the storm rule's bound for a plan: the default factor and
// floor over windows of the sampling period.
func stormBound(p *Plan) traffic.Bound {
	b := traffic.DefaultBound()
	b.Window = p.Spec.Metrics.Sample.Duration
	return b
}

// rejoinBound is the rejoin rule's bound for a plan.
func rejoinBound(p *Plan) traffic.Rejoin {
	return traffic.RejoinBound(p.Spec.Overlay.GoneAfter.Duration, p.Spec.Overlay.FailureTimeout.Duration)
}

// controlSamples turns readings into per-window samples for
// traffic.Storms. Unread readings are skipped (the next one then covers a
// longer interval); a new incarnation counts anew. A window longer than
// the sampling period (a sample late on a loaded machine) is scaled to the
// period, so that its rate is not overstated; a shorter one is left as is.
func controlSamples(readings []BrokerReading, window time.Duration) []traffic.Sample {
	rs := append([]BrokerReading(nil), readings...)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].At < rs[j].At })
	var tr []traffic.Reading
	inc := map[string]int{}
	prevAt := map[string]time.Duration{}
	type key struct {
		broker string
		at     time.Duration
	}
	dt := map[key]time.Duration{}
	for _, x := range rs {
		if x.Control == nil {
			continue
		}
		if i, seen := inc[x.Broker]; seen && i != x.Incarnation {
			tr = append(tr, traffic.Reading{At: x.At, Broker: x.Broker, Counts: map[string]int64{}})
		}
		inc[x.Broker] = x.Incarnation
		if p, ok := prevAt[x.Broker]; ok {
			dt[key{x.Broker, x.At}] = x.At - p
		}
		prevAt[x.Broker] = x.At
		tr = append(tr, traffic.Reading{At: x.At, Broker: x.Broker, Counts: x.Control})
	}
	samples := traffic.Windows(tr)
	for i, s := range samples {
		if d := dt[key{s.Broker, s.At}]; d > window {
			samples[i].Count = int64(float64(s.Count) * float64(window) / float64(d))
		}
	}
	return samples
}

// judgeLiveness applies the storm and rejoin rules to v (under r.mu).
func judgeLiveness(p *Plan, r *Recorder, tl *faultTimeline, v *Verdict) {
	v.Storms = []StormRecord{}
	if len(r.readings) == 0 {
		return // a backend (or a test) that reads nothing: not judged
	}
	steadyUntil := r.observedUntil
	if tl.hasFaults {
		steadyUntil = tl.firstFault
	}
	for _, s := range traffic.Storms(stormBound(p), controlSamples(r.readings, p.Spec.Metrics.Sample.Duration), steadyUntil) {
		v.Storms = append(v.Storms, StormRecord{Broker: s.Broker, Type: s.Type, AtMs: round3(ms(s.At)), Rate: round3(s.Rate), Steady: round3(s.Steady), Limit: round3(s.Limit), Text: s.String()})
		v.Reasons = append(v.Reasons, s.String())
	}
	restarts := judgedRestarts(tl)
	if len(restarts) == 0 {
		return
	}
	if tl.down[len(tl.down)-1] > p.Spec.Overlay.Delta {
		r.notes = append(r.notes, fmt.Sprintf("rejoin not judged: the run ended with %d failures, beyond δ = %d", tl.down[len(tl.down)-1], p.Spec.Overlay.Delta))
		return
	}
	var judged []traffic.Restart
	for _, x := range restarts {
		joined := time.Duration(-1)
		for _, br := range r.readings {
			if br.Broker == x.broker && br.Joined && br.At >= x.at && (joined < 0 || br.At < joined) {
				joined = br.At
			}
		}
		judged = append(judged, traffic.Restart{Broker: x.broker, At: x.at, JoinedAt: joined})
	}
	v.NotRejoined = rejoinBound(p).NotRejoined(judged, tl.lastFault, r.observedUntil)
	v.Reasons = append(v.Reasons, v.NotRejoined...)
}

// judgedRestarts are the last restart of every broker that is up at the
// end of the run: one crashed again, frozen for good or gone since is not
// expected to be a member.
func judgedRestarts(tl *faultTimeline) []restartRec {
	var out []restartRec
	for b, at := range tl.restarted {
		if _, frozen := tl.frozenTail[b]; frozen {
			continue
		}
		out = append(out, restartRec{b, at})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].broker < out[j].broker })
	return out
}

// rejoinWait reports whether a restarted broker the rejoin rule judges has
// not been seen joined yet while its bound has not passed in the
// readings, and the latest such bound: the run is observed until then.
func (r *Recorder) rejoinWait(p *Plan) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tl := newTimeline(p, r.faults, r.manual)
	after := rejoinBound(p).After
	latest, wait := time.Duration(0), false
	for _, x := range judgedRestarts(tl) {
		joined := false
		for _, br := range r.readings {
			if br.Broker == x.broker && br.Joined && br.At >= x.at {
				joined = true
				break
			}
		}
		if d := max(x.at, tl.lastFault) + after; !joined && d > r.observedUntil {
			latest, wait = max(latest, d), true
		}
	}
	return latest, wait
}
