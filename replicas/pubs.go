package replicas

import (
	"slices"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// source is what a replica knows of one publisher's stream (publisher,
// epoch): every sequence number up to done is processed or known not to
// concern it; out-of-order publications wait in held.
type source struct {
	done uint64
	// start is where this replica's knowledge begins: 0, or after a
	// restart the Prev of the first publication it got. lastTo is the last
	// sequence number sent to each virtual node (index; this one's index
	// for the siblings), start if none.
	start  uint64
	lastTo map[int]uint64
	held   []heldPub // by sequence number
}

type heldPub struct {
	from  int
	p     *message.ReplicaPub
	since int64 // tick it was held at
}

// queued is a publication that arrived while the replica was not joined
// yet (a restart learning its routing table): processed once it is.
type queued struct {
	from int
	p    *message.ReplicaPub
}

// fromLocal and fromSibling mark where a publication came from when it
// did not come from a neighbouring virtual node.
const (
	fromLocal   = -1 // a local client published it
	fromSibling = -2 // a sibling's local client published it: deliver, do not forward
)

// sourceOf returns the state of src, creating it (at the bound of
// MaxSources the oldest is forgotten: a late duplicate of it could then be
// delivered again, so the bound must stay well above the publishers).
// A replica at its first start knows every stream from its beginning; a
// restarted one from the first publication it gets (prev).
func (n *Node) sourceOf(src message.Source, prev uint64, local bool) *source {
	if s := n.sources[src]; s != nil {
		return s
	}
	if len(n.srcFIFO) >= n.cfg.MaxSources {
		old := n.srcFIFO[0]
		n.srcFIFO = n.srcFIFO[1:]
		if s := n.sources[old]; s != nil {
			n.held -= len(s.held)
		}
		delete(n.sources, old)
	}
	s := &source{lastTo: map[int]uint64{}}
	if n.restarted && !local {
		s.done, s.start = prev, prev
	}
	n.sources[src] = s
	n.srcFIFO = append(n.srcFIFO, src)
	return s
}

func (n *Node) enqueue(from int, p *message.ReplicaPub) {
	if len(n.queue) >= n.cfg.MaxQueue {
		// Its siblings hold the same publications: dropping the oldest
		// loses nothing while they are up.
		n.queue = n.queue[1:]
		n.c.Overflow++
	}
	n.queue = append(n.queue, queued{from, p})
}

// accept takes a publication from a neighbouring virtual node (from), a
// sibling or a local client: it is processed in per-source order, once.
func (n *Node) accept(from int, p *message.ReplicaPub) {
	s := n.sourceOf(p.ID.Source(), p.Prev, from == fromLocal)
	if p.ID.Seq <= s.done {
		n.c.Duplicates++
		return
	}
	if p.Prev > s.done {
		n.hold(s, from, p)
		return
	}
	n.process(s, from, p)
	n.drain(s)
}

func (n *Node) hold(s *source, from int, p *message.ReplicaPub) {
	i, found := slices.BinarySearchFunc(s.held, p.ID.Seq, func(h heldPub, seq uint64) int {
		switch {
		case h.p.ID.Seq < seq:
			return -1
		case h.p.ID.Seq > seq:
			return 1
		}
		return 0
	})
	if found {
		n.c.Duplicates++ // the same publication from another replica
		return
	}
	if n.held >= n.cfg.MaxQueue {
		n.c.Overflow++
		return
	}
	n.c.Held++
	n.held++
	s.held = slices.Insert(s.held, i, heldPub{from: from, p: p, since: n.tick})
}

// drain processes the held publications that the last one made
// processable, in sequence order.
func (n *Node) drain(s *source) {
	for {
		j := 0
		for _, h := range s.held {
			if h.p.ID.Seq <= s.done { // behind done now: a duplicate
				n.c.Duplicates++
				n.held--
				continue
			}
			s.held[j] = h
			j++
		}
		clear(s.held[j:])
		s.held = s.held[:j]
		k := slices.IndexFunc(s.held, func(h heldPub) bool { return h.p.Prev <= s.done })
		if k < 0 {
			return
		}
		h := s.held[k]
		s.held = slices.Delete(s.held, k, k+1)
		n.held--
		n.process(s, h.from, h.p)
	}
}

// giveUpHoles processes a held publication whose hole no replica filled
// within FailureTicks: the publications of the hole are lost (only beyond
// the assumption: a false suspicion, or every replica upstream down). A
// gap notice says so.
func (n *Node) giveUpHoles() {
	if n.held == 0 {
		return
	}
	for _, src := range n.srcFIFO {
		s := n.sources[src]
		if s == nil || len(s.held) == 0 || n.tick-s.held[0].since < int64(n.cfg.FailureTicks) {
			continue
		}
		h := s.held[0]
		n.c.GiveUps++
		n.notice(overlay.NoticeGap, "", "replicas: "+src.Publisher+": no replica sent the publications before "+h.p.ID.String())
		s.done = h.p.Prev
		n.drain(s)
	}
}

// process delivers p to the matching local clients and sends it to every
// live replica of each neighbouring virtual node (other than the one it
// came from) behind which a subscription matches it, and, for a local
// publication, to the siblings whose clients it matches.
func (n *Node) process(s *source, from int, p *message.ReplicaPub) {
	s.done = p.ID.Seq
	pub := matching.Publication{Attrs: p.Attrs}
	n.matches = n.index.Match(&pub, n.matches[:0])
	slices.Sort(n.matches)
	var dests []int
	for _, num := range n.matches {
		r := n.byNum[num]
		if r == nil {
			continue
		}
		switch {
		case r.local:
			if c := n.clients[r.client]; c != nil {
				n.c.Delivered++
				n.toClient(r.client, &message.Deliver{Sub: r.id, Pub: p.ID, Attrs: p.Attrs, Payload: p.Payload, Time: p.Time})
			}
		case r.from == n.me.vn:
			if from == fromLocal && !slices.Contains(dests, r.from) {
				dests = append(dests, r.from)
			}
		case r.from != from && from != fromSibling:
			if !slices.Contains(dests, r.from) {
				dests = append(dests, r.from)
			}
		}
	}
	slices.Sort(dests)
	for _, w := range dests {
		prev, ok := s.lastTo[w]
		if !ok {
			prev = s.start
		}
		s.lastTo[w] = p.ID.Seq
		m := &message.ReplicaPub{ID: p.ID, Attrs: p.Attrs, Payload: p.Payload, Time: p.Time, Prev: prev}
		n.remember(w, m) // recent.go
		for _, r := range n.lay.VNodes[w].Replicas {
			if q := n.peers[r.ID]; q != nil && q.live() {
				n.c.PubsOut++
				n.send(q, m)
			}
		}
	}
}
