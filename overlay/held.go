package overlay

import (
	"maps"
	"slices"
	"strings"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
)

// An edge that restarts with what it held (Config.PersistHeld;
// docs/durable.md "An edge that restarts"): the Gryphon paper's persistent
// filtering log at the subscriber hosting broker.
//
// What the durable subscriptions of this edge hold for a resume here
// (resume.go) is reported, change by change, in Ready.Held, and the
// environment applies each Ready's changes as one batch: each publication
// once, however many subscriptions hold it, and per subscription an index
// of what it holds (seqs and Gaps), its floor (what its client
// acknowledged) and its position (its token: what the records complete).
// A broker restarted with them is given them (RestoreHeld) before it
// starts; once joined it installs each subscription again, away, under a
// new identity, and floods it from its position, so the publishers' edges
// answer what arrived while it was down (from their retention, or a Gap)
// as for any durable flood. Its client resuming here with its token gets
// the held records after the token, from disk, with no flood from the
// token and no need for the publishers' edges to have retained them.
//
// Why a crash between any two batches is safe: the changes up to any Ready
// give a subscription whose records complete its floor up to its
// position. A client's token is at or after the floor (the floor moves
// only on its acknowledgements); a token after the position (deliveries
// not yet applied when the broker crashed) is not resumable here
// (resumable), and floods as without persistence.

// HeldChanges is what changed, since the last Ready, in what this edge
// holds (Config.PersistHeld). Apply Events, then Subs in order, then
// Dropped, as one atomic batch: no sync is needed before anything is sent
// (see the file comment), so a lost suffix only makes a later resume
// flood.
type HeldChanges struct {
	Events  []message.Pub   // publications held by a first subscription here: keep once
	Subs    []HeldChange    // in order
	Dropped []message.PubID // publications no subscription holds any longer
}

// Empty reports whether c changes nothing.
func (c *HeldChanges) Empty() bool {
	return len(c.Events)+len(c.Subs)+len(c.Dropped) == 0
}

// HeldChange is one change to the durable subscription Name.
type HeldChange struct {
	Name string
	// Start: forget what Name held; it holds from Start.Floor on.
	Start *HeldStart
	// Records held after the previous ones, per source in seq order.
	Records []HeldRecord
	// Floor: the records of each source up to Seq were acknowledged: drop
	// them.
	Floor []message.SourceSeq
	// Token is the position now (checkpoint encoding), when it changed.
	Token []byte
	// Drop: forget Name and its records.
	Drop bool
}

// HeldStart begins a subscription's record: its filter and its floor.
type HeldStart struct {
	Filter string // PADRES text
	Floor  []message.SourceSeq
}

// HeldRecord is one held delivery of Seq (GapFrom 0), or a Gap
// GapFrom…Seq, of Source.
type HeldRecord struct {
	Source  message.Source
	Seq     uint64
	GapFrom uint64
}

// HeldSub is a durable subscription given back to a restarted broker
// (RestoreHeld): what the changes applied say of it.
type HeldSub struct {
	Name   string
	Filter matching.Filter
	Floor  []message.SourceSeq
	Token  []byte
	// Records: Deliver (with the publication) or Gap messages, per
	// source in seq order, after Floor and up to Token's position.
	Records []message.Message
}

// heldGapReason is the Reason of a Gap given back from a restored record.
const heldGapReason = "no longer retained by the publisher's edge (retention) when this subscription asked for it"

// heldOut is the core's side of the persistence: the changes not yet
// returned by Ready, and how many subscriptions hold each publication.
type heldOut struct {
	refs    map[message.PubID]int
	put     map[message.PubID]*message.Deliver // held by a first one since the last Ready
	dropped map[message.PubID]bool             // held by none since the last Ready
	changes []HeldChange
	tokens  map[string]bool // names whose position changed
	// restored: given by RestoreHeld, installed once joined.
	restored []HeldSub
}

func (h *heldOut) init() {
	if h.refs == nil {
		h.refs, h.put, h.dropped = map[message.PubID]int{}, map[message.PubID]*message.Deliver{}, map[message.PubID]bool{}
	}
}

func (h *heldOut) pending() bool {
	return len(h.put)+len(h.dropped)+len(h.changes)+len(h.tokens) > 0
}

// persisting reports whether d's record is reported in Ready.Held.
func (n *Node) persisting(d *dsub) bool {
	return n.cfg.PersistHeld && n.holding(d)
}

// change returns the change of name to add to (a new one unless the last
// change is name's and adds records only).
func (n *Node) heldChange(name string) *HeldChange {
	h := &n.held
	if k := len(h.changes); k > 0 && h.changes[k-1].Name == name && h.changes[k-1].Floor == nil && !h.changes[k-1].Drop {
		return &h.changes[k-1]
	}
	h.changes = append(h.changes, HeldChange{Name: name})
	return &h.changes[len(h.changes)-1]
}

func (n *Node) heldTokenChanged(d *dsub) {
	if !n.persisting(d) {
		return
	}
	if n.held.tokens == nil {
		n.held.tokens = map[string]bool{}
	}
	n.held.tokens[d.name] = true
}

// heldStarted reports d's record begun (startHolding).
func (n *Node) heldStarted(d *dsub) {
	if !n.persisting(d) {
		return
	}
	st := &HeldStart{Filter: d.filter.String()}
	for _, s := range slices.SortedFunc(maps.Keys(d.floor), srcCmp) {
		st.Floor = append(st.Floor, message.SourceSeq{Source: s, Seq: d.floor[s]})
	}
	n.held.changes = append(n.held.changes, HeldChange{Name: d.name, Start: st})
	n.heldTokenChanged(d)
}

// heldAdded reports m (a Deliver or Gap of s) held by d.
func (n *Node) heldAdded(d *dsub, s message.Source, m message.Message) {
	if !n.persisting(d) {
		return
	}
	c := n.heldChange(d.name)
	switch m := m.(type) {
	case *message.Deliver:
		c.Records = append(c.Records, HeldRecord{Source: s, Seq: m.Pub.Seq})
		n.heldRef(m, +1)
	case *message.Gap:
		c.Records = append(c.Records, HeldRecord{Source: s, Seq: m.To, GapFrom: m.From})
	}
	n.heldTokenChanged(d)
}

// heldReleased reports d's records of s up to seq dropped (acknowledged).
func (n *Node) heldReleased(d *dsub, s message.Source, seq uint64, gone []message.Message) {
	if !n.persisting(d) {
		return
	}
	n.held.changes = append(n.held.changes, HeldChange{Name: d.name, Floor: []message.SourceSeq{{Source: s, Seq: seq}}})
	n.heldUnref(gone)
}

// heldStopped reports d's record dropped whole (it stops holding).
func (n *Node) heldStopped(d *dsub) {
	if !n.persisting(d) {
		return
	}
	n.held.changes = append(n.held.changes, HeldChange{Name: d.name, Drop: true})
	for _, l := range d.held {
		n.heldUnref(l)
	}
	delete(n.held.tokens, d.name)
}

func (n *Node) heldUnref(l []message.Message) {
	for _, m := range l {
		if x, ok := m.(*message.Deliver); ok {
			n.heldRef(x, -1)
		}
	}
}

// heldRef counts one more (or one fewer) subscription holding m's
// publication; the first one adds it to Events, the last one's going adds
// it to Dropped (each cancelling the other within one Ready).
func (n *Node) heldRef(m *message.Deliver, delta int) {
	h := &n.held
	h.init()
	id := m.Pub
	h.refs[id] += delta
	switch h.refs[id] {
	case 1:
		if delta > 0 {
			if h.dropped[id] {
				delete(h.dropped, id) // still on disk
			} else {
				h.put[id] = m
			}
		}
	case 0:
		delete(h.refs, id)
		if h.put[id] != nil {
			delete(h.put, id) // never written
		} else {
			h.dropped[id] = true
		}
	}
}

// takeHeld moves the pending changes into the Ready being returned.
func (n *Node) takeHeld() {
	h := &n.held
	if !h.pending() {
		return
	}
	out := &n.out.Held
	for _, id := range slices.SortedFunc(maps.Keys(h.put), pubIDCmp) {
		d := h.put[id]
		out.Events = append(out.Events, message.Pub{ID: d.Pub, Attrs: d.Attrs, Payload: d.Payload, Time: d.Time})
	}
	out.Subs = append(out.Subs, h.changes...)
	for _, name := range slices.Sorted(maps.Keys(h.tokens)) {
		if sub, ok := n.dsub.names[name]; ok {
			if d := n.dsub.subs[sub]; d != nil && n.persisting(d) {
				out.Subs = append(out.Subs, HeldChange{Name: name, Token: d.tok.Encode()})
			}
		}
	}
	out.Dropped = append(out.Dropped, slices.SortedFunc(maps.Keys(h.dropped), pubIDCmp)...)
	clear(h.put)
	clear(h.dropped)
	clear(h.tokens)
	h.changes = nil
}

func pubIDCmp(a, b message.PubID) int {
	if c := srcCmp(a.Source(), b.Source()); c != 0 {
		return c
	}
	return cmpU64(a.Seq, b.Seq)
}

// RestoreHeld gives a broker restarted with its held records what they
// say, before Bootstrap or Join. Each subscription is installed again once
// this broker is joined (reinstallHeld). Ignored without
// Config.PersistHeld or KeepAwayTicks.
func (n *Node) RestoreHeld(subs []HeldSub) {
	if !n.cfg.PersistHeld || n.cfg.KeepAwayTicks <= 0 || n.mem.member {
		return
	}
	n.held.restored = append(n.held.restored, subs...)
}

// reinstallHeld installs the restored subscriptions, once joined: each
// away, holding its records, flooded from its position. A name that
// another edge hosts now (its entry is known here: the subscriber resumed
// there while this broker was down) is forgotten instead, with the
// publications only it held.
func (n *Node) reinstallHeld() {
	subs := n.held.restored
	n.held.restored = nil
	slices.SortFunc(subs, func(a, b HeldSub) int { return strings.Compare(a.Name, b.Name) })
	elsewhere := map[string]bool{}
	for sub, r := range n.dsub.routes {
		// An entry of our own earlier incarnation is the one restored.
		if r.df != nil && r.df.Name != "" && sub.Edge != n.cfg.ID {
			elsewhere[r.df.Name] = true
		}
	}
	n.held.init()
	var dropped []*HeldSub
	for i := range subs {
		if elsewhere[subs[i].Name] || !n.reinstall(&subs[i]) {
			dropped = append(dropped, &subs[i])
		}
	}
	for _, h := range dropped {
		n.counters.HeldDropped++
		n.held.changes = append(n.held.changes, HeldChange{Name: h.Name, Drop: true})
		for _, m := range h.Records {
			if x, ok := m.(*message.Deliver); ok && n.held.refs[x.Pub] == 0 {
				n.held.dropped[x.Pub] = true
			}
		}
	}
}

// reinstall installs h; false when it cannot (its token does not decode,
// or the bounds refuse it).
func (n *Node) reinstall(h *HeldSub) bool {
	tok, err := checkpoint.Decode(h.Token)
	if err != nil || tok.Name != h.Name || len(n.dsub.subs) >= maxDurableSubs {
		return false
	}
	n.subN++
	sub := message.SubID{Edge: n.cfg.ID, Epoch: n.cfg.Epoch, N: n.subN}
	if _, err := n.table.Insert(routing.Entry{Sub: sub, Filter: h.Filter, From: n.cfg.ID, Local: true}); err != nil {
		return false
	}
	d := &dsub{name: h.Name, filter: h.Filter, tok: tok, away: true, awaySince: n.now,
		buf: map[message.Source][]message.Pub{}, last: map[message.Source]uint64{}, ans: map[message.Source][][2]uint64{},
		held: map[message.Source][]message.Message{}, floor: map[message.Source]uint64{}}
	for _, f := range h.Floor { // a source without one: from its start (startHolding)
		d.floor[f.Source] = f.Seq
	}
	for _, m := range h.Records {
		var s message.Source
		switch x := m.(type) {
		case *message.Deliver:
			s = x.Pub.Source()
			x.Sub = sub
			n.held.refs[x.Pub]++ // on disk already
		case *message.Gap:
			s = x.Source
			x.Sub = sub
			if x.Reason == "" {
				x.Reason = heldGapReason
			}
		}
		d.held[s] = append(d.held[s], m)
		sz := heldSize(m)
		d.heldBytes += sz
		n.dsub.heldBytes += sz
	}
	if n.dsub.subs == nil {
		n.dsub.subs = map[message.SubID]*dsub{}
		n.dsub.names = map[string]message.SubID{}
	}
	n.dsub.subs[sub] = d
	n.dsub.names[h.Name] = sub
	n.counters.HeldRestored++
	// As a client resuming with this token would: a source the token does
	// not name is owed from its start, unless the token is empty.
	df := &message.DurableFlood{Name: h.Name, Fresh: len(tok.Entries) == 0}
	for _, e := range tok.Entries {
		df.From = append(df.From, message.SourceSeq{Source: e.Source, Seq: e.From()})
	}
	n.durFlood(sub, d, df, func() {
		if n.dsub.subs[sub] == d {
			n.floodAgain(sub, d, func() {
				if n.dsub.subs[sub] == d {
					n.switchLive(sub, d)
				}
			})
		}
	})
	return true
}
