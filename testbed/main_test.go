package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// deltapubBin is the deltapub binary the process-mode tests start brokers
// from, built once in TestMain ("" if the build failed: those tests fail
// with the reason).
var deltapubBin, deltapubBuildErr = "", error(nil)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "testbed-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin := filepath.Join(dir, "deltapub")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/deltapub").CombinedOutput()
	if err != nil {
		deltapubBuildErr = fmt.Errorf("go build ../cmd/deltapub: %v\n%s", err, out)
	} else {
		deltapubBin = bin
	}
	code := m.Run()
	if n := killBrokersOf(bin); n > 0 {
		fmt.Fprintf(os.Stderr, "testbed: %d broker processes outlived the tests (killed now)\n", n)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// killBrokersOf kills every process running bin and returns how many there
// were: after a run there must be none.
func killBrokersOf(bin string) int {
	if bin == "" {
		return 0
	}
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		pid := 0
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid <= 0 {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(cmd), bin+"\x00") {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
			n++
		}
	}
	return n
}

func needBinary(t *testing.T) string {
	t.Helper()
	if deltapubBin == "" {
		t.Fatalf("no deltapub binary: %v", deltapubBuildErr)
	}
	t.Cleanup(func() {
		if n := killBrokersOf(deltapubBin); n > 0 {
			t.Errorf("%d broker processes outlived the run", n)
		}
	})
	return deltapubBin
}
