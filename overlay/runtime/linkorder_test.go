package runtime

import (
	"testing"
	"testing/synctest"

	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// What the core sends while it sees a link up goes out on that link, even
// when the link's end and its replacement arrive in the same batch of
// events: B2's StateRequest on the first link is answered there (a link
// gone: the answer is lost with it, as the core assumes), never on the
// second. Carried out after the link events, a publication sent while the
// old link was up went out on the new one ahead of the retransmission
// that LinkUp makes in stamp order, and the peer dropped the older ones as
// duplicates (runtime.go, handle).
func TestOutputsGoOutOnTheLinkTheyWereSentOn(t *testing.T) { synctest.Test(t, testLinkOrder) }

func testLinkOrder(t *testing.T) {
	cfg := TestbedBrokerConfig()
	cfg.ID, cfg.Listen = "B1", "127.0.0.1:1"
	r, err := NewRuntime(cfg, 1, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	net := NewMemNetwork()
	defer closeAll(net)
	b1 := listen(t, net, "B1", "127.0.0.1:1", nopHandler{})
	far := &recorder{}
	listen(t, net, "B2", "127.0.0.1:2", far)
	r.start(nil) // B1 bootstraps the overlay: joined
	first := dial(t, b1, "B2", "127.0.0.1:2")
	r.handle(event{kind: evPeerUp, link: first})
	r.drain()
	synctest.Wait()

	// One batch: B2 asks for B1's state on the first link, the first link
	// goes down, and B2's new link comes up.
	r.handle(event{kind: evPeerMsg, link: first, msgs: []message.Message{
		&message.Heartbeat{Epoch: 1},
		&message.StateRequest{Node: message.MapNode{ID: "B2", Epoch: 1, Addr: "127.0.0.1:2", Parent: "B1"}},
	}})
	first.Close("gone")
	synctest.Wait()
	before := len(far.received())
	r.handle(event{kind: evPeerDown, link: first})
	second := dial(t, b1, "B2", "127.0.0.1:2")
	r.handle(event{kind: evPeerUp, link: second})
	r.drain()
	synctest.Wait()
	for _, m := range far.received()[before:] {
		if _, ok := m.(*message.StateReply); ok {
			t.Fatalf("the answer to a request on the first link went out on the second")
		}
	}
	if len(far.received()) == before {
		t.Fatalf("nothing on the second link: the test no longer exercises a replaced link")
	}
}
