package testbed

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gonum.org/v1/plot/plotter"
)

// LoadComparison sets the load of one broker in each of two earlier runs
// side by side, before and after a time (the slides' comparison of R1's
// load with δ-fault tolerance and with replicas, docs/results/
// srds09-replicas.md): message rates in and out, and CPU where the mode
// measures it.
type LoadComparison struct {
	Dirs, Labels, Brokers [2]string
	Before, After         [2]time.Duration // windows (from, to], times of the runs
	Plot                  string           // a PNG of both brokers' message rates over time ("": none)
}

type loadFigures struct {
	inB, outB, inA, outA float64 // messages per second
	cpuB, cpuA           float64 // mean percent of one core; NaN if not measured
}

func windowLoad(samples []BrokerSample, broker string, w [2]time.Duration, cpu bool) (in, out, cpuMean float64, n int) {
	cpuMean = math.NaN()
	var cpuSum float64
	for _, s := range samples {
		if s.Broker != broker || s.At <= w[0] || s.At > w[1] {
			continue
		}
		in += float64(s.MsgsIn)
		out += float64(s.MsgsOut)
		cpuSum += s.CPU
		n++
	}
	secs := (w[1] - w[0]).Seconds()
	if n > 0 && cpu {
		cpuMean = cpuSum / float64(n)
	}
	return in / secs, out / secs, cpuMean, n
}

// Run reads both runs and returns the table, ending with the line
// "ratio BROKER cpu (LABEL1/LABEL2): X.XX" of the load after: CPU where
// both runs measured it, else messages processed (in + out) per second.
func (c LoadComparison) Run() (string, error) {
	if c.Before[1] <= c.Before[0] || c.After[1] <= c.After[0] {
		return "", fmt.Errorf("testbed: compare: empty window (before %v–%v, after %v–%v)", c.Before[0], c.Before[1], c.After[0], c.After[1])
	}
	var figs [2]loadFigures
	var all [2][]BrokerSample
	cpuBoth := true
	var modes [2]string
	var from time.Duration // the plot begins with publishing (the subscription flood before would dwarf the rest)
	for i := range 2 {
		sum, _, samples, err := ReadResults(c.Dirs[i])
		if err != nil {
			return "", err
		}
		modes[i] = sum.Mode
		from = max(from, time.Duration(sum.WarmupMs*float64(time.Millisecond)))
		all[i] = samples
		cpuBoth = cpuBoth && sum.CPUMeasured
		f := &figs[i]
		var nb, na int
		f.inB, f.outB, f.cpuB, nb = windowLoad(samples, c.Brokers[i], c.Before, sum.CPUMeasured)
		f.inA, f.outA, f.cpuA, na = windowLoad(samples, c.Brokers[i], c.After, sum.CPUMeasured)
		if nb == 0 || na == 0 {
			return "", fmt.Errorf("testbed: compare: %s has no samples of %s in both windows (before %v–%v: %d, after %v–%v: %d)",
				c.Dirs[i], c.Brokers[i], c.Before[0], c.Before[1], nb, c.After[0], c.After[1], na)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "load at %s (%s, %s mode) and %s (%s, %s mode); before %v–%v, after %v–%v\n",
		c.Brokers[0], c.Labels[0], modes[0], c.Brokers[1], c.Labels[1], modes[1], c.Before[0], c.Before[1], c.After[0], c.After[1])
	fmt.Fprintf(&b, "| | %s: %s | %s: %s | %s/%s |\n|---|---|---|---|\n", c.Labels[0], c.Brokers[0], c.Labels[1], c.Brokers[1], c.Labels[0], c.Labels[1])
	row := func(name string, x, y float64, unit string) {
		r := "—"
		if y > 0 && !math.IsNaN(x) && !math.IsNaN(y) {
			r = fmt.Sprintf("%.2f", x/y)
		}
		if math.IsNaN(x) || math.IsNaN(y) {
			fmt.Fprintf(&b, "| %s | n/a | n/a | — |\n", name)
			return
		}
		fmt.Fprintf(&b, "| %s | %.1f%s | %.1f%s | %s |\n", name, x, unit, y, unit, r)
	}
	a, z := figs[0], figs[1]
	row("msgs in/s before", a.inB, z.inB, "")
	row("msgs out/s before", a.outB, z.outB, "")
	row("msgs in+out/s before", a.inB+a.outB, z.inB+z.outB, "")
	row("msgs in/s after", a.inA, z.inA, "")
	row("msgs out/s after", a.outA, z.outA, "")
	row("msgs in+out/s after", a.inA+a.outA, z.inA+z.outA, "")
	row("CPU before", a.cpuB, z.cpuB, "%")
	row("CPU after", a.cpuA, z.cpuA, "%")
	if c.Plot != "" {
		if err := c.plot(all, from); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "plot: %s\n", c.Plot)
	}
	ratio := (a.inA + a.outA) / (z.inA + z.outA)
	if cpuBoth {
		ratio = a.cpuA / z.cpuA
	} else {
		fmt.Fprintf(&b, "(CPU not measured in %s mode: the ratio is of the messages processed, in + out per second)\n", modes[1])
	}
	fmt.Fprintf(&b, "ratio %s cpu (%s/%s): %.2f\n", c.Brokers[0], c.Labels[0], c.Labels[1], ratio)
	return b.String(), nil
}

func (c LoadComparison) plot(all [2][]BrokerSample, from time.Duration) error {
	p := newPlot(fmt.Sprintf("messages processed at %s (%s) and %s (%s)", c.Brokers[0], c.Labels[0], c.Brokers[1], c.Labels[1]), "time (s)", "messages in + out per second")
	ymax := 0.0
	for i := range 2 {
		var pts plotter.XYs
		var last time.Duration
		for _, s := range all[i] {
			if s.Broker != c.Brokers[i] {
				continue
			}
			d := (s.At - last).Seconds() // counters start at t = 0
			if d <= 0 {
				continue
			}
			if s.At <= from {
				last = s.At
				continue
			}
			y := float64(s.MsgsIn+s.MsgsOut) / d
			ymax = math.Max(ymax, y)
			pts = append(pts, plotter.XY{X: s.At.Seconds(), Y: y})
			last = s.At
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("testbed: compare plot: %v", err)
		}
		l.Color = palette[i]
		l.Width = 1.5
		p.Add(l)
		p.Legend.Add(c.Labels[i]+": "+c.Brokers[i], l)
	}
	marks := []faultMark{{AtMs: float64(c.Before[1].Milliseconds()), Label: "failures"}}
	if err := markFaults(p, marks, ymax*1.1); err != nil {
		return err
	}
	p.Y.Min = 0
	return p.Save(plotW, plotH, c.Plot)
}
