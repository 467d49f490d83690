// Command deltapub is the single binary of the project: the broker daemon,
// the clients, the simulator, the testbed and the benchmarks, as subcommands.
// It stays thin: a command parses its flags and calls a package.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one subcommand: "broker", or "sim fuzz" (the command fuzz of
// the group sim).
type command struct {
	name    string
	summary string // one line, in the list of commands
	args    string // the positional arguments of the usage line ("FILE")
	nargs   int    // how many positional arguments it takes
	about   string // what it does, after the usage line
	// setup defines the command's flags on fs and returns its body, which
	// gets the positional arguments and returns the exit code.
	setup func(fs *flag.FlagSet) func(args []string) int
}

// groups are the first words of the two-word commands.
var groups = []struct{ name, summary string }{
	{"sim", "deterministic simulator: fuzz, replay a seed, run a scenario file, the SRDS'09 experiment"},
	{"testbed", "run an experiment from a TOML file: faults, measurements, plots, verdict"},
	{"bench", "run a benchmark: the matching index, the 3-broker chain, deltapub beside NATS"},
}

// commands is every subcommand, in the order of the usage texts.
var commands = []command{
	{name: "broker", summary: "run a broker of the overlay", about: brokerAbout, setup: brokerCmd},
	{name: "pub", summary: "publish and wait for the acknowledgements", args: "PUBLICATION", nargs: 1, about: pubAbout, setup: pubCmd},
	{name: "sub", summary: "subscribe and print deliveries as JSON lines", args: "FILTER", nargs: 1, about: subAbout, setup: subCmd},
	{name: "ctl", summary: "inspect a running broker through its admin endpoint", args: "state|topology|subs|queue|peers", nargs: 1, about: ctlAbout, setup: ctlCmd},
	{name: "match", summary: "check whether a publication matches a filter", about: matchAbout, setup: matchCmd},
	{name: "certs", summary: "make an overlay CA and broker certificates for mutual TLS", about: certsAbout, setup: certsCmd},

	{name: "sim fuzz", summary: "random scenarios with faults, every guarantee checked", about: simFuzzAbout, setup: simFuzzCmd},
	{name: "sim replay", summary: "replay one fuzz run from its seed", about: simReplayAbout, setup: simReplayCmd},
	{name: "sim run", summary: "run a scenario file and print its outcome", args: "FILE", nargs: 1, about: simRunAbout, setup: simRunCmd},
	{name: "sim srds09", summary: "the slides' setup: 83 brokers, δ=3, 2,600 subscriptions, 26 publishers at 10/s", about: simSRDS09About, setup: simSRDS09Cmd},

	{name: "testbed run", summary: "run the experiment of FILE: results, plots, verdict", args: "FILE", nargs: 1, about: testbedRunAbout, setup: testbedRunCmd},
	{name: "testbed check", summary: "validate FILE without launching anything", args: "FILE", nargs: 1, setup: testbedCheckCmd},
	{name: "testbed report", summary: "print the summary of an earlier run and redraw its plots", args: "DIR", nargs: 1, setup: testbedReportCmd},
	{name: "testbed compare", summary: "set two earlier runs side by side", args: "DIR1 DIR2", nargs: 2, setup: testbedCompareCmd},
	{name: "testbed fuzz", summary: "random experiments within δ, each run and judged", about: testbedFuzzAbout, setup: testbedFuzzCmd},
	{name: "testbed manifests", summary: "write Kubernetes manifests for FILE: StatefulSet and Service for the brokers, Jobs for the clients", args: "FILE", nargs: 1, about: testbedManifestsAbout, setup: testbedManifestsCmd},
	{name: "testbed clock", summary: "answer time stamps on stdin (a host's side of a run's clock offsets)", about: testbedClockAbout, setup: testbedClockCmd},

	{name: "bench match", summary: "matching index vs brute force on a workload", about: benchMatchAbout, setup: benchMatchCmd},
	{name: "bench durable", summary: "publish throughput and publish→ack p50/p99 with durability fsync, write and none, side by side", about: benchDurableAbout, setup: benchDurableCmd},
	{name: "bench gryphon", summary: "the Gryphon paper's figures for durable subscriptions: SHB delivery rate with and without disconnections, catch-up after an SHB outage, 5-hop latency; --pfs: the filtering log against per-subscriber queues", about: benchGryphonAbout, setup: benchGryphonCmd},
	{name: "bench overlay", summary: "3-broker chain over QUIC: throughput, latency at 1,000/s, RSS, vs a bare QUIC relay chain", about: benchOverlayAbout, setup: benchOverlayCmd},
	{name: "bench clients", summary: "many client sessions on one broker (ws or quic): connect rate, bytes per connection, fan-out, reconnect storm", about: benchClientsAbout, setup: benchClientsCmd},
	{name: "bench compare", summary: "deltapub side by side with core NATS and JetStream on loopback, failover included (installs nats-server if missing)", about: benchCompareAbout, setup: benchCompareCmd},
	{name: "bench scale", summary: "throughput, p99 and broker memory against path length and routed subscriptions, with plots", about: benchScaleAbout, setup: benchScaleCmd},
}

func main() { os.Exit(dispatch(os.Args[1:])) }

// dispatch runs the command that args name and returns the exit code: 0,
// 1 when the command failed, 2 on a bad command line.
func dispatch(args []string) int {
	if len(args) == 0 {
		listUsage(os.Stderr, "")
		return 2
	}
	if isHelp(args[0]) {
		listUsage(os.Stdout, "")
		return 0
	}
	name := args[0]
	if groupSummary(name) != "" {
		if len(args) == 1 {
			listUsage(os.Stderr, name)
			return 2
		}
		if isHelp(args[1]) {
			listUsage(os.Stdout, name)
			return 0
		}
		name += " " + args[1]
		args = args[1:]
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(os.Stderr, "deltapub: unknown command %q\n\n", name)
		group, _, _ := strings.Cut(name, " ")
		if groupSummary(group) == "" {
			group = ""
		}
		listUsage(os.Stderr, group)
		return 2
	}
	return c.run(args[1:])
}

func isHelp(s string) bool { return s == "-h" || s == "--help" || s == "help" }

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func groupSummary(name string) string {
	for _, g := range groups {
		if g.name == name {
			return g.summary
		}
	}
	return ""
}

// listUsage lists the commands of group ("": the top level, where a group
// is one line).
func listUsage(w io.Writer, group string) {
	var b strings.Builder
	if group == "" {
		b.WriteString("deltapub: δ-fault-tolerant content-based publish/subscribe\n\nUsage: deltapub <command> [flags] [args]\n\nCommands:\n")
	} else {
		fmt.Fprintf(&b, "Usage: deltapub %s <command> [flags] [args]\n\nCommands:\n", group)
	}
	listed := map[string]bool{}
	for _, c := range commands {
		first, rest, two := strings.Cut(c.name, " ")
		switch {
		case group == "" && two && !listed[first]:
			listed[first] = true
			fmt.Fprintf(&b, "  %-10s %s\n", first, groupSummary(first))
		case group == "" && !two:
			fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
		case group != "" && first == group:
			fmt.Fprintf(&b, "  %-10s %s\n", rest, c.summary)
		}
	}
	if group == "" {
		b.WriteString("\nRun 'deltapub <command> -h' for the flags of a command.\n")
	} else {
		fmt.Fprintf(&b, "\nRun 'deltapub %s <command> -h' for the flags of a command.\n", group)
	}
	fmt.Fprint(w, b.String())
}

// run parses c's flags from args and runs c. Flags may come before,
// between or after the positional arguments; "--" ends the flags. -h
// prints the usage on stdout and exits 0; a bad flag or a wrong number of
// arguments prints it on stderr and exits 2.
func (c *command) run(args []string) int {
	fs := flag.NewFlagSet("deltapub "+c.name, flag.ContinueOnError)
	fs.Usage = func() {} // written below, to stdout or stderr
	body := c.setup(fs)
	pos, err := parseInterleaved(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.usage(os.Stdout, fs)
		return 0
	case err != nil: // the flag package has said what was wrong
		c.usage(os.Stderr, fs)
		return 2
	case len(pos) != c.nargs && c.nargs == 0:
		fmt.Fprintf(os.Stderr, "deltapub %s: unexpected argument %q\n\n", c.name, pos[0])
		c.usage(os.Stderr, fs)
		return 2
	case len(pos) != c.nargs:
		fmt.Fprintf(os.Stderr, "deltapub %s: want %d argument(s) (%s), got %d\n\n", c.name, c.nargs, c.args, len(pos))
		c.usage(os.Stderr, fs)
		return 2
	}
	return body(pos)
}

// usage writes c's usage line, its description and its flags.
func (c *command) usage(w io.Writer, fs *flag.FlagSet) {
	line := "deltapub " + c.name
	if hasFlags(fs) {
		line += " [flags]"
	}
	if c.args != "" {
		line += " " + c.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n", line)
	about := c.about
	if about == "" && c.summary != "" { // the summary as a sentence
		about = strings.ToUpper(c.summary[:1]) + c.summary[1:] + ".\n"
	}
	fmt.Fprint(w, about)
	if hasFlags(fs) {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseInterleaved parses flags that may come before or after the
// positional arguments (deltapub testbed run FILE --mode sim) and returns
// the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil // after "--", no more flags
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
