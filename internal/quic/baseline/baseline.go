// Package baseline measures the physical limit of deltapub's transport: a
// bare quic-go relay chain with no protocol. A publisher sends n
// publications to a chain of relays, each of which decodes and re-encodes
// every message (the same wire codec the brokers use) and forwards it in
// batched writes, to a subscriber. `deltapub bench overlay` runs it in the
// same process and reports the broker chain's throughput as a ratio of it.
package baseline

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sync"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/quic-go/quic-go"
)

const alpn = "deltapub-baseline"

// batchBytes is the size at which a hop writes its batch even if more
// frames are ready: large writes amortise QUIC's per-call cost, and 64 KiB
// keeps latency bounded.
const batchBytes = 64 << 10

// PublisherBatch is how many messages the publisher encodes per write.
const PublisherBatch = 64

// Options of a run; zero values are the defaults.
type Options struct {
	Messages int // number of messages; default 200,000
	Relays   int // relays between publisher and subscriber; default 3
	Size     int // frame size in bytes; default 250
	// Timeout bounds the whole run; default 2 minutes.
	Timeout time.Duration
}

// Result of a run.
type Result struct {
	Messages   int
	Relays     int
	FrameBytes int
	Elapsed    time.Duration // first write to last message received
	MsgsPerSec float64
}

func (r Result) String() string {
	return fmt.Sprintf("%d msgs of %d B through %d relays in %v: %.0f msgs/s",
		r.Messages, r.FrameBytes, r.Relays, r.Elapsed.Round(time.Millisecond), r.MsgsPerSec)
}

// MsgsPerSec runs a chain of 3 relays with n messages of 250 bytes and
// returns the throughput: the baseline of `deltapub bench overlay`.
func MsgsPerSec(n int) (float64, error) {
	r, err := Run(context.Background(), Options{Messages: n})
	return r.MsgsPerSec, err
}

// Publication returns the message the run sends: a publication whose frame
// is size bytes (4 typed attributes and a payload filling the rest).
func Publication(size int) *message.Publish {
	p := &message.Publish{Seq: 1 << 20, Time: time.Now().UnixNano(), Attrs: []matching.Attr{
		{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "STOCK"}},
		{Name: "symbol", Value: matching.Value{Kind: matching.KindString, Str: "IBM"}},
		{Name: "price", Value: matching.Value{Kind: matching.KindFloat, Float: 101.25}},
		{Name: "n", Value: matching.Value{Kind: matching.KindInt, Int: 1 << 20}},
	}}
	f, _ := wire.AppendFrame(nil, p)
	if pad := size - len(f) - 3; pad > 0 {
		p.Payload = make([]byte, pad)
		for {
			f, _ = wire.AppendFrame(f[:0], p)
			if len(f) <= size || len(p.Payload) == 0 {
				break
			}
			p.Payload = p.Payload[:len(p.Payload)-1]
		}
	}
	return p
}

// Run runs one chain on 127.0.0.1.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Messages <= 0 {
		o.Messages = 200_000
	}
	if o.Relays < 0 {
		return Result{}, errors.New("baseline: negative relay count")
	}
	if o.Relays == 0 {
		o.Relays = 3
	}
	if o.Size <= 0 {
		o.Size = 250
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	srvTLS, cliTLS, err := tlsPair()
	if err != nil {
		return Result{}, err
	}
	qconf := &quic.Config{
		// the same windows as internal/quic's links
		InitialStreamReceiveWindow:     1 << 20,
		MaxStreamReceiveWindow:         8 << 20,
		InitialConnectionReceiveWindow: 3 << 19,
		MaxConnectionReceiveWindow:     12 << 20,
		MaxIdleTimeout:                 30 * time.Second,
	}
	// closers is appended to by the relays' goroutines (their dials) and
	// by this one: closersMu guards it.
	var (
		closersMu sync.Mutex
		closers   []io.Closer
	)
	addCloser := func(c io.Closer) {
		closersMu.Lock()
		closers = append(closers, c)
		closersMu.Unlock()
	}
	defer func() {
		closersMu.Lock()
		defer closersMu.Unlock()
		for _, c := range closers {
			_ = c.Close()
		}
	}()
	// Hops from the subscriber backwards: each listens, the previous dials.
	listen := func() (*quic.Listener, error) {
		ln, err := quic.ListenAddr("127.0.0.1:0", srvTLS, qconf)
		if err == nil {
			addCloser(ln)
		}
		return ln, err
	}
	accept := func(ln *quic.Listener) (*quic.Stream, error) {
		c, err := ln.Accept(ctx)
		if err != nil {
			return nil, err
		}
		return c.AcceptStream(ctx)
	}
	dial := func(addr string) (*quic.Stream, error) {
		c, err := quic.DialAddr(ctx, addr, cliTLS, qconf)
		if err != nil {
			return nil, err
		}
		addCloser(closerFunc(func() error { return c.CloseWithError(0, "") }))
		s, err := c.OpenStreamSync(ctx)
		if err != nil {
			return nil, err
		}
		// The stream shows up at the acceptor with its first byte: send an
		// empty-ish hello frame (a zero-length Ready).
		b, _ := wire.AppendFrame(nil, &message.Ready{})
		_, err = s.Write(b)
		return s, err
	}
	errc := make(chan error, o.Relays+2)
	var wg sync.WaitGroup
	subLn, err := listen()
	if err != nil {
		return Result{}, err
	}
	next := subLn.Addr().String()
	got := make(chan time.Time, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		s, err := accept(subLn)
		if err != nil {
			errc <- fmt.Errorf("baseline: subscriber: %w", err)
			return
		}
		rd := wire.NewReader(s, 0)
		if _, err := rd.Read(); err != nil { // the hello
			errc <- err
			return
		}
		for i := 0; i < o.Messages; i++ {
			if _, err := rd.Read(); err != nil {
				errc <- fmt.Errorf("baseline: subscriber after %d: %w", i, err)
				return
			}
		}
		got <- time.Now()
	}()
	for i := 0; i < o.Relays; i++ {
		ln, err := listen()
		if err != nil {
			return Result{}, err
		}
		to := next
		next = ln.Addr().String()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := relay(ctx, ln, to, o.Messages, accept, dial); err != nil {
				errc <- err
			}
		}()
	}
	out, err := dial(next)
	if err != nil {
		return Result{}, fmt.Errorf("baseline: publisher: %w", err)
	}
	p := Publication(o.Size)
	frame, _ := wire.AppendFrame(nil, p)
	start := time.Now()
	go func() {
		enc := wire.NewEncoder()
		buf := make([]byte, 0, PublisherBatch*len(frame)+64)
		for sent := 0; sent < o.Messages; {
			buf = buf[:0]
			for k := 0; k < PublisherBatch && sent < o.Messages; k++ {
				p.Seq = uint64(sent + 1)
				buf, _ = enc.AppendFrame(buf, p)
				sent++
			}
			if _, err := out.Write(buf); err != nil {
				errc <- fmt.Errorf("baseline: publisher: %w", err)
				return
			}
		}
	}()
	select {
	case end := <-got:
		el := end.Sub(start)
		cancel()
		wg.Wait()
		return Result{Messages: o.Messages, Relays: o.Relays, FrameBytes: len(frame), Elapsed: el,
			MsgsPerSec: float64(o.Messages) / el.Seconds()}, nil
	case err := <-errc:
		cancel()
		return Result{}, err
	case <-ctx.Done():
		return Result{}, fmt.Errorf("baseline: %w", ctx.Err())
	}
}

// relay accepts one stream, dials the next hop, and forwards n messages,
// decoding and re-encoding each, writing a batch whenever no further frame
// is buffered (or the batch is large).
func relay(ctx context.Context, ln *quic.Listener, to string, n int,
	accept func(*quic.Listener) (*quic.Stream, error), dial func(string) (*quic.Stream, error)) error {
	in, err := accept(ln)
	if err != nil {
		return fmt.Errorf("baseline: relay accept: %w", err)
	}
	out, err := dial(to)
	if err != nil {
		return fmt.Errorf("baseline: relay dial: %w", err)
	}
	rd := wire.NewReader(in, 0)
	if _, err := rd.Read(); err != nil { // the hello
		return err
	}
	enc := wire.NewEncoder()
	batch := make([]byte, 0, 2*batchBytes)
	for i := 0; i < n; i++ {
		m, err := rd.Read()
		if err != nil {
			return fmt.Errorf("baseline: relay after %d: %w", i, err)
		}
		if batch, err = enc.AppendFrame(batch, m); err != nil {
			return err
		}
		if !rd.Ready() || len(batch) >= batchBytes || i == n-1 {
			if _, err := out.Write(batch); err != nil {
				return fmt.Errorf("baseline: relay write: %w", err)
			}
			batch = batch[:0]
		}
	}
	<-ctx.Done() // keep the connections until the subscriber has all
	return nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func tlsPair() (*tls.Config, *tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "baseline"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	srv := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos: []string{alpn}, MinVersion: tls.VersionTLS13}
	// A benchmark on loopback, no secrets: the certificate is not verified.
	cli := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}, MinVersion: tls.VersionTLS13} //nolint:gosec
	return srv, cli, nil
}
