package benchcompare

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a server process started by the harness (a deltapub broker
// or a nats-server). It is killed by Kill, and by the kernel if the
// harness itself dies (Pdeathsig), so no server outlives a run.
type Process struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
	err  error
}

// StartProcess starts path with args; stdout and stderr go to a bounded
// in-memory tail shown in errors.
func StartProcess(name, path string, args ...string) (*Process, error) {
	cmd := exec.Command(path, args...)
	out := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	// SIGKILL when the harness dies, whatever the exit path.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("benchcompare: start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Output is the tail of what the process printed.
func (p *Process) Output() string { return p.out.String() }

// Kill kills the process and waits for it (at most 5 s; a process that
// does not die by then is reported).
func (p *Process) Kill() error {
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("benchcompare: %s (pid %d) did not exit after SIGKILL", p.name, p.Pid())
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// FreeUDP and FreeTCP return a loopback address free at the time of the
// call (another program could take it before the server binds it; the
// server then fails to start and the run reports it).
func FreeUDP() (string, error) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("benchcompare: free UDP port: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().String(), nil
}

func FreeTCP() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("benchcompare: free TCP port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// WaitHTTP polls url until it answers 200 and ok(body) holds, the process
// exits (exited may be nil) or d passes.
func WaitHTTP(ctx context.Context, url string, d time.Duration, exited <-chan struct{}, ok func(body []byte) bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c := http.Client{Timeout: time.Second}
	tick := time.NewTicker(20 * time.Millisecond) // polling interval
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := c.Do(req); err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (ok == nil || ok(body)) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("benchcompare: %s not ready within %v", url, d)
		case <-exited:
			return fmt.Errorf("benchcompare: process exited before %s was ready", url)
		case <-tick.C:
		}
	}
}

// FetchProfile saves a CPU profile of seconds s from a Go pprof endpoint
// (base is "http://host:port") to path.
func FetchProfile(ctx context.Context, base string, s int, path string) error {
	c := http.Client{Timeout: time.Duration(s+15) * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, s), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("benchcompare: profile %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("benchcompare: profile %s: HTTP %s", base, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, io.LimitReader(resp.Body, 64<<20)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
