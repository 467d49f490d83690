package overlay

import (
	"fmt"
	"slices"
	"sort"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
)

type floodKind uint8

const (
	fkSub floodKind = iota + 1
	fkUnsub
	fkTopo
	fkMark // first phase of a client's unsubscription (still routed)
)

// floodKey names one flood with echo: a subscription, an unsubscription,
// or a topology change (origin, seq).
type floodKey struct {
	kind   floodKind
	sub    message.SubID
	origin message.BrokerID
	seq    uint64
}

func floodLess(a, b floodKey) bool {
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if a.sub != b.sub {
		return routing.SubLess(a.sub, b.sub)
	}
	if a.origin != b.origin {
		return a.origin < b.origin
	}
	return a.seq < b.seq
}

// flood is one flood in progress at this broker: it was forwarded to the
// brokers in out and is confirmed back to the waiters once each has
// answered (or was found failed and replaced by the live brokers behind
// it).
type flood struct {
	key floodKey
	// targets lists every broker the flood was sent to, with its
	// incarnation when first sent and whether its answer is awaited (a
	// small slice: a flood has a handful of targets); nOut counts the
	// awaited ones.
	targets []ftarget
	nOut    int
	hole    bool // some direction is cut off beyond δ (see floodCheck)
	waiters []message.BrokerID
	except  message.BrokerID // the direction it came from
	budget  int              // topology floods: hops it may still travel; -1 = unlimited
	// msg builds the message for one target; nil for (un)subscription
	// floods, whose message follows from the key (floodMsg).
	msg  func(to message.BrokerID, dist int) message.Message
	done func() // called at this broker when complete (local origin)
}

// Bounds of the flood bookkeeping; at the bound the oldest remembered key
// is forgotten (a very late duplicate flood is then answered as new: for
// subscriptions it is reinstalled only if no tombstone remains, which is
// why the tombstone bound is large).
const (
	maxTombstones = 1 << 16
	maxTopoSeen   = 1 << 12
	maxGapSeen    = 1 << 12
)

type ftarget struct {
	id    message.BrokerID
	epoch uint64
	out   bool
	// sentUsable: the last send reached it while it was routable (joined).
	// A target that was joining or recovering then may have dropped or
	// merely acknowledged the flood; it gets it again once joined, so
	// that it passes the flood on to the brokers behind it.
	sentUsable bool
}

func (f *flood) find(id message.BrokerID) *ftarget {
	for i := range f.targets {
		if f.targets[i].id == id {
			return &f.targets[i]
		}
	}
	return nil
}

func (f *flood) isOut(id message.BrokerID) bool {
	t := f.find(id)
	return t != nil && t.out
}

// answered marks id as no longer awaited.
func (f *flood) answered(id message.BrokerID) {
	if t := f.find(id); t != nil && t.out {
		t.out = false
		f.nOut--
	}
}

type target struct {
	id   message.BrokerID
	dist int
}

// floodTargets returns, for every tree direction other than except, the
// closest usable brokers (the neighbour, or the frontier behind it), plus
// every recovering broker on the way that is linked and not suspected, a
// neighbour or one walked past behind a crashed one: it must learn floods
// that happen during its recovery (a leave's repair missed there left its
// from-pointers naming the leaver: scenario
// leave_repair_reaches_recovering_broker_behind_crash.txt). With all
// (subscription floods), every unusable broker walked past is a target,
// unless gone: a suspected broker may be alive behind a cut or a freeze
// and must get the subscription before it is confirmed (see floodGaveUp).
// hole (only with all) reports that some direction is cut off beyond δ.
func (n *Node) floodTargets(except message.BrokerID, all bool) (out []target, hole bool) {
	n.geometry()
	add := func(id message.BrokerID) {
		for _, t := range out {
			if t.id == id {
				return
			}
		}
		out = append(out, target{id: id, dist: n.geo.dist[id]})
	}
	// linked: linked and not suspected though unusable (recovering, or a
	// leaver that drains): it gets floods anyway.
	linked := func(p *peer) bool { return p != nil && p.up && !p.suspected }
	for _, nb := range n.topo.Neighbours(n.cfg.ID) {
		if nb == except {
			continue
		}
		if !n.unusable(nb) {
			add(nb)
			continue
		}
		if linked(n.peers[nb]) {
			add(nb)
		}
		front, skipped, cut := n.topo.FrontierSkipped(nb, n.unusable)
		for _, f := range front {
			add(f)
		}
		hole = hole || (all && cut)
		for _, s := range skipped {
			if p := n.peers[s]; (p == nil || !p.gone) && (all || linked(p)) {
				add(s)
			}
		}
	}
	return out, hole
}

// startFlood registers f and sends it to its targets; it completes at once
// when there are none.
func (n *Node) startFlood(f *flood) {
	n.floods.pending[f.key] = f
	if f.key.kind == fkTopo {
		n.recordTopo(f)
	}
	ts, hole := n.floodTargets(f.except, f.key.kind != fkTopo)
	f.hole = hole
	for _, t := range ts {
		if f.budget >= 0 && t.dist > f.budget {
			continue
		}
		n.sendFlood(f, t)
	}
	n.floodCheck(f)
}

func (n *Node) sendFlood(f *flood, t target) {
	p := n.peer(t.id)
	ft := f.find(t.id)
	if ft == nil {
		f.targets = append(f.targets, ftarget{id: t.id, epoch: p.epoch, out: true})
		ft = &f.targets[len(f.targets)-1]
		f.nOut++
	} else if !ft.out {
		ft.out = true
		f.nOut++
	}
	if !p.up {
		n.dial(Peer{ID: t.id}, false)
		return // sent on LinkUp (floodsResend)
	}
	ft.sentUsable = p.heardHB && p.joined && !p.suspected // knownJoined (p is up)
	n.sendP(p, t.id, n.floodMsg(f, t.id, t.dist))
}

func (n *Node) floodCheck(f *flood) {
	if f.nOut > 0 || f.hole {
		// A (un)subscription flood also waits while part of the overlay
		// is cut off beyond δ: it cannot reach the brokers there, so it
		// is not confirmed until the hole heals and the flood goes on.
		return
	}
	delete(n.floods.pending, f.key)
	round := uint8(0)
	if f.key.kind == fkSub && n.dsub.floods != nil {
		round = n.floodRound(f.key.sub)
		delete(n.dsub.floods, f.key.sub) // dursub.go
	}
	for _, w := range f.waiters {
		if w == "" {
			continue
		}
		n.sendFloodAck(f.key, w, round)
	}
	if f.done != nil {
		f.done()
	}
}

// sendFloodAck answers flood k to to; round (subscription floods only) is
// the round of the durable flood answered (message.FloodRound): a broker
// that answers both floods of a durable subscription must not have its
// late answer to the first taken for one to the second.
func (n *Node) sendFloodAck(k floodKey, to message.BrokerID, round uint8) {
	switch k.kind {
	case fkSub:
		n.send(to, &message.SubConfirm{Sub: k.sub, Round: round})
	case fkUnsub:
		n.send(to, &message.SubConfirm{Sub: k.sub, Unsub: true})
	case fkMark:
		n.send(to, &message.SubConfirm{Sub: k.sub, Unsub: true, Mark: true})
	case fkTopo:
		n.send(to, &message.TopoAck{Origin: k.origin, Seq: k.seq})
	}
}

func (n *Node) floodAck(k floodKey, from message.BrokerID) {
	f, ok := n.floods.pending[k]
	if !ok || !f.isOut(from) {
		return
	}
	f.answered(from)
	n.floodCheck(f)
}

// floodsResend re-sends every pending flood whose target is id, on its new
// link.
func (n *Node) floodsResend(id message.BrokerID) {
	n.geometry()
	for _, k := range n.floodKeys() {
		f := n.floods.pending[k]
		if ft := f.find(id); ft != nil && ft.out {
			ft.sentUsable = n.knownJoined(id)
			n.send(id, n.floodMsg(f, id, n.geo.dist[id]))
		}
	}
}

// floodsReroute replaces, in every pending flood, targets that became
// unusable by the live brokers behind them.
func (n *Node) floodsReroute() {
	// The targets depend on the direction a flood came from and its kind,
	// not on the flood: computed once per pass for each (a restarted
	// neighbour's re-learning leaves thousands of floods pending, and a
	// pass per route change each recomputing its frontiers kept a broker
	// busy for seconds).
	type targetsOf struct {
		except message.BrokerID
		all    bool
	}
	type targetSet struct {
		ts   []target
		hole bool
	}
	memo := map[targetsOf]targetSet{}
	for _, k := range n.floodKeys() {
		f, ok := n.floods.pending[k]
		if !ok {
			continue
		}
		for i := range f.targets {
			t := &f.targets[i]
			if p := n.peers[t.id]; p != nil && t.out && p.epoch > t.epoch {
				if f.key.kind == fkTopo {
					// Restarted since: its map comes with its recovery.
					f.answered(t.id)
					continue
				}
				// Restarted since: its recovery brings the entry, but the
				// brokers behind it may still lack it; it gets the flood
				// again once it is joined, and passes it on.
				t.epoch, t.sentUsable = p.epoch, false
			}
			if p := n.peers[t.id]; p != nil && t.out && !t.sentUsable && p.up && n.knownJoined(t.id) {
				t.sentUsable = true
				n.send(t.id, n.floodMsg(f, t.id, n.geo.dist[t.id]))
			}
		}
		key := targetsOf{f.except, f.key.kind != fkTopo}
		set, ok := memo[key]
		if !ok {
			set.ts, set.hole = n.floodTargets(key.except, key.all)
			memo[key] = set
		}
		ts, hole := set.ts, set.hole
		f.hole = hole
		want := map[message.BrokerID]bool{}
		for _, t := range ts {
			if f.budget >= 0 && t.dist > f.budget {
				continue
			}
			want[t.id] = true
			if f.find(t.id) == nil {
				n.sendFlood(f, t)
			}
		}
		for i := range f.targets {
			t := &f.targets[i]
			if !t.out || want[t.id] {
				continue
			}
			if !n.unusable(t.id) {
				if d := n.direction(t.id); d != "" && d == f.except {
					// Our map changed and it lies on the side the flood
					// came from: not a target any more.
					f.answered(t.id)
				}
				continue
			}
			if f.key.kind == fkTopo || n.floodGaveUp(f, t.id) {
				f.answered(t.id)
			}
		}
		n.floodCheck(f)
	}
}

// knownJoined reports whether id's heartbeat on the current link said it
// is joined (a flood it got then was processed, not ignored).
func (n *Node) knownJoined(id message.BrokerID) bool {
	p := n.peers[id]
	return p != nil && p.up && p.heardHB && p.joined && !p.suspected
}

// floodGaveUp reports whether a (un)subscription flood may stop waiting
// for target id, which is unusable: only when id restarted since (its new
// incarnation learns every subscription through its recovery) or was
// declared gone. A merely suspected broker may be alive behind a cut or a
// freeze: it must get the flood before the subscription is confirmed
// (a publisher attached to it would otherwise not route toward the
// subscriber), so the flood waits and is re-sent on the next link to it.
func (n *Node) floodGaveUp(f *flood, id message.BrokerID) bool {
	p := n.peers[id]
	if p == nil {
		return true
	}
	return p.gone
}

func (n *Node) floodKeys() []floodKey {
	ks := make([]floodKey, 0, len(n.floods.pending))
	for k := range n.floods.pending {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return floodLess(ks[i], ks[j]) })
	return ks
}

func (n *Node) localFloodsPending() bool {
	for _, f := range n.floods.pending {
		if f.done != nil {
			return true
		}
	}
	return false
}

// floodMsg is the message of flood f for target to at distance dist.
func (n *Node) floodMsg(f *flood, to message.BrokerID, dist int) message.Message {
	if f.msg != nil {
		return f.msg(to, dist)
	}
	switch f.key.kind {
	case fkSub:
		return n.subFloodTo(f.key.sub, dist)
	case fkUnsub:
		return &message.SubFlood{Sub: f.key.sub, Unsub: true}
	case fkMark:
		return &message.SubFlood{Sub: f.key.sub, Unsub: true, Mark: true}
	}
	panic("overlay: flood without a message")
}

// subFloodTo builds the SubFlood of sub's entry for a target at distance
// dist (From recomputed for it); the withdrawal when the entry is gone.
func (n *Node) subFloodTo(sub message.SubID, dist int) *message.SubFlood {
	e, ok := n.table.Get(sub)
	if !ok {
		return &message.SubFlood{Sub: sub, Unsub: true}
	}
	from := n.cfg.ID
	if !e.Local {
		from = n.topo.FromFor(e.From, dist)
	}
	return &message.SubFlood{Sub: sub, Filter: e.Filter, From: from, Durable: n.dsub.floods[sub]}
}

func (n *Node) onSubFlood(from message.BrokerID, m *message.SubFlood) {
	k := floodKey{kind: fkSub, sub: m.Sub}
	if m.Unsub {
		k.kind = fkUnsub
		if m.Mark {
			k.kind = fkMark
		}
	}
	if !n.mem.member {
		// Joining or recovering without a map yet: the state transfer that
		// follows brings the entry, and the sender sends the flood again
		// once we are joined (ftarget.sentUsable).
		return
	}
	if n.repairOut() {
		// Leaving, with the repair out: the sender has not applied it yet.
		// Forwarded from here on the old tree, the flood would reach
		// brokers that take it as coming from a broker no longer in their
		// maps, with a wrong direction, and floods waiting on each other
		// around the new edges never completed (scenario
		// leave_repaired_leaver_forwards_no_flood.txt). Not
		// answered either: the sender keeps waiting for us until the
		// repair makes us gone there, then reroutes on the new tree.
		return
	}
	if f, ok := n.floods.pending[k]; ok {
		if f.isOut(from) {
			// Crossed floods: a broker whose answer we await sends us the
			// same flood (its view of the directions changed, e.g. after a
			// gone broker between us was removed from the tree). Waiting
			// for each other would never end: answer it at once. That
			// answer only completes its part toward us; our own answer
			// upstream still awaits all our targets, it included, so the
			// confirmation at the origin still means every broker has the
			// entry (scenario gone_removal_crossed_floods.txt).
			n.sendFloodAck(k, from, message.FloodRound(m.Durable))
			return
		}
		if !slices.Contains(f.waiters, from) {
			// A copy the sender sent again (on a new link, or once we were
			// joined) is answered once: a second answer would arrive after
			// the sender's flood completed and answer its next flood of
			// the same key (a durable subscription's second flood, which
			// then completed before the brokers behind us had answered).
			f.waiters = append(f.waiters, from)
		}
		n.floodAgainJoined(from, f, m) // dursub.go
		return
	}
	dir := n.direction(from)
	if dir == "" {
		if !m.Unsub {
			n.holdUnplaced(from, m)
			return
		}
		dir = from // a withdrawal: removing the entry everywhere is right
	}
	if !m.Unsub && !n.mem.joined && m.From != "" && !n.topo.Has(m.From) {
		// Recovering, with a map that does not reach the flood's
		// from-pointer yet: held like a flood from an unplaced sender.
		// Taken with the sender as pointer, the entry claimed the
		// subscriber's edge was the sender, and a restarted neighbour
		// beyond it was told so (subsFor) and dropped the publications
		// for it as coming from the subscriber's side (scenario
		// restart_flood_pointer_beyond_map.txt).
		n.holdUnplaced(from, m)
		return
	}
	if m.Unsub && m.Mark {
		if _, ok := n.table.Get(m.Sub); !ok {
			n.sendFloodAck(k, from, message.FloodRound(m.Durable))
			return
		}
		n.startFlood(&flood{key: k, except: dir, budget: -1, waiters: []message.BrokerID{from}})
		return
	}
	if m.Unsub {
		if _, ok := n.table.Get(m.Sub); !ok {
			n.tombstone(m.Sub)
			n.sendFloodAck(k, from, message.FloodRound(m.Durable))
			return
		}
		n.withdrawFlood(m.Sub, dir, from, nil)
		return
	}
	// Whether the entry is known matters first only for an entry learned
	// through a state transfer; otherwise a known entry is answered at
	// once like a tombstoned one, and Insert (which leaves a known entry
	// unchanged and reports it) tells, without a lookup of its own.
	known := false
	if len(n.floods.viaState) > 0 {
		var e *routing.Entry
		e, known = n.table.Get(m.Sub)
		if known && n.floods.viaState[m.Sub] && e.Dir == dir {
			// Learned through a state transfer (recovery, resync), so the
			// brokers behind us may not have it: flood it on this once.
			delete(n.floods.viaState, m.Sub)
			if m.Durable != nil && m.Sub.Edge != n.cfg.ID {
				// With its durable part, answered here too (dursub.go).
				n.durRecord(m.Sub, m.Durable)
				n.durFloods()[m.Sub] = m.Durable
				n.answerDurable(from, m.Sub, m.Filter, m.Durable)
			}
			n.startFlood(&flood{key: k, except: e.Dir, budget: -1, waiters: []message.BrokerID{from}})
			return
		}
	}
	if known || n.floods.tombstones[m.Sub] || m.Sub.Edge == n.cfg.ID {
		if known && n.floodDurable(from, dir, m) { // dursub.go
			return
		}
		n.sendFloodAck(k, from, message.FloodRound(m.Durable))
		return
	}
	if p := n.peers[m.Sub.Edge]; p != nil && p.epoch > m.Sub.Epoch {
		n.sendFloodAck(k, from, message.FloodRound(m.Durable)) // a subscription of an old incarnation: dead
		return
	}
	// The entry's from-pointer: the flood's From if in our map, else the
	// sender if in it, else the direction.
	fp := m.From
	if !n.topo.Has(fp) {
		fp = from
		if !n.topo.Has(fp) {
			fp = dir
		}
	}
	inserted, err := n.table.Insert(routing.Entry{Sub: m.Sub, Filter: m.Filter, From: fp, Dir: dir})
	if err != nil {
		if _, known := n.table.Get(m.Sub); !known {
			n.notice(NoticeGap, from, err.Error())
		}
		n.sendFloodAck(k, from, message.FloodRound(m.Durable))
		return
	}
	if !inserted { // known
		if n.floodDurable(from, dir, m) { // as above
			return
		}
		n.sendFloodAck(k, from, message.FloodRound(m.Durable))
		return
	}
	if m.Durable != nil {
		// Installed: answer now, before any later publication is routed
		// to it (dursub.go).
		n.durRecord(m.Sub, m.Durable)
		n.durFloods()[m.Sub] = m.Durable
		n.answerDurable(from, m.Sub, m.Filter, m.Durable)
	}
	n.hop(fp) // a next hop toward the from-pointer, dialled when missing
	n.startFlood(&flood{key: k, except: dir, budget: -1, waiters: []message.BrokerID{from}})
}

// maxUnplaced bounds the floods held per sender (holdUnplaced).
const maxUnplaced = 4096

// holdUnplaced keeps a subscription flood from a sender our map does not
// place (beyond δ our map is partial: typically a bypass flood past failed
// brokers, or one from a broker restarted in the same incident) unanswered
// until the map places it: a recovery's StateReply or the resync we ask
// the sender for (askUnplaced: its reply holds its map around us) brings
// its part of the map (replayUnplaced). Unanswered, the sender keeps
// waiting for us, so the subscription is not confirmed meanwhile; and on a
// new link it sends the flood again.
//
// A direction is never inferred from what the failure detector says about
// our neighbours: that view lags the sender's (which bypassed the brokers
// it found unusable) by a link delay or more, and a wrong guess installs an
// entry pointing away from the subscriber, which the map placing the
// sender later does not correct, and the flood is confirmed through it.
// Taken as a direction of its own, the flood went on with us as its
// from-pointer, the sender's side included; taken as behind "the one
// unusable neighbour" it went wrong whenever a neighbour's state was not
// known yet (no link to it, or a link whose first heartbeat, saying it was
// recovering, had not arrived): the flood was confirmed through an entry
// pointing away from the subscriber, and the publications for it were
// swallowed (scenario restart_unplaced_unheard.txt).
func (n *Node) holdUnplaced(from message.BrokerID, m *message.SubFlood) {
	if n.floods.heldFloods == nil {
		n.floods.heldFloods = map[message.BrokerID][]message.SubFlood{}
	}
	l := n.floods.heldFloods[from]
	for i := range l {
		if l[i].Sub == m.Sub {
			return
		}
	}
	if len(l) < maxUnplaced {
		n.floods.heldFloods[from] = append(l, *m) // (the filter is shared as in the routing table)
	}
	n.askUnplaced(from)
}

// askUnplaced asks the sender of held floods for a resync, once per sender
// and link (its reply replays them; one that still does not place it does
// not ask again), once both are joined: a broker not joined ignores a
// resync's reply, and one not joined does not answer the request
// (becomeJoined asks then, and onHeartbeat when the sender says it joined).
func (n *Node) askUnplaced(from message.BrokerID) {
	if len(n.floods.heldFloods[from]) == 0 || !n.mem.joined || n.floods.heldAsked[from] {
		return
	}
	if p := n.peers[from]; p == nil || !p.up || !p.joined {
		return
	}
	if n.floods.heldAsked == nil {
		n.floods.heldAsked = map[message.BrokerID]bool{}
	}
	n.floods.heldAsked[from] = true
	n.send(from, &message.StateRequest{Node: n.self, Resync: true})
}

// replayUnplaced handles again the floods held by holdUnplaced, in the
// order they came, per sender in id order; one whose sender still cannot
// be placed is held again, one whose sender's link went down is dropped
// (the sender sends it again on the next link).
func (n *Node) replayUnplaced() {
	if len(n.floods.heldFloods) == 0 {
		return
	}
	ids := sortedIDs(n.floods.heldFloods)
	for _, id := range ids {
		l := n.floods.heldFloods[id]
		delete(n.floods.heldFloods, id)
		if p := n.peers[id]; p == nil || !p.up {
			delete(n.floods.heldAsked, id)
			continue
		}
		for i := range l {
			n.onSubFlood(id, &l[i])
		}
		if _, held := n.floods.heldFloods[id]; !held {
			delete(n.floods.heldAsked, id)
		}
	}
}

// withdrawFlood removes sub here and floods its withdrawal away from
// except, confirming to waiter (if any) and calling done when complete.
func (n *Node) withdrawFlood(sub message.SubID, except, waiter message.BrokerID, done func()) {
	n.table.Delete(sub)
	delete(n.floods.viaState, sub)
	n.tombstone(sub)
	k := floodKey{kind: fkUnsub, sub: sub}
	if f, ok := n.floods.pending[floodKey{kind: fkSub, sub: sub}]; ok {
		// The subscription's own flood is still pending: answer its
		// waiters now (the withdrawal follows on the same links).
		for i := range f.targets {
			f.targets[i].out = false
		}
		f.nOut = 0
		n.floodCheck(f)
	}
	if f, ok := n.floods.pending[k]; ok {
		if waiter != "" {
			f.waiters = append(f.waiters, waiter)
		}
		return
	}
	f := &flood{key: k, except: except, budget: -1, done: done}
	if waiter != "" {
		f.waiters = append(f.waiters, waiter)
	}
	n.startFlood(f)
}

// withdraw removes sub on behalf of its (gone or restarted) edge broker.
func (n *Node) withdraw(sub message.SubID, except message.BrokerID, release bool) {
	if _, ok := n.table.Get(sub); !ok {
		return
	}
	n.withdrawFlood(sub, except, "", nil)
	if release {
		n.releaseRecipients()
	}
}

func (n *Node) tombstone(sub message.SubID) {
	delete(n.dsub.routes, sub) // dursub.go
	if n.floods.tombstones[sub] {
		return
	}
	n.floods.tombstones[sub] = true
	n.floods.tombOrder = append(n.floods.tombOrder, sub)
	if len(n.floods.tombOrder) > maxTombstones {
		delete(n.floods.tombstones, n.floods.tombOrder[0])
		n.floods.tombOrder = n.floods.tombOrder[1:]
	}
}

// subscribe handles a client's Subscribe.
func (n *Node) subscribe(c message.ClientID, cs *clientState, m *message.Subscribe) {
	if !n.mem.joined || n.mem.leaving {
		n.toClient(c, &message.SubAck{Req: m.Req, Err: "broker not joined (joining, recovering or leaving): retry later"})
		return
	}
	if m.Durable != "" || m.Recover != nil {
		n.subscribeDurable(c, cs, m) // dursub.go
		return
	}
	sub, ok := n.addLocalSub(c, cs, m)
	if !ok {
		return
	}
	f := &flood{key: floodKey{kind: fkSub, sub: sub}, budget: -1}
	f.done = func() {
		if cs2 := n.clients[c]; cs2 == cs {
			if _, ok := cs.subs[sub]; ok {
				n.toClient(c, &message.SubAck{Req: m.Req, Sub: sub, Confirmed: true})
			}
		}
	}
	n.startFlood(f)
}

// addLocalSub installs the subscription m of client c here and sends the
// first SubAck; false (with the refusal sent) when it is refused.
func (n *Node) addLocalSub(c message.ClientID, cs *clientState, m *message.Subscribe) (message.SubID, bool) {
	if len(m.Filter.Preds) > 256 {
		n.toClient(c, &message.SubAck{Req: m.Req, Err: fmt.Sprintf("filter has %d predicates, at most 256", len(m.Filter.Preds))})
		return message.SubID{}, false
	}
	n.subN++
	sub := message.SubID{Edge: n.cfg.ID, Epoch: n.cfg.Epoch, N: n.subN}
	if _, err := n.table.Insert(routing.Entry{Sub: sub, Filter: m.Filter, From: n.cfg.ID, Local: true, Client: c}); err != nil {
		n.toClient(c, &message.SubAck{Req: m.Req, Err: err.Error()})
		return message.SubID{}, false
	}
	cs.subs[sub] = m.Req
	n.toClient(c, &message.SubAck{Req: m.Req, Sub: sub})
	return sub, true
}

func (n *Node) unsubscribe(c message.ClientID, cs *clientState, m *message.Unsubscribe) {
	if _, ok := cs.subs[m.Sub]; !ok {
		n.toClient(c, &message.UnsubAck{Sub: m.Sub, Err: "unknown subscription of this session"})
		return
	}
	delete(cs.subs, m.Sub)
	n.dropDurable(m.Sub)
	// Two phases. The first marks the subscription withdrawing everywhere
	// (still routed) and is confirmed back here; every publication
	// accepted by its edge before the Unsubscribe was forwarded toward us
	// ahead of that edge's confirmation, on the same FIFO links, by brokers
	// that still route toward us, so it arrives before the confirmation
	// completes. Then the local entry is dropped, the client gets its
	// UnsubAck, and the removal is flooded (docs/protocol.md).
	sub := m.Sub
	k := floodKey{kind: fkMark, sub: sub}
	if _, ok := n.floods.pending[k]; ok {
		return
	}
	f := &flood{key: k, budget: -1}
	f.done = func() {
		n.withdrawFlood(sub, "", "", nil)
		if n.clients[c] == cs {
			n.toClient(c, &message.UnsubAck{Sub: sub})
		}
	}
	n.startFlood(f)
}

func (n *Node) dropClientSubs(c message.ClientID) {
	cs := n.clients[c]
	if cs == nil {
		return
	}
	subs := make([]message.SubID, 0, len(cs.subs))
	for s := range cs.subs {
		subs = append(subs, s)
	}
	sort.Slice(subs, func(i, j int) bool { return routing.SubLess(subs[i], subs[j]) })
	for _, s := range subs {
		delete(cs.subs, s)
		if d := n.dsub.subs[s]; d != nil && d.pending != nil && d.pending.client == c {
			d.pending = nil // its resume waited: it stays away (resume.go)
			continue
		}
		if d := n.dsub.subs[s]; d != nil && n.goAway(d) {
			continue // kept for a resume here (resume.go)
		}
		n.dropDurable(s)
		n.withdrawFlood(s, "", "", nil)
	}
}

// ClientOpen reports a new client session.
func (n *Node) ClientOpen(c message.ClientID) {
	if _, ok := n.clients[c]; ok {
		return
	}
	n.clients[c] = &clientState{
		src:  message.Source{Publisher: fmt.Sprintf("%s#%d", n.cfg.ID, c), Epoch: n.cfg.Epoch},
		subs: map[message.SubID]uint64{},
	}
}

// ClientClose reports the end of a client session; its subscriptions are
// withdrawn.
func (n *Node) ClientClose(c message.ClientID) {
	n.dropClientSubs(c)
	delete(n.clients, c)
}

// Client processes a client request: ClientHello, Publish, Subscribe or
// Unsubscribe. A request on an unknown session opens it.
func (n *Node) Client(c message.ClientID, m message.Message) {
	if n.mem.left {
		return
	}
	cs := n.clients[c]
	if cs == nil {
		n.ClientOpen(c)
		cs = n.clients[c]
	}
	switch m := m.(type) {
	case *message.ClientHello:
		if m.Publisher != "" {
			cs.src = message.Source{Publisher: m.Publisher, Epoch: m.Epoch}
		}
		cs.hello = true
	case *message.Publish:
		n.publish(c, cs, m)
	case *message.Subscribe:
		n.subscribe(c, cs, m)
	case *message.Unsubscribe:
		n.unsubscribe(c, cs, m)
	case *message.DurableAck:
		n.durableAck(c, m)
	}
}
