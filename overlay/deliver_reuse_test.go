package overlay

import (
	"testing"

	"github.com/deltapub/deltapub/message"
)

// Delivers handed out and given back by Recycle stay the caller's; those
// given back by RecycleDelivers are reused, unless outputs came after the
// Ready.
func TestRecycleDeliversReuse(t *testing.T) {
	c := DefaultConfig()
	c.ID, c.Addr, c.Epoch = "B1", "addr-B1", 1
	n, err := NewNode(c)
	if err != nil {
		t.Fatal(err)
	}
	give := func(seq uint64) *message.Deliver {
		d := n.newDeliver(message.Deliver{Pub: message.PubID{Publisher: "P", Epoch: 1, Seq: seq}})
		n.toClient(1, d)
		return d
	}
	if n.Pending() {
		t.Fatal("a new node has outputs")
	}
	d1 := give(1)
	if !n.Pending() {
		t.Fatal("a delivery is not pending")
	}
	n.Recycle(n.Ready())
	d2 := give(2)
	if d2 == d1 || d1.Pub.Seq != 1 {
		t.Fatal("Recycle reused a Deliver")
	}
	r0 := n.Ready()
	n.RecycleDelivers(&r0)
	d3 := give(3)
	if d3 != d2 {
		t.Fatal("RecycleDelivers did not reuse the Deliver")
	}
	r := n.Ready()
	d4 := give(4) // after the Ready: still to be handed out
	n.RecycleDelivers(&r)
	if d5 := give(5); d5 == d3 || d5 == d4 || d4.Pub.Seq != 4 {
		t.Fatal("RecycleDelivers reused a Deliver not handed back")
	}
	for i := range 1000 { // chunks grow, bounded
		give(uint64(6 + i))
	}
	if len(n.delivBuf) > maxDeliverChunk {
		t.Fatalf("chunk of %d", len(n.delivBuf))
	}
}
