package testbed

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// Summary is summary.json: the verdict and its counts (flattened), delays
// per phase of each fault, control traffic and per-broker resources.
type Summary struct {
	Name        string  `json:"name"`
	Mode        string  `json:"mode"`
	Seed        int64   `json:"seed"`
	Started     string  `json:"started"`
	WallSeconds float64 `json:"wall_seconds"`
	Brokers     int     `json:"brokers"`
	Delta       int     `json:"delta"`
	Replicas    int     `json:"replicas,omitempty"` // [overlay] mode = "replicas": replicas per virtual node (Delta does not apply)
	Verdict
	DelayMs               DelayReport              `json:"delay_ms"`
	ControlMessages       *int64                   `json:"control_messages"` // null when the mode cannot count them
	ControlPerDelivery    *float64                 `json:"control_messages_per_delivery,omitempty"`
	BrokerStats           map[string]BrokerSummary `json:"broker_stats"`
	MemoryTotalMB         *float64                 `json:"memory_total_mb"` // sum over brokers of their peak RSS; null when unknown
	Faults                []FaultSummary           `json:"faults"`
	FaultWindowMs         float64                  `json:"fault_window_ms"`
	EndMs                 float64                  `json:"end_ms"`
	WarmupMs              float64                  `json:"warmup_ms"`          // publishing starts; broker plots begin here (the subscription flood before would dwarf the rest)
	NearFaults            []string                 `json:"near_faults"`        // brokers plotted in rate/cpu plots
	CPUMeasured           bool                     `json:"cpu_measured"`       // false: the mode cannot attribute CPU to brokers (cpu fields are 0)
	LoadAfterRestart      []LoadAfterRestart       `json:"load_after_restart"` // per restart: R's rate (and CPU) against its neighbours' (restartload.go); a figure, not a rule
	Plots                 []string                 `json:"plots,omitempty"`
	Notes                 []string                 `json:"notes,omitempty"`
	DeliveriesCSVTruncate bool                     `json:"deliveries_csv_truncated,omitempty"`
}

// Stats are delay percentiles in milliseconds over N deliveries.
type Stats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// DelayReport is delays overall and around each fault.
type DelayReport struct {
	Overall Stats        `json:"overall"`
	Faults  []PhaseStats `json:"faults"`
}

// PhaseStats are the delays of publications published before a fault
// (since the previous fault's window ended, and delivered before it
// struck), during it (published in [at, at+window), or earlier but still in
// flight at the fault) and after it (until the next fault).
type PhaseStats struct {
	AtMs   float64 `json:"at_ms"`
	Fault  string  `json:"fault"`
	Before Stats   `json:"before"`
	During Stats   `json:"during"`
	After  Stats   `json:"after"`
}

// BrokerSummary is one broker over the whole run.
type BrokerSummary struct {
	CPUMeanPct float64 `json:"cpu_mean_pct"`
	CPUMaxPct  float64 `json:"cpu_max_pct"`
	RSSMaxMB   float64 `json:"rss_max_mb"`
	MsgsIn     int64   `json:"msgs_in"`
	MsgsOut    int64   `json:"msgs_out"`
	QueueMax   int64   `json:"queue_max"`
}

// FaultSummary is one scheduled fault and when it was applied.
type FaultSummary struct {
	AtMs      float64 `json:"at_ms"`
	AppliedMs float64 `json:"applied_ms"`
	Actions   string  `json:"actions"`
	Err       string  `json:"error,omitempty"`
	Manual    bool    `json:"manual,omitempty"` // injected through the control socket
	// Leaves are the graceful leaves of this fault and how each ended.
	Leaves []LeaveSummary `json:"leaves,omitempty"`
}

// LeaveSummary is one graceful leave: how long the broker took to be gone
// (process: SIGTERM to exit; inproc: the runtime's stop to its return;
// sim: virtual time until the leave was confirmed), or why it did not
// leave cleanly.
type LeaveSummary struct {
	Broker string  `json:"broker"`
	TookMs float64 `json:"took_ms"`
	Err    string  `json:"error,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func stats(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		if i < 0 {
			i = 0
		}
		return round3(s[i])
	}
	return Stats{N: len(s), P50: q(0.5), P99: q(0.99), Max: round3(s[len(s)-1])}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// delayPoint is one delivery's publication time and delay, for phases and
// plots.
type delayPoint struct{ pubMs, delayMs float64 }

// faultMark is a fault on a time axis.
type faultMark struct {
	AtMs  float64
	Label string
}

func phaseReport(pts []delayPoint, marks []faultMark, windowMs, endMs float64) DelayReport {
	all := make([]float64, len(pts))
	for i, p := range pts {
		all[i] = p.delayMs
	}
	rep := DelayReport{Overall: stats(all), Faults: []PhaseStats{}}
	prevEnd := 0.0
	for i, m := range marks {
		next := endMs
		if i+1 < len(marks) {
			next = marks[i+1].AtMs
		}
		var b, d, a []float64
		for _, p := range pts {
			// A publication published before the fault but still in
			// flight when it struck counts as "during": it is the one the
			// fault delays.
			switch {
			case p.pubMs >= prevEnd && p.pubMs < m.AtMs && p.pubMs+p.delayMs < m.AtMs:
				b = append(b, p.delayMs)
			case p.pubMs >= prevEnd && p.pubMs < m.AtMs+windowMs:
				d = append(d, p.delayMs)
			case p.pubMs >= m.AtMs+windowMs && p.pubMs < next:
				a = append(a, p.delayMs)
			}
		}
		rep.Faults = append(rep.Faults, PhaseStats{AtMs: m.AtMs, Fault: m.Label, Before: stats(b), During: stats(d), After: stats(a)})
		prevEnd = m.AtMs + windowMs
	}
	return rep
}

// nearFaults lists the brokers a fault touches and their neighbours, at
// most max of them, faulted brokers first.
func nearFaults(p *Plan, max int) []string {
	var out []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] && len(out) < max {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, f := range p.Faults {
		for _, a := range f.Actions {
			add(a.Broker)
			if a.Peer != "" {
				add(a.Peer)
			}
		}
	}
	faulted := append([]string(nil), out...)
	for _, b := range faulted {
		for _, n := range p.Topo.Neighbours(b) {
			add(n)
		}
	}
	return out
}

// WriteResults computes the verdict and writes summary.json,
// deliveries.csv, brokers.csv and the plots into dir. It returns the
// summary.
func WriteResults(dir string, p *Plan, r *Recorder, mode string, started time.Time, wall time.Duration) (*Summary, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: results: %v", err)
	}
	v := Judge(p, r)
	r.mu.Lock()
	sum := &Summary{
		Name: p.Spec.Name, Mode: mode, Seed: p.Spec.Seed, Started: started.UTC().Format(time.RFC3339),
		WallSeconds: round3(wall.Seconds()), Brokers: len(p.Topo.Names), Delta: p.Spec.Overlay.Delta, Replicas: p.replicasK(),
		Verdict: v, FaultWindowMs: ms(p.Spec.Metrics.FaultWindow.Duration), EndMs: ms(p.Spec.End()), WarmupMs: ms(p.Spec.Warmup.Duration),
		BrokerStats: map[string]BrokerSummary{}, NearFaults: nearFaults(p, 6), Notes: append([]string(nil), r.notes...),
	}
	if r.ctrlOK {
		c := r.ctrl
		sum.ControlMessages = &c
		if v.Deliveries > 0 {
			x := round3(float64(c) / float64(v.Deliveries))
			sum.ControlPerDelivery = &x
		}
	}
	applied := map[int]AppliedFault{}
	for _, a := range r.faults {
		applied[a.Index] = a
	}
	leaves := map[int][]LeaveSummary{}
	for _, l := range r.leaves {
		leaves[l.Fault] = append(leaves[l.Fault], LeaveSummary{Broker: l.Broker, TookMs: round3(ms(l.Took)), Err: l.Err})
	}
	var marks []faultMark
	for i, f := range p.Faults {
		fs := FaultSummary{AtMs: ms(f.At), AppliedMs: ms(f.At), Actions: f.String(), Leaves: leaves[i]}
		if a, ok := applied[i]; ok {
			fs.AppliedMs, fs.Err = ms(a.At), a.Err
		} else {
			fs.Err = "not applied (the run ended first)"
		}
		sum.Faults = append(sum.Faults, fs)
		marks = append(marks, faultMark{fs.AppliedMs, f.String()})
	}
	for _, m := range r.manual {
		var ls []LeaveSummary
		if m.a.Kind == ActLeave {
			for _, l := range leaves[-1] {
				if l.Broker == m.a.Broker {
					ls = append(ls, l)
				}
			}
		}
		sum.Faults = append(sum.Faults, FaultSummary{AtMs: ms(m.at), AppliedMs: ms(m.at), Actions: m.a.String(), Manual: true, Leaves: ls})
		marks = append(marks, faultMark{ms(m.at), m.a.String()})
	}
	sort.SliceStable(sum.Faults, func(i, j int) bool { return sum.Faults[i].AppliedMs < sum.Faults[j].AppliedMs })
	sort.SliceStable(marks, func(i, j int) bool { return marks[i].AtMs < marks[j].AtMs })
	pts := make([]delayPoint, len(r.dels))
	for i, d := range r.dels {
		pts[i] = delayPoint{ms(d.PublishedAt), ms(d.At - d.PublishedAt)}
	}
	sum.DelayMs = phaseReport(pts, marks, sum.FaultWindowMs, ms(p.Spec.Duration.Duration))
	// Per-broker summaries.
	type acc struct {
		cpuSum  float64
		n       int
		bs      BrokerSummary
		rssKnow bool
	}
	accs := map[string]*acc{}
	for _, s := range r.samples {
		a := accs[s.Broker]
		if a == nil {
			a = &acc{}
			accs[s.Broker] = a
		}
		if s.CPU >= 0 && s.Up {
			sum.CPUMeasured = true
			a.cpuSum += s.CPU
			a.n++
			a.bs.CPUMaxPct = math.Max(a.bs.CPUMaxPct, round3(s.CPU))
		}
		if s.RSS > 0 {
			a.bs.RSSMaxMB = math.Max(a.bs.RSSMaxMB, round3(float64(s.RSS)/(1<<20)))
			a.rssKnow = true
		}
		if s.MsgsIn > 0 {
			a.bs.MsgsIn += s.MsgsIn
		}
		if s.MsgsOut > 0 {
			a.bs.MsgsOut += s.MsgsOut
		}
		if s.Queue > a.bs.QueueMax {
			a.bs.QueueMax = s.Queue
		}
	}
	total, known := 0.0, false
	for name, a := range accs {
		if a.n > 0 {
			a.bs.CPUMeanPct = round3(a.cpuSum / float64(a.n))
		}
		sum.BrokerStats[name] = a.bs
		if a.rssKnow {
			total += a.bs.RSSMaxMB
			known = true
		}
	}
	if known {
		t := round3(total)
		sum.MemoryTotalMB = &t
	}
	samples := append([]BrokerSample(nil), r.samples...)
	dels := append([]Delivery(nil), r.dels...)
	sum.LoadAfterRestart = loadAfterRestart(p, r.faults, r.manual, samples)
	r.mu.Unlock()

	if err := writeDeliveries(filepath.Join(dir, "deliveries.csv"), p, dels); err != nil {
		return nil, err
	}
	if err := writeBrokers(filepath.Join(dir, "brokers.csv"), samples); err != nil {
		return nil, err
	}
	plots, err := drawPlots(dir, sum, pts, samples, nil)
	if err != nil {
		sum.Notes = append(sum.Notes, "plots: "+err.Error())
	}
	sum.Plots = plots
	if err := writeJSON(filepath.Join(dir, "summary.json"), sum); err != nil {
		return nil, err
	}
	return sum, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("testbed: %v", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("testbed: %v", err)
	}
	return nil
}

func writeCSV(path string, header []string, rows func(w *csv.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("testbed: %v", err)
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	w := csv.NewWriter(bw)
	if err := w.Write(header); err != nil {
		f.Close()
		return fmt.Errorf("testbed: %s: %v", path, err)
	}
	if err := rows(w); err != nil {
		f.Close()
		return fmt.Errorf("testbed: %s: %v", path, err)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("testbed: %s: %v", path, err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("testbed: %s: %v", path, err)
	}
	return f.Close()
}

func fms(d time.Duration) string { return strconv.FormatFloat(ms(d), 'f', 3, 64) }

func writeDeliveries(path string, p *Plan, dels []Delivery) error {
	return writeCSV(path, []string{"subscriber", "sub", "edge", "publisher", "epoch", "seq", "published_ms", "received_ms", "delay_ms"}, func(w *csv.Writer) error {
		for _, d := range dels {
			name, edge := "?", "?"
			if d.Subscriber >= 0 && d.Subscriber < len(p.Subscribers) {
				name, edge = p.Subscribers[d.Subscriber].Name, p.Subscribers[d.Subscriber].Broker
			}
			if err := w.Write([]string{name, strconv.Itoa(d.Sub), edge, d.Pub.Publisher, strconv.FormatUint(d.Pub.Epoch, 10), strconv.FormatUint(d.Pub.Seq, 10), fms(d.PublishedAt), fms(d.At), fms(d.At - d.PublishedAt)}); err != nil {
				return err
			}
		}
		return nil
	})
}

func writeBrokers(path string, samples []BrokerSample) error {
	sort.SliceStable(samples, func(i, j int) bool {
		if samples[i].At != samples[j].At {
			return samples[i].At < samples[j].At
		}
		return samples[i].Broker < samples[j].Broker
	})
	return writeCSV(path, []string{"t_s", "broker", "up", "msgs_in", "msgs_out", "queue", "cpu_pct", "rss_mb"}, func(w *csv.Writer) error {
		for _, s := range samples {
			if err := w.Write([]string{
				strconv.FormatFloat(s.At.Seconds(), 'f', 3, 64), s.Broker, strconv.FormatBool(s.Up),
				strconv.FormatInt(s.MsgsIn, 10), strconv.FormatInt(s.MsgsOut, 10), strconv.FormatInt(s.Queue, 10),
				strconv.FormatFloat(s.CPU, 'f', 2, 64), strconv.FormatFloat(float64(s.RSS)/(1<<20), 'f', 2, 64),
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

// ReadResults loads an earlier run's summary, delay points and broker
// samples (for `testbed report` and `compare`).
func ReadResults(dir string) (*Summary, []delayPoint, []BrokerSample, error) {
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("testbed: %v", err)
	}
	sum := &Summary{}
	if err := json.Unmarshal(b, sum); err != nil {
		return nil, nil, nil, fmt.Errorf("testbed: %s: %v", filepath.Join(dir, "summary.json"), err)
	}
	var pts []delayPoint
	err = readCSV(filepath.Join(dir, "deliveries.csv"), 9, func(rec []string) error {
		pub, err1 := strconv.ParseFloat(rec[6], 64)
		d, err2 := strconv.ParseFloat(rec[8], 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("bad number in %v", rec)
		}
		pts = append(pts, delayPoint{pub, d})
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	var samples []BrokerSample
	err = readCSV(filepath.Join(dir, "brokers.csv"), 8, func(rec []string) error {
		t, e1 := strconv.ParseFloat(rec[0], 64)
		up, e2 := strconv.ParseBool(rec[2])
		in, e3 := strconv.ParseInt(rec[3], 10, 64)
		out, e4 := strconv.ParseInt(rec[4], 10, 64)
		q, e5 := strconv.ParseInt(rec[5], 10, 64)
		cpu, e6 := strconv.ParseFloat(rec[6], 64)
		rss, e7 := strconv.ParseFloat(rec[7], 64)
		for _, e := range []error{e1, e2, e3, e4, e5, e6, e7} {
			if e != nil {
				return fmt.Errorf("bad value in %v: %v", rec, e)
			}
		}
		samples = append(samples, BrokerSample{At: time.Duration(t * float64(time.Second)), Broker: rec[1], Up: up, MsgsIn: in, MsgsOut: out, Queue: q, CPU: cpu, RSS: int64(rss * (1 << 20))})
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return sum, pts, samples, nil
}

func readCSV(path string, cols int, row func([]string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("testbed: %v", err)
	}
	defer f.Close()
	r := csv.NewReader(bufio.NewReaderSize(f, 1<<16))
	r.FieldsPerRecord = cols
	first := true
	for {
		rec, err := r.Read()
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("testbed: %s: %v", path, err)
		}
		if first {
			first = false
			continue
		}
		if err := row(rec); err != nil {
			return fmt.Errorf("testbed: %s: %v", path, err)
		}
	}
}

// Redraw draws the plots of an earlier run again from its files; brokers,
// when given, are the brokers of its rate and CPU plots (each must have
// samples in the run).
func Redraw(dir string, brokers ...string) (*Summary, error) {
	sum, pts, samples, err := ReadResults(dir)
	if err != nil {
		return nil, err
	}
	sampled := map[string]bool{}
	for _, s := range samples {
		sampled[s.Broker] = true
	}
	for _, b := range brokers {
		if !sampled[b] {
			return nil, fmt.Errorf("testbed: %s: no samples of broker %q in this run", dir, b)
		}
	}
	plots, err := drawPlots(dir, sum, pts, samples, brokers)
	if err != nil {
		return sum, err
	}
	sum.Plots = plots
	return sum, nil
}
