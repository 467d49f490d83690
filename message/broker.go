package message

import "github.com/deltapub/deltapub/matching"

// Broker protocol messages (types 64–127): what brokers say to each other
// on overlay links (tree links and bypass links). They are produced and
// consumed only by the protocol core (package overlay); see
// docs/protocol.md for what each one means and when it is sent.
//
// ONLY APPEND to this list; never renumber or reuse a number. A peer that
// receives a type it does not know ignores it.
const (
	TypeHeartbeat Type = 64 + iota
	TypeJoinRequest
	TypeJoinReply
	TypeTopoChange
	TypeTopoAck
	TypeJoinConfirm
	TypeSubFlood
	TypeSubConfirm
	TypePub
	TypeDAck
	TypeStateRequest
	TypeStateReply
	TypeRoutable
	TypeLeaveRequest
	TypeGapFlood
	TypePart
	TypeReplicaPub // the replica-based baseline (replicas/, message/replica.go)
	TypeCatchup    // durable subscriptions (durable.go)
	// append new broker protocol types here (up to 127)
)

// MapNode is one broker of a topology map: its id, address, incarnation,
// and its parent in the overlay tree (empty for the root). The tree edges
// of a map are exactly the (ID, Parent) pairs.
type MapNode struct {
	ID     BrokerID `msgpack:"i"`
	Addr   string   `msgpack:"a"`
	Epoch  uint64   `msgpack:"e"`
	Parent BrokerID `msgpack:"p,omitempty"`
}

// SubState is one subscription routing entry as transferred between
// brokers (join state transfer, recovery). From is already recomputed for
// the receiver (PROTOCOL §3).
type SubState struct {
	Sub    SubID           `msgpack:"s"`
	Filter matching.Filter `msgpack:"f"`
	From   BrokerID        `msgpack:"o"`
	// Durable (a durable subscription): the position its flood carried,
	// or its edge's current one; a restarted publisher's edge that learns
	// the entry this way answers it with a Catchup. Older brokers ignore
	// it.
	Durable *DurableFlood `msgpack:"d,omitempty"`
}

// Stamp is one entry of a publication's stamp vector: broker B, in its
// incarnation E, queued the publication under its local sequence number S.
type Stamp struct {
	B BrokerID `msgpack:"b"`
	E uint64   `msgpack:"e"`
	S uint64   `msgpack:"s"`
}

// DAckEntry is one report of a DACK: broker Reporter (incarnation RE) has
// received every publication routed to it that About (incarnation AE)
// stamped up to Arrived, and has made safe (discarded) every one of them
// stamped up to Discarded.
type DAckEntry struct {
	Reporter  BrokerID `msgpack:"r"`
	RE        uint64   `msgpack:"re"`
	About     BrokerID `msgpack:"a"`
	AE        uint64   `msgpack:"ae"`
	Arrived   uint64   `msgpack:"v"`
	Discarded uint64   `msgpack:"d"`
}

// Heartbeat proves liveness on a link that carried nothing else for a
// heartbeat interval. Epoch is the sender's incarnation.
type Heartbeat struct {
	Epoch uint64 `msgpack:"e"`
	// Joined is false while the sender is joining or recovering: it must
	// not be routed through yet.
	Joined bool `msgpack:"j,omitempty"`
	// Suspects lists the sender's tree neighbours it currently suspects.
	// A receiver that has no link to one of them takes the hint (the
	// sender is adjacent to it, so it knows best): a bypass past several
	// failed brokers then waits for one failure timeout, not for one dial
	// timeout per failed broker.
	Suspects []BrokerID `msgpack:"s,omitempty"`
	// Removed tells the receiver that the sender removed it from the tree
	// as gone (suspected for gone_after) although it is alive: its
	// incarnation is dead to the overlay, and it must rejoin as a new one
	// (docs/protocol.md §6, "removed while alive"). Sent only on a
	// heartbeat answering the removed broker's own, at most once per
	// failure timeout.
	Removed bool `msgpack:"x,omitempty"`
}

// JoinRequest asks a joinpoint to admit Node (or, with Rejoin, to readmit a
// restarted member at its old place under a new epoch).
type JoinRequest struct {
	Node   MapNode `msgpack:"n"`
	Rejoin bool    `msgpack:"r,omitempty"`
}

// JoinReply is the joinpoint's state transfer: its topology map (Node's
// place included) and the subscriptions, with From recomputed for the
// joiner. Err non-empty refuses the join (the joiner tries the next
// joinpoint).
type JoinReply struct {
	Err    string     `msgpack:"x,omitempty"`
	Rejoin bool       `msgpack:"r,omitempty"` // the joiner was known: it rejoins at its old place (recovery)
	Parent BrokerID   `msgpack:"p"`
	Map    []MapNode  `msgpack:"m"`
	Subs   []SubState `msgpack:"s"`
	// More > 0: Subs is only the first part of the state, the rest follows
	// in More Part messages on the same link (docs/protocol.md, "Large
	// state transfers"); the receiver acts on none of it until the last
	// part arrived. Zero (omitted) for a state that fits in one frame, so
	// such a reply is byte-identical to an older broker's.
	More int `msgpack:"k,omitempty"`
}

// TopoChange is a topology update flooded along the tree to the brokers
// within Hops of its origin: nodes added or updated (Add) and nodes
// removed (Remove). Every receiver answers a TopoAck once the brokers it
// forwarded to have answered (flood with echo).
type TopoChange struct {
	Origin BrokerID   `msgpack:"o"`
	Seq    uint64     `msgpack:"q"`
	Hops   int        `msgpack:"h"`
	Add    []MapNode  `msgpack:"a,omitempty"`
	Remove []BrokerID `msgpack:"r,omitempty"`
	// Leaver is set by a broker leaving gracefully (docs/protocol.md §3):
	// Remove is [Leaver], Reparent its neighbours' new tree edges, Add the
	// leaver's map (the brokers whose distance shrank learn the ones now
	// within δ+1 hops), and Via the leaver's routes (the brokers routing
	// through the leaver push their from-pointers out to δ+1 hops along
	// them). Older brokers ignore these fields.
	Leaver   BrokerID  `msgpack:"l,omitempty"`
	Reparent []MapNode `msgpack:"p,omitempty"`
	Via      []SubsVia `msgpack:"v,omitempty"`
	// More > 0: Via is only the first part of the leaver's routes, the
	// rest follows in More Part messages on the same link; the change is
	// applied (and forwarded) only once every part arrived, so that a
	// repair is applied atomically with all its routes. Omitted when the
	// change fits in one frame.
	More int `msgpack:"k,omitempty"`
	// Logs: a graceful leaver's logged sources with their last seq (and
	// those handed to it by earlier leavers): every broker that applies the
	// repair keeps them and answers durable floods for them with the range
	// the leaver took with it (docs/durable.md "A leaving PHB").
	Logs []SourceSeq `msgpack:"g,omitempty"`
}

// SubsVia lists subscriptions that a leaving broker routes along Path:
// its tree path toward their from-pointer, its own neighbour first and the
// from-pointer last.
type SubsVia struct {
	Path []BrokerID `msgpack:"p"`
	Subs []SubID    `msgpack:"s"`
}

// TopoAck confirms a TopoChange back toward its origin.
type TopoAck struct {
	Origin BrokerID `msgpack:"o"`
	Seq    uint64   `msgpack:"q"`
}

// JoinConfirm tells a joiner that its join reached every broker within δ+1
// hops: it is a full member.
type JoinConfirm struct {
	Origin BrokerID `msgpack:"o"`
}

// SubFlood propagates a subscription (or, with Unsub, its withdrawal) over
// the tree. From is the from-pointer for the receiver (PROTOCOL §3).
type SubFlood struct {
	Sub    SubID           `msgpack:"s"`
	Filter matching.Filter `msgpack:"f"`
	From   BrokerID        `msgpack:"o"`
	Unsub  bool            `msgpack:"u,omitempty"`
	// Mark (with Unsub) is the first phase of a client's unsubscription:
	// the entry is marked withdrawing but still routed, and the flood is
	// confirmed back to the edge; only then is the removal (Unsub without
	// Mark) flooded. See docs/protocol.md.
	Mark bool `msgpack:"m,omitempty"`
	// Durable (a durable subscription's flood): every publisher's edge
	// it reaches answers with a Catchup toward the subscriber's edge.
	// Older brokers ignore it.
	Durable *DurableFlood `msgpack:"d,omitempty"`
}

// SubConfirm travels back toward the subscriber's edge once every broker
// behind the sender has the subscription (or its withdrawal).
type SubConfirm struct {
	Sub   SubID `msgpack:"s"`
	Unsub bool  `msgpack:"u,omitempty"`
	Mark  bool  `msgpack:"m,omitempty"`
	// Round says which flood of a durable subscription it answers:
	// RoundFirst or RoundAgain (DurableFlood.Again). 0: a plain
	// subscription's flood, or an older broker's answer, which answers
	// whichever flood is pending.
	Round uint8 `msgpack:"r,omitempty"`
}

// Rounds of a durable subscription's flood (SubConfirm.Round).
const (
	RoundFirst uint8 = 1
	RoundAgain uint8 = 2
)

// FloodRound is the round of a flood with durable part df (0: plain).
func FloodRound(df *DurableFlood) uint8 {
	switch {
	case df == nil:
		return 0
	case df.Again:
		return RoundAgain
	}
	return RoundFirst
}

// Pub is a publication in flight between brokers. Stamps holds the stamps
// of the last δ+1 brokers that queued it, the most recent first.
type Pub struct {
	ID      PubID           `msgpack:"i"`
	Attrs   []matching.Attr `msgpack:"a"`
	Payload []byte          `msgpack:"b,omitempty"`
	Time    int64           `msgpack:"t"`
	Stamps  []Stamp         `msgpack:"v"`
}

// DAck is the periodic aggregated depth acknowledgement sent on each link:
// the sender's own reports and relayed reports of brokers behind it, about
// brokers on the receiver's side.
type DAck struct {
	Entries []DAckEntry `msgpack:"d"`
}

// StateRequest asks a neighbour (or the closest live broker behind a failed
// one) for its map and routing state: sent by a restarted broker that
// rejoins under a new epoch.
type StateRequest struct {
	Node MapNode `msgpack:"n"`
	// Resync: the sender is a joined member re-learning the subscriptions
	// of one side after a partition beyond δ healed (it is not
	// recovering: keep routing through it).
	Resync bool `msgpack:"r,omitempty"`
}

// StateReply answers a StateRequest: the sender's map and the
// subscriptions that lie on its side, From recomputed for the requester.
type StateReply struct {
	Map  []MapNode  `msgpack:"m"`
	Subs []SubState `msgpack:"s"`
	// NotMember: the sender is itself joining (a restarted broker that has
	// not found a joined joinpoint yet) and has no state to give; ask the
	// brokers behind it.
	NotMember bool `msgpack:"n,omitempty"`
	// Joinpoints (with NotMember): the brokers the sender was told to
	// rejoin through — its former tree neighbours — so that the requester
	// can ask those behind it directly.
	Joinpoints []MapNode `msgpack:"j,omitempty"`
	// More: as JoinReply.More (Part messages completing Subs follow).
	More int `msgpack:"k,omitempty"`
}

// Routable tells the peers of a restarted broker that its recovery is
// complete: they may stop bypassing it.
type Routable struct {
	Epoch uint64 `msgpack:"e"`
}

// LeaveRequest announces a graceful leave to a neighbour.
type LeaveRequest struct {
	Node MapNode `msgpack:"n"`
	// Drain: the sender is leaving gracefully and must no longer be routed
	// through; the receiver switches its routes away from it (retransmitting
	// by the switch rule) and answers with Ack (docs/protocol.md §3).
	// Without Drain it is the old leaf-only leave: the receiver removes the
	// sender at once.
	Drain bool `msgpack:"d,omitempty"`
	Ack   bool `msgpack:"k,omitempty"`
	// Logs: as TopoChange.Logs, given to the neighbours when the leave
	// starts (publications are refused from then on: the last seqs are
	// final).
	Logs []SourceSeq `msgpack:"g,omitempty"`
}

// GapFlood carries a loss notice beyond δ (PROTOCOL §8) from the broker
// that detected the hole (Origin, its Seq-th notice) over the tree away
// from the hole; every broker reached gives each of its local
// subscriptions a message.Gap per range.
type GapFlood struct {
	Origin BrokerID   `msgpack:"g"`
	Seq    uint64     `msgpack:"q"`
	Ranges []GapRange `msgpack:"n"`
	Reason string     `msgpack:"r,omitempty"`
}

// GapRange is one range of a GapFlood: publications of Source with
// sequence numbers in [From, To] (To = 0: open-ended) may have been lost.
// An empty Source.Publisher means every source.
type GapRange struct {
	Source Source `msgpack:"o"`
	From   uint64 `msgpack:"f"`
	To     uint64 `msgpack:"t"`
}

// Part continues the message sent just before it on the same link: a
// JoinReply, StateReply or TopoChange whose More announced it (a state too
// large for one frame, docs/protocol.md "Large state transfers"). N counts
// the parts from 1 to More; Subs continues the head's Subs, Via its Via.
// Older brokers ignore it (and act on the head's first part only).
type Part struct {
	N    int        `msgpack:"n"`
	Subs []SubState `msgpack:"s,omitempty"`
	Via  []SubsVia  `msgpack:"v,omitempty"`
}

func (*Heartbeat) Type() Type    { return TypeHeartbeat }
func (*JoinRequest) Type() Type  { return TypeJoinRequest }
func (*JoinReply) Type() Type    { return TypeJoinReply }
func (*TopoChange) Type() Type   { return TypeTopoChange }
func (*TopoAck) Type() Type      { return TypeTopoAck }
func (*JoinConfirm) Type() Type  { return TypeJoinConfirm }
func (*SubFlood) Type() Type     { return TypeSubFlood }
func (*SubConfirm) Type() Type   { return TypeSubConfirm }
func (*Pub) Type() Type          { return TypePub }
func (*DAck) Type() Type         { return TypeDAck }
func (*StateRequest) Type() Type { return TypeStateRequest }
func (*StateReply) Type() Type   { return TypeStateReply }
func (*Routable) Type() Type     { return TypeRoutable }
func (*LeaveRequest) Type() Type { return TypeLeaveRequest }
func (*GapFlood) Type() Type     { return TypeGapFlood }
func (*Part) Type() Type         { return TypePart }

func init() {
	Register(TypeHeartbeat, "Heartbeat", func() Message { return new(Heartbeat) })
	Register(TypeJoinRequest, "JoinRequest", func() Message { return new(JoinRequest) })
	Register(TypeJoinReply, "JoinReply", func() Message { return new(JoinReply) })
	Register(TypeTopoChange, "TopoChange", func() Message { return new(TopoChange) })
	Register(TypeTopoAck, "TopoAck", func() Message { return new(TopoAck) })
	Register(TypeJoinConfirm, "JoinConfirm", func() Message { return new(JoinConfirm) })
	Register(TypeSubFlood, "SubFlood", func() Message { return new(SubFlood) })
	Register(TypeSubConfirm, "SubConfirm", func() Message { return new(SubConfirm) })
	Register(TypePub, "Pub", func() Message { return new(Pub) })
	Register(TypeDAck, "DAck", func() Message { return new(DAck) })
	Register(TypeStateRequest, "StateRequest", func() Message { return new(StateRequest) })
	Register(TypeStateReply, "StateReply", func() Message { return new(StateReply) })
	Register(TypeRoutable, "Routable", func() Message { return new(Routable) })
	Register(TypeLeaveRequest, "LeaveRequest", func() Message { return new(LeaveRequest) })
	Register(TypeGapFlood, "GapFlood", func() Message { return new(GapFlood) })
	Register(TypePart, "Part", func() Message { return new(Part) })
}
