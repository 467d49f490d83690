package testbed

import "testing"

// TestInprocEndToEnd runs the CI example with the brokers inside this
// process over real QUIC: the crashes and the restart must keep the
// verdict PASS.
func TestInprocEndToEnd(t *testing.T) {
	t.Parallel()
	p, sum, dir := runExample(t, "examples/ci.toml", "inproc", Options{})
	if sum.Verdict.Verdict != "PASS" || sum.Verdict.ExpectedDeliveries == 0 {
		t.Fatalf("seed %d: %s", p.Spec.Seed, FormatSummary(sum, dir))
	}
	if len(sum.Faults) != 2 || sum.Faults[0].Err != "" || sum.Faults[1].Err != "" {
		t.Errorf("faults not applied cleanly: %+v", sum.Faults)
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
