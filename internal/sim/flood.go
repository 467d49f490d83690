package sim

import (
	"sort"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// FloodNode is a reference node with no fault tolerance at all: every
// publication is flooded over the links of the tree, every broker delivers
// to its local matching subscribers, and subscriptions are confirmed at
// once (flooding reaches every broker anyway). Without faults it is
// trivially correct, and with a crash it loses publications: it exists to
// test the simulator and its checkers independently of the real core. It
// cannot leave (Leave does nothing).
type FloodNode struct {
	nodeBase
	cfg        overlay.Config
	joined     bool
	joinpoints []overlay.Peer
	dialled    map[message.BrokerID]bool // joinpoints dialled; the first to come up is the parent
	parent     message.BrokerID
	links      map[message.BrokerID]bool
	hellos     map[message.ClientID]message.ClientHello
	nextSeq    map[message.ClientID]uint64
	subs       map[message.ClientID]floodSub
	subOrder   []message.ClientID // subscription order: deterministic deliveries
	subN       uint64
}

type floodSub struct {
	id message.SubID
	f  matching.Filter
}

// floodPub is FloodNode's only peer message. Its type number is outside
// the registry on purpose: it never goes on a wire.
type floodPub struct {
	ID    message.PubID
	Attrs []matching.Attr
	Time  int64
}

func (*floodPub) Type() message.Type { return 250 }

// NewFloodNode is a NodeFactory for FloodNode.
func NewFloodNode(cfg overlay.Config) (Node, error) {
	return &FloodNode{cfg: cfg, links: map[message.BrokerID]bool{}, hellos: map[message.ClientID]message.ClientHello{},
		nextSeq: map[message.ClientID]uint64{}, subs: map[message.ClientID]floodSub{}}, nil
}

func (n *FloodNode) Bootstrap() {
	n.joined = true
	n.out.Notices = append(n.out.Notices, overlay.Notice{Kind: overlay.NoticeJoined})
}

func (n *FloodNode) Join(jps []overlay.Peer) {
	n.joinpoints = jps
	if len(jps) > 0 {
		n.dial(jps[0])
	}
}

func (n *FloodNode) Tick() {}

func (n *FloodNode) dial(p overlay.Peer) {
	if n.dialled == nil {
		n.dialled = map[message.BrokerID]bool{}
	}
	n.dialled[p.ID] = true
	n.out.Dials = append(n.out.Dials, p)
}

func (n *FloodNode) LinkUp(p message.BrokerID) {
	if n.joined && n.dialled[p] && p != n.parent {
		// A joinpoint that answered after the next one was tried (a slow
		// handshake): a second link up the tree would make a cycle.
		n.out.Closes = append(n.out.Closes, p)
		return
	}
	n.links[p] = true
	if !n.joined {
		n.joined = true
		if n.dialled[p] {
			n.parent = p
		}
		n.out.Notices = append(n.out.Notices, overlay.Notice{Kind: overlay.NoticeJoined, Peer: p})
	}
}

func (n *FloodNode) LinkDown(p message.BrokerID) { delete(n.links, p) }

func (n *FloodNode) DialFailed(p message.BrokerID) {
	if n.joined {
		return
	}
	for i, jp := range n.joinpoints {
		if jp.ID == p && i+1 < len(n.joinpoints) {
			n.dial(n.joinpoints[i+1])
			return
		}
	}
}

func (n *FloodNode) Step(from message.BrokerID, m message.Message) {
	if p, ok := m.(*floodPub); ok {
		n.forward(from, p)
	}
}

func (n *FloodNode) forward(from message.BrokerID, p *floodPub) {
	pub := matching.Publication{Attrs: p.Attrs}
	for _, c := range n.subOrder {
		s, ok := n.subs[c]
		if !ok {
			continue
		}
		if s.f.Match(&pub) {
			n.out.ToClients = append(n.out.ToClients, overlay.ClientEnvelope{To: c, Msg: &message.Deliver{Sub: s.id, Pub: p.ID, Attrs: p.Attrs, Time: p.Time}})
		}
	}
	peers := make([]message.BrokerID, 0, len(n.links))
	for l := range n.links {
		if l != from {
			peers = append(peers, l)
		}
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i] < peers[j] })
	for _, l := range peers {
		n.out.Messages = append(n.out.Messages, overlay.Envelope{To: l, Msg: p})
	}
}

func (n *FloodNode) ClientOpen(c message.ClientID) {}

func (n *FloodNode) ClientClose(c message.ClientID) { delete(n.subs, c) }

func (n *FloodNode) Client(c message.ClientID, m message.Message) {
	switch m := m.(type) {
	case *message.ClientHello:
		n.hellos[c] = *m
		n.nextSeq[c] = 1
	case *message.Publish:
		h, ok := n.hellos[c]
		if !ok {
			n.out.ToClients = append(n.out.ToClients, overlay.ClientEnvelope{To: c, Msg: &message.PubAck{Seq: m.Seq, Err: "no hello"}})
			return
		}
		if m.Seq == n.nextSeq[c] {
			n.nextSeq[c]++
			n.forward("", &floodPub{ID: message.PubID{Publisher: h.Publisher, Epoch: h.Epoch, Seq: m.Seq}, Attrs: m.Attrs, Time: m.Time})
		}
		n.out.ToClients = append(n.out.ToClients, overlay.ClientEnvelope{To: c, Msg: &message.PubAck{Seq: m.Seq}})
	case *message.Subscribe:
		n.subN++
		id := message.SubID{Edge: n.cfg.ID, Epoch: n.cfg.Epoch, N: n.subN}
		if _, dup := n.subs[c]; !dup {
			n.subOrder = append(n.subOrder, c)
		}
		n.subs[c] = floodSub{id: id, f: m.Filter}
		n.out.ToClients = append(n.out.ToClients, overlay.ClientEnvelope{To: c, Msg: &message.SubAck{Req: m.Req, Sub: id}},
			overlay.ClientEnvelope{To: c, Msg: &message.SubAck{Req: m.Req, Sub: id, Confirmed: true}})
	case *message.Unsubscribe:
		// Deliveries continue: the flood node cannot tell which
		// publications in flight were published before the Unsubscribe
		// (the oracle guarantees those), and later ones are harmless.
		n.out.ToClients = append(n.out.ToClients, overlay.ClientEnvelope{To: c, Msg: &message.UnsubAck{Sub: m.Sub}})
	}
}

func (n *FloodNode) Joined() bool { return n.joined }

func (n *FloodNode) Phase() overlay.Phase { return joinedPhase(n.joined) }
