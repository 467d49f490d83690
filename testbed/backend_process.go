package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/admin"
)

// processBackend runs every broker as a `deltapub broker` process on
// 127.0.0.1; the clients run in the testbed process over real QUIC.
//
// No broker outlives a run: each is started with Pdeathsig = SIGKILL (the
// kernel kills it when the testbed dies, even by SIGKILL), from one OS
// thread that stays locked for the whole run (Pdeathsig fires when the
// forking *thread* exits, so the thread must not be recycled), in its own
// process group (a Ctrl-C reaches the testbed, which stops the brokers
// itself), and stopAll kills every one on every exit path.
type processBackend struct{ o Options }

// brokerBinary is the deltapub binary brokers run: --binary, else
// process.binary, else this executable.
func brokerBinary(o Options, p *Plan) (string, error) {
	if o.Binary != "" {
		return o.Binary, nil
	}
	if p.Spec.Process.Binary != "" {
		return p.Spec.Process.Binary, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("testbed: cannot find the deltapub binary: %v", err)
	}
	return exe, nil
}

func (b processBackend) Run(ctx context.Context, p *Plan, rec *Recorder) error {
	bin, err := brokerBinary(b.o, p)
	if err != nil {
		return err
	}
	if len(p.Spec.Hosts) > 0 {
		return runOnHosts(ctx, p, rec, bin, b.o)
	}
	h, err := newProcHost(p, bin, b.o.Out, nil)
	if err != nil {
		return err
	}
	return runRealtime(ctx, p, rec, h, b.o)
}

type proc struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited
	frozen bool
	log    *os.File
	cpu    float64 // utime+stime seconds at the last sample
	cpuAt  time.Time
	in     int64 // counters at the last sample
	out    int64
	ctrl   int64
	epochN int
	rpid   int // the broker's pid on its host (remote launcher)
}

type procHost struct {
	p    *Plan
	bin  string
	logs string
	// data holds each broker's data directory (data/<name>), kept across
	// its restarts; dataTemp: made for this run, removed at the end.
	data     string
	dataTemp bool
	mu       sync.Mutex
	procs    map[string]*proc
	port     map[string]int // QUIC (UDP) port
	aport    map[string]int // admin (TCP) port
	// ctrlDone is the control messages of incarnations that ended.
	ctrlDone int64
	spawn    chan func()
	stopOnce sync.Once
	http     *http.Client
	ctl      *http.Client // cut and heal: a longer timeout than scrapes (a busy broker must still be cut)
	// l runs the broker processes: here (the default), in a network
	// namespace or on a host over ssh.
	l launcher
}

// newProcHost prepares a run of p's brokers; l nil runs them here, on
// 127.0.0.1.
func newProcHost(p *Plan, bin, out string, l launcher) (*procHost, error) {
	h := &procHost{p: p, bin: bin, procs: map[string]*proc{}, port: map[string]int{}, aport: map[string]int{},
		spawn: make(chan func()), http: &http.Client{Timeout: time.Second}, ctl: &http.Client{Timeout: 10 * time.Second}, l: l}
	if out != "" {
		h.logs = filepath.Join(out, "logs")
		if err := os.MkdirAll(h.logs, 0o755); err != nil {
			return nil, fmt.Errorf("testbed: %v", err)
		}
		// The brokers' data directories belong to this run: a run before
		// it in the same results directory left places and logs that
		// would make its brokers recover instead of start.
		h.data = filepath.Join(out, "data")
		if err := os.RemoveAll(h.data); err != nil {
			return nil, fmt.Errorf("testbed: clearing the data directories of an earlier run: %v", err)
		}
	} else {
		d, err := os.MkdirTemp("", "deltapub-testbed-data-")
		if err != nil {
			return nil, fmt.Errorf("testbed: %v", err)
		}
		h.data, h.dataTemp = d, true
	}
	if h.l == nil {
		h.l = localLauncher{bin: bin, data: h.data}
	} else if ll, ok := h.l.(localLauncher); ok && ll.data == "" {
		ll.data = h.data
		h.l = ll
	}
	// Ports: fixed from process.base_port (checked free before anything
	// starts, so a clash is one clear error rather than a broker dying at
	// join time), or free ones picked now outside the kernel's ephemeral
	// range (so our own outgoing connections cannot take them before the
	// brokers bind them).
	if base := p.Spec.Process.BasePort; base != 0 {
		for i, n := range p.Topo.Names {
			h.port[n], h.aport[n] = base+2*i, base+2*i+1
			if h.l.local() && !portFree(h.port[n], h.aport[n]) {
				return nil, fmt.Errorf("testbed: process mode: port %d or %d for %s is busy (change process.base_port, or drop it to pick free ports)", h.port[n], h.aport[n], n)
			}
		}
	} else {
		ports, err := pickPorts(2 * len(p.Topo.Names))
		if err != nil {
			return nil, err
		}
		for i, n := range p.Topo.Names {
			h.port[n], h.aport[n] = ports[2*i], ports[2*i+1]
		}
	}
	ready := make(chan struct{})
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread dies with the goroutine, after every child is gone
		close(ready)
		for f := range h.spawn {
			f()
		}
	}()
	<-ready
	return h, nil
}

func (h *procHost) addr(n string) string {
	return net.JoinHostPort(h.l.ip(n), strconv.Itoa(h.port[n]))
}
func (h *procHost) admin(n string) string {
	return net.JoinHostPort(h.l.ip(n), strconv.Itoa(h.aport[n]))
}

func (h *procHost) clientAddr(n string) string  { return h.addr(n) }
func (h *procHost) clientDial() client.DialFunc { return nil }

func (h *procHost) start(ctx context.Context, name string, joinpoints []string) error {
	h.mu.Lock()
	if old := h.procs[name]; old != nil {
		select {
		case <-old.done:
		default:
			h.mu.Unlock()
			return fmt.Errorf("%s is still running", name)
		}
	}
	h.mu.Unlock()
	o := h.p.Spec.Overlay
	args := []string{"broker", "--preset", "testbed", "--id", name,
		"--listen", h.addr(name), "--admin", h.admin(name),
		"--delta", strconv.Itoa(o.Delta), "--tick", o.Tick.Duration.String(),
		"--heartbeat", o.Heartbeat.Duration.String(), "--failure-timeout", o.FailureTimeout.Duration.String(),
		"--dack-period", o.DACKPeriod.Duration.String(), "--gone-after", o.GoneAfter.Duration.String(),
		"--max-queue", strconv.Itoa(o.MaxQueue), "--log-format", "json",
		"--data-dir", h.l.dataDir(name)}
	if ra := h.p.replicaArgs(h.addr); ra != nil {
		args = append(args, ra...)
	} else if o.Durability != "" {
		args = append(args, "--durability", o.Durability)
	}
	if o.Retain.Duration > 0 {
		args = append(args, "--max-retain", o.Retain.Duration.String())
	}
	if o.DurableKeep.Duration != 0 {
		args = append(args, "--durable-keep", o.DurableKeep.Duration.String())
	}
	if len(joinpoints) > 0 {
		addrs := make([]string, len(joinpoints))
		for i, j := range joinpoints {
			addrs[i] = j + "@" + h.addr(j) // the broker's name too: the core dials each in turn
		}
		args = append(args, "--join", strings.Join(addrs, ","))
	}
	var logf *os.File
	if h.logs != "" {
		f, err := os.OpenFile(filepath.Join(h.logs, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		logf = f
	}
	var logw io.Writer = io.Discard
	if logf != nil {
		logw = logf
	}
	cmd, pid := h.l.command(name, args, h.p.Spec.Process, logw)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	h.spawn <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		if logf != nil {
			logf.Close()
		}
		return err
	}
	pr := &proc{cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		_ = cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		close(pr.done)
	}()
	if pid != nil {
		rpid, err := pid(pr.done)
		if err != nil {
			_ = cmd.Process.Kill()
			<-pr.done
			return fmt.Errorf("%v: %s", err, h.logTail(name))
		}
		pr.rpid = rpid
	}
	h.mu.Lock()
	if old := h.procs[name]; old != nil {
		h.ctrlDone += old.ctrl
		pr.epochN = old.epochN + 1
	}
	h.procs[name] = pr
	h.mu.Unlock()
	return nil
}

// brokerEnv is the environment of a broker process: the testbed's, with
// GOMAXPROCS and GOGC from the spec (process.gomaxprocs, process.gogc)
// replacing any inherited value.
func brokerEnv(env []string, ps ProcessSpec) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if (ps.GOMAXPROCS > 0 && strings.HasPrefix(kv, "GOMAXPROCS=")) || (ps.GOGC > 0 && strings.HasPrefix(kv, "GOGC=")) {
			continue
		}
		out = append(out, kv)
	}
	if ps.GOMAXPROCS > 0 {
		out = append(out, "GOMAXPROCS="+strconv.Itoa(ps.GOMAXPROCS))
	}
	if ps.GOGC > 0 {
		out = append(out, "GOGC="+strconv.Itoa(ps.GOGC))
	}
	return out
}

func (h *procHost) get(name string) (*proc, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	pr := h.procs[name]
	if pr == nil {
		return nil, fmt.Errorf("%s was never started", name)
	}
	return pr, nil
}

func (h *procHost) waitJoined(ctx context.Context, name string, timeout time.Duration) error {
	pr, err := h.get(name)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for i := 0; time.Now().Before(deadline); i++ {
		select {
		case <-pr.done:
			return fmt.Errorf("the broker process exited: %s", h.logTail(name))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if m, err := h.metrics(name); err == nil && m.Total["deltapub_joined"] == 1 {
			return nil
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("not joined after %v: %s", timeout, h.logTail(name))
}

// logTail is the end of a broker's log, for error messages.
func (h *procHost) logTail(name string) string {
	if h.logs == "" {
		return "(no log kept)"
	}
	b, err := os.ReadFile(filepath.Join(h.logs, name+".log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.TrimSpace(string(b))
}

func (h *procHost) signal(name string, sig syscall.Signal) (*proc, error) {
	pr, err := h.get(name)
	if err != nil {
		return nil, err
	}
	select {
	case <-pr.done:
		return nil, fmt.Errorf("%s is not running", name)
	default:
	}
	if err := h.l.signal(pr, sig); err != nil {
		return nil, err
	}
	return pr, nil
}

func (h *procHost) crash(name string) error {
	pr, err := h.signal(name, syscall.SIGKILL)
	if err != nil {
		return err
	}
	select {
	case <-pr.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s did not die within 5s of SIGKILL", name)
	}
}

// leave sends SIGTERM, on which `deltapub broker` leaves the overlay
// gracefully (docs/operations.md) and exits 0, and waits (at most
// leaveWait) for the process to exit. A non-zero exit, a leave the broker
// logged as not confirmed in time (it then exits 0 anyway and the overlay
// treats it as crashed) and a process still running at the bound (killed
// then) are errors.
func (h *procHost) leave(name string) (<-chan leaveResult, error) {
	pr, err := h.signal(name, syscall.SIGTERM)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	bound := leaveWait(h.p.Spec.Overlay)
	return awaitLeave(t0, bound, pr.done, func() error {
		_ = h.l.signal(pr, syscall.SIGKILL)
		return fmt.Errorf("%s still running %v after SIGTERM (killed; its log: %s)", name, bound, h.lastLogLine(name))
	}, func() error {
		// ProcessState is set by cmd.Wait before done is closed.
		if code := pr.cmd.ProcessState.ExitCode(); code != 0 {
			return fmt.Errorf("%s ended with %v after SIGTERM (its log: %s)", name, pr.cmd.ProcessState, h.lastLogLine(name))
		}
		if h.logHas(name, "leave not confirmed in time") {
			return fmt.Errorf("%s exited 0 but its leave was not confirmed in time (the overlay treats it as crashed)", name)
		}
		return nil
	}), nil
}

// lastLogLine is the last line of name's log, cut to 300 bytes, for a
// one-line error message (the whole tail is in OUT/logs).
func (h *procHost) lastLogLine(name string) string {
	t := h.logTail(name)
	if i := strings.LastIndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	if len(t) > 300 {
		t = t[:300] + "…"
	}
	return t
}

// maxLogScan bounds how much of a broker's log logHas reads (its end).
const maxLogScan = 4 << 20

// logHas reports whether the end of name's log contains s (false without
// a log).
func (h *procHost) logHas(name, s string) bool {
	if h.logs == "" {
		return false
	}
	f, err := os.Open(filepath.Join(h.logs, name+".log"))
	if err != nil {
		return false
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxLogScan {
		_, _ = f.Seek(st.Size()-maxLogScan, io.SeekStart)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxLogScan))
	return err == nil && bytes.Contains(b, []byte(s))
}

// wipe removes the broker's data directory: its next start has no place,
// no epoch record and no publication log.
func (h *procHost) wipe(name string) error {
	h.mu.Lock()
	pr := h.procs[name]
	h.mu.Unlock()
	if pr != nil {
		select {
		case <-pr.done:
		default:
			return fmt.Errorf("%s is still running", name)
		}
	}
	if err := h.l.wipe(name); err != nil {
		return fmt.Errorf("restart_clean %s: %v", name, err)
	}
	return nil
}

func (h *procHost) freeze(name string) error {
	pr, err := h.signal(name, syscall.SIGSTOP)
	if err == nil {
		h.mu.Lock()
		pr.frozen = true
		h.mu.Unlock()
	}
	return err
}

func (h *procHost) resume(name string) error {
	pr, err := h.signal(name, syscall.SIGCONT)
	if err == nil {
		h.mu.Lock()
		pr.frozen = false
		h.mu.Unlock()
	}
	return err
}

// cut blocks the link a–b at both ends through the brokers' admin
// endpoints (POST /ctl/cut, overlay/runtime/cut.go): each closes its link to
// the other and refuses it until healed, like a network partition between
// two live processes. A broker that is crashed or frozen cannot be asked;
// cutting a link with a down end is an error. A restarted broker starts
// with no cuts (the other end still refuses the link); healing then lifts
// the block where there is one.
func (h *procHost) cut(a, b string) error { return h.linkCtl("cut", a, b) }

// heal lifts the cut at both ends.
func (h *procHost) heal(a, b string) error { return h.linkCtl("heal", a, b) }

func (h *procHost) linkCtl(op, a, b string) error {
	// Both ends in parallel: the link goes down at once on both sides.
	errc := make(chan error, 2)
	for _, pair := range [][2]string{{a, b}, {b, a}} {
		go func(self, peer string) {
			if _, err := h.get(self); err != nil {
				errc <- err
				return
			}
			resp, err := h.postCtl("http://" + h.admin(self) + "/ctl/" + op + "?peer=" + url.QueryEscape(peer))
			if err != nil {
				errc <- fmt.Errorf("%s %s at %s: %v", op, peer, self, err)
				return
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound && op == "heal" {
				errc <- errNotCut // a broker restarted since the cut has none
				return
			}
			if resp.StatusCode != http.StatusOK {
				errc <- fmt.Errorf("%s %s at %s: %s: %s", op, peer, self, resp.Status, strings.TrimSpace(string(body)))
				return
			}
			errc <- nil
		}(pair[0], pair[1])
	}
	e1, e2 := <-errc, <-errc
	switch {
	case e1 == errNotCut && e2 == errNotCut:
		return fmt.Errorf("the link %s-%s is not cut", a, b)
	case e1 == errNotCut:
		return e2
	case e2 == errNotCut:
		return e1
	}
	return errors.Join(e1, e2)
}

// errNotCut is a heal answered 404 by one end (see linkCtl).
var errNotCut = errors.New("not cut")

// adminStartup bounds how long a control request waits for the admin
// endpoint of a broker started a moment ago: its process runs, but the
// endpoint does not listen yet (a cut planned just after a restart,
// applied 3 ms after it, was refused).
const adminStartup = 3 * time.Second

// postCtl posts a control request, asked again (every 50 ms, up to
// adminStartup) while the connection is refused.
func (h *procHost) postCtl(u string) (*http.Response, error) {
	deadline := time.Now().Add(adminStartup)
	for {
		req, err := http.NewRequest(http.MethodPost, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set(admin.ControlHeader, "testbed")
		resp, err := h.ctl.Do(req)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return resp, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *procHost) stopAll() {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		procs := make([]*proc, 0, len(h.procs))
		for _, pr := range h.procs {
			procs = append(procs, pr)
		}
		h.mu.Unlock()
		for _, pr := range procs {
			select {
			case <-pr.done:
				continue
			default:
			}
			// SIGKILL works on stopped processes too.
			_ = h.l.signal(pr, syscall.SIGKILL)
		}
		for _, pr := range procs {
			select {
			case <-pr.done:
			case <-time.After(5 * time.Second):
			}
		}
		close(h.spawn)
		h.l.close()
		if h.dataTemp {
			_ = os.RemoveAll(h.data)
		}
	})
}

// portFree reports whether every port is free for both UDP and TCP on
// 127.0.0.1.
func portFree(ports ...int) bool {
	for _, port := range ports {
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return false
		}
		t, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		u.Close()
		if err != nil {
			return false
		}
		t.Close()
	}
	return true
}

var (
	portMu   sync.Mutex
	portNext = 20000 + int(time.Now().UnixNano()%10000)
)

// pickPorts returns n ports free for UDP and TCP in 20000–31999, below the
// usual ephemeral range (32768–60999), scanning from a moving start so
// that runs in one process (tests) and concurrent runs do not collide.
func pickPorts(n int) ([]int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	var out []int
	for tries := 0; tries < 12000 && len(out) < n; tries++ {
		p := portNext
		portNext++
		if portNext >= 32000 {
			portNext = 20000
		}
		if portFree(p) {
			out = append(out, p)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("testbed: only %d of %d free ports in 20000-31999", len(out), n)
	}
	return out, nil
}

// metrics scrapes the broker's /metrics.
func (h *procHost) metrics(name string) (admin.Metrics, error) {
	return admin.ScrapeMetrics(h.http, h.admin(name))
}

// controlMetric is the core's Status().Counters.Control, by type label.
const controlMetric = "deltapub_control_messages_sent_total"

// controlByType picks the control messages sent by type out of a scrape.
func controlByType(m admin.Metrics) map[string]int64 {
	out := map[string]int64{}
	prefix := controlMetric + `{`
	for k, v := range m.Series {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		_, typ, ok := strings.Cut(rest, `type="`)
		if !ok {
			continue
		}
		typ, _, _ = strings.Cut(typ, `"`)
		out[typ] += int64(v)
	}
	return out
}

// clkTck is the kernel's clock tick for /proc CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clkTck = 100

// procCPU returns utime+stime in seconds and the RSS in bytes of pid.
func procCPU(pid int) (float64, int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	return parseProcStat(b)
}

// parseProcStat reads utime+stime (seconds) and the RSS (bytes) from the
// text of /proc/PID/stat.
func parseProcStat(b []byte) (float64, int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("bad /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 22 {
		return 0, 0, fmt.Errorf("short /proc stat")
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	rssPages, _ := strconv.ParseInt(f[21], 10, 64)
	return (ut + st) / clkTck, rssPages * int64(os.Getpagesize()), nil
}

func (h *procHost) sample(name string) BrokerSample {
	s := BrokerSample{CPU: -1, MsgsIn: -1, MsgsOut: -1, Queue: -1}
	pr, err := h.get(name)
	if err != nil {
		return s
	}
	select {
	case <-pr.done:
		return BrokerSample{Up: false}
	default:
	}
	h.mu.Lock()
	frozen := pr.frozen
	h.mu.Unlock()
	s.Up = !frozen
	now := time.Now()
	if cpu, rss, err := h.l.cpu(pr); err == nil {
		if !pr.cpuAt.IsZero() {
			s.CPU = 100 * (cpu - pr.cpu) / now.Sub(pr.cpuAt).Seconds()
		} else {
			s.CPU = 0
		}
		pr.cpu, pr.cpuAt, s.RSS = cpu, now, rss
	}
	if frozen {
		return s // its admin endpoint cannot answer
	}
	m, err := h.metrics(name)
	if err != nil {
		return s
	}
	in, out := int64(m.Total["deltapub_peer_messages_in_total"]), int64(m.Total["deltapub_peer_messages_out_total"])
	s.MsgsIn, s.MsgsOut = in-pr.in, out-pr.out
	s.Queue = int64(m.Total["deltapub_queue_length"])
	// The metrics are the runtime's snapshot of the core's Status (taken
	// every few ticks, read without a call into the runtime goroutine,
	// which a storming broker answers late): the same counters as /state.
	s.ctl, s.joined = controlByType(m), m.Total["deltapub_joined"] == 1
	h.mu.Lock()
	s.inc = pr.epochN
	pr.in, pr.out = in, out
	pr.ctrl = int64(m.Total[controlMetric])
	h.mu.Unlock()
	return s
}

func (h *procHost) controlMessages() (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.ctrlDone
	for _, pr := range h.procs {
		n += pr.ctrl
	}
	return n, true
}
