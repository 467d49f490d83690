package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The deltapub binary the process-mode tests start brokers from is built
// once per test binary, by the first test that needs it (unit-test runs
// with -run do not pay for it); TestMain removes it and checks that no
// broker outlived the tests.
var (
	binOnce          sync.Once
	binDir           string
	deltapubBin      string
	deltapubBuildErr error

	handedOut     sync.Mutex
	binsHandedOut []string // every test's own path of the binary
)

func buildBinary() {
	dir, err := os.MkdirTemp("", "testbed-bin-")
	if err != nil {
		deltapubBuildErr = err
		return
	}
	binDir = dir
	bin := filepath.Join(dir, "deltapub")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/deltapub").CombinedOutput()
	if err != nil {
		deltapubBuildErr = fmt.Errorf("go build ../cmd/deltapub: %v\n%s", err, out)
		return
	}
	deltapubBin = bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	n := killBrokersOf(deltapubBin)
	for _, bin := range binsHandedOut {
		n += killBrokersOf(bin)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "testbed: %d broker processes outlived the tests (killed now)\n", n)
		code = 1
	}
	if binDir != "" {
		os.RemoveAll(binDir)
	}
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

// needBinary returns the deltapub binary for a process-mode test: a link
// to (or copy of) the built binary under the test's own directory. Brokers
// are found by their executable's path, so the Cleanup check sees only
// this test's brokers, whichever tests run in parallel with it.
func needBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(buildBinary)
	if deltapubBin == "" {
		t.Fatalf("no deltapub binary: %v", deltapubBuildErr)
	}
	bin := filepath.Join(t.TempDir(), "deltapub")
	if err := os.Link(deltapubBin, bin); err != nil {
		data, err := os.ReadFile(deltapubBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	handedOut.Lock()
	binsHandedOut = append(binsHandedOut, bin)
	handedOut.Unlock()
	t.Cleanup(func() {
		if n := killBrokersOf(bin); n > 0 {
			t.Errorf("%d broker processes outlived the run", n)
		}
	})
	return bin
}
