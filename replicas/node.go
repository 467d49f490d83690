package replicas

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// Node is one replica. It takes the core's configuration (overlay.Config:
// ID, Epoch, HeartbeatTicks, FailureTicks, RetryMaxTicks, MaxQueue,
// MaxSources; Delta and the DACK and log settings do not apply) and the
// layout, and answers the method set of overlay.Node that environments
// call (the simulator's sim.Node).
type Node struct {
	cfg  overlay.Config
	lay  *Layout
	me   place
	out  overlay.Ready
	tick int64

	phase     overlay.Phase
	restarted bool // state is re-learnt from a sibling (see New, NewByPlace)
	byPlace   bool // a restart is told by Join's joinpoints (NewByPlace)
	asked     message.BrokerID
	peers     map[message.BrokerID]*peer
	order     []*peer // by rank: deterministic iteration

	// Routing: every subscription this replica knows, by id, with its
	// from-pointer (a neighbouring virtual node, or this one for a
	// subscription of a sibling's or a local client).
	routes   map[message.SubID]*route
	byNum    map[uint64]*route
	index    *matching.Index
	nextNum  uint64
	removed  map[message.SubID]bool // withdrawn subscriptions (bounded, see forget)
	remOrder []message.SubID
	subN     uint64

	clients map[message.ClientID]*session
	sources map[message.Source]*source
	srcFIFO []message.Source
	held    int // publications held out of order, over all sources
	queue   []queued
	matches []uint64
	// A sibling's routing table in parts (stateReply, statePart).
	partial   []message.SubState
	partsLeft int
	// recent: the last publications sent to each virtual node (index),
	// for a replica of it suspected falsely (recent.go).
	recent map[int]*recentPubs

	c Counters
}

// Counters count what the replica did since it started.
type Counters struct {
	PubsIn     uint64 // publications received from peers (duplicates included)
	Duplicates uint64 // dropped: already processed
	PubsOut    uint64 // publications sent to peers
	Published  uint64 // accepted from local clients
	Delivered  uint64 // Deliver messages to local clients
	Held       uint64 // received out of order and held until the gap filled
	Overflow   uint64 // dropped at the bound of held or queued publications
	GiveUps    uint64 // holes given up after FailureTicks (beyond the assumption)
	Resent     uint64 // publications sent again to a replica heard after a false suspicion
	// Control counts the other messages sent to peers, by type name (as
	// overlay.Counters.Control: the runtime's control-message metric).
	Control map[string]uint64
}

type peer struct {
	id        message.BrokerID
	vn        int
	sibling   bool
	up        bool
	suspected bool
	epoch     uint64
	silent    int // ticks since anything arrived
	idle      int // ticks since anything was sent
	dialling  bool
	fails     int   // dials failed in a row
	retryAt   int64 // tick of the next dial (0: none planned)
	// missed: it was suspected in incarnation missedEpoch and may have
	// missed publications meanwhile; heard again in it, it gets n.recent
	// (recent.go).
	missed      bool
	missedEpoch uint64
}

// maxDialTries bounds the dials of one peer in a row: past it the peer is
// left alone (a crashed replica dials its peers itself when it restarts).
const maxDialTries = 8

// maxRemembered bounds the withdrawn subscriptions remembered (so that a
// late flood or a sibling's state does not bring one back): the oldest is
// forgotten first.
const maxRemembered = 1 << 16

// New returns the replica cfg.ID of layout l, whose epochs number its
// incarnations from 1 (the simulator's): Epoch > 1 is a restart.
func New(cfg overlay.Config, l *Layout) (*Node, error) {
	return newNode(cfg, l, false)
}

// NewByPlace returns the replica cfg.ID of layout l for the runtime, whose
// epochs are clock readings: a restart is a Join with joinpoints, the
// place (Place: the siblings) that the runtime saved in the data
// directory while this replica was joined; Bootstrap or Join(nil) is a
// first start.
func NewByPlace(cfg overlay.Config, l *Layout) (*Node, error) {
	return newNode(cfg, l, true)
}

func newNode(cfg overlay.Config, l *Layout, byPlace bool) (*Node, error) {
	if cfg.Epoch == 0 {
		return nil, fmt.Errorf("replicas: config: Epoch must be ≥ 1")
	}
	d := overlay.DefaultConfig()
	fill := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&cfg.HeartbeatTicks, d.HeartbeatTicks)
	fill(&cfg.FailureTicks, d.FailureTicks)
	fill(&cfg.MaxQueue, d.MaxQueue)
	fill(&cfg.MaxSources, d.MaxSources)
	fill(&cfg.JoinRetryTicks, d.JoinRetryTicks)
	fill(&cfg.RetryMaxTicks, cfg.JoinRetryTicks)
	if cfg.FailureTicks < 2*cfg.HeartbeatTicks {
		return nil, fmt.Errorf("replicas: config: FailureTicks %d must be at least two heartbeats (2 × %d)", cfg.FailureTicks, cfg.HeartbeatTicks)
	}
	me, ok := l.where[cfg.ID]
	if !ok {
		return nil, fmt.Errorf("replicas: %s is not a replica of the layout", cfg.ID)
	}
	n := &Node{cfg: cfg, lay: l, me: me, restarted: !byPlace && cfg.Epoch > 1, byPlace: byPlace,
		peers: map[message.BrokerID]*peer{}, routes: map[message.SubID]*route{}, byNum: map[uint64]*route{},
		index: matching.NewIndex(), removed: map[message.SubID]bool{}, clients: map[message.ClientID]*session{},
		sources: map[message.Source]*source{}}
	add := func(vn int, sib bool) {
		for _, r := range l.VNodes[vn].Replicas {
			if r.ID != cfg.ID {
				n.peers[r.ID] = &peer{id: r.ID, vn: vn, sibling: sib}
			}
		}
	}
	add(me.vn, true)
	for _, w := range l.VNodes[me.vn].Neighbours {
		add(w, false)
	}
	for _, p := range n.peers {
		n.order = append(n.order, p)
	}
	slices.SortFunc(n.order, func(a, b *peer) int { return l.rank(a.id) - l.rank(b.id) })
	return n, nil
}

func (n *Node) vnode() *VNode { return &n.lay.VNodes[n.me.vn] }

func (n *Node) notice(k overlay.NoticeKind, p message.BrokerID, detail string) {
	n.out.Notices = append(n.out.Notices, overlay.Notice{Kind: k, Peer: p, Detail: detail})
}

func (n *Node) send(p *peer, m message.Message) {
	p.idle = 0
	if _, isPub := m.(*message.ReplicaPub); !isPub {
		if n.c.Control == nil {
			n.c.Control = map[string]uint64{}
		}
		n.c.Control[m.Type().String()]++
	}
	n.out.Messages = append(n.out.Messages, overlay.Envelope{To: p.id, Msg: m})
}

func (n *Node) toClient(c message.ClientID, m message.Message) {
	n.out.ToClients = append(n.out.ToClients, overlay.ClientEnvelope{To: c, Msg: m})
}

// live reports whether p can be sent to: its link is up and it is not
// suspected.
func (p *peer) live() bool { return p.up && !p.suspected }

// Bootstrap starts the first replica; it is Join without joinpoints.
func (n *Node) Bootstrap() { n.Join(nil) }

// Join starts the replica. The joinpoints are ignored: the layout says who
// the peers are. At its first start a replica dials the peers ranked
// before it; a restarted one dials every peer (they do not dial a crashed
// peer) and then asks a sibling for the routing table.
func (n *Node) Join(place []overlay.Peer) {
	if n.phase != overlay.PhaseNew {
		return
	}
	if n.byPlace {
		n.restarted = len(place) > 0
	}
	mine := n.lay.rank(n.cfg.ID)
	for _, p := range n.order {
		if n.restarted || n.lay.rank(p.id) < mine {
			n.dial(p)
		}
	}
	n.phase = overlay.PhaseJoining
	n.progress()
}

func (n *Node) dial(p *peer) {
	p.dialling, p.retryAt = true, 0
	n.out.Dials = append(n.out.Dials, overlay.Peer{ID: p.id, Addr: n.addrOf(p)})
}

func (n *Node) addrOf(p *peer) string {
	for _, r := range n.lay.VNodes[p.vn].Replicas {
		if r.ID == p.id {
			return r.Addr
		}
	}
	return ""
}

// progress moves a starting replica on: joined once every dial is
// answered (the first start), or once a sibling's routing table arrived
// (a restart; with no sibling reachable it starts empty).
func (n *Node) progress() {
	if n.phase != overlay.PhaseJoining {
		return
	}
	for _, p := range n.order {
		if p.dialling {
			return // not answered yet
		}
	}
	if !n.restarted {
		n.becomeJoined()
		return
	}
	for _, p := range n.order {
		if p.sibling && p.up {
			n.asked = p.id
			n.send(p, &message.StateRequest{Node: message.MapNode{ID: n.cfg.ID, Epoch: n.cfg.Epoch}})
			n.phase = overlay.PhaseRecovering
			return
		}
	}
	n.notice(overlay.NoticeJoinFailed, "", "no sibling replica reachable: starting with an empty routing table")
	n.becomeJoined()
}

func (n *Node) becomeJoined() {
	n.phase = overlay.PhaseJoined
	n.notice(overlay.NoticeJoined, "", "")
	q := n.queue
	n.queue = nil
	for _, e := range q {
		n.accept(e.from, e.p)
	}
}

func (n *Node) LinkUp(id message.BrokerID) {
	p := n.peers[id]
	if p == nil {
		n.notice(overlay.NoticeLinkRefused, id, "not a peer of this replica in the layout")
		n.out.Closes = append(n.out.Closes, id)
		return
	}
	p.up, p.dialling, p.fails, p.retryAt = true, false, 0, 0
	p.silent = 0
	if p.suspected {
		p.suspected = false
		n.notice(overlay.NoticeUnsuspected, id, "")
	}
	n.progress()
}

func (n *Node) LinkDown(id message.BrokerID) {
	p := n.peers[id]
	if p == nil || !p.up {
		return
	}
	p.up = false
	n.peerLost(p)
	// The higher-ranked end dials again (paced); a crashed peer's dials
	// fail and stop after maxDialTries, and it dials in when it restarts.
	if n.lay.rank(p.id) < n.lay.rank(n.cfg.ID) {
		p.retryAt = n.tick + int64(n.cfg.FailureTicks)
	}
}

func (n *Node) DialFailed(id message.BrokerID) {
	p := n.peers[id]
	if p == nil || !p.dialling {
		return
	}
	p.dialling = false
	p.fails++
	if p.fails < maxDialTries {
		wait := n.cfg.JoinRetryTicks << (p.fails - 1)
		if wait > n.cfg.RetryMaxTicks*8 || wait <= 0 {
			wait = n.cfg.RetryMaxTicks * 8
		}
		p.retryAt = n.tick + int64(wait)
	}
	n.progress()
}

// peerLost stops waiting for p: the confirmations it owes are not waited
// for any more (it crashed, or its link broke).
func (n *Node) peerLost(p *peer) {
	for _, r := range n.routeList() {
		if r.waiting[p.id] {
			delete(r.waiting, p.id)
			n.maybeConfirm(r)
		}
	}
	if n.phase == overlay.PhaseRecovering && n.asked == p.id {
		// Ask another sibling, or start empty.
		n.phase = overlay.PhaseJoining
		n.asked = ""
		n.progress()
	}
}

func (n *Node) Tick() {
	n.tick++
	for _, p := range n.order {
		if p.retryAt != 0 && n.tick >= p.retryAt && !p.up && !p.dialling {
			n.dial(p)
		}
		if !p.up {
			continue
		}
		p.silent++
		p.idle++
		if p.idle >= n.cfg.HeartbeatTicks {
			n.send(p, &message.Heartbeat{Epoch: n.cfg.Epoch, Joined: n.phase == overlay.PhaseJoined})
		}
		if p.silent >= n.cfg.FailureTicks && !p.suspected {
			p.suspected, p.missed, p.missedEpoch = true, true, p.epoch
			n.notice(overlay.NoticeSuspected, p.id, "")
			n.peerLost(p)
		}
	}
	n.giveUpHoles()
}

// heard is anything arriving from p: it is alive (under epoch, when the
// message says).
func (n *Node) heard(p *peer, epoch uint64) {
	p.silent = 0
	if epoch != 0 && p.epoch != epoch {
		p.epoch = epoch
	}
	n.resendAfterSuspicion(p) // recent.go
	if p.suspected {
		p.suspected = false
		n.notice(overlay.NoticeUnsuspected, p.id, "")
	}
}

func (n *Node) Step(from message.BrokerID, m message.Message) {
	p := n.peers[from]
	if p == nil {
		return
	}
	switch m := m.(type) {
	case *message.Heartbeat:
		n.heard(p, m.Epoch)
	case *message.ReplicaPub:
		n.heard(p, 0)
		n.c.PubsIn++
		from := p.vn
		if p.sibling {
			from = -2 // a sibling's local publication: deliver only
		}
		if n.phase != overlay.PhaseJoined {
			n.enqueue(from, m)
			return
		}
		n.accept(from, m)
	case *message.SubFlood:
		n.heard(p, 0)
		n.subFlood(p, m)
	case *message.SubConfirm:
		n.heard(p, 0)
		n.subConfirm(p, m)
	case *message.StateRequest:
		n.heard(p, m.Node.Epoch)
		n.stateRequest(p)
	case *message.StateReply:
		n.heard(p, 0)
		n.stateReply(p, m)
	case *message.Part:
		n.heard(p, 0)
		n.statePart(p, m)
	default:
		n.heard(p, 0) // δ-overlay messages mean nothing here
	}
}

// Pending reports whether Ready has anything to return.
func (n *Node) Pending() bool {
	o := &n.out
	return len(o.Messages)+len(o.ToClients)+len(o.Notices)+len(o.Dials)+len(o.Closes) > 0
}

// Ready returns the outputs produced since the last call and clears them.
func (n *Node) Ready() overlay.Ready {
	r := n.out
	n.out = overlay.Ready{}
	return r
}

// Recycle takes back a Ready carried out (overlay.Ready.Reuse).
func (n *Node) Recycle(done overlay.Ready) { n.out.Reuse(done) }

// Leave does nothing: the baseline has no graceful leave (Leaving stays
// false).
func (n *Node) Leave() {}

// Restore ignores a publication log: the baseline keeps none.
func (n *Node) Restore([]message.PubID, []message.Pub) {}

// RestoreHeld ignores held records: the baseline has no durable
// subscriptions.
func (n *Node) RestoreHeld([]overlay.HeldSub) {}

func (n *Node) Joined() bool             { return n.phase == overlay.PhaseJoined }
func (n *Node) Leaving() bool            { return false }
func (n *Node) Phase() overlay.Phase     { return n.phase }
func (n *Node) QueueLen() int            { return len(n.queue) + n.held }
func (n *Node) Parent() message.BrokerID { return "" }

// Place is, once joined, the siblings: what a restart must find again
// (the runtime saves it and gives it back to Join, which is how a
// NewByPlace replica knows it restarted). The layout names every peer, so
// this is a marker more than a route.
func (n *Node) Place() []overlay.Peer {
	if n.phase != overlay.PhaseJoined {
		return nil
	}
	var out []overlay.Peer
	for _, r := range n.vnode().Replicas {
		if r.ID != n.cfg.ID {
			out = append(out, r)
		}
	}
	return out
}

// Status is the snapshot the runtime serves on /state and in its metrics:
// overlay.Status with what a replica has (no tree parent, no DACK
// watermarks, no bypasses: every peer of the layout is a direct link).
func (n *Node) Status() overlay.Status {
	st := overlay.Status{ID: n.cfg.ID, Epoch: n.cfg.Epoch, Joined: n.Joined(), Subs: len(n.routes),
		QueueLen: n.QueueLen(), Arrived: map[string]uint64{}, Discarded: map[string]uint64{}}
	for _, r := range n.routes {
		if r.local {
			st.LocalSubs++
		}
	}
	for _, p := range n.order {
		st.Links = append(st.Links, overlay.LinkStatus{Peer: p.id, Up: p.up, Tree: true, Suspected: p.suspected, Silent: p.silent})
		if p.suspected {
			st.Suspected = append(st.Suspected, p.id)
		}
	}
	slices.SortFunc(st.Links, func(a, b overlay.LinkStatus) int { return strings.Compare(string(a.Peer), string(b.Peer)) })
	slices.Sort(st.Suspected)
	c := &st.Counters
	c.PubsIn, c.Duplicates, c.PubsOut = n.c.PubsIn, n.c.Duplicates, n.c.PubsOut
	c.Published, c.Delivered = n.c.Published, n.c.Delivered
	c.Control = maps.Clone(n.c.Control)
	return st
}

// Counters returns what the replica did since it started.
func (n *Node) Counters() Counters {
	c := n.c
	c.Control = maps.Clone(n.c.Control)
	return c
}
