package message

import (
	"fmt"

	"github.com/deltapub/deltapub/matching"
)

// Type numbers are grouped: 1–63 link and handshake (internal/wire),
// 64–127 broker protocol, 128–191 client protocol. ONLY APPEND within a group;
// never renumber or reuse a number.
const (
	TypeClientHello Type = 128 + iota
	TypePublish
	TypePubAck
	TypeSubscribe
	TypeSubAck
	TypeUnsubscribe
	TypeUnsubAck
	TypeDeliver
	TypeGap
	TypeDeliverSet // protocol version 2
	TypeSilence    // durable subscriptions (durable.go)
	TypeDurableAck
	// append new client protocol types here
)

// ClientHello opens a client session. Publisher and Epoch name the
// publishing stream of this client, so that a retry after a reconnect carries
// the same PubID and is recognised as a duplicate.
type ClientHello struct {
	Publisher string `msgpack:"p"`
	Epoch     uint64 `msgpack:"e"`
}

// Publish asks the edge broker to publish. Seq is the client's sequence
// number (consecutive from 1 per publisher epoch); Time is the publisher's
// clock in Unix nanoseconds (virtual time in the simulator), carried end to
// end so subscribers can measure delay.
type Publish struct {
	Seq     uint64          `msgpack:"q"`
	Attrs   []matching.Attr `msgpack:"a"`
	Payload []byte          `msgpack:"b,omitempty"`
	Time    int64           `msgpack:"t"`
}

// PubAck acknowledges every publication of the session up to Seq. Err is
// empty on success; "backpressure" means the broker's queue is at its bound
// and the client should retry the same Seq later; anything else is final.
type PubAck struct {
	Seq uint64 `msgpack:"q"`
	Err string `msgpack:"e,omitempty"`
}

// Subscribe asks for deliveries matching Filter. Req is chosen by the
// client to pair the answer.
type Subscribe struct {
	Req    uint64          `msgpack:"r"`
	Filter matching.Filter `msgpack:"f"`
	// Conflate, when set, asks the edge broker to deliver at most the
	// latest matching publication per value of one attribute per interval
	// (a price ticker's screen). Brokers that do not know it deliver all.
	Conflate *Conflation `msgpack:"cf,omitempty"`
	// Durable names a durable subscription (docs/durable.md); Token is its
	// checkpoint token (package checkpoint), empty for a new one. Older
	// brokers ignore both and make a plain subscription.
	Durable string `msgpack:"d,omitempty"`
	Token   []byte `msgpack:"k,omitempty"`
	// Recover (not with Durable) asks for the publications a plain
	// subscription missed while its client was away (a reconnect to
	// another broker): From is, per source, the last seq the client got
	// (docs/websocket.md, "Recovery on another broker").
	Recover *Recovery `msgpack:"rc,omitempty"`
}

// Recovery is a plain subscription's recovery request: the last seq the
// client got per source. A source not listed is taken from now on, or,
// with Since, from the first publication its edge logged in the last
// Since milliseconds (the time since the subscription was first
// confirmed, as the client measured it): a publisher that started, or
// first matched, while the client was away.
type Recovery struct {
	From  []SourceSeq `msgpack:"f,omitempty"`
	Since uint64      `msgpack:"t,omitempty"`
}

// MaxRecoverSince bounds Recovery.Since in milliseconds (30 days, the
// longest max_retain): a web client's larger since_ms is refused, the
// core takes a larger one as this.
const MaxRecoverSince = 30 * 24 * 3600 * 1000

// MaxRecoverSources bounds Recovery.From (as a checkpoint token's sources).
const MaxRecoverSources = 4096

// Conflation is a subscription's conflation: per value of attribute Key,
// only the latest publication within each IntervalMS is delivered.
type Conflation struct {
	Key        string `msgpack:"k"`
	IntervalMS uint32 `msgpack:"i"`
}

// Bounds of a Conflation.
const (
	MaxConflateKey        = 64
	MinConflateIntervalMS = 10
	MaxConflateIntervalMS = 60_000
)

// Check reports what is wrong with c, if anything.
func (c *Conflation) Check() error {
	switch {
	case c.Key == "" || len(c.Key) > MaxConflateKey:
		return fmt.Errorf("conflate: key must be an attribute name of 1 to %d bytes", MaxConflateKey)
	case c.IntervalMS < MinConflateIntervalMS || c.IntervalMS > MaxConflateIntervalMS:
		return fmt.Errorf("conflate: interval %d ms: must be within %d..%d ms", c.IntervalMS, MinConflateIntervalMS, MaxConflateIntervalMS)
	}
	return nil
}

// SubAck answers a Subscribe. Confirmed=false with an empty Err means the
// subscription is accepted and propagating (deliveries may already flow);
// Confirmed=true means every broker has it: from now on the guarantees apply.
type SubAck struct {
	Req       uint64 `msgpack:"r"`
	Sub       SubID  `msgpack:"s"`
	Confirmed bool   `msgpack:"c,omitempty"`
	Err       string `msgpack:"e,omitempty"`
	// Recovery (the confirmation of a Subscribe with Recover): Recovered
	// when every missed matching publication was delivered before this
	// answer; otherwise Missed lists the ranges no history held, and with
	// To 0 (from From on, end unknown) each stream no publisher's edge
	// answered for.
	Recovery  bool  `msgpack:"rv,omitempty"`
	Recovered bool  `msgpack:"rd,omitempty"`
	Missed    []Gap `msgpack:"m,omitempty"`
}

// Unsubscribe withdraws a subscription of this session.
type Unsubscribe struct {
	Sub SubID `msgpack:"s"`
}

// UnsubAck confirms an Unsubscribe once it has propagated.
type UnsubAck struct {
	Sub SubID  `msgpack:"s"`
	Err string `msgpack:"e,omitempty"`
}

// Deliver carries one matching publication to one subscription.
type Deliver struct {
	Sub     SubID           `msgpack:"s"`
	Pub     PubID           `msgpack:"i"`
	Attrs   []matching.Attr `msgpack:"a"`
	Payload []byte          `msgpack:"b,omitempty"`
	Time    int64           `msgpack:"t"`
}

// DeliverSet carries one publication to one or more subscriptions of the
// receiving session: the edge broker encodes the publication once and sends
// the same bytes to every local session, with only Subs differing. Subs are
// the N of the subscriptions' SubIDs; their Edge and Epoch are those of the
// session's broker (every subscription of a session has them). It is sent
// only to clients that spoke protocol version 2 or later in the handshake;
// older clients get one Deliver per subscription. The wire format is a
// compact array (internal/wire), not a map of this struct's fields.
type DeliverSet struct {
	Subs    []uint64
	Pub     PubID
	Attrs   []matching.Attr
	Payload []byte
	Time    int64
}

// Gap tells a subscription that publications of Source with sequence
// numbers in [From, To] may have been lost (more than δ brokers failed in a
// row). To = 0 means "from From on, until further notice".
type Gap struct {
	Sub    SubID  `msgpack:"s"`
	Source Source `msgpack:"o"`
	From   uint64 `msgpack:"f"`
	To     uint64 `msgpack:"t"`
	Reason string `msgpack:"r,omitempty"`
}

func (*ClientHello) Type() Type { return TypeClientHello }
func (*Publish) Type() Type     { return TypePublish }
func (*PubAck) Type() Type      { return TypePubAck }
func (*Subscribe) Type() Type   { return TypeSubscribe }
func (*SubAck) Type() Type      { return TypeSubAck }
func (*Unsubscribe) Type() Type { return TypeUnsubscribe }
func (*UnsubAck) Type() Type    { return TypeUnsubAck }
func (*Deliver) Type() Type     { return TypeDeliver }
func (*Gap) Type() Type         { return TypeGap }
func (*DeliverSet) Type() Type  { return TypeDeliverSet }

func init() {
	Register(TypeClientHello, "ClientHello", func() Message { return new(ClientHello) })
	Register(TypePublish, "Publish", func() Message { return new(Publish) })
	Register(TypePubAck, "PubAck", func() Message { return new(PubAck) })
	Register(TypeSubscribe, "Subscribe", func() Message { return new(Subscribe) })
	Register(TypeSubAck, "SubAck", func() Message { return new(SubAck) })
	Register(TypeUnsubscribe, "Unsubscribe", func() Message { return new(Unsubscribe) })
	Register(TypeUnsubAck, "UnsubAck", func() Message { return new(UnsubAck) })
	Register(TypeDeliver, "Deliver", func() Message { return new(Deliver) })
	Register(TypeGap, "Gap", func() Message { return new(Gap) })
	Register(TypeDeliverSet, "DeliverSet", func() Message { return new(DeliverSet) })
}
