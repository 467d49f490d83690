package benchcompare

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var scaleColors = []color.Color{color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255}}

// WriteText writes the report as two tables.
func (r *ScaleReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "chain B1→Bn (δ = %d), 250 B    msgs/s     p50 µs     p99 µs\n", r.Delta)
	for _, p := range r.Chain {
		fmt.Fprintf(w, "  %2d brokers              %12s %10s %10s  %s\n", p.Brokers, num(p.Through.Rate), num(p.Latency.P50Us), num(p.Latency.P99Us), p.Error)
	}
	fmt.Fprintf(w, "routed subscriptions (B1–B2)    msgs/s     p50 µs     p99 µs   RSS B1 MB  RSS B2 MB  subscribe s\n")
	for _, p := range r.Subs {
		b1, b2 := 0.0, 0.0
		if len(p.RSSMB) == 2 {
			b1, b2 = p.RSSMB[0], p.RSSMB[1]
		}
		fmt.Fprintf(w, "  %9d                %12s %10s %10s %11.1f %10.1f %12.1f  %s\n", p.Subs, num(p.Through.Rate), num(p.Latency.P50Us), num(p.Latency.P99Us), b1, b2, p.SubSecs, p.Error)
	}
	m := r.Machine
	fmt.Fprintf(w, "machine: %d CPUs, %s, %s, %s; load average %s at the start, %s at the end; %.0f s\n",
		m.CPUs, m.Model, m.GoVersion, m.OS, m.LoadStart, m.LoadEnd, r.Seconds)
}

// WriteFiles writes scale.json and the plots (PNG and SVG) into dir:
// scale-chain (throughput and p99 against brokers), scale-subs (the same
// against routed subscriptions, log x) and scale-memory (RSS per broker
// against routed subscriptions, log x). It returns the files written.
func (r *ScaleReport) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	js := filepath.Join(dir, "scale.json")
	if err := os.WriteFile(js, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	files = append(files, js)
	save := func(p *plot.Plot, name string) error {
		for _, ext := range []string{".png", ".svg"} {
			path := filepath.Join(dir, name+ext)
			if err := p.Save(8*vg.Inch, 4*vg.Inch, path); err != nil {
				return fmt.Errorf("benchcompare: plot %s: %w", path, err)
			}
			files = append(files, path)
		}
		return nil
	}
	type series struct {
		name string
		y    func(ScalePoint) float64
	}
	draw := func(pts []ScalePoint, x func(ScalePoint) float64, logX bool, title, xl, yl string, ss []series) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xl, yl
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		if logX {
			p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		}
		for i, s := range ss {
			var xy plotter.XYs
			for _, pt := range pts {
				if pt.Error == "" {
					xy = append(xy, plotter.XY{X: x(pt), Y: s.y(pt)})
				}
			}
			if len(xy) == 0 {
				continue
			}
			l, sc, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, err
			}
			l.Color, sc.Color = scaleColors[i%len(scaleColors)], scaleColors[i%len(scaleColors)]
			p.Add(l, sc)
			p.Legend.Add(s.name, l, sc)
		}
		return p, nil
	}
	tput := series{"throughput, msgs/s (1 = 100,000)", func(p ScalePoint) float64 { return p.Through.Rate / 1e5 }}
	p99 := series{"p99 latency, ms", func(p ScalePoint) float64 { return p.Latency.P99Us / 1e3 }}
	p50 := series{"p50 latency, ms", func(p ScalePoint) float64 { return p.Latency.P50Us / 1e3 }}
	if len(r.Chain) > 0 {
		p, err := draw(r.Chain, func(p ScalePoint) float64 { return float64(p.Brokers) }, false,
			fmt.Sprintf("chain B1→Bn, δ = %d: throughput and latency against the path length", r.Delta), "brokers on the path", "", []series{tput, p99, p50})
		if err == nil {
			err = save(p, "scale-chain")
		}
		if err != nil {
			return files, err
		}
	}
	if len(r.Subs) > 0 {
		x := func(p ScalePoint) float64 { return float64(p.Subs) }
		p, err := draw(r.Subs, x, true, "B1→B2 with N stock subscriptions at B2 (routed through B1)", "routed subscriptions", "", []series{tput, p99, p50})
		if err == nil {
			err = save(p, "scale-subs")
		}
		if err != nil {
			return files, err
		}
		rss := func(i int) func(ScalePoint) float64 {
			return func(p ScalePoint) float64 {
				if len(p.RSSMB) <= i {
					return 0
				}
				return p.RSSMB[i]
			}
		}
		m, err := draw(r.Subs, x, true, "broker memory against routed subscriptions", "routed subscriptions", "RSS, MB",
			[]series{{"B1 (routed from B2)", rss(0)}, {"B2 (local subscribers)", rss(1)}})
		if err == nil {
			err = save(m, "scale-memory")
		}
		if err != nil {
			return files, err
		}
	}
	return files, nil
}
