// Publications: the message queue and its entries, the per-source
// duplicate filter, a publication received (onPub) or published by a local
// client (publish), and sending it on toward its next hops.

package overlay

import (
	"slices"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
)

// newMatcher is the routing table's matcher: the matching package's index
// (no linear scan over the subscriptions per publication).
func newMatcher() routing.Matcher { return matching.NewIndex() }

// qentry is one publication in the message queue: kept until it is safe
// for every recipient (PROTOCOL §5).
type qentry struct {
	// What the next hop reads (pub and the stamps it points to) first:
	// four adjacent cache lines of a 64-byte aligned entry (384 bytes: a
	// size class whose objects are 64-byte aligned).
	pub message.Pub // as forwarded by this broker (its stamp first)
	// stampBuf holds pub.Stamps up to δ = 3 (the same allocation: the
	// DACK pass reads every queued stamp each period).
	stampBuf [4]message.Stamp
	stamp    uint64
	except   message.BrokerID   // the direction it came from ("" if local)
	recips   []message.BrokerID // distinct from-pointers it is routed toward
	safe     []bool             // per recipient: proven safe
	// rbuf and sbuf hold recips and safe for up to len(rbuf) recipients
	// (most publications have a few next hops).
	rbuf   [4]message.BrokerID
	sbuf   [4]bool
	purged bool
}

// qentryX is a queue entry with room for up to len(r) recipients in the
// same allocation (more than fit in qentry itself).
type qentryX struct {
	qentry
	r [12]message.BrokerID
	s [12]bool
}

// newQentry returns a zeroed queue entry with room for k recipients: one
// allocation up to 12 recipients. Entries are allocated one by one (a
// chunk of them, zeroed at once, was written to again only after its
// lines had left the cache: two misses per line instead of one) and
// never reused (a next hop may hold the forwarded pub).
func newQentry(k int) *qentry {
	if k <= len(qentry{}.rbuf) {
		e := new(qentry)
		e.recips, e.safe = e.rbuf[:k:k], e.sbuf[:k:k]
		return e
	}
	if k <= len(qentryX{}.r) {
		x := new(qentryX)
		x.recips, x.safe = x.r[:k:k], x.s[:k:k]
		return &x.qentry
	}
	return &qentry{recips: make([]message.BrokerID, k), safe: make([]bool, k)}
}

// srcState is the per-source duplicate-suppression state.
type srcState struct {
	seq uint64           // highest sequence number accepted (and delivered locally)
	dir message.BrokerID // direction it arrives from ("" = a local client)
	// toward holds, per tree direction, the highest sequence number of
	// this source sent that way or received from there (at most one entry
	// per tree neighbour). A copy older than seq is still new toward a
	// direction below it: see acceptOlder.
	toward []dirSeq
	// tbuf holds toward's first entries in the same allocation: a hop
	// reads toward right after seq, and a separate array was a cache
	// miss of its own.
	tbuf [4]dirSeq
}

type dirSeq struct {
	dir message.BrokerID
	seq uint64
}

// sentToward is the highest sequence number sent toward (or received
// from) direction d.
func (st *srcState) sentToward(d message.BrokerID) uint64 {
	for _, x := range st.toward {
		if x.dir == d {
			return x.seq
		}
	}
	return 0
}

// mark raises the sequence number of direction d to seq.
func (st *srcState) mark(d message.BrokerID, seq uint64) {
	if d == "" {
		return
	}
	last := d[len(d)-1]
	for i := range st.toward {
		x := &st.toward[i]
		// Names of one length mostly differ in their last byte: checked
		// before the whole names are compared.
		if len(x.dir) == len(d) && x.dir[len(d)-1] == last && x.dir == d {
			x.seq = max(x.seq, seq)
			return
		}
	}
	st.toward = append(st.toward, dirSeq{d, seq})
}

// onPub processes a publication from peer from.
func (n *Node) onPub(from message.BrokerID, m *message.Pub) {
	if !n.mem.joined {
		// Joining or recovering: the routing state is incomplete, so
		// neither forward nor record it as seen (that would make the
		// retransmission after our recovery a "duplicate"); the sender
		// keeps it queued (we report nothing) and retransmits it when it
		// switches to us, once we say we are joined.
		return
	}
	n.store.Arrive(m.Stamps)
	n.fwd.discDirty = true
	src := m.ID.Source()
	st := n.fwd.seen[src]
	except := n.direction(from)
	if except == "" {
		except = from
	}
	if st != nil && m.ID.Seq <= st.seq {
		if !n.acceptOlder(st, m, except) {
			n.counters.Duplicates++
			n.holdDuplicate(m, except)
		}
		return
	}
	n.acceptSeen(src, st, m, except)
}

// dupHold is an upstream stamp s of a duplicate copy of the publication
// queued here as e.
type dupHold struct {
	s message.Stamp
	e *qentry
}

// holdDuplicate keeps, when the publication of the duplicate m is still
// queued here (this broker took it first under other upstream stamps, on
// another path: a bypass, then the tree path through a restarted broker),
// m's upstream stamps as holds on the discarded watermark. discarded(U)
// says every publication received here with a U-stamp up to it has left
// the queue; m was received with its U-stamps, so until the queued copy
// leaves, discarded(U) stays below them. Otherwise U takes "discarded" for
// "made safe here" and purges m while its only other copy is queued
// toward a broker that crashes; U's switch rule then has nothing to
// retransmit (scenario restart_duplicate_holds_discarded.txt).
//
// No hold when the queued copy waits only on recipients on the side the
// duplicate came from (dir): the upstream copies our report lets go were
// headed through us, away from dir, where ours is already safe; toward
// dir ours is not needed, the sender accepted the publication. Held, two
// brokers that retransmitted their copies to each other after a repair
// wait on each other's watermark forever (scenario
// leave_retransmit_crossing_no_deadlock.txt).
func (n *Node) holdDuplicate(m *message.Pub, dir message.BrokerID) {
	if n.fwd.queueLen == 0 || len(m.Stamps) == 0 {
		return
	}
	for i := len(n.fwd.queue) - 1; i >= 0; i-- {
		e := n.fwd.queue[i]
		if e.purged || e.pub.ID != m.ID {
			continue
		}
		if n.pendingOnlyToward(e, dir) {
			return
		}
		for _, s := range m.Stamps {
			n.fwd.dupHolds = append(n.fwd.dupHolds, dupHold{s: s, e: e})
		}
		return
	}
}

// pendingOnlyToward reports whether every recipient e still waits on lies
// on side dir.
func (n *Node) pendingOnlyToward(e *qentry, dir message.BrokerID) bool {
	for i, r := range e.recips {
		if !e.safe[i] && n.direction(r) != dir {
			return false
		}
	}
	return true
}

// acceptOlder handles a copy of a publication of a source older than the
// newest this broker accepted from it. Along a fixed tree that is a
// duplicate (the switch rule sends each next hop a source's publications
// in order). A tree repair can make this broker a relay between brokers it
// never relayed for: a neighbour of a leaver, re-attached, gets
// publications queued for the far side of the leaver that are older than
// newer ones it already relayed elsewhere (scenario
// leave_relay_older_publication.txt: a publication
// in flight to a frozen broker when its link closed, retransmitted after
// the repair through a broker that had taken a newer one for another
// subscriber, was dropped there as a duplicate). So the copy is forwarded
// toward the directions nothing at or beyond its number went to, in order
// per direction (toward only grows); local subscribers got newer ones, so
// it is not delivered here. It reports whether anything was forwarded.
func (n *Node) acceptOlder(st *srcState, m *message.Pub, except message.BrokerID) bool {
	seq := m.ID.Seq
	st.mark(except, seq) // never sent back that way by a later copy
	recips := n.table.Recipients(&matching.Publication{Attrs: m.Attrs}, except, nil, nil)
	keep := recips[:0]
	for _, r := range recips {
		if d := n.direction(r); d != "" && st.sentToward(d) < seq {
			keep = append(keep, r)
		}
	}
	if len(keep) == 0 {
		return false
	}
	n.enqueue(m, except, st, keep) // marks every recipient's direction
	return true
}

// acceptSeen records, delivers locally, queues and forwards a publication
// that is not a duplicate; st is n.seen[src] as its caller looked it up.
func (n *Node) acceptSeen(src message.Source, st *srcState, m *message.Pub, except message.BrokerID) {
	if st == nil {
		st = &srcState{}
		st.toward = st.tbuf[:0]
		n.fwd.seen[src] = st
		n.fwd.seenOrder = append(n.fwd.seenOrder, src)
		if len(n.fwd.seenOrder) > n.cfg.MaxSources {
			// At the bound the oldest source is forgotten (see
			// Config.MaxSources for the consequence).
			old := n.fwd.seenOrder[0]
			delete(n.fwd.seen, old)
			n.fwd.seenOrder = n.fwd.seenOrder[1:]
		}
	}
	st.seq, st.dir = m.ID.Seq, except
	if n.dsub.subs != nil {
		n.dsub.touch(src, m.ID.Seq) // dursub.go
	}
	recips := n.table.Recipients(&matching.Publication{Attrs: m.Attrs}, except, nil, func(e *routing.Entry) {
		if d := n.dsub.subs[e.Sub]; d != nil {
			n.durLive(e.Sub, d, m) // dursub.go
			return
		}
		n.counters.Delivered++
		n.toClient(e.Client, &message.Deliver{Sub: e.Sub, Pub: m.ID, Attrs: m.Attrs, Payload: m.Payload, Time: m.Time})
	})
	st.mark(except, m.ID.Seq)
	if len(recips) == 0 {
		return // delivered locally (or nowhere): nothing to keep
	}
	n.enqueue(m, except, st, recips) // marks every recipient's direction
}

// enqueue stamps m, queues it for recips, marks their directions in st
// (the source's state) and sends it to their next hops.
func (n *Node) enqueue(m *message.Pub, except message.BrokerID, st *srcState, recips []message.BrokerID) {
	n.fwd.stampSeq++
	e := newQentry(len(recips))
	k := n.cfg.Delta + 1
	stamps := e.stampBuf[:0]
	if k > len(e.stampBuf) {
		stamps = make([]message.Stamp, 0, k)
	}
	c := min(len(m.Stamps), k-1) // the upstream stamps kept
	stamps = stamps[:1+c]
	stamps[0] = message.Stamp{B: n.cfg.ID, E: n.cfg.Epoch, S: n.fwd.stampSeq}
	for i, s := range m.Stamps[:c] {
		stamps[1+i] = s
	}
	e.pub = message.Pub{ID: m.ID, Attrs: m.Attrs, Payload: m.Payload, Time: m.Time, Stamps: stamps}
	e.stamp, e.except = n.fwd.stampSeq, except
	copy(e.recips, recips)
	n.fwd.queue = append(n.fwd.queue, e)
	n.fwd.queueLen++
	n.sendNew(e, st)
}

// sendNew is sendEntry(e, "") for a new entry, which also marks each
// recipient's direction in st first.
func (n *Node) sendNew(e *qentry, st *srcState) {
	n.geometry()
	seq := e.pub.ID.Seq
	var sent [8]*peer
	done := sent[:0]
	for _, r := range e.recips {
		h := n.hop(r)
		st.mark(n.geo.side[r], seq)
		p := n.peers[h.to]
		if !h.ok || p == nil || !p.up {
			continue
		}
		var first bool
		if done, first = addOnce(done, p); first {
			n.sendPub(p, p.id, &e.pub)
		}
	}
}

// addOnce appends p to done unless it is already there, and reports
// whether it was not (a publication goes once to each next hop however
// many recipients lie behind it).
func addOnce(done []*peer, p *peer) ([]*peer, bool) {
	for _, d := range done {
		if d == p {
			return done, false
		}
	}
	return append(done, p), true
}

// sendEntry sends e once over each of its current next hops with an up
// link (only == "": all of them; otherwise only to that peer).
func (n *Node) sendEntry(e *qentry, only message.BrokerID) bool {
	// Next hops are told apart by their peers (one per name, p.id the
	// name); one whose link is down is skipped (and stays down during
	// this loop).
	var sent [8]*peer
	done := sent[:0]
	any := false
	for i, r := range e.recips {
		if e.safe[i] {
			continue
		}
		h := n.hop(r)
		p := n.peers[h.to]
		if !h.ok || p == nil || !p.up || (only != "" && p.id != only) {
			continue
		}
		var first bool
		if done, first = addOnce(done, p); first {
			n.sendPub(p, p.id, &e.pub)
			any = true
		}
	}
	return any
}

// retransmitTo sends to peer t, in stamp order, every queued publication
// for which t is now a next hop.
func (n *Node) retransmitTo(t message.BrokerID) {
	for _, e := range n.fwd.queue {
		if e.purged {
			continue
		}
		if n.sendEntry(e, t) {
			n.counters.Retransmitted++
		}
	}
}

// publish handles a client's Publish.
func (n *Node) publish(c message.ClientID, cs *clientState, m *message.Publish) {
	ack := func(err string) { n.toClient(c, &message.PubAck{Seq: m.Seq, Err: err}) }
	if m.Seq == 0 {
		ack("bad sequence number 0: sequence numbers start at 1")
		return
	}
	st := n.fwd.seen[cs.src]
	if st != nil && m.Seq <= st.seq {
		ack("") // a retry of an accepted publication: acknowledged again, not published twice
		return
	}
	if st != nil && m.Seq != st.seq+1 {
		ack("sequence gap: expected " + uitoa(st.seq+1))
		return
	}
	if err := matching.ValidateAttrs(m.Attrs); err != nil {
		// Refused, not skipped: the publisher keeps Seq for its next
		// (valid) publication, so nothing later is taken for a gap.
		ack("bad publication: " + err.Error())
		return
	}
	if n.mem.leaving {
		ack(ErrLeaving) // not retried here: the publisher must move (leave.go)
		return
	}
	if !n.mem.joined {
		n.counters.Backpressure++
		ack("backpressure")
		return
	}
	if n.fwd.queueLen >= n.cfg.MaxQueue {
		n.counters.Backpressure++
		ack("backpressure")
		return
	}
	if n.logFull() {
		n.counters.LogFull++
		ack(ErrLogFull)
		return
	}
	n.counters.Published++
	id := message.PubID{Publisher: cs.src.Publisher, Epoch: cs.src.Epoch, Seq: m.Seq}
	pub := &message.Pub{ID: id, Attrs: m.Attrs, Payload: m.Payload, Time: m.Time}
	n.acceptSeen(cs.src, st, pub, "")
	n.logAppend(pub) // persisted before the PubAck below is sent
	ack("")
}

// sortedIDs returns the keys of m in id order: map iteration order never
// reaches outputs.
func sortedIDs[V any](m map[message.BrokerID]V) []message.BrokerID {
	ids := make([]message.BrokerID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sortIDs(ids)
	return ids
}

func sortIDs(ids []message.BrokerID) { slices.Sort(ids) }

func uitoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return string(b[i:])
}
