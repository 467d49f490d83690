package testbed

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const netnsSpec = `name = "netns-test"
mode = "netns"
seed = 5
duration = "%DUR%"
warmup = "1s"
drain = "2s"
[overlay]
delta = 2
[topology]
kind = "chain"
brokers = 4
[[publishers]]
brokers = ["B1"]
rate = 40
attrs = { class = "'T'", n = "seq()" }
[[subscribers]]
count = 2
brokers = ["B4"]
filter = "[class,eq,'T']"
[[hosts]]
name = "a"
[[hosts]]
name = "b"
[[hosts]]
name = "c"
[network]
delay = "2ms"
[[network.links]]
between = ["a", "c"]
delay = "8ms"
`

// netnsLeft lists the namespaces of this process still there.
func netnsLeft(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], nsPrefix+"-"+strconv.Itoa(os.Getpid())+"-") {
			left = append(left, f[0])
		}
	}
	return left
}

// TestNetnsPartition runs a chain over 3 emulated hosts (B1 a, B2 b, B3 c,
// B4 a) with a partition of c (B3, the middle of the path: one failure)
// and its heal: PASS, the partition's packets dropped by the switch, and
// every namespace gone afterwards.
func TestNetnsPartition(t *testing.T) {
	needRoot(t)
	bin := needBinary(t)
	p, err := Parse("netns.toml", []byte(strings.Replace(netnsSpec, "%DUR%", "6s", 1)+`
[[faults]]
at = "2.5s"
partition = ["c"]
[[faults]]
at = "3.5s"
heal_partition = ["c"]
`))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	sum, err := Run(context.Background(), p, ModeNetns, out, Options{Binary: bin}, nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if sum.Verdict.Verdict != "PASS" || sum.ExpectedDeliveries == 0 {
		t.Fatalf("verdict %s (%d expected): %v", sum.Verdict.Verdict, sum.ExpectedDeliveries, sum.Verdict.Reasons)
	}
	var sw string
	for _, n := range sum.Notes {
		if strings.HasPrefix(n, "netns switch:") {
			sw = n
		}
	}
	if sw == "" || strings.Contains(sw, " 0 dropped by partitions") {
		t.Errorf("the partition dropped nothing: %q", sw)
	}
	if left := netnsLeft(t); len(left) > 0 {
		t.Errorf("namespaces left: %v", left)
	}
}

// TestNetnsInterrupted: a run cancelled while it runs stops its brokers
// and removes its namespaces; leftovers of a dead run are removed by the
// next one.
func TestNetnsInterrupted(t *testing.T) {
	needRoot(t)
	bin := needBinary(t)
	// A leftover: a namespace named for a process that is gone.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := nsPrefix + "-" + strconv.Itoa(dead.Process.Pid) + "-x"
	if err := exec.Command("ip", "netns", "add", stale).Run(); err != nil {
		t.Fatal(err)
	}
	p, err := Parse("netns.toml", []byte(strings.Replace(netnsSpec, "%DUR%", "30s", 1)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel once the network is made (the leftover is gone by then)
		// and the brokers are starting.
		defer cancel()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if b, _ := exec.Command("ip", "netns", "list").Output(); !strings.Contains(string(b), stale) && strings.Contains(string(b), nsPrefix+"-"+strconv.Itoa(os.Getpid())+"-") {
				time.Sleep(3 * time.Second)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	out := t.TempDir()
	sum, err := Run(ctx, p, ModeNetns, out, Options{Binary: bin}, nil)
	if err == nil || sum == nil || sum.Verdict.Verdict != "FAIL" {
		t.Fatalf("cancelled run: err %v, summary %v", err, sum)
	}
	if left := netnsLeft(t); len(left) > 0 {
		t.Errorf("namespaces left: %v", left)
	}
	if b, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(b), stale) {
		_ = exec.Command("ip", "netns", "del", stale).Run()
		t.Errorf("the leftover namespace %s was not removed", stale)
	}
}

// TestNetnsNeedsRoot runs `deltapub testbed run` in netns mode as an
// unprivileged user: a clear error, nothing made.
func TestNetnsNeedsRoot(t *testing.T) {
	needRoot(t) // to become someone else
	bin := needBinary(t)
	dir, err := os.MkdirTemp("", "netns-noroot-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	file := filepath.Join(dir, "n.toml")
	if err := os.WriteFile(file, []byte(strings.Replace(netnsSpec, "%DUR%", "5s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The binary must be reachable by nobody: copy it next to the file.
	nb := filepath.Join(dir, "deltapub")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nb, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nb, "testbed", "run", file, "--quiet", "--out", filepath.Join(dir, "out"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "netns mode needs root") {
		t.Fatalf("as nobody: %v\n%s", err, b)
	}
}
