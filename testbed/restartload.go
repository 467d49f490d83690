package testbed

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// The load after a restart: does a restarted broker's message
// rate (and CPU, where measured) come back to within 2× of its tree
// neighbours', and how soon? A figure for summary.json and the printed
// summary, not a verdict rule: it never fails a run.
//
// Per restart of broker R (applied without error, scheduled or manual),
// R's neighbours are those of the planned tree with the graceful leaves
// before the restart detached (as live.go keeps its tree). R is
// observed over its samples taken after the restart, up to the end of
// publishing or the next fault that touches R or one of those neighbours,
// whichever comes first. In each sample period R is within when
//
//	rate ≤ max(2 × mean, mean + loadRateFloor)   (msgs_in + msgs_out per second)
//	cpu  ≤ max(2 × mean, mean + loadCPUFloor)    (percent of a core; process mode)
//
// with mean the mean over R's neighbours that were up and measured in the
// same period (0 when none was: the floor alone). settled_after is the
// time from the restart to the end of R's last period that was not within
// (0 when every period was); null when the last observed period was not.

// Floors of the comparison, so that brokers idling near 0 do not count as
// twice their neighbours.
const (
	loadRateFloor = 50.0 // messages per second
	loadCPUFloor  = 5.0  // percentage points of a core
)

// LoadAfterRestart is one restart's entry in summary.json
// (load_after_restart).
type LoadAfterRestart struct {
	Broker     string   `json:"broker"`
	RestartMs  float64  `json:"restart_ms"`
	ObservedMs float64  `json:"observed_until_ms"` // end of the observation (end of publishing or the next fault near R)
	SettledMs  *float64 `json:"settled_after_ms"`  // null: not within 2× at the end of the observation (or no sample of R)
	Samples    int      `json:"samples"`           // sample periods of R judged
	Neighbours []string `json:"neighbours"`
	PeakRate   float64  `json:"peak_rate"`       // R's highest msgs/s after the restart
	NbrRate    float64  `json:"neighbours_rate"` // the neighbours' mean msgs/s, averaged over the observation
	PeakCPU    *float64 `json:"peak_cpu_pct"`    // null when CPU is not measured
	NbrCPU     *float64 `json:"neighbours_cpu_pct"`
	CPUMeasure bool     `json:"cpu_measured"`
}

// withinLoad reports whether x is within 2× of mean with the given floor.
func withinLoad(x, mean, floor float64) bool {
	return x <= math.Max(2*mean, mean+floor)
}

// loadAfterRestart computes the figure for every applied restart.
func loadAfterRestart(p *Plan, applied []AppliedFault, manual []manualFault, samples []BrokerSample) []LoadAfterRestart {
	type step struct {
		at      time.Duration
		actions []Action
		ok      bool // applied without error
	}
	var steps []step
	done := map[int]AppliedFault{}
	for _, a := range applied {
		done[a.Index] = a
	}
	for i, f := range p.Faults {
		if a, ok := done[i]; ok {
			steps = append(steps, step{a.At, f.Actions, a.Err == ""})
		} else {
			steps = append(steps, step{f.At, f.Actions, false})
		}
	}
	for _, m := range manual {
		steps = append(steps, step{m.at, []Action{m.a}, true})
	}
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].at < steps[j].at })

	// Samples per broker in time order, with each one's period.
	type point struct {
		s  BrokerSample
		dt time.Duration
	}
	byBroker := map[string][]BrokerSample{}
	for _, s := range samples {
		byBroker[s.Broker] = append(byBroker[s.Broker], s)
	}
	period := p.Spec.Metrics.Sample.Duration
	at := map[string]map[time.Duration]point{} // broker -> sample time -> sample
	var times []time.Duration
	seenT := map[time.Duration]bool{}
	for b, ss := range byBroker {
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].At < ss[j].At })
		m := map[time.Duration]point{}
		for i, s := range ss {
			dt := period
			if i > 0 && s.At > ss[i-1].At {
				dt = s.At - ss[i-1].At
			}
			m[s.At] = point{s, dt}
			if !seenT[s.At] {
				seenT[s.At] = true
				times = append(times, s.At)
			}
		}
		at[b] = m
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	rate := func(pt point) (float64, bool) {
		s := pt.s
		if !s.Up || s.MsgsIn < 0 || s.MsgsOut < 0 || pt.dt <= 0 {
			return 0, false
		}
		return float64(s.MsgsIn+s.MsgsOut) / pt.dt.Seconds(), true
	}

	out := []LoadAfterRestart{}
	topo := p.Topo.clone()
	for si, st := range steps {
		for _, a := range st.actions {
			if a.Kind != ActRestart || !st.ok {
				continue
			}
			r := a.Broker
			nbrs := topo.Neighbours(r)
			near := map[string]bool{r: true}
			for _, n := range nbrs {
				near[n] = true
			}
			until := p.Spec.Duration.Duration
			for _, nx := range steps[si+1:] {
				if nx.at <= st.at || nx.at >= until {
					continue
				}
				for _, b := range nx.actions {
					if near[b.Broker] || (b.Peer != "" && near[b.Peer]) {
						until = min(until, nx.at)
					}
				}
			}
			e := LoadAfterRestart{Broker: r, RestartMs: round3(ms(st.at)), ObservedMs: round3(ms(until)), Neighbours: append([]string{}, nbrs...)}
			var nbrRateSum, nbrCPUSum, peakCPU float64
			var nCPU int
			lastBad, last := time.Duration(-1), time.Duration(-1)
			for _, t := range times {
				if t <= st.at || t > until {
					continue
				}
				pt, ok := at[r][t]
				if !ok {
					continue
				}
				x, ok := rate(pt)
				if !ok {
					continue // R down, frozen or not read in this period
				}
				var sum, cpuSum float64
				var n, nc int
				for _, nb := range nbrs {
					q, ok := at[nb][t]
					if !ok {
						continue
					}
					y, ok := rate(q)
					if !ok {
						continue
					}
					sum += y
					n++
					if q.s.CPU >= 0 {
						cpuSum += q.s.CPU
						nc++
					}
				}
				mean := 0.0
				if n > 0 {
					mean = sum / float64(n)
				}
				good := withinLoad(x, mean, loadRateFloor)
				e.Samples++
				e.PeakRate = math.Max(e.PeakRate, x)
				nbrRateSum += mean
				if pt.s.CPU >= 0 {
					cmean := 0.0
					if nc > 0 {
						cmean = cpuSum / float64(nc)
					}
					good = good && withinLoad(pt.s.CPU, cmean, loadCPUFloor)
					e.CPUMeasure = true
					peakCPU = math.Max(peakCPU, pt.s.CPU)
					nbrCPUSum += cmean
					nCPU++
				}
				if !good {
					lastBad = t
				}
				last = t
			}
			if e.Samples > 0 {
				e.PeakRate = round3(e.PeakRate)
				e.NbrRate = round3(nbrRateSum / float64(e.Samples))
				if lastBad != last {
					d := 0.0
					if lastBad >= 0 {
						d = round3(ms(lastBad - st.at))
					}
					e.SettledMs = &d
				}
			}
			if nCPU > 0 {
				pc, nc := round3(peakCPU), round3(nbrCPUSum/float64(nCPU))
				e.PeakCPU, e.NbrCPU = &pc, &nc
			}
			out = append(out, e)
		}
		// Graceful leaves repair the tree: later restarts see the
		// neighbours it has then.
		for _, a := range st.actions {
			if a.Kind == ActLeave && st.ok {
				topo.detach(a.Broker)
			}
		}
	}
	return out
}

// formatLoadAfterRestart is the summary's line for one restart.
func formatLoadAfterRestart(l LoadAfterRestart) string {
	what := "rate"
	if l.CPUMeasure {
		what = "rate and CPU"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  after restart of %s at %.1fs: ", l.Broker, l.RestartMs/1000)
	switch {
	case l.Samples == 0:
		fmt.Fprintf(&b, "no sample of %s before %.1fs (the end of publishing or the next fault near it)", l.Broker, l.ObservedMs/1000)
		return b.String()
	case l.SettledMs != nil:
		fmt.Fprintf(&b, "%s within 2× of its neighbours after %.1fs", what, *l.SettledMs/1000)
	default:
		fmt.Fprintf(&b, "%s not within 2× of its neighbours by %.1fs (the end of its observation)", what, l.ObservedMs/1000)
	}
	fmt.Fprintf(&b, " (peak %.0f msgs/s vs %.0f", l.PeakRate, l.NbrRate)
	if l.CPUMeasure && l.PeakCPU != nil && l.NbrCPU != nil {
		fmt.Fprintf(&b, "; CPU %.0f%% vs %.0f%%)", *l.PeakCPU, *l.NbrCPU)
	} else {
		b.WriteString("; CPU not measured in this mode)")
	}
	return b.String()
}
