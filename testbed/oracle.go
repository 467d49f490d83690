package testbed

import (
	"fmt"
	"sort"
	"time"

	"github.com/deltapub/deltapub/internal/oracle"
	"github.com/deltapub/deltapub/message"
)

// The oracle decides which deliveries the guarantees of PROTOCOL.md §1
// require, from the filters, the confirmation times, the publications and
// the faults as they were applied, and compares them with what arrived.
//
// A delivery of publication p to subscription k (confirmed at c, on edge
// broker E) is required when all of these hold:
//
//  1. p was acknowledged by its edge broker and published at t ≥ c;
//  2. p matches k's filter;
//  3. at no time in [t, t+w] were more than δ brokers down (crashed or
//     frozen; a cut link counts as one failure), where w is the fault
//     window (metrics.fault_window): a publication still in flight when
//     the overlay goes beyond δ may be lost without breaking §1;
//  4. E stays up for k: if E crashes at x after c (or freezes at x and is
//     never resumed), only publications with t < x − w are required, since
//     later ones may have been in flight when the session broke;
//  5. the publisher's edge broker did not crash in [t, t+w] (the
//     publication may have existed only in its queue).
//
// A graceful leave of broker L at x (a `leave` fault) is not a failure: L
// drains and the tree is repaired around it, so it never counts towards δ
// in rule 3. For L's own subscribers it ends the guarantee as a crash of
// their edge does in rule 4 (their subscriptions end at x; publications
// from x − w on may have been in flight to L): they are counted apart, as
// left_subscriptions. L's publishers stop at x: publications L refused
// (never acknowledged) are not required, and counted as
// refused_publications; every publication L acknowledged is required for
// every other subscriber (rule 5 does not apply: L hands on what it holds
// before it goes). A leave that did not complete cleanly (a non-zero exit,
// a timeout) fails the run: the oracle's assumptions would not hold.
//
// Everything else that matches is "extra": allowed, not required. Whatever
// the faults: a second delivery of p to k is a duplicate, a delivery of a
// lower sequence number of a source after a higher one is a reordering, and
// a delivery that does not match k's filter (or of an unknown publication)
// is spurious. Beyond δ a required-looking loss is reported apart, as
// lost_beyond_delta, and as "silent" when no Gap notice covers it (a Gap
// naming no publisher covers every source). These checks are
// internal/oracle's, shared with the simulator's checker; the rules above,
// what is owed, are the testbed's.

// Verdict is the oracle's result.
type Verdict struct {
	Verdict            string   `json:"verdict"` // PASS or FAIL
	Reasons            []string `json:"reasons,omitempty"`
	Publications       int      `json:"publications"`
	Acked              int      `json:"acked"`
	Subscriptions      int      `json:"subscriptions"`
	Confirmed          int      `json:"confirmed"`
	ExpectedDeliveries int      `json:"expected_deliveries"`
	Deliveries         int      `json:"deliveries"`
	Lost               int      `json:"lost"`
	Duplicates         int      `json:"duplicates"`
	Reordered          int      `json:"reordered"`
	Spurious           int      `json:"spurious"`
	Extra              int      `json:"extra"`
	LostBeyondDelta    int      `json:"lost_beyond_delta"`
	SilentBeyondDelta  int      `json:"silent_loss_beyond_delta"`
	LostExamples       []string `json:"lost_examples,omitempty"`
	// Released: required deliveries to durable subscriptions never made,
	// covered by a Gap of the publisher's edge's retention (a bounded
	// range of one source): allowed, not in Lost.
	Released int `json:"released_by_retention,omitempty"`
	// LeftSubscriptions are confirmed subscriptions whose edge broker left
	// gracefully: from the leave on they are not owed anything.
	LeftSubscriptions int `json:"left_subscriptions,omitempty"`
	// RefusedPublications are publications of publishers at a broker that
	// left, never acknowledged (refused with ErrLeaving or cut short):
	// not required.
	RefusedPublications int `json:"refused_publications,omitempty"`
	// Storms are the brokers whose control traffic exceeded the storm
	// bound after the first fault (liveness.go); NotRejoined the restarted
	// brokers that were not members again within the rejoin bound.
	Storms      []StormRecord `json:"storms"`
	NotRejoined []string      `json:"not_rejoined,omitempty"`
}

type restartAt struct {
	at      time.Duration
	logLost bool // restart_clean, or a publication log kept in memory only
}

// faultTimeline answers "what was down when".
type faultTimeline struct {
	bounds []time.Duration // segment starts, sorted; segment k is [bounds[k], bounds[k+1])
	down   []int           // failures (down brokers + cut links) in segment k
	// per broker, the times it crashed and the time it froze for good
	crashes    map[string][]time.Duration
	frozenTail map[string]time.Duration // frozen at the end of the run, since
	left       map[string]time.Duration // graceful leaves: when each broker left
	// restarted is, per broker up at the end, its last restart (a crash
	// or leave since removes it): what the rejoin rule judges.
	restarted map[string]time.Duration
	// restarts: every restart of each broker in time order, and whether
	// it lost the data directory (restart_clean).
	restarts map[string][]restartAt
	// firstFault and lastFault are the times of the first and the last
	// fault (scheduled or manual), if hasFaults.
	firstFault, lastFault time.Duration
	hasFaults             bool
}

func newTimeline(p *Plan, applied []AppliedFault, manual []manualFault) *faultTimeline {
	type step struct {
		at      time.Duration
		actions []Action
	}
	var steps []step
	at := appliedAt(p, applied)
	for i, f := range p.Faults {
		steps = append(steps, step{at[i], f.Actions})
	}
	for _, m := range manual {
		steps = append(steps, step{m.at, []Action{m.a}})
	}
	sort.SliceStable(steps, func(a, b int) bool { return steps[a].at < steps[b].at })
	tl := &faultTimeline{bounds: []time.Duration{0}, down: []int{0}, crashes: map[string][]time.Duration{}, frozenTail: map[string]time.Duration{}, left: map[string]time.Duration{}, restarted: map[string]time.Duration{}, restarts: map[string][]restartAt{}}
	state := map[string]brokerState{}
	frozeAt := map[string]time.Duration{}
	cuts := map[[2]string]bool{}
	for _, st := range steps {
		if len(st.actions) > 0 && !sessionsOnly(st.actions) {
			if !tl.hasFaults {
				tl.firstFault, tl.hasFaults = st.at, true
			}
			tl.lastFault = st.at
		}
		for _, a := range st.actions {
			switch a.Kind {
			case ActCrash:
				state[a.Broker] = stCrashed
				tl.crashes[a.Broker] = append(tl.crashes[a.Broker], st.at)
				delete(tl.restarted, a.Broker)
			case ActRestart:
				state[a.Broker] = stUp
				tl.restarted[a.Broker] = st.at
				tl.restarts[a.Broker] = append(tl.restarts[a.Broker], restartAt{st.at, a.Clean || p.Spec.Overlay.Durability == "memory"})
			case ActResume:
				state[a.Broker] = stUp
			case ActFreeze:
				state[a.Broker] = stFrozen
				frozeAt[a.Broker] = st.at
			case ActCut:
				cuts[pairOf(a.Broker, a.Peer)] = true
			case ActHeal:
				delete(cuts, pairOf(a.Broker, a.Peer))
			case ActPartition:
				// The brokers cut off count as down, as frozen ones do.
				for _, m := range a.Members {
					if bs, ok := state[m]; !ok || bs == stUp {
						state[m] = stFrozen
						frozeAt[m] = st.at
					}
				}
			case ActHealPartition:
				for _, m := range a.Members {
					if state[m] == stFrozen {
						state[m] = stUp
					}
				}
			case ActLeave:
				// Not a failure: the tree is repaired around the
				// leaver (it no longer counts at all).
				delete(state, a.Broker)
				delete(tl.restarted, a.Broker)
				if _, ok := tl.left[a.Broker]; !ok {
					tl.left[a.Broker] = st.at
				}
			}
		}
		n := len(cuts)
		for _, st := range state {
			if st != stUp {
				n++
			}
		}
		if p.Layout != nil {
			n = p.maxDownPerVNode(state)
		}
		if st.at == tl.bounds[len(tl.bounds)-1] {
			tl.down[len(tl.down)-1] = n
		} else {
			tl.bounds = append(tl.bounds, st.at)
			tl.down = append(tl.down, n)
		}
	}
	for b, st := range state {
		if st == stFrozen {
			tl.frozenTail[b] = frozeAt[b]
		}
	}
	return tl
}

// appliedAt is when each fault of the plan was applied (its planned time
// if it was not, or failed).
func appliedAt(p *Plan, applied []AppliedFault) []time.Duration {
	at := make([]time.Duration, len(p.Faults))
	for i, f := range p.Faults {
		at[i] = f.At
	}
	for _, a := range applied {
		if a.Index >= 0 && a.Index < len(at) && a.Err == "" {
			at[a.Index] = a.At
		}
	}
	return at
}

// restartedWithData reports whether b's first restart after t kept its
// data directory and its publication log there.
func (tl *faultTimeline) restartedWithData(b string, t time.Duration) bool {
	for _, r := range tl.restarts[b] {
		if r.at >= t {
			return !r.logLost
		}
	}
	return false
}

// logLostBeforeCatchup reports whether a durable subscriber without a
// session during the intervals away could have needed a publication of
// edge e, published at t, from e's log when e lost it: e crashed at some
// x ≥ t and its next start had no log (kept in memory only, a clean
// restart, or none), and the subscriber was away after t and came back
// (or never did) no earlier than one fault window w before x. Its
// catch-up then had nothing to read, as the simulator models it (a
// publisher's edge that loses its log excludes what it had).
func (tl *faultTimeline) logLostBeforeCatchup(e string, t, w time.Duration, away []awayInterval) bool {
	for _, x := range tl.crashes[e] {
		if x < t || tl.restartedWithData(e, x) {
			continue
		}
		for _, a := range away {
			if (!a.back || a.to > t) && a.from < x+w && (!a.back || a.to >= x-w) {
				return true
			}
		}
	}
	return false
}

func pairOf(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// maxDown is the largest number of simultaneous failures in [from, to].
func (tl *faultTimeline) maxDown(from, to time.Duration) int {
	k := sort.Search(len(tl.bounds), func(i int) bool { return tl.bounds[i] > from }) - 1
	m := 0
	for ; k < len(tl.bounds) && tl.bounds[k] <= to; k++ {
		if tl.down[k] > m {
			m = tl.down[k]
		}
	}
	return m
}

// crashedIn reports whether b crashed at some time in [from, to].
func (tl *faultTimeline) crashedIn(b string, from, to time.Duration) bool {
	for _, x := range tl.crashes[b] {
		if x >= from && x <= to {
			return true
		}
	}
	return false
}

// edgeLoss is when the edge broker b stopped serving a session confirmed at
// c: its first crash after c, when it froze for good, or when it left the
// overlay; ok=false if never.
func (tl *faultTimeline) edgeLoss(b string, c time.Duration) (time.Duration, bool) {
	best, ok := time.Duration(0), false
	for _, x := range tl.crashes[b] {
		if x >= c && (!ok || x < best) {
			best, ok = x, true
		}
	}
	if x, frozen := tl.frozenTail[b]; frozen && (!ok || x < best) {
		best, ok = x, true
	}
	if x, left := tl.left[b]; left && (!ok || x < best) {
		best, ok = x, true
	}
	return best, ok
}

// maxLostExamples bounds the examples of lost deliveries in the summary.
const maxLostExamples = 10

// Judge runs the oracle over a finished run.
func Judge(p *Plan, r *Recorder) Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	delta := p.tolerance()
	w := p.Spec.Metrics.FaultWindow.Duration
	tl := newTimeline(p, r.faults, r.manual)
	pubBroker := map[string]string{}
	for _, pb := range p.Publishers {
		pubBroker[pb.Name] = pb.Broker
	}
	v := Verdict{Publications: len(r.pubList), Deliveries: len(r.dels) + int(r.dropped.Load())}
	for _, pr := range r.pubList {
		if pr.Acked {
			v.Acked++
		} else if _, left := tl.left[pubBroker[pr.Publisher]]; left {
			v.RefusedPublications++
		}
	}
	// The deliveries are judged by internal/oracle (shared with the
	// simulator's checker), on the subscriptions numbered in plan order
	// and the publications in time order; what is owed is decided here.
	var subs []oracle.Sub
	var refs []subKey
	flat := make([][]int, len(p.Subscribers)) // (subscriber, sub) → index in subs
	for si, sb := range p.Subscribers {
		for k, f := range sb.Parsed {
			flat[si] = append(flat[si], len(subs))
			subs = append(subs, oracle.Sub{Filter: f})
			refs = append(refs, subKey{si, k})
		}
	}
	subOf := func(subscriber, sub int) int {
		if subscriber < 0 || subscriber >= len(flat) || sub < 0 || sub >= len(flat[subscriber]) {
			return -1
		}
		return flat[subscriber][sub]
	}
	pubs := append([]*PubRecord(nil), r.pubList...)
	sort.SliceStable(pubs, func(i, j int) bool { return pubs[i].At < pubs[j].At })
	in := oracle.Input{
		Subs:          subs,
		Pubs:          make([]oracle.Pub, len(pubs)),
		NumDeliveries: len(r.dels),
		Delivery: func(i int) oracle.Delivery {
			d := &r.dels[i]
			return oracle.Delivery{Sub: subOf(d.Subscriber, d.Sub), Pub: d.Pub}
		},
	}
	index := make(map[message.PubID]int, len(pubs))
	for i, pr := range pubs {
		in.Pubs[i] = oracle.Pub{ID: pr.ID, Attrs: pr.Attrs, Owable: pr.Acked}
		if _, dup := index[pr.ID]; !dup {
			index[pr.ID] = i
		}
	}
	in.Index = func(id message.PubID) (int, bool) { i, ok := index[id]; return i, ok }
	for _, g := range r.gaps {
		in.Gaps = append(in.Gaps, oracle.Gap{Sub: subOf(g.Subscriber, g.Sub), Gap: message.Gap{Source: g.Source, From: g.From, To: g.To}})
	}
	// Per subscription: its confirmation, and when its edge broker
	// stopped serving it.
	type owed struct {
		conf, loss time.Duration
		lossOK     bool
		durable    bool
		away       []awayInterval
	}
	applied := appliedAt(p, r.faults)
	aways := durableAway(p, func(i int) time.Duration { return applied[i] })
	ow := make([]owed, len(subs))
	unconfirmed := 0
	for i, ref := range refs {
		sb := p.Subscribers[ref.subscriber]
		v.Subscriptions++
		c, ok := r.confs[ref]
		if !ok {
			// Unconfirmed is a failure only while the edge broker was
			// there to confirm it.
			if _, lost := tl.edgeLoss(sb.Broker, 0); !lost {
				unconfirmed++
			}
			continue
		}
		v.Confirmed++
		subs[i].Owed = true
		ow[i].conf = c
		ow[i].loss, ow[i].lossOK = tl.edgeLoss(sb.Broker, c)
		if sb.Durable {
			// The durable rule (durable.go): its edges' crashes and its
			// disconnects end nothing; only a session gone for good at
			// the end of the run does, as an edge's loss (its last time
			// away has no end).
			ow[i].durable = true
			ow[i].away = aways[sb.Name]
			ow[i].loss, ow[i].lossOK = 0, false
			if a := ow[i].away; len(a) > 0 && !a[len(a)-1].back {
				ow[i].loss, ow[i].lossOK = a[len(a)-1].from, true
			}
		}
		if x, left := tl.left[sb.Broker]; left && x >= c {
			v.LeftSubscriptions++
		}
	}
	in.Class = func(si, pi int) oracle.Class {
		pr, o := pubs[pi], &ow[si]
		switch {
		case pr.At < o.conf:
			return oracle.NotOwed
		case o.lossOK && pr.At >= o.loss-w:
			return oracle.Allowed
		case tl.crashedIn(pubBroker[pr.Publisher], pr.At, pr.At+w) && (!o.durable || !tl.restartedWithData(pubBroker[pr.Publisher], pr.At)):
			// A durable subscription is owed what its publisher's edge
			// logged, if that edge comes back with its log.
			return oracle.Allowed
		case o.durable && tl.logLostBeforeCatchup(pubBroker[pr.Publisher], pr.At, w, o.away):
			return oracle.Allowed
		case tl.maxDown(pr.At, pr.At+w) > delta:
			return oracle.Beyond
		}
		return oracle.Required
	}
	retained := map[int]bool{} // durable subscriptions: losses a retention Gap covers
	for _, g := range in.Gaps {
		if g.Sub >= 0 && ow[g.Sub].durable && g.Gap.Source.Publisher != "" && g.Gap.To > 0 {
			retained[g.Sub] = true
		}
	}
	in.OnLost = func(si, pi int, c oracle.Class, covered bool) {
		if c == oracle.Required && covered && retained[si] && coveredByRetention(in.Gaps, si, pubs[pi].ID) {
			v.Released++
			return
		}
		if c != oracle.Required || len(v.LostExamples) >= maxLostExamples {
			return
		}
		pr, ref := pubs[pi], refs[si]
		sb := p.Subscribers[ref.subscriber]
		v.LostExamples = append(v.LostExamples, fmt.Sprintf("%s (published at %v) to %s sub %d [%s] at %s", pr.ID, pr.At.Round(time.Millisecond), sb.Name, ref.sub, sb.Filters[ref.sub], sb.Broker))
	}
	res := oracle.Check(in)
	v.Duplicates, v.Reordered, v.Spurious = res.Duplicates, res.Reordered, res.Spurious
	v.ExpectedDeliveries, v.Lost, v.Extra = res.Required, res.Lost-v.Released, res.Extra
	v.LostBeyondDelta, v.SilentBeyondDelta = res.BeyondLost, res.BeyondLost-res.BeyondCovered
	if unconfirmed > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d of %d subscriptions were never confirmed (their edge brokers stayed up)", unconfirmed, v.Subscriptions))
	}
	if v.Lost > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d required deliveries lost", v.Lost))
	}
	if v.Duplicates > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d duplicate deliveries", v.Duplicates))
	}
	if v.Reordered > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d deliveries out of per-source order", v.Reordered))
	}
	if v.Spurious > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d deliveries that do not match their filter (or an unknown publication)", v.Spurious))
	}
	if d := r.dropped.Load(); d > 0 {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d deliveries beyond the recording bound could not be checked", d))
	}
	if len(p.Publishers) > 0 && len(p.Subscribers) > 0 && v.ExpectedDeliveries == 0 {
		v.Reasons = append(v.Reasons, "no delivery was required: the run checked nothing (no acknowledged publication matched a confirmed subscription)")
	}
	if len(p.Publishers) > 0 && v.Publications > 0 && v.Acked == 0 {
		v.Reasons = append(v.Reasons, "no publication was acknowledged by its edge broker")
	}
	for _, a := range r.faults {
		if a.Err != "" {
			v.Reasons = append(v.Reasons, fmt.Sprintf("fault %d could not be applied: %s", a.Index+1, a.Err))
		}
	}
	for _, l := range r.leaves {
		if l.Err != "" {
			v.Reasons = append(v.Reasons, fmt.Sprintf("leave %s did not complete cleanly: %s", l.Broker, l.Err))
		}
	}
	judgeLiveness(p, r, tl, &v)
	v.Verdict = "PASS"
	if len(v.Reasons) > 0 {
		v.Verdict = "FAIL"
	}
	return v
}

// sessionsOnly reports whether actions are all durable subscribers'
// session changes (not faults: the liveness rules' fault times ignore
// them).
func sessionsOnly(actions []Action) bool {
	for _, a := range actions {
		if a.Kind != ActDisconnect && a.Kind != ActReconnect {
			return false
		}
	}
	return true
}

// coveredByRetention reports whether a retention Gap (one source, a
// bounded range) to subscription si covers id.
func coveredByRetention(gaps []oracle.Gap, si int, id message.PubID) bool {
	for _, g := range gaps {
		if g.Sub == si && g.Gap.Source == id.Source() && g.Gap.To > 0 && id.Seq >= g.Gap.From && id.Seq <= g.Gap.To {
			return true
		}
	}
	return false
}
