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

func newStreamConn(b *testing.B, set bool) *streamConn {
	d := &message.Deliver{Sub: message.SubID{Edge: "B1", Epoch: 1, N: 1},
		Pub: message.PubID{Publisher: "bench", Epoch: 1, Seq: 1}, Time: time.Now().UnixNano(),
		Attrs: []matching.Attr{
			{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "STOCK"}},
			{Name: "symbol", Value: matching.Value{Kind: matching.KindString, Str: "IBM"}},
			{Name: "price", Value: matching.Value{Kind: matching.KindFloat, Float: 101.25}},
			{Name: "volume", Value: matching.Value{Kind: matching.KindInt, Int: 1 << 20}},
		}, Payload: bytes.Repeat([]byte{'x'}, 250)}
	var m message.Message = d
	if set { // what a broker sends a client of protocol version 2
		m = &message.DeliverSet{Subs: []uint64{d.Sub.N}, Pub: d.Pub, Attrs: d.Attrs, Payload: d.Payload, Time: d.Time}
	}
	f, err := wire.AppendFrame(nil, m)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(f)), "frame_bytes")
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

func benchClient(b *testing.B, set bool) (*Client, *streamConn) {
	conn := newStreamConn(b, set)
	c, err := Connect(context.Background(), "bench", Options{Dial: func(context.Context, string) (Conn, error) { return conn, nil }})
	if err != nil {
		b.Fatal(err)
	}
	return c, conn
}

// BenchmarkClientReceiveChan: Deliver frames, read from Subscription.C.
func BenchmarkClientReceiveChan(b *testing.B) { benchReceiveChan(b, false) }

// BenchmarkClientReceiveChanSet: DeliverSet frames, read from C.
func BenchmarkClientReceiveChanSet(b *testing.B) { benchReceiveChan(b, true) }

func benchReceiveChan(b *testing.B, set bool) {
	c, _ := benchClient(b, set)
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

// BenchmarkClientReceiveFunc: DeliverSet frames handed to a SubscribeFunc
// handler on the receive goroutine (no channel, no goroutine switch).
func BenchmarkClientReceiveFunc(b *testing.B) {
	c, _ := benchClient(b, true)
	defer c.Close()
	// The handler counts; the benchmark goroutine waits for b.N of them.
	var (
		mu     sync.Mutex
		n      int
		target = -1
		done   = make(chan struct{})
	)
	_, err := c.SubscribeFunc(context.Background(), matching.Filter{}, func(d Delivery) {
		mu.Lock()
		n++
		if n == target {
			close(done)
		}
		mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	mu.Lock()
	target = n + b.N
	mu.Unlock()
	<-done
}

// pubConn plays a broker for a publisher: it encodes every Publish as
// internal/quic would and acknowledges every 64th (acknowledgements are
// cumulative, and brokers coalesce them).
type pubConn struct {
	enc    *wire.Encoder
	buf    []byte
	ctl    chan message.Message
	closed chan struct{}
	once   sync.Once
}

func (c *pubConn) Send(m message.Message) error {
	c.buf, _ = c.enc.AppendFrame(c.buf[:0], m)
	if p, ok := m.(*message.Publish); ok && p.Seq%64 == 0 {
		c.ctl <- &message.PubAck{Seq: p.Seq}
	}
	return nil
}

func (c *pubConn) Recv() (message.Message, error) {
	select {
	case m := <-c.ctl:
		return m, nil
	case <-c.closed:
		return nil, errors.New("closed")
	}
}

func (c *pubConn) Close() error { c.once.Do(func() { close(c.closed) }); return nil }

// BenchmarkClientPublishAsync: the publisher's cost per publication (the
// harness of bench compare publishes this way).
func BenchmarkClientPublishAsync(b *testing.B) {
	conn := &pubConn{enc: wire.NewEncoder(), ctl: make(chan message.Message, 1024), closed: make(chan struct{})}
	c, err := Connect(context.Background(), "bench", Options{MaxInFlight: 4096,
		Dial: func(context.Context, string) (Conn, error) { return conn, nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	pub := matching.Publication{Attrs: []matching.Attr{
		{Name: "class", Value: matching.Str("STOCK")}, {Name: "price", Value: matching.Float(101.25)}},
		Payload: bytes.Repeat([]byte{'x'}, 250)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.PublishAsync(context.Background(), pub); err != nil {
			b.Fatal(err)
		}
	}
}
