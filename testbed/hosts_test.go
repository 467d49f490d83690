package testbed

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

const hostsBase = `name = "h"
duration = "10s"
warmup = "1s"
[topology]
kind = "balanced"
brokers = 6
[[subscribers]]
brokers = "leaves"
filter = "[class,eq,'T']"
`

func TestHostsPlacement(t *testing.T) {
	p, err := Parse("h.toml", []byte(hostsBase+`
[[broker]]
name = "B6"
host = "a"
[[hosts]]
name = "a"
[[hosts]]
name = "b"
[[hosts]]
name = "c"
`))
	if err != nil {
		t.Fatal(err)
	}
	// Round-robin in breadth-first order over the brokers not placed by
	// hand; B6 by hand.
	want := map[string]string{"B1": "a", "B2": "b", "B3": "c", "B4": "a", "B5": "b", "B6": "a"}
	for n, h := range want {
		if p.Placement[n] != h {
			t.Errorf("%s on %q, want %q (placement %v)", n, p.Placement[n], h, p.Placement)
		}
	}
	if d := p.Describe(); !strings.Contains(d, "host a (netns): B1 B4 B6") {
		t.Errorf("Describe does not list the hosts:\n%s", d)
	}
}

func TestHostsErrors(t *testing.T) {
	cases := []struct{ extra, want string }{
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"a\"\n", `host "a" defined twice`},
		{"[[hosts]]\nname = \"a b\"\n", `host name "a b"`},
		{"[[hosts]]\nname = \"a\"\nssh = \"nouser\"\naddress = \"1.2.3.4\"\n", `want user@host`},
		{"[[hosts]]\nname = \"a\"\nssh = \"u@h:99999\"\naddress = \"1.2.3.4\"\n", `bad port`},
		{"[[hosts]]\nname = \"a\"\nssh = \"u@h\"\n", `address is required with ssh`},
		{"[[hosts]]\nname = \"a\"\ndir = \"rel/dir\"\n", `must be an absolute path`},
		{"[[hosts]]\nname = \"a\"\naddress = \"1.2.3.4;rm\"\n", `shell characters`},
		{"[[broker]]\nname = \"B2\"\nhost = \"zz\"\n[[hosts]]\nname = \"a\"\n", `unknown host "zz"`},
		{"[[broker]]\nname = \"B9\"\nhost = \"a\"\n[[hosts]]\nname = \"a\"\n", `unknown broker "B9"`},
		{"[[broker]]\nname = \"B2\"\njoin = \"B1\"\n", `only for topology kind "explicit"`},
		{"[[hosts]]\nname = \"a\"\n[network]\ndelay = \"5ms\"\n", `at least two [[hosts]]`},
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"b\"\n[network]\ndelay = \"5ms\"\njitter = \"6ms\"\n", `jitter ≤ delay`},
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"b\"\n[network]\nloss = 101.0\n", `within 0..100`},
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"b\"\n[network]\nrate = \"fast\"\n", `rate "fast"`},
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"b\"\n[[network.links]]\nbetween = [\"a\", \"x\"]\n", `unknown host "x"`},
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"b\"\n[[network.links]]\nbetween = [\"a\", \"b\"]\n[[network.links]]\nbetween = [\"b\", \"a\"]\n", `shaped twice`},
		{"mode = \"cluster\"\n", `mode = "cluster"`},
		{"[[faults]]\nat = \"2s\"\npartition = [\"a\"]\n", `partition needs [[hosts]]`},
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"b\"\n[[faults]]\nat = \"2s\"\npartition = [\"a\", \"b\"]\n", `nothing is left on the other side`},
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"b\"\n[[faults]]\nat = \"2s\"\npartition = [\"q\"]\n", `unknown or repeated host "q"`},
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"b\"\n[[hosts]]\nname = \"c\"\n[[faults]]\nat = \"2s\"\npartition = [\"a\"]\n[[faults]]\nat = \"3s\"\npartition = [\"b\"]\n", `still partitioned`},
		{"[[hosts]]\nname = \"a\"\n[[hosts]]\nname = \"b\"\n[[faults]]\nat = \"2s\"\nheal_partition = [\"a\"]\n", `the partition is ""`},
	}
	for _, c := range cases {
		src := hostsBase + c.extra
		if strings.HasPrefix(c.extra, "mode") { // a top-level key: before the tables
			src = c.extra + hostsBase
		}
		_, err := Parse("h.toml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.extra, err, c.want)
		}
	}
}

func TestPartitionInOracle(t *testing.T) {
	p, err := Parse("h.toml", []byte(hostsBase+`
[[hosts]]
name = "a"
[[hosts]]
name = "b"
[[hosts]]
name = "c"
[[faults]]
at = "2s"
partition = ["c"]
[[faults]]
at = "4s"
heal_partition = ["c"]
`))
	if err != nil {
		t.Fatal(err)
	}
	a := p.Faults[0].Actions[0]
	if a.Kind != ActPartition || strings.Join(a.Members, ",") != "B3,B6" || a.String() != "partition c" {
		t.Fatalf("partition action %+v (%s)", a, a)
	}
	// The brokers cut off count as down while the partition lasts.
	tl := newTimeline(p, nil, nil)
	if got := tl.maxDown(2500*time.Millisecond, 3*time.Second); got != 2 {
		t.Errorf("down during the partition: %d, want 2", got)
	}
	if got := tl.maxDown(4500*time.Millisecond, 5*time.Second); got != 0 {
		t.Errorf("down after the heal: %d, want 0", got)
	}
	if err := checkMode(p, "process"); err == nil || !strings.Contains(err.Error(), "need mode netns") {
		t.Errorf("process mode with a partition: %v", err)
	}
}

func TestParseSSH(t *testing.T) {
	for in, want := range map[string]SSHTarget{
		"root@10.0.0.1":    {User: "root", Host: "10.0.0.1"},
		"me@node-3:2222":   {User: "me", Host: "node-3", Port: 2222},
		"me@[fe80::1]:22":  {User: "me", Host: "fe80::1", Port: 22},
		"u@pc.example.org": {User: "u", Host: "pc.example.org"},
	} {
		got, err := ParseSSH(in)
		if err != nil || got != want {
			t.Errorf("ParseSSH(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "host", "@h", "u@", "u@-oProxyCommand=x", "u@h:0", "u@h:x", "u@h p"} {
		if _, err := ParseSSH(in); err == nil {
			t.Errorf("ParseSSH(%q): no error", in)
		}
	}
}

func FuzzParseSSH(f *testing.F) {
	for _, s := range []string{"root@10.0.0.1", "me@node:2222", "me@[::1]:22", "@", "u@h:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ParseSSH(s)
		if err != nil {
			return
		}
		if tg.User == "" || tg.Host == "" || strings.HasPrefix(tg.Host, "-") || tg.Port < 0 || tg.Port > 65535 {
			t.Fatalf("ParseSSH(%q) = %+v", s, tg)
		}
	})
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"100mbit": 1e8, "1gbit": 1e9, "1.5Mbit": 1.5e6, "64kbit": 64e3} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "100", "1tbit", "100mbps", "1bit", "-1mbit"} {
		if _, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q): no error", in)
		}
	}
}

// The link schedule: delay, rate (back to back packets queue behind each
// other), jitter within bounds and never reordering, loss at its rate.
func TestLinkSchedule(t *testing.T) {
	s := newNetSwitch()
	a, b := s.addPort("a", [4]byte{10, 0, 0, 1}, nil), s.addPort("b", [4]byte{10, 0, 0, 2}, nil)
	if err := s.link(a, b, LinkShape{Delay: Duration{10 * time.Millisecond}, Rate: "8mbit"}); err != nil {
		t.Fatal(err)
	}
	l := a.links[b.ip]
	t0 := time.Unix(100, 0)
	d1, _ := l.schedule(t0, 1000) // 1 ms on the wire at 8 Mbit/s
	d2, _ := l.schedule(t0, 1000)
	if d1 != t0.Add(11*time.Millisecond) || d2 != t0.Add(12*time.Millisecond) {
		t.Errorf("due %v, %v; want +11ms, +12ms", d1.Sub(t0), d2.Sub(t0))
	}
	if err := s.link(b, a, LinkShape{Delay: Duration{10 * time.Millisecond}, Jitter: Duration{5 * time.Millisecond}, Loss: 10}); err != nil {
		t.Fatal(err)
	}
	l = b.links[a.ip]
	var last time.Time
	lost := 0
	const n = 20000
	for i := 0; i < n; i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		due, drop := l.schedule(now, 100)
		if drop {
			lost++
			continue
		}
		if d := due.Sub(now); d < 5*time.Millisecond || d > 15*time.Millisecond && !due.Equal(last) {
			t.Fatalf("packet %d due after %v, want 10ms ± 5ms", i, d)
		}
		if due.Before(last) {
			t.Fatalf("packet %d reordered", i)
		}
		last = due
	}
	if lost < n*8/100 || lost > n*12/100 {
		t.Errorf("lost %d of %d at 10%%", lost, n)
	}
}

func TestEstimateOffset(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	// The host runs 50 ms ahead; the second round trip is the shortest.
	sent := []time.Time{t0, t0.Add(100 * ms), t0.Add(200 * ms)}
	recv := []time.Time{t0.Add(10 * ms), t0.Add(102 * ms), t0.Add(230 * ms)}
	host := []time.Time{t0.Add(58 * ms), t0.Add(151 * ms), t0.Add(260 * ms)}
	off, unc, rtt := estimateOffset(sent, host, recv)
	if off != 50*ms || unc != ms || rtt != 2*ms {
		t.Errorf("offset %v ± %v (rtt %v), want 50ms ± 1ms (2ms)", off, unc, rtt)
	}
}

func TestClockServe(t *testing.T) {
	var out bytes.Buffer
	before := time.Now().UnixNano()
	if err := ClockServe(strings.NewReader("a\nb\n"), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(out.String())
	if len(lines) != 2 {
		t.Fatalf("answers %q", out.String())
	}
	for _, l := range lines {
		var ns int64
		if _, err := fmt.Sscan(l, &ns); err != nil || ns < before || ns > time.Now().UnixNano() {
			t.Errorf("answer %q not a time now", l)
		}
	}
}

func TestPidWriter(t *testing.T) {
	var log bytes.Buffer
	w := &pidWriter{out: &log, pid: make(chan int, 1)}
	for _, part := range []string{"deltapub-", "pid 4242\n{\"msg\":", "\"up\"}\n"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if p := <-w.pid; p != 4242 {
		t.Errorf("pid %d", p)
	}
	if log.String() != "{\"msg\":\"up\"}\n" {
		t.Errorf("log %q", log.String())
	}
}
