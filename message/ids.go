package message

import "fmt"

// BrokerID names a broker; unique in the overlay ("B1", "R2", ...).
type BrokerID string

// ClientID is a broker-local handle for one client session. It is
// independent of the transport the session arrives on (QUIC today,
// WebSocket next): the runtime maps it to a connection.
type ClientID uint64

// PubID is the identity of a publication, visible end to end: the publisher
// (a name chosen by the client), the publisher's epoch (a new one after the
// client loses its state), and a sequence number, consecutive per
// (publisher, epoch) starting at 1.
type PubID struct {
	Publisher string `msgpack:"p"`
	Epoch     uint64 `msgpack:"e"`
	Seq       uint64 `msgpack:"s"`
}

func (id PubID) String() string { return fmt.Sprintf("%s/%d/%d", id.Publisher, id.Epoch, id.Seq) }

// Source is the per-publisher stream a PubID belongs to; FIFO order and
// duplicate suppression are per Source.
type Source struct {
	Publisher string `msgpack:"p"`
	Epoch     uint64 `msgpack:"e"`
}

// Source returns the stream of the publication.
func (id PubID) Source() Source { return Source{id.Publisher, id.Epoch} }

// SubID is the overlay-wide identity of a subscription, given by its edge
// broker: the broker, the broker's epoch, and a counter.
type SubID struct {
	Edge  BrokerID `msgpack:"b"`
	Epoch uint64   `msgpack:"e"`
	N     uint64   `msgpack:"n"`
}

func (id SubID) String() string { return fmt.Sprintf("%s/%d/%d", id.Edge, id.Epoch, id.N) }
