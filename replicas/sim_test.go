package replicas_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/sim"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/deltapub/deltapub/replicas"
)

// The replicas run under the simulator, as the testbed's sim mode runs
// them.
var _ sim.Node = (*replicas.Node)(nil)

// chain is A – B – C – D with k replicas each: a publisher on Aa, a
// subscriber on Da and one on Cb (a second replica's client).
func chainSim(t *testing.T, seed int64, k int) (*sim.Sim, *replicas.Layout) {
	t.Helper()
	names := []string{"A", "B", "C", "D"}
	parent := map[string]string{"A": "", "B": "A", "C": "B", "D": "C"}
	lay, err := replicas.NewLayout(names, parent, k, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	cfg.Wire = true // every message must round-trip
	cfg.NewNode = func(c overlay.Config) (sim.Node, error) { return replicas.New(c, lay) }
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range lay.Replicas() {
		if err := s.AddBroker(id); err != nil {
			t.Fatal(err)
		}
		if err := s.Join(id); err != nil {
			t.Fatal(err)
		}
	}
	all := func() bool {
		for _, id := range lay.Replicas() {
			if !s.Joined(id) {
				return false
			}
		}
		return true
	}
	if ok, err := s.RunUntilCond(5*time.Second, all); err != nil || !ok {
		t.Fatalf("replicas not joined: ok=%v err=%v", ok, err)
	}
	f, err := matching.ParseFilter("[class,eq,'STOCK'],[price,>,50]")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []message.BrokerID{"Da", "Cb"} {
		if err := s.AddSubscriber("S-"+string(e), e, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RunFor(500 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	n := 0
	gen := func() []matching.Attr {
		n++
		price := float64(n*37%100) + 0.5 // about half match
		return []matching.Attr{{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "STOCK"}},
			{Name: "price", Value: matching.Value{Kind: matching.KindFloat, Float: price}}}
	}
	if err := s.AddPublisher("P", "Aa", 5*time.Millisecond, s.Now()+3*time.Second, gen); err != nil {
		t.Fatal(err)
	}
	return s, lay
}

func check(t *testing.T, s *sim.Sim, what string) sim.Report {
	t.Helper()
	if err := s.RunFor(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	r := s.Log().Check()
	if r.Guaranteed == 0 || r.Lost != 0 || r.Duplicates != 0 || r.Reordered != 0 || r.Spurious != 0 || r.Failed(false) {
		t.Fatalf("%s: %+v", what, r)
	}
	return r
}

func TestNoFault(t *testing.T) {
	s, _ := chainSim(t, 1, 2)
	if err := s.RunFor(4 * time.Second); err != nil {
		t.Fatal(err)
	}
	r := check(t, s, "no fault")
	if r.Delivered != r.Guaranteed {
		t.Fatalf("delivered %d, guaranteed %d: %+v", r.Delivered, r.Guaranteed, r)
	}
}

// One replica of every transit virtual node crashed at once (k − 1 per
// virtual node), then restarted: nothing lost, nothing twice, in order,
// although every receiver gets each publication from two replicas.
func TestKMinusOneCrashesAndRestarts(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s, _ := chainSim(t, seed, 2)
			if err := s.RunFor(time.Second); err != nil {
				t.Fatal(err)
			}
			victims := []message.BrokerID{"Bb", "Ca"}
			if seed%2 == 0 {
				victims = []message.BrokerID{"Ba", "Cb", "Db"}
			}
			for _, v := range victims {
				if err := s.Crash(v); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.RunFor(time.Second); err != nil {
				t.Fatal(err)
			}
			for _, v := range victims {
				if err := s.Restart(v); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.RunFor(2 * time.Second); err != nil {
				t.Fatal(err)
			}
			r := check(t, s, fmt.Sprintf("crashes %v", victims))
			for _, v := range victims {
				if !s.Joined(v) {
					t.Errorf("%s did not rejoin", v)
				}
			}
			t.Logf("%+v", r)
		})
	}
}

// A replica frozen past the failure timeout and resumed (a false
// suspicion) is sent again what the replicas upstream skipped meanwhile:
// its own subscriber misses nothing, and nothing is given up as a hole.
func TestFalseSuspicionRepaired(t *testing.T) {
	s, _ := chainSim(t, 3, 2)
	if err := s.RunFor(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Freeze("Cb"); err != nil {
		t.Fatal(err)
	}
	if err := s.RunFor(600 * time.Millisecond); err != nil { // past FailureTicks (200 ms)
		t.Fatal(err)
	}
	if err := s.Resume("Cb"); err != nil {
		t.Fatal(err)
	}
	check(t, s, "false suspicion of Cb")
}

// After its restart a replica routes with the table it learnt from its
// sibling: crash the sibling next, and the restarted one alone carries
// every publication.
func TestRestartedReplicaRelearnsRouting(t *testing.T) {
	s, _ := chainSim(t, 3, 2)
	step := func(f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		if err := s.RunFor(400 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	step(func() error { return s.Crash("Ba") })
	step(func() error { return s.Restart("Ba") })
	step(func() error { return s.Crash("Bb") })
	check(t, s, "Ba restarted, then Bb crashed")
}

// Beyond the assumption (both replicas of B down), publications are lost:
// the test shows that the checks above can fail.
func TestBothReplicasDownLoses(t *testing.T) {
	s, _ := chainSim(t, 4, 2)
	if err := s.RunFor(time.Second); err != nil {
		t.Fatal(err)
	}
	for _, v := range []message.BrokerID{"Ba", "Bb"} {
		if err := s.Crash(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RunFor(3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if r := s.Log().Check(); r.Lost == 0 {
		t.Fatalf("both replicas of B crashed and nothing was lost: %+v", r)
	}
}

func TestLayoutErrors(t *testing.T) {
	for _, c := range []struct {
		names  []string
		parent map[string]string
		k      int
	}{
		{[]string{"A"}, nil, 1},
		{[]string{"A"}, nil, replicas.MaxReplicas + 1},
		{[]string{"A", "B"}, map[string]string{"B": "C"}, 2},
		{[]string{"A", "B"}, map[string]string{}, 2},
		{[]string{"A", "A"}, map[string]string{}, 2},
	} {
		if _, err := replicas.NewLayout(c.names, c.parent, c.k, nil); err == nil {
			t.Errorf("%v %v k=%d: no error", c.names, c.parent, c.k)
		}
	}
	l, err := replicas.NewLayout([]string{"A", "B"}, map[string]string{"B": "A"}, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(l.Replicas()); got != "[Aa Ab Ac Ba Bb Bc]" {
		t.Errorf("replicas %s", got)
	}
	if vn, ok := l.VNodeOf("Bc"); !ok || vn != "B" {
		t.Errorf("VNodeOf(Bc) = %q, %v", vn, ok)
	}
}

// NewByPlace (the runtime's, whose epochs are clock readings) knows a
// restart from Join's joinpoints, the place it saved: none is a first
// start (dial the peers ranked before), some is a restart (dial them all).
// A joined replica's place is its siblings.
func TestNewByPlaceRestartFromPlace(t *testing.T) {
	l, err := replicas.NewLayout([]string{"A", "B"}, map[string]string{"B": "A"}, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := overlay.DefaultConfig()
	cfg.ID, cfg.Epoch = "Ab", 1_796_000_000_000
	dials := func(place []overlay.Peer) []message.BrokerID {
		n, err := replicas.NewByPlace(cfg, l)
		if err != nil {
			t.Fatal(err)
		}
		n.Join(place)
		var out []message.BrokerID
		for _, d := range n.Ready().Dials {
			out = append(out, d.ID)
		}
		return out
	}
	if got := fmt.Sprint(dials(nil)); got != "[Aa]" {
		t.Errorf("first start dials %s, want [Aa]", got)
	}
	if got := fmt.Sprint(dials([]overlay.Peer{{ID: "Aa"}})); got != "[Aa Ba Bb]" {
		t.Errorf("restart dials %s, want [Aa Ba Bb]", got)
	}
	n, err := replicas.NewByPlace(cfg, l)
	if err != nil {
		t.Fatal(err)
	}
	n.Bootstrap()
	if p := n.Place(); p != nil {
		t.Errorf("place before joining: %v", p)
	}
	n.LinkUp("Aa")
	if p := n.Place(); !n.Joined() || len(p) != 1 || p[0].ID != "Aa" {
		t.Errorf("joined %v, place %v; want the sibling Aa", n.Joined(), p)
	}
	for range 100 {
		n.Tick() // heartbeats to Aa: control messages in the status
	}
	if st := n.Status(); st.ID != "Ab" || !st.Joined || len(st.Links) != 3 || len(st.Counters.Control) == 0 {
		t.Errorf("status %+v", st)
	}
}
