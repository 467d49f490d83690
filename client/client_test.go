package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// memConn is one end of an in-memory connection; the test plays the broker
// on the other end (fakeBroker).
type memConn struct {
	toClient   chan message.Message
	fromClient chan message.Message
	closed     chan struct{}
	once       sync.Once
}

func newMemConn() *memConn {
	return &memConn{toClient: make(chan message.Message, 64), fromClient: make(chan message.Message, 64), closed: make(chan struct{})}
}

func (c *memConn) Send(m message.Message) error {
	select {
	case <-c.closed:
		return errors.New("closed")
	default:
	}
	select {
	case c.fromClient <- m:
		return nil
	case <-c.closed:
		return errors.New("closed")
	}
}

func (c *memConn) Recv() (message.Message, error) {
	select {
	case m := <-c.toClient:
		return m, nil
	case <-c.closed:
		return nil, errors.New("closed")
	}
}

func (c *memConn) Close() error { c.once.Do(func() { close(c.closed) }); return nil }

// broker side helpers
func (c *memConn) next(t *testing.T) message.Message {
	t.Helper()
	select {
	case m := <-c.fromClient:
		return m
	case <-time.After(time.Minute): // virtual time: only reached if the client is stuck
		t.Fatal("no message from the client")
		return nil
	}
}

func (c *memConn) reply(m message.Message) { c.toClient <- m }

// dialer hands out the connections of conns in order.
func dialer(conns ...*memConn) DialFunc {
	var mu sync.Mutex
	return func(ctx context.Context, addr string) (Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(conns) == 0 {
			return nil, errors.New("refused")
		}
		c := conns[0]
		conns = conns[1:]
		return c, nil
	}
}

func pub(n int64) matching.Publication {
	return matching.Publication{Attrs: []matching.Attr{{Name: "n", Value: matching.Value{Kind: matching.KindInt, Int: n}}}}
}

func expectPublish(t *testing.T, c *memConn, seq uint64) *message.Publish {
	t.Helper()
	m := c.next(t)
	p, ok := m.(*message.Publish)
	if !ok || p.Seq != seq {
		t.Fatalf("broker got %T %+v, want Publish seq %d", m, m, seq)
	}
	return p
}

func TestPublishAcknowledgedInSequence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := newMemConn()
		c, err := Connect(t.Context(), "b", Options{Dial: dialer(conn), Publisher: "p", Epoch: 7})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if h, ok := conn.next(t).(*message.ClientHello); !ok || h.Publisher != "p" || h.Epoch != 7 {
			t.Fatalf("first message %+v, want ClientHello p/7", h)
		}
		var res [3]<-chan error
		for i := range res {
			if res[i], err = c.PublishAsync(t.Context(), pub(int64(i+1))); err != nil {
				t.Fatal(err)
			}
		}
		for i := range res {
			expectPublish(t, conn, uint64(i+1))
		}
		conn.reply(&message.PubAck{Seq: 3}) // cumulative
		for i := range res {
			if err := <-res[i]; err != nil {
				t.Errorf("publication %d: %v", i+1, err)
			}
		}
	})
}

// connectMem connects a client with default options to a fresh memConn
// (the fake broker) and reads its hello. The caller closes the client.
func connectMem(t *testing.T) (*Client, *memConn) {
	t.Helper()
	conn := newMemConn()
	c, err := Connect(t.Context(), "b", Options{Dial: dialer(conn)})
	if err != nil {
		t.Fatal(err)
	}
	conn.next(t) // hello
	return c, conn
}

func TestBackpressureRetransmitsFromTheRefusedOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		var res [3]<-chan error
		for i := range res {
			res[i], _ = c.PublishAsync(t.Context(), pub(int64(i+1)))
			expectPublish(t, conn, uint64(i+1))
		}
		// The broker accepts 1 and refuses 2 and 3.
		conn.reply(&message.PubAck{Seq: 1})
		conn.reply(&message.PubAck{Seq: 2, Err: "backpressure"})
		conn.reply(&message.PubAck{Seq: 3, Err: "backpressure"})
		if err := <-res[0]; err != nil {
			t.Fatal(err)
		}
		// Let the client read the two refusals before publishing again
		// (the acknowledgement of 1 can be seen before them).
		synctest.Wait()
		// A publication made during backpressure is held, not sent.
		res4, _ := c.PublishAsync(t.Context(), pub(4))
		synctest.Wait()
		select {
		case m := <-conn.fromClient:
			t.Fatalf("sent %+v during backpressure", m)
		default:
		}
		// After the pause: 2, 3 and 4 again, in order, exactly once.
		for seq := uint64(2); seq <= 4; seq++ {
			expectPublish(t, conn, seq)
		}
		conn.reply(&message.PubAck{Seq: 4})
		for i, ch := range []<-chan error{res[1], res[2], res4} {
			if err := <-ch; err != nil {
				t.Errorf("publication %d: %v", i+2, err)
			}
		}
		synctest.Wait()
		select {
		case m := <-conn.fromClient:
			t.Fatalf("unexpected %+v after the acknowledgement", m)
		default:
		}
	})
}

func TestReconnectResendsUnacknowledgedWithSameIdentity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first, second := newMemConn(), newMemConn()
		c, err := Connect(t.Context(), "b", Options{Dial: dialer(first, second), Reconnect: true, Publisher: "p", Epoch: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		first.next(t)
		r1, _ := c.PublishAsync(t.Context(), pub(1))
		r2, _ := c.PublishAsync(t.Context(), pub(2))
		expectPublish(t, first, 1)
		p2 := expectPublish(t, first, 2)
		first.reply(&message.PubAck{Seq: 1})
		if err := <-r1; err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the ack is processed before the connection dies
		first.Close()
		if h, ok := second.next(t).(*message.ClientHello); !ok || h.Publisher != "p" || h.Epoch != 3 {
			t.Fatalf("after reconnect: %+v, want ClientHello p/3", h)
		}
		again := expectPublish(t, second, 2)
		if again.Time != p2.Time || again.Attrs[0] != p2.Attrs[0] {
			t.Errorf("resent publication differs: %+v vs %+v", again, p2)
		}
		second.reply(&message.PubAck{Seq: 2})
		if err := <-r2; err != nil {
			t.Fatal(err)
		}
	})
}

func TestSubscribeDeliverConfirmUnsubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		id := message.SubID{Edge: "B1", Epoch: 1, N: 5}
		go func() {
			s := conn.next(t).(*message.Subscribe)
			conn.reply(&message.SubAck{Req: s.Req, Sub: id})
			conn.reply(&message.Deliver{Sub: id, Pub: message.PubID{Publisher: "x", Epoch: 1, Seq: 1}, Time: 1})
			conn.reply(&message.SubAck{Req: s.Req, Sub: id, Confirmed: true})
			conn.reply(&message.Gap{Sub: id, Source: message.Source{Publisher: "x", Epoch: 1}, From: 2, To: 4})
		}()
		sub, err := c.Subscribe(t.Context(), matching.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if sub.ID() != id {
			t.Errorf("sub id %v, want %v", sub.ID(), id)
		}
		d := <-sub.C
		if d.Pub.Seq != 1 || d.Gap != nil {
			t.Errorf("first delivery %+v", d)
		}
		if err := sub.WaitConfirmed(t.Context()); err != nil {
			t.Fatal(err)
		}
		if g := <-sub.C; g.Gap == nil || g.Gap.From != 2 || g.Gap.To != 4 {
			t.Errorf("second delivery %+v, want the gap 2..4", g)
		}
		go func() {
			u := conn.next(t).(*message.Unsubscribe)
			conn.reply(&message.UnsubAck{Sub: u.Sub})
		}()
		if err := sub.Unsubscribe(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, open := <-sub.C; open {
			t.Error("C still open after Unsubscribe")
		}
		if sub.Err() != nil {
			t.Errorf("Err after a clean unsubscribe: %v", sub.Err())
		}
	})
}

func TestSubscribeRefusedAndCloseEndsEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conn := newMemConn()
		c, err := Connect(t.Context(), "b", Options{Dial: dialer(conn)})
		if err != nil {
			t.Fatal(err)
		}
		conn.next(t)
		go func() {
			s := conn.next(t).(*message.Subscribe)
			conn.reply(&message.SubAck{Req: s.Req, Err: "too many subscriptions"})
		}()
		if _, err := c.Subscribe(t.Context(), matching.Filter{}); err == nil {
			t.Fatal("refused subscription returned no error")
		}
		res, _ := c.PublishAsync(t.Context(), pub(1))
		c.Close()
		if err := <-res; !errors.Is(err, ErrClosed) {
			t.Errorf("pending publication after Close: %v, want ErrClosed", err)
		}
		if err := c.Publish(t.Context(), pub(2)); !errors.Is(err, ErrClosed) {
			t.Errorf("Publish after Close: %v", err)
		}
	})
}

// TestRefusalBeforeTheAckOfTheRetransmission: a refusal of a later
// publication may overtake the acknowledgement of an earlier one (the
// broker's runtime refuses at once, the core acknowledges a moment later);
// the refused publication must still be sent again.
func TestRefusalBeforeTheAckOfTheRetransmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		var res [3]<-chan error
		for i := range res {
			res[i], _ = c.PublishAsync(t.Context(), pub(int64(i+1)))
			expectPublish(t, conn, uint64(i+1))
		}
		for seq := uint64(1); seq <= 3; seq++ {
			conn.reply(&message.PubAck{Seq: seq, Err: "backpressure"})
		}
		for seq := uint64(1); seq <= 3; seq++ {
			expectPublish(t, conn, seq)
		}
		// 2 refused (a gap after a refusal), overtaking the ack of 1.
		conn.reply(&message.PubAck{Seq: 2, Err: "sequence gap: expected 1"})
		conn.reply(&message.PubAck{Seq: 1})
		conn.reply(&message.PubAck{Seq: 3, Err: "sequence gap: expected 2"})
		if err := <-res[0]; err != nil {
			t.Fatal(err)
		}
		expectPublish(t, conn, 2)
		expectPublish(t, conn, 3)
		conn.reply(&message.PubAck{Seq: 3})
		for i, ch := range res[1:] {
			if err := <-ch; err != nil {
				t.Errorf("publication %d: %v", i+2, err)
			}
		}
	})
}

// TestFinalRefusalFailsTheClient: a refusal that is neither backpressure
// nor a gap breaks the stream: the client fails with the broker's reason.
func TestFinalRefusalFailsTheClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		res, _ := c.PublishAsync(t.Context(), pub(1))
		expectPublish(t, conn, 1)
		conn.reply(&message.PubAck{Seq: 1, Err: "attribute limit exceeded"})
		if err := <-res; err == nil || !strings.Contains(err.Error(), "attribute limit exceeded") {
			t.Errorf("outcome %v, want the broker's reason", err)
		}
		if err := c.Publish(t.Context(), pub(2)); err == nil {
			t.Error("Publish after a final refusal succeeded")
		}
	})
}

// TestStaleRefusalDoesNotHoldPublicationsForever: a stale refusal (of a
// copy sent before the retransmission) schedules another retransmission,
// but the acknowledgement makes it moot; when its timer fires the client
// must resume and send what it held meanwhile.
func TestStaleRefusalDoesNotHoldPublicationsForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		for i := 1; i <= 3; i++ {
			c.PublishAsync(t.Context(), pub(int64(i)))
			expectPublish(t, conn, uint64(i))
		}
		conn.reply(&message.PubAck{Seq: 1, Err: "backpressure"})
		for seq := uint64(1); seq <= 3; seq++ {
			expectPublish(t, conn, seq) // the retransmission
		}
		conn.reply(&message.PubAck{Seq: 3, Err: "sequence gap: expected 1"}) // stale: the first copy of 3
		conn.reply(&message.PubAck{Seq: 3})                                  // the retransmission accepted
		synctest.Wait()
		res4, _ := c.PublishAsync(t.Context(), pub(4)) // held: still in backpressure until the timer fires
		expectPublish(t, conn, 4)
		conn.reply(&message.PubAck{Seq: 4})
		if err := <-res4; err != nil {
			t.Fatal(err)
		}
	})
}

// A publication naming an attribute twice is refused before it is sent
// (the broker would refuse it too): no sequence number is used, so the
// next publication is Seq 1.
func TestPublishRefusesRepeatedAttribute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		bad := pub(1)
		bad.Attrs = append(bad.Attrs, bad.Attrs[0])
		if _, err := c.PublishAsync(t.Context(), bad); err == nil || !strings.Contains(err.Error(), `"n" appears twice`) {
			t.Fatalf("PublishAsync of a repeated attribute: err %v, want appears twice", err)
		}
		if _, err := c.PublishAsync(t.Context(), pub(2)); err != nil {
			t.Fatal(err)
		}
		expectPublish(t, conn, 1)
	})
}

// TestPublishAfterResumeSendsTheHeldOnesFirst: publications held during a
// refusal are sent by a flush on its own goroutine once the retransmission
// is acknowledged; a publication made before that flush runs must not go
// out first. Sent alone it leaves a hole the broker refuses ("sequence
// gap") under every retransmission from it on, until the client gives up
// on its whole window (the failover benchmark's loss at 10,000 msgs/s).
func TestPublishAfterResumeSendsTheHeldOnesFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		var flushes []func()
		c.mu.Lock()
		c.startFlush = func() { flushes = append(flushes, c.flushUnsent) } // run late, by the test
		c.mu.Unlock()
		var res []<-chan error
		publish := func(n int64) {
			ch, err := c.PublishAsync(t.Context(), pub(n))
			if err != nil {
				t.Fatal(err)
			}
			res = append(res, ch)
		}
		publish(1)
		expectPublish(t, conn, 1)
		conn.reply(&message.PubAck{Seq: 1, Err: "backpressure"})
		synctest.Wait()
		publish(2)                // held
		expectPublish(t, conn, 1) // the retransmission, after the pause
		expectPublish(t, conn, 2)
		publish(3)                          // held: the retransmission is not acknowledged yet
		conn.reply(&message.PubAck{Seq: 2}) // ends the refusal: the flush of 3 is started
		synctest.Wait()
		publish(4) // before the flush ran
		for _, f := range flushes {
			f()
		}
		expectPublish(t, conn, 3)
		expectPublish(t, conn, 4)
		conn.reply(&message.PubAck{Seq: 4})
		for i, ch := range res {
			if err := <-ch; err != nil {
				t.Errorf("publication %d: %v", i+1, err)
			}
		}
	})
}

// TestGapRefusalResumesWhereTheBrokerSays: "sequence gap: expected N"
// names the first publication the broker is missing; the client sends
// everything again from N, even when it never saw N refused (its refusal
// was lost or never made), instead of retrying the refused one into the
// same answer.
func TestGapRefusalResumesWhereTheBrokerSays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, conn := connectMem(t)
		defer c.Close()
		var res [3]<-chan error
		for i := range res {
			res[i], _ = c.PublishAsync(t.Context(), pub(int64(i+1)))
			expectPublish(t, conn, uint64(i+1))
		}
		conn.reply(&message.PubAck{Seq: 1})
		conn.reply(&message.PubAck{Seq: 3, Err: "sequence gap: expected 2"})
		expectPublish(t, conn, 2)
		expectPublish(t, conn, 3)
		conn.reply(&message.PubAck{Seq: 3})
		for i, ch := range res {
			if err := <-ch; err != nil {
				t.Errorf("publication %d: %v", i+1, err)
			}
		}
	})
}
