package replicas

import (
	"slices"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// route is one subscription in the routing table. from is the virtual node
// toward its subscriber: a neighbour, or this one (a sibling's client, or
// with local a client of this replica).
type route struct {
	id     message.SubID
	f      matching.Filter
	num    uint64 // its id in the matching index
	from   int
	local  bool
	client message.ClientID
	req    uint64
	// The flood with echo: the replicas it was sent to and has not heard
	// a confirmation from, and those to confirm to once that is empty.
	waiting   map[message.BrokerID]bool
	answer    []message.BrokerID
	confirmed bool
}

// session is a local client.
type session struct {
	hello  *message.ClientHello
	subs   []message.SubID
	closed bool
}

// stateChunk is how many subscriptions go in one StateReply or Part: a
// filter is at most a few KB (the testbed's bound is 4 KB), so a chunk
// stays under the 1 MB frame.
const stateChunk = 200

func (n *Node) addRoute(id message.SubID, f matching.Filter, from int) *route {
	n.nextNum++
	r := &route{id: id, f: f, num: n.nextNum, from: from, waiting: map[message.BrokerID]bool{}}
	if err := n.index.Insert(r.num, f); err != nil {
		// A filter the index refuses cannot be matched: keep the route
		// (it is confirmed and withdrawn like the others) and say why.
		n.notice(overlay.NoticeGap, "", "replicas: subscription "+id.String()+" not indexed: "+err.Error())
	}
	n.routes[id] = r
	n.byNum[r.num] = r
	return r
}

func (n *Node) routeList() []*route {
	out := make([]*route, 0, len(n.routes))
	for _, r := range n.routes {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *route) int { return int(a.num) - int(b.num) })
	return out
}

// flood sends m to every live replica of the neighbouring virtual nodes
// other than except (and to the siblings too if siblings), and waits for
// their confirmations in r (nil: none awaited).
func (n *Node) flood(m message.Message, except int, siblings bool, r *route) {
	for _, p := range n.order {
		if !p.live() || p.vn == except || p.sibling && !siblings {
			continue
		}
		n.send(p, m)
		if r != nil {
			r.waiting[p.id] = true
		}
	}
}

func (n *Node) maybeConfirm(r *route) {
	if r.confirmed || len(r.waiting) > 0 {
		return
	}
	r.confirmed = true
	for _, id := range r.answer {
		if p := n.peers[id]; p != nil && p.live() {
			n.send(p, &message.SubConfirm{Sub: r.id})
		}
	}
	r.answer = nil
	if r.local {
		n.toClient(r.client, &message.SubAck{Req: r.req, Sub: r.id, Confirmed: true})
	}
}

func (n *Node) subFlood(p *peer, m *message.SubFlood) {
	if m.Unsub {
		n.withdraw(m.Sub, p.vn)
		return
	}
	if n.removed[m.Sub] {
		n.send(p, &message.SubConfirm{Sub: m.Sub})
		return
	}
	if r := n.routes[m.Sub]; r != nil {
		if r.confirmed {
			n.send(p, &message.SubConfirm{Sub: m.Sub})
		} else {
			r.answer = append(r.answer, p.id)
		}
		return
	}
	r := n.addRoute(m.Sub, m.Filter, p.vn)
	r.answer = []message.BrokerID{p.id}
	if !p.sibling {
		// The siblings have it from the same replicas upstream; the
		// edge floods its own siblings.
		n.flood(&message.SubFlood{Sub: m.Sub, Filter: m.Filter, From: message.BrokerID(n.vnode().Name)}, p.vn, false, r)
	}
	n.maybeConfirm(r)
}

func (n *Node) subConfirm(p *peer, m *message.SubConfirm) {
	if r := n.routes[m.Sub]; r != nil && r.waiting[p.id] {
		delete(r.waiting, p.id)
		n.maybeConfirm(r)
	}
}

// withdraw removes a subscription (from: where the withdrawal came from,
// fromLocal for a local client) and floods the withdrawal on.
func (n *Node) withdraw(id message.SubID, from int) {
	if n.removed[id] {
		return
	}
	if len(n.remOrder) >= maxRemembered {
		delete(n.removed, n.remOrder[0])
		n.remOrder = n.remOrder[1:]
	}
	n.removed[id] = true
	n.remOrder = append(n.remOrder, id)
	if r := n.routes[id]; r != nil {
		n.index.Delete(r.num)
		delete(n.byNum, r.num)
		delete(n.routes, id)
	}
	if from == n.me.vn {
		return // the sibling floods it to the neighbours itself
	}
	n.flood(&message.SubFlood{Sub: id, Unsub: true, From: message.BrokerID(n.vnode().Name)}, from, from == fromLocal, nil)
}

func (n *Node) ClientOpen(c message.ClientID) { n.clients[c] = &session{} }

func (n *Node) ClientClose(c message.ClientID) {
	s := n.clients[c]
	if s == nil {
		return
	}
	delete(n.clients, c)
	for _, id := range s.subs {
		n.withdraw(id, fromLocal)
	}
}

func (n *Node) Client(c message.ClientID, m message.Message) {
	s := n.clients[c]
	if s == nil {
		s = &session{}
		n.clients[c] = s
	}
	switch m := m.(type) {
	case *message.ClientHello:
		h := *m
		s.hello = &h
	case *message.Publish:
		n.publish(c, s, m)
	case *message.Subscribe:
		if n.phase != overlay.PhaseJoined {
			n.toClient(c, &message.SubAck{Req: m.Req, Err: "not joined yet"})
			return
		}
		n.subN++
		id := message.SubID{Edge: n.cfg.ID, Epoch: n.cfg.Epoch, N: n.subN}
		r := n.addRoute(id, m.Filter, n.me.vn)
		r.local, r.client, r.req = true, c, m.Req
		s.subs = append(s.subs, id)
		n.toClient(c, &message.SubAck{Req: m.Req, Sub: id})
		n.flood(&message.SubFlood{Sub: id, Filter: m.Filter, From: message.BrokerID(n.vnode().Name)}, fromLocal, true, r)
		n.maybeConfirm(r)
	case *message.Unsubscribe:
		if i := slices.Index(s.subs, m.Sub); i >= 0 {
			s.subs = slices.Delete(s.subs, i, i+1)
			n.withdraw(m.Sub, fromLocal)
			n.toClient(c, &message.UnsubAck{Sub: m.Sub})
			return
		}
		n.toClient(c, &message.UnsubAck{Sub: m.Sub, Err: "unknown subscription"})
	}
}

func (n *Node) publish(c message.ClientID, s *session, m *message.Publish) {
	switch {
	case s.hello == nil:
		n.toClient(c, &message.PubAck{Seq: m.Seq, Err: "no hello"})
		return
	case n.phase != overlay.PhaseJoined || len(n.queue)+n.held >= n.cfg.MaxQueue:
		n.toClient(c, &message.PubAck{Seq: m.Seq, Err: "backpressure"})
		return
	}
	id := message.PubID{Publisher: s.hello.Publisher, Epoch: s.hello.Epoch, Seq: m.Seq}
	src := n.sourceOf(id.Source(), 0, true)
	if m.Seq > src.done {
		n.c.Published++
		n.process(src, fromLocal, &message.ReplicaPub{ID: id, Attrs: m.Attrs, Payload: m.Payload, Time: m.Time})
	}
	n.toClient(c, &message.PubAck{Seq: m.Seq})
}

// stateRequest answers a restarted sibling with the routing table, From
// naming the virtual node toward each subscriber (this one for the
// subscriptions of its clients and of the other siblings').
func (n *Node) stateRequest(p *peer) {
	if !p.sibling {
		return
	}
	if n.phase != overlay.PhaseJoined {
		n.send(p, &message.StateReply{NotMember: true})
		return
	}
	var subs []message.SubState
	for _, r := range n.routeList() {
		subs = append(subs, message.SubState{Sub: r.id, Filter: r.f, From: message.BrokerID(n.lay.VNodes[r.from].Name)})
	}
	parts := 0
	if len(subs) > stateChunk {
		parts = (len(subs) - 1) / stateChunk
	}
	first := subs[:min(len(subs), stateChunk)]
	n.send(p, &message.StateReply{Subs: first, More: parts})
	for i := 1; i <= parts; i++ {
		n.send(p, &message.Part{N: i, Subs: subs[i*stateChunk : min(len(subs), (i+1)*stateChunk)]})
	}
}

func (n *Node) stateReply(p *peer, m *message.StateReply) {
	if n.phase != overlay.PhaseRecovering || p.id != n.asked {
		return
	}
	if m.NotMember {
		// The sibling is restarting too: beyond the assumption (k - 1
		// replicas down), start with what arrives from now on.
		n.notice(overlay.NoticeJoinFailed, p.id, "the sibling is not joined either: starting with an empty routing table")
		n.becomeJoined()
		return
	}
	n.partial, n.partsLeft = m.Subs, m.More
	if m.More == 0 {
		n.install()
	}
}

func (n *Node) statePart(p *peer, m *message.Part) {
	if n.phase != overlay.PhaseRecovering || p.id != n.asked || n.partsLeft == 0 {
		return
	}
	n.partial = append(n.partial, m.Subs...)
	n.partsLeft--
	if n.partsLeft == 0 {
		n.install()
	}
}

// install takes the sibling's routing table (what this replica learnt
// meanwhile stays; withdrawn subscriptions stay withdrawn) and starts
// routing.
func (n *Node) install() {
	for _, st := range n.partial {
		if n.removed[st.Sub] || n.routes[st.Sub] != nil {
			continue
		}
		from, ok := n.lay.vnIndex[string(st.From)]
		if !ok || from != n.me.vn && !slices.Contains(n.vnode().Neighbours, from) {
			continue // not a neighbour of this virtual node: a corrupt reply
		}
		r := n.addRoute(st.Sub, st.Filter, from)
		r.confirmed = true
	}
	n.partial = nil
	n.becomeJoined()
}
