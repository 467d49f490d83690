package sim

import (
	"testing"
)

// The fuzz harness itself, on the flood reference node: without faults
// every run passes, and with faults the checker finds losses.
func TestFuzzHarnessOnFloodNode(t *testing.T) {
	o := FuzzOptions{BrokersMin: 5, BrokersMax: 15, DeltaMin: 1, DeltaMax: 2, Faults: 0, Factory: NewFloodNode, NoWire: true, NoDurable: true}
	fs := Fuzz(1, 20, o, 2, func(r FuzzResult) {
		if r.Failed() {
			t.Errorf("flood without faults failed: %s\n%s%v", r.Summary(), r.PlanText(), r.Report.Details)
		}
		if r.Report.Guaranteed == 0 && r.Err == nil {
			t.Logf("seed %d: nothing guaranteed", r.Seed)
		}
	})
	if fs.Runs != 20 || !fs.OK() {
		t.Fatalf("summary %s", fs.Line())
	}
	o.Faults = 1
	fs = Fuzz(100, 20, o, 2, nil)
	if fs.Failed == 0 {
		t.Fatalf("flood with a fault per run never failed: %s", fs.Line())
	}
}

func TestFuzzRunIsDeterministic(t *testing.T) {
	o := FuzzOptions{BrokersMin: 8, BrokersMax: 20, DeltaMin: 1, DeltaMax: 3, Faults: -1, Factory: NewFloodNode, NoWire: true, NoDurable: true}
	for seed := int64(1); seed <= 5; seed++ {
		a, b := FuzzRun(seed, o), FuzzRun(seed, o)
		if a.Summary() != b.Summary() || a.PlanText() != b.PlanText() || a.Stats.Events != b.Stats.Events {
			t.Fatalf("seed %d not deterministic:\n%s\n%s", seed, a.Summary(), b.Summary())
		}
	}
}
