package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/deltapub/deltapub/testbed"
)

const testbedRunAbout = `Runs the experiment described in FILE (the format: docs/testbed.md) with the
--mode backend and writes summary.json, deliveries.csv, brokers.csv and plots
(PNG, SVG) into the --out directory (default results/NAME-MODE); exits 1 when
the verdict is FAIL.
`

const testbedFuzzAbout = `Draws --runs experiments from seeds --seed, --seed + 1, ... (a tree, clients,
faults within δ), writes each as DIR/run-SEED/testbed.toml (DIR: --out), runs
and judges it; prints one line per run, then the totals; exits 1 if any
failed. --seed S alone replays run S.
`

func testbedRunCmd(fs *flag.FlagSet) func([]string) int {
	mode := fs.String("mode", "", "backend: process (broker processes, here or on the file's [[hosts]] over ssh), inproc (brokers in this process), sim (deterministic simulator, virtual time), netns (each host a network namespace, links shaped; root); default: the file's mode, else process")
	out := fs.String("out", "", "results directory (default results/NAME-MODE)")
	quiet := fs.Bool("quiet", false, "no live progress line")
	binary := fs.String("binary", "", "deltapub binary for broker processes (default: this executable)")
	return func(args []string) int {
		plan, err := testbed.Load(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if *mode == "" {
			*mode = plan.Spec.Mode
		}
		if *mode == "" {
			*mode = "process"
		}
		dir := *out
		if dir == "" {
			dir = filepath.Join("results", plan.Spec.Name+"-"+*mode)
		}
		// Ctrl-C and SIGTERM cancel the run; the backend stops every broker
		// and the results written so far are kept.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		fmt.Fprintf(os.Stderr, "%s\nmode %s, results in %s\n", plan.Describe(), *mode, dir)
		var progress io.Writer // a nil interface: no progress line
		if !*quiet {
			progress = os.Stderr
		}
		opts := testbed.Options{Binary: *binary, Log: os.Stderr}
		sum, err := testbed.Run(ctx, plan, *mode, dir, opts, progress)
		if sum == nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Print(testbed.FormatSummary(sum, dir))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		if sum.Verdict.Verdict != "PASS" {
			return 1
		}
		return 0
	}
}

func testbedCheckCmd(fs *flag.FlagSet) func([]string) int {
	tree := fs.Bool("tree", false, "also print the broker tree")
	return func(args []string) int {
		plan, err := testbed.Load(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(plan.Describe())
		if *tree {
			fmt.Print(plan.Topo.Render())
		}
		fmt.Println("ok")
		return 0
	}
}

func testbedReportCmd(fs *flag.FlagSet) func([]string) int {
	brokers := fs.String("brokers", "", "B1,B2,...: draw the rate and CPU plots for these brokers (default: those next to the faults)")
	return func(args []string) int {
		var list []string
		if *brokers != "" {
			list = strings.Split(*brokers, ",")
		}
		sum, err := testbed.Redraw(args[0], list...)
		if sum == nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Print(testbed.FormatSummary(sum, args[0]))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		return 0
	}
}

func testbedCompareCmd(fs *flag.FlagSet) func([]string) int {
	load := fs.String("load", "", "BROKER1,BROKER2: also set the load of BROKER1 in DIR1 and BROKER2 in DIR2 side by side (docs/results/srds09-replicas.md)")
	labels := fs.String("labels", "run1,run2", "with --load: names of the two runs")
	before := fs.String("before", "", "with --load: the window before, FROM:TO (e.g. 10s:20s)")
	after := fs.String("after", "", "with --load: the window after, FROM:TO")
	plotFile := fs.String("plot", "", "with --load: write a PNG of both brokers' message rates over time")
	return func(args []string) int {
		if *load != "" {
			return testbedCompareLoad(args, *load, *labels, *before, *after, *plotFile)
		}
		a, _, _, err := testbed.ReadResults(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		b, _, _, err := testbed.ReadResults(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Print(testbed.Compare(a, b, args[0], args[1]))
		return 0
	}
}

func testbedFuzzCmd(fs *flag.FlagSet) func([]string) int {
	def := testbed.DefaultFuzzOptions()
	mode := fs.String("mode", def.Mode, "backend: process | inproc | sim")
	runs := fs.Int("runs", 1, "number of runs (seeds S, S+1, ...)")
	seed := fs.Int64("seed", 1, "first seed; --seed S --runs 1 (or --seed S alone) replays run S")
	brokers := fs.String("brokers", fmt.Sprintf("%d-%d", def.BrokersMin, def.BrokersMax), "brokers per run, MIN-MAX or N")
	delta := fs.String("delta", fmt.Sprintf("%d-%d", def.DeltaMin, def.DeltaMax), "δ per run, MIN-MAX or N")
	runTime := fs.Duration("run-time", def.RunTime, "each run's duration (publishing); the drain and setup come on top")
	out := fs.String("out", def.Out, "results: DIR/run-SEED/ per run (testbed.toml and the results)")
	keep := fs.Bool("keep", false, "keep the results of passing runs too (failing runs are always kept)")
	binary := fs.String("binary", "", "deltapub binary for broker processes (default: this executable)")
	verbose := fs.Bool("verbose", false, "backend diagnostics on stderr")
	return func([]string) int {
		o := def
		o.Mode, o.RunTime, o.Out, o.Keep, o.Binary = *mode, *runTime, *out, *keep, *binary
		var err error
		if o.BrokersMin, o.BrokersMax, err = parseRange("brokers", *brokers); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub testbed fuzz:", err)
			return 2
		}
		if o.DeltaMin, o.DeltaMax, err = parseRange("delta", *delta); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub testbed fuzz:", err)
			return 2
		}
		if *runs < 1 || *runs > 1_000_000 {
			fmt.Fprintln(os.Stderr, "deltapub testbed fuzz: --runs: want 1 to 1000000")
			return 2
		}
		if err := o.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if *verbose {
			o.Log = os.Stderr
		}
		// SIGINT and SIGTERM stop the run under way (its brokers with it);
		// the totals so far are printed and the exit is non-zero.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		sum, err := testbed.Fuzz(ctx, *seed, *runs, o, func(r testbed.FuzzResult) { fmt.Println(r.Line()) })
		fmt.Println(sum.Line())
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub testbed fuzz: interrupted:", err)
			return 130
		}
		if sum.Failed > 0 {
			return 1
		}
		return 0
	}
}

const testbedClockAbout = `Answers every line read on standard input with this machine's time in Unix
nanoseconds: the host side of the clock offset measurement of a testbed
run over ssh. Reads at most 4,096 lines.
`

func testbedClockCmd(*flag.FlagSet) func([]string) int {
	return func([]string) int {
		if err := testbed.ClockServe(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
}

const testbedManifestsAbout = `Writes Kubernetes manifests for the experiment of FILE (a kind: List in JSON,
which kubectl apply -f reads): a ConfigMap with every pod's arguments, a
headless Service and a StatefulSet for the brokers (pod i is broker i in
breadth-first order, started once the one before it is ready), and indexed
Jobs for the subscribers (one per subscription) and the publishers. The
faults are listed in an annotation, not applied; the oracle does not run
there.
`

func testbedManifestsCmd(fs *flag.FlagSet) func([]string) int {
	image := fs.String("image", "", "container `image` with deltapub on its PATH and /bin/sh (required)")
	ns := fs.String("namespace", "default", "Kubernetes `namespace` (the brokers' DNS names depend on it)")
	quic := fs.Int("quic-port", 7000, "UDP `port` of every broker")
	adm := fs.Int("admin-port", 7001, "TCP `port` of every broker's admin endpoint")
	out := fs.String("out", "", "write to `file` (default: standard output)")
	return func(args []string) int {
		plan, err := testbed.Load(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		b, err := testbed.Manifests(plan, testbed.ManifestOptions{Image: *image, Namespace: *ns, QUICPort: *quic, AdminPort: *adm})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if *out == "" {
			_, err = os.Stdout.Write(b)
		} else {
			err = os.WriteFile(*out, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
}
