package overlay

import (
	"slices"

	"github.com/deltapub/deltapub/dack"
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

// hopInfo is the current next hop toward one recipient.
type hopInfo struct {
	to      message.BrokerID
	skipped int
	ok      bool
}

// geometry caches, per map version, each known broker's distance and
// direction (the tree neighbour toward it).
func (n *Node) geometry() {
	if n.geoVer == n.topo.Version() {
		return
	}
	n.geoVer = n.topo.Version()
	n.dist = n.topo.Distances(n.cfg.ID)
	n.side = map[message.BrokerID]message.BrokerID{}
	for id := range n.dist {
		if id != n.cfg.ID {
			n.side[id] = n.topo.Direction(id)
		}
	}
}

// pathTo returns the tree path from this broker to r (both included;
// cached by the map, not to be modified).
func (n *Node) pathTo(r message.BrokerID) []message.BrokerID { return n.topo.Path(n.cfg.ID, r) }

// direction returns the tree neighbour toward b ("" when unknown/self).
func (n *Node) direction(b message.BrokerID) message.BrokerID {
	n.geometry()
	return n.side[b]
}

// routesChanged is called whenever usability or the map changed: next hops
// are recomputed, and every broker that became the next hop toward some
// recipient gets, before anything new, every queued publication routed to
// it, in stamp order (the switch rule that keeps per-source "highest
// sequence seen" a sound duplicate filter; docs/protocol.md).
func (n *Node) routesChanged() { n.reroute("") }

// reroute is routesChanged; it reports whether it retransmitted to peer
// linked (a next hop it gained).
func (n *Node) reroute(linked message.BrokerID) (retransmitted bool) {
	n.geometry()
	gained := map[message.BrokerID]bool{}
	ids := sortedIDs(n.hops)
	for _, r := range ids {
		old := n.hops[r]
		h := n.computeHop(r)
		n.hops[r] = h
		if h.ok && (!old.ok || old.to != h.to) {
			gained[h.to] = true
			if h.skipped > 0 {
				n.notice(NoticeBypassUp, h.to, "next hop toward "+string(r))
			}
		}
		if old.ok && old.skipped > 0 && (!h.ok || h.to != old.to) {
			n.notice(NoticeBypassDown, old.to, "no longer next hop toward "+string(r))
		}
	}
	tos := make([]message.BrokerID, 0, len(gained))
	for t := range gained {
		tos = append(tos, t)
	}
	sortIDs(tos)
	for _, t := range tos {
		if p := n.peer(t); p.up {
			n.retransmitTo(t)
			retransmitted = retransmitted || t == linked
		} else {
			n.dial(Peer{ID: t}, false)
		}
	}
	for _, r := range ids {
		if h := n.hops[r]; h.ok && h.skipped > 0 {
			n.prefetchDials(r, h)
		}
	}
	n.probeFrontiers()
	n.floodsReroute()
	n.checkHoles()
	return retransmitted
}

// probeFrontiers dials, behind every unusable tree neighbour, the closest
// brokers not yet known to be unusable (up to δ+1 hops), whether or not a
// route needs them yet: a dead one is then found by its failed dial, so a
// bypass past k failed brokers costs one dial timeout instead of k, and a
// hole longer than δ is detected (checkHoles) even where no route goes.
//
// Not behind a leaver that drains (linked, heard, not suspected): it is
// alive and still forwards what it holds, nothing says a broker behind it
// failed, the bypass hops the routes need are dialled anyway
// (routesChanged), and its frontier is every broker behind it: when
// the centre of a star leaves, each child dialled every other one, n(n−1)
// handshakes at once. On real processes (19 brokers on a 2-core machine)
// those dials outlasted the dial timeout, each failed dial
// made a live broker suspected, the bypass and then the repaired tree's
// links could not come up, and a subscriber's edge got nothing for 2 s
// (its publications were lost when it crashed later). The simulator's
// dials cost nothing and take one round trip, whatever their number, so
// the rule is checked by counting dials (TestLeaveStarRootDialsOnlyWhatRoutesNeed).
func (n *Node) probeFrontiers() {
	if !n.member || n.left {
		return
	}
	for _, f := range n.frontier() {
		if p := n.peer(f); !p.up && !p.dialing && !p.suspected {
			n.dial(Peer{ID: f}, false)
		}
	}
}

// frontier lists, behind every unusable tree neighbour but a draining
// leaver, the closest brokers not known to be unusable (probeFrontiers).
func (n *Node) frontier() []message.BrokerID {
	var out []message.BrokerID
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if !n.unusable(nb) || n.leavingAlive(nb) {
			continue
		}
		front, _ := n.topo.Frontier(nb, n.unusable)
		out = append(out, front...)
	}
	return out
}

// computeHop returns the next hop toward r: the closest broker on the
// path not known unusable (topology.ClosestLive). When that is a bypass
// hop whose link is not up yet (its dial is pending: after δ adjacent
// crashes it is often dead too, and a failed dial takes a dial timeout),
// and a broker further along the path is already linked and known joined
// (probeFrontiers and prefetchDials dialled it at the same time), that one
// is used at once instead of waiting for the dial's outcome. Skipping a
// broker that turns out alive is harmless: it is a bypass like any other,
// and the route switches back to it, with retransmission (switch rule),
// as soon as its link is up. A tree neighbour whose link is merely down
// (skipped = 0) is never skipped this way.
func (n *Node) computeHop(r message.BrokerID) hopInfo {
	to, skipped, ok := n.topo.ClosestLive(r, n.unusable)
	if !ok || skipped == 0 || n.peer(to).up {
		return hopInfo{to: to, skipped: skipped, ok: ok}
	}
	path := n.pathTo(r)
	for i := skipped + 2; i < len(path) && i <= n.cfg.Delta+1; i++ {
		if b := path[i]; n.knownJoined(b) {
			return hopInfo{to: b, skipped: i - 1, ok: true}
		}
	}
	return hopInfo{to: to, skipped: skipped, ok: ok}
}

// hop returns the current next hop toward recipient r.
func (n *Node) hop(r message.BrokerID) hopInfo {
	if h, ok := n.hops[r]; ok {
		return h
	}
	h := n.computeHop(r)
	n.hops[r] = h
	if h.ok && !n.peer(h.to).up {
		n.dial(Peer{ID: h.to}, false)
	}
	return h
}

// prefetchDials dials, when the next hop toward r is not linked yet, the
// brokers behind it on the path to r as well: if the hop turns out dead,
// the next candidate is already linked (F7: one dial timeout, not k).
func (n *Node) prefetchDials(r message.BrokerID, h hopInfo) {
	if !h.ok || n.peer(h.to).up {
		return
	}
	past := false
	for _, b := range n.pathTo(r) {
		if b == h.to {
			past = true
			continue
		}
		if past {
			if p := n.peer(b); !p.up && !p.dialing && !p.suspected {
				n.dial(Peer{ID: b}, false)
			}
		}
	}
}

// onPub processes a publication from peer from.
func (n *Node) onPub(from message.BrokerID, m *message.Pub) {
	if !n.joined {
		// Joining or recovering: the routing state is incomplete, so
		// neither forward nor record it as seen (that would make the
		// retransmission after our recovery a "duplicate"); the sender
		// keeps it queued (we report nothing) and retransmits it when it
		// switches to us, once we say we are joined.
		return
	}
	n.store.Arrive(m.Stamps)
	n.discDirty = true
	src := m.ID.Source()
	st := n.seen[src]
	except := n.direction(from)
	if except == "" {
		except = from
	}
	if st != nil && m.ID.Seq <= st.seq {
		if !n.acceptOlder(st, m, except) {
			n.counters.Duplicates++
			n.holdDuplicate(m)
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
func (n *Node) holdDuplicate(m *message.Pub) {
	if n.queueLen == 0 || len(m.Stamps) == 0 {
		return
	}
	for i := len(n.queue) - 1; i >= 0; i-- {
		e := n.queue[i]
		if e.purged || e.pub.ID != m.ID {
			continue
		}
		for _, s := range m.Stamps {
			n.dupHolds = append(n.dupHolds, dupHold{s: s, e: e})
		}
		return
	}
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
		n.seen[src] = st
		n.seenOrder = append(n.seenOrder, src)
		if len(n.seenOrder) > n.cfg.MaxSources {
			// At the bound the oldest source is forgotten (see
			// Config.MaxSources for the consequence).
			old := n.seenOrder[0]
			delete(n.seen, old)
			n.seenOrder = n.seenOrder[1:]
		}
	}
	st.seq, st.dir = m.ID.Seq, except
	recips := n.table.Recipients(&matching.Publication{Attrs: m.Attrs}, except, nil, func(e *routing.Entry) {
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
	n.stampSeq++
	e := newQentry(len(recips))
	k := n.cfg.Delta + 1
	stamps := e.stampBuf[:0]
	if k > len(e.stampBuf) {
		stamps = make([]message.Stamp, 0, k)
	}
	c := min(len(m.Stamps), k-1) // the upstream stamps kept
	stamps = stamps[:1+c]
	stamps[0] = message.Stamp{B: n.cfg.ID, E: n.cfg.Epoch, S: n.stampSeq}
	for i, s := range m.Stamps[:c] {
		stamps[1+i] = s
	}
	e.pub = message.Pub{ID: m.ID, Attrs: m.Attrs, Payload: m.Payload, Time: m.Time, Stamps: stamps}
	e.stamp, e.except = n.stampSeq, except
	copy(e.recips, recips)
	n.queue = append(n.queue, e)
	n.queueLen++
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
		st.mark(n.side[r], seq)
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
	for _, e := range n.queue {
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
	st := n.seen[cs.src]
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
	if n.leaving {
		ack(ErrLeaving) // not retried here: the publisher must move (leave.go)
		return
	}
	if !n.joined {
		n.counters.Backpressure++
		ack("backpressure")
		return
	}
	if n.queueLen >= n.cfg.MaxQueue {
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

// dackLinks sends the aggregated DACKs: each link carries at most one
// DACK per DACKTicks ticks, whatever the publication rate (aggregation).
// When it goes out within that budget is chosen so that relays pipeline
// (dackDue). Own discarded watermarks are refreshed right before any DACK
// is built.
func (n *Node) dackLinks() {
	ver := n.store.Version()
	due := false
	for _, p := range n.peers {
		if p.up && (p.dackSent != ver || n.discDirty) && n.dackDue(p) {
			due = true
			break
		}
	}
	if !due {
		return
	}
	if n.discDirty {
		n.discDirty = false
		n.updateDiscarded()
	}
	n.geometry()
	ver = n.store.Version()
	for _, id := range n.sortedPeers() {
		p := n.peers[id]
		if !p.up || !n.dackDue(p) || p.dackSent == ver {
			continue
		}
		pside := n.side[id]
		if pside == "" {
			pside = id
		}
		entries := n.store.Build(p.dackSent, func(reporter, about message.BrokerID) bool {
			return n.dackRelays(reporter, about, pside)
		})
		p.dackSent = ver
		if len(entries) == 0 {
			continue
		}
		p.dackAt = n.now
		n.send(id, &message.DAck{Entries: entries})
	}
}

// dackRelays reports whether the DACK on the link toward side pside
// carries the entry (reporter, about): entries about brokers on that side,
// either our own or relayed from a reporter on another side within δ+1
// hops of the broker it is about.
func (n *Node) dackRelays(reporter, about, pside message.BrokerID) bool {
	if about == n.cfg.ID {
		return false
	}
	as := n.side[about]
	if as == "" {
		as = about
	}
	if as != pside {
		return false
	}
	if reporter != n.cfg.ID {
		rs, ok := n.side[reporter]
		if !ok || rs == pside {
			return false
		}
		if n.dist[reporter]+n.dist[about] > n.cfg.Delta+1 {
			return false
		}
	}
	return true
}

// dackDue reports whether the DACK on link p may go out this tick: never
// within DACKTicks ticks of the previous one on that link (one DACK per
// link per period, whatever the publication rate). At the first allowed
// tick it is held back one tick if another neighbour's DACK is due in this
// very tick — one arrived in the tick of our last DACK on p (that link
// runs at our phase) and none since — so that its reports are relayed
// with ours a tick later rather than a period later. Why: the drain after
// publishing stops is a chain of relays up to δ+1 hops back to the
// stamping broker (docs/protocol.md §6); when traffic starts everywhere
// at once every link runs at the same phase and each relay hop costs a
// whole period, while with this rule a link settles a tick behind its
// inputs (leaves first), so a chain costs about a tick per hop. The hold
// is one tick at most: a period of a link is DACKTicks or DACKTicks+1.
func (n *Node) dackDue(p *peer) bool {
	late := n.now - p.dackAt - int64(n.cfg.DACKTicks)
	if late != 0 {
		return late > 0
	}
	for _, k := range n.peers {
		if k != p && k.up && k.dackIn > 0 && k.dackIn == p.dackAt {
			return false
		}
	}
	return true
}

func (n *Node) onDAck(from message.BrokerID, m *message.DAck) {
	if p, ok := n.peers[from]; ok {
		p.dackIn = n.now
	}
	changed := false
	for _, e := range m.Entries {
		if e.Reporter == n.cfg.ID || e.Reporter == "" || e.About == "" {
			continue
		}
		if e.About == n.cfg.ID && e.AE != n.cfg.Epoch {
			continue
		}
		if n.store.Put(e) && e.About == n.cfg.ID {
			changed = true
		}
	}
	if changed {
		// Purge at once rather than on the next tick: the drain after
		// publishing stops is a chain of DACK hops, and each would
		// otherwise wait up to a tick more. One pass per DACK received,
		// i.e. at most one per link per DACK period: bounded whatever the
		// publication rate.
		n.purge()
	}
}

// purge drops every queued publication that is safe for all its
// recipients (dack.Safe along the tree path to each), and compacts the
// queue.
func (n *Node) purge() {
	n.purgeDirty = false
	// One threshold per recipient (dack.Threshold ≡ dack.Safe for every
	// stamp at once), then one comparison per queued recipient.
	th := map[message.BrokerID]uint64{}
	kept := n.queue[:0]
	for _, e := range n.queue {
		all := true
		for i, r := range e.recips {
			if e.safe[i] {
				continue
			}
			t, ok := th[r]
			if !ok {
				t = n.recipThreshold(r)
				th[r] = t
			}
			if e.stamp <= t {
				e.safe[i] = true
			} else {
				all = false
			}
		}
		if all {
			e.purged = true
			n.queueLen--
			n.discDirty = true
			n.counters.Purged++
			continue
		}
		kept = append(kept, e)
	}
	clear(n.queue[len(kept):])
	n.queue = kept
}

// recipThreshold is dack.Threshold over the tree path to r without this
// broker (0 when r is unknown or this broker).
func (n *Node) recipThreshold(r message.BrokerID) uint64 {
	path := n.pathTo(r)
	if len(path) <= 1 {
		return 0
	}
	return dack.Threshold(path[1:], n.store.About)
}

// updateDiscarded sets this broker's discarded watermark about each
// upstream broker U: every publication received with a U-stamp up to it
// is no longer queued here (nor held by a duplicate, dupHolds).
func (n *Node) updateDiscarded() {
	type pair struct {
		b message.BrokerID
		e uint64
	}
	low := map[pair]uint64{} // the lowest queued U-stamp per (B, E)
	for _, e := range n.queue {
		if e.purged {
			continue
		}
		for _, s := range e.pub.Stamps[1:] {
			k := pair{s.B, s.E}
			if v, ok := low[k]; !ok || s.S < v {
				low[k] = s.S
			}
		}
	}
	caps := map[pair]uint64{} // discarded stays below these
	for k, s := range low {
		caps[k] = s - 1 // wraps for S = 0: no cap
	}
	holds := n.dupHolds[:0]
	for _, d := range n.dupHolds {
		if d.e.purged {
			continue // the queued copy left: the hold is released
		}
		holds = append(holds, d)
		k := pair{d.s.B, d.s.E}
		c, ok := caps[k]
		if !ok {
			c = ^uint64(0)
		}
		caps[k] = min(c, d.s.S-1)
	}
	clear(n.dupHolds[len(holds):])
	n.dupHolds = holds
	for _, o := range n.store.OwnKeys() {
		c, ok := caps[pair{o.B, o.E}]
		if !ok {
			c = ^uint64(0) // none queued: discarded up to arrived
		}
		n.store.SetDiscarded(o.B, o.E, c)
	}
}

// releaseRecipients recomputes the recipients of every queued publication
// after subscriptions were withdrawn on behalf of a gone broker: what was
// queued only for it is released.
func (n *Node) releaseRecipients() {
	for _, e := range n.queue {
		if e.purged {
			continue
		}
		pm := matching.Publication{Attrs: e.pub.Attrs}
		now := n.table.Recipients(&pm, e.except, nil, nil)
		var recips []message.BrokerID
		var safe []bool
		for i, r := range e.recips {
			for _, x := range now {
				if x == r {
					recips = append(recips, r)
					safe = append(safe, e.safe[i])
					break
				}
			}
		}
		e.recips, e.safe = recips, safe
	}
	n.purge()
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

// bypassInUse reports whether some next hop is a bypass hop: a newly
// linked broker may then change routes (computeHop: a linked broker behind
// a pending bypass hop, or a skipped broker that turned out alive).
func (n *Node) bypassInUse() bool {
	for _, h := range n.hops {
		if h.ok && h.skipped > 0 {
			return true
		}
	}
	return false
}
