package sim

import (
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// overlayNode adapts the protocol core, overlay.Node, to the simulator.
// Ready's slices are reused from one call to the next (the simulator acts
// on them before it calls Ready again, node.go): no allocation per flush.
// (A value type holding pointers: drivers may assert b.node.(overlayNode).)
type overlayNode struct {
	n   *overlay.Node
	out *Ready
}

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
	return overlayNode{n: n, out: &Ready{}}, nil
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
	out := o.out
	clear(out.Messages) // drop the references of the previous call
	clear(out.ToClients)
	out.Closes = append(out.Closes[:0], r.Closes...)
	out.Dials = out.Dials[:0]
	for _, p := range r.Dials {
		out.Dials = append(out.Dials, Peer{ID: p.ID, Addr: p.Addr})
	}
	out.Messages = out.Messages[:0]
	for _, m := range r.Messages {
		out.Messages = append(out.Messages, Envelope{To: m.To, Msg: m.Msg})
	}
	out.ToClients = out.ToClients[:0]
	for _, m := range r.ToClients {
		out.ToClients = append(out.ToClients, ClientEnvelope{To: m.To, Msg: m.Msg})
	}
	out.Notices = out.Notices[:0]
	for _, n := range r.Notices {
		out.Notices = append(out.Notices, Notice{Kind: string(n.Kind), Peer: n.Peer, Detail: n.Detail})
	}
	// Everything is copied: the core reuses its slices for the next
	// outputs instead of growing fresh ones after every event.
	o.n.Recycle(r)
	return *out
}

// Status uses the core's cheap accessors: a full overlay.Status snapshot
// copies the routing table, too costly to sample often in large runs.
func (o overlayNode) Status() NodeStatus {
	return NodeStatus{Joined: o.n.Joined(), QueueLen: o.n.QueueLen(), Parent: o.n.Parent()}
}
