package testbed

import (
	"os"
	"strings"
	"testing"
)

// TestInprocEndToEnd runs the CI example with the brokers inside this
// process, on the in-memory transport (the default) and over real QUIC: the
// crashes and the restart (on the same address in memory, on a fresh port
// over QUIC) must keep the verdict PASS.
func TestInprocEndToEnd(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{TransportMemory, TransportQUIC} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			p, sum, dir := runInproc(t, "examples/ci.toml", transport, "")
			if sum.Verdict.Verdict != "PASS" || sum.Verdict.ExpectedDeliveries == 0 {
				t.Fatalf("seed %d: %s", p.Spec.Seed, FormatSummary(sum, dir))
			}
			if len(sum.Faults) != 2 || sum.Faults[0].Err != "" || sum.Faults[1].Err != "" {
				t.Errorf("faults not applied cleanly: %+v", sum.Faults)
			}
		})
	}
}

// TestInprocCutHeal cuts and heals a link between two live brokers of this
// process (Runtime.Cut at both ends): verdict PASS.
func TestInprocCutHeal(t *testing.T) {
	t.Parallel()
	p, sum, dir := runExample(t, "examples/cut.toml", "inproc", Options{})
	checkCutHeal(t, p, sum, dir)
}

// TestInprocLeave: B2, a broker of this process, leaves gracefully (its
// runtime's context ends; Runtime.HasLeft says the leave was confirmed),
// then B4 crashes: verdict PASS.
func TestInprocLeave(t *testing.T) {
	t.Parallel()
	p, sum, dir := runExample(t, "examples/leave.toml", "inproc", Options{})
	checkLeave(t, p, sum, dir)
}

// TestInprocFreezeOnMemory freezes the middle of the CI chain on the
// in-memory transport for longer than the failure timeout (its endpoint
// neither reads nor sends, as under SIGSTOP): its neighbours suspect and
// bypass it, it resumes and catches up; verdict PASS.
func TestInprocFreezeOnMemory(t *testing.T) {
	t.Parallel()
	faults := `
[[faults]]
at = "2.5s"
freeze = ["B3"]

[[faults]]
at = "3.5s"
resume = ["B3"]
`
	p, sum, dir := runInproc(t, "examples/ci.toml", TransportMemory, faults)
	if sum.Verdict.Verdict != "PASS" || sum.Verdict.ExpectedDeliveries == 0 {
		t.Fatalf("seed %d: %s", p.Spec.Seed, FormatSummary(sum, dir))
	}
	for _, f := range sum.Faults {
		if f.Err != "" {
			t.Errorf("fault %+v not applied cleanly", f)
		}
	}
}

// runInproc runs file in inproc mode on transport; faults, if given,
// replace the file's faults.
func runInproc(t *testing.T, file, transport, faults string) (*Plan, *Summary, string) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if faults != "" {
		src = []byte(withoutFaults(string(src)) + faults)
	}
	src = append(src, "\n[inproc]\ntransport = \""+transport+"\"\n"...)
	p, err := Parse(file, src)
	if err != nil {
		t.Fatal(err)
	}
	return runPlan(t, p, "inproc", Options{})
}

// withoutFaults cuts src before its first [[faults]] table (the examples
// list their faults last).
func withoutFaults(src string) string {
	if i := strings.Index(src, "[[faults]]"); i >= 0 {
		return src[:i]
	}
	return src
}
