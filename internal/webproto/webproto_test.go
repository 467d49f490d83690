package webproto

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/vmihailenco/msgpack/v5"
)

func TestDecodeFrames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // message type, "hello", or the error code
	}{
		{`{"type":"hello","token":"x","publisher":"p","epoch":3}`, "hello"},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'STOCK'],[price,>,100]"}`, "Subscribe"},
		{`{"type":"subscribe","id":1,"filter":[["class","eq","STOCK"],["price",">",100.5]]}`, "Subscribe"},
		{`{"type":"subscribe","id":1,"filter":[["class","eq"]]}`, CodeBadFilter},
		{`{"type":"subscribe","id":1,"filter":[["class","like","A"]]}`, CodeBadFilter},
		{`{"type":"subscribe","id":1}`, CodeBadFilter},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","conflate":{"key":"symbol","interval_ms":250}}`, "Subscribe"},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","conflate":{"key":"symbol","interval_ms":1}}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","conflate":{"interval_ms":250}}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","conflate":{"key":"symbol","interval_ms":250,"x":1}}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","recover":true,"positions":[{"publisher":"p","epoch":3,"seq":9}]}`, "Subscribe"},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","recover":true}`, "Subscribe"},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","positions":[{"publisher":"p","epoch":3,"seq":9}]}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","recover":true,"positions":[{"sub":"B1/7/3","publisher":"p","epoch":3,"seq":9}]}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","recover":true,"positions":[{"epoch":3,"seq":9}]}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","durable":"d","token":"RFBDVA=="}`, "Subscribe"},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","durable":"d","token":"!!"}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","token":"RFBDVA=="}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","durable":"d","recover":true}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","since_ms":5000}`, CodeBadFrame},
		{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']","recover":true,"since_ms":99999999999999}`, CodeBadFrame},
		{`{"type":"ack","sub":"B1/7/3","token":"RFBDVA=="}`, "DurableAck"},
		{`{"type":"ack","sub":"B1/7/3"}`, CodeBadFrame},
		{`{"type":"ack","sub":"x","token":"RFBDVA=="}`, CodeBadFrame},
		{`{"type":"unsubscribe","sub":"B1/7/3"}`, "Unsubscribe"},
		{`{"type":"unsubscribe","sub":"B1-7-3"}`, CodeBadFrame},
		{`{"type":"publish","seq":1,"attrs":{"class":"A","n":1},"payload":"hi"}`, "Publish"},
		{`{"type":"publish","seq":0,"attrs":{"class":"A"}}`, CodeBadFrame},
		{`{"type":"publish","seq":1,"attrs":{"n":1}}`, CodeBadPub},
		{`{"type":"publish","seq":1,"attrs":{"class":true}}`, CodeBadPub},
		{`{"type":"publish","seq":1,"attrs":{"class":"A","n":99999999999999999999}}`, CodeBadPub},
		{`{"type":"nope"}`, CodeBadFrame},
		{`{"type":"hello","extra":1}`, CodeBadFrame},
		{`{"type":"hello"} {}`, CodeBadFrame},
		{`[]`, CodeBadFrame},
	} {
		hello, m, err := Decode([]byte(tc.in), false)
		got := ""
		var pe *Error
		switch {
		case errors.As(err, &pe):
			got = pe.Code
		case err != nil:
			t.Errorf("%s: error %v is not an *Error", tc.in, err)
		case hello != nil:
			got = "hello"
		default:
			got = m.Type().String()
		}
		if got != tc.want {
			t.Errorf("%s: got %s (%v), want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestDecodeMsgpackPublishKeepsKindsAndBytes(t *testing.T) {
	b, _ := msgpack.Marshal(map[string]any{"type": "publish", "seq": 2, "attrs": map[string]any{"class": "A", "i": 3, "f": 2.5}, "payload": []byte{0xff, 0}})
	_, m, err := Decode(b, true)
	if err != nil {
		t.Fatal(err)
	}
	p := m.(*message.Publish)
	if p.Seq != 2 || string(p.Payload) != "\xff\x00" || len(p.Attrs) != 3 {
		t.Fatalf("%+v", p)
	}
	out, _ := Codec{}.Encode(&message.Deliver{Pub: message.PubID{Publisher: "x", Epoch: 1, Seq: 2}, Attrs: p.Attrs, Payload: p.Payload})
	if want := `{"type":"deliver","sub":"/0/0","publisher":"x","epoch":1,"seq":2,"attrs":{"class":"A","f":2.5,"i":3},"payload_base64":"/wA="}`; string(out) != want {
		t.Errorf("JSON delivery of a binary payload:\n got %s\nwant %s", out, want)
	}
}

// FuzzDecode: no input crashes the decoder, every failure is an *Error with
// a code and a close code.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","token":"x","publisher":"p","epoch":3}`,
		`{"type":"subscribe","id":1,"filter":"[class,eq,'STOCK'],[price,>,100]"}`,
		`{"type":"subscribe","id":1,"filter":[["class","eq","STOCK"],["price",">",1e3]]}`,
		`{"type":"unsubscribe","sub":"B1/7/3"}`,
		`{"type":"publish","seq":1,"attrs":{"class":"A","n":-1},"payload":"hi"}`,
	} {
		f.Add([]byte(s), false)
		f.Add(msgpackFromJSON(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, binary bool) {
		hello, m, err := Decode(data, binary)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Code == "" || pe.Close == 0 {
				t.Fatalf("error %v: want an *Error with codes", err)
			}
			return
		}
		if hello == nil && m == nil {
			t.Fatal("no error and nothing decoded")
		}
	})
}

// msgpackFromJSON is the msgpack frame with the same keys as a JSON one.
func msgpackFromJSON(s string) []byte {
	var v map[string]any
	_ = json.Unmarshal([]byte(s), &v)
	b, _ := msgpack.Marshal(v)
	return b
}

func TestDeliverFrameIsEncode(t *testing.T) {
	attrs := []matching.Attr{{Name: "class", Value: matching.Str(`q"uote`)}, {Name: "x", Value: matching.Float(2)}}
	for _, d := range []*message.Deliver{
		{Sub: message.SubID{Edge: "B1", Epoch: 3, N: 4}, Pub: message.PubID{Publisher: "p", Epoch: 1, Seq: 9}, Attrs: attrs, Payload: []byte("x"), Time: 5},
		{Sub: message.SubID{Edge: `B"2`, Epoch: 3, N: 4}, Pub: message.PubID{Seq: 1}, Attrs: attrs},
	} {
		want, _ := Codec{}.Encode(d)
		if got := DeliverFrame(Codec{}.DeliverBody(d), d.Sub); string(got) != string(want) {
			t.Errorf("shared encoding\n got %s\nwant %s", got, want)
		}
	}
}

func TestDecodeSubscribeRecoverAndDurable(t *testing.T) {
	_, m, err := Decode([]byte(`{"type":"subscribe","id":4,"filter":"[class,eq,'A']","recover":true,"since_ms":5000,"positions":[{"publisher":"p","epoch":3,"seq":9}]}`), false)
	if err != nil {
		t.Fatal(err)
	}
	s := m.(*message.Subscribe)
	want := []message.SourceSeq{{Source: message.Source{Publisher: "p", Epoch: 3}, Seq: 9}}
	if s.Recover == nil || len(s.Recover.From) != 1 || s.Recover.From[0] != want[0] || s.Recover.Since != 5000 || s.Durable != "" {
		t.Fatalf("recover: %+v", s)
	}
	_, m, err = Decode([]byte(`{"type":"subscribe","id":4,"filter":"[class,eq,'A']","durable":"screen","token":"RFBDVA=="}`), false)
	if err != nil {
		t.Fatal(err)
	}
	if s := m.(*message.Subscribe); s.Durable != "screen" || string(s.Token) != "DPCT" || s.Recover != nil {
		t.Fatalf("durable: %+v", s)
	}
}

func TestEncodeRecoveryAndSilence(t *testing.T) {
	sub := message.SubID{Edge: "B", Epoch: 7, N: 1}
	src := message.Source{Publisher: "p", Epoch: 3}
	var c Codec
	for _, tc := range []struct {
		m    message.Message
		want string
	}{
		{&message.SubAck{Req: 1, Sub: sub, Confirmed: true, Recovery: true, Recovered: true},
			`{"type":"suback","id":1,"sub":"B/7/1","confirmed":true,"recovered":true}`},
		{&message.SubAck{Req: 1, Sub: sub, Confirmed: true, Recovery: true, Missed: []message.Gap{{Sub: sub, Source: src, From: 2, To: 4}}},
			`{"type":"suback","id":1,"sub":"B/7/1","confirmed":true,"recovered":false,"gaps":[{"sub":"B/7/1","publisher":"p","epoch":3,"from":2,"to":4}]}`},
		{&message.SubAck{Req: 1, Sub: sub, Confirmed: true, Recovery: true, Missed: []message.Gap{{Sub: sub, Source: src, From: 2}}},
			`{"type":"suback","id":1,"sub":"B/7/1","confirmed":true,"recovered":false,"gaps":[{"sub":"B/7/1","publisher":"p","epoch":3,"from":2,"to":0,"unknown":true}]}`},
		{&message.SubAck{Req: 1, Sub: sub, Confirmed: true},
			`{"type":"suback","id":1,"sub":"B/7/1","confirmed":true}`},
		{&message.Silence{Sub: sub, Sources: []message.SourceSeq{{Source: src, Seq: 40}}},
			`{"type":"silence","sub":"B/7/1","sources":[{"publisher":"p","epoch":3,"seq":40}]}`},
	} {
		got, ok := c.Encode(tc.m)
		if !ok || string(got) != tc.want {
			t.Errorf("%T: got %s, want %s", tc.m, got, tc.want)
		}
	}
}
