package overlay

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
)

// Durable subscriptions (docs/durable.md, docs/protocol.md §"Durable
// subscriptions"). The core decides everything; the environment only
// carries out Ready as for any subscription.
//
//   - A publisher's edge (PHB) with retention (Config.RetainTicks,
//     RetainBytes) keeps its logged publications after they are safe,
//     until the retention lets them go (durable.go).
//   - A durable subscription is flooded like any subscription, with the
//     subscriber's checkpoint token riding on the flood. Every PHB that
//     installs it answers, in the same step, with a Catchup per local
//     source: the retained publications after the token that match, and
//     the source's last seq then (Last). Every later publication of that
//     source is routed to the subscriber as usual: catchup and live meet
//     at Last, with nothing missing and nothing twice.
//   - A Catchup travels back along the flood's path (to the broker the
//     flood came from, which still awaits that broker's confirmation), so
//     every answer reaches the subscriber's edge (SHB) before the flood's
//     confirmation does (FIFO links). Until then the SHB buffers what
//     arrives for the subscription, live or catchup.
//   - The first answers meet the live stream only if the flood and the
//     publications took the same path: a flood that went around a frozen
//     broker or a cut link reached the PHB first, and the publications
//     after its Last took the tree path through a broker that had not
//     installed the entry yet. So at the first confirmation (every broker
//     on every path has the entry then) the SHB floods the subscription
//     once more (DurableFlood.Again): every broker passes it on, every
//     PHB answers again, and its new Last was taken after the whole path
//     was installed. The SHB keeps buffering; at the second confirmation
//     it delivers per source, in seq order, what the token has not
//     consumed (a Gap for each range the token had not consumed that no
//     answer's retained range covered: released before the first answer,
//     or after one answer's Last and before a later one's First),
//     advances the token's horizons to Last (Silence), and switches to
//     live: each later publication is delivered if it is after the
//     token's position.
//   - A PHB that was down while the subscription was flooded learns it
//     through its recovery's state transfer, with the position the flood
//     carried (SubState.Durable; every broker keeps it with the entry,
//     durRoute, and the SHB hands out its token's current one). Once
//     joined, before it offers its log again or accepts a publication, it
//     answers it with a Catchup toward the subscriber (answerRecovered):
//     the brokers that forwarded its retained publications toward an
//     earlier session drop the offered copies as duplicates, so the
//     Catchup is the only way they reach the new one.
//   - A resume at the edge where the subscription lives needs none of
//     this while the edge keeps it (resume.go).

// Bounds.
const (
	// maxDurableSubs bounds the durable subscriptions of one broker; at
	// the bound a new one is refused (the client tries another broker).
	maxDurableSubs = 1 << 16
	// silenceBatch bounds the sources of one Silence message.
	silenceBatch = 1024
)

// ErrDurableFull refuses a durable subscription at maxDurableSubs.
const ErrDurableFull = "backpressure: too many durable subscriptions on this broker"

// dsub is a durable subscription of a local client (SHB side).
type dsub struct {
	name   string // "" for a recovering plain subscription (recov)
	recov  bool
	client message.ClientID
	req    uint64
	filter matching.Filter
	tok    checkpoint.Token
	live   bool // switched to live (confirmed)
	// Before the switch: what arrived (catchup or live), per source in
	// seq order; the answers' Last and First per source; bytes buffered.
	buf  map[message.Source][]message.Pub
	last map[message.Source]uint64
	// from: per source, the lowest From of its answers (where what is
	// owed starts, for a source the token does not name).
	from  map[message.Source]uint64
	bytes int64
	acked int // acknowledgements received (DurableAck)
	// missed: a recovering subscription's unfilled ranges, collected at
	// the switch for its confirmation.
	missed []message.Gap
	// df is the position its last flood carried. ans: before the switch,
	// per source the answers' retained ranges [First, Last].
	df  *message.DurableFlood
	ans map[message.Source][][2]uint64
	// touched0: switched to live since the last silence pass, the
	// sources touched before the switch (durableSilenceTick).
	touched0 map[message.Source]uint64
	// unanswered: the sources its token names whose publisher's edge had
	// not answered its flood at the switch. They are not silenced until
	// an answer comes (onCatchup): the flood may not have reached that
	// edge (beyond δ, a restarted edge's map can end before it), so the
	// publications that match may not be routed here, and the ones that
	// pass here for others say nothing of them.
	unanswered map[message.Source]bool
	// For a resume here (resume.go): from the switch, the deliveries and
	// Gaps not acknowledged, per source after floor[s]; away: its session
	// closed at tick awaySince, the subscription kept installed.
	held      map[message.Source][]message.Message
	floor     map[message.Source]uint64
	heldBytes int64
	away      bool
	awaySince int64
	// pending: a resume waiting for the switch of d, installed again
	// after a restart (held.go, resume.go awaitSwitch).
	pending *pendingResume
}

// durRoute is what every broker keeps of a durable subscription's entry:
// the position its flood carried (handed on in state transfers, for a
// restarted PHB to answer from) and whether its second flood passed here.
type durRoute struct {
	df    *message.DurableFlood
	again bool
}

// durSubs is the durable subscriptions of this broker's clients, and the
// durable floods passing through it.
type durSubs struct {
	subs  map[message.SubID]*dsub
	names map[string]message.SubID
	// floods: the durable part of the subscription floods pending here
	// (forwarded with them; dropped when the flood completes).
	floods map[message.SubID]*message.DurableFlood
	// routes: the durable entries of the routing table (dropped with
	// their tombstone).
	routes map[message.SubID]*durRoute
	// touched: the newest seq of each source that arrived here since the
	// last silence pass (durableSilenceTick), while durable
	// subscriptions exist.
	touched map[message.Source]uint64
	// left: the last seq of each source whose publisher's edge left
	// gracefully with its log (TopoChange.Logs, LeaveRequest.Logs), in
	// the order learned (leftOrder, bounded by maxLeftSources).
	left      map[message.Source]uint64
	leftOrder []message.Source
	// heldBytes: what the subscriptions here hold for a resume
	// (resume.go), bounded by Config.MaxHeldBytes.
	heldBytes int64
}

// maxLeftSources bounds the sources a leaver hands on (TopoChange.Logs:
// it must fit a frame) and a broker keeps of leavers (durSubs.left, the
// newest learned are kept).
const maxLeftSources = 4096

// leftLogs is what this leaving broker hands on (docs/durable.md "A
// leaving PHB"): every logged source's last seq, and what earlier leavers
// handed to it, sorted by source.
func (n *Node) leftLogs() []message.SourceSeq {
	m := map[message.Source]uint64{}
	for _, s := range n.dsub.leftOrder {
		m[s] = n.dsub.left[s]
	}
	if n.dur.on {
		for _, s := range n.dur.order {
			if x := n.dur.src[s]; x.last > 0 {
				m[s] = max(m[s], x.last)
			}
		}
	}
	out := make([]message.SourceSeq, 0, len(m))
	for s, q := range m {
		out = append(out, message.SourceSeq{Source: s, Seq: q})
	}
	slices.SortFunc(out, func(a, b message.SourceSeq) int { return srcCmp(a.Source, b.Source) })
	if len(out) > maxLeftSources {
		out = out[len(out)-maxLeftSources:]
	}
	return out
}

// keepLeft records a leaver's logs (the larger last seq per source).
func (n *Node) keepLeft(logs []message.SourceSeq) {
	ds := &n.dsub
	for _, e := range logs {
		if e.Seq == 0 {
			continue
		}
		if ds.left == nil {
			ds.left = map[message.Source]uint64{}
		}
		if _, ok := ds.left[e.Source]; !ok {
			ds.leftOrder = append(ds.leftOrder, e.Source)
		}
		ds.left[e.Source] = max(ds.left[e.Source], e.Seq)
	}
	if excess := len(ds.leftOrder) - maxLeftSources; excess > 0 {
		for _, s := range ds.leftOrder[:excess] {
			delete(ds.left, s)
		}
		ds.leftOrder = slices.Delete(ds.leftOrder, 0, excess)
	}
}

// answerLeft answers a durable flood for the sources whose edge left:
// nothing retained, up to the last seq the leaver logged (a Catchup with
// First = Last+1, so the SHB gives a Gap for what the token had not
// consumed up to Last, unless another answer retained it).
func (n *Node) answerLeft(from message.BrokerID, sub message.SubID, df *message.DurableFlood) {
	for _, s := range n.dsub.leftOrder {
		last := n.dsub.left[s]
		i, ok := slices.BinarySearchFunc(df.From, s, func(e message.SourceSeq, s message.Source) int { return srcCmp(e.Source, s) })
		if !ok && df.Fresh {
			continue // a new subscription: nothing before it is owed
		}
		if ok && df.From[i].Seq >= last {
			continue
		}
		m := &message.Catchup{Sub: sub, Source: s, Last: last, First: last + 1}
		if from == "" {
			n.onCatchup("", m)
		} else {
			n.send(from, m)
		}
	}
}

func (ds *durSubs) touch(s message.Source, seq uint64) {
	if ds.touched == nil {
		ds.touched = map[message.Source]uint64{}
	}
	ds.touched[s] = seq
}

// DurableStatus describes the durable subscriptions (Status.Durable).
type DurableStatus struct {
	Subs      int   // durable subscriptions of local clients
	InCatchup int   // of those, not switched to live yet
	Away      int   // of those, kept while their client is away (resume.go)
	HeldBytes int64 // held for resumes here (Config.MaxHeldBytes)
}

func (n *Node) durableStatus() DurableStatus {
	st := DurableStatus{Subs: len(n.dsub.subs), HeldBytes: n.dsub.heldBytes}
	for _, d := range n.dsub.subs {
		if !d.live {
			st.InCatchup++
		}
		if d.away {
			st.Away++
		}
	}
	return st
}

// keep records p as retained (with retention on) in x's log state.
func (n *Node) keep(x *durSrc, p message.Pub) {
	if !n.dur.retain {
		return
	}
	if x.pubs.Len() == 0 {
		x.ok = max(x.ok, x.safe)
	}
	x.pubs.Push(retained{pub: p, tick: n.now})
}

// retainSafe records that x is safe downstream up to safe.
func (n *Node) retainSafe(x *durSrc, safe uint64) {
	if safe <= x.ok {
		return
	}
	lo := int(x.ok - x.safe)
	hi := int(min(safe-x.safe, uint64(x.sizes.Len())))
	for i := lo; i < hi; i++ {
		n.dur.kept += *x.sizes.At(i)
	}
	x.ok = safe
}

// retainedUpTo returns the seq up to which x's publications are released
// now: safe downstream, and older than RetainTicks or beyond RetainBytes
// (the oldest first). It drops them from x.pubs (durableTick drops the
// sizes and reports the release).
func (n *Node) retainedUpTo(x *durSrc) uint64 {
	k := 0
	for k < x.pubs.Len() && x.safe+uint64(k)+1 <= x.ok {
		expired := n.cfg.RetainTicks > 0 && n.now-x.pubs.At(k).tick >= int64(n.cfg.RetainTicks)
		over := n.cfg.RetainBytes > 0 && n.dur.kept > n.cfg.RetainBytes
		if !expired && !over {
			break
		}
		n.dur.kept -= *x.sizes.At(k)
		x.rel = x.pubs.At(k).tick
		k++
	}
	if k == 0 {
		return x.safe
	}
	x.pubs.Drop(k)
	return x.safe + uint64(k)
}

// subscribeDurable handles a client's Subscribe with a durable name, or
// with Recover: a plain subscription that recovers what its client missed
// (after a reconnect to this broker). A recovering subscription is a
// durable one without a name: its token is the client's positions and
// lives here only; it takes the same path (catchup from the publishers'
// edges, buffer, switch), its unfilled ranges are listed in the
// confirmation (SubAck.Missed) and it gets no Silence.
func (n *Node) subscribeDurable(c message.ClientID, cs *clientState, m *message.Subscribe) {
	refuse := func(err string) { n.toClient(c, &message.SubAck{Req: m.Req, Err: err}) }
	recov := m.Durable == ""
	var tok checkpoint.Token
	fresh := true // a source the token does not name: from now on
	if recov {
		if len(m.Recover.From) > message.MaxRecoverSources {
			refuse(fmt.Sprintf("recover: %d sources, at most %d", len(m.Recover.From), message.MaxRecoverSources))
			return
		}
		for _, e := range m.Recover.From {
			if err := tok.Consume(e.Source, e.Seq); err != nil {
				refuse("recover: " + err.Error())
				return
			}
		}
	} else if tok, fresh = n.durableToken(m, refuse); tok.Name == "" {
		return
	}
	if old, ok := n.dsub.names[m.Durable]; ok && !recov {
		// One home per name: a newer session takes it over here, from
		// what this edge holds when it can (resume.go), else by a flood.
		if d := n.dsub.subs[old]; d != nil {
			same := d.filter.String() == m.Filter.String()
			if same && n.resumable(d, tok) {
				n.resumeHere(old, d, c, cs, m, tok)
				return
			}
			if same && n.resumableAtSwitch(d, tok) {
				n.awaitSwitch(old, d, c, cs, m, tok) // resume.go
				return
			}
			n.dropPending(old, d, "durable subscription taken over by a newer session")
			if ocs := n.clients[d.client]; ocs != nil {
				delete(ocs.subs, old)
			}
			n.dropDurable(old)
			n.withdrawFlood(old, "", "", nil)
			if !d.away {
				n.toClient(d.client, &message.UnsubAck{Sub: old, Err: "durable subscription taken over by a newer session"})
			}
		}
	}
	if len(n.dsub.subs) >= maxDurableSubs {
		refuse(ErrDurableFull)
		return
	}
	sub, ok := n.addLocalSub(c, cs, m)
	if !ok {
		return
	}
	d := &dsub{name: m.Durable, recov: recov, client: c, req: m.Req, filter: m.Filter, tok: tok,
		buf: map[message.Source][]message.Pub{}, last: map[message.Source]uint64{}, ans: map[message.Source][][2]uint64{}}
	if n.dsub.subs == nil {
		n.dsub.subs = map[message.SubID]*dsub{}
		n.dsub.names = map[string]message.SubID{}
	}
	n.dsub.subs[sub] = d
	if !recov {
		n.dsub.names[m.Durable] = sub
	}
	df := &message.DurableFlood{Name: m.Durable, Fresh: fresh}
	if recov {
		df.Window = m.Recover.Since
	}
	for _, e := range tok.Entries {
		df.From = append(df.From, message.SourceSeq{Source: e.Source, Seq: e.From()})
	}
	n.durFlood(sub, d, df, func() {
		if d2 := n.dsub.subs[sub]; d2 == d && n.clients[c] == cs {
			n.floodAgain(sub, d, func() {
				if d3 := n.dsub.subs[sub]; d3 == d && n.clients[c] == cs {
					n.switchLive(sub, d)
				}
			})
		}
	})
}

// durFlood floods d with the position df, answering for this broker's
// own sources first; done runs at the confirmation.
func (n *Node) durFlood(sub message.SubID, d *dsub, df *message.DurableFlood, done func()) {
	d.df = df
	n.durFloods()[sub] = df
	n.answerDurable("", sub, d.filter, df)
	n.startFlood(&flood{key: floodKey{kind: fkSub, sub: sub}, budget: -1, done: done})
}

// floodAgain is the second flood (see the file comment). For each source
// that answered it starts at the first answers' Last: up to there the
// answers are complete and buffered here (a new subscription is owed
// nothing before it), so the publishers' edges send only what came after,
// not a second copy of the whole catch-up.
func (n *Node) floodAgain(sub message.SubID, d *dsub, done func()) {
	df := &message.DurableFlood{Name: d.df.Name, From: d.df.From, Fresh: d.df.Fresh, Window: d.df.Window, Again: true}
	if len(d.last) > 0 {
		df.From = mergeFrom(df.From, d.last)
	}
	n.durFlood(sub, d, df, done)
}

// floodRound is the round of sub's durable flood pending here
// (message.FloodRound; 0: none, or a plain subscription).
func (n *Node) floodRound(sub message.SubID) uint8 {
	return message.FloodRound(n.dsub.floods[sub])
}

// mergeFrom returns from with, per source, the larger of its seq and
// at's (sorted by source).
func mergeFrom(from []message.SourceSeq, at map[message.Source]uint64) []message.SourceSeq {
	m := make(map[message.Source]uint64, len(from)+len(at))
	for _, e := range from {
		m[e.Source] = e.Seq
	}
	for s, q := range at {
		m[s] = max(m[s], q)
	}
	out := make([]message.SourceSeq, 0, len(m))
	for s, q := range m {
		out = append(out, message.SourceSeq{Source: s, Seq: q})
	}
	slices.SortFunc(out, func(a, b message.SourceSeq) int { return srcCmp(a.Source, b.Source) })
	return out
}

// durPosition is d's position as a state transfer hands it on: its last
// flood's, raised to what its token has consumed since.
func (n *Node) durPosition(d *dsub) *message.DurableFlood {
	at := make(map[message.Source]uint64, len(d.tok.Entries))
	for _, e := range d.tok.Entries {
		at[e.Source] = e.From()
	}
	return &message.DurableFlood{Name: d.df.Name, From: mergeFrom(d.df.From, at), Fresh: d.df.Fresh, Window: d.df.Window}
}

// durRecord keeps the position of a durable entry installed or known here
// (again: its second flood passed here).
func (n *Node) durRecord(sub message.SubID, df *message.DurableFlood) {
	if n.dsub.routes == nil {
		n.dsub.routes = map[message.SubID]*durRoute{}
	}
	r := n.dsub.routes[sub]
	if r == nil {
		r = &durRoute{}
		n.dsub.routes[sub] = r
	}
	x := *df
	x.Again = false
	r.df, r.again = &x, r.again || df.Again
	n.awayResumedElsewhere(sub, df.Name) // resume.go
}

// durStateOf is the Durable of sub's SubState (nil for a plain one).
func (n *Node) durStateOf(e *routing.Entry) *message.DurableFlood {
	if e.Local {
		if d := n.dsub.subs[e.Sub]; d != nil && d.df != nil {
			return n.durPosition(d)
		}
		return nil
	}
	if r := n.dsub.routes[e.Sub]; r != nil {
		return r.df
	}
	return nil
}

// floodDurable handles the durable part of a subscription flood from
// from for an entry known here (dir: the direction it came from). The
// second flood (Again) is answered and passed on once; it reports whether
// it took the flood (started here, to be confirmed later). Any other is
// answered again, as a flood rerouted around a failure may have lost the
// first answer with its link.
func (n *Node) floodDurable(from, dir message.BrokerID, m *message.SubFlood) bool {
	if m.Durable == nil || m.Sub.Edge == n.cfg.ID || n.floods.tombstones[m.Sub] {
		return false
	}
	r := n.dsub.routes[m.Sub]
	again := m.Durable.Again && (r == nil || !r.again)
	n.durRecord(m.Sub, m.Durable)
	if !again {
		n.answerDurable(from, m.Sub, m.Filter, m.Durable)
		return false
	}
	n.durFloods()[m.Sub] = m.Durable
	n.answerDurable(from, m.Sub, m.Filter, m.Durable)
	n.startFlood(&flood{key: floodKey{kind: fkSub, sub: m.Sub}, except: dir, budget: -1, waiters: []message.BrokerID{from}})
	return true
}

// floodAgainJoined handles the second flood of a subscription whose flood
// f is still pending here (a first flood on another path): it is answered,
// and f's targets still awaited get it again, so that it reaches the PHBs
// behind them.
func (n *Node) floodAgainJoined(from message.BrokerID, f *flood, m *message.SubFlood) {
	if m.Durable == nil || !m.Durable.Again || m.Sub.Edge == n.cfg.ID {
		return
	}
	if r := n.dsub.routes[m.Sub]; r != nil && r.again {
		return
	}
	if _, ok := n.table.Get(m.Sub); !ok {
		return
	}
	n.durRecord(m.Sub, m.Durable)
	n.durFloods()[m.Sub] = m.Durable
	n.answerDurable(from, m.Sub, m.Filter, m.Durable)
	n.geometry()
	for _, t := range f.targets {
		if p := n.peers[t.id]; t.out && p != nil && p.up {
			n.send(t.id, n.floodMsg(f, t.id, n.geo.dist[t.id]))
		}
	}
}

// answerRecovered answers, once this restarted broker is joined and
// before it offers its log again, every durable subscription its recovery
// taught it (see the file comment), toward the subscriber: along the
// route its publications for it take, so the answer arrives first.
func (n *Node) answerRecovered() {
	if !n.dur.on || len(n.dur.order) == 0 || len(n.dsub.routes) == 0 {
		return
	}
	for _, e := range n.table.Entries() {
		r := n.dsub.routes[e.Sub]
		if e.Local || r == nil {
			continue
		}
		if h := n.hop(e.From); h.ok {
			n.answerDurable(h.to, e.Sub, e.Filter, r.df)
		}
	}
}

// answerLearned answers, as a publisher's edge, the durable subscriptions
// among subs that a resync taught this joined broker, toward their
// subscribers: their floods never came here (the subscriber's edge had
// restarted beyond δ without this side in its map), and flooding them on
// reaches only the edges behind us. Unanswered, what this edge logged for
// them after their position was lost without a Gap.
func (n *Node) answerLearned(subs []message.SubID) {
	if !n.dur.on || len(n.dur.order) == 0 {
		return
	}
	for _, sub := range subs {
		r := n.dsub.routes[sub]
		e, ok := n.table.Get(sub)
		if r == nil || r.df == nil || !ok || e.Local {
			continue
		}
		if h := n.hop(e.From); h.ok {
			n.answerDurable(h.to, e.Sub, e.Filter, r.df)
		}
	}
}

// durableToken checks a durable Subscribe's name and token: the token to
// resume from (one with an empty Name when refused) and whether it is a
// new subscription.
func (n *Node) durableToken(m *message.Subscribe, refuse func(string)) (checkpoint.Token, bool) {
	if len(m.Durable) > checkpoint.MaxName {
		refuse(fmt.Sprintf("durable name of %d bytes, at most %d", len(m.Durable), checkpoint.MaxName))
		return checkpoint.Token{}, false
	}
	if len(m.Token) == 0 {
		return checkpoint.Token{Name: m.Durable}, true
	}
	t, err := checkpoint.Decode(m.Token)
	if err != nil {
		refuse("bad checkpoint token: " + err.Error())
		return checkpoint.Token{}, false
	}
	if t.Name != m.Durable {
		refuse(fmt.Sprintf("foreign checkpoint token: it belongs to durable subscription %q, not %q", t.Name, m.Durable))
		return checkpoint.Token{}, false
	}
	return t, false
}

func (n *Node) durFloods() map[message.SubID]*message.DurableFlood {
	if n.dsub.floods == nil {
		n.dsub.floods = map[message.SubID]*message.DurableFlood{}
	}
	return n.dsub.floods
}

// dropDurable forgets the local durable subscription sub (withdrawn,
// taken over, or its session closed). Its token is the client's: a later
// subscription under the same name resumes from it, here or elsewhere.
func (n *Node) dropDurable(sub message.SubID) {
	d := n.dsub.subs[sub]
	if d == nil {
		return
	}
	n.stopHolding(d)
	delete(n.dsub.subs, sub)
	if n.dsub.names[d.name] == sub {
		delete(n.dsub.names, d.name)
	}
	if len(n.dsub.subs) == 0 {
		// None left: the publication path stops recording for silence.
		n.dsub.subs, n.dsub.names, n.dsub.touched = nil, nil, nil
	}
}

// answerDurable answers a durable subscription's flood, just installed
// here (from: the broker it came from; "" when local), for every local
// source of the log.
func (n *Node) answerDurable(from message.BrokerID, sub message.SubID, f matching.Filter, df *message.DurableFlood) {
	n.answerLeft(from, sub, df)
	d := &n.dur
	if !d.on {
		return
	}
	budget := int64(n.cfg.MaxFrame / 2)
	for _, s := range d.order {
		x := d.src[s]
		start := uint64(0)
		if i, ok := slices.BinarySearchFunc(df.From, s, func(e message.SourceSeq, s message.Source) int { return srcCmp(e.Source, s) }); ok {
			start = df.From[i].Seq
		} else if df.Fresh {
			start = n.windowStart(x, df.Window)
		}
		first := x.safe + 1
		if !d.retain {
			first = x.last + 1 // nothing kept to answer with
		}
		var batches [][]message.Pub
		var cur []message.Pub
		var size int64
		for i := range x.pubs.Len() {
			p := &x.pubs.At(i).pub
			if p.ID.Seq <= start || !f.Match(&matching.Publication{Attrs: p.Attrs}) {
				continue
			}
			sz := p.LogSize()
			if len(cur) > 0 && size+sz > budget {
				batches = append(batches, cur)
				cur, size = nil, 0
			}
			cur = append(cur, *p)
			size += sz
		}
		batches = append(batches, cur)
		for i, b := range batches {
			m := &message.Catchup{Sub: sub, Source: s, Pubs: b, Last: x.last, First: first, From: start, More: len(batches) - 1 - i}
			if from == "" {
				n.onCatchup("", m)
			} else {
				n.send(from, m)
			}
		}
	}
}

// windowStart is where a new subscription's answer for x, a source its
// flood did not name, starts: at x's last seq (from now on), or, for a
// subscription that began window milliseconds ago (a recovering one,
// message.Recovery.Since), after the last publication logged here before
// then. 0 (from x's start) when x was first logged since, and when that
// is not known: the retention released publications logged since, or
// keeps none. The subscriber's edge then reports what is not retained as
// a Gap rather than skip it silently. The window is widened by one
// failure timeout, more than the flood took to come here: a publication
// logged just before the subscription began may come too, none after it
// is skipped.
func (n *Node) windowStart(x *durSrc, window uint64) uint64 {
	if window == 0 {
		return x.last
	}
	window = min(window, message.MaxRecoverSince)
	since := n.now - int64((time.Duration(window)*time.Millisecond+n.cfg.Tick-1)/n.cfg.Tick) - int64(n.cfg.FailureTicks)
	if x.born >= since || !n.dur.retain || x.rel >= since {
		return 0
	}
	k := 0 // retained publications logged before since (ticks ascend)
	for k < x.pubs.Len() && x.pubs.At(k).tick < since {
		k++
	}
	return x.safe + uint64(k)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// onCatchup handles a Catchup: at the subscriber's edge it is buffered
// (or, after the switch, delivered); elsewhere it goes on toward the
// subscriber's edge, to the broker the subscription's flood came from.
func (n *Node) onCatchup(from message.BrokerID, m *message.Catchup) {
	if m.Sub.Edge != n.cfg.ID {
		to := message.BrokerID("")
		if f := n.floods.pending[floodKey{kind: fkSub, sub: m.Sub}]; f != nil && len(f.waiters) > 0 {
			to = f.waiters[0]
		} else if e, ok := n.table.Get(m.Sub); ok && !e.Local {
			if h := n.hop(e.From); h.ok {
				to = h.to
			}
		}
		if to == "" || to == from {
			n.counters.CatchupDropped++
			return
		}
		n.send(to, m)
		return
	}
	d := n.dsub.subs[m.Sub]
	if d == nil || m.Sub.Epoch != n.cfg.Epoch {
		return
	}
	s := m.Source
	if d.live {
		// A late answer (a flood rerouted around a failure): what it
		// holds after the token's position is still missing, in order.
		if d.unanswered[s] {
			n.durPassedUnanswered(m.Sub, d, s, m.From)
		}
		n.durGap(m.Sub, d, s, m.From, m.First)
		for i := range m.Pubs {
			n.durDeliver(m.Sub, d, &m.Pubs[i])
		}
		// Its Last silences the source only when the answer covers
		// everything after the token (From at or below it). An answer
		// from a later From (a publisher's edge restarted with its log
		// answers a fresh subscription's flood from its last seq) says
		// nothing of what lies between: a publication there that the
		// edge offers again is still on its way, and silenced it would
		// be dropped as consumed (testbed/examples/
		// durable-sub-gets-a-republished-pub.toml, on real processes).
		if m.From <= d.tok.Get(s).From() {
			n.durSilence(m.Sub, d, []message.Source{s}, map[message.Source]uint64{s: m.Last})
		}
		delete(d.unanswered, s)
		return
	}
	if r := [2]uint64{m.First, m.Last}; !slices.Contains(d.ans[s], r) {
		d.ans[s] = append(d.ans[s], r)
	}
	if f, ok := d.from[s]; !ok || m.From < f {
		if d.from == nil {
			d.from = map[message.Source]uint64{}
		}
		d.from[s] = m.From
	}
	d.last[s] = max(d.last[s], m.Last)
	n.durBufferAll(m.Sub, d, s, m.Pubs)
}

// durBufferAll keeps pubs, a Catchup's (of source s, in seq order), as
// durBuffer does, in one merge: a catch-up answered after live
// publications were buffered goes before them, and inserting it one by
// one would move them once per publication.
func (n *Node) durBufferAll(sub message.SubID, d *dsub, s message.Source, pubs []message.Pub) {
	l := d.buf[s]
	sorted := slices.IsSortedFunc(pubs, func(a, b message.Pub) int { return cmpU64(a.ID.Seq, b.ID.Seq) })
	if len(l) == 0 || len(pubs) == 0 || !sorted || pubs[0].ID.Seq > l[len(l)-1].ID.Seq {
		for i := range pubs {
			n.durBuffer(sub, d, pubs[i])
			if n.dsub.subs[sub] != d {
				return // ended at the bound
			}
		}
		return
	}
	out := make([]message.Pub, 0, len(l)+len(pubs))
	for len(l) > 0 || len(pubs) > 0 {
		switch {
		case len(pubs) == 0 || (len(l) > 0 && l[0].ID.Seq < pubs[0].ID.Seq):
			out, l = append(out, l[0]), l[1:]
		case len(l) > 0 && l[0].ID.Seq == pubs[0].ID.Seq:
			pubs = pubs[1:] // buffered already
		default:
			p := pubs[0]
			pubs = pubs[1:]
			if k := len(out); k > 0 && out[k-1].ID.Seq == p.ID.Seq {
				continue // twice in the Catchup
			}
			p.Stamps = nil
			d.bytes += p.LogSize()
			out = append(out, p)
		}
	}
	d.buf[s] = out
	n.boundCatchup(sub, d)
}

// durBuffer keeps p for d until the switch (in seq order, once).
func (n *Node) durBuffer(sub message.SubID, d *dsub, p message.Pub) {
	s := p.ID.Source()
	l := d.buf[s]
	i, dup := slices.BinarySearchFunc(l, p.ID.Seq, func(q message.Pub, seq uint64) int { return cmpU64(q.ID.Seq, seq) })
	if dup {
		return
	}
	p.Stamps = nil
	d.buf[s] = slices.Insert(l, i, p)
	d.bytes += p.LogSize()
	n.boundCatchup(sub, d)
}

// boundCatchup ends d once what it buffered passes MaxCatchupBytes.
func (n *Node) boundCatchup(sub message.SubID, d *dsub) {
	if n.cfg.MaxCatchupBytes > 0 && d.bytes > n.cfg.MaxCatchupBytes {
		n.endDurable(sub, d, fmt.Sprintf("catchup of more than %d bytes (limits.max_catchup_bytes): subscribe again to resume from the token", n.cfg.MaxCatchupBytes))
	}
}

// endDurable ends d with an error for its client (its token is
// unchanged: a new subscription resumes from it).
func (n *Node) endDurable(sub message.SubID, d *dsub, why string) {
	n.dropPending(sub, d, why) // resume.go
	if cs := n.clients[d.client]; cs != nil {
		delete(cs.subs, sub)
	}
	n.dropDurable(sub)
	n.withdrawFlood(sub, "", "", nil)
	if !d.away {
		n.toClient(d.client, &message.UnsubAck{Sub: sub, Err: why})
	}
}

// durLive handles a publication routed to the local durable subscription
// d (acceptSeen's local delivery).
func (n *Node) durLive(sub message.SubID, d *dsub, p *message.Pub) {
	if !d.live {
		n.durBuffer(sub, d, message.Pub{ID: p.ID, Attrs: p.Attrs, Payload: p.Payload, Time: p.Time})
		return
	}
	n.durDeliver(sub, d, p)
}

// durDeliver delivers p to d unless its token has consumed it already.
func (n *Node) durDeliver(sub message.SubID, d *dsub, p *message.Pub) {
	s := p.ID.Source()
	if p.ID.Seq <= d.tok.Get(s).From() {
		n.counters.DurableDuplicates++
		return
	}
	if err := d.tok.Consume(s, p.ID.Seq); err != nil {
		n.endDurable(sub, d, err.Error())
		return
	}
	m := &message.Deliver{Sub: sub, Pub: p.ID, Attrs: p.Attrs, Payload: p.Payload, Time: p.Time}
	if !d.away {
		n.counters.Delivered++
		n.toClient(d.client, m)
	}
	n.hold(sub, d, s, m) // resume.go
}

// durGap gives d a Gap for what the retention released of s after from
// and before first that its token had not consumed.
func (n *Node) durGap(sub message.SubID, d *dsub, s message.Source, from, first uint64) {
	if first > 0 {
		n.durGapRange(sub, d, s, from+1, first-1)
	}
}

// unanswered returns the ranges of s after from and up to the answers'
// largest Last that no answer's retained range [First, Last] covers:
// released by the retention before an answer was taken, and after the
// previous answer's Last (which may have been taken while a broker on the
// way had not installed the subscription yet), so nothing says they
// arrived.
func unanswered(ans [][2]uint64, from uint64) [][2]uint64 {
	ivs := slices.Clone(ans)
	slices.SortFunc(ivs, func(a, b [2]uint64) int { return cmpU64(a[0], b[0]) })
	var out [][2]uint64
	next := from + 1 // the first seq not known to be covered
	for _, r := range ivs {
		if r[0] > next {
			out = append(out, [2]uint64{next, r[0] - 1})
		}
		next = max(next, r[1]+1)
	}
	return out
}

// durGapRange gives d a Gap for a..b of s, as far as its token has not
// consumed it.
func (n *Node) durGapRange(sub message.SubID, d *dsub, s message.Source, a, b uint64) {
	if b <= d.tok.Get(s).From() || b < a {
		return
	}
	a = max(a, d.tok.Get(s).From()+1)
	if err := d.tok.Advance(s, b); err != nil {
		n.endDurable(sub, d, err.Error())
		return
	}
	n.counters.Gaps++
	n.counters.DurableGaps++
	g := &message.Gap{Sub: sub, Source: s, From: a, To: b, Reason: "no longer retained by the publisher's edge (retention) when this subscription asked for it"}
	if d.recov && d.buf != nil {
		d.missed = append(d.missed, *g) // at the switch: listed in the confirmation
		return
	}
	n.durNotify(sub, d, g)
}

// durPassedUnanswered handles the first answer of s to arrive after the
// switch when s was unanswered then (beyond δ: the flood reached its edge
// late) and publications of s that reached here anyway were delivered:
// the token consumed past from, and the matching ones of (from, token]
// that were not routed here in time can no longer be delivered in order.
// The subscriber gets a Gap for that range (it may name publications it
// got; it covers every one it may lack).
func (n *Node) durPassedUnanswered(sub message.SubID, d *dsub, s message.Source, from uint64) {
	seq := d.tok.Get(s).Seq
	if seq <= from {
		return
	}
	n.counters.Gaps++
	n.counters.DurableGaps++
	n.durNotify(sub, d, &message.Gap{Sub: sub, Source: s, From: from + 1, To: seq,
		Reason: "the publisher's edge answered after later publications were delivered: some in this range may be missing"})
}

// durNotify sends d a Gap of a live stream (held for a resume here).
func (n *Node) durNotify(sub message.SubID, d *dsub, g *message.Gap) {
	if !d.away {
		n.toClient(d.client, g)
	}
	n.hold(sub, d, g.Source, g)
}

// durSilence advances d's horizons of srcs to to[s] and tells the client.
func (n *Node) durSilence(sub message.SubID, d *dsub, srcs []message.Source, to map[message.Source]uint64) {
	var out []message.SourceSeq
	for _, s := range srcs {
		h := to[s]
		if h <= d.tok.Get(s).From() {
			continue
		}
		if err := d.tok.Advance(s, h); err != nil {
			continue // a full token takes no new source on silence alone
		}
		n.heldTokenChanged(d) // held.go
		if d.recov || d.away {
			continue // its token is the broker's alone, or sent at a resume
		}
		out = append(out, message.SourceSeq{Source: s, Seq: h})
		if len(out) == silenceBatch {
			n.toClient(d.client, &message.Silence{Sub: sub, Sources: out})
			out = nil
		}
	}
	if len(out) > 0 {
		n.toClient(d.client, &message.Silence{Sub: sub, Sources: out})
	}
}

// switchLive is the switch at the flood's confirmation: every answer is
// in (see the file comment).
func (n *Node) switchLive(sub message.SubID, d *dsub) {
	srcs := make([]message.Source, 0, len(d.buf)+len(d.last))
	for s := range d.buf {
		srcs = append(srcs, s)
	}
	for s := range d.last {
		if _, ok := d.buf[s]; !ok {
			srcs = append(srcs, s)
		}
	}
	slices.SortFunc(srcs, srcCmp)
	d.live = true
	n.takeOverAtSwitch(sub, d) // resume.go: a resume waiting since a restart
	for _, s := range srcs {
		// In seq order: a Gap for each range no answer covered (split
		// around what arrived anyway), the rest delivered.
		holes := unanswered(d.ans[s], max(d.tok.Get(s).From(), d.from[s]))
		for i := range d.buf[s] {
			q := d.buf[s][i].ID.Seq
			for len(holes) > 0 && holes[0][0] <= q {
				if holes[0][0] < q {
					n.durGapRange(sub, d, s, holes[0][0], min(holes[0][1], q-1))
				}
				if holes[0][1] > q {
					holes[0][0] = q + 1
					break
				}
				holes = holes[1:]
			}
			n.durDeliver(sub, d, &d.buf[s][i])
		}
		for _, h := range holes {
			n.durGapRange(sub, d, s, h[0], h[1])
		}
		if n.dsub.subs[sub] != d {
			return // ended (token full)
		}
	}
	n.durSilence(sub, d, srcs, d.last)
	if n.dsub.subs[sub] != d {
		return
	}
	for _, e := range d.tok.Entries {
		if _, ok := d.last[e.Source]; !ok {
			if d.unanswered == nil {
				d.unanswered = map[message.Source]bool{}
			}
			d.unanswered[e.Source] = true
		}
	}
	ack := &message.SubAck{Req: d.req, Sub: sub, Confirmed: true}
	if d.recov {
		n.unknownStreams(sub, d)
		ack.Recovery, ack.Recovered, ack.Missed = true, len(d.missed) == 0, d.missed
	}
	d.buf, d.last, d.ans, d.from, d.bytes, d.missed = nil, nil, nil, nil, 0, nil
	d.touched0 = maps.Clone(n.dsub.touched)
	n.startHolding(d) // resume.go
	if !d.away {
		n.toClient(d.client, ack)
	}
}

// unknownStreams lists in a recovering subscription's confirmation each
// stream of its positions that no publisher's edge answered for (one with
// no log, or restarted without it, or that forgot the stream): whether
// anything after the position was missed is unknown, so the Gap has no
// end (To 0) and recovered is false.
func (n *Node) unknownStreams(sub message.SubID, d *dsub) {
	for _, e := range d.tok.Entries {
		if d.unanswered[e.Source] {
			d.missed = append(d.missed, message.Gap{Sub: sub, Source: e.Source, From: e.From() + 1,
				Reason: "no publisher's edge answered for this stream: what was published after the position is unknown"})
		}
	}
}

// durableSilenceTick advances, once per DACK period, the horizons of the
// live durable subscriptions to the newest publication of each source
// that reached this broker since the last pass: a source's publications
// arrive here in order along their routes, and one older than the newest
// delivered is never delivered here, so nothing older that matches is
// still to come (a subscription with rare matches does not refilter a
// long quiet stretch after a reconnect).
func (n *Node) durableSilenceTick() {
	ds := &n.dsub
	if len(ds.touched) == 0 || n.now%int64(n.cfg.DACKTicks) != 0 {
		return
	}
	srcs := make([]message.Source, 0, len(ds.touched))
	for s := range ds.touched {
		srcs = append(srcs, s)
	}
	slices.SortFunc(srcs, srcCmp)
	to := ds.touched
	ds.touched = nil
	subs := make([]message.SubID, 0, len(ds.subs))
	for s, d := range ds.subs {
		if d.live {
			subs = append(subs, s)
		}
	}
	slices.SortFunc(subs, func(a, b message.SubID) int { return cmpU64(a.N, b.N) })
	for _, sub := range subs {
		d := ds.subs[sub]
		if d == nil {
			continue
		}
		mine := srcs
		if len(d.unanswered) > 0 {
			mine = slices.DeleteFunc(slices.Clone(mine), func(s message.Source) bool { return d.unanswered[s] })
		}
		if d.touched0 != nil {
			// Live since the last pass: a source whose newest arrived
			// before the switch may have passed here before the entry was
			// installed, not delivered, and a late answer (a restarted PHB's)
			// may still bring it.
			mine = slices.DeleteFunc(slices.Clone(mine), func(s message.Source) bool {
				q, ok := d.touched0[s]
				return ok && q == to[s]
			})
			d.touched0 = nil
		}
		n.durSilence(sub, d, mine, to)
	}
}

func srcCmp(a, b message.Source) int {
	if c := strings.Compare(a.Publisher, b.Publisher); c != 0 {
		return c
	}
	return cmpU64(a.Epoch, b.Epoch)
}

// durableAck records a durable subscriber's acknowledgement.
func (n *Node) durableAck(c message.ClientID, m *message.DurableAck) {
	d := n.dsub.subs[m.Sub]
	if d == nil || d.client != c {
		return
	}
	t, err := checkpoint.Decode(m.Token)
	if err != nil || t.Name != d.name {
		return // not this subscription's: ignored (the broker keeps its own position)
	}
	d.acked++
	n.releaseHeld(d, t) // resume.go
}
