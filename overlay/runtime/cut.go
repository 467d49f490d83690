package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/deltapub/deltapub/message"
)

// Link cuts: a runtime-level block of the link to one peer, for failure
// injection (testbeds, the admin endpoint's /ctl/cut). A cut behaves like a
// network partition between two live brokers, as in the simulator (Sim.Cut):
// the current link to the peer is closed (what was in flight on it is lost),
// dials to the peer fail at once, links the peer dials are closed as soon as
// they come up, and messages still arriving from it are dropped. The core
// sees LinkDown and failed dials, its heartbeats from the peer stop, and it
// bypasses the peer after the failure timeout, exactly as for a crash the
// network hid. Heal lifts the block; the core's next dial (or the peer's)
// restores the link. The runtime applies cuts itself, whatever its
// transport: in its Handler methods (links up and messages) and in the
// dials of Run (cutTransport).
//
// A cut blocks one end only: to cut a link both ways, cut it at both
// brokers (the testbed and scripts/cut.sh do). Cutting one end alone still
// breaks the link (the other end's dials are closed on arrival), but the
// other end keeps dialling.

// maxCuts bounds the peers cut at once (the block is a copy-on-write map
// read on every message batch). Cut refuses beyond it with an error.
const maxCuts = 1024

// linkCuts is the block. The zero value blocks nothing.
type linkCuts struct {
	// blocked is read without a lock on every batch of peer messages; it
	// is replaced (never mutated) under mu. Nil: nothing is cut, the
	// common case, one atomic load.
	blocked atomic.Pointer[map[message.BrokerID]bool]

	mu    sync.Mutex
	links map[message.BrokerID][]PeerLink // up links per peer, to close at a cut
}

func (c *linkCuts) isBlocked(peer message.BrokerID) bool {
	m := c.blocked.Load()
	return m != nil && (*m)[peer]
}

// cut blocks peer and closes its links; it reports whether peer was not
// cut already.
func (c *linkCuts) cut(peer message.BrokerID) (bool, error) {
	c.mu.Lock()
	old := c.blocked.Load()
	if old != nil && (*old)[peer] {
		c.mu.Unlock()
		return false, nil
	}
	n := map[message.BrokerID]bool{peer: true}
	if old != nil {
		if len(*old) >= maxCuts {
			c.mu.Unlock()
			return false, fmt.Errorf("runtime: cut %s: already %d links cut (the bound)", peer, maxCuts)
		}
		for p := range *old {
			n[p] = true
		}
	}
	c.blocked.Store(&n)
	ls := c.links[peer]
	delete(c.links, peer)
	c.mu.Unlock()
	// Outside the lock: Close reports PeerDown, which comes back here.
	for _, l := range ls {
		l.Close("link cut")
	}
	return true, nil
}

// heal lifts the block of peer; it reports whether peer was cut.
func (c *linkCuts) heal(peer message.BrokerID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.blocked.Load()
	if old == nil || !(*old)[peer] {
		return false
	}
	if len(*old) == 1 {
		c.blocked.Store(nil)
		return true
	}
	n := make(map[message.BrokerID]bool, len(*old)-1)
	for p := range *old {
		if p != peer {
			n[p] = true
		}
	}
	c.blocked.Store(&n)
	return true
}

// list returns the cut peers, sorted.
func (c *linkCuts) list() []message.BrokerID {
	m := c.blocked.Load()
	if m == nil {
		return []message.BrokerID{}
	}
	return sortedKeys(*m)
}

// up records l; false (and l is closed) when its peer is cut.
func (c *linkCuts) up(l PeerLink) bool {
	peer := l.Peer()
	c.mu.Lock()
	if c.isBlocked(peer) {
		c.mu.Unlock()
		l.Close("link cut")
		return false
	}
	if c.links == nil {
		c.links = map[message.BrokerID][]PeerLink{}
	}
	// At most a couple of links per peer at once (the transport keeps one
	// per pair; an old one lingers until its PeerDown).
	c.links[peer] = append(c.links[peer], l)
	c.mu.Unlock()
	return true
}

// down forgets l.
func (c *linkCuts) down(l PeerLink) {
	peer := l.Peer()
	c.mu.Lock()
	defer c.mu.Unlock()
	ls := slices.DeleteFunc(c.links[peer], func(x PeerLink) bool { return x == l })
	if len(ls) == 0 {
		delete(c.links, peer)
	} else {
		c.links[peer] = ls
	}
}

// Cut blocks the link to peer (see linkCuts): closes it, refuses it until
// Heal. Cutting a peer already cut is not an error. Safe from any
// goroutine.
func (r *Runtime) Cut(peer message.BrokerID) error {
	if peer == "" {
		return fmt.Errorf("runtime: cut: no peer named")
	}
	if peer == message.BrokerID(r.cfg.ID) {
		return fmt.Errorf("runtime: cut %s: that is this broker", peer)
	}
	ok, err := r.cuts.cut(peer)
	if err != nil {
		return err
	}
	if ok {
		r.log.Warn().Str("peer", string(peer)).Msg("link cut (failure injection): refused until healed")
	}
	return nil
}

// Heal lifts a Cut of peer; false when peer was not cut.
func (r *Runtime) Heal(peer message.BrokerID) bool {
	ok := r.cuts.heal(peer)
	if ok {
		r.log.Warn().Str("peer", string(peer)).Msg("link healed (failure injection)")
	}
	return ok
}

// Cuts lists the peers cut now, sorted.
func (r *Runtime) Cuts() []message.BrokerID { return r.cuts.list() }

// cutTransport is the transport Run dials with: its dials honour cuts. A
// dial to a cut peer fails at once; a dial by address that reaches a cut
// peer is closed and fails.
type cutTransport struct {
	tr Transport
	c  *linkCuts
}

func (t cutTransport) Dial(ctx context.Context, peer message.BrokerID, addr string) (PeerLink, error) {
	if peer != "" && t.c.isBlocked(peer) {
		return nil, fmt.Errorf("runtime: dial %s: link cut", peer)
	}
	l, err := t.tr.Dial(ctx, peer, addr)
	if err != nil {
		return nil, err
	}
	if t.c.isBlocked(l.Peer()) {
		l.Close("link cut")
		return nil, fmt.Errorf("runtime: dial %s: %s answered there and its link is cut", addr, l.Peer())
	}
	return l, nil
}

// adminControl adapts the runtime's cuts to internal/admin's Control.
type adminControl struct{ r *Runtime }

func (a adminControl) Cut(peer string) error { return a.r.Cut(message.BrokerID(peer)) }
func (a adminControl) Heal(peer string) (bool, error) {
	return a.r.Heal(message.BrokerID(peer)), nil
}
func (a adminControl) Cuts() []string {
	ps := a.r.Cuts()
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}
