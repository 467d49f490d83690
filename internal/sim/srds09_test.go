package sim

import (
	"strings"
	"testing"
	"time"
)

// A scaled-down srds09 (20 brokers, 200 subscriptions): no failure and one
// crash next to the middle keep every guarantee, the delay returns to its
// level within failure timeout + 2 × link delay (+ one tick of detection
// granularity), and without failures the queues drain within 3 DACK
// periods after publishing stops. Virtual time only.
func TestSRDS09Small(t *testing.T) {
	for _, k := range []int{0, 1} {
		o := DefaultSRDSOptions()
		o.Brokers, o.Subs, o.Publishers, o.Crashes = 20, 200, 5, k
		o.Warmup, o.After = 1500*time.Millisecond, time.Second
		r := RunSRDS09(o)
		if r.Err != nil {
			t.Fatalf("crashes=%d seed=%d: %v", k, o.Seed, r.Err)
		}
		t.Log(r.Text())
		if r.Report.Failed(false) || r.Report.Guaranteed == 0 {
			t.Fatalf("crashes=%d seed=%d: %s", k, o.Seed, r.Text())
		}
		tick := 10 * time.Millisecond
		if k > 0 && (r.Recovery < 0 || r.Recovery > r.Bound+tick) {
			t.Errorf("crashes=%d seed=%d: recovery %v > bound %v + a tick\n%s", k, o.Seed, r.Recovery, r.Bound, r.Text())
		}
		if k == 0 && (r.DrainTime < 0 || r.DrainTime > 3*r.DACKPeriod) {
			t.Errorf("seed=%d: queues drained in %v, want ≤ 3 DACK periods (%v)", o.Seed, r.DrainTime, 3*r.DACKPeriod)
		}
	}
}

// With a warmup too short for any publication to be delivered before the
// crash there is no level to return to: the recovery is reported as not
// measured, not as a time past the bound. A warmup under 2 s measures the
// level after its first half instead of after the first second.
func TestSRDS09ShortWarmup(t *testing.T) {
	o := DefaultSRDSOptions()
	o.Brokers, o.Subs, o.Publishers, o.Crashes = 20, 100, 3, 1
	o.Warmup, o.After = 2*time.Millisecond, 300*time.Millisecond
	r := RunSRDS09(o)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Recovery != -1 || !strings.Contains(r.Text(), "recovery: not measured") {
		t.Errorf("recovery %v, want -1 (not measured):\n%s", r.Recovery, r.Text())
	}
	o.Warmup = 1200 * time.Millisecond
	if r = RunSRDS09(o); r.Err != nil || r.PreMean == 0 || r.Recovery < 0 || r.Recovery > r.Bound+10*time.Millisecond {
		t.Errorf("warmup 1.2 s: pre-crash mean %v, recovery %v (bound %v), err %v", r.PreMean, r.Recovery, r.Bound, r.Err)
	}
}
