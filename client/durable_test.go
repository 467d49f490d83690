package client

import (
	"testing"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// TestDurableResumeSendsAnEmptyToken: a durable subscription resumed from
// a token with no entry yet (nothing matched before the disconnect) must
// still hand the token over: without one the broker makes a new
// subscription starting now, skipping what was published while away.
func TestDurableResumeSendsAnEmptyToken(t *testing.T) {
	for _, tc := range []struct {
		name   string
		token  []byte
		resume bool
	}{
		{"new", nil, false},
		{"resumed with no entry", func() []byte { tok := checkpoint.Token{Name: "d"}; return tok.Encode() }(), true},
	} {
		c, conn := connectMem(t)
		f, err := matching.ParseFilter("[class,eq,'a']")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.SubscribeDurable(t.Context(), "d", f, tc.token)
			done <- err
		}()
		m, ok := conn.next(t).(*message.Subscribe)
		if !ok || m.Durable != "d" {
			t.Fatalf("%s: sent %+v, want a durable Subscribe", tc.name, m)
		}
		if got := len(m.Token) > 0; got != tc.resume {
			t.Errorf("%s: Subscribe carries a token: %v, want %v", tc.name, got, tc.resume)
		}
		conn.reply(&message.SubAck{Req: m.Req, Sub: message.SubID{Edge: "b", Epoch: 1, N: 1}})
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c.Close()
	}
}
