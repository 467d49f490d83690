package quic

import (
	"context"
	"crypto/tls"
	"net"
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

// BenchmarkSessionSend: a broker session sends 250-byte publications to
// its client, one Send per frame from one goroutine, counted by the
// client's Recv; the same session code over each carrier. cpu-ns/msg is
// the CPU time of the whole process (broker session, client, kernel) per
// publication: on a busy machine it moves less than the rate. frames/write
// is how many frames the session's writer put in one write (one writev on
// TCP; a stream write, then a sendmsg per packet, on QUIC).
func BenchmarkSessionSend(b *testing.B) {
	for _, tr := range []string{"quic", "tcp", "tls"} {
		b.Run(tr, func(b *testing.B) { benchSessionSend(b, tr) })
	}
}

func benchSessionSend(b *testing.B, transport string) {
	rec := newRecorder()
	ep, err := Listen(Config{ID: "B1", Listen: "127.0.0.1:0", Log: zerolog.Nop()}, rec)
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	addr := ep.Addr().String()
	if transport != "quic" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		if transport == "tls" {
			cert, err := selfSigned()
			if err != nil {
				b.Fatal(err)
			}
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				ep.ServeConn(c)
			}
		}()
		addr = transport + "://" + ln.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := DialClient(ctx, addr, "")
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	var s *Session
	for range 1000 {
		rec.mu.Lock()
		if len(rec.cups) > 0 {
			s = rec.cups[0]
		}
		rec.mu.Unlock()
		if s != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if s == nil {
		b.Fatal("no session")
	}
	n := max(b.N, 1000)
	got := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if _, err := cc.Recv(); err != nil {
				got <- err
				return
			}
		}
		got <- nil
	}()
	p := baseline.Publication(250)
	b.SetBytes(250)
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for i := 0; i < n; i++ {
		p.Seq = uint64(i)
		if err := s.Send(p); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			b.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		b.Fatal("the client did not receive everything")
	}
	b.StopTimer() // not the closes
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(n), "cpu-ns/msg")
	st := s.Stats()
	b.ReportMetric(float64(st.FramesQueued)/float64(max(st.Writes, 1)), "frames/write")
}
