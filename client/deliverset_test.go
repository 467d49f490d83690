package client

import (
	"sync"
	"testing"
	"testing/synctest"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// A DeliverSet (protocol version 2) reaches every subscription it names,
// through C or a SubscribeFunc handler, with the publication's identity;
// unknown subscriptions are ignored; after Unsubscribe the handler is not
// called again and C is closed.
func TestDeliverSetAndSubscribeFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		idA := message.SubID{Edge: "B1", Epoch: 9, N: 3}
		idB := message.SubID{Edge: "B1", Epoch: 9, N: 4}
		go func() {
			s := conn.next(t).(*message.Subscribe)
			conn.reply(&message.SubAck{Req: s.Req, Sub: idA, Confirmed: true})
		}()
		subA, err := c.Subscribe(t.Context(), matching.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []Delivery
		go func() {
			s := conn.next(t).(*message.Subscribe)
			conn.reply(&message.SubAck{Req: s.Req, Sub: idB, Confirmed: true})
		}()
		subB, err := c.SubscribeFunc(t.Context(), matching.Filter{}, func(d Delivery) {
			mu.Lock()
			got = append(got, d)
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		pub := message.PubID{Publisher: "x", Epoch: 1, Seq: 7}
		conn.reply(&message.DeliverSet{Subs: []uint64{3, 4, 99}, Pub: pub, Payload: []byte("hi"), Time: 5})
		d := <-subA.C
		if d.Sub != idA || d.Pub != pub || string(d.Payload) != "hi" || d.PublishedAt.UnixNano() != 5 {
			t.Fatalf("delivery through C: %+v", d)
		}
		synctest.Wait()
		mu.Lock()
		if len(got) != 1 || got[0].Sub != idB || got[0].Pub != pub {
			t.Fatalf("handler got %+v, want one delivery of %v to %v", got, pub, idB)
		}
		mu.Unlock()
		if _, err := c.SubscribeFunc(t.Context(), matching.Filter{}, nil); err == nil {
			t.Fatal("SubscribeFunc accepted a nil handler")
		}
		go func() {
			u := conn.next(t).(*message.Unsubscribe)
			conn.reply(&message.UnsubAck{Sub: u.Sub})
		}()
		if err := subB.Unsubscribe(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, open := <-subB.C; open {
			t.Fatal("C of a SubscribeFunc subscription still open after Unsubscribe")
		}
		pub.Seq++
		conn.reply(&message.DeliverSet{Subs: []uint64{4, 3}, Pub: pub})
		if d := <-subA.C; d.Pub != pub {
			t.Fatalf("second delivery %+v", d)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 {
			t.Fatalf("handler called after Unsubscribe: %+v", got[1:])
		}
	})
}
