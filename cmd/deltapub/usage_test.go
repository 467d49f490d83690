package main

import (
	"flag"
	"regexp"
	"strings"
	"testing"
)

// flagMention is a flag named in a usage text: --name.
var flagMention = regexp.MustCompile(`(^|[^-\w])--([a-z][a-z0-9-]*)`)

// Every command's -h prints its usage line and every one of its flags,
// exits 0, and its text names no flag it does not have.
func TestUsageMatchesFlags(t *testing.T) {
	for _, c := range commands {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(fs)
		code, out, _ := capture(t, func() int { return dispatch(append(strings.Fields(c.name), "-h")) })
		if code != 0 || !strings.HasPrefix(out, "Usage: deltapub "+c.name) {
			t.Errorf("%s -h: exit %d, stdout %q", c.name, code, out)
			continue
		}
		fs.VisitAll(func(f *flag.Flag) {
			if !regexp.MustCompile(`\n  -` + regexp.QuoteMeta(f.Name) + `[ \n]`).MatchString(out) {
				t.Errorf("%s -h does not list --%s:\n%s", c.name, f.Name, out)
			}
			if strings.TrimSpace(f.Usage) == "" {
				t.Errorf("%s --%s has no help text", c.name, f.Name)
			}
		})
		for _, m := range flagMention.FindAllStringSubmatch(c.about+c.args, -1) {
			if fs.Lookup(m[2]) == nil {
				t.Errorf("%s: its usage text names --%s, which is not one of its flags", c.name, m[2])
			}
		}
	}
}

// The lists of commands name every command, and a group's -h its own.
func TestUsageListsCommands(t *testing.T) {
	_, _, top := capture(t, func() int { return dispatch(nil) }) // on stderr: exit 2
	for _, c := range commands {
		group, sub, two := strings.Cut(c.name, " ")
		if !two {
			if !strings.Contains(top, "\n  "+c.name+" ") {
				t.Errorf("deltapub without a command does not list %s:\n%s", c.name, top)
			}
			continue
		}
		if !strings.Contains(top, "\n  "+group+" ") {
			t.Errorf("deltapub without a command does not list %s:\n%s", group, top)
		}
		code, out, _ := capture(t, func() int { return dispatch([]string{group, "-h"}) })
		if code != 0 || !strings.Contains(out, "\n  "+sub+" ") {
			t.Errorf("%s -h: exit %d, does not list %s:\n%s", group, code, sub, out)
		}
	}
}

// Flags go before, between or after the positional arguments; "--" ends
// them; a wrong number of arguments or an unknown command exits 2.
func TestDispatchArguments(t *testing.T) {
	var got []string
	var verbose *bool
	commands = append(commands, command{name: "sim probe", summary: "a probe", args: "A B", nargs: 2, setup: func(fs *flag.FlagSet) func([]string) int {
		verbose = fs.Bool("v", false, "verbose")
		return func(args []string) int { got = args; return 0 }
	}})
	defer func() { commands = commands[:len(commands)-1] }()
	cases := []struct {
		args []string
		code int
		want string // the positional arguments, space-separated
		v    bool
	}{
		{[]string{"sim", "probe", "a", "-v", "b"}, 0, "a b", true},
		{[]string{"sim", "probe", "-v", "a", "b"}, 0, "a b", true},
		{[]string{"sim", "probe", "a", "--", "-v"}, 0, "a -v", false},
		{[]string{"sim", "probe", "a"}, 2, "", false},
		{[]string{"sim", "probe", "a", "b", "c"}, 2, "", false},
		{[]string{"sim", "probe", "-x", "a", "b"}, 2, "", false},
		{[]string{"sim", "nosuch"}, 2, "", false},
		{[]string{"nosuch"}, 2, "", false},
		{[]string{"sim"}, 2, "", false},
	}
	for _, c := range cases {
		got = nil
		code, _, _ := capture(t, func() int { return dispatch(c.args) })
		if code != c.code || strings.Join(got, " ") != c.want || code == 0 && *verbose != c.v {
			t.Errorf("%q: exit %d, arguments %q; want exit %d, arguments %q (-v %v)", c.args, code, got, c.code, c.want, c.v)
		}
	}
}
