package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/deltapub/deltapub/internal/webproto"
	"github.com/rs/zerolog"
)

// wsBroker is one runtime (alone on a MemNetwork) with a WebSocket listener
// on 127.0.0.1.
func wsBroker(t *testing.T, edit func(*BrokerConfig)) (*WSListener, func()) {
	l, _, stop := wsTestBroker(t, edit)
	return l, stop
}

func wsTestBroker(t *testing.T, edit func(*BrokerConfig)) (*WSListener, *testBroker, func()) {
	t.Helper()
	cfg := TestbedBrokerConfig()
	cfg.ID, cfg.Listen, cfg.WSListen = "B1", "127.0.0.1:1", "127.0.0.1:0"
	if edit != nil {
		edit(&cfg)
	}
	b := runTestBroker(t, NewMemNetwork(), cfg, 7, nil)
	l, err := ListenWS(&cfg, 7, "t0ken-t0ken", b.rt, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return l, b, func() { l.Close(); b.stop(); <-b.done }
}

type wsClient struct {
	t *testing.T
	c *websocket.Conn
}

func wsDial(t *testing.T, addr string, opts *websocket.DialOptions) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+WSPath, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(8 << 20)
	return &wsClient{t, c}
}

func (w *wsClient) send(s string) {
	w.t.Helper()
	if err := w.c.Write(w.t.Context(), websocket.MessageText, []byte(s)); err != nil {
		w.t.Fatal(err)
	}
}

// next reads the next frame as a JSON object (or returns the close error).
func (w *wsClient) next() (map[string]any, error) {
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	defer cancel()
	_, data, err := w.c.Read(ctx)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		w.t.Fatalf("frame %q: %v", data, err)
	}
	return m, nil
}

// until reads frames until one of type typ.
func (w *wsClient) until(typ string) map[string]any {
	w.t.Helper()
	for {
		m, err := w.next()
		if err != nil {
			w.t.Fatalf("waiting for %s: %v", typ, err)
		}
		if m["type"] == typ {
			return m
		}
	}
}

func (w *wsClient) hello(publisher string) {
	w.t.Helper()
	w.send(fmt.Sprintf(`{"type":"hello","token":"t0ken-t0ken","publisher":%q,"epoch":1}`, publisher))
	if m := w.until("welcome"); m["broker"] != "B1" {
		w.t.Fatalf("welcome %v", m)
	}
}

func TestWSSubscribePublishDeliver(t *testing.T) {
	l, stop := wsBroker(t, nil)
	defer stop()
	text := wsDial(t, l.Addr(), nil)
	text.hello("")
	text.send(`{"type":"subscribe","id":1,"filter":"[class,eq,'STOCK'],[price,>,100]"}`)
	text.until("suback")
	form := wsDial(t, l.Addr(), nil)
	form.hello("")
	form.send(`{"type":"subscribe","id":9,"filter":[["class","eq","STOCK"],["price","<",100]]}`)
	if a := form.until("suback"); a["id"] != 9.0 || a["code"] != nil {
		t.Fatalf("suback %v", a)
	}
	pub := wsDial(t, l.Addr(), nil)
	pub.hello("web-pub")
	for i, price := range []int{120, 50, 130} {
		pub.send(fmt.Sprintf(`{"type":"publish","seq":%d,"attrs":{"class":"STOCK","price":%d},"payload":"p%d"}`, i+1, price, i+1))
	}
	if a := pub.until("puback"); a["seq"] != 1.0 && a["seq"] != 2.0 && a["seq"] != 3.0 {
		t.Fatalf("puback %v", a)
	}
	for _, seq := range []float64{1, 3} {
		d := text.until("deliver")
		if d["publisher"] != "web-pub" || d["epoch"] != 1.0 || d["seq"] != seq || d["payload"] != fmt.Sprintf("p%d", int(seq)) {
			t.Fatalf("delivery %v, want seq %v", d, seq)
		}
		if attrs, _ := d["attrs"].(map[string]any); attrs["class"] != "STOCK" {
			t.Fatalf("delivery attrs %v", d["attrs"])
		}
	}
	if d := form.until("deliver"); d["seq"] != 2.0 {
		t.Fatalf("JSON-form subscription got %v, want seq 2", d)
	}
}

// closeCodeOf waits for the connection to end and returns its close code.
func closeCodeOf(t *testing.T, w *wsClient) (errFrame map[string]any, code websocket.StatusCode) {
	t.Helper()
	for {
		m, err := w.next()
		if err != nil {
			return errFrame, websocket.CloseStatus(err)
		}
		if m["type"] == "error" {
			errFrame = m
		}
	}
}

func TestWSBadClientsGetAnErrorFrameAndACloseCode(t *testing.T) {
	l, stop := wsBroker(t, func(c *BrokerConfig) { c.Limits.MaxFrame = 4096 })
	defer stop()
	for _, tc := range []struct {
		name   string
		frames []string
		code   string
		close  websocket.StatusCode
	}{
		{"not JSON", []string{`{"type":`}, webproto.CodeBadFrame, webproto.CloseBadData},
		{"before hello", []string{`{"type":"subscribe","id":1,"filter":"[class,eq,'A']"}`}, webproto.CodeNoHello, webproto.ClosePolicy},
		{"wrong token", []string{`{"type":"hello","token":"nope"}`}, webproto.CodeUnauthorized, webproto.ClosePolicy},
		{"bad filter", []string{`{"type":"hello","token":"t0ken-t0ken"}`, `{"type":"subscribe","id":1,"filter":"[class,eq"}`}, webproto.CodeBadFilter, webproto.CloseBadData},
		{"too large", []string{`{"type":"hello","token":"t0ken-t0ken"}`, `{"type":"publish","seq":1,"attrs":{"class":"A"},"payload":"` + strings.Repeat("x", 5000) + `"}`}, webproto.CodeTooLarge, webproto.CloseTooBig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := wsDial(t, l.Addr(), nil)
			for _, f := range tc.frames {
				w.send(f)
			}
			e, code := closeCodeOf(t, w)
			if e == nil || e["code"] != tc.code || e["message"] == "" {
				t.Errorf("error frame %v, want code %s", e, tc.code)
			}
			if code != tc.close {
				t.Errorf("close code %d, want %d", code, tc.close)
			}
		})
	}
	// The broker still serves.
	w := wsDial(t, l.Addr(), nil)
	w.hello("")
}

func TestWSHandshakesAreRateLimited(t *testing.T) {
	l, stop := wsBroker(t, func(c *BrokerConfig) { c.Limits.WSHandshakes = 2 })
	defer stop()
	var refused int
	for range 4 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		c, resp, err := websocket.Dial(ctx, "ws://"+l.Addr()+WSPath, nil)
		cancel()
		switch {
		case err == nil:
			c.CloseNow()
		case resp != nil && resp.StatusCode == http.StatusTooManyRequests:
			refused++
		default:
			t.Fatal(err)
		}
	}
	if refused < 1 {
		t.Errorf("4 handshakes at once with a limit of 2 per second: none refused")
	}
}

func TestWSSlowConsumerIsDisconnectedWithItsCode(t *testing.T) {
	l, stop := wsBroker(t, func(c *BrokerConfig) { c.Limits.SendQueueBytes = 64 << 10 })
	defer stop()
	// A subscriber that does not read, with a small receive buffer so the
	// kernel takes little of what the broker queues.
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	slow := wsDial(t, l.Addr(), &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}})
	slow.send(`{"type":"hello","token":"t0ken-t0ken"}`)
	token := slow.until("welcome")["session"].(string)
	slow.send(`{"type":"subscribe","id":1,"filter":"[class,eq,'A']"}`)
	subID := slow.until("suback")["sub"].(string)
	pub := wsDial(t, l.Addr(), nil)
	pub.hello("p")
	payload := strings.Repeat("x", 2000)
	// At most 4,000 publications of 2 kB: far more than the 64 kB queue and
	// the kernel's buffers together.
	deadline := time.Now().Add(30 * time.Second)
	seq := 0
	for ; seq < 4000 && time.Now().Before(deadline); seq++ {
		pub.send(fmt.Sprintf(`{"type":"publish","seq":%d,"attrs":{"class":"A"},"payload":%q}`, seq+1, payload))
		if seq%200 == 199 {
			// Let acknowledgements flow (the publisher reads).
			for {
				a := pub.until("puback")
				if a["seq"] == float64(seq+1) || a["code"] != nil {
					break
				}
			}
		}
	}
	e, code := closeCodeOf(t, slow)
	if code != webproto.CloseSlowConsumer {
		t.Fatalf("slow subscriber: close code %d (error frame %v), want %d", code, e, webproto.CloseSlowConsumer)
	}
	if e != nil && e["code"] != webproto.CodeSlow {
		t.Errorf("error frame %v, want %s", e, webproto.CodeSlow)
	}
	// The session, subscription included, is resumed; what the history
	// no longer holds is a gap.
	again := wsDial(t, l.Addr(), nil)
	again.send(fmt.Sprintf(`{"type":"hello","token":"t0ken-t0ken","resume":%q}`, token))
	w := again.until("welcome")
	if w["resumed"] != true || w["recovered"] != false || w["gaps"] == nil {
		t.Fatalf("welcome %v, want resumed with gaps", w)
	}
	last := 0.0
	for last < float64(seq) {
		d := again.until("deliver")
		if d["sub"] != subID || d["seq"].(float64) <= last {
			t.Fatalf("delivery %v after seq %v", d["seq"], last)
		}
		last = d["seq"].(float64)
	}
}

func TestWSResumeGetsWhatWasMissedThenLive(t *testing.T) {
	for _, tc := range []struct {
		name      string
		history   int
		missed    int
		recovered bool
	}{
		{"within the history", 256, 3, true},
		{"past the history", 2, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, stop := wsBroker(t, func(c *BrokerConfig) { c.Limits.WSHistory = tc.history })
			defer stop()
			sub := wsDial(t, l.Addr(), nil)
			sub.send(`{"type":"hello","token":"t0ken-t0ken"}`)
			token := sub.until("welcome")["session"].(string)
			sub.send(`{"type":"subscribe","id":1,"filter":"[class,eq,'A']"}`)
			subID := sub.until("suback")["sub"].(string)
			pub := wsDial(t, l.Addr(), nil)
			pub.hello("p")
			seq := 0
			publish := func(n int) {
				for range n {
					seq++
					pub.send(fmt.Sprintf(`{"type":"publish","seq":%d,"attrs":{"class":"A","n":%d}}`, seq, seq))
				}
				for pub.until("puback")["seq"] != float64(seq) {
				}
			}
			publish(1)
			if d := sub.until("deliver"); d["seq"] != 1.0 {
				t.Fatalf("first delivery %v", d)
			}
			sub.c.CloseNow() // the connection is lost, not the session
			publish(tc.missed)
			again := wsDial(t, l.Addr(), nil)
			again.send(fmt.Sprintf(`{"type":"hello","token":"t0ken-t0ken","resume":%q,"positions":[{"sub":%q,"publisher":"p","epoch":1,"seq":1}]}`, token, subID))
			w := again.until("welcome")
			if w["resumed"] != true || w["recovered"] != tc.recovered {
				t.Fatalf("welcome %v, want resumed and recovered %v", w, tc.recovered)
			}
			first := 2
			if !tc.recovered {
				gaps, _ := w["gaps"].([]any)
				if len(gaps) != 1 {
					t.Fatalf("gaps %v, want one range", w["gaps"])
				}
				g := gaps[0].(map[string]any)
				// The history held the last tc.history of 1+tc.missed.
				lastLost := 1 + tc.missed - tc.history
				if g["from"] != 2.0 || g["to"] != float64(lastLost) || g["sub"] != subID {
					t.Fatalf("gap %v, want [2, %d]", g, lastLost)
				}
				first = lastLost + 1
			}
			publish(1) // live, after the resume
			for want := first; want <= seq; want++ {
				if d := again.until("deliver"); d["seq"] != float64(want) {
					t.Fatalf("delivery %v, want seq %d", d, want)
				}
			}
		})
	}
}

func TestWSResumeTakesOverAConnectionTheBrokerStillHolds(t *testing.T) {
	l, stop := wsBroker(t, nil)
	defer stop()
	old := wsDial(t, l.Addr(), nil)
	old.send(`{"type":"hello","token":"t0ken-t0ken"}`)
	token := old.until("welcome")["session"].(string)
	old.send(`{"type":"subscribe","id":1,"filter":"[class,eq,'A']"}`)
	subID := old.until("suback")["sub"].(string)
	// The client gave up on old (say its network changed) without the
	// broker noticing.
	again := wsDial(t, l.Addr(), nil)
	again.send(fmt.Sprintf(`{"type":"hello","token":"t0ken-t0ken","resume":%q}`, token))
	if w := again.until("welcome"); w["resumed"] != true || w["recovered"] != true {
		t.Fatalf("welcome %v, want resumed and recovered", w)
	}
	if _, code := closeCodeOf(t, old); code != webproto.CloseNormal {
		t.Errorf("the replaced connection closed with %d, want %d", code, webproto.CloseNormal)
	}
	pub := wsDial(t, l.Addr(), nil)
	pub.hello("p")
	pub.send(`{"type":"publish","seq":1,"attrs":{"class":"A"}}`)
	if d := again.until("deliver"); d["sub"] != subID || d["seq"] != 1.0 {
		t.Fatalf("delivery %v", d)
	}
}

func testCtx(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 10*time.Second)
}

func TestWSSessionEndsWhenNotResumedWithinTheGrace(t *testing.T) {
	l, b, stop := wsTestBroker(t, func(c *BrokerConfig) { c.Limits.WSResumeGrace = 50 * time.Millisecond })
	defer stop()
	w := wsDial(t, l.Addr(), nil)
	w.send(`{"type":"hello","token":"t0ken-t0ken"}`)
	token := w.until("welcome")["session"].(string)
	w.send(`{"type":"subscribe","id":1,"filter":"[class,eq,'A']"}`)
	w.until("suback")
	w.c.CloseNow()
	// At most 10 s for the grace to pass and the runtime to drop the
	// session (and its subscription).
	for deadline := time.Now().Add(10 * time.Second); sessions(t, b) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions 10 s after a grace of 50 ms", sessions(t, b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	again := wsDial(t, l.Addr(), nil)
	again.send(fmt.Sprintf(`{"type":"hello","token":"t0ken-t0ken","resume":%q}`, token))
	if m := again.until("welcome"); m["resumed"] != false || m["recovered"] != false || m["session"] == token {
		t.Fatalf("welcome %v, want a new session, not resumed", m)
	}
}
