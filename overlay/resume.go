package overlay

import (
	"maps"
	"slices"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/message"
)

// Resuming at the same edge (docs/durable.md "Resuming at the same edge";
// the Gryphon paper's filtering log at the subscriber hosting broker).
//
// From its switch to live, a durable subscription's edge (SHB) holds what
// it delivered that the client has not acknowledged (DurableAck): per
// source, in seq order, the deliveries and Gaps after floor[s], sharing
// the publications' bodies with the routing path (one record per delivery,
// not a copy per subscriber). When the client's session closes, the
// subscription stays installed, away, for Config.KeepAwayTicks: every
// broker still routes its publications here, exactly as for a connected
// subscription, and the edge goes on holding them. A resume here under the
// same name and filter, with a token between the floor and what was
// delivered, takes the subscription over: the held records after the
// token are delivered, and the stream goes on, with no flood, no answer
// from the publishers' edges, and no switch to wait for. Any other resume
// (another token, another filter, another edge) floods as before; a
// resume elsewhere ends the away copy here when its flood passes.
//
// Bounds: Config.MaxHeldBytes over all subscriptions here. A subscription
// whose record would pass it stops holding (an away one ends): its next
// resume floods, which is always correct, only slower.

// heldGapBytes is what a held Gap counts toward MaxHeldBytes.
const heldGapBytes = 64

// holding reports whether d holds its deliveries for a resume here.
func (n *Node) holding(d *dsub) bool {
	return n.cfg.KeepAwayTicks > 0 && d.name != "" && d.held != nil
}

// startHolding starts d's record at its switch: complete after the
// token's position of every source.
func (n *Node) startHolding(d *dsub) {
	if n.cfg.KeepAwayTicks <= 0 || d.name == "" || d.held != nil {
		return // d.held: restored (held.go), it holds already
	}
	d.held = map[message.Source][]message.Message{}
	d.floor = make(map[message.Source]uint64, len(d.tok.Entries))
	for _, e := range d.tok.Entries {
		d.floor[e.Source] = e.From()
	}
	n.heldStarted(d) // held.go
}

// hold records m (a Deliver or Gap of source s) for a resume.
func (n *Node) hold(sub message.SubID, d *dsub, s message.Source, m message.Message) {
	if !n.holding(d) {
		return
	}
	size := heldSize(m)
	if n.cfg.MaxHeldBytes > 0 && n.dsub.heldBytes+size > n.cfg.MaxHeldBytes {
		n.counters.HeldOver++
		if d.away {
			n.endAway(sub, d)
			return
		}
		n.stopHolding(d)
		return
	}
	d.held[s] = append(d.held[s], m)
	d.heldBytes += size
	n.dsub.heldBytes += size
	n.heldAdded(d, s, m) // held.go
}

// stopHolding drops d's record: its next resume floods.
func (n *Node) stopHolding(d *dsub) {
	n.heldStopped(d) // held.go
	n.dsub.heldBytes -= d.heldBytes
	d.held, d.floor, d.heldBytes = nil, nil, 0
}

// heldSeq is the seq a held record is released at: the last seq it
// covers, or for an open Gap (To 0: a hole beyond δ, everything from From
// may be missing) its From. Nothing from From on had arrived here when the
// hole was found, so a token that consumed past From was given the Gap
// first. (At 0 it was dropped by the first acknowledgement.)
func heldSeq(m message.Message) uint64 {
	if g, ok := m.(*message.Gap); ok {
		if g.To == 0 {
			return g.From
		}
		return g.To
	}
	return m.(*message.Deliver).Pub.Seq
}

func heldSize(m message.Message) int64 {
	if d, ok := m.(*message.Deliver); ok {
		p := message.Pub{ID: d.Pub, Attrs: d.Attrs, Payload: d.Payload}
		return p.LogSize()
	}
	return heldGapBytes
}

// releaseHeld drops the records the client acknowledged with token t.
func (n *Node) releaseHeld(d *dsub, t checkpoint.Token) {
	if !n.holding(d) {
		return
	}
	for _, e := range t.Entries {
		s := e.Source
		at := min(e.From(), d.tok.Get(s).From()) // never past what was delivered
		if at <= d.floor[s] {
			continue
		}
		d.floor[s] = at
		l := d.held[s]
		k := 0
		for k < len(l) && heldSeq(l[k]) <= at {
			d.heldBytes -= heldSize(l[k])
			n.dsub.heldBytes -= heldSize(l[k])
			k++
		}
		n.heldReleased(d, s, at, l[:k]) // held.go, before l[:k] is overwritten
		if k == len(l) {
			delete(d.held, s)
		} else {
			// Re-sliced, not shifted: an acknowledgement costs what it
			// drops, not what stays (appends reallocate in time).
			clear(l[:k])
			d.held[s] = l[k:]
		}
	}
}

// resumable reports whether d's record serves a resume from token t now.
func (n *Node) resumable(d *dsub, t checkpoint.Token) bool {
	return n.holding(d) && d.live && inHeld(d, t)
}

// resumableAtSwitch reports whether d, installed again after a restart and
// still flooding (held.go), will serve a resume from t at its switch.
func (n *Node) resumableAtSwitch(d *dsub, t checkpoint.Token) bool {
	return n.holding(d) && !d.live && d.away && inHeld(d, t)
}

// inHeld reports whether, for every source, t is at or after d's floor and
// not after what d delivered (or, not yet live, its position).
func inHeld(d *dsub, t checkpoint.Token) bool {
	ok := func(s message.Source) bool {
		p := t.Get(s).From()
		return d.floor[s] <= p && p <= d.tok.Get(s).From()
	}
	for s := range d.floor {
		if !ok(s) {
			return false
		}
	}
	for _, e := range t.Entries {
		if !ok(e.Source) {
			return false
		}
	}
	for _, e := range d.tok.Entries {
		if !ok(e.Source) {
			return false
		}
	}
	return true
}

// pendingResume is a resume waiting for the switch of a subscription
// installed again after a restart (awaitSwitch).
type pendingResume struct {
	client message.ClientID
	cs     *clientState
	m      *message.Subscribe
	tok    checkpoint.Token
}

// awaitSwitch makes c's resume of d (resumableAtSwitch) wait for d's
// switch, which takes it over (takeOverAtSwitch). A resume already
// waiting is told it was taken over.
func (n *Node) awaitSwitch(sub message.SubID, d *dsub, c message.ClientID, cs *clientState, m *message.Subscribe, t checkpoint.Token) {
	n.dropPending(sub, d, "durable subscription taken over by a newer session")
	d.pending = &pendingResume{client: c, cs: cs, m: m, tok: t}
	cs.subs[sub] = m.Req
	n.toClient(c, &message.SubAck{Req: m.Req, Sub: sub})
}

// dropPending ends d's waiting resume, if any, with an error for its client.
func (n *Node) dropPending(sub message.SubID, d *dsub, why string) {
	p := d.pending
	if p == nil {
		return
	}
	d.pending = nil
	if n.clients[p.client] == p.cs {
		delete(p.cs.subs, sub)
		n.toClient(p.client, &message.UnsubAck{Sub: sub, Err: why})
	}
}

// takeOverAtSwitch gives d's waiting resume, if any, what d holds, as d
// switches to live (switchLive, before it delivers what it buffered): the
// held records after the client's token and the horizons, then d stops
// holding, and the switch goes on as for a flood of the client's own (its
// buffer delivered, confirmed, holding again from there). Holding the
// catch-up too would copy it into the record and the held log, and a long
// one would pass limits.max_held_bytes.
func (n *Node) takeOverAtSwitch(sub message.SubID, d *dsub) {
	p := d.pending
	if p == nil {
		return
	}
	d.pending = nil
	if n.clients[p.client] != p.cs {
		return
	}
	n.takeOver(sub, d, p.client, p.cs, p.m)
	n.sendHeld(sub, d, p.client, p.tok)
	n.stopHolding(d)
}

// resumeHere takes d over for client c with token t (resumable): its
// earlier session, if still open, is told; the held records after t are
// delivered, the horizons sent, and the subscription is confirmed at once.
func (n *Node) resumeHere(sub message.SubID, d *dsub, c message.ClientID, cs *clientState, m *message.Subscribe, t checkpoint.Token) {
	n.takeOver(sub, d, c, cs, m)
	n.toClient(c, &message.SubAck{Req: m.Req, Sub: sub})
	n.sendHeld(sub, d, c, t)
	n.toClient(c, &message.SubAck{Req: m.Req, Sub: sub, Confirmed: true})
}

// takeOver makes d the subscription of client c (its earlier session, if
// still open, is told).
func (n *Node) takeOver(sub message.SubID, d *dsub, c message.ClientID, cs *clientState, m *message.Subscribe) {
	if !d.away {
		if ocs := n.clients[d.client]; ocs != nil {
			delete(ocs.subs, sub)
		}
		n.toClient(d.client, &message.UnsubAck{Sub: sub, Err: "durable subscription taken over by a newer session"})
	}
	d.client, d.req, d.away = c, m.Req, false
	if e, ok := n.table.Get(sub); ok {
		e.Client = c
	}
	cs.subs[sub] = m.Req
	n.counters.ResumedHere++
}

// sendHeld sends client c, whose token is t, d's held records after t
// and the horizons of d's token beyond them.
func (n *Node) sendHeld(sub message.SubID, d *dsub, c message.ClientID, t checkpoint.Token) {
	srcs := slices.SortedFunc(maps.Keys(d.held), srcCmp)
	for _, s := range srcs {
		p := t.Get(s).From()
		for _, x := range d.held[s] {
			switch x := x.(type) {
			case *message.Deliver:
				if x.Pub.Seq > p {
					n.counters.Delivered++
					n.toClient(c, x)
				}
			case *message.Gap:
				if x.To > p || x.To == 0 { // an open Gap: nothing after it says it was got
					g := *x
					g.From = max(g.From, p+1)
					n.counters.Gaps++
					n.toClient(c, &g)
				}
			}
		}
	}
	var horizons []message.SourceSeq
	for _, e := range d.tok.Entries {
		last := t.Get(e.Source).From()
		if l := d.held[e.Source]; len(l) > 0 {
			last = max(last, heldSeq(l[len(l)-1]))
		}
		if e.From() > last {
			horizons = append(horizons, message.SourceSeq{Source: e.Source, Seq: e.From()})
		}
	}
	for len(horizons) > 0 {
		k := min(len(horizons), silenceBatch)
		n.toClient(c, &message.Silence{Sub: sub, Sources: horizons[:k]})
		horizons = horizons[k:]
	}
}

// goAway keeps d, whose session closed, installed and holding for a
// resume here; false when it cannot (the caller withdraws it).
func (n *Node) goAway(d *dsub) bool {
	if !n.holding(d) || !d.live || n.mem.leaving {
		return false
	}
	d.away, d.awaySince = true, n.now
	return true
}

// endAway withdraws the away subscription sub (kept too long, passed the
// bound, or resumed elsewhere).
func (n *Node) endAway(sub message.SubID, d *dsub) {
	n.dropPending(sub, d, "durable subscription resumed elsewhere, or withdrawn at this broker: subscribe again")
	n.stopHolding(d)
	n.dropDurable(sub)
	n.withdrawFlood(sub, "", "", nil)
}

// expireAway ends, once per DACK period, the away subscriptions kept
// Config.KeepAwayTicks.
func (n *Node) expireAway() {
	if n.cfg.KeepAwayTicks <= 0 || len(n.dsub.subs) == 0 || n.now%int64(n.cfg.DACKTicks) != 0 {
		return
	}
	var old []message.SubID
	for sub, d := range n.dsub.subs {
		if d.away && d.pending == nil && n.now-d.awaySince >= int64(n.cfg.KeepAwayTicks) {
			old = append(old, sub)
		}
	}
	slices.SortFunc(old, func(a, b message.SubID) int { return cmpU64(a.N, b.N) })
	for _, sub := range old {
		n.counters.AwayExpired++
		n.endAway(sub, n.dsub.subs[sub])
	}
}

// endAllAway ends every away subscription (this broker leaves).
func (n *Node) endAllAway() {
	var away []message.SubID
	for sub, d := range n.dsub.subs {
		if d.away {
			away = append(away, sub)
		}
	}
	slices.SortFunc(away, func(a, b message.SubID) int { return cmpU64(a.N, b.N) })
	for _, sub := range away {
		n.endAway(sub, n.dsub.subs[sub])
	}
}

// awayResumedElsewhere ends the away subscription of name here when a
// flood of another subscription under that name passes (one home at a
// time: the subscriber resumed at another edge).
func (n *Node) awayResumedElsewhere(sub message.SubID, name string) {
	if name == "" {
		return
	}
	old, ok := n.dsub.names[name]
	if !ok || old == sub {
		return
	}
	if d := n.dsub.subs[old]; d != nil && d.away {
		n.endAway(old, d)
	}
}
