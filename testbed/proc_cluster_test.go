package testbed

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/admin"
)

// procCluster runs broker processes of the deltapub binary on 127.0.0.1,
// each with its data directory under one test directory, for the process
// tests of the durable log and subscriptions.
type procCluster struct {
	t     *testing.T
	bin   string
	dir   string
	names []string
	addr  map[string]string
	adm   map[string]string
	procs map[string]*exec.Cmd
	extra []string // more broker flags for every broker
	hc    *http.Client
}

func newProcCluster(t *testing.T, names []string, extra ...string) *procCluster {
	bin := needBinary(t)
	ports, err := pickPorts(2 * len(names))
	if err != nil {
		t.Fatal(err)
	}
	pc := &procCluster{t: t, bin: bin, dir: t.TempDir(), names: names, addr: map[string]string{}, adm: map[string]string{},
		procs: map[string]*exec.Cmd{}, extra: extra, hc: &http.Client{Timeout: 2 * time.Second}}
	for i, b := range names {
		pc.addr[b] = fmt.Sprintf("127.0.0.1:%d", ports[2*i])
		pc.adm[b] = fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
	}
	return pc
}

// start starts broker b (again), joining through join, and waits until it
// is healthy.
func (pc *procCluster) start(b string, join ...string) {
	t := pc.t
	t.Helper()
	args := []string{"broker", "--preset", "testbed", "--id", b, "--listen", pc.addr[b], "--admin", pc.adm[b],
		"--delta", "1", "--data-dir", filepath.Join(pc.dir, b), "--log-format", "json"}
	args = append(args, pc.extra...)
	if len(join) > 0 {
		var js []string
		for _, j := range join {
			js = append(js, j+"@"+pc.addr[j])
		}
		args = append(args, "--join", strings.Join(js, ","))
	}
	logf, err := os.OpenFile(filepath.Join(pc.dir, b+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pc.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pc.procs[b] = cmd
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	pc.waitHealthy(b)
}

// kill kills broker b with SIGKILL and waits for it.
func (pc *procCluster) kill(b string) {
	_ = pc.procs[b].Process.Signal(syscall.SIGKILL)
	_ = pc.procs[b].Wait()
}

// logs is the tail of every broker's log.
func (pc *procCluster) logs() string {
	var sb strings.Builder
	for _, b := range pc.names {
		data, _ := os.ReadFile(filepath.Join(pc.dir, b+".log"))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		sb.WriteString("--- " + b + "\n" + strings.Join(lines[max(0, len(lines)-15):], "\n") + "\n")
	}
	return sb.String()
}

func (pc *procCluster) waitHealthy(b string) {
	pc.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := pc.hc.Get("http://" + pc.adm[b] + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
	pc.t.Fatalf("%s not joined within 20s\n%s", b, pc.logs())
}

// ctl asks broker self's admin endpoint for op (cut, heal) on peer.
func (pc *procCluster) ctl(op, self, peer string) {
	t := pc.t
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+pc.adm[self]+"/ctl/"+op+"?peer="+peer, nil)
	req.Header.Set(admin.ControlHeader, "test")
	resp, err := pc.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s at %s: %v", op, peer, self, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s at %s: %s %s", op, peer, self, resp.Status, body)
	}
}
