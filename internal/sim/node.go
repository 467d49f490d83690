package sim

import (
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// Node is what the simulator drives: the part of the protocol core's
// method set (*overlay.Node, with overlay's types) that an environment
// calls, so that the simulator and its checkers can run a reference node
// (FloodNode), test nodes and wrappers (the testbed's message counter) as
// well as the real core. A wrapper embeds the Node it wraps and overrides
// what it changes. Every method is called from the simulator's single
// loop; none may block.
type Node interface {
	overlay.Core // inputs, outputs, Joined and Place (a restart's rejoin)

	// Pending reports whether Ready has anything to return.
	Pending() bool

	// What the checkers and the fuzzer read: cheap accessors, called
	// often.
	Leaving() bool
	// Phase is where the node stands in its membership state machine
	// (overlay.Phase); the simulator checks every change against
	// overlay.LegalPhaseChange.
	Phase() overlay.Phase
	QueueLen() int
	// Parent is the tree parent it joined under ("": none, or not known).
	Parent() message.BrokerID
}

// The protocol core is a Node as it is.
var _ Node = (*overlay.Node)(nil)

// NodeFactory creates a fresh node (a new broker, or a restarted one with a
// larger epoch and no state) from the core's configuration: the
// simulator's protocol parameters (Config.Core) with the broker's ID,
// address, epoch and seed.
type NodeFactory func(cfg overlay.Config) (Node, error)

// NewOverlayNode is the NodeFactory of the real protocol core: the node
// the scenario files, the fuzzer and the testbed's sim mode run.
func NewOverlayNode(cfg overlay.Config) (Node, error) {
	n, err := overlay.NewNode(cfg)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// nodeBase is the part of a Node that a node other than the core (the
// reference node, the tests' nodes) shares: it appends its outputs to out,
// has no queue, cannot leave and tells no parent.
type nodeBase struct{ out overlay.Ready }

func (b *nodeBase) Pending() bool {
	o := &b.out
	return len(o.Messages)+len(o.ToClients)+len(o.Notices)+len(o.Dials)+len(o.Closes) > 0
}

func (b *nodeBase) Ready() overlay.Ready {
	r := b.out
	b.out = overlay.Ready{}
	return r
}

func (*nodeBase) Leave()                                 {}
func (*nodeBase) Restore([]message.PubID, []message.Pub) {}
func (*nodeBase) RestoreHeld([]overlay.HeldSub)          {}
func (*nodeBase) Leaving() bool                          { return false }
func (*nodeBase) QueueLen() int                          { return 0 }
func (*nodeBase) Parent() message.BrokerID               { return "" }
func (*nodeBase) Place() []overlay.Peer                  { return nil }

// joinedPhase is the phase of a node that is either a member or not: the
// reference node and the tests' nodes.
func joinedPhase(joined bool) overlay.Phase {
	if joined {
		return overlay.PhaseJoined
	}
	return overlay.PhaseNew
}
