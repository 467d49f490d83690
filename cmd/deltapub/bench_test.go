package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Flag handling only: nothing here starts a server or installs NATS (a
// bad size is refused before the install).
func TestBenchCompareFlags(t *testing.T) {
	dir := t.TempDir()
	// Safety net: should a case get as far as installing NATS, 'go' is
	// not found and it fails at once.
	t.Setenv("PATH", dir)
	cases := []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--messages", "x"}, 2, "invalid value"},
		{[]string{"--repeat", "0", "--nats-dir", dir}, 2, "--repeat 0: must be at least 1"},
		{[]string{"--messages", "-5", "--nats-dir", dir}, 2, "--messages -5: must be at least 1"},
		{[]string{"--no-nats", "--filter-subs", "0"}, 2, "--filter-subs 0: must be at least 1"},
		{[]string{"--no-nats", "--filter-pubs", "-1"}, 2, "--filter-pubs -1: must be at least 0"},
		{[]string{"--repeat", "10", "--nats-dir", dir}, 2, "repeat 10 out of range"},
		{[]string{"--messages", "1000", "--latency-messages", "5", "--nats-dir", dir}, 2, "latency messages 5 out of range"},
		{[]string{"--readme", filepath.Join(dir, "none.md"), "--nats-dir", dir}, 2, "--readme: benchcompare: open"},
		{[]string{"--failover-kill-at", "20", "--nats-dir", dir}, 2, "failover kill at 20 s out of range"},
	}
	for _, c := range cases {
		code, _, stderr := capture(t, func() int { return dispatch(append([]string{"bench", "compare"}, c.args...)) })
		if code != c.code || !strings.Contains(stderr, c.err) {
			t.Errorf("bench compare %q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.err)
		}
	}
	// The refused runs installed nothing.
	if _, err := os.Stat(filepath.Join(dir, "nats-server")); !os.IsNotExist(err) {
		t.Errorf("nats-server appeared in %s: %v", dir, err)
	}
}

func TestBenchMatchCommand(t *testing.T) {
	for _, wl := range []string{"stock", "ranges"} {
		code, out, errOut := capture(t, func() int {
			return dispatch([]string{"bench", "match", "--subs", "2000", "--events", "50", "--ops", "50", "--workload", wl, "--json"})
		})
		if code != 0 {
			t.Fatalf("bench match %s: exit %d, stderr %s", wl, code, errOut)
		}
		for _, k := range []string{`"subs":2000`, `"workload":"` + wl + `"`, `"median_us":`, `"p99_us":`, `"matches_per_pub":`,
			`"heap_bytes_per_sub":`, `"bruteforce_median_us":`, `"speedup":`, `"agree":true`} {
			if !strings.Contains(out, k) {
				t.Errorf("bench match %s --json: %s lacks %s", wl, out, k)
			}
		}
	}
	if code, _, _ := capture(t, func() int { return dispatch([]string{"bench", "nosuch"}) }); code != 2 {
		t.Errorf("unknown benchmark: exit %d, want 2", code)
	}
	if code, _, _ := capture(t, func() int { return dispatch([]string{"bench", "match", "--workload", "x"}) }); code != 2 {
		t.Errorf("unknown workload: exit %d, want 2", code)
	}
}

// Flag handling only: a bad size is refused before any broker starts.
func TestBenchGryphonFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--subscribers", "0"}, "subscribers 0 out of range [1, 200]"},
		{[]string{"--away-every", "10s", "--away-for", "10s"}, "away-for 10s out of range [100ms, 9.999s]"},
		{[]string{"--outage", "20m"}, "outage 20m0s out of range [1s, 10m0s]"},
		{[]string{"--hops", "0"}, "hops 0 out of range [1, 9]"},
		{[]string{"--duration", "x"}, "invalid value"},
		{[]string{"--pfs", "--pfs-matching", "1,x"}, `--pfs-matching "1,x"`},
		{[]string{"--pfs", "--pfs-matching", "200"}, "matching 200 out of range [1, 100]"},
		{[]string{"--pfs", "--pfs-batch", "0"}, "batch 0 out of range"},
	} {
		code, _, stderr := capture(t, func() int { return dispatch(append([]string{"bench", "gryphon"}, c.args...)) })
		if code != 2 || !strings.Contains(stderr, c.err) {
			t.Errorf("bench gryphon %q: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.err)
		}
	}
}
