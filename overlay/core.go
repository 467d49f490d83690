package overlay

import (
	"github.com/deltapub/deltapub/message"
)

// Node is the pure protocol core of one broker: inputs in, outputs
// collected until Ready. It does no I/O, reads no clock, starts no
// goroutine and is not safe for concurrent use: one goroutine owns it.
type Node struct {
	cfg Config
	out Ready
}

// NewNode validates cfg and returns a node that has not joined any overlay
// yet: call Bootstrap or Join.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Node{cfg: cfg}, nil
}

// Bootstrap makes this broker the first broker (root) of a new overlay.
func (n *Node) Bootstrap() {}

// Join joins the overlay through the first joinpoint that answers (or, for
// a restarted broker, rejoins at its old place).
func (n *Node) Join(joinpoints []Peer) {}

// Leave starts a graceful leave.
func (n *Node) Leave() {}

// Tick tells the node that one unit of time passed.
func (n *Node) Tick() {}

// Step processes a message from a peer, received on an up link.
func (n *Node) Step(from message.BrokerID, m message.Message) {}

// LinkUp reports a new link to peer.
func (n *Node) LinkUp(peer message.BrokerID) {}

// LinkDown reports that the link to peer is gone.
func (n *Node) LinkDown(peer message.BrokerID) {}

// DialFailed reports that a requested dial did not succeed.
func (n *Node) DialFailed(peer message.BrokerID) {}

// ClientOpen reports a new client session.
func (n *Node) ClientOpen(c message.ClientID) {}

// ClientClose reports the end of a client session; its subscriptions are
// withdrawn.
func (n *Node) ClientClose(c message.ClientID) {}

// Client processes a client request: ClientHello, Publish, Subscribe or
// Unsubscribe.
func (n *Node) Client(c message.ClientID, m message.Message) {}

// Status returns a read-only snapshot.
func (n *Node) Status() Status {
	return Status{ID: n.cfg.ID, Epoch: n.cfg.Epoch}
}
