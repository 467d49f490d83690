package client

import (
	"runtime"
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

// When the client closes while deliveries flow, the application gets a
// prefix of them, and the token forgets what it did not get: the select
// between a free C and the closed client picks at random, and a delivery
// dropped there while a later one was handed on was counted consumed by
// the later one's token, so a resume from it never got it.
func TestClosedClientHandsOnAPrefixAndTheTokenForgetsTheRest(t *testing.T) {
	s := &Subscription{ch: make(chan Delivery, 1000), stop: make(chan struct{}),
		dur: &durable{name: "D1", tok: checkpoint.Token{Name: "D1"}}}
	done := make(chan struct{})
	close(done) // the client is closing
	for seq := uint64(1); seq <= 200; seq++ {
		s.deliver(Delivery{Pub: message.PubID{Publisher: "P1", Epoch: 1, Seq: seq}}, &gate{done: done})
	}
	close(s.ch)
	var last uint64
	for d := range s.ch {
		if d.Pub.Seq != last+1 {
			t.Fatalf("handed on seq %d after %d", d.Pub.Seq, last)
		}
		last = d.Pub.Seq
	}
	tok, err := checkpoint.Decode(s.Token())
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Get(message.Source{Publisher: "P1", Epoch: 1}).Seq; got != last {
		t.Errorf("token says seq %d consumed, the application got up to %d", got, last)
	}
}

// TestTokenNamesOnlyHandedDeliveries: a delivery waiting for room on C
// is not in the token until it is taken, and one waiting when the client
// closes is dropped and never counted (a reconnect elsewhere with Token
// then gets it again instead of losing it). After the close nothing is
// handed on, even with room on C.
func TestTokenNamesOnlyHandedDeliveries(t *testing.T) {
	newSub := func(room int) *Subscription {
		s := &Subscription{ch: make(chan Delivery, room), stop: make(chan struct{}), dur: &durable{name: "d", tok: checkpoint.Token{Name: "d"}}}
		s.C = s.ch
		return s
	}
	pub := func(seq uint64) Delivery {
		return Delivery{Pub: message.PubID{Publisher: "p", Epoch: 1, Seq: seq}}
	}
	s := newSub(0)
	before := string(s.Token())
	done := make(chan struct{})
	waiting := make(chan struct{})
	go func() { s.deliver(pub(1), &gate{done: done}); close(waiting) }()
	for range 1000 { // while deliver waits for room on C
		if string(s.Token()) != before {
			t.Fatal("the token counts a delivery not taken yet")
		}
		runtime.Gosched()
	}
	d := <-s.C
	<-waiting
	if string(s.Token()) == before || string(d.Token) != string(s.Token()) {
		t.Fatal("a taken delivery is not in the token")
	}
	one := string(s.Token())
	waiting = make(chan struct{})
	go func() { s.deliver(pub(2), &gate{done: done}); close(waiting) }()
	runtime.Gosched()
	close(done)
	<-waiting
	if string(s.Token()) != one {
		t.Fatal("the token counts a delivery dropped at the close")
	}
	for range 100 {
		s := newSub(1)
		empty := string(s.Token())
		s.deliver(pub(1), &gate{done: done})
		if len(s.C) != 0 || string(s.Token()) != empty {
			t.Fatal("handed on after the close")
		}
	}
}
