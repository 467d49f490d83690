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

// Welcome answers a good hello.
func (c Codec) Welcome(broker message.BrokerID, epoch uint64) []byte {
	return c.marshal(&outFrame{Type: "welcome", Broker: string(broker), Epoch: epoch})
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
