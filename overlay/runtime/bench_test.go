package runtime

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// Hot-path benchmarks of the broker runtime, driven synchronously (no
// goroutines, no network): a Publish frame is decoded by a wire.Reader as a
// session reader does, handed to the runtime, the runtime steps the core and
// carries out its outputs, and every client session encodes what it is sent
// into its send buffer as internal/quic does. One op is one publication; with
// -benchmem, allocs/op is what the broker allocates per publication.
//
//	go test -run '^$' -bench BrokerPublishDeliver -benchmem ./overlay/runtime

// encodingSession is a client session that encodes into a buffer, like
// internal/quic's Session (frames are dropped once counted, the buffer is
// reused).
type encodingSession struct {
	enc     *wire.Encoder
	buf     []byte
	frames  int
	version uint16
}

func (s *encodingSession) Version() uint16 { return s.version }

func (s *encodingSession) TrySend(m message.Message) bool {
	var err error
	s.buf, err = s.enc.AppendFrame(s.buf, m)
	if err != nil {
		panic(err)
	}
	s.frames++
	s.trim()
	return true
}

// HoldFrame is the raw-frame path (an already encoded frame).
func (s *encodingSession) HoldFrame(f []byte) bool {
	s.buf = append(s.buf, f...)
	s.frames++
	s.trim()
	return true
}

func (s *encodingSession) trim() {
	// internal/quic's writer takes the queue at every write: a session's
	// buffer stays small (and in cache).
	if len(s.buf) > 16<<10 {
		s.buf = s.buf[:0]
	}
}

func (s *encodingSession) Hold(m message.Message) bool { return s.TrySend(m) }
func (s *encodingSession) Flush()                      {}
func (s *encodingSession) Close(string)                {}

// benchPublishFrame returns a Publish frame with a 250-byte payload and the
// offset of its 4-byte sequence number (patched per op).
func benchPublishFrame(b *testing.B) ([]byte, int) {
	p := &message.Publish{Seq: 0x10000000, Time: time.Now().UnixNano(), Attrs: []matching.Attr{
		{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "STOCK"}},
		{Name: "symbol", Value: matching.Value{Kind: matching.KindString, Str: "IBM"}},
		{Name: "price", Value: matching.Value{Kind: matching.KindFloat, Float: 101.25}},
		{Name: "volume", Value: matching.Value{Kind: matching.KindInt, Int: 1 << 20}},
	}, Payload: bytes.Repeat([]byte{'x'}, 250)}
	f, err := wire.AppendFrame(nil, p)
	if err != nil {
		b.Fatal(err)
	}
	i := bytes.Index(f, []byte{0xce, 0x10, 0, 0, 0})
	if i < 0 {
		b.Fatal("sequence number not found in the frame")
	}
	return f, i + 1
}

func BenchmarkBrokerPublishDeliver1(b *testing.B) { benchPublishDeliver(b, 1, wire.ProtocolVersion) }
func BenchmarkBrokerPublishDeliver100(b *testing.B) {
	benchPublishDeliver(b, 100, wire.ProtocolVersion)
}

// BenchmarkBrokerPublishDeliver100V1: the same with clients of protocol
// version 1 (one Deliver frame per subscription, from the shared encoding).
func BenchmarkBrokerPublishDeliver100V1(b *testing.B) { benchPublishDeliver(b, 100, 1) }

func benchPublishDeliver(b *testing.B, subscribers int, version uint16) {
	cfg := DefaultBrokerConfig()
	cfg.ID, cfg.Listen = "B1", "127.0.0.1:1"
	cfg.Limits.MaxClients = subscribers + 10
	rt, err := NewRuntime(cfg, 1, zerolog.Nop(), nil)
	if err != nil {
		b.Fatal(err)
	}
	rt.start(nil)
	rt.drain()
	filter, err := matching.ParseFilter("[class,eq,'STOCK'],[price,>,100]")
	if err != nil {
		b.Fatal(err)
	}
	subs := make([]*encodingSession, subscribers)
	for i := range subs {
		subs[i] = &encodingSession{enc: wire.NewEncoder(), version: version}
		rt.handle(event{kind: evClientUp, sess: subs[i]})
		rt.handle(event{kind: evClientMsg, sess: subs[i], msg: &message.Subscribe{Req: 1, Filter: filter}})
		rt.drain()
	}
	pubSess := &encodingSession{enc: wire.NewEncoder(), version: version}
	rt.handle(event{kind: evClientUp, sess: pubSess})
	rt.handle(event{kind: evClientMsg, sess: pubSess, msg: &message.ClientHello{Publisher: "bench", Epoch: 1}})
	rt.drain()

	frame, seqAt := benchPublishFrame(b)
	src := bytes.NewReader(nil)
	rd := wire.NewReader(src, 0)
	seq := uint32(0)
	before := subs[0].frames
	b.ReportAllocs()
	b.SetBytes(250)
	for b.Loop() {
		seq++
		binary.BigEndian.PutUint32(frame[seqAt:], seq)
		src.Reset(frame)
		m, err := rd.Read()
		if err != nil {
			b.Fatal(err)
		}
		rt.handle(event{kind: evClientMsg, sess: pubSess, msg: m})
		rt.drain()
	}
	if got := subs[0].frames - before; got != int(seq) {
		b.Fatalf("subscriber 0 got %d frames for %d publications", got, seq)
	}
	b.ReportMetric(float64(subscribers), "deliveries/op")
}
