package webproto

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/vmihailenco/msgpack/v5"
)

// outFrame is every field a broker frame may have.
type outFrame struct {
	Type      string `json:"type" msgpack:"type"`
	Broker    string `json:"broker,omitempty" msgpack:"broker,omitempty"`
	ID        uint64 `json:"id,omitempty" msgpack:"id,omitempty"`
	Sub       string `json:"sub,omitempty" msgpack:"sub,omitempty"`
	Confirmed bool   `json:"confirmed,omitempty" msgpack:"confirmed,omitempty"`
	Publisher string `json:"publisher,omitempty" msgpack:"publisher,omitempty"`
	Epoch     uint64 `json:"epoch,omitempty" msgpack:"epoch,omitempty"`
	Seq       uint64 `json:"seq,omitempty" msgpack:"seq,omitempty"`
	Attrs     any    `json:"attrs,omitempty" msgpack:"attrs,omitempty"`
	Payload   any    `json:"payload,omitempty" msgpack:"payload,omitempty"`
	// PayloadB64 is set instead of Payload, in JSON, when the payload is not
	// valid UTF-8 (JSON strings cannot carry arbitrary bytes).
	PayloadB64 []byte `json:"payload_base64,omitempty" msgpack:"-"`
	Time       int64  `json:"time,omitempty" msgpack:"time,omitempty"`
	From       uint64 `json:"from,omitempty" msgpack:"from,omitempty"`
	To         uint64 `json:"to,omitempty" msgpack:"to,omitempty"`
	Reason     string `json:"reason,omitempty" msgpack:"reason,omitempty"`
	Code       string `json:"code,omitempty" msgpack:"code,omitempty"`
	Message    string `json:"message,omitempty" msgpack:"message,omitempty"`
	Session    string `json:"session,omitempty" msgpack:"session,omitempty"`
	// Resumed, Recovered and Gaps answer a hello with "resume"; pointers so
	// that false is written, not omitted.
	Resumed   *bool    `json:"resumed,omitempty" msgpack:"resumed,omitempty"`
	Recovered *bool    `json:"recovered,omitempty" msgpack:"recovered,omitempty"`
	Gaps      []outGap `json:"gaps,omitempty" msgpack:"gaps,omitempty"`
	// Sources: a silence frame's horizons (durable subscriptions).
	Sources []outSource `json:"sources,omitempty" msgpack:"sources,omitempty"`
}

type outSource struct {
	Publisher string `json:"publisher" msgpack:"publisher"`
	Epoch     uint64 `json:"epoch" msgpack:"epoch"`
	Seq       uint64 `json:"seq" msgpack:"seq"`
}

type outGap struct {
	Sub       string `json:"sub" msgpack:"sub"`
	Publisher string `json:"publisher" msgpack:"publisher"`
	Epoch     uint64 `json:"epoch" msgpack:"epoch"`
	From      uint64 `json:"from" msgpack:"from"`
	To        uint64 `json:"to" msgpack:"to"`
	// Unknown: no publisher's edge answered for this stream, so what
	// was published after From-1 is not known (To is 0).
	Unknown bool `json:"unknown,omitempty" msgpack:"unknown,omitempty"`
}

// Gap is a range of one subscription's deliveries from one publisher
// stream that a resumed session could not recover.
type Gap struct {
	Sub      message.SubID
	Source   message.Source
	From, To uint64
}

// Resume is how a hello's "resume" went.
type Resume struct {
	Tried     bool // the hello asked to resume
	Resumed   bool // the session continues (its subscriptions are kept)
	Recovered bool // and every delivery after the positions follows
	Gaps      []Gap
}

// Codec encodes the broker's frames for one session.
type Codec struct{ Binary bool }

func (c Codec) marshal(f *outFrame) []byte {
	var b []byte
	if c.Binary {
		b, _ = msgpack.Marshal(f) // a struct of strings, numbers and maps of them: cannot fail
	} else {
		b, _ = json.Marshal(f)
	}
	return b
}

// Welcome answers a good hello: session names the session for a later
// resume.
func (c Codec) Welcome(broker message.BrokerID, epoch uint64, session string, r Resume) []byte {
	f := &outFrame{Type: "welcome", Broker: string(broker), Epoch: epoch, Session: session}
	if r.Tried {
		f.Resumed, f.Recovered = &r.Resumed, &r.Recovered
		for _, g := range r.Gaps {
			f.Gaps = append(f.Gaps, outGap{Sub: g.Sub.String(), Publisher: g.Source.Publisher, Epoch: g.Source.Epoch, From: g.From, To: g.To})
		}
	}
	return c.marshal(f)
}

// Error is an error frame.
func (c Codec) Error(code, msg string) []byte {
	return c.marshal(&outFrame{Type: "error", Code: code, Message: msg})
}

// Encode turns a client-protocol message of the broker into a frame; false
// for a message web clients do not get (none today).
func (c Codec) Encode(m message.Message) ([]byte, bool) {
	var f outFrame
	switch m := m.(type) {
	case *message.SubAck:
		f = outFrame{Type: "suback", ID: m.Req, Sub: m.Sub.String(), Confirmed: m.Confirmed, Message: m.Err}
		if m.Err != "" {
			f.Code = CodeRefused
		}
		if m.Recovery {
			// The confirmation of a subscribe with recover: what came
			// before it was the missed publications; Gaps what no
			// history held.
			rec := m.Recovered
			f.Recovered = &rec
			for _, g := range m.Missed {
				f.Gaps = append(f.Gaps, outGap{Sub: m.Sub.String(), Publisher: g.Source.Publisher, Epoch: g.Source.Epoch, From: g.From, To: g.To, Unknown: g.To < g.From})
			}
		}
	case *message.Silence:
		f = outFrame{Type: "silence", Sub: m.Sub.String()}
		for _, s := range m.Sources {
			f.Sources = append(f.Sources, outSource{Publisher: s.Source.Publisher, Epoch: s.Source.Epoch, Seq: s.Seq})
		}
	case *message.UnsubAck:
		f = outFrame{Type: "unsuback", Sub: m.Sub.String(), Message: m.Err}
	case *message.PubAck:
		f = outFrame{Type: "puback", Seq: m.Seq, Message: m.Err}
		if m.Err != "" {
			f.Code = m.Err
		}
	case *message.Deliver:
		f = outFrame{Type: "deliver", Sub: m.Sub.String(), Publisher: m.Pub.Publisher, Epoch: m.Pub.Epoch, Seq: m.Pub.Seq, Time: m.Time}
		c.body(&f, m.Attrs, m.Payload)
	case *message.Gap:
		f = outFrame{Type: "gap", Sub: m.Sub.String(), Publisher: m.Source.Publisher, Epoch: m.Source.Epoch, From: m.From, To: m.To, Reason: m.Reason}
	default:
		return nil, false
	}
	return c.marshal(&f), true
}

func (c Codec) body(f *outFrame, attrs []matching.Attr, payload []byte) {
	if c.Binary {
		m := make(map[string]any, len(attrs))
		for _, a := range attrs {
			switch a.Value.Kind {
			case matching.KindString:
				m[a.Name] = a.Value.Str
			case matching.KindInt:
				m[a.Name] = a.Value.Int
			case matching.KindFloat:
				m[a.Name] = a.Value.Float
			}
		}
		f.Attrs = m
		if len(payload) > 0 {
			f.Payload = payload
		}
		return
	}
	f.Attrs = json.RawMessage(matching.Publication{Attrs: attrs}.JSON())
	switch {
	case len(payload) == 0:
	case utf8.Valid(payload):
		f.Payload = string(payload)
	default:
		f.PayloadB64 = payload
	}
}

// deliverPrefix opens every JSON delivery frame.
const deliverPrefix = `{"type":"deliver",`

// DeliverBody is the JSON delivery frame of d without its subscription: the
// same for every session that gets the publication, so a broker encodes it
// once and builds each session's frame with DeliverFrame. Nil for msgpack
// codecs (their frames are encoded whole).
func (c Codec) DeliverBody(d *message.Deliver) []byte {
	if c.Binary {
		return nil
	}
	f := outFrame{Type: "deliver", Publisher: d.Pub.Publisher, Epoch: d.Pub.Epoch, Seq: d.Pub.Seq, Time: d.Time}
	c.body(&f, d.Attrs, d.Payload)
	return c.marshal(&f)
}

// DeliverFrame is the frame Encode makes of a delivery to sub whose
// DeliverBody is body.
func DeliverFrame(body []byte, sub message.SubID) []byte {
	q, _ := json.Marshal(sub.String())
	rest := body[len(deliverPrefix):]
	out := make([]byte, 0, len(deliverPrefix)+7+len(q)+len(rest))
	out = append(out, deliverPrefix...)
	out = append(out, `"sub":`...)
	out = append(out, q...)
	out = append(out, ',')
	return append(out, rest...)
}
