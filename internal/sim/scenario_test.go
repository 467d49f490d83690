package sim

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outcomes of the scenario files in testdata")

// runScenarioFiles runs every scenario in dir with factory and compares
// (or, with -rewrite, replaces) the expected outcome. Every scenario must
// also pass its own verdict, whatever the golden text says.
func runScenarioFiles(t *testing.T, dir string, factory NodeFactory) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files in %s (%v)", dir, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			text, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			sc, err := ParseScenario(filepath.Base(file), string(text))
			if err != nil {
				t.Fatal(err)
			}
			res, err := RunScenario(sc, factory, nil)
			if err != nil {
				t.Fatal(err)
			}
			if *rewrite {
				if err := os.WriteFile(file, []byte(sc.Format(res.Outcome)), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if res.Outcome != sc.Expected {
				t.Errorf("outcome differs from %s (rerun with -rewrite if intended)\n--- got\n%s--- want\n%s", file, res.Outcome, sc.Expected)
			}
			// Files named fail_*.txt are negative controls: they must fail.
			wantFail := strings.HasPrefix(filepath.Base(file), "fail_")
			if res.Report.Failed(res.Beyond) != wantFail {
				t.Errorf("scenario verdict: failed=%v, want failed=%v:\n%s", !wantFail, wantFail, res.Details)
			}
		})
	}
}

// The simulator's own scenarios, on the reference flood node: they check
// the simulator (freeze keeps order, determinism of the outcome), not the
// protocol.
func TestFloodScenarios(t *testing.T) { runScenarioFiles(t, "testdata/flood", NewFloodNode) }

func TestParseScenarioErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"", "empty script"},
		{"tree chain=2\nbogus 1\n", "unknown command"},
		{"crash B1\n", "build the tree first"},
		{"tree chain=3\nconfig delta=2\n", "config must come before the tree"},
		{"config delta=x\n", "not a non-negative integer"},
		{"tree chain=3\nrun forever\n", "not a duration"},
		{"tree chain=3\nsubscribe S1 B2 x<5\n", "must start with class"},
		{"tree chain=3\nsubscribe S1 B2 class=a x<<5\n", "predicate"},
		{"tree chain=3\ncrash B9\n", "unknown broker B9"},
		{"tree chain=3\nresume B2\n", "not frozen"},
		{"tree A-B C-D\n", "parent C of D is not in the tree"},
	} {
		sc, err := ParseScenario("t.txt", tc.text)
		if err == nil {
			_, err = RunScenario(sc, NewFloodNode, nil)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got error %v, want one containing %q", tc.text, err, tc.want)
		}
	}
}
