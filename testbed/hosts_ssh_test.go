package testbed

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sshdPath is Debian's OpenSSH server (.ci/run installs openssh-server).
const sshdPath = "/usr/sbin/sshd"

// needRoot skips a test that makes namespaces when not root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED, not passed: needs root (network namespaces, TUN interfaces); CI runs as root")
	}
}

// sshKeys makes a client key and a host key in dir and returns the ssh
// options that use them (the host key pinned in a known_hosts file for
// every address).
func sshKeys(t *testing.T, dir string, addrs []string) (hostKey, authKeys string, opts []string) {
	t.Helper()
	for _, k := range []string{"id", "hostkey"} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, k)).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, _ := os.ReadFile(filepath.Join(dir, "id.pub"))
	authKeys = filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authKeys, pub, 0o600); err != nil {
		t.Fatal(err)
	}
	hpub, _ := os.ReadFile(filepath.Join(dir, "hostkey.pub"))
	f := strings.Fields(string(hpub))
	var kh strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&kh, "%s %s %s\n", a, f[0], f[1])
	}
	known := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, []byte(kh.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "hostkey"), authKeys, []string{"-i", filepath.Join(dir, "id"), "-o", "IdentitiesOnly=yes",
		"-o", "UserKnownHostsFile=" + known, "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null"}
}

// startSSHD runs an sshd in namespace ns on addr:22 until the test ends.
func startSSHD(t *testing.T, dir, ns, addr, hostKey, authKeys string) {
	t.Helper()
	cfg := filepath.Join(dir, "sshd_config."+ns)
	conf := fmt.Sprintf("ListenAddress %s:22\nHostKey %s\nAuthorizedKeysFile %s\nPidFile none\nUsePAM no\nStrictModes no\n"+
		"PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nLogLevel ERROR\nSetEnv SHLVL=1\nMaxSessions 200\nMaxStartups 100\n",
		addr, hostKey, authKeys)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // privilege separation directory
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, sshdPath, "-D", "-e", "-f", cfg)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, _ := os.Create(filepath.Join(dir, "sshd."+ns+".log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig fires when the forking thread ends, and the testbed ends
	// threads of its own (the process backend's locked launcher): fork
	// sshd from a thread that stays until the test is over.
	started, stop := make(chan error), make(chan struct{})
	go func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		started <- cmd.Start()
		<-stop
	}()
	if err := <-started; err != nil {
		close(stop)
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); close(stop); logf.Close() })
	for i := 0; i < 100; i++ {
		if c, err := net.DialTimeout("tcp", addr+":22", 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "sshd."+ns+".log"))
	t.Fatalf("sshd in %s did not listen on %s:22: %s", ns, addr, b)
}

// sshNetwork makes n emulated hosts with shaped links, each with an sshd.
func sshNetwork(t *testing.T, n int, delay time.Duration) (*Network, []string, []string) {
	t.Helper()
	needRoot(t)
	if _, err := os.Stat(sshdPath); err != nil {
		t.Fatalf("%s is missing: install openssh-server (.ci/run does)", sshdPath)
	}
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d", i+1)
	}
	nw, err := NewNetwork(hosts, func(a, b string) LinkShape { return LinkShape{Delay: Duration{delay}} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nw.Close)
	dir := t.TempDir()
	addrs := make([]string, n)
	for i, h := range hosts {
		addrs[i] = nw.IP(h)
	}
	hk, ak, opts := sshKeys(t, dir, addrs)
	for _, h := range hosts {
		startSSHD(t, dir, nw.NS(h), nw.IP(h), hk, ak)
	}
	return nw, addrs, opts
}

// TestHostsOverSSH runs a testbed on 4 emulated hosts over ssh, 5 ms per
// link between hosts: a crash and a restart, the verdict, the clocks, the
// median delay over a 2-hop path (B1 on h1 → B2 on h2 → B3 on h3 ≥ 10 ms),
// and nothing left running on the hosts.
func TestHostsOverSSH(t *testing.T) {
	nw, addrs, opts := sshNetwork(t, 4, 5*time.Millisecond)
	bin := needBinary(t)
	dirs := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, `name = "hosts-ssh"
seed = 3
duration = "6s"
warmup = "1s"
drain = "2s"
[overlay]
delta = 2
[topology]
kind = "explicit"
[[broker]]
name = "B1"
host = "h1"
[[broker]]
name = "B2"
join = "B1"
host = "h2"
[[broker]]
name = "B3"
join = "B2"
host = "h3"
[[broker]]
name = "B4"
join = "B3"
host = "h4"
[[publishers]]
brokers = ["B1"]
rate = 50
attrs = { class = "'T'", n = "seq()" }
[[subscribers]]
count = 2
brokers = ["B3", "B4"]
filter = "[class,eq,'T']"
[[faults]]
at = "2.5s"
crash = ["B4"]
[[faults]]
at = "4s"
restart = ["B4"]
[process]
ssh_options = [%s]
`, quoteList(opts))
	for i, a := range addrs {
		fmt.Fprintf(&b, "[[hosts]]\nname = \"h%d\"\nssh = \"root@%s\"\naddress = \"%s\"\ndir = \"%s\"\n", i+1, a, a, filepath.Join(dirs, fmt.Sprint("h", i+1)))
		if i >= 2 { // two hosts take the binary already there, two get a copy
			fmt.Fprintf(&b, "binary = %q\n", bin)
		}
	}
	p, err := Parse("hosts-ssh.toml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := Run(ctx, p, "process", out, Options{Binary: bin, Log: os.Stderr}, nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if sum.Verdict.Verdict != "PASS" {
		t.Fatalf("verdict %s: %v", sum.Verdict.Verdict, sum.Verdict.Reasons)
	}
	if sum.Lost != 0 || sum.ExpectedDeliveries == 0 {
		t.Fatalf("expected %d, lost %d", sum.ExpectedDeliveries, sum.Lost)
	}
	// The median delay from B1 to B3's subscriber: two links of 5 ms.
	med := medianDelay(t, filepath.Join(out, "deliveries.csv"), "B3")
	if med < 10 {
		t.Errorf("median delay over B1-B2-B3 (h1-h2-h3, 5 ms per link) = %.2f ms, want ≥ 10", med)
	}
	t.Logf("median delay over 2 hops: %.2f ms", med)
	// Each host's clock was measured: the same machine, so within the
	// uncertainty of zero.
	var cs []ClockOffset
	data, err := os.ReadFile(filepath.Join(out, "hosts.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cs); err != nil || len(cs) != 4 {
		t.Fatalf("hosts.json: %v, %d hosts", err, len(cs))
	}
	for _, c := range cs {
		if c.Err != "" || c.Brokers != 1 || c.RTTMs <= 0 || abs(c.OffsetMs) > c.UncertaintyMs+1 {
			t.Errorf("clock of %s: %+v", c.Host, c)
		}
	}
	// Nothing runs on the hosts any more: no copied binary, no broker.
	for i := 1; i <= 2; i++ {
		if n := killBrokersOf(filepath.Join(dirs, fmt.Sprint("h", i), "deltapub")); n > 0 {
			t.Errorf("%d broker processes left on h%d", n, i)
		}
	}
	if n := killBrokersOf(bin); n > 0 {
		t.Errorf("%d broker processes left", n)
	}
	_ = nw
}

// TestHostsPreflight: an unreachable host, a refused key and a missing
// binary are each reported before anything starts, naming the host.
func TestHostsPreflight(t *testing.T) {
	_, addrs, opts := sshNetwork(t, 2, 0)
	bin := needBinary(t)
	base := func(hosts string) string {
		return `name = "pre"
duration = "3s"
warmup = "1s"
[topology]
kind = "chain"
brokers = 2
[[subscribers]]
brokers = ["B2"]
filter = "[class,eq,'T']"
[process]
ssh_options = [` + quoteList(opts) + `]
` + hosts
	}
	wrongKey := append([]string{}, opts...)
	other := filepath.Join(t.TempDir(), "other")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	wrongKey[1] = other
	cases := []struct {
		name, hosts, want string
		opts              []string
	}{
		{"unreachable", fmt.Sprintf("[[hosts]]\nname = \"h1\"\nssh = \"root@%s\"\naddress = %q\n[[hosts]]\nname = \"far\"\nssh = \"root@%s:2222\"\naddress = %q\n", addrs[0], addrs[0], addrs[1], addrs[1]), "host far", nil},
		{"refused key", fmt.Sprintf("[[hosts]]\nname = \"h1\"\nssh = \"root@%s\"\naddress = %q\n", addrs[0], addrs[0]), "Permission denied", wrongKey},
		{"missing binary", fmt.Sprintf("[[hosts]]\nname = \"h1\"\nssh = \"root@%s\"\naddress = %q\n[[hosts]]\nname = \"h2\"\nssh = \"root@%s\"\naddress = %q\nbinary = \"/nonexistent/deltapub\"\n", addrs[0], addrs[0], addrs[1], addrs[1]), "host h2: binary /nonexistent/deltapub is missing", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := base(c.hosts)
			if c.opts != nil {
				src = strings.Replace(src, quoteList(opts), quoteList(c.opts), 1)
			}
			p, err := Parse("pre.toml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			_, err = Run(context.Background(), p, "process", out, Options{Binary: bin}, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "before starting anything") {
				t.Fatalf("error %v, want one with %q", err, c.want)
			}
			if c.name == "refused key" && !strings.Contains(err.Error(), "host h1") {
				t.Errorf("error does not name the host: %v", err)
			}
			if n := killBrokersOf(bin); n > 0 {
				t.Errorf("%d brokers started", n)
			}
		})
	}
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return strings.Join(q, ", ")
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// medianDelay is the median delay_ms of the deliveries through edge.
func medianDelay(t *testing.T, path, edge string) float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("%s: %v (%d rows)", path, err, len(rows))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	var ds []float64
	for _, r := range rows[1:] {
		if r[col["edge"]] != edge {
			continue
		}
		v, err := strconv.ParseFloat(r[col["delay_ms"]], 64)
		if err == nil {
			ds = append(ds, v)
		}
	}
	if len(ds) == 0 {
		t.Fatalf("no delivery through %s", edge)
	}
	sort.Float64s(ds)
	return ds[len(ds)/2]
}
