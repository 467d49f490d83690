package runtime

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deltapub/deltapub/internal/storage"
	"github.com/deltapub/deltapub/message"
)

// startWithStore is startTestBroker for a broker with a data directory.
func startWithStore(t *testing.T, net *MemNetwork, id, addr string, join []string, st storage.Store) *testBroker {
	t.Helper()
	cfg := TestbedBrokerConfig()
	cfg.ID, cfg.Listen, cfg.Join = id, addr, join
	epoch, err := BeginIncarnation(st, 1)
	if err != nil {
		t.Fatal(err)
	}
	return runTestBroker(t, net, cfg, epoch, st)
}

func waitJoined(t *testing.T, b *testBroker, what string) {
	t.Helper()
	for tries := 0; !b.rt.Joined(); tries++ {
		if tries > 1000 {
			t.Fatalf("%s did not join within 10 s of virtual time", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A broker with a data directory saves its place (the brokers that know
// it) and, restarted through a joinpoint that does not know it, rejoins
// through that place first: at its old place, under its old parent, not a
// second time elsewhere under the same name.
func TestRuntimeRestartsAtItsSavedPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := NewMemNetwork()
		edit := func(c *BrokerConfig) { c.Delta = 1 }
		b1 := startTestBroker(t, net, "B1", "10.0.0.1:1", nil, edit)
		waitJoined(t, b1, "B1")
		b2 := startTestBroker(t, net, "B2", "10.0.0.2:1", []string{"B1@10.0.0.1:1"}, edit)
		waitJoined(t, b2, "B2")
		b3 := startTestBroker(t, net, "B3", "10.0.0.3:1", []string{"B2@10.0.0.2:1"}, edit)
		waitJoined(t, b3, "B3")
		b4 := startTestBroker(t, net, "B4", "10.0.0.4:1", []string{"B1@10.0.0.1:1"}, edit)
		waitJoined(t, b4, "B4")

		st := &storage.Memory{}
		b5 := startWithStore(t, net, "B5", "10.0.0.5:1", []string{"B3@10.0.0.3:1"}, st)
		waitJoined(t, b5, "B5")
		time.Sleep(time.Second) // virtual: several status refreshes
		want := []storage.Joinpoint{{ID: "B3", Addr: "10.0.0.3:1"}, {ID: "B2", Addr: "10.0.0.2:1"}}
		if got := st.Place(); !slices.Equal(got, want) {
			t.Fatalf("saved place %v, want %v (B5's ancestors, δ+1 of them)", got, want)
		}

		b5.ep.Crash()
		b5.rt.Kill()
		<-b5.done
		time.Sleep(2 * time.Second)
		// B4 is three hops from B5's old place: alone it would take B5 as
		// a new child.
		b5 = startWithStore(t, net, "B5", "10.0.0.5:1", []string{"B4@10.0.0.4:1"}, st)
		waitJoined(t, b5, "restarted B5")
		s5, err := b5.rt.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if s5.Epoch != 2 {
			t.Errorf("restarted B5 has epoch %d, want 2 (the store's next)", s5.Epoch)
		}
		if s5.Parent != "B3" {
			t.Errorf("restarted B5 rejoined under %q, want its old parent B3", s5.Parent)
		}
		s4, err := b4.rt.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range s4.Map {
			if n.ID == message.BrokerID("B5") && n.Parent == "B4" {
				t.Errorf("B4 holds B5 as its child: %v", s4.Map)
			}
		}
		for _, b := range []*testBroker{b5, b4, b3, b2, b1} {
			b.shutdown(t)
		}
	})
}
