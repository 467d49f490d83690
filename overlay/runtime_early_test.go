package overlay

import (
	"sync"
	"testing"

	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// fakeLinkPair is a link between the runtime under test (rt side) and a
// test driver (far side, read from far.in directly).
func fakeLinkPair(rtSide, farSide message.BrokerID) (rt, far *fakeLink) {
	closed := make(chan struct{})
	once := new(sync.Once)
	rt = &fakeLink{peer: farSide, in: make(chan message.Message, 64), closed: closed, once: once}
	far = &fakeLink{peer: rtSide, in: make(chan message.Message, 64), closed: closed, once: once}
	rt.other, far.other = far, rt
	return rt, far
}

// Issue 14: a broker restarting links to its neighbours before its core is
// started (its runtime is still resolving the joinpoint). What a neighbour
// sends on such a link meanwhile (here the StateRequest of a neighbour
// recovering from the same failure) is stepped once the core starts, not
// dropped: the neighbour's core sees the link up and sends its request
// once. Dropped, the neighbour waited for an answer until gone_after and
// then became routable without this side's subscriptions.
func TestRuntimeStepsWhatArrivedBeforeTheCoreStarted(t *testing.T) {
	cfg := TestbedBrokerConfig()
	cfg.ID, cfg.Listen, cfg.Join = "B3", "127.0.0.1:3", []string{"127.0.0.1:2"}
	r, err := NewRuntime(cfg, 7, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// B4 (restarted too, joined first) links to B3 and asks for its state.
	l4, far4 := fakeLinkPair("B3", "B4")
	r.handle(event{kind: evPeerUp, link: l4})
	r.handle(event{kind: evPeerMsg, link: l4, msgs: []message.Message{
		&message.Heartbeat{Epoch: 9},
		&message.StateRequest{Node: message.MapNode{ID: "B4", Epoch: 9, Addr: "127.0.0.1:4", Parent: "B3"}},
	}})
	r.drain()
	if len(far4.in) != 0 {
		t.Fatalf("B3 sent %d messages to B4 before its core started", len(far4.in))
	}
	// Then B3's runtime resolves its joinpoint B2 and starts the core.
	l2, _ := fakeLinkPair("B3", "B2")
	r.handle(event{kind: evDialed, link: l2})
	r.handle(event{kind: evJoinpoints, peers: []Peer{{ID: "B2", Addr: "127.0.0.1:2"}}})
	r.drain()
	var got []string
	notMember := false
	for len(far4.in) > 0 {
		m := <-far4.in
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

func containsLink(ls []LinkStatus, id message.BrokerID) bool {
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
	cfg := TestbedBrokerConfig()
	cfg.ID, cfg.Listen, cfg.Join = "B3", "127.0.0.1:3", []string{"127.0.0.1:2"}
	r, err := NewRuntime(cfg, 7, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	l4, _ := fakeLinkPair("B3", "B4")
	r.handle(event{kind: evPeerUp, link: l4})
	for i := 0; i <= maxEarly; i++ {
		r.handle(event{kind: evPeerMsg, link: l4, msg: &message.Heartbeat{Epoch: 9}})
	}
	if r.links["B4"] != nil {
		t.Fatal("link still open after more than maxEarly messages before the start")
	}
	select {
	case <-l4.closed:
	default:
		t.Fatal("the link was forgotten but not closed")
	}
}
