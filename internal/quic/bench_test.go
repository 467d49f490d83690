package quic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/quic/baseline"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// countingHandler counts PeerMessages and closes done at target.
type countingHandler struct {
	recorder
	n      atomic.Int64
	target int64
	done   chan struct{}
}

func (h *countingHandler) PeerMessage(l *Link, m message.Message) {
	if h.n.Add(1) == h.target {
		close(h.done)
	}
}

// batchCounter counts batches of messages.
type batchCounter struct{ countingHandler }

func (h *batchCounter) PeerMessages(l *Link, ms []message.Message) {
	if h.n.Add(int64(len(ms))) == h.target {
		close(h.done)
	}
}
func (h *batchCounter) ClientMessages(*Session, []message.Message) {}

// BenchmarkLinkThroughput: 250-byte publications over one loopback link,
// Send from one goroutine, counted by the receiver's handler.
func BenchmarkLinkThroughput(b *testing.B) { benchLink(b, false) }

// BenchmarkLinkThroughputBatch: the same with a BatchHandler.
func BenchmarkLinkThroughputBatch(b *testing.B) { benchLink(b, true) }

func benchLink(b *testing.B, batch bool) {
	n := b.N
	if n < 1000 {
		n = 1000
	}
	var h Handler
	ch := &countingHandler{recorder: *newRecorder(), target: int64(n), done: make(chan struct{})}
	recv := ch
	h = ch
	if batch {
		bc := &batchCounter{countingHandler: countingHandler{recorder: *newRecorder(), target: int64(n), done: make(chan struct{})}}
		recv, h = &bc.countingHandler, bc
	}
	cfg := func(id string) Config {
		return Config{ID: message.BrokerID(id), Listen: "127.0.0.1:0", Secret: []byte("s"), Log: zerolog.Nop()}
	}
	a, err := Listen(cfg("B1"), newRecorder())
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	bb, err := Listen(cfg("B2"), h)
	if err != nil {
		b.Fatal(err)
	}
	defer bb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := a.Dial(ctx, "B2", bb.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	p := baseline.Publication(250)
	b.SetBytes(250)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < n; i++ {
		p.Seq = uint64(i)
		if err := l.Send(p); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-recv.done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("received %d of %d", recv.n.Load(), n)
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
}
