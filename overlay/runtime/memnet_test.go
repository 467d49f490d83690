package runtime

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/deltapub/deltapub/message"
)

// recorder is a Handler that records what a transport reports.
type recorder struct {
	mu     sync.Mutex
	events []string // "up B2", "down B2", "client up", ...
	msgs   []message.Message
	links  []PeerLink // as reported by PeerUp
}

func (r *recorder) add(ev string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) PeerUp(l PeerLink) {
	r.mu.Lock()
	r.links = append(r.links, l)
	r.mu.Unlock()
	r.add("up " + string(l.Peer()))
}

func (r *recorder) PeerMessages(l PeerLink, ms []message.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, ms...)
}

func (r *recorder) PeerDown(l PeerLink, err error) { r.add("down " + string(l.Peer())) }
func (r *recorder) ClientUp(ClientSession)         { r.add("client up") }
func (r *recorder) ClientMessages(_ ClientSession, ms []message.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, ms...)
}
func (r *recorder) ClientDown(ClientSession, error) { r.add("client down") }

func (r *recorder) received() []message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func (r *recorder) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) downs() int {
	n := 0
	for _, ev := range r.log() {
		if strings.HasPrefix(ev, "down ") {
			n++
		}
	}
	return n
}

// nopHandler discards what a transport reports.
type nopHandler struct{}

func (nopHandler) PeerUp(PeerLink)                                 {}
func (nopHandler) PeerMessages(PeerLink, []message.Message)        {}
func (nopHandler) PeerDown(PeerLink, error)                        {}
func (nopHandler) ClientUp(ClientSession)                          {}
func (nopHandler) ClientMessages(ClientSession, []message.Message) {}
func (nopHandler) ClientDown(ClientSession, error)                 {}

func listen(t *testing.T, n *MemNetwork, id, addr string, h Handler) *MemEndpoint {
	t.Helper()
	ep, err := n.Listen(MemConfig{ID: message.BrokerID(id), Addr: addr}, h)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func dial(t *testing.T, ep *MemEndpoint, peer, addr string) PeerLink {
	t.Helper()
	l, err := ep.Dial(t.Context(), message.BrokerID(peer), addr)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// closeAll closes every endpoint still listening on n, so that the readers
// of their links end (a synctest bubble waits for every goroutine).
func closeAll(n *MemNetwork) {
	n.mu.Lock()
	var eps []*MemEndpoint
	for _, ep := range n.listening {
		eps = append(eps, ep)
	}
	n.mu.Unlock()
	for _, ep := range eps {
		ep.Close()
	}
}

// linkedPair is A (at a:1) and B (at b:1), recorded, and A's end of a link
// A dialled to B.
func linkedPair(t *testing.T, n *MemNetwork) (a, b *MemEndpoint, ra, rb *recorder, l PeerLink) {
	t.Helper()
	ra, rb = &recorder{}, &recorder{}
	a = listen(t, n, "A", "a:1", ra)
	b = listen(t, n, "B", "b:1", rb)
	return a, b, ra, rb, dial(t, a, "B", "b:1")
}

func heartbeats(l PeerLink, from, to uint64) {
	for i := from; i <= to; i++ {
		l.Send(&message.Heartbeat{Epoch: i})
	}
}

func epochsOf(ms []message.Message) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.(*message.Heartbeat).Epoch)
	}
	return out
}

func seq(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// One link per pair: a second dial, from either side, finds the first.
// Messages arrive in order, decoded anew (never the sender's value).
func TestMemNetworkOneLinkPerPairInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork()
		a, b, _, rb, l := linkedPair(t, n)
		defer closeAll(n)
		if again := dial(t, a, "", "b:1"); again != l {
			t.Error("a dial by address made a second link")
		}
		back := dial(t, b, "A", "a:1")
		synctest.Wait()
		if got := rb.log(); !slices.Equal(got, []string{"up A"}) || rb.links[0] != back {
			t.Fatalf("B saw %v; its dial back should be the link it has", got)
		}
		sent := &message.Heartbeat{Epoch: 1}
		l.Send(sent)
		heartbeats(l, 2, 1000)
		synctest.Wait()
		got := rb.received()
		if !slices.Equal(epochsOf(got), seq(1, 1000)) {
			t.Fatalf("B received %d heartbeats, not 1..1000 in order", len(got))
		}
		if got[0] == message.Message(sent) {
			t.Error("the receiver shares the sender's message")
		}
	})
}

// A frozen endpoint reads nothing and delivers nothing: its senders' queues
// fill up to the bound (TrySend false), and a dial to it waits; Resume
// delivers what waited, in order.
func TestMemNetworkFreeze(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork()
		rb := &recorder{}
		a, err := n.Listen(MemConfig{ID: "A", Addr: "a:1", SendQueue: 4}, nopHandler{})
		if err != nil {
			t.Fatal(err)
		}
		b := listen(t, n, "B", "b:1", rb)
		c := listen(t, n, "C", "c:1", nopHandler{})
		defer closeAll(n)
		l := dial(t, a, "B", "b:1")
		b.Freeze()
		for i := uint64(1); i <= 4; i++ {
			if !l.TrySend(&message.Heartbeat{Epoch: i}) {
				t.Fatalf("heartbeat %d refused below the bound", i)
			}
		}
		if l.TrySend(&message.Heartbeat{Epoch: 5}) || l.Queued() != 4 {
			t.Fatalf("a fifth frame was taken (queued %d, bound 4)", l.Queued())
		}
		dialed := make(chan error, 1)
		go func() {
			_, err := c.Dial(context.Background(), "B", "b:1")
			dialed <- err
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		if len(rb.received()) != 0 || len(dialed) != 0 {
			t.Fatal("a frozen endpoint received messages or answered a dial")
		}
		b.Resume()
		if err := <-dialed; err != nil {
			t.Fatalf("dial after the resume: %v", err)
		}
		synctest.Wait()
		if got := epochsOf(rb.received()); !slices.Equal(got, seq(1, 4)) {
			t.Errorf("after the resume B received %v, want 1..4", got)
		}
	})
}

// A crash is silent: the peer's link stays up and what it sends vanishes;
// dials to the address go unanswered until a new incarnation listens there,
// whose link replaces the old one at the peer (PeerDown of the old link
// before PeerUp of the new).
func TestMemNetworkCrashAndRestartOnTheSameAddress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork()
		a, b, ra, rb, l := linkedPair(t, n)
		c := listen(t, n, "C", "c:1", nopHandler{})
		defer closeAll(n)
		synctest.Wait()
		b.Crash()
		if !l.TrySend(&message.Heartbeat{Epoch: 1}) {
			t.Error("a send to a crashed peer failed: the crash told the peer")
		}
		heartbeats(l, 2, 10_000) // never blocks: it vanishes
		synctest.Wait()
		if got := ra.log(); !slices.Equal(got, []string{"up B"}) {
			t.Fatalf("A saw %v after B's crash, want only its link up", got)
		}
		if rb.downs() != 1 {
			t.Error("the crashed side's own handler did not see its link end")
		}
		if again := dial(t, a, "B", "b:1"); again != l {
			t.Error("A's dial of B did not return the link it still holds")
		}
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		if _, err := c.Dial(ctx, "", "b:1"); err == nil || !strings.Contains(err.Error(), "no answer") {
			t.Fatalf("dial of a crashed broker's address: %v, want no answer", err)
		}
		rb2 := &recorder{}
		b2, err := n.Listen(MemConfig{ID: "B", Addr: "b:1"}, rb2)
		if err != nil {
			t.Fatalf("restart on the same address: %v", err)
		}
		l2 := dial(t, b2, "A", "a:1")
		heartbeats(l2, 1, 3)
		synctest.Wait()
		if got := ra.log(); !slices.Equal(got, []string{"up B", "down B", "up B"}) {
			t.Fatalf("A saw %v, want the old link down before the new one up", got)
		}
		if got := epochsOf(ra.received()); !slices.Equal(got, seq(1, 3)) {
			t.Errorf("A received %v from the new incarnation, want 1..3", got)
		}
	})
}

// Close delivers what the closing end had queued, then the end; a frame
// larger than the receiver's MaxFrame closes the link.
func TestMemNetworkCloseAndFrameBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork()
		rb := &recorder{}
		a := listen(t, n, "A", "a:1", nopHandler{})
		_, err := n.Listen(MemConfig{ID: "B", Addr: "b:1", MaxFrame: 1024}, rb)
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll(n)
		l := dial(t, a, "B", "b:1")
		heartbeats(l, 1, 3)
		l.Close("done")
		synctest.Wait()
		if got := rb.log(); !slices.Equal(got, []string{"up A", "down A"}) {
			t.Fatalf("B saw %v, want its link up then down", got)
		}
		if got := epochsOf(rb.received()); !slices.Equal(got, seq(1, 3)) {
			t.Fatalf("B received %v before the end, want 1..3", got)
		}
		l = dial(t, a, "B", "b:1")
		l.Send(&message.Publish{Seq: 1, Payload: make([]byte, 2048)})
		synctest.Wait()
		if rb.downs() != 2 {
			t.Errorf("a frame over B's MaxFrame did not close the link: %v", rb.log())
		}
		if _, err := a.Dial(t.Context(), "B", "b:1"); err != nil {
			t.Errorf("dial after the close: %v", err)
		}
	})
}

// A dial waits for a broker to listen at the address, as QUIC's handshake
// is retransmitted until the peer's process is up.
func TestMemNetworkDialWaitsForTheListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewMemNetwork()
		a := listen(t, n, "A", "a:1", nopHandler{})
		defer closeAll(n)
		go func() {
			time.Sleep(time.Second)
			listen(t, n, "B", "b:1", nopHandler{})
		}()
		start := time.Now()
		l := dial(t, a, "", "b:1")
		if l.Peer() != "B" || time.Since(start) != time.Second {
			t.Errorf("dial answered by %s after %v, want B after 1s", l.Peer(), time.Since(start))
		}
		if _, err := a.Dial(t.Context(), "C", "b:1"); err == nil || !strings.Contains(err.Error(), "reached B") {
			t.Errorf("dial of C at B's address: %v", err)
		}
	})
}
