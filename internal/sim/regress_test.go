package sim

import "testing"

// Fuzz runs that once failed on the real core, replayed with the options
// of `deltapub sim fuzz` (10-100 brokers, δ 1-3, up to δ faults). Each is
// a short deterministic run; the comment says what broke.
func TestFuzzRegressions(t *testing.T) {
	cases := []struct {
		seed int64
		why  string
	}{
		// Three adjacent brokers restarted with their state lost; the
		// first to recover asked the other two (both NotMember, each
		// naming the other) in turn forever: a subscription made during
		// the crashes was never confirmed.
		{2560, "restarted chain asked in turn forever"},
		{7322, "restarted chain asked in turn forever"},
		// Two gone brokers removed from the tree (the root B1 and B7):
		// B4's copy of a pending subscription flood is re-sent to B2,
		// which awaited B4's answer: crossed floods waited for each
		// other, the subscription was never confirmed.
		{13, "crossed floods after a gone broker's removal"},
	}
	for _, c := range cases {
		r := FuzzRun(c.seed, DefaultFuzzOptions())
		if r.Failed() {
			t.Errorf("seed %d (%s): %s\n%v", c.seed, c.why, r.Summary(), r.Report.Details)
		}
	}
}
