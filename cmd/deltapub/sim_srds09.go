package main

import (
	"fmt"
	"os"
	"time"

	"github.com/deltapub/deltapub/internal/sim"
)

func simSRDS09(args []string) int {
	fs := newFlagSet("sim srds09", "deltapub sim srds09 [--crashes 0|1|2|3] [--seed S] [--subs N] [--timeline FILE.csv]")
	o := sim.DefaultSRDSOptions()
	fs.IntVar(&o.Crashes, "crashes", o.Crashes, "simultaneous crashes of adjacent brokers R1..Rk (0: the no-failure overhead run)")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "seed of the experiment (tree, clients, filters)")
	fs.IntVar(&o.Subs, "subs", o.Subs, "subscriptions")
	fs.IntVar(&o.Brokers, "brokers", o.Brokers, "brokers")
	node := fs.String("node", "overlay", "protocol under test: overlay (the core) or flood (the simulator's no-fault-tolerance reference)")
	timeline := fs.String("timeline", "", "write the delivery delay timeline (CSV, time relative to the crash) to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if o.Factory, err = nodeFactory(*node); err != nil {
		fmt.Fprintln(os.Stderr, "deltapub sim srds09:", err)
		return 2
	}
	o.Clock = time.Now
	res := sim.RunSRDS09(o)
	fmt.Print(res.Text())
	if res.Err != nil {
		return 1
	}
	if *timeline != "" {
		f, err := os.Create(*timeline)
		if err == nil {
			err = res.TimelineCSV(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sim srds09: timeline:", err)
			return 1
		}
	}
	if res.Report.Failed(false) {
		return 1
	}
	return 0
}

func nodeFactory(name string) (sim.NodeFactory, error) {
	switch name {
	case "overlay":
		return sim.DefaultFactory, nil
	case "flood":
		return sim.NewFloodNode, nil
	}
	return nil, fmt.Errorf("--node %q: want overlay or flood", name)
}
