package sim

import (
	"fmt"
	"time"

	"github.com/deltapub/deltapub/message"
)

// Leave starts a graceful leave of broker id (the overlay core's
// Node.Leave, docs/protocol.md §3). Its clients move away: its subscribers
// are excluded from the guarantees from now on (they are told their
// subscriptions ended and would resubscribe elsewhere) and its publishers
// stop; what they published before stays guaranteed (it must reach every
// subscriber, as if the publisher had moved). A node that cannot leave
// (the reference node) ignores it.
func (s *Sim) Leave(id message.BrokerID) error {
	b, err := s.broker(id)
	if err != nil {
		return err
	}
	if b.state != stateUp {
		return fmt.Errorf("sim: leave %s: it is %s, not up", id, b.state)
	}
	s.tracef("%s LEAVE", id)
	s.noteFault()
	for _, c := range b.clients {
		if c.sub >= 0 {
			s.log.Subs[c.sub].Excluded = true
		}
		if c.pub != nil {
			c.pub.stopped = true
		}
		// The client goes away: an answer to a request in flight (a
		// refused Publish) is not waited for.
		c.dead = true
		if c.dur != nil {
			s.durSessionGone(c) // the subscriber reconnects elsewhere
		}
	}
	s.input(b, 0, func() { b.node.Leave() })
	return nil
}

// Leaving reports whether broker id started a graceful leave (its clients
// are refused from then on: a real client would go to another broker).
func (s *Sim) Leaving(id message.BrokerID) bool {
	b, err := s.broker(id)
	if err != nil || b.node == nil {
		return false
	}
	return b.node.Leaving()
}

// HasLeft reports whether broker id completed a graceful leave.
func (s *Sim) HasLeft(id message.BrokerID) bool {
	b, err := s.broker(id)
	if err != nil || b.node == nil {
		return false
	}
	return b.node.Leaving() && !b.node.Joined()
}

// leave runs the scenario command "leave B [max=DURATION]": it starts the
// leave and runs until B has left (at most max, default 3s), noting how
// long it took. Publishers go on meanwhile.
func (r *runner) leave(opts map[string]string, rest []string) error {
	if len(rest) != 1 {
		return fmt.Errorf("want: leave BROKER [max=DURATION]")
	}
	max := 3 * time.Second
	if v, ok := opts["max"]; ok {
		var err error
		if max, err = parseDur("max", v); err != nil {
			return err
		}
	}
	id := message.BrokerID(rest[0])
	if err := r.s.Leave(id); err != nil {
		return err
	}
	ok, err := r.s.RunUntilCond(max, func() bool { return r.s.HasLeft(id) })
	if err != nil {
		return err
	}
	if !ok {
		r.note("leave %s: not completed within %v", id, max)
	}
	// The plan follows the repair, so that a later "restart B" rejoins
	// through B's current neighbours, not through the broker that left.
	detachPlanned(&r.tree, id)
	return nil
}

// detachPlanned removes x from the planned tree the way the core repairs
// the overlay (topology.Detach): x's children go to x's parent; a leaving
// root is replaced by its smallest child, which adopts the others.
func detachPlanned(t *Tree, x message.BrokerID) {
	if !t.Has(x) {
		return
	}
	parent, hasParent := t.Parent[x]
	var kids []message.BrokerID
	for _, c := range t.Order {
		if p, ok := t.Parent[c]; ok && p == x {
			kids = append(kids, c)
		}
	}
	if !hasParent && len(kids) > 0 {
		root := kids[0]
		for _, k := range kids {
			if k < root {
				root = k
			}
		}
		delete(t.Parent, root)
		parent = root
	}
	for _, k := range kids {
		if k != parent {
			t.Parent[k] = parent
		}
	}
	delete(t.Parent, x)
	order := make([]message.BrokerID, 0, len(t.Order))
	if !hasParent && len(kids) > 0 {
		order = append(order, parent) // the new root first
	}
	for _, b := range t.Order {
		if b != x && (hasParent || b != parent) {
			order = append(order, b)
		}
	}
	t.Order = order
}
