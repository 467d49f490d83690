package web_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// webConn is a WebSocket client speaking the web protocol in JSON.
type webConn struct {
	t *testing.T
	c *websocket.Conn
}

func webDial(ctx context.Context, t *testing.T, addr string) *webConn {
	t.Helper()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &webConn{t, c}
	t.Cleanup(func() { _ = c.CloseNow() })
	w.send(ctx, map[string]any{"type": "hello"})
	w.until(ctx, "welcome")
	return w
}

func (w *webConn) send(ctx context.Context, f map[string]any) {
	w.t.Helper()
	b, _ := json.Marshal(f)
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		w.t.Fatal(err)
	}
}

// frame is a broker frame, decoded.
type frame struct {
	Type      string `json:"type"`
	Sub       string `json:"sub"`
	Confirmed bool   `json:"confirmed"`
	Recovered *bool  `json:"recovered"`
	Gaps      []struct {
		From, To uint64
	} `json:"gaps"`
	Publisher string `json:"publisher"`
	Epoch     uint64 `json:"epoch"`
	Seq       uint64 `json:"seq"`
	From, To  uint64
	Sources   []struct {
		Publisher string
		Epoch     uint64
		Seq       uint64
	} `json:"sources"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (w *webConn) next(ctx context.Context) frame {
	w.t.Helper()
	_, b, err := w.c.Read(ctx)
	if err != nil {
		w.t.Fatalf("reading a frame: %v", err)
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		w.t.Fatalf("frame %s: %v", b, err)
	}
	if f.Type == "error" || (f.Code != "" && !strings.Contains(f.Message, "retry later")) {
		w.t.Fatalf("broker: %s", b)
	}
	return f
}

func (w *webConn) until(ctx context.Context, typ string) frame {
	w.t.Helper()
	for {
		if f := w.next(ctx); f.Type == typ {
			return f
		}
	}
}

// subscribe sends sub and reads frames until it is confirmed, handing
// every other frame to each. A broker that is not ready ("retry later":
// joining, or repairing the overlay after a crash) is asked again, paced,
// as a client would.
func (w *webConn) subscribe(ctx context.Context, sub map[string]any, each func(frame)) frame {
	w.t.Helper()
	w.send(ctx, sub)
	for tries := 0; ; {
		f := w.next(ctx)
		switch {
		case f.Type == "suback" && f.Code != "":
			if tries++; tries > 100 {
				w.t.Fatalf("subscription refused %d times: %s", tries, f.Message)
			}
			time.Sleep(100 * time.Millisecond)
			w.send(ctx, sub)
		case f.Type == "suback" && f.Confirmed:
			return f
		default:
			each(f)
		}
	}
}

// seqs reads deliveries until n, and returns their seqs.
func (w *webConn) seqs(ctx context.Context, n int, each func(frame)) []uint64 {
	w.t.Helper()
	var out []uint64
	for len(out) < n {
		f := w.next(ctx)
		each(f)
		if f.Type == "deliver" {
			out = append(out, f.Seq)
		}
	}
	return out
}

// recoverTopology: P, the publisher's edge, with its default recent
// history (in memory, no data directory), and A and B, the web clients'
// brokers, each a neighbour of P.
func recoverTopology(t *testing.T) (p, a, b *testBroker, pub *client.Client) {
	p = runBroker(t, "P", "", false, nil)
	a = runBroker(t, "A", p.addr, true, nil)
	b = runBroker(t, "B", p.addr, true, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	pub, err := client.Connect(ctx, p.addr, client.Options{Publisher: "go-pub", Epoch: 9})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return p, a, b, pub
}

// publishRange publishes seqs from..to of go-pub: class x except every
// third (class y), so a filter on x leaves some out.
func publishRange(ctx context.Context, t *testing.T, pub *client.Client, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		p, err := matching.ParsePublication(fmt.Sprintf("[class,'%s'],[n,%d]", class(i), i))
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
}

func class(i int) string {
	if i%3 == 0 {
		return "y"
	}
	return "x"
}

func matching3(from, to int) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		if class(i) == "x" {
			out = append(out, uint64(i))
		}
	}
	return out
}

// A web client whose broker crashes subscribes again on another broker
// with its last positions: it gets exactly the matching publications it
// missed (from the publisher's edge's publication history), in order, before the
// confirmation that says recovered: true, then live.
func TestWSRecoverOnAnotherBrokerAfterACrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	_, a, b, pub := recoverTopology(t)
	w := webDial(ctx, t, a.b.WSAddr())
	w.subscribe(ctx, map[string]any{"type": "subscribe", "id": 1, "filter": "[class,eq,'x']"}, func(frame) {})
	publishRange(ctx, t, pub, 1, 8)
	last := uint64(0)
	got := w.seqs(ctx, len(matching3(1, 8)), func(frame) {})
	if !slices.Equal(got, matching3(1, 8)) {
		t.Fatalf("on A: %v, want %v", got, matching3(1, 8))
	}
	last = got[len(got)-1]
	a.kill()
	publishRange(ctx, t, pub, 9, 20)

	w2 := webDial(ctx, t, b.b.WSAddr())
	var missed []uint64
	ack := w2.subscribe(ctx, map[string]any{"type": "subscribe", "id": 1, "filter": "[class,eq,'x']", "recover": true,
		"positions": []map[string]any{{"publisher": "go-pub", "epoch": 9, "seq": last}}}, func(f frame) {
		if f.Type == "deliver" {
			missed = append(missed, f.Seq)
		}
	})
	if ack.Recovered == nil || !*ack.Recovered || len(ack.Gaps) > 0 {
		t.Fatalf("confirmation %+v, want recovered: true", ack)
	}
	if !slices.Equal(missed, matching3(9, 20)) {
		t.Fatalf("recovered on B before the confirmation: %v, want exactly the missed %v", missed, matching3(9, 20))
	}
	publishRange(ctx, t, pub, 21, 25)
	if live := w2.seqs(ctx, len(matching3(21, 25)), func(frame) {}); !slices.Equal(live, matching3(21, 25)) {
		t.Fatalf("live on B: %v, want %v", live, matching3(21, 25))
	}
}

// A publisher that starts while the web client is away, and one it had
// no delivery from before, are recovered too: the client says how long
// ago its subscription began (since_ms), and the publishers' edge answers
// with what they published since, nothing from before.
func TestWSRecoverGetsPublishersItHadNoPositionFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	p, a, b, pub := recoverTopology(t)
	quiet, err := client.Connect(ctx, p.addr, client.Options{Publisher: "quiet-pub", Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	publishRange(ctx, t, quiet, 1, 3) // before the subscription: not owed
	time.Sleep(time.Second)           // more than the window's margin (one failure timeout)

	w := webDial(ctx, t, a.b.WSAddr())
	w.subscribe(ctx, map[string]any{"type": "subscribe", "id": 1, "filter": "[class,eq,'x']"}, func(frame) {})
	began := time.Now()
	publishRange(ctx, t, pub, 1, 2)
	got := w.seqs(ctx, len(matching3(1, 2)), func(frame) {})
	a.kill()
	publishRange(ctx, t, quiet, 4, 5) // a publisher it never had a delivery from
	late, err := client.Connect(ctx, p.addr, client.Options{Publisher: "late-pub", Epoch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	publishRange(ctx, t, late, 1, 2) // one that started while it was away

	w2 := webDial(ctx, t, b.b.WSAddr())
	var missed []string
	ack := w2.subscribe(ctx, map[string]any{"type": "subscribe", "id": 1, "filter": "[class,eq,'x']", "recover": true,
		"since_ms":  time.Since(began).Milliseconds() + 1,
		"positions": []map[string]any{{"publisher": "go-pub", "epoch": 9, "seq": got[len(got)-1]}}}, func(f frame) {
		if f.Type == "deliver" {
			missed = append(missed, fmt.Sprintf("%s/%d", f.Publisher, f.Seq))
		}
	})
	if ack.Recovered == nil || !*ack.Recovered || len(ack.Gaps) > 0 {
		t.Fatalf("confirmation %+v, want recovered: true", ack)
	}
	slices.Sort(missed)
	if want := []string{"late-pub/1", "late-pub/2", "quiet-pub/4", "quiet-pub/5"}; !slices.Equal(missed, want) {
		t.Fatalf("recovered %v, want %v", missed, want)
	}
}

// A durable subscription over WebSocket: name and checkpoint token (the
// Go client's, base64), resumed on another broker after its first one
// crashed, gets every matching publication once; its token advances with
// deliveries and silence frames, and an ack is taken.
func TestWSDurableSubscriptionResumesOnAnotherBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	_, a, b, pub := recoverTopology(t)
	tok := checkpoint.Token{Name: "screen-1"}
	src := message.Source{Publisher: "go-pub", Epoch: 9}
	track := func(f frame) {
		switch f.Type {
		case "deliver":
			_ = tok.Consume(message.Source{Publisher: f.Publisher, Epoch: f.Epoch}, f.Seq)
		case "gap":
			t.Errorf("gap %+v: nothing was released", f)
		case "silence":
			for _, s := range f.Sources {
				_ = tok.Advance(message.Source{Publisher: s.Publisher, Epoch: s.Epoch}, s.Seq)
			}
		}
	}
	w := webDial(ctx, t, a.b.WSAddr())
	ack := w.subscribe(ctx, map[string]any{"type": "subscribe", "id": 1, "filter": "[class,eq,'x']", "durable": "screen-1"}, track)
	publishRange(ctx, t, pub, 1, 8)
	if got := w.seqs(ctx, len(matching3(1, 8)), track); !slices.Equal(got, matching3(1, 8)) {
		t.Fatalf("on A: %v, want %v", got, matching3(1, 8))
	}
	w.send(ctx, map[string]any{"type": "ack", "sub": ack.Sub, "token": base64.StdEncoding.EncodeToString(tok.Encode())})
	a.kill()
	publishRange(ctx, t, pub, 9, 20)

	w2 := webDial(ctx, t, b.b.WSAddr())
	var missed []uint64
	w2.subscribe(ctx, map[string]any{"type": "subscribe", "id": 1, "filter": "[class,eq,'x']", "durable": "screen-1",
		"token": base64.StdEncoding.EncodeToString(tok.Encode())}, func(f frame) {
		track(f)
		if f.Type == "deliver" {
			missed = append(missed, f.Seq)
		}
	})
	if !slices.Equal(missed, matching3(9, 20)) {
		t.Fatalf("resumed on B: %v, want exactly the missed %v", missed, matching3(9, 20))
	}
	if e := tok.Get(src); e.From() < 20 {
		t.Fatalf("token at %d after the catch-up, want 20 or more (silence past the last match)", e.From())
	}
	publishRange(ctx, t, pub, 21, 25)
	if live := w2.seqs(ctx, len(matching3(21, 25)), track); !slices.Equal(live, matching3(21, 25)) {
		t.Fatalf("live on B: %v, want %v", live, matching3(21, 25))
	}
}
