package overlay

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/deltapub/deltapub/message"
)

// fakeNet is the runtime's in-memory twin of internal/quic: endpoints by
// address, links as pairs of bounded queues, each direction read by one
// goroutine that feeds the receiving runtime in order. It runs inside a
// testing/synctest bubble, so its time is virtual.
type fakeNet struct {
	mu        sync.Mutex
	endpoints map[string]*fakeEndpoint
	links     []*fakeLink // dialling sides of every link made
	queue     int         // frames per link direction
}

func newFakeNet(queue int) *fakeNet {
	return &fakeNet{endpoints: map[string]*fakeEndpoint{}, queue: queue}
}

type fakeEndpoint struct {
	net     *fakeNet
	id      message.BrokerID
	addr    string
	rt      *Runtime
	crashed bool // guarded by net.mu: cut off from everyone, for good
}

// crash cuts the endpoint at addr off the network for good, as a crash
// looks from outside: its links break, it can neither dial nor be dialled.
// (Its runtime goes on running in isolation until the test stops it.)
func (n *fakeNet) crash(addr string) {
	n.mu.Lock()
	ep := n.endpoints[addr]
	delete(n.endpoints, addr)
	var cut []*fakeLink
	if ep != nil {
		ep.crashed = true
		for _, l := range n.links {
			if l.local == ep || l.other.local == ep {
				cut = append(cut, l)
			}
		}
	}
	n.mu.Unlock()
	for _, l := range cut {
		l.Close("crash")
	}
}

func (n *fakeNet) add(id message.BrokerID, addr string, rt *Runtime) *fakeEndpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep := &fakeEndpoint{net: n, id: id, addr: addr, rt: rt}
	n.endpoints[addr] = ep
	return ep
}

func (n *fakeNet) remove(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.endpoints, addr)
}

// fakeLink is one side of a link: Peer is the other side's broker, in is
// what this side receives.
type fakeLink struct {
	peer   message.BrokerID
	local  *fakeEndpoint
	in     chan message.Message
	other  *fakeLink
	closed chan struct{}
	once   *sync.Once // shared by both sides
	reason string
}

func (l *fakeLink) Peer() message.BrokerID { return l.peer }

func (l *fakeLink) TrySend(m message.Message) bool {
	select {
	case <-l.closed:
		return false
	default:
	}
	select {
	case l.other.in <- m:
		return true
	default:
		return false
	}
}

func (l *fakeLink) Send(m message.Message) error {
	select {
	case l.other.in <- m:
		return nil
	case <-l.closed:
		return errors.New("fake link closed")
	}
}

func (l *fakeLink) Queued() int { return len(l.other.in) }

func (l *fakeLink) Close(reason string) {
	l.once.Do(func() {
		l.reason = reason
		close(l.closed) // both sides share the channel
	})
}

// read feeds the local runtime with what arrives, then reports the link
// down once it is closed.
func (l *fakeLink) read() {
	for {
		select {
		case m := <-l.in:
			l.local.rt.PeerMessage(l, m)
		case <-l.closed:
			l.local.rt.PeerDown(l, errors.New("fake link closed"))
			return
		}
	}
}

func (ep *fakeEndpoint) Dial(ctx context.Context, peer message.BrokerID, addr string) (PeerLink, error) {
	ep.net.mu.Lock()
	remote := ep.net.endpoints[addr]
	crashed := ep.crashed
	ep.net.mu.Unlock()
	if crashed {
		return nil, errors.New("fake: crashed")
	}
	if remote == nil {
		return nil, fmt.Errorf("fake: nobody at %s", addr)
	}
	if peer != "" && remote.id != peer {
		return nil, fmt.Errorf("fake: %s at %s, not %s", remote.id, addr, peer)
	}
	closed := make(chan struct{})
	once := new(sync.Once)
	a := &fakeLink{peer: remote.id, local: ep, in: make(chan message.Message, ep.net.queue), closed: closed, once: once}
	b := &fakeLink{peer: ep.id, local: remote, in: make(chan message.Message, ep.net.queue), closed: closed, once: once}
	a.other, b.other = b, a
	ep.net.mu.Lock()
	ep.net.links = append(ep.net.links, a)
	ep.net.mu.Unlock()
	remote.rt.PeerUp(b)
	ep.rt.PeerUp(a)
	go a.read()
	go b.read()
	return a, nil
}

// fakeSession is a client session seen from the broker: what the broker
// sends lands in out (bounded: a full out is a slow consumer).
type fakeSession struct {
	out    chan message.Message
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	reason string
}

func newFakeSession(queue int) *fakeSession {
	return &fakeSession{out: make(chan message.Message, queue), closed: make(chan struct{})}
}

func (s *fakeSession) TrySend(m message.Message) bool {
	select {
	case <-s.closed:
		return false
	default:
	}
	select {
	case s.out <- m:
		return true
	default:
		return false
	}
}

func (s *fakeSession) Close(reason string) {
	s.once.Do(func() {
		s.mu.Lock()
		s.reason = reason
		s.mu.Unlock()
		close(s.closed)
	})
}

func (s *fakeSession) closeReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}
