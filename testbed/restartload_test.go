package testbed

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// loadBase: seven brokers (B1 the root, B2 and B3 its children, B4 and B5
// B2's); B2 crashes at 5s and restarts at 8s; publishing ends at 20s.
const loadBase = `name = "load"
seed = 1
duration = "20s"
warmup = "1s"

[overlay]
delta = 2

[topology]
kind = "balanced"
brokers = 7
fanout = 2

[[publishers]]
count = 1
brokers = ["B1"]
rate = 10
attrs = { class = "'STOCK'" }

[[subscribers]]
count = 1
brokers = "leaves"
filter = "[class,eq,'STOCK']"

[[faults]]
at = "5s"
crash = ["B2"]

[[faults]]
at = "8s"
restart = ["B2"]
`

// loadRun records a sample a second of every broker from 1s to 23s, each
// at 100 msgs/s (50 in, 50 out) and cpu (-1: not measured) percent, B2
// down from 5s to its restart at 8s; r2 overrides B2's rate and CPU in
// the period ending at t after the restart.
func loadRun(t *testing.T, src string, cpu float64, r2 func(t time.Duration) (rate int64, cpu float64)) (*Plan, *Recorder) {
	t.Helper()
	p := mustParse(t, src)
	r := NewRecorder()
	r.FaultApplied(0, 5*time.Second, nil)
	r.FaultApplied(1, 8*time.Second, nil)
	for at := time.Second; at <= 23*time.Second; at += time.Second {
		for _, b := range p.Topo.Names {
			s := BrokerSample{At: at, Broker: b, MsgsIn: 50, MsgsOut: 50, CPU: cpu, Up: true}
			if b == "B2" {
				switch {
				case at > 5*time.Second && at <= 8*time.Second:
					s = BrokerSample{At: at, Broker: b, MsgsIn: -1, MsgsOut: -1, CPU: -1}
				case at > 8*time.Second && r2 != nil:
					rate, c := r2(at)
					s.MsgsIn, s.MsgsOut, s.CPU = rate/2, rate-rate/2, c
				}
			}
			r.Sample(s)
		}
	}
	return p, r
}

func loadOf(t *testing.T, p *Plan, r *Recorder) LoadAfterRestart {
	t.Helper()
	ls := loadAfterRestart(p, r.faults, r.manual, r.samples)
	if len(ls) != 1 {
		t.Fatalf("load after restart: %d entries, want 1: %+v", len(ls), ls)
	}
	l := ls[0]
	if l.Broker != "B2" || l.RestartMs != 8000 || strings.Join(l.Neighbours, ",") != "B1,B4,B5" {
		t.Fatalf("entry %+v: want B2 restarted at 8000 ms with neighbours B1,B4,B5", l)
	}
	return l
}

func settled(l LoadAfterRestart) string {
	if l.SettledMs == nil {
		return "null"
	}
	b, _ := json.Marshal(*l.SettledMs)
	return string(b)
}

func TestLoadAfterRestartStormThenQuiet(t *testing.T) {
	// 5,000 msgs/s in the five periods ending 9s..13s, then like the others.
	p, r := loadRun(t, loadBase, -1, func(at time.Duration) (int64, float64) {
		if at <= 13*time.Second {
			return 5000, -1
		}
		return 100, -1
	})
	l := loadOf(t, p, r)
	if settled(l) != "5000" || l.PeakRate != 5000 || l.CPUMeasure || l.PeakCPU != nil {
		t.Fatalf("storm for 5s: settled %s, %+v; want 5000 ms, peak 5000, CPU not measured", settled(l), l)
	}
	if l.ObservedMs != 20000 || l.Samples != 12 || l.NbrRate != 100 {
		t.Fatalf("observation %+v: want until 20000 ms, 12 periods, neighbours at 100/s", l)
	}
	line := formatLoadAfterRestart(l)
	if want := "  after restart of B2 at 8.0s: rate within 2× of its neighbours after 5.0s (peak 5000 msgs/s vs 100; CPU not measured in this mode)"; line != want {
		t.Fatalf("line\n%q\nwant\n%q", line, want)
	}
}

func TestLoadAfterRestartQuietAtOnce(t *testing.T) {
	// At once like its neighbours, or a little above them (140 ≤ 2 × 100).
	p, r := loadRun(t, loadBase, -1, func(at time.Duration) (int64, float64) {
		if at == 9*time.Second {
			return 140, -1
		}
		return 100, -1
	})
	if l := loadOf(t, p, r); settled(l) != "0" || l.PeakRate != 140 {
		t.Fatalf("quiet at once: settled %s, %+v; want 0", settled(l), l)
	}
	// The floor: neighbours idle at 0 msgs/s, B2 at 40 is within.
	p, r = loadRun(t, loadBase, -1, func(time.Duration) (int64, float64) { return 40, -1 })
	for i := range r.samples {
		if r.samples[i].Broker != "B2" && r.samples[i].MsgsIn > 0 {
			r.samples[i].MsgsIn, r.samples[i].MsgsOut = 0, 0
		}
	}
	if l := loadOf(t, p, r); settled(l) != "0" || l.NbrRate != 0 {
		t.Fatalf("idle neighbours: settled %s, %+v; want 0 (within the floor)", settled(l), l)
	}
}

func TestLoadAfterRestartNeverSettles(t *testing.T) {
	p, r := loadRun(t, loadBase, -1, func(time.Duration) (int64, float64) { return 300, -1 })
	l := loadOf(t, p, r)
	if l.SettledMs != nil || l.PeakRate != 300 {
		t.Fatalf("never settles: settled %s, %+v; want null", settled(l), l)
	}
	b, err := json.Marshal(l)
	if err != nil || !strings.Contains(string(b), `"settled_after_ms":null`) {
		t.Fatalf("json %s (%v): want settled_after_ms null", b, err)
	}
	if line := formatLoadAfterRestart(l); !strings.Contains(line, "rate not within 2× of its neighbours by 20.0s") {
		t.Fatalf("line %q", line)
	}
	// Quiet only after the end of publishing (20s) is never, too.
	p, r = loadRun(t, loadBase, -1, func(at time.Duration) (int64, float64) {
		if at <= 20*time.Second {
			return 5000, -1
		}
		return 100, -1
	})
	if l := loadOf(t, p, r); l.SettledMs != nil {
		t.Fatalf("quiet after publishing: settled %s, want null", settled(l))
	}
}

func TestLoadAfterRestartCPU(t *testing.T) {
	// Process mode: neighbours at 10% of a core; B2 at its neighbours'
	// rate but 60% for three periods, then 12%.
	p, r := loadRun(t, loadBase, 10, func(at time.Duration) (int64, float64) {
		if at <= 11*time.Second {
			return 100, 60
		}
		return 100, 12
	})
	l := loadOf(t, p, r)
	if settled(l) != "3000" || !l.CPUMeasure || l.PeakCPU == nil || *l.PeakCPU != 60 || l.NbrCPU == nil || *l.NbrCPU != 10 {
		t.Fatalf("CPU high for 3s: settled %s, %+v; want 3000 ms, peak CPU 60 vs 10", settled(l), l)
	}
	line := formatLoadAfterRestart(l)
	if want := "  after restart of B2 at 8.0s: rate and CPU within 2× of its neighbours after 3.0s (peak 100 msgs/s vs 100; CPU 60% vs 10%)"; line != want {
		t.Fatalf("line\n%q\nwant\n%q", line, want)
	}
	// Within the CPU floor (14% ≤ 10 + 5): settled at once.
	p, r = loadRun(t, loadBase, 10, func(time.Duration) (int64, float64) { return 100, 14 })
	if l := loadOf(t, p, r); settled(l) != "0" {
		t.Fatalf("CPU within the floor: settled %s, want 0", settled(l))
	}
}

func TestLoadAfterRestartNextFaultEndsObservation(t *testing.T) {
	// B5, a neighbour of B2, crashes at 11s: B2 is observed until then,
	// while it still storms (5,000 msgs/s until 13s).
	src := loadBase + "\n[[faults]]\nat = \"11s\"\ncrash = [\"B5\"]\n"
	p, r := loadRun(t, src, -1, func(at time.Duration) (int64, float64) {
		if at <= 13*time.Second {
			return 5000, -1
		}
		return 100, -1
	})
	r.FaultApplied(2, 11*time.Second, nil)
	l := loadOf(t, p, r)
	if l.SettledMs != nil || l.ObservedMs != 11000 || l.Samples != 3 {
		t.Fatalf("next fault at 11s: settled %s, %+v; want null, observed until 11000 ms over 3 periods", settled(l), l)
	}
	// A fault elsewhere (B7, under B3) does not end it.
	src = loadBase + "\n[[faults]]\nat = \"11s\"\ncrash = [\"B7\"]\n"
	p, r = loadRun(t, src, -1, func(at time.Duration) (int64, float64) {
		if at <= 13*time.Second {
			return 5000, -1
		}
		return 100, -1
	})
	r.FaultApplied(2, 11*time.Second, nil)
	if l := loadOf(t, p, r); settled(l) != "5000" || l.ObservedMs != 20000 {
		t.Fatalf("fault elsewhere: settled %s, %+v; want 5000 ms, observed until 20000", settled(l), l)
	}
}

func TestLoadAfterRestartInSummary(t *testing.T) {
	p, r := loadRun(t, loadBase, -1, func(at time.Duration) (int64, float64) {
		if at <= 13*time.Second {
			return 5000, -1
		}
		return 100, -1
	})
	dir := t.TempDir()
	sum, err := WriteResults(dir, p, r, "sim", time.Now(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.LoadAfterRestart) != 1 || settled(sum.LoadAfterRestart[0]) != "5000" {
		t.Fatalf("summary load_after_restart %+v", sum.LoadAfterRestart)
	}
	back, _, _, err := ReadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.LoadAfterRestart) != 1 || settled(back.LoadAfterRestart[0]) != "5000" {
		t.Fatalf("summary.json load_after_restart %+v", back.LoadAfterRestart)
	}
	if out := FormatSummary(back, dir); !strings.Contains(out, "after restart of B2 at 8.0s: rate within 2× of its neighbours after 5.0s") {
		t.Fatalf("printed summary lacks the line:\n%s", out)
	}
}

func TestLoadAfterRestartNeighboursAfterLeave(t *testing.T) {
	// B1, the root, leaves at 3s: B2 becomes the root and adopts B3, so
	// B2's neighbours at its restart are B4, B5 and B3.
	src := strings.Replace(loadBase, "brokers = [\"B1\"]", "brokers = [\"B3\"]", 1) + "\n[[faults]]\nat = \"3s\"\nleave = [\"B1\"]\n"
	p := mustParse(t, src)
	r := NewRecorder()
	for i, f := range p.Faults { // in time order: the leave first
		r.FaultApplied(i, f.At, nil)
	}
	for _, b := range p.Topo.Names {
		r.Sample(BrokerSample{At: 9 * time.Second, Broker: b, MsgsIn: 50, MsgsOut: 50, CPU: -1, Up: true})
	}
	ls := loadAfterRestart(p, r.faults, r.manual, r.samples)
	if len(ls) != 1 || strings.Join(ls[0].Neighbours, ",") != "B4,B5,B3" || settled(ls[0]) != "0" {
		t.Fatalf("after B1's leave: %+v, want B2 with neighbours B4,B5,B3, settled 0", ls)
	}
}
