package runtime

import (
	"testing"
	"testing/synctest"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/rs/zerolog"
)

// Issue 14: a broker restarting links to its neighbours before its core is
// started (its runtime is still resolving the joinpoint). What a neighbour
// sends on such a link meanwhile (here the StateRequest of a neighbour
// recovering from the same failure) is stepped once the core starts, not
// dropped: the neighbour's core sees the link up and sends its request
// once. Dropped, the neighbour waited for an answer until gone_after and
// then became routable without this side's subscriptions.
func TestRuntimeStepsWhatArrivedBeforeTheCoreStarted(t *testing.T) { synctest.Test(t, testStepsEarly) }

// earlyB3 is the runtime of B3, restarting (its joinpoint B2 not resolved
// yet, its core not started), not running: the test hands it its links,
// step by step. B3's endpoint reports to nobody; far4 records what reaches
// B4; l4 is B3's end of a link to B4. Close net at the end.
func earlyB3(t *testing.T) (r *Runtime, net *MemNetwork, b3 *MemEndpoint, far4 *recorder, l4 PeerLink) {
	t.Helper()
	cfg := TestbedBrokerConfig()
	cfg.ID, cfg.Listen, cfg.Join = "B3", "127.0.0.1:3", []string{"127.0.0.1:2"}
	r, err := NewRuntime(cfg, 7, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	net = NewMemNetwork()
	b3 = listen(t, net, "B3", "127.0.0.1:3", nopHandler{})
	far4 = &recorder{}
	listen(t, net, "B4", "127.0.0.1:4", far4)
	return r, net, b3, far4, dial(t, b3, "B4", "127.0.0.1:4")
}

func testStepsEarly(t *testing.T) {
	r, net, b3, far4, l4 := earlyB3(t)
	listen(t, net, "B2", "127.0.0.1:2", nopHandler{})
	defer closeAll(net)
	// B4 (restarted too, joined first) links to B3 and asks for its state.
	r.handle(event{kind: evPeerUp, link: l4})
	r.handle(event{kind: evPeerMsg, link: l4, msgs: []message.Message{
		&message.Heartbeat{Epoch: 9},
		&message.StateRequest{Node: message.MapNode{ID: "B4", Epoch: 9, Addr: "127.0.0.1:4", Parent: "B3"}},
	}})
	r.drain()
	synctest.Wait()
	if ms := far4.received(); len(ms) != 0 {
		t.Fatalf("B3 sent %d messages to B4 before its core started", len(ms))
	}
	// Then B3's runtime resolves its joinpoint B2 and starts the core.
	l2 := dial(t, b3, "B2", "127.0.0.1:2")
	r.handle(event{kind: evDialed, link: l2})
	r.handle(event{kind: evJoinpoints, peers: []overlay.Peer{{ID: "B2", Addr: "127.0.0.1:2"}}})
	r.drain()
	synctest.Wait()
	var got []string
	notMember := false
	for _, m := range far4.received() {
		got = append(got, m.Type().String())
		if sr, ok := m.(*message.StateReply); ok && sr.NotMember {
			notMember = true
		}
	}
	if !notMember {
		t.Fatalf("B3 never answered B4's StateRequest (sent to B4: %v)", got)
	}
	if got[0] != "Heartbeat" {
		t.Errorf("the first message to B4 is %s, want a Heartbeat (all: %v)", got[0], got)
	}
	if st := r.node.Status(); !containsLink(st.Links, "B4") {
		t.Errorf("B3's core does not know the link to B4: %+v", st.Links)
	}
}

func containsLink(ls []overlay.LinkStatus, id message.BrokerID) bool {
	for _, l := range ls {
		if l.Peer == id && l.Up {
			return true
		}
	}
	return false
}

// More than maxEarly messages before the start: the link is closed (its
// peer sees it down and re-sends what matters on the next one), not grown
// without bound.
func TestRuntimeBoundsWhatArrivesBeforeTheCoreStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, net, _, far4, l4 := earlyB3(t)
		defer closeAll(net)
		r.handle(event{kind: evPeerUp, link: l4})
		for i := 0; i <= maxEarly; i++ {
			r.handle(event{kind: evPeerMsg, link: l4, msg: &message.Heartbeat{Epoch: 9}})
		}
		if r.links["B4"] != nil {
			t.Fatal("link still open after more than maxEarly messages before the start")
		}
		synctest.Wait()
		if far4.downs() != 1 {
			t.Fatal("the link was forgotten but not closed (B4 did not see it go down)")
		}
	})
}
