package sim

import (
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// overlayNode adapts the protocol core, overlay.Node, to the simulator.
type overlayNode struct{ n *overlay.Node }

// NewOverlayNode is the NodeFactory of the real protocol core.
func NewOverlayNode(cfg NodeConfig) (Node, error) {
	c := overlay.DefaultConfig()
	c.ID, c.Addr, c.Epoch, c.Delta, c.Seed = cfg.ID, cfg.Addr, cfg.Epoch, cfg.Delta, cfg.Seed
	c.HeartbeatTicks, c.FailureTicks, c.DACKTicks = cfg.HeartbeatTicks, cfg.FailureTicks, cfg.DACKTicks
	c.GoneAfterTicks, c.MaxQueue = cfg.GoneAfterTicks, cfg.MaxQueue
	n, err := overlay.NewNode(c)
	if err != nil {
		return nil, err
	}
	return overlayNode{n}, nil
}

// DefaultFactory is the node the scenario files and the fuzzer run.
var DefaultFactory NodeFactory = NewOverlayNode

func (o overlayNode) Bootstrap() { o.n.Bootstrap() }
func (o overlayNode) Join(jps []Peer) {
	ps := make([]overlay.Peer, len(jps))
	for i, p := range jps {
		ps[i] = overlay.Peer{ID: p.ID, Addr: p.Addr}
	}
	o.n.Join(ps)
}
func (o overlayNode) Tick()                                         { o.n.Tick() }
func (o overlayNode) Step(from message.BrokerID, m message.Message) { o.n.Step(from, m) }
func (o overlayNode) LinkUp(p message.BrokerID)                     { o.n.LinkUp(p) }
func (o overlayNode) LinkDown(p message.BrokerID)                   { o.n.LinkDown(p) }
func (o overlayNode) DialFailed(p message.BrokerID)                 { o.n.DialFailed(p) }
func (o overlayNode) ClientOpen(c message.ClientID)                 { o.n.ClientOpen(c) }
func (o overlayNode) ClientClose(c message.ClientID)                { o.n.ClientClose(c) }
func (o overlayNode) Client(c message.ClientID, m message.Message)  { o.n.Client(c, m) }

func (o overlayNode) Ready() Ready {
	r := o.n.Ready()
	out := Ready{Closes: r.Closes}
	if len(r.Dials) > 0 {
		out.Dials = make([]Peer, len(r.Dials))
		for i, p := range r.Dials {
			out.Dials[i] = Peer{ID: p.ID, Addr: p.Addr}
		}
	}
	if len(r.Messages) > 0 {
		out.Messages = make([]Envelope, len(r.Messages))
		for i, m := range r.Messages {
			out.Messages[i] = Envelope{To: m.To, Msg: m.Msg}
		}
	}
	if len(r.ToClients) > 0 {
		out.ToClients = make([]ClientEnvelope, len(r.ToClients))
		for i, m := range r.ToClients {
			out.ToClients[i] = ClientEnvelope{To: m.To, Msg: m.Msg}
		}
	}
	if len(r.Notices) > 0 {
		out.Notices = make([]Notice, len(r.Notices))
		for i, n := range r.Notices {
			out.Notices[i] = Notice{Kind: string(n.Kind), Peer: n.Peer, Detail: n.Detail}
		}
	}
	return out
}

// Status uses the core's cheap accessors: a full overlay.Status snapshot
// copies the routing table, too costly to sample often in large runs.
func (o overlayNode) Status() NodeStatus {
	return NodeStatus{Joined: o.n.Joined(), QueueLen: o.n.QueueLen()}
}
