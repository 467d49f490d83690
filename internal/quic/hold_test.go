package quic

import (
	"testing"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
)

// Frames queued with Hold/HoldFrame all arrive, in order, after Flush; the
// session reports the negotiated version; more than holdLimit held bytes
// reach the peer even before Flush.
func TestHoldAndFlush(t *testing.T) {
	a := start(t, "B1", "", nil)
	cc, err := DialClient(ctx10(t), a.addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := cc.Send(&message.Publish{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	recvN(t, a.rec.cmsgs, 1)
	a.rec.mu.Lock()
	s := a.rec.cups[0]
	a.rec.mu.Unlock()
	if s.Version() != wire.ProtocolVersion {
		t.Fatalf("session version %d, want %d", s.Version(), wire.ProtocolVersion)
	}
	// Past the hold limit without Flush: the writer is woken anyway.
	payload := make([]byte, 1000)
	n := holdLimit/1000 + 10
	var de wire.DeliveryEncoder
	for i := 1; i <= n; i++ {
		d := &message.Deliver{Pub: message.PubID{Publisher: "p", Epoch: 1, Seq: uint64(i)}, Payload: payload}
		de.Reset(d)
		if i%2 == 0 {
			if !s.HoldFrame(de.DeliverSetFrame([]uint64{7})) {
				t.Fatalf("HoldFrame %d refused", i)
			}
		} else if !s.Hold(&message.DeliverSet{Subs: []uint64{7}, Pub: d.Pub, Payload: payload}) {
			t.Fatalf("Hold %d refused", i)
		}
	}
	for i := 1; i <= holdLimit/1100; i++ { // written when the held bytes crossed holdLimit
		m, err := cc.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ds, ok := m.(*message.DeliverSet); !ok || ds.Pub.Seq != uint64(i) || len(ds.Payload) != 1000 {
			t.Fatalf("frame %d: %#v", i, m)
		}
	}
	s.Flush()
	for i := holdLimit/1100 + 1; i <= n; i++ {
		m, err := cc.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ds, ok := m.(*message.DeliverSet); !ok || ds.Pub.Seq != uint64(i) {
			t.Fatalf("frame %d after Flush: %#v", i, m)
		}
	}
}
