// Package webproto is the web clients' protocol (docs/websocket.md): the
// frames a browser or any WebSocket client exchanges with a broker, as JSON
// text frames or, with the subprotocol SubprotocolMsgpack, msgpack binary
// frames with the same keys. It turns client frames into the client
// protocol's messages (package message) and the broker's answers and
// deliveries back into frames. It does no I/O.
package webproto

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/vmihailenco/msgpack/v5"
)

// The subprotocols a client may ask for (Sec-WebSocket-Protocol). Without
// one, frames are JSON.
const (
	SubprotocolJSON    = "deltapub.v1.json"
	SubprotocolMsgpack = "deltapub.v1.msgpack"
)

// Error codes of error frames; see docs/websocket.md.
const (
	CodeBadFrame     = "bad_frame"  // not a frame of this protocol (syntax, unknown type, missing field)
	CodeBadFilter    = "bad_filter" // the filter does not parse
	CodeBadPub       = "bad_publication"
	CodeTooLarge     = "too_large"     // frame over the broker's max_frame
	CodeUnauthorized = "unauthorized"  // wrong or missing token
	CodeNoHello      = "hello_first"   // a request before hello, or a second hello
	CodeSlow         = "slow_consumer" // the client stayed behind; the broker closes
	CodeRefused      = "refused"       // the broker refused the request (limits)
)

// Close codes the broker closes with (RFC 6455 §7.4; 4000–4999 are the
// application's own).
const (
	CloseNormal       = 1000
	CloseBadData      = 1007 // malformed frame
	ClosePolicy       = 1008 // unauthorized, hello missing
	CloseTooBig       = 1009 // frame over max_frame
	CloseTryLater     = 1013 // too many clients, broker leaving
	CloseSlowConsumer = 4008 // the outgoing queue stayed full
)

// Error is a protocol error: the error frame the broker sends before it
// closes with Close.
type Error struct {
	Code  string
	Msg   string
	Close int
}

func (e *Error) Error() string { return e.Code + ": " + e.Msg }

func bad(code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Close: CloseBadData}
}

// Hello is the first frame of a connection.
type Hello struct {
	Token     string
	Publisher string // the client's publishing stream (empty: does not publish)
	Epoch     uint64
	// Resume names the session (its welcome's "session") this connection
	// continues; Positions are the last deliveries the client got, per
	// subscription and publisher stream.
	Resume    string
	Positions []Position
}

// Position is the last delivery a client got for one subscription from one
// publisher stream.
type Position struct {
	Sub       message.SubID
	Publisher string
	Epoch     uint64
	Seq       uint64
}

// MaxPositions bounds the positions of a hello.
const MaxPositions = 4096

type inPosition struct {
	Sub       string `json:"sub" msgpack:"sub"`
	Publisher string `json:"publisher" msgpack:"publisher"`
	Epoch     uint64 `json:"epoch" msgpack:"epoch"`
	Seq       uint64 `json:"seq" msgpack:"seq"`
}

// inFrame is every field a client frame may have; Type says which apply.
type inFrame struct {
	Type      string       `json:"type" msgpack:"type"`
	Token     string       `json:"token" msgpack:"token"`
	Publisher string       `json:"publisher" msgpack:"publisher"`
	Epoch     uint64       `json:"epoch" msgpack:"epoch"`
	ID        uint64       `json:"id" msgpack:"id"`
	Filter    any          `json:"filter" msgpack:"filter"`
	Sub       string       `json:"sub" msgpack:"sub"`
	Seq       uint64       `json:"seq" msgpack:"seq"`
	Attrs     any          `json:"attrs" msgpack:"attrs"`
	Payload   any          `json:"payload" msgpack:"payload"`
	Time      int64        `json:"time" msgpack:"time"`
	Resume    string       `json:"resume" msgpack:"resume"`
	Positions []inPosition `json:"positions" msgpack:"positions"`
	Conflate  *inConflate  `json:"conflate" msgpack:"conflate"`
	// subscribe: recover (with positions, without sub, and since_ms: how
	// long ago the subscription was first confirmed) after a reconnect
	// to another broker; durable with token (base64 checkpoint token).
	Recover bool   `json:"recover" msgpack:"recover"`
	SinceMS uint64 `json:"since_ms" msgpack:"since_ms"`
	Durable string `json:"durable" msgpack:"durable"`
}

// inConflate is a subscribe frame's "conflate": per value of attribute
// key, only the latest publication of each interval_ms.
type inConflate struct {
	Key        string `json:"key" msgpack:"key"`
	IntervalMS uint32 `json:"interval_ms" msgpack:"interval_ms"`
}

// Decode reads one client frame: JSON when binary is false, msgpack when
// true. It returns either the hello or one client-protocol message.
func Decode(data []byte, binary bool) (*Hello, message.Message, error) {
	var f inFrame
	if binary {
		if err := wire.Validate(data); err != nil {
			return nil, nil, bad(CodeBadFrame, "invalid msgpack: %v", err)
		}
		if err := msgpack.Unmarshal(data, &f); err != nil {
			return nil, nil, bad(CodeBadFrame, "invalid msgpack: %v", err)
		}
	} else {
		if !utf8.Valid(data) {
			return nil, nil, bad(CodeBadFrame, "invalid UTF-8")
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, nil, bad(CodeBadFrame, "invalid JSON: %v", err)
		}
		if dec.More() {
			return nil, nil, bad(CodeBadFrame, "more than one JSON value in a frame")
		}
	}
	switch f.Type {
	case "hello":
		h := &Hello{Token: f.Token, Publisher: f.Publisher, Epoch: f.Epoch, Resume: f.Resume}
		if len(f.Positions) > MaxPositions {
			return nil, nil, bad(CodeBadFrame, "hello: %d positions, at most %d", len(f.Positions), MaxPositions)
		}
		for i, p := range f.Positions {
			id, err := ParseSubID(p.Sub)
			if err != nil {
				return nil, nil, bad(CodeBadFrame, "positions[%d].sub: %v", i, err)
			}
			h.Positions = append(h.Positions, Position{Sub: id, Publisher: p.Publisher, Epoch: p.Epoch, Seq: p.Seq})
		}
		return h, nil, nil
	case "subscribe":
		flt, err := decodeFilter(f.Filter)
		if err != nil {
			return nil, nil, err
		}
		sub := &message.Subscribe{Req: f.ID, Filter: flt, Durable: f.Durable}
		if err := subscribeFrom(sub, &f); err != nil {
			return nil, nil, err
		}
		if f.Conflate != nil {
			sub.Conflate = &message.Conflation{Key: f.Conflate.Key, IntervalMS: f.Conflate.IntervalMS}
			if err := sub.Conflate.Check(); err != nil {
				return nil, nil, bad(CodeBadFrame, "subscribe: %v", err)
			}
		}
		return nil, sub, nil
	case "unsubscribe":
		id, err := ParseSubID(f.Sub)
		if err != nil {
			return nil, nil, bad(CodeBadFrame, "sub: %v", err)
		}
		return nil, &message.Unsubscribe{Sub: id}, nil
	case "ack":
		id, err := ParseSubID(f.Sub)
		if err != nil {
			return nil, nil, bad(CodeBadFrame, "sub: %v", err)
		}
		tok, err := base64.StdEncoding.DecodeString(f.Token)
		if err != nil || len(tok) == 0 {
			return nil, nil, bad(CodeBadFrame, "ack: token must be a checkpoint token in base64")
		}
		return nil, &message.DurableAck{Sub: id, Token: tok}, nil
	case "publish":
		if f.Seq == 0 {
			return nil, nil, bad(CodeBadFrame, "publish: seq must be 1 or more (consecutive per publisher epoch)")
		}
		attrs, err := decodeAttrs(f.Attrs)
		if err != nil {
			return nil, nil, err
		}
		payload, err := decodePayload(f.Payload)
		if err != nil {
			return nil, nil, err
		}
		return nil, &message.Publish{Seq: f.Seq, Attrs: attrs, Payload: payload, Time: f.Time}, nil
	case "":
		return nil, nil, bad(CodeBadFrame, "no \"type\"")
	default:
		return nil, nil, bad(CodeBadFrame, "unknown type %q (hello, subscribe, unsubscribe, publish or ack)", truncate(f.Type))
	}
}

// subscribeFrom reads a subscribe frame's recovery (recover, positions)
// or durable token into m.
func subscribeFrom(m *message.Subscribe, f *inFrame) error {
	switch {
	case f.Recover && f.Durable != "":
		return bad(CodeBadFrame, "subscribe: recover and durable exclude each other (a durable subscription resumes from its token)")
	case !f.Recover && len(f.Positions) > 0:
		return bad(CodeBadFrame, "subscribe: positions without recover")
	case !f.Recover && f.SinceMS > 0:
		return bad(CodeBadFrame, "subscribe: since_ms without recover")
	case f.SinceMS > message.MaxRecoverSince:
		return bad(CodeBadFrame, "subscribe: since_ms %d: at most %d (30 days)", f.SinceMS, uint64(message.MaxRecoverSince))
	case f.Durable == "" && f.Token != "":
		return bad(CodeBadFrame, "subscribe: token without durable")
	}
	if f.Durable != "" && f.Token != "" {
		tok, err := base64.StdEncoding.DecodeString(f.Token)
		if err != nil {
			return bad(CodeBadFrame, "subscribe: token: not base64: %v", err)
		}
		m.Token = tok
	}
	if !f.Recover {
		return nil
	}
	if len(f.Positions) > message.MaxRecoverSources {
		return bad(CodeBadFrame, "subscribe: %d positions, at most %d", len(f.Positions), message.MaxRecoverSources)
	}
	m.Recover = &message.Recovery{Since: f.SinceMS}
	for i, p := range f.Positions {
		if p.Sub != "" || p.Publisher == "" {
			return bad(CodeBadFrame, "subscribe: positions[%d]: want publisher, epoch and seq (no sub)", i)
		}
		m.Recover.From = append(m.Recover.From, message.SourceSeq{Source: message.Source{Publisher: p.Publisher, Epoch: p.Epoch}, Seq: p.Seq})
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// decodeFilter reads a filter in PADRES syntax (a string) or its JSON form,
// an array of [attribute, operator, value] triples. Both go through
// matching.ParseFilter, so they are checked alike.
func decodeFilter(v any) (matching.Filter, error) {
	var text string
	switch v := v.(type) {
	case string:
		text = v
	case []any:
		parts := make([]string, 0, len(v))
		for i, p := range v {
			t, ok := p.([]any)
			if !ok || len(t) != 3 {
				return matching.Filter{}, bad(CodeBadFilter, "filter[%d]: want [attribute, operator, value]", i)
			}
			name, ok1 := t[0].(string)
			op, ok2 := t[1].(string)
			if !ok1 || !ok2 || !matching.ValidName(name) {
				return matching.Filter{}, bad(CodeBadFilter, "filter[%d]: attribute and operator must be strings, the attribute a valid name", i)
			}
			if _, ok := matching.ParseOp(op); !ok {
				return matching.Filter{}, bad(CodeBadFilter, "filter[%d]: unknown operator %q", i, truncate(op))
			}
			val, err := decodeValue(t[2])
			if err != nil {
				return matching.Filter{}, bad(CodeBadFilter, "filter[%d]: %v", i, err)
			}
			parts = append(parts, "["+name+","+op+","+val.String()+"]")
		}
		text = strings.Join(parts, ",")
	case nil:
		return matching.Filter{}, bad(CodeBadFilter, "subscribe: no filter")
	default:
		return matching.Filter{}, bad(CodeBadFilter, "filter: want a string (PADRES syntax) or an array of [attribute, operator, value]")
	}
	f, err := matching.ParseFilter(text)
	if err != nil {
		return matching.Filter{}, bad(CodeBadFilter, "%v", err)
	}
	return f, nil
}

// decodeValue reads one attribute value: a string, or a number (in JSON, an
// integer unless written with '.', 'e' or 'E'; in msgpack, as encoded).
func decodeValue(v any) (matching.Value, error) {
	switch v := v.(type) {
	case string:
		return matching.Str(v), nil
	case json.Number:
		s := v.String()
		if strings.ContainsAny(s, ".eE") {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return matching.Value{}, fmt.Errorf("number %s: %v", truncate(s), err)
			}
			return matching.Float(f), nil
		}
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return matching.Value{}, fmt.Errorf("integer %s out of range", truncate(s))
		}
		return matching.Int(i), nil
	case int8:
		return matching.Int(int64(v)), nil
	case int16:
		return matching.Int(int64(v)), nil
	case int32:
		return matching.Int(int64(v)), nil
	case int64:
		return matching.Int(v), nil
	case uint8:
		return matching.Int(int64(v)), nil
	case uint16:
		return matching.Int(int64(v)), nil
	case uint32:
		return matching.Int(int64(v)), nil
	case uint64:
		if v > 1<<63-1 {
			return matching.Value{}, errors.New("integer out of range")
		}
		return matching.Int(int64(v)), nil
	case float32:
		return matching.Float(float64(v)), nil
	case float64:
		return matching.Float(v), nil
	default:
		return matching.Value{}, fmt.Errorf("value of type %T: want a string or a number", v)
	}
}

// decodeAttrs reads a publication's attributes, a map from names to values,
// and checks them as matching.ParsePublication does (through it).
func decodeAttrs(v any) ([]matching.Attr, error) {
	var m map[string]any
	switch v := v.(type) {
	case map[string]any:
		m = v
	case nil:
		return nil, bad(CodeBadPub, "publish: no attrs")
	default:
		return nil, bad(CodeBadPub, "attrs: want an object of attribute names and values")
	}
	if len(m) > matching.MaxPreds {
		return nil, bad(CodeBadPub, "attrs: %d attributes, at most %d", len(m), matching.MaxPreds)
	}
	var pub matching.Publication
	for k, x := range m {
		if !matching.ValidName(k) {
			return nil, bad(CodeBadPub, "attrs: %q is not a valid attribute name", truncate(k))
		}
		val, err := decodeValue(x)
		if err != nil {
			return nil, bad(CodeBadPub, "attrs.%s: %v", k, err)
		}
		pub.Attrs = append(pub.Attrs, matching.Attr{Name: k, Value: val})
	}
	p, err := matching.ParsePublication(pub.String())
	if err != nil {
		return nil, bad(CodeBadPub, "%v", err)
	}
	return p.Attrs, nil
}

func decodePayload(v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(v), nil
	case []byte:
		return v, nil
	default:
		return nil, bad(CodeBadPub, "payload: want a string (or bytes in msgpack)")
	}
}

// ParseSubID reads a subscription id as deliveries carry it: edge/epoch/n.
func ParseSubID(s string) (message.SubID, error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return message.SubID{}, fmt.Errorf("%q: want edge/epoch/n", truncate(s))
	}
	j := strings.LastIndexByte(s[:i], '/')
	if j <= 0 {
		return message.SubID{}, fmt.Errorf("%q: want edge/epoch/n", truncate(s))
	}
	e, err1 := strconv.ParseUint(s[j+1:i], 10, 64)
	n, err2 := strconv.ParseUint(s[i+1:], 10, 64)
	if err1 != nil || err2 != nil {
		return message.SubID{}, fmt.Errorf("%q: epoch and n must be numbers", truncate(s))
	}
	return message.SubID{Edge: message.BrokerID(s[:j]), Epoch: e, N: n}, nil
}
