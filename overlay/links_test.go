package overlay

import (
	"testing"

	"github.com/deltapub/deltapub/message"
)

// A flood sent to the live broker behind a frozen neighbour is lost with
// its link, which the other end closed (as unneeded, while the flood was
// in flight): the sender dials that broker again, though it is neither a
// tree neighbour nor a next hop, and the flood arrives on the new link.
// Not dialled again, the flood waited for an answer for ever and the
// subscription was never confirmed.
func TestFloodTargetDialledAgainAfterLinkDown(t *testing.T) {
	h := newHarness(t, 2)
	h.buildTree("A", [][2]message.BrokerID{{"B", "A"}, {"C", "B"}})
	h.freeze("B")
	h.runUntil(200, "A links C, the broker behind the frozen B", func() bool {
		return h.links[pair("A", "C")] && h.nodes["A"].peers["B"].suspected
	})
	h.run(5)

	h.slow = map[[2]message.BrokerID]bool{{"A", "C"}: true} // A's messages to C wait
	h.do("A", func(n *Node) {
		n.ClientOpen(1)
		n.Client(1, &message.Subscribe{Req: 1, Filter: classFilter("x")})
	})
	h.run(2)
	if len(h.slowHeld) == 0 {
		t.Fatal("A sent C nothing: the flood did not go to the broker behind B")
	}
	// C closes the link with the flood in flight; both ends are told.
	delete(h.links, pair("A", "C"))
	h.slowHeld, h.slow = nil, nil
	h.do("A", func(n *Node) { n.LinkDown("C") })
	h.do("C", func(n *Node) { n.LinkDown("A") })

	h.runUntil(300, "the subscription known at C", func() bool {
		_, ok := h.nodes["C"].table.Get(message.SubID{Edge: "A", Epoch: 1, N: 1})
		return ok
	})
}
