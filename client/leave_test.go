package client

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// TestSubscriptionEndedByLeavingBroker: an UnsubAck the client did not ask
// for (its broker is leaving the overlay) ends the subscription with an
// error that says why.
func TestSubscriptionEndedByLeavingBroker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		id := message.SubID{Edge: "B1", Epoch: 1, N: 7}
		subscribed := make(chan struct{})
		go func() {
			s := conn.next(t).(*message.Subscribe)
			conn.reply(&message.SubAck{Req: s.Req, Sub: id, Confirmed: true})
			<-subscribed
			conn.reply(&message.UnsubAck{Sub: id, Err: "leaving: this broker is leaving the overlay; reconnect to another broker"})
		}()
		sub, err := c.Subscribe(t.Context(), matching.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		close(subscribed)
		if _, open := <-sub.C; open {
			t.Fatal("a delivery instead of the end of the subscription")
		}
		if err := sub.Err(); err == nil || !strings.Contains(err.Error(), "leaving") {
			t.Fatalf("Err = %v, want the broker's reason", err)
		}
	})
}
