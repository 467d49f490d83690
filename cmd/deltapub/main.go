// Command deltapub is the single binary of the project: the broker daemon,
// the clients, the simulator, the testbed and the benchmarks, as subcommands.
// It stays thin: flags in, package calls out.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// command is one subcommand. run receives the arguments after the command
// name and returns the process exit code.
type command struct {
	name    string
	summary string
	run     func(args []string) int
}

var commands = map[string]command{}

// register adds a subcommand; each lives in its own file and registers itself
// from init, so subcommands can be added without touching this file.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("deltapub: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func usage() {
	var b strings.Builder
	b.WriteString("deltapub: δ-fault-tolerant content-based publish/subscribe\n\nUsage: deltapub <command> [flags] [args]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, commands[n].summary)
	}
	b.WriteString("\nRun 'deltapub <command> --help' for the flags of a command.\n")
	fmt.Fprint(os.Stderr, b.String())
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	switch name {
	case "-h", "--help", "help":
		usage()
		os.Exit(0)
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "deltapub: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	os.Exit(c.run(os.Args[2:]))
}
