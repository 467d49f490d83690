package testbed

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Plots drawn for every run (PNG and SVG each):
//
//	delay   delivery delay (median and max per time bin) over publication
//	        time, with the faults marked — the slides' figure 21;
//	rate    messages out per second of the brokers next to the faults
//	        (or of the brokers asked for: testbed report --brokers);
//	rate-in messages in per second of the same brokers;
//	cpu     CPU of the same brokers (process mode; other modes cannot
//	        attribute CPU to a broker and skip it).

var palette = []color.Color{
	color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255},
	color.RGBA{23, 190, 207, 255}, color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255},
	color.RGBA{227, 119, 194, 255}, color.RGBA{127, 127, 127, 255},
}

var faultColor = color.RGBA{200, 0, 0, 255}

const plotW, plotH = 9 * vg.Inch, 4.5 * vg.Inch

// maxBins bounds the points drawn per line, whatever the number of
// deliveries: the SVG stays small and the PNG readable.
const maxBins = 600

// drawPlots draws every plot of a run into dir; brokers, when given, are
// the brokers of the rate and CPU plots instead of those next to the faults.
func drawPlots(dir string, sum *Summary, pts []delayPoint, samples []BrokerSample, brokers []string) ([]string, error) {
	var files []string
	save := func(p *plot.Plot, name string) error {
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, name+ext)
			if err := p.Save(plotW, plotH, path); err != nil {
				return fmt.Errorf("%s: %v", name+ext, err)
			}
			files = append(files, name+ext)
		}
		return nil
	}
	marks := make([]faultMark, len(sum.Faults))
	for i, f := range sum.Faults {
		marks[i] = faultMark{f.AppliedMs, f.Actions}
	}
	dp, err := delayPlot(sum, pts, marks)
	if err != nil {
		return files, err
	}
	if err := save(dp, "delay"); err != nil {
		return files, err
	}
	for _, kind := range []string{"rate", "rate-in", "cpu"} {
		bp, ok, err := brokerPlot(sum, samples, marks, kind, brokers)
		if err != nil {
			return files, err
		}
		if ok {
			if err := save(bp, kind); err != nil {
				return files, err
			}
		}
	}
	return files, nil
}

func newPlot(title, xl, yl string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xl
	p.Y.Label.Text = yl
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = false
	return p
}

// markFaults draws a dashed vertical line per fault (x in seconds) and its
// label, and returns the label plotter so callers can add it last.
func markFaults(p *plot.Plot, marks []faultMark, ymax float64) error {
	if len(marks) == 0 {
		return nil
	}
	var lx plotter.XYLabels
	for i, m := range marks {
		x := m.AtMs / 1000
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: ymax}})
		if err != nil {
			return err
		}
		l.Color = faultColor
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Width = vg.Points(1)
		p.Add(l)
		lx.XYs = append(lx.XYs, plotter.XY{X: x, Y: ymax * (0.95 - 0.06*float64(i%3))})
		label := m.Label
		if len(label) > 40 {
			label = label[:37] + "…"
		}
		lx.Labels = append(lx.Labels, " "+label)
	}
	labels, err := plotter.NewLabels(lx)
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Color = faultColor
		labels.TextStyle[i].Font.Size = vg.Points(9)
	}
	p.Add(labels)
	return nil
}

func delayPlot(sum *Summary, pts []delayPoint, marks []faultMark) (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("%s (%s mode): delivery delay — verdict %s", sum.Name, sum.Mode, sum.Verdict.Verdict), "publication time (s)", "delay (ms)")
	span := 0.0
	for _, pt := range pts {
		span = math.Max(span, pt.pubMs)
	}
	bw := math.Max(10, span/maxBins) // bin width in ms
	bins := map[int][]float64{}
	for _, pt := range pts {
		k := int(pt.pubMs / bw)
		bins[k] = append(bins[k], pt.delayMs)
	}
	keys := make([]int, 0, len(bins))
	for k := range bins {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var med, mx plotter.XYs
	ymax := 1.0
	for _, k := range keys {
		st := stats(bins[k])
		x := (float64(k) + 0.5) * bw / 1000
		med = append(med, plotter.XY{X: x, Y: st.P50})
		mx = append(mx, plotter.XY{X: x, Y: st.Max})
		ymax = math.Max(ymax, st.Max)
	}
	if len(keys) > 0 {
		lmax, err := plotter.NewLine(mx)
		if err != nil {
			return nil, err
		}
		lmax.Color = palette[1]
		lmed, err := plotter.NewLine(med)
		if err != nil {
			return nil, err
		}
		lmed.Color = palette[0]
		lmed.Width = vg.Points(1.5)
		p.Add(lmax, lmed)
		p.Legend.Add(fmt.Sprintf("max per %.0f ms", bw), lmax)
		p.Legend.Add("median", lmed)
	}
	ymax *= 1.35 // headroom for the legend and the fault labels
	if err := markFaults(p, marks, ymax); err != nil {
		return nil, err
	}
	p.Y.Min, p.Y.Max = 0, ymax
	p.X.Min = 0
	if sum.EndMs > 0 {
		p.X.Max = sum.EndMs / 1000
	}
	return p, nil
}

// brokerPlot draws msgs out/s ("rate"), in/s ("rate-in") or CPU % ("cpu")
// of the brokers asked for, else of those next to the faults; ok=false
// when the mode did not measure it.
func brokerPlot(sum *Summary, samples []BrokerSample, marks []faultMark, kind string, brokers []string) (*plot.Plot, bool, error) {
	want, which := sum.NearFaults, "brokers next to the faults"
	if len(brokers) > 0 {
		want, which = brokers, "brokers "+strings.Join(brokers, ", ")
	} else if len(want) == 0 {
		// No faults: show the busiest brokers instead.
		want = busiest(samples, 4)
	}
	by := map[string][]BrokerSample{}
	for _, s := range samples {
		by[s.Broker] = append(by[s.Broker], s)
	}
	title, yl := "messages out per second", "msgs/s"
	if kind == "rate-in" {
		title = "messages in per second"
	}
	if sum.WarmupMs > 0 {
		title += fmt.Sprintf(" (from t=%.0fs)", sum.WarmupMs/1000)
	}
	if kind == "cpu" {
		title, yl = "CPU", "% of one core"
	}
	p := newPlot(fmt.Sprintf("%s (%s mode): %s, %s", sum.Name, sum.Mode, title, which), "time (s)", yl)
	ymax, any := 1.0, false
	for i, b := range want {
		ss := by[b]
		sort.Slice(ss, func(a, c int) bool { return ss[a].At < ss[c].At })
		var xys plotter.XYs
		for j, s := range ss {
			if s.At.Seconds()*1000 < sum.WarmupMs {
				continue // the subscription flood of the setup
			}
			var y float64
			if kind == "cpu" {
				if s.CPU < 0 {
					continue
				}
				y = s.CPU
			} else {
				n := s.MsgsOut
				if kind == "rate-in" {
					n = s.MsgsIn
				}
				if n < 0 {
					continue
				}
				period := time.Second
				if j > 0 && ss[j].At > ss[j-1].At {
					period = ss[j].At - ss[j-1].At
				}
				y = float64(n) / period.Seconds()
			}
			xys = append(xys, plotter.XY{X: s.At.Seconds(), Y: y})
			ymax = math.Max(ymax, y)
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, false, err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.3)
		if i%2 == 1 {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(2)}
		}
		p.Add(l)
		p.Legend.Add(b, l)
		any = true
	}
	if !any {
		return nil, false, nil
	}
	ymax *= 1.35
	if err := markFaults(p, marks, ymax); err != nil {
		return nil, false, err
	}
	p.Y.Min, p.Y.Max = 0, ymax
	p.X.Min = sum.WarmupMs / 1000
	if sum.EndMs > 0 {
		p.X.Max = sum.EndMs / 1000
	}
	p.Legend.Padding = vg.Points(2)
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	return p, true, nil
}

func busiest(samples []BrokerSample, n int) []string {
	tot := map[string]int64{}
	for _, s := range samples {
		if s.MsgsOut > 0 {
			tot[s.Broker] += s.MsgsOut
		}
	}
	names := make([]string, 0, len(tot))
	for b := range tot {
		names = append(names, b)
	}
	sort.Slice(names, func(i, j int) bool {
		if tot[names[i]] != tot[names[j]] {
			return tot[names[i]] > tot[names[j]]
		}
		return names[i] < names[j]
	})
	if len(names) > n {
		names = names[:n]
	}
	return names
}
