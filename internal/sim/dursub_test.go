package sim

import (
	"os"
	"testing"

	"github.com/deltapub/deltapub/message"
)

func runDurableFile(t *testing.T, file string, factory NodeFactory) *ScenarioResult {
	t.Helper()
	text, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ParseScenario(file, string(text))
	if err != nil {
		t.Fatal(err)
	}
	if factory == nil {
		factory = NewOverlayNode
	}
	res, err := RunScenario(sc, factory, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestDurableCheckerCatchesDropAndDuplicate runs the reconnect scenario
// with a core that drops, then one that duplicates, one delivery to a
// durable session (after the reconnect: the 300th delivery of its edge):
// the checker must fail both.
func TestDurableCheckerCatchesDropAndDuplicate(t *testing.T) {
	for _, drop := range []bool{true, false} {
		res := runDurableFile(t, "durable_sub_reconnect_elsewhere.txt", DurableFaultFactory(drop, 20))
		rep := res.Report
		switch {
		case !rep.Failed(res.Beyond):
			t.Errorf("drop=%v: the checker passed a faulty delivery:\n%s", drop, res.Details)
		case drop && rep.Lost == 0:
			t.Errorf("a dropped delivery not counted as lost:\n%s", res.Details)
		case !drop && rep.Duplicates == 0:
			t.Errorf("a duplicated delivery not counted as a duplicate:\n%s", res.Details)
		}
	}
}

// TestDurableRetentionGapExact checks the retention scenario's Gap
// against the log: one Gap of P1, every acknowledged seq in its range
// undelivered to D1 and acknowledged after D1's first confirmation, the
// seq before the range delivered (nothing consumed is announced as
// released) and the seq after it delivered (nothing retained is
// announced as released).
func TestDurableRetentionGapExact(t *testing.T) {
	res := runDurableFile(t, "durable_sub_retention_gap.txt", nil)
	if res.Report.Failed(res.Beyond) || res.Report.Released == 0 {
		t.Fatalf("want a PASS with released publications:\n%s", res.Details)
	}
	var l *Log = res.log
	si := l.SubIndex("D1")
	var gaps []message.Gap
	for _, g := range l.Gaps {
		if g.Sub == si {
			gaps = append(gaps, g.Gap)
		}
	}
	if len(gaps) != 1 || gaps[0].Source.Publisher != "P1" || gaps[0].From == 0 || gaps[0].To < gaps[0].From {
		t.Fatalf("gaps %+v, want one bounded Gap of P1", gaps)
	}
	g := gaps[0]
	got := map[uint64]bool{}
	for i := 0; i < l.NumDeliveries(); i++ {
		if d := l.Delivery(i); d.Sub == si && d.Pub.Publisher == "P1" {
			got[d.Pub.Seq] = true
		}
	}
	for seq := g.From; seq <= g.To; seq++ {
		if got[seq] {
			t.Errorf("seq %d delivered and inside the Gap %d..%d", seq, g.From, g.To)
		}
	}
	if !got[g.From-1] || !got[g.To+1] {
		t.Errorf("Gap %d..%d is not exact: delivered %d before it: %v, %d after it: %v", g.From, g.To, g.From-1, got[g.From-1], g.To+1, got[g.To+1])
	}
	if want := int(g.To - g.From + 1); res.Report.Released != want {
		t.Errorf("released_by_retention=%d, want the Gap's %d", res.Report.Released, want)
	}
}
