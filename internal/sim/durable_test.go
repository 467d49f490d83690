package sim

import (
	"os"
	"testing"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// forgetfulNode is the core with its log's recovery switched off: the
// control that shows the durable scenario depends on it.
type forgetfulNode struct{ *overlay.Node }

func (forgetfulNode) Restore([]message.PubID, []message.Pub) {}

// TestDurableScenarioNeedsRecovery runs the PHB crash scenario on a core
// that ignores its log at restart: acknowledged publications are then
// lost, and the checker must say so.
func TestDurableScenarioNeedsRecovery(t *testing.T) {
	text, err := os.ReadFile("testdata/durable_phb_crash_restart.txt")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ParseScenario("durable_phb_crash_restart.txt", string(text))
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunScenario(sc, func(cfg overlay.Config) (Node, error) {
		n, err := overlay.NewNode(cfg)
		return forgetfulNode{n}, err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.Failed(res.Beyond) || res.Report.Lost == 0 {
		t.Fatalf("without log recovery the scenario passed:\n%s", res.Details)
	}
}
