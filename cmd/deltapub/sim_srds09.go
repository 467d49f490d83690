package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/deltapub/deltapub/internal/sim"
)

const simSRDS09About = `The slides' experiment (SRDS'09): 83 brokers (--brokers) in a random tree
(--seed), δ = 3, 2,600 subscriptions (--subs), 26 publishers at 10/s; after
--warmup, --crashes adjacent brokers in the middle of the tree crash, and
publishing goes on for --after. Prints the guarantees, the delay before and
after the crash, the recovery against its bound, the control traffic, the
drain and the simulation speed; exits 1 if a guarantee failed.
`

func simSRDS09Cmd(fs *flag.FlagSet) func([]string) int {
	o := sim.DefaultSRDSOptions()
	crashes := fs.String("crashes", "1", "simultaneous crashes of adjacent brokers R1..Rk, or a comma-separated list of runs (0: the no-failure overhead run)")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "seed of the experiment (tree, clients, filters)")
	fs.IntVar(&o.Subs, "subs", o.Subs, "subscriptions")
	fs.IntVar(&o.Brokers, "brokers", o.Brokers, "brokers")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "publishing before the crash")
	fs.DurationVar(&o.After, "after", o.After, "publishing after the crash")
	node := fs.String("node", "overlay", "protocol under test: overlay (the core) or flood (the simulator's no-fault-tolerance reference)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the runs to this file (go tool pprof)")
	timeline := fs.String("timeline", "", "write the delivery delay timeline (CSV, time relative to the crash) to this file; with several runs, -K is added before the extension")
	return func([]string) int {
		var ks []int
		for _, f := range strings.Split(*crashes, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || k < 0 || k > o.Delta {
				fmt.Fprintf(os.Stderr, "deltapub sim srds09: --crashes %q: want numbers in 0..%d\n", *crashes, o.Delta)
				return 2
			}
			ks = append(ks, k)
		}
		var err error
		if o.Factory, err = nodeFactory(*node); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sim srds09:", err)
			return 2
		}
		o.Clock = time.Now
		o.CPU = cpuTime
		if os.Getenv("GOGC") == "" {
			// The 83 routing tables (~215,000 entries) are a large live heap
			// that the default GOGC=100 rescans every few hundred MB of
			// garbage: ~15% of the run. A batch experiment can afford the
			// memory (peak ~0.6 GB instead of ~0.3 GB); GOGC overrides.
			debug.SetGCPercent(400)
		}
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err == nil {
				err = pprof.StartCPUProfile(f)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "deltapub sim srds09: --cpuprofile:", err)
				return 2
			}
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
		rc := 0
		var summary []string
		for _, k := range ks {
			o.Crashes = k
			cpu0 := cpuTime()
			res := sim.RunSRDS09(o)
			cpu := cpuTime() - cpu0
			fmt.Print(res.Text())
			if cpu > 0 && res.Err == nil {
				// On a shared machine wall time overstates the cost; the
				// process CPU time (simulation and checkers) does not.
				fmt.Printf("cpu=%v (simulation and checkers) speed_cpu=%.1fx real time\n", cpu.Round(time.Millisecond), float64(res.Virtual)/float64(cpu))
			}
			fmt.Println()
			if res.Err != nil || res.Report.Failed(false) {
				rc = 1
			}
			if res.Err == nil {
				recovery := res.Recovery.Round(time.Millisecond).String()
				if res.Recovery < 0 {
					recovery = "n/a"
				}
				summary = append(summary, fmt.Sprintf("crashes=%d lost=%d dup=%d reord=%d recovery=%s (bound %v) pre_mean=%v peak=%v drain=%v control/delivery=%.3f speed=%.1fx (wall) %.1fx (cpu) steady=%.1fx (cpu)",
					k, res.Report.Lost, res.Report.Duplicates, res.Report.Reordered, recovery, res.Bound,
					res.PreMean.Round(10*time.Microsecond), res.PeakMax.Round(time.Millisecond), res.DrainTime, res.ControlPerDeliv, float64(res.Virtual)/float64(res.Wall), float64(res.Virtual)/float64(max(cpu, 1)), float64(res.SteadyVirtual)/float64(max(res.SteadyCPU, 1))))
			}
			if *timeline != "" {
				name := *timeline
				if len(ks) > 1 {
					ext := ""
					if i := strings.LastIndexByte(name, '.'); i > 0 {
						name, ext = name[:i], name[i:]
					}
					name = fmt.Sprintf("%s-%d%s", name, k, ext)
				}
				if err := writeFile(name, res.TimelineCSV); err != nil {
					fmt.Fprintln(os.Stderr, "deltapub sim srds09: timeline:", err)
					return 1
				}
			}
		}
		if len(ks) > 1 {
			fmt.Println("summary:")
			for _, s := range summary {
				fmt.Println("  " + s)
			}
		}
		return rc
	}
}

func nodeFactory(name string) (sim.NodeFactory, error) {
	switch name {
	case "overlay":
		return sim.NewOverlayNode, nil
	case "flood":
		return sim.NewFloodNode, nil
	}
	return nil, fmt.Errorf("--node %q: want overlay or flood", name)
}
