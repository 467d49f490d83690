package sim

import (
	"github.com/deltapub/deltapub/message"
)

// Node is what the simulator drives: the input/output surface of the
// protocol core (overlay.Node, see docs/simulator.md), restated here with
// simulator-local output types so that the simulator and its checkers can be
// exercised with a trivial reference node as well as with the real core.
// Every method is called from the simulator's single loop; none may block.
type Node interface {
	Bootstrap()
	Join(joinpoints []Peer)
	Tick()
	Step(from message.BrokerID, m message.Message)
	LinkUp(peer message.BrokerID)
	LinkDown(peer message.BrokerID)
	DialFailed(peer message.BrokerID)
	ClientOpen(c message.ClientID)
	ClientClose(c message.ClientID)
	Client(c message.ClientID, m message.Message)
	// Ready returns the outputs produced since the last call and clears them.
	// Its slices may be reused by the next call: the simulator acts on them
	// before it calls Ready again.
	Ready() Ready
	// Status is a cheap read-only snapshot of what the checkers need.
	Status() NodeStatus
}

// Peer names a broker and its address.
type Peer struct {
	ID   message.BrokerID
	Addr string
}

// Envelope is a message to a peer broker, sent on the up link to To.
type Envelope struct {
	To  message.BrokerID
	Msg message.Message
}

// ClientEnvelope is a message to a local client session.
type ClientEnvelope struct {
	To  message.ClientID
	Msg message.Message
}

// Notice is an event the core reports for logs, metrics and checkers
// (suspected, bypass-up, joined, gone, ...). Kind is the core's name for it.
type Notice struct {
	Kind   string
	Peer   message.BrokerID
	Detail string
}

// Ready is everything a node asks its environment to do.
type Ready struct {
	Dials     []Peer
	Closes    []message.BrokerID
	Messages  []Envelope
	ToClients []ClientEnvelope
	Notices   []Notice
}

// NodeStatus is the part of a node's state the checkers read.
type NodeStatus struct {
	Joined   bool
	QueueLen int
	Parent   message.BrokerID
}

// NodeConfig is what the simulator knows about a broker when it creates its
// node: identity, incarnation and the overlay-wide protocol parameters.
type NodeConfig struct {
	ID             message.BrokerID
	Addr           string
	Epoch          uint64
	Delta          int
	HeartbeatTicks int
	FailureTicks   int
	DACKTicks      int
	GoneAfterTicks int
	MaxQueue       int
	Seed           int64
}

// NodeFactory creates a fresh node (a new broker, or a restarted one with a
// larger epoch and no state).
type NodeFactory func(cfg NodeConfig) (Node, error)
