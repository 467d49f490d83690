package testbed

import (
	"context"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/internal/sim"
)

// TestSimBackendFloodNoFaults drives the sim backend with the simulator's
// flood reference node (no fault tolerance) on a run without faults: every
// matching publication must arrive, and the pipeline (recorder, oracle,
// results) must agree.
func TestSimBackendFloodNoFaults(t *testing.T) {
	src := strings.Split(goodBase, "[[faults]]")[0]
	p := mustParse(t, src)
	RegisterBackend("sim-flood", func(Options) Backend { return simBackend{factory: sim.NewFloodNode} })
	sum, err := Run(context.Background(), p, "sim-flood", t.TempDir(), Options{}, nil)
	if err != nil {
		t.Fatalf("seed %d: %v", p.Spec.Seed, err)
	}
	v := sum.Verdict
	if v.Verdict != "PASS" || v.ExpectedDeliveries == 0 || v.Deliveries < v.ExpectedDeliveries {
		t.Fatalf("seed %d: %+v", p.Spec.Seed, v)
	}
	if sum.ControlMessages == nil {
		t.Fatal("no control message count")
	}
}

// TestSimBackendFloodLosesUnderCrash: the flood node has no fault
// tolerance, so crashing the brokers between publisher and subscribers
// must make the oracle report losses (the oracle can fail).
func TestSimBackendFloodLosesUnderCrash(t *testing.T) {
	p := mustParse(t, goodBase)
	RegisterBackend("sim-flood", func(Options) Backend { return simBackend{factory: sim.NewFloodNode} })
	sum, err := Run(context.Background(), p, "sim-flood", t.TempDir(), Options{}, nil)
	if err != nil {
		t.Fatalf("seed %d: %v", p.Spec.Seed, err)
	}
	if v := sum.Verdict; v.Verdict != "FAIL" || v.Lost == 0 {
		t.Fatalf("seed %d: flood with B2 crashed lost nothing: %+v", p.Spec.Seed, v)
	}
}

// TestSimEndToEnd runs the CI example in sim mode with the real protocol
// core: the verdict must be PASS.
func TestSimEndToEnd(t *testing.T) {
	p, err := Load("examples/ci.toml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := Run(context.Background(), p, "sim", dir, Options{}, nil)
	if err != nil {
		t.Fatalf("seed %d: %v", p.Spec.Seed, err)
	}
	if sum.Verdict.Verdict != "PASS" || sum.Verdict.ExpectedDeliveries == 0 {
		t.Fatalf("seed %d: %s", p.Spec.Seed, FormatSummary(sum, dir))
	}
	// The crash of two adjacent brokers shows as a delay jump.
	f := sum.DelayMs.Faults[0]
	if f.During.Max <= f.Before.P99 {
		t.Errorf("seed %d: no delay jump at the crash: %+v", p.Spec.Seed, f)
	}
}

// TestSimLeave runs examples/leave.toml in the simulator (Sim.Leave):
// verdict PASS, the leave confirmed in virtual time.
func TestSimLeave(t *testing.T) {
	p, err := Load("examples/leave.toml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := Run(context.Background(), p, "sim", dir, Options{}, nil)
	if err != nil {
		t.Fatalf("seed %d: %v", p.Spec.Seed, err)
	}
	checkLeave(t, p, sum, dir)
}
