// Brokers on other machines: the process backend reaches each [[hosts]]
// entry through the system's ssh (BatchMode, one ControlMaster connection
// per host that every command shares), copies the binary, starts and
// signals the brokers there and streams their logs back.

package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds of the ssh control: how long a host may take to accept the
// connection, one command, and the pid line of a starting broker.
const (
	sshConnectWait = 15 * time.Second
	sshCmdTimeout  = 20 * time.Second
	sshPidWait     = 15 * time.Second
	maxSSHOutput   = 1 << 20 // bytes kept of one command's output
)

// sshHost is one host and its control connection.
type sshHost struct {
	spec   HostSpec
	target SSHTarget
	opts   []string // process.ssh_options
	sock   string   // ControlPath
	master *exec.Cmd
	mdone  chan struct{}
	merr   *bytes.Buffer // the master's stderr
	bin    string        // the deltapub binary on the host
	dir    string
	ctl    *ctlShell // the run's commands (startShell); nil: a session each
}

// sshArgs is ssh's command line for one command on h over its master.
func (h *sshHost) sshArgs(master bool, remote string) []string {
	a := []string{"-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "ControlPath=" + h.sock,
		"-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", "-o", "LogLevel=ERROR"}
	if master {
		a = append(a, "-M", "-N", "-o", "ControlPersist=no")
	} else {
		a = append(a, "-o", "ControlMaster=no")
	}
	a = append(a, h.opts...)
	if h.target.Port != 0 {
		a = append(a, "-p", strconv.Itoa(h.target.Port))
	}
	a = append(a, h.target.User+"@"+h.target.Host)
	if remote != "" {
		a = append(a, "--", remote)
	}
	return a
}

// run runs a shell command on h and returns its output; stdin may be nil.
func (h *sshHost) run(ctx context.Context, remote string, stdin io.Reader) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, sshCmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", h.sshArgs(false, remote)...)
	var out limitedBuffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &out, stdin
	err := cmd.Run()
	s := strings.TrimSpace(out.String())
	if err != nil {
		if s == "" {
			s = err.Error()
		}
		return s, fmt.Errorf("host %s (%s): %s", h.spec.Name, h.spec.SSH, s)
	}
	return s, nil
}

// limitedBuffer keeps the first maxSSHOutput bytes written.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxSSHOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// connect starts h's master connection and waits until it serves.
func (h *sshHost) connect(ctx context.Context, spawn func(*exec.Cmd) error) error {
	h.merr = &bytes.Buffer{}
	cmd := exec.Command("ssh", h.sshArgs(true, "")...)
	cmd.Stderr = &lockedWriter{w: h.merr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("host %s: cannot run ssh: %v", h.spec.Name, err)
	}
	h.master, h.mdone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(h.mdone) }()
	deadline := time.Now().Add(sshConnectWait)
	for time.Now().Before(deadline) {
		select {
		case <-h.mdone:
			return fmt.Errorf("host %s (%s): ssh failed: %s", h.spec.Name, h.spec.SSH, strings.TrimSpace(h.masterErr()))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		chk := exec.Command("ssh", "-o", "ControlPath="+h.sock, "-O", "check", h.target.User+"@"+h.target.Host)
		if chk.Run() == nil {
			return nil
		}
	}
	return fmt.Errorf("host %s (%s): no ssh connection after %v (unreachable?): %s", h.spec.Name, h.spec.SSH, sshConnectWait, strings.TrimSpace(h.masterErr()))
}

func (h *sshHost) masterErr() string {
	if lw, ok := h.master.Stderr.(*lockedWriter); ok {
		lw.mu.Lock()
		defer lw.mu.Unlock()
	}
	return h.merr.String()
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

// goarch maps `uname -m` to Go's GOARCH.
var goarch = map[string]string{"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "i686": "386", "armv7l": "arm", "riscv64": "riscv64", "ppc64le": "ppc64le", "s390x": "s390x"}

// prepare makes h's directory, puts the binary there (or checks the one
// named), clears the data of the brokers placed on h and checks that the
// binary runs there.
func (h *sshHost) prepare(ctx context.Context, localBin string, brokers []string) error {
	out, err := h.run(ctx, "uname -sm && mkdir -p "+shq(h.dir+"/data"), nil)
	if err != nil {
		return err
	}
	if h.spec.Binary != "" {
		h.bin = h.spec.Binary
		if _, err := h.run(ctx, "test -x "+shq(h.bin), nil); err != nil {
			return fmt.Errorf("host %s: binary %s is missing or not executable there", h.spec.Name, h.bin)
		}
	} else {
		f := strings.Fields(out)
		if len(f) == 2 && (f[0] != "Linux" || goarch[f[1]] != goruntime.GOARCH) {
			return fmt.Errorf("host %s is %s %s, this binary is linux/%s: build one for it and name it in binary =", h.spec.Name, f[0], f[1], goruntime.GOARCH)
		}
		bf, err := os.Open(localBin)
		if err != nil {
			return fmt.Errorf("host %s: %v", h.spec.Name, err)
		}
		defer bf.Close()
		h.bin = h.dir + "/deltapub"
		tmp := h.dir + "/.deltapub." + h.spec.Name
		if _, err := h.run(ctx, "cat > "+shq(tmp)+" && chmod 755 "+shq(tmp)+" && mv -f "+shq(tmp)+" "+shq(h.bin), bf); err != nil {
			return fmt.Errorf("copying the binary: %w", err)
		}
	}
	rm := "true"
	for _, b := range brokers {
		rm += " && rm -rf " + shq(h.dir+"/data/"+b)
	}
	if _, err := h.run(ctx, rm, nil); err != nil {
		return err
	}
	if _, err := h.run(ctx, shq(h.bin)+" testbed clock </dev/null", nil); err != nil {
		return fmt.Errorf("host %s: %s does not run there (%v)", h.spec.Name, h.bin, err)
	}
	return nil
}

// close ends h's master connection: every session on it ends, and with
// its standard input each broker's watchdog on the host (see command).
func (h *sshHost) close() {
	if h.ctl != nil {
		h.ctl.close()
	}
	if h.master == nil {
		return
	}
	_ = exec.Command("ssh", "-o", "ControlPath="+h.sock, "-O", "exit", h.target.User+"@"+h.target.Host).Run()
	select {
	case <-h.mdone:
	case <-time.After(2 * time.Second):
		_ = h.master.Process.Kill()
		<-h.mdone
	}
}

// shq quotes s for a POSIX shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// sshLauncher runs each broker on its host over ssh.
type sshLauncher struct {
	hosts map[string]*sshHost // by host name
	place map[string]string   // broker → host
	mu    sync.Mutex
	pipes []*os.File // the write ends of the brokers' standard inputs
}

func (l *sshLauncher) host(broker string) *sshHost { return l.hosts[l.place[broker]] }

func (l *sshLauncher) local() bool { return false }

func (l *sshLauncher) ip(name string) string { return l.host(name).spec.Address }

func (l *sshLauncher) dataDir(name string) string { return l.host(name).dir + "/data/" + name }

// command runs the broker under a shell on its host that prints the pid,
// and kills the broker when its standard input ends: when this testbed
// closes it, or dies (the kernel kills the ssh client, the connection
// drops). The shell exits with the broker's status, and so does ssh.
func (l *sshLauncher) command(name string, args []string, ps ProcessSpec, out io.Writer) (*exec.Cmd, func(<-chan struct{}) (int, error)) {
	h := l.host(name)
	var b strings.Builder
	b.WriteString("exec 3<&0; env")
	for _, kv := range brokerEnv(nil, ps) {
		b.WriteString(" " + shq(kv))
	}
	b.WriteString(" " + shq(h.bin))
	for _, a := range args {
		b.WriteString(" " + shq(a))
	}
	b.WriteString(` </dev/null 2>&1 & p=$!; echo "deltapub-pid $p"; ( cat <&3 >/dev/null 2>&1; kill -KILL $p 2>/dev/null ) >/dev/null 2>&1 & wait $p`)
	cmd := exec.Command("ssh", h.sshArgs(false, b.String())...)
	pw := &pidWriter{out: out, pid: make(chan int, 1)}
	cmd.Stdout, cmd.Stderr = pw, out
	if r, w, err := os.Pipe(); err == nil {
		cmd.Stdin = r
		l.mu.Lock()
		l.pipes = append(l.pipes, w)
		l.mu.Unlock()
	}
	return cmd, func(done <-chan struct{}) (int, error) {
		select {
		case p := <-pw.pid:
			return p, nil
		case <-done:
			return 0, fmt.Errorf("on host %s: ssh ended before the broker started (%v)", h.spec.Name, cmd.ProcessState)
		case <-time.After(sshPidWait):
			return 0, fmt.Errorf("on host %s: no pid from the broker's shell after %v", h.spec.Name, sshPidWait)
		}
	}
}

// pidWriter takes the first line of the remote shell's output (the
// broker's pid) and passes the rest on.
type pidWriter struct {
	out  io.Writer
	line []byte
	got  bool
	pid  chan int
}

func (w *pidWriter) Write(p []byte) (int, error) {
	if w.got {
		return w.out.Write(p)
	}
	n := len(p)
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		if len(w.line) < 256 {
			w.line = append(w.line, p...)
		}
		return n, nil
	}
	w.line = append(w.line, p[:i]...)
	w.got = true
	if v, err := strconv.Atoi(strings.TrimPrefix(string(w.line), "deltapub-pid ")); err == nil {
		w.pid <- v
	} else {
		_, _ = w.out.Write(append(w.line, '\n'))
	}
	if rest := p[i+1:]; len(rest) > 0 {
		if _, err := w.out.Write(rest); err != nil {
			return n, err
		}
	}
	return n, nil
}

var sigNames = map[syscall.Signal]string{syscall.SIGKILL: "KILL", syscall.SIGSTOP: "STOP", syscall.SIGCONT: "CONT", syscall.SIGTERM: "TERM"}

func (l *sshLauncher) signal(pr *proc, sig syscall.Signal) error {
	n, ok := sigNames[sig]
	if !ok || pr.rpid <= 0 {
		return fmt.Errorf("cannot send %v", sig)
	}
	h := l.hostOfProc(pr)
	if h == nil {
		return errors.New("unknown host")
	}
	_, err := h.exec("kill -s " + n + " " + strconv.Itoa(pr.rpid))
	return err
}

// hostOfProc finds the host pr runs on from its ssh command line.
func (l *sshLauncher) hostOfProc(pr *proc) *sshHost {
	for _, h := range l.hosts {
		for _, a := range pr.cmd.Args {
			if a == "ControlPath="+h.sock {
				return h
			}
		}
	}
	return nil
}

func (l *sshLauncher) cpu(pr *proc) (float64, int64, error) {
	h := l.hostOfProc(pr)
	if h == nil || pr.rpid <= 0 {
		return 0, 0, errors.New("unknown host")
	}
	out, err := h.exec("cat /proc/" + strconv.Itoa(pr.rpid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseProcStat([]byte(out))
}

func (l *sshLauncher) wipe(name string) error {
	_, err := l.host(name).exec("rm -rf " + shq(l.dataDir(name)))
	return err
}

func (l *sshLauncher) close() {
	l.mu.Lock()
	for _, w := range l.pipes {
		w.Close()
	}
	l.pipes = nil
	l.mu.Unlock()
	for _, h := range l.hosts {
		h.close()
	}
}

// connectHosts connects to every host in parallel, prepares it and
// measures its clock; any failure is reported per host before a broker
// starts. spawn starts the master connections from the run's locked OS
// thread (Pdeathsig).
func connectHosts(ctx context.Context, p *Plan, localBin string, spawn func(*exec.Cmd) error) (*sshLauncher, error) {
	sockDir, err := os.MkdirTemp("", "dptb-ssh-")
	if err != nil {
		return nil, fmt.Errorf("testbed: %v", err)
	}
	l := &sshLauncher{hosts: map[string]*sshHost{}, place: p.Placement}
	for i, hs := range p.Spec.Hosts {
		t, _ := ParseSSH(hs.SSH)
		dir := hs.Dir
		if dir == "" {
			dir = defaultDir
		}
		l.hosts[hs.Name] = &sshHost{spec: hs, target: t, opts: p.Spec.Process.SSHOptions, sock: path.Join(sockDir, "h"+strconv.Itoa(i)), dir: dir}
	}
	byHost := map[string][]string{}
	for _, b := range p.Topo.Names {
		byHost[p.Placement[b]] = append(byHost[p.Placement[b]], b)
	}
	errs := make([]error, len(p.Spec.Hosts))
	var wg sync.WaitGroup
	for i, hs := range p.Spec.Hosts {
		wg.Add(1)
		go func(i int, h *sshHost) {
			defer wg.Done()
			if err := h.connect(ctx, spawn); err != nil {
				errs[i] = err
				return
			}
			if errs[i] = h.prepare(ctx, localBin, byHost[h.spec.Name]); errs[i] == nil {
				errs[i] = h.startShell(spawn)
			}
		}(i, l.hosts[hs.Name])
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		l.close()
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("testbed: before starting anything: %w", err)
	}
	return l, nil
}

// runOnHosts runs p in process mode on its [[hosts]] over ssh.
func runOnHosts(ctx context.Context, p *Plan, rec *Recorder, bin string, o Options) error {
	for _, hs := range p.Spec.Hosts {
		if hs.SSH == "" {
			return fmt.Errorf("testbed: process mode on [[hosts]]: host %s has no ssh = \"user@host\" (or run with mode netns)", hs.Name)
		}
	}
	if p.Spec.Network.LinkShape != (LinkShape{}) || len(p.Spec.Network.Links) > 0 {
		return errors.New("testbed: [network] shapes emulated links in netns mode only; over ssh the network is the hosts' own")
	}
	if _, err := exec.LookPath("ssh"); err != nil {
		return errors.New("testbed: process mode on [[hosts]] needs the ssh client (openssh-client)")
	}
	spawner := newSpawner()
	defer spawner.close()
	rec.SetPhase("connecting to the hosts")
	l, err := connectHosts(ctx, p, bin, spawner.start)
	if err != nil {
		return err
	}
	clocks := measureClocks(ctx, l)
	h, err := newProcHost(p, bin, o.Out, l)
	if err != nil {
		l.close()
		return err
	}
	runErr := runRealtime(ctx, p, rec, h, o)
	recordClocks(rec, o.Out, p, clocks)
	return runErr
}

// spawner starts processes from one OS thread locked for the run, so that
// their Pdeathsig fires only when the testbed dies (see processBackend).
type spawner struct{ ch chan func() }

func newSpawner() *spawner {
	s := &spawner{ch: make(chan func())}
	ready := make(chan struct{})
	go func() {
		goruntime.LockOSThread()
		close(ready)
		for f := range s.ch {
			f()
		}
	}()
	<-ready
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.ch <- func() { errc <- cmd.Start() }
	return <-errc
}

// close ends the thread, which kills (Pdeathsig) what it started that
// still runs: call it once those processes are done with.
func (s *spawner) close() { close(s.ch) }

// readLine reads one line from r with a deadline.
func readLine(r *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	c := make(chan res, 1)
	go func() { s, err := r.ReadString('\n'); c <- res{s, err} }()
	select {
	case x := <-c:
		return strings.TrimSpace(x.s), x.err
	case <-time.After(d):
		return "", fmt.Errorf("no answer within %v", d)
	}
}

// ctlShell is a shell kept open on a host for the run's small commands
// (signals, /proc reads, removing a data directory): one round trip each
// instead of a new ssh session, which a loaded host or a slow login shell
// can take hundreds of milliseconds to open.
type ctlShell struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	n   int
	bad error // set once a command failed to come back: the shell is not used again
}

// startShell opens h's control shell.
func (h *sshHost) startShell(spawn func(*exec.Cmd) error) error {
	cmd := exec.Command("ssh", h.sshArgs(false, "exec sh")...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("host %s: control shell: %v", h.spec.Name, err)
	}
	h.ctl = &ctlShell{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 64<<10)}
	if _, err := h.exec("true"); err != nil {
		return err
	}
	return nil
}

// exec runs a shell command on h through its control shell (or, without
// one, a session of its own) and returns its output.
func (h *sshHost) exec(remote string) (string, error) {
	c := h.ctl
	if c == nil {
		return h.run(context.Background(), remote, nil)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bad != nil {
		return "", c.bad
	}
	c.n++
	end := fmt.Sprintf("@@deltapub-end-%d ", c.n)
	if _, err := fmt.Fprintf(c.in, "{ %s ; } </dev/null 2>&1; echo \"%s$?\"\n", remote, end); err != nil {
		c.bad = fmt.Errorf("host %s: control shell: %v", h.spec.Name, err)
		return "", c.bad
	}
	var out strings.Builder
	deadline := time.Now().Add(sshCmdTimeout)
	for {
		line, err := readLine(c.out, time.Until(deadline))
		if err != nil {
			c.bad = fmt.Errorf("host %s: control shell: %v", h.spec.Name, err)
			return "", c.bad
		}
		if rest, ok := strings.CutPrefix(line, end); ok {
			s := strings.TrimSpace(out.String())
			if rest != "0" {
				return s, fmt.Errorf("host %s: %s: exit %s: %s", h.spec.Name, remote, rest, s)
			}
			return s, nil
		}
		if out.Len() < maxSSHOutput {
			out.WriteString(line + "\n")
		}
	}
}

func (c *ctlShell) close() {
	c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}
