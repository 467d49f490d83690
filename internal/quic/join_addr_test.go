package quic

import (
	"net"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// freeUDPAddr returns a loopback UDP address that was free a moment ago.
func freeUDPAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	_ = c.Close()
	return addr
}

// A restarted broker joins through an address (no peer ID yet) while the
// broker at that address has already dialled it (probing for the restarted
// peer). The join dial must yield that link, not fail as a duplicate:
// otherwise the restarted broker can never rejoin through that joinpoint.
func TestDialByAddressUsesTheLinkThePeerDialled(t *testing.T) {
	addrA, addrB := freeUDPAddr(t), freeUDPAddr(t)
	a := start(t, "B1", "s", func(c *Config) { c.Listen, c.Addr = addrA, addrA })
	b := start(t, "B3", "s", func(c *Config) { c.Listen, c.Addr = addrB, addrB; c.Epoch = 2 })
	la, err := a.ep.Dial(ctx10(t), "B3", addrB) // B1 < B3: B1's dial wins ties
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the link on B3's side", func() bool { return b.ep.Link("B1") != nil })
	lb, err := b.ep.Dial(ctx10(t), "", addrA)
	if err != nil {
		t.Fatalf("join dial by address: %v", err)
	}
	if lb != b.ep.Link("B1") || lb.Peer() != "B1" {
		t.Fatalf("join dial returned %v, want the registered link to B1", lb)
	}
	if err := lb.Send(&message.PubAck{Seq: 7}); err != nil {
		t.Fatal(err)
	}
	checkSeqs(t, recvN(t, a.rec.msgs, 1), 7)
	if ua, da := a.rec.counts(); ua != 1 || da != 0 || la != a.ep.Link("B3") {
		t.Fatalf("B1 saw %d ups and %d downs: a second link was made", ua, da)
	}
}
