package sim

import (
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"
	"unsafe"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// pingNode is a node that costs next to nothing: at every tick it sends
// burst heartbeats to each of its links and ignores what it receives. It
// measures the simulator's own cost per event (queue, links, flush).
type pingNode struct {
	nodeBase
	joined     bool
	joinpoints []overlay.Peer
	peers      []message.BrokerID
	burst      int
}

var pingMsg = &message.Heartbeat{Epoch: 1}

func (n *pingNode) Bootstrap() {
	n.joined = true
	n.out.Notices = append(n.out.Notices, overlay.Notice{Kind: overlay.NoticeJoined})
}

func (n *pingNode) Join(jps []overlay.Peer) {
	n.joinpoints = jps
	if len(jps) > 0 {
		n.out.Dials = append(n.out.Dials, jps[0])
	}
}

func (n *pingNode) Tick() {
	for _, p := range n.peers {
		for i := 0; i < n.burst; i++ {
			n.out.Messages = append(n.out.Messages, overlay.Envelope{To: p, Msg: pingMsg})
		}
	}
}

func (n *pingNode) LinkUp(p message.BrokerID) {
	n.peers = append(n.peers, p)
	if !n.joined {
		n.joined = true
		n.out.Notices = append(n.out.Notices, overlay.Notice{Kind: overlay.NoticeJoined, Peer: p})
	}
}

func (n *pingNode) LinkDown(message.BrokerID)                {}
func (n *pingNode) DialFailed(message.BrokerID)              {}
func (n *pingNode) Step(message.BrokerID, message.Message)   {}
func (n *pingNode) ClientOpen(message.ClientID)              {}
func (n *pingNode) ClientClose(message.ClientID)             {}
func (n *pingNode) Client(message.ClientID, message.Message) {}
func (n *pingNode) Joined() bool                             { return n.joined }
func (n *pingNode) Phase() overlay.Phase                     { return joinedPhase(n.joined) }

// BenchmarkEngine: one op is 100 ms of virtual time of 83 ping nodes in a
// random tree (about 83 × 10 ticks and 83 × 2 × 10 × burst messages);
// ns/event is the simulator's cost per event with a free node.
func BenchmarkEngine(b *testing.B) {
	cfg := DefaultConfig()
	cfg.LinkDelay, cfg.LinkJitter = time.Millisecond, 200*time.Microsecond
	cfg.NewNode = func(overlay.Config) (Node, error) { return &pingNode{burst: 4}, nil }
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.BuildTree(RandomTree(rand.New(rand.NewPCG(1, 2)), 83, 4), time.Second); err != nil {
		b.Fatal(err)
	}
	ev0 := s.Stats().Events
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := s.RunFor(100 * time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(el.Nanoseconds())/float64(s.Stats().Events-ev0), "ns/event")
}

// seen keeps the set of sequence numbers exactly across its three ranges
// (in place, bitmap, map).
func TestSeenSet(t *testing.T) {
	var x seen
	in := map[uint64]bool{}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 5000; i++ {
		var q uint64
		switch r.IntN(3) {
		case 0:
			q = uint64(r.IntN(seenLow + 70))
		case 1:
			q = uint64(r.IntN(seenBits + 100))
		default:
			q = r.Uint64()
		}
		if x.has(q) != in[q] {
			t.Fatalf("has(%d) = %v, want %v", q, !in[q], in[q])
		}
		x.add(q)
		in[q] = true
		if !x.has(q) {
			t.Fatalf("has(%d) false after add", q)
		}
	}
}

// Delays' counting sort gives the stable sort by publication time.
func TestDelaysStableOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for run := 0; run < 50; run++ {
		l := NewLog()
		n := r.IntN(500)
		for i := 0; i < n; i++ {
			pt := int64(r.IntN(1 + run))
			l.AddDelivery(Delivery{PubTime: pt, At: time.Duration(pt) + time.Duration(r.IntN(1000))})
		}
		want := make([]DelaySample, 0, n)
		for i := range l.NumDeliveries() {
			d := l.Delivery(i)
			want = append(want, DelaySample{Published: time.Duration(d.PubTime), Delay: d.At - time.Duration(d.PubTime)})
		}
		sort.SliceStable(want, func(i, j int) bool { return want[i].Published < want[j].Published })
		if got := l.Delays(); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("run %d: Delays differs from the stable sort", run)
		}
	}
}

// A delivery record is 128 bytes (a size class aligned to cache lines)
// with what next() and deliver() read in its first 64.
func TestDeliveryLayout(t *testing.T) {
	var d delivery
	if s := unsafe.Sizeof(d); s != 128 {
		t.Fatalf("delivery is %d bytes, want 128", s)
	}
	if o := unsafe.Offsetof(d.dir) + unsafe.Sizeof(d.dir); o > 64 {
		t.Fatalf("the hot fields end at byte %d, past the first cache line", o)
	}
}
