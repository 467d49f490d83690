package client

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// Client receive path: Deliver frames decoded by a wire.Reader (as
// internal/quic's ClientConn does) and handed to the application. One op
// is one delivery seen by the application; with -benchmem, allocs/op is
// what the client library allocates per delivery.
//
//	go test -run '^$' -bench ClientReceive -benchmem ./client

// streamConn plays a broker that answers the Subscribe and then sends the
// same Deliver frame forever, decoded from a byte stream.
type streamConn struct {
	ctl    chan message.Message
	closed chan struct{}
	once   sync.Once
	rd     *wire.Reader
	src    *bytes.Reader
	stream []byte
}

func newStreamConn(b *testing.B) *streamConn {
	d := &message.Deliver{Sub: message.SubID{Edge: "B1", Epoch: 1, N: 1},
		Pub: message.PubID{Publisher: "bench", Epoch: 1, Seq: 1}, Time: time.Now().UnixNano(),
		Attrs: []matching.Attr{
			{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "STOCK"}},
			{Name: "symbol", Value: matching.Value{Kind: matching.KindString, Str: "IBM"}},
			{Name: "price", Value: matching.Value{Kind: matching.KindFloat, Float: 101.25}},
			{Name: "volume", Value: matching.Value{Kind: matching.KindInt, Int: 1 << 20}},
		}, Payload: bytes.Repeat([]byte{'x'}, 250)}
	f, err := wire.AppendFrame(nil, d)
	if err != nil {
		b.Fatal(err)
	}
	c := &streamConn{ctl: make(chan message.Message, 4), closed: make(chan struct{}), stream: bytes.Repeat(f, 256)}
	c.src = bytes.NewReader(c.stream)
	c.rd = wire.NewReader(c.src, 0)
	return c
}

func (c *streamConn) Send(m message.Message) error {
	if s, ok := m.(*message.Subscribe); ok {
		c.ctl <- &message.SubAck{Req: s.Req, Sub: message.SubID{Edge: "B1", Epoch: 1, N: 1}, Confirmed: true}
	}
	return nil
}

func (c *streamConn) Recv() (message.Message, error) {
	select {
	case m := <-c.ctl:
		return m, nil
	case <-c.closed:
		return nil, errors.New("closed")
	default:
	}
	if c.src.Len() == 0 {
		c.src.Reset(c.stream)
	}
	return c.rd.Read()
}

func (c *streamConn) Close() error { c.once.Do(func() { close(c.closed) }); return nil }

func benchClient(b *testing.B) (*Client, *streamConn) {
	conn := newStreamConn(b)
	c, err := Connect(context.Background(), "bench", Options{Dial: func(context.Context, string) (Conn, error) { return conn, nil }})
	if err != nil {
		b.Fatal(err)
	}
	return c, conn
}

// BenchmarkClientReceiveChan: deliveries read from Subscription.C.
func BenchmarkClientReceiveChan(b *testing.B) {
	c, _ := benchClient(b)
	defer c.Close()
	sub, err := c.Subscribe(context.Background(), matching.Filter{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		d, ok := <-sub.C
		if !ok {
			b.Fatal(sub.Err())
		}
		n += len(d.Payload)
	}
	if n == 0 {
		b.Fatal("no payload")
	}
}
