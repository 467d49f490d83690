package sim

import (
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// faultyDurableNode is the core with one fault at its durable sessions'
// deliveries: the k-th Deliver to a durable session is dropped (drop) or
// sent twice. The control that shows the durable rule can fail (the
// simulator's and the testbed's tests).
type faultyDurableNode struct {
	*overlay.Node
	drop    bool
	k, seen int
	durable map[message.ClientID]bool
}

func (n *faultyDurableNode) Client(c message.ClientID, m message.Message) {
	if s, ok := m.(*message.Subscribe); ok && s.Durable != "" {
		n.durable[c] = true
	}
	n.Node.Client(c, m)
}

func (n *faultyDurableNode) Ready() overlay.Ready {
	r := n.Node.Ready()
	var out []overlay.ClientEnvelope
	for _, e := range r.ToClients {
		if _, ok := e.Msg.(*message.Deliver); ok && n.durable[e.To] {
			n.seen++
			if n.seen == n.k {
				if n.drop {
					continue
				}
				out = append(out, e)
			}
		}
		out = append(out, e)
	}
	r.ToClients = out
	return r
}

// DurableFaultFactory makes cores that drop (drop) or duplicate the k-th
// delivery to a durable session of each broker (faultyDurableNode).
func DurableFaultFactory(drop bool, k int) NodeFactory {
	return func(cfg overlay.Config) (Node, error) {
		n, err := overlay.NewNode(cfg)
		return &faultyDurableNode{Node: n, drop: drop, k: k, durable: map[message.ClientID]bool{}}, err
	}
}
