package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/deltapub/deltapub/testbed"
)

const testbedUsage = `Usage:
  deltapub testbed run FILE [--mode process|inproc|sim] [--out DIR] [--quiet]
  deltapub testbed check FILE [--tree]
  deltapub testbed report DIR
  deltapub testbed compare DIR1 DIR2
  deltapub testbed fuzz [--mode process|inproc|sim] [--runs N] [--seed S]
         [--brokers MIN-MAX] [--delta MIN-MAX] [--run-time D] [--out DIR] [--keep]

run      runs the experiment described in FILE and writes summary.json,
         deliveries.csv, brokers.csv and plots (PNG, SVG) into DIR
         (default results/NAME-MODE); exits 1 when the verdict is FAIL
check    validates FILE without launching anything
report   prints the summary of an earlier run and redraws its plots
compare  sets two earlier runs side by side
fuzz     draws N experiments from seeds S, S+1, ... (a tree, clients, faults
         within δ), writes each as DIR/run-SEED/testbed.toml, runs and
         judges it; one line per run, then the totals; exits 1 if any failed

The file format is documented in docs/testbed.md.
`

func init() {
	register(command{
		name:    "testbed",
		summary: "run an experiment from a TOML file: faults, measurements, plots, verdict",
		run:     runTestbed,
	})
}

func runTestbed(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, testbedUsage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(os.Stdout, testbedUsage)
		return 0
	case "run":
		return testbedRun(args[1:])
	case "check":
		return testbedCheck(args[1:])
	case "report":
		return testbedReport(args[1:])
	case "compare":
		return testbedCompare(args[1:])
	case "fuzz":
		return testbedFuzz(args[1:])
	}
	fmt.Fprintf(os.Stderr, "deltapub testbed: unknown subcommand %q\n\n%s", args[0], testbedUsage)
	return 2
}

// parseInterleaved parses flags that may come before or after the
// positional arguments (deltapub testbed run FILE --mode sim).
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parsePositional parses args with parseInterleaved and wants exactly n
// positional arguments. It returns them, or the exit code when the
// command must stop: 0 after --help, 2 after a bad flag or a wrong count
// (the usage is printed).
func parsePositional(fs *flag.FlagSet, args []string, n int) ([]string, int, bool) {
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0, false
		}
		return nil, 2, false
	}
	if len(pos) != n {
		fs.Usage()
		return nil, 2, false
	}
	return pos, 0, true
}

func testbedRun(args []string) int {
	fs := flag.NewFlagSet("testbed run", flag.ContinueOnError)
	mode := fs.String("mode", "process", "backend: process (broker processes), inproc (brokers in this process), sim (deterministic simulator, virtual time)")
	out := fs.String("out", "", "results directory (default results/NAME-MODE)")
	quiet := fs.Bool("quiet", false, "no live progress line")
	binary := fs.String("binary", "", "deltapub binary for broker processes (default: this executable)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: deltapub testbed run FILE [--mode process|inproc|sim] [--out DIR] [--quiet]")
		fs.PrintDefaults()
	}
	pos, code, ok := parsePositional(fs, args, 1)
	if !ok {
		return code
	}
	plan, err := testbed.Load(pos[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
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

func testbedCheck(args []string) int {
	fs := flag.NewFlagSet("testbed check", flag.ContinueOnError)
	tree := fs.Bool("tree", false, "also print the broker tree")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: deltapub testbed check FILE [--tree]   (validates; launches nothing)")
		fs.PrintDefaults()
	}
	pos, code, ok := parsePositional(fs, args, 1)
	if !ok {
		return code
	}
	plan, err := testbed.Load(pos[0])
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

func testbedReport(args []string) int {
	fs := flag.NewFlagSet("testbed report", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: deltapub testbed report DIR   (prints the summary, redraws the plots)")
	}
	pos, code, ok := parsePositional(fs, args, 1)
	if !ok {
		return code
	}
	sum, err := testbed.Redraw(pos[0])
	if sum == nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Print(testbed.FormatSummary(sum, pos[0]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

func testbedCompare(args []string) int {
	fs := flag.NewFlagSet("testbed compare", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), "Usage: deltapub testbed compare DIR1 DIR2") }
	pos, code, ok := parsePositional(fs, args, 2)
	if !ok {
		return code
	}
	a, _, _, err := testbed.ReadResults(pos[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	b, _, _, err := testbed.ReadResults(pos[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Print(testbed.Compare(a, b, pos[0], pos[1]))
	return 0
}

func testbedFuzz(args []string) int {
	def := testbed.DefaultFuzzOptions()
	fs := flag.NewFlagSet("testbed fuzz", flag.ContinueOnError)
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
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: deltapub testbed fuzz [--mode process|inproc|sim] [--runs N] [--seed S] [--brokers 8-20] [--delta 1-3] [--run-time D] [--out DIR] [--keep]")
		fs.PrintDefaults()
	}
	if _, code, ok := parsePositional(fs, args, 0); !ok {
		return code
	}
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
