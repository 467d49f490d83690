package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// captureStdout runs f with os.Stdout going to a pipe and returns what it
// wrote.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	os.Stdout = old
	return <-done
}

// TestTestbedFuzzCommand runs `deltapub testbed fuzz --mode sim --seed 7`
// (one run: the replay form): one run line, then the totals line exactly,
// and the run's TOML where `testbed run` can replay it (--keep).
func TestTestbedFuzzCommand(t *testing.T) {
	out := t.TempDir()
	var code int
	text := captureStdout(t, func() {
		code = dispatch([]string{"testbed", "fuzz", "--mode", "sim", "--seed", "7", "--out", out, "--keep"})
	})
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 2 {
		t.Fatalf("exit %d, output:\n%s", code, text)
	}
	if !strings.HasPrefix(lines[0], "seed=7 brokers=") {
		t.Errorf("run line %q", lines[0])
	}
	if !regexp.MustCompile(`^runs=1 failed=[01] lost=\d+ duplicates=\d+ reordered=\d+ storms=\d+$`).MatchString(lines[1]) {
		t.Errorf("totals line %q", lines[1])
	}
	want := 0 // the exit status: 1 when a run failed
	if strings.Contains(lines[1], "failed=1") {
		want = 1
	}
	if code != want {
		t.Errorf("exit %d, want %d", code, want)
	}
	file := filepath.Join(out, "run-7", "testbed.toml")
	if code := dispatch([]string{"testbed", "check", file}); code != 0 {
		t.Errorf("testbed check %s: exit %d", file, code)
	}
	if code := dispatch([]string{"testbed", "fuzz", "--brokers", "9-3"}); code != 2 {
		t.Errorf("bad --brokers: exit %d, want 2", code)
	}
}
