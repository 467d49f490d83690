package message

import "github.com/deltapub/deltapub/matching"

// ReplicaPub is a publication in flight between the replicas of the
// replica-based baseline (package replicas, docs/baseline.md): sent by a
// replica to every replica of the next virtual node. Prev is the sequence
// number of the previous publication of the same source that the sender
// sent to that virtual node (or the first one it knows of, after a
// restart): the sequence numbers strictly between Prev and ID.Seq are
// known not to concern the receiver (the "silence" of Gryphon's knowledge
// streams), so a receiver delivers and forwards in per-source order
// without waiting for what will never come. The δ overlay never sends it;
// an older broker ignores it as an unknown type.
type ReplicaPub struct {
	ID      PubID           `msgpack:"i"`
	Attrs   []matching.Attr `msgpack:"a"`
	Payload []byte          `msgpack:"b,omitempty"`
	Time    int64           `msgpack:"t"`
	Prev    uint64          `msgpack:"p"`
}

func (*ReplicaPub) Type() Type { return TypeReplicaPub }

// IsPublication tells publication traffic (Pub, ReplicaPub) from control
// traffic (heartbeats, DACKs, joins, subscriptions, confirmations).
func IsPublication(t Type) bool { return t == TypePub || t == TypeReplicaPub }

func init() {
	Register(TypeReplicaPub, "ReplicaPub", func() Message { return new(ReplicaPub) })
}
