// Package e2e holds the process-level tests: brokers, publishers and
// subscribers as separate deltapub processes on 127.0.0.1, with crashes
// (SIGKILL) and freezes (SIGSTOP/SIGCONT) injected, checking the
// delivery guarantees from the subscriber's output.
//
// The binary is built once in TestMain. Every child process is killed in
// t.Cleanup. Each test stays well under 60 s; in -short mode they are
// skipped.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var deltapub string // path of the binary built by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deltapub-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	deltapub = filepath.Join(dir, "deltapub")
	build := exec.Command("go", "build", "-o", deltapub, "github.com/deltapub/deltapub/cmd/deltapub")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building deltapub:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a child deltapub process whose output goes to a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process exited
	err  error         // Wait's result, valid after done
}

// start runs deltapub with args; stdout goes to stdout (nil: the log file)
// and stderr to the log file. The process is killed in t.Cleanup.
func start(t *testing.T, name string, stdout io.Writer, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(deltapub, args...)
	cmd.Stderr = f
	cmd.Stdout = f
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		// SIGCONT first: a frozen process must be able to die.
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("--- %s log (last 3000 bytes) ---\n%s", name, tail(b, 3000))
			}
		}
	})
	return p
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// wait waits for the process to exit, at most d.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v", p.name, d)
		return nil
	}
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// freeUDPPort and freeTCPPort return a port free at the time of the call.
func freeUDPPort(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

func freeTCPPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// broker is a running deltapub broker process.
type broker struct {
	*proc
	id, addr, admin string
}

func writeSecret(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func startBroker(t *testing.T, id, join, secretFile string, extra ...string) *broker {
	t.Helper()
	b := &broker{id: id, addr: freeUDPPort(t), admin: freeTCPPort(t)}
	args := []string{"broker", "--preset", "testbed", "--id", id, "--listen", b.addr, "--admin", b.admin,
		"--delta", "2", "--secret-file", secretFile, "--log-level", "info",
		"--heartbeat", heartbeat.String(), "--failure-timeout", failureTimeout.String()}
	if join != "" {
		args = append(args, "--join", join)
	}
	b.proc = start(t, id, nil, append(args, extra...)...)
	return b
}

// healthy polls /healthz until it answers 200 or d passes.
func (b *broker) healthy(d time.Duration) bool {
	deadline := time.Now().Add(d)
	c := http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-b.done:
			return false
		default:
		}
		resp, err := c.Get("http://" + b.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not a timing assumption
	}
	return false
}

// chain starts n brokers B1..Bn, each joining the previous one, and waits
// until each is a member before starting the next (so Bi's parent is
// B(i-1)).
func chain(t *testing.T, n int, secretFile string) []*broker {
	t.Helper()
	var bs []*broker
	for i := 1; i <= n; i++ {
		join := ""
		if i > 1 {
			join = bs[i-2].addr
		}
		b := startBroker(t, fmt.Sprintf("B%d", i), join, secretFile)
		if !b.healthy(15 * time.Second) {
			t.Fatalf("%s did not join within 15s", b.id)
		}
		bs = append(bs, b)
	}
	return bs
}

// delivery is one line of deltapub sub's output.
type delivery struct {
	Publisher string         `json:"publisher"`
	Epoch     uint64         `json:"epoch"`
	Seq       uint64         `json:"seq"`
	Sub       string         `json:"sub"`
	Attrs     map[string]any `json:"attrs"`
}

// subscriber runs deltapub sub and parses its output as it comes.
type subscriber struct {
	*proc
	mu        sync.Mutex
	lines     []delivery
	bad       []string
	confirmed chan struct{}
	out       *io.PipeWriter
}

func startSubscriber(t *testing.T, brokerAddr string, count int, timeout time.Duration, filter string) *subscriber {
	t.Helper()
	pr, pw := io.Pipe()
	s := &subscriber{confirmed: make(chan struct{}), out: pw}
	s.proc = start(t, "sub", pw, "sub", "--broker", brokerAddr, "--count", fmt.Sprint(count), "--timeout", timeout.String(), filter)
	go func() {
		<-s.proc.done
		pw.Close()
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var d delivery
			s.mu.Lock()
			if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
				s.bad = append(s.bad, sc.Text())
			} else {
				s.lines = append(s.lines, d)
			}
			s.mu.Unlock()
		}
		io.Copy(io.Discard, pr)
	}()
	// Wait for the confirmation on stderr (the log file).
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(s.log)
		if bytes.Contains(b, []byte("confirmed ")) {
			close(s.confirmed)
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("sub exited before its subscription was confirmed: %s", b)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("subscription not confirmed within 15s")
	return nil
}

func (s *subscriber) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lines)
}

// waitCount polls until at least n deliveries arrived or d passed.
func (s *subscriber) waitCount(t *testing.T, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for s.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d deliveries after %v", s.count(), n, d)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// checkExactlyOnceInOrder checks that the subscriber got n = 1..total
// from one publisher, each exactly once, in order.
func (s *subscriber) checkExactlyOnceInOrder(t *testing.T, total int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) > 0 {
		t.Errorf("%d malformed output lines, first: %q", len(s.bad), s.bad[0])
	}
	seen := map[int64]int{}
	next := int64(1)
	var disorder []string
	for i, d := range s.lines {
		f, ok := d.Attrs["n"].(float64)
		if !ok {
			t.Fatalf("line %d has no attribute n: %+v", i+1, d)
		}
		n := int64(f)
		seen[n]++
		if n != next && len(disorder) < 5 {
			disorder = append(disorder, fmt.Sprintf("line %d: n=%d, expected %d", i+1, n, next))
		}
		next = n + 1
		if d.Seq != uint64(n) {
			t.Errorf("line %d: seq %d but n %d", i+1, d.Seq, n)
		}
	}
	var missing, dup []int64
	for n := int64(1); n <= int64(total); n++ {
		switch seen[n] {
		case 0:
			missing = append(missing, n)
		case 1:
		default:
			dup = append(dup, n)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d publications lost, first %v", len(missing), missing[:min(10, len(missing))])
	}
	if len(dup) > 0 {
		t.Errorf("%d publications delivered more than once, first %v", len(dup), dup[:min(10, len(dup))])
	}
	if len(disorder) > 0 {
		t.Errorf("out of order: %s", strings.Join(disorder, "; "))
	}
	if len(s.lines) != total {
		t.Errorf("%d deliveries, want exactly %d", len(s.lines), total)
	}
}

const (
	total = 2000
	rate  = 200
	// Failure detection of the brokers under test: the testbed preset's
	// 50 ms / 250 ms, relaxed to 100 ms / 1 s so that a CI machine busy
	// with other tests does not suspect live brokers en masse (more than δ
	// false suspicions in a row are a partition, reported as a gap).
	heartbeat      = 100 * time.Millisecond
	failureTimeout = time.Second
)

// runChainFailure is the body shared by the crash and freeze tests: a chain
// B1–B7 with δ = 2, a subscriber at B7, a publisher at B1 sending 2,000
// publications at 200/s; fault is injected once half of them arrived.
func runChainFailure(t *testing.T, fault func(t *testing.T, bs []*broker)) {
	if testing.Short() {
		t.Skip("process-level test: skipped in -short mode")
	}
	secret := writeSecret(t, "e2e overlay secret")
	bs := chain(t, 7, secret)
	sub := startSubscriber(t, bs[6].addr, total, 50*time.Second, "[class,eq,'E2E']")
	var pubOut bytes.Buffer
	pub := start(t, "pub", &lockedWriter{w: &pubOut}, "pub", "--broker", bs[0].addr, "--count", fmt.Sprint(total),
		"--rate", fmt.Sprint(rate), "--timeout", "45s", "[class,'E2E'],[symbol,'X']")
	sub.waitCount(t, total/2, 30*time.Second)
	fault(t, bs)
	if err := pub.wait(t, 50*time.Second); err != nil {
		t.Errorf("pub: %v", err)
	}
	if err := sub.wait(t, 50*time.Second); err != nil {
		t.Errorf("sub: %v (after %d deliveries)", err, sub.count())
	}
	sub.checkExactlyOnceInOrder(t, total)
	if !strings.Contains(pubOut.String(), fmt.Sprintf("acknowledged %d of %d", total, total)) {
		t.Errorf("publisher: %q", pubOut.String())
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestChainSurvivesTwoAdjacentCrashes: kill -9 of B3 and B4 together,
// half-way; δ = 2 lets B2 and B5 bypass them.
func TestChainSurvivesTwoAdjacentCrashes(t *testing.T) {
	var bs []*broker
	runChainFailure(t, func(t *testing.T, chain []*broker) {
		bs = chain
		bs[2].signal(t, syscall.SIGKILL)
		bs[3].signal(t, syscall.SIGKILL)
		t.Logf("killed B3 and B4")
	})
	// The survivors around the hole noticed it, and B2, which forwards
	// toward the subscriber, bypassed it.
	if n := metric(t, bs[1].admin, `deltapub_notices_total{kind="bypass-up"}`); n < 1 {
		t.Errorf("B2: %v bypass-up notices, want at least one", n)
	}
	if n := metric(t, bs[4].admin, `deltapub_notices_total{kind="suspected"}`); n < 1 {
		t.Errorf("B5: %v suspicions, want at least one", n)
	}
}

// TestChainSurvivesAFrozenBroker: B4 frozen (SIGSTOP) for twice the failure
// timeout, then resumed: a false suspicion must not cause a loss, a
// duplicate or a reordering.
func TestChainSurvivesAFrozenBroker(t *testing.T) {
	var bs []*broker
	runChainFailure(t, func(t *testing.T, chain []*broker) {
		bs = chain
		bs[3].signal(t, syscall.SIGSTOP)
		t.Logf("froze B4")
		time.Sleep(2 * failureTimeout) // the fault's duration, part of the scenario
		bs[3].signal(t, syscall.SIGCONT)
		t.Logf("resumed B4")
	})
	// The freeze was long enough to be suspected by a neighbour.
	if n := metric(t, bs[2].admin, `deltapub_notices_total{kind="suspected"}`) +
		metric(t, bs[4].admin, `deltapub_notices_total{kind="suspected"}`); n < 1 {
		t.Errorf("B3 and B5 never suspected the frozen B4")
	}
}

// metric returns the value of one sample of the broker's /metrics (0 when
// absent), e.g. metric(t, admin, `deltapub_notices_total{kind="suspected"}`).
func metric(t *testing.T, admin, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return 0
}

// TestWrongSecretCannotJoin: a broker with a different secret is refused
// at the link handshake (and says so in its log); the overlay is unaffected.
func TestWrongSecretCannotJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test: skipped in -short mode")
	}
	b1 := startBroker(t, "B1", "", writeSecret(t, "the real overlay secret"))
	if !b1.healthy(15 * time.Second) {
		t.Fatal("B1 did not start")
	}
	intruder := startBroker(t, "X", b1.addr, writeSecret(t, "some other secret!"))
	// Wait until B1 logged the refusal, then check X is not a member.
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(b1.log)
		if bytes.Contains(b, []byte("authentication failed")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B1 logged no authentication failure within 20s:\n%s", tail(b, 2000))
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	if intruder.healthy(0) {
		t.Error("the broker with the wrong secret reports itself joined")
	}
	st := fetchState(t, b1.admin)
	if len(st.Map) != 1 || len(st.Runtime.Connected) != 0 {
		t.Errorf("B1 sees map %v, links %v: want only itself", st.Map, st.Runtime.Connected)
	}
	// The overlay still serves: a correct broker joins.
	b2 := startBroker(t, "B2", b1.addr, b1SecretOf(t, b1))
	if !b2.healthy(15 * time.Second) {
		t.Fatal("B2 with the right secret did not join")
	}
}

// b1SecretOf returns the secret file B1 was started with.
func b1SecretOf(t *testing.T, b *broker) string {
	t.Helper()
	args := b.cmd.Args
	for i, a := range args {
		if a == "--secret-file" && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatal("no --secret-file")
	return ""
}

type stateView struct {
	Map []struct {
		ID string
	}
	Runtime struct {
		Connected []string `json:"connected"`
	} `json:"runtime"`
}

func fetchState(t *testing.T, admin string) stateView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/state", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st stateView
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// run runs deltapub to completion (at most 30 s) and returns its exit
// code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, deltapub, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("deltapub %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// TestBrokerConfiguration: flags override the file, --print-config shows
// the result, a bad file or value fails at start naming the field.
func TestBrokerConfiguration(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte("id = \"B9\"\nlisten = \"127.0.0.1:7009\"\ndelta = 3\n[limits]\nmax_queue = 777\n"), 0o600)
	code, out, errs := run(t, "broker", "--config", good, "--delta", "4", "--print-config")
	if code != 0 || !strings.Contains(out, `id = "B9"`) || !strings.Contains(out, "delta = 4") || !strings.Contains(out, "max_queue = 777") {
		t.Errorf("--print-config: exit %d, stdout:\n%s\nstderr: %s", code, out, errs)
	}
	// The printed configuration is itself a valid configuration file.
	printed := filepath.Join(dir, "printed.toml")
	os.WriteFile(printed, []byte(out), 0o600)
	if code, out2, errs := run(t, "broker", "--config", printed, "--print-config"); code != 0 || out2 != out {
		t.Errorf("printed config does not read back: exit %d, %s\n%s", code, errs, out2)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("id = \"B9\"\nlisten = \"127.0.0.1:7009\"\n[limits]\nmax_queu = 3\n"), 0o600)
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"broker", "--config", bad}, "limits.max_queu"},
		{[]string{"broker", "--config", good, "--heartbeat", "2s", "--failure-timeout", "3s"}, "failure_timeout"},
		{[]string{"broker", "--listen", "127.0.0.1:7009"}, "id"},
		{[]string{"broker", "--id", "B1", "--listen", "127.0.0.1:7009", "--secret-file", filepath.Join(dir, "nope")}, "secret_file"},
	} {
		code, _, errs := run(t, tc.args...)
		if code != 2 || !strings.Contains(errs, "config: "+tc.field+":") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, errs, tc.field)
		}
	}
}

// TestBrokerInspectAndStop: ctl reads a running pair of brokers, and
// SIGTERM makes a leaf leave the overlay and exit 0.
func TestBrokerInspectAndStop(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test: skipped in -short mode")
	}
	secret := writeSecret(t, "inspect secret")
	bs := chain(t, 2, secret)
	code, out, errs := run(t, "ctl", "--admin", bs[0].admin, "topology", "--dot")
	if code != 0 || !strings.Contains(out, `"B1" -- "B2"`) {
		t.Errorf("ctl topology --dot: exit %d, %s%s", code, out, errs)
	}
	code, out, errs = run(t, "ctl", "--admin", bs[1].admin, "peers")
	if code != 0 || !strings.Contains(out, "B1") || !strings.Contains(out, "tree") {
		t.Errorf("ctl peers: exit %d, %s%s", code, out, errs)
	}
	for _, what := range []string{"state", "topology", "subs", "queue"} {
		if code, out, errs := run(t, "ctl", "--admin", bs[1].admin, what); code != 0 || out == "" {
			t.Errorf("ctl %s: exit %d, %s%s", what, code, out, errs)
		}
	}
	if code, _, _ := run(t, "ctl", "--admin", bs[1].admin, "nonsense"); code != 2 {
		t.Errorf("ctl nonsense: exit %d, want 2", code)
	}
	bs[1].signal(t, syscall.SIGTERM)
	if err := bs[1].wait(t, 15*time.Second); err != nil {
		t.Errorf("B2 after SIGTERM: %v, want exit 0", err)
	}
	b, _ := os.ReadFile(bs[1].log)
	if !bytes.Contains(b, []byte("left the overlay")) {
		t.Errorf("B2 did not log its leave:\n%s", tail(b, 1500))
	}
}

// TestClientToken: a broker configured with a client token refuses a
// client without it and serves one with it.
func TestClientToken(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test: skipped in -short mode")
	}
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("client token 42\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "B1", "", writeSecret(t, "token test secret"), "--client-token-file", token)
	if !b.healthy(15 * time.Second) {
		t.Fatal("B1 did not start")
	}
	code, out, errs := run(t, "pub", "--broker", b.addr, "--timeout", "10s", "[class,'T']")
	if code == 0 || !strings.Contains(errs, "token") {
		t.Errorf("pub without the token: exit %d, %s%s; want a refusal naming the token", code, out, errs)
	}
	code, out, errs = run(t, "pub", "--broker", b.addr, "--token-file", token, "--count", "3", "[class,'T']")
	if code != 0 || !strings.Contains(out, "acknowledged 3 of 3") {
		t.Errorf("pub with the token: exit %d, %s%s", code, out, errs)
	}
}
