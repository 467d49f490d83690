package overlay

import (
	"fmt"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// TestLinkUpReroutesPassedOverHop: on real processes (a 16-broker chain,
// δ = 3), B8 crashed under the publisher's edge B9;
// B9's bypass toward B5 (the from-pointer of a subscriber at B3) passed
// over B7, whose link was not up yet, for B6, linked and heard first. When
// B7's link came up, B9 retransmitted on it at once what it routed to B7
// itself (a subscriber at B7), and the rest, routed toward B5, only at B7's
// first heartbeat. B7 forwarded the first batch toward B3 through B6, which
// took those newer publications before the older ones B9 had sent it on the
// bypass link (that link delivered late): B6 dropped the older ones as sent
// on already toward B5, and B7 dropped them too when they came after the
// newer ones (acceptOlder). Lost within δ: every publication for B3 only,
// older than the newest one for both.
//
// Here: a chain B1..B10, S4 at B3 takes everything, S1 at B7 every third
// publication; B8 crashes and B9 publishes 11..20 into its dead link; B9's
// links to B7 and B5 come up late (gated), and its link to B6 delivers late
// (slow).
func TestLinkUpReroutesPassedOverHop(t *testing.T) {
	h := newHarness(t, 3)
	var edges [][2]message.BrokerID
	for i := 2; i <= 10; i++ {
		edges = append(edges, [2]message.BrokerID{message.BrokerID(fmt.Sprint("B", i)), message.BrokerID(fmt.Sprint("B", i-1))})
	}
	h.buildTree("B1", edges)
	h.subscribe("B3", 103, classFilter("stock"))
	s1 := classFilter("stock")
	s1.Preds = append(s1.Preds, matching.Predicate{Attr: "tag", Op: matching.OpEq, Value: matching.Value{Kind: matching.KindString, Str: "x"}})
	h.subscribe("B7", 107, s1)
	h.do("B9", func(n *Node) { n.ClientOpen(9) })
	pub := func(seq uint64) {
		tag := "y"
		if seq%3 == 0 {
			tag = "x"
		}
		h.do("B9", func(n *Node) {
			n.Client(9, &message.Publish{Seq: seq, Attrs: []matching.Attr{strAttr("class", "stock"), strAttr("tag", tag), intAttr("n", int64(seq))}})
		})
	}
	for seq := uint64(1); seq <= 10; seq++ {
		pub(seq)
		h.round()
	}
	h.runUntil(200, "queues drained", h.queuesEmpty)

	h.crash("B8")
	h.gated = map[[2]message.BrokerID]bool{pair("B9", "B7"): true, pair("B9", "B5"): true}
	h.slow = map[[2]message.BrokerID]bool{{"B9", "B6"}: true}
	for seq := uint64(11); seq <= 20; seq++ {
		pub(seq) // into the dead link: queued at B9, retransmitted on the bypass
	}
	h.runUntil(100, "B9 bypassing B7 for B6 toward B5", func() bool {
		for _, n := range h.notices {
			if n.Kind == NoticeBypassUp && n.Peer == "B6" && n.Detail == "next hop toward B5" {
				return true
			}
		}
		return false
	})
	h.openGated("B9", "B7")
	h.run(3) // B7 forwards toward B3 through B6 what it got
	h.releaseSlow()
	h.run(3)
	h.openGated("B9", "B5")
	h.runUntil(400, "queues drained"+h.queueReport(), h.queuesEmpty)
	h.checkExactFIFO(103, 20)
	if got := h.deliveries(107); fmt.Sprint(got) != "[3 6 9 12 15 18]" {
		t.Fatalf("S1 at B7 got %v, want [3 6 9 12 15 18]", got)
	}
}
