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
		// Graceful leaves in the fuzz (session 3). B52 crashed next to
		// the leaver B55 and restarted with B55 among its joinpoints: its
		// recovery waited for the silent B55 until gone_after.
		{178, "recovery waited for a joinpoint that had left"},
		// B15 was frozen while its child B16 left: the repair's flood
		// passed it by, and after resuming it kept B16 as a neighbour and
		// waited for it in a subscription flood until gone_after.
		{1272, "a frozen broker missed a leave's repair"},
		// B19 was frozen while its neighbour B21 left and missed the
		// withdrawal of B21's own subscriptions: a publication stayed
		// queued toward B21 for good.
		{1132, "a frozen broker missed a leaver's withdrawals"},
		// B50 was cut off from B52, the publisher's edge, while B52's
		// bypass past it ran through B49, which then left: B48 routed the
		// newer publications it held back toward B50, which accepted them
		// ahead of the older ones B52 still held for it and then dropped
		// those as duplicates.
		{21788, "a repair routed publications back past the switch rule"},
		// B10 (cut off from its parent B9) subscribed while B9's parent
		// B5 left: B4 had the flood from B10 with B5 as the direction it
		// came from; after the repair it sent it on to B9, which recorded
		// B4 as the subscriber's direction and never routed toward B10.
		{30981, "a pending flood's direction after a repair"},
	}
	for _, c := range cases {
		r := FuzzRun(c.seed, DefaultFuzzOptions())
		if r.Failed() {
			t.Errorf("seed %d (%s): %s\n%v", c.seed, c.why, r.Summary(), r.Report.Details)
		}
	}
}
