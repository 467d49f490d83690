package overlay

import "github.com/deltapub/deltapub/message"

// What flood.go and flood_fast.go still call of the route slots that the
// publication path no longer has: plain lookups, to go with those callers.

type peerSlot struct{ p *peer }

func (n *Node) slot(id message.BrokerID) peerSlot { return peerSlot{n.peers[id]} }

func (n *Node) hopSlot(r message.BrokerID) { n.hop(r) }
