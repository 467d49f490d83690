package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// leaveScript draws a random scenario of graceful leaves from seed: a
// random tree, random subscribers and publishers, one to three leaves
// started together (adjacent ones included), with δ ≥ 2 sometimes a crash
// during the leave (restarted later), then settle; every leaver must have
// left (checked by a second "leave" command, which only waits).
func leaveScript(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x1ea7e))
	delta := 1 + rng.IntN(3)
	n := 6 + rng.IntN(15)
	b := func() string { return fmt.Sprintf("B%d", 1+rng.IntN(n)) }
	var s strings.Builder
	fmt.Fprintf(&s, "config delta=%d seed=%d\ntree random=%d degree=%d\nsubscribers 8\nwait confirmed max=5s\n", delta, seed, n, 2+rng.IntN(3))
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&s, "publish P%d %s every=%dms for=3s\n", i, b(), 5+rng.IntN(20))
	}
	s.WriteString("run 300ms\n")
	leavers := map[string]bool{}
	k := 1 + rng.IntN(3)
	crash := delta >= 2 && rng.IntN(2) == 0
	if crash {
		k = 1 // a draining leaver counts toward δ: with a crash next to it, two in a row
	}
	for len(leavers) < k {
		leavers[b()] = true
	}
	var ls []string
	for l := range leavers {
		ls = append(ls, l)
	}
	// Deterministic order for a given seed.
	for i := range ls {
		for j := i + 1; j < len(ls); j++ {
			if ls[j] < ls[i] {
				ls[i], ls[j] = ls[j], ls[i]
			}
		}
	}
	for _, l := range ls {
		fmt.Fprintf(&s, "leave %s max=0s\n", l)
	}
	victim := ""
	if crash {
		for victim == "" || leavers[victim] {
			victim = b()
		}
		fmt.Fprintf(&s, "run %dms\ncrash %s\n", rng.IntN(30), victim)
	}
	s.WriteString("run 1s\n")
	for _, l := range ls {
		fmt.Fprintf(&s, "leave %s max=3s\n", l)
	}
	if crash {
		fmt.Fprintf(&s, "restart %s\nrun 500ms\n", victim)
	}
	s.WriteString("settle for=3s\n")
	return s.String()
}

// TestRandomLeaves runs random leave scenarios (leaveScript) and wants
// every one to pass within δ with every leave completed. The seed and the
// script are printed on failure; `deltapub sim run FILE` replays a script
// saved to a file. DELTAPUB_LEAVE_RUNS=N runs seeds 1..N instead.
func TestRandomLeaves(t *testing.T) {
	runs := 8
	if testing.Short() {
		runs = 4
	}
	if v, err := strconv.Atoi(os.Getenv("DELTAPUB_LEAVE_RUNS")); err == nil && v > 0 {
		runs = v // a longer campaign on demand
	}
	for seed := uint64(1); seed <= uint64(runs); seed++ {
		script := leaveScript(seed)
		sc, err := ParseScenario(fmt.Sprintf("leave-seed-%d", seed), script)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, script)
		}
		res, err := RunScenario(sc, NewOverlayNode, nil)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, script)
		}
		if !strings.Contains(res.Outcome, "verdict: PASS (within δ)") || strings.Contains(res.Outcome, "not completed within 3s") {
			t.Errorf("seed %d:\n%s----\n%s", seed, script, res.Details)
		}
	}
}

func TestDetachPlanned(t *testing.T) {
	build := func() Tree {
		tr := NewTree("R")
		for _, e := range [][2]message.BrokerID{{"R", "C"}, {"R", "A"}, {"A", "X"}, {"C", "Y"}} {
			if err := tr.Add(e[0], e[1]); err != nil {
				t.Fatal(err)
			}
		}
		return tr
	}
	tests := []struct {
		leave message.BrokerID
		root  message.BrokerID
		want  map[message.BrokerID]message.BrokerID // parents after
	}{
		{"A", "R", map[message.BrokerID]message.BrokerID{"C": "R", "X": "R", "Y": "C"}},
		{"R", "A", map[message.BrokerID]message.BrokerID{"C": "A", "X": "A", "Y": "C"}}, // smallest child A becomes the root
		{"Y", "R", map[message.BrokerID]message.BrokerID{"C": "R", "A": "R", "X": "A"}},
	}
	for _, tc := range tests {
		tr := build()
		detachPlanned(&tr, tc.leave)
		if tr.Order[0] != tc.root || tr.Has(tc.leave) {
			t.Errorf("leave %s: order %v, want root %s and %s gone", tc.leave, tr.Order, tc.root, tc.leave)
		}
		if !reflect.DeepEqual(tr.Parent, tc.want) {
			t.Errorf("leave %s: parents %v, want %v", tc.leave, tr.Parent, tc.want)
		}
	}
}

// wrapped is a node factory's layer around another node (as the
// testbed's message counter): it embeds the core, so the core leaves.
type wrapped struct{ Node }

func TestLeaveThroughAWrapper(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NewNode = func(nc overlay.Config) (Node, error) {
		n, err := NewOverlayNode(nc)
		return wrapped{n}, err
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tree := NewTree("B1")
	for _, e := range [][2]message.BrokerID{{"B1", "B2"}, {"B2", "B3"}} {
		if err := tree.Add(e[0], e[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.BuildTree(tree, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Leave("B2"); err != nil {
		t.Fatalf("leave through a wrapper: %v", err)
	}
	if ok, err := s.RunUntilCond(3*time.Second, func() bool { return s.HasLeft("B2") }); !ok || err != nil {
		t.Fatalf("B2 did not leave (%v)", err)
	}
	cfg.NewNode = NewFloodNode // cannot leave: Leave does nothing
	s2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.BuildTree(tree, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s2.Leave("B2"); err != nil {
		t.Fatal(err)
	}
	if err := s2.RunFor(time.Second); err != nil || s2.Leaving("B2") || s2.HasLeft("B2") || !s2.Joined("B2") {
		t.Fatalf("a flood node left (%v)", err)
	}
}
