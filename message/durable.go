package message

import "fmt"

// Durable subscriptions (docs/durable.md, docs/protocol.md §"Durable
// subscriptions").

// SourceSeq is a sequence number of one source.
type SourceSeq struct {
	Source Source `msgpack:"o"`
	Seq    uint64 `msgpack:"q"`
}

// DurableFlood rides on the SubFlood of a durable subscription: From is,
// per source, the seq after which the subscriber still has to consume (its
// checkpoint token); a source not listed is to be consumed from its start,
// unless Fresh (a new subscription: nothing before now, or with Window,
// nothing logged at the source's edge more than Window milliseconds
// before the flood reached it).
//
// Again marks the second flood of a resumed subscription, sent by its edge
// once the first was confirmed (every broker on every path has the entry
// then): every broker floods it on although it knows the entry, and every
// publisher's edge answers it again, so the catch-up meets the live stream
// at a Last taken after the whole path was installed. Older brokers
// ignore it: they answer it at once as a known subscription.
type DurableFlood struct {
	Name   string      `msgpack:"n"`
	From   []SourceSeq `msgpack:"f,omitempty"` // sorted by source
	Fresh  bool        `msgpack:"x,omitempty"`
	Again  bool        `msgpack:"g,omitempty"`
	Window uint64      `msgpack:"w,omitempty"`
}

// Catchup is a publisher's edge's answer to a durable subscription's
// flood, sent back along the flood's path to the subscriber's edge, for
// one of its sources: Pubs are the retained publications of Source after
// the subscriber's From that match (in seq order, without stamps), Last is
// the source's last seq at the moment the subscription was installed there
// (every later one is routed to the subscriber as usual), First the first
// seq still retained (Last+1 when none is), From the seq after which the
// answer is owed (the flood's From for the source; for a source it did
// not name, where a Fresh subscription starts: 0 when that is its start or
// not known). More > 0: more Catchup messages of the same source follow
// (the answer did not fit one frame).
type Catchup struct {
	Sub    SubID  `msgpack:"s"`
	Source Source `msgpack:"o"`
	Pubs   []Pub  `msgpack:"p,omitempty"`
	Last   uint64 `msgpack:"l"`
	First  uint64 `msgpack:"a"`
	From   uint64 `msgpack:"fr,omitempty"`
	More   int    `msgpack:"k,omitempty"`
}

// Silence tells a durable subscription that nothing of each listed source
// up to Seq is still to come (no match, or consumed): the client advances
// its token's horizons.
type Silence struct {
	Sub     SubID       `msgpack:"s"`
	Sources []SourceSeq `msgpack:"o"`
}

// DurableAck is a durable subscriber's acknowledgement: its checkpoint
// token (package checkpoint) after what it consumed.
type DurableAck struct {
	Sub   SubID  `msgpack:"s"`
	Token []byte `msgpack:"k"`
}

func (*Catchup) Type() Type    { return TypeCatchup }
func (*Silence) Type() Type    { return TypeSilence }
func (*DurableAck) Type() Type { return TypeDurableAck }

func init() {
	Register(TypeCatchup, "Catchup", func() Message { return new(Catchup) })
	Register(TypeSilence, "Silence", func() Message { return new(Silence) })
	Register(TypeDurableAck, "DurableAck", func() Message { return new(DurableAck) })
}

// String prints m as %+v printed it before the durable fields, which are
// shown only when set: traces of plain subscriptions stay as they were.
func (m *Subscribe) String() string {
	s := fmt.Sprintf("&{Req:%d Filter:%v", m.Req, m.Filter)
	if m.Durable != "" || len(m.Token) > 0 {
		s += fmt.Sprintf(" Durable:%s Token:%d bytes", m.Durable, len(m.Token))
	}
	if m.Recover != nil {
		s += fmt.Sprintf(" Recover:%v", m.Recover.From)
	}
	return s + "}"
}

// String: as Subscribe's.
func (m *SubFlood) String() string {
	s := fmt.Sprintf("&{Sub:%v Filter:%v From:%v Unsub:%v Mark:%v", m.Sub, m.Filter, m.From, m.Unsub, m.Mark)
	if m.Durable != nil {
		s += fmt.Sprintf(" Durable:%+v", *m.Durable)
	}
	return s + "}"
}
