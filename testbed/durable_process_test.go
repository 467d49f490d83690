package testbed

import (
	"context"
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

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/admin"
	"github.com/deltapub/deltapub/matching"
)

// TestProcessDurablePHBCrash runs three broker processes with data
// directories (durability fsync by default). The publisher's edge B1 is cut
// off from the others, so that what it acknowledges stays in its queue and
// its log only; then it is killed with SIGKILL right after the last
// acknowledgement and restarted with its data directory. Every subscriber
// must get all N publications exactly once, in order: they can only come
// from B1's log.
func TestProcessDurablePHBCrash(t *testing.T) {
	bin := needBinary(t)
	const n = 40
	ports, err := pickPorts(6)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"B1", "B2", "B3"}
	addr := map[string]string{}
	adm := map[string]string{}
	for i, b := range names {
		addr[b] = fmt.Sprintf("127.0.0.1:%d", ports[2*i])
		adm[b] = fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
	}
	dir := t.TempDir()
	procs := map[string]*exec.Cmd{}
	start := func(b string, join ...string) {
		t.Helper()
		args := []string{"broker", "--preset", "testbed", "--id", b, "--listen", addr[b], "--admin", adm[b],
			"--delta", "1", "--data-dir", filepath.Join(dir, b), "--log-format", "json"}
		if len(join) > 0 {
			var js []string
			for _, j := range join {
				js = append(js, j+"@"+addr[j])
			}
			args = append(args, "--join", strings.Join(js, ","))
		}
		logf, err := os.OpenFile(filepath.Join(dir, b+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[b] = cmd
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	}
	brokerLogs := func() string {
		var sb strings.Builder
		for _, b := range names {
			data, _ := os.ReadFile(filepath.Join(dir, b+".log"))
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			sb.WriteString("--- " + b + "\n" + strings.Join(lines[max(0, len(lines)-15):], "\n") + "\n")
		}
		return sb.String()
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	waitHealthy := func(b string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if resp, err := hc.Get("http://" + adm[b] + "/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		t.Fatalf("%s not joined within 20s\n%s", b, brokerLogs())
	}
	ctl := func(op, self, peer string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+adm[self]+"/ctl/"+op+"?peer="+peer, nil)
		req.Header.Set(admin.ControlHeader, "test")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s at %s: %v", op, peer, self, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s at %s: %s %s", op, peer, self, resp.Status, body)
		}
	}

	start("B1")
	waitHealthy("B1")
	start("B2", "B1")
	waitHealthy("B2")
	start("B3", "B2", "B1")
	waitHealthy("B3")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	filter, err := matching.ParseFilter("[class,eq,'a']")
	if err != nil {
		t.Fatal(err)
	}
	var subs []*client.Subscription
	for _, b := range []string{"B2", "B3"} {
		c, err := client.Connect(ctx, addr[b], client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := c.Subscribe(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WaitConfirmed(ctx); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}

	// B1 alone: its publications go nowhere until it is restarted.
	ctl("cut", "B1", "B2")
	ctl("cut", "B2", "B1")
	ctl("cut", "B1", "B3")
	ctl("cut", "B3", "B1")
	pub, err := client.Connect(ctx, addr["B1"], client.Options{Publisher: "P1", Epoch: 7})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		attrs := []matching.Attr{{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "a"}}, {Name: "n", Value: matching.Value{Kind: matching.KindInt, Int: int64(i)}}}
		if err := pub.Publish(ctx, matching.Publication{Attrs: attrs}); err != nil {
			t.Fatalf("publication %d: %v\n%s", i, err, brokerLogs())
		}
	}
	_ = procs["B1"].Process.Signal(syscall.SIGKILL) // right after the last acknowledgement
	_ = procs["B1"].Wait()
	pub.Close()
	ctl("heal", "B2", "B1")
	ctl("heal", "B3", "B1")
	start("B1", "B2", "B3")

	for k, s := range subs {
		for want := uint64(1); want <= n; want++ {
			select {
			case d, ok := <-s.C:
				if !ok {
					t.Fatalf("subscriber %d: subscription ended after %d\n%s", k, want-1, brokerLogs())
				}
				if d.Pub.Publisher != "P1" || d.Pub.Seq != want {
					t.Fatalf("subscriber %d: got %v, want seq %d (exactly once, in order)", k, d.Pub, want)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("subscriber %d: only %d of %d acknowledged publications arrived\n%s", k, want-1, n, brokerLogs())
			}
		}
	}
	// Nothing more: no duplicate arrives late.
	time.Sleep(300 * time.Millisecond)
	for k, s := range subs {
		select {
		case d := <-s.C:
			t.Fatalf("subscriber %d: extra delivery %v", k, d.Pub)
		default:
		}
	}
}
