package testbed

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProcessEndToEnd runs the CI example with real broker processes on
// 127.0.0.1: two adjacent crashes and a restart, verdict PASS, and no
// broker left behind (checked in Cleanup). Run again into the same
// results directory, it starts afresh: its brokers do not recover the
// places the first run left in their data directories.
func TestProcessEndToEnd(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	p, sum, dir := runExample(t, "examples/ci.toml", "process", Options{Binary: bin})
	if sum.Verdict.Verdict != "PASS" || sum.Verdict.ExpectedDeliveries == 0 {
		t.Fatalf("seed %d: %s\n%s", p.Spec.Seed, FormatSummary(sum, dir), logs(dir))
	}
	if sum.MemoryTotalMB == nil || *sum.MemoryTotalMB <= 0 {
		t.Errorf("no broker memory measured")
	}
	if len(sum.Faults) != 2 || sum.Faults[0].Err != "" || sum.Faults[1].Err != "" {
		t.Errorf("faults not applied cleanly: %+v", sum.Faults)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	again, err := Run(ctx, p, "process", dir, Options{Binary: bin}, nil)
	if err != nil || again.Verdict.Verdict != "PASS" {
		t.Fatalf("the same run again into %s: %v\n%s", dir, err, logs(dir))
	}
}

// TestProcessInterrupted cancels a run half-way (as Ctrl-C does): Run
// returns the cancellation, writes the results it has, and kills every
// broker (checked in Cleanup).
func TestProcessInterrupted(t *testing.T) {
	bin := needBinary(t)
	p, err := Load("examples/ci.toml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Cancel once publishing is under way (bounded: 30 s).
		for i := 0; i < 600; i++ {
			if b, err := os.ReadFile(filepath.Join(dir, "control.addr")); err == nil && len(b) > 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
	}()
	sum, err := Run(ctx, p, "process", dir, Options{Binary: bin}, nil)
	if err == nil {
		t.Fatal("an interrupted run returned no error")
	}
	if sum == nil || sum.Verdict.Verdict != "FAIL" {
		t.Fatalf("interrupted run: summary %+v", sum)
	}
	if _, err := os.Stat(filepath.Join(dir, "summary.json")); err != nil {
		t.Fatal(err)
	}
}

// runExample runs an example file in mode (bounded: 50 s) and returns its
// plan, its summary and the results directory; a run that fails to
// complete fails the test, with the brokers' logs when there are any.
func runExample(t *testing.T, file, mode string, o Options) (*Plan, *Summary, string) {
	t.Helper()
	p, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return runPlan(t, p, mode, o)
}

// runPlan runs p in mode, bounded by 50 s; it returns the summary and the
// results directory.
func runPlan(t *testing.T, p *Plan, mode string, o Options) (*Plan, *Summary, string) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	sum, err := Run(ctx, p, mode, dir, o, nil)
	if err != nil {
		t.Fatalf("seed %d: %v\n%s", p.Spec.Seed, err, logs(dir))
	}
	return p, sum, dir
}

func logs(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if len(data) > 1500 {
			data = data[len(data)-1500:]
		}
		b.WriteString("--- " + f + "\n" + string(data) + "\n")
	}
	return b.String()
}

// TestProcessCutHeal cuts a link between two live broker processes through
// their admin endpoints (POST /ctl/cut at both ends) and heals it: the
// brokers bypass each other and reconnect, every delivery arrives (a cut
// is one failure, ≤ δ), verdict PASS. It runs in parallel with
// TestProcessEndToEnd, each from its own path of the binary (needBinary).
func TestProcessCutHeal(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	p, sum, dir := runExample(t, "examples/cut.toml", "process", Options{Binary: bin})
	checkCutHeal(t, p, sum, dir)
	// Both ends logged the cut and the heal (the admin endpoint's
	// /ctl/cut and /ctl/heal were reached, not a fallback).
	for _, b := range []string{"B2", "B3"} {
		data, err := os.ReadFile(filepath.Join(dir, "logs", b+".log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"link cut on request", "link healed on request"} {
			if !strings.Contains(string(data), want) {
				t.Errorf("%s's log lacks %q", b, want)
			}
		}
	}
}

func checkCutHeal(t *testing.T, p *Plan, sum *Summary, dir string) {
	t.Helper()
	if sum.Verdict.Verdict != "PASS" || sum.Verdict.ExpectedDeliveries == 0 {
		t.Fatalf("seed %d: %s\n%s", p.Spec.Seed, FormatSummary(sum, dir), logs(dir))
	}
	if len(sum.Faults) != 2 || sum.Faults[0].Err != "" || sum.Faults[1].Err != "" {
		t.Errorf("cut and heal not applied cleanly: %+v", sum.Faults)
	}
}

// TestProcessLeave runs examples/leave.toml with real broker processes: B2
// leaves under traffic on SIGTERM (exit 0, its leave confirmed), then its
// former child B4 crashes. Verdict PASS, the leave reported without error,
// B2's subscriber counted apart, its publisher stopped at the leave.
func TestProcessLeave(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	p, sum, dir := runExample(t, "examples/leave.toml", "process", Options{Binary: bin})
	checkLeave(t, p, sum, dir)
	data, err := os.ReadFile(filepath.Join(dir, "logs", "B2.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"leaving the overlay", "left the overlay", "broker stopped"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("B2's log lacks %q", want)
		}
	}
}

func checkLeave(t *testing.T, p *Plan, sum *Summary, dir string) {
	t.Helper()
	v := sum.Verdict
	if v.Verdict != "PASS" || v.ExpectedDeliveries == 0 {
		t.Fatalf("seed %d: %s\n%s", p.Spec.Seed, FormatSummary(sum, dir), logs(dir))
	}
	if len(sum.Faults) != 2 || sum.Faults[0].Err != "" || sum.Faults[1].Err != "" {
		t.Fatalf("leave and crash not applied cleanly: %+v", sum.Faults)
	}
	ls := sum.Faults[0].Leaves
	if len(ls) != 1 || ls[0].Broker != "B2" || ls[0].Err != "" || ls[0].TookMs <= 0 {
		t.Fatalf("leave of B2 reported as %+v", ls)
	}
	if v.LeftSubscriptions != 1 {
		t.Errorf("left subscriptions %d, want 1 (B2's subscriber)", v.LeftSubscriptions)
	}
	// P2, at B2, stops at the leave: nothing it published is later than
	// the leave (deliveries.csv: publisher, published_ms), and what it
	// published before arrived.
	f, err := os.Open(filepath.Join(dir, "deliveries.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[0]) < 7 || rows[0][3] != "publisher" || rows[0][6] != "published_ms" {
		t.Fatalf("deliveries.csv: %v (header %v)", err, rows[:min(1, len(rows))])
	}
	fromLeaver := 0
	for _, row := range rows[1:] {
		if row[3] != "P2" {
			continue
		}
		fromLeaver++
		at, err := strconv.ParseFloat(row[6], 64)
		if err != nil || at > sum.Faults[0].AppliedMs {
			t.Fatalf("P2 published at %s ms, after B2 left at %.1f ms (%v)", row[6], sum.Faults[0].AppliedMs, err)
		}
	}
	if fromLeaver == 0 {
		t.Errorf("no delivery of what B2's publisher published before the leave")
	}
}
