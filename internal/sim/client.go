package sim

import (
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/deltapub/deltapub/internal/oracle"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// client is a simulated client session attached to one edge broker. A
// client whose edge crashes is dead: it neither reconnects nor counts for
// the guarantees.
type client struct {
	id      message.ClientID
	name    string
	edge    *broker
	edgeInc int
	dead    bool
	pub     *publisher
	sub     int // index in the log's subscriptions, or -1
	// dur: this client is a session of a durable subscriber (dursub.go;
	// sub is -1 then: the subscriber outlives its sessions).
	dur *durSub
}

// maxPublishRetries bounds the retries of one publication refused with
// "backpressure"; at the bound the publisher gives up and stops (counted
// in Stats.PublishErrors).
const maxPublishRetries = 10000

type publisher struct {
	name        string
	epoch       uint64
	every       time.Duration
	until       time.Duration
	gen         func() []matching.Attr
	next        uint64 // Seq of the next publication to send
	inflight    bool
	retries     int
	current     *PubRecord
	stopped     bool
	edgeCrashed bool
	records     []*PubRecord
}

func (s *Sim) newClient(name string, edge message.BrokerID) (*client, error) {
	b, err := s.broker(edge)
	if err != nil {
		return nil, err
	}
	if b.state == stateCrashed {
		return nil, fmt.Errorf("sim: client %s: edge %s is crashed", name, edge)
	}
	s.nextCID++
	c := &client{id: s.nextCID, name: name, edge: b, edgeInc: b.inc, sub: -1}
	s.clients = append(s.clients, c) // at index c.id
	s.routes = append(s.routes, clientRoute{edge: b, edgeInc: int32(b.inc), sub: -1})
	b.clients = append(b.clients, c)
	s.tracef("client %s (#%d) opens at %s", name, c.id, edge)
	s.input(b, s.cfg.ClientDelay, func() { b.node.ClientOpen(c.id) })
	return c, nil
}

// clientSend sends m from c to its edge.
func (s *Sim) clientSend(c *client, m message.Message) {
	if c.dead {
		return
	}
	b := c.edge
	if s.cfg.Trace != nil {
		s.tracef("client %s -> %s %s %+v", c.name, b.id, m.Type(), m)
	}
	s.scheduleFor(s.now+s.cfg.ClientDelay, b, func() { b.node.Client(c.id, m) })
}

// toClient carries a message from broker b to one of its clients.
func (s *Sim) toClient(b *broker, env overlay.ClientEnvelope) {
	var r *clientRoute
	if env.To > 0 && uint64(env.To) < uint64(len(s.routes)) {
		r = &s.routes[env.To]
	}
	if r == nil || r.edge != b || int(r.edgeInc) != b.inc {
		s.stats.ClientMisses++
		s.tracef("%s -> client #%d MISSED (unknown or foreign client) %s", b.id, env.To, env.Msg.Type())
		return
	}
	m := env.Msg
	if d, ok := m.(*message.Deliver); ok && r.sub >= 0 {
		// A subscriber only records deliveries; recording it now with its
		// arrival time saves an event per delivery (the bulk of all events
		// in large runs). Order per client is unchanged: every message to a
		// client takes the same ClientDelay. A crash of the edge within
		// ClientDelay would have lost it: negligible, and the subscriber is
		// excluded from the guarantees then anyway.
		if s.cfg.Trace != nil {
			s.tracef("client %s <- %s Deliver %+v", s.clients[env.To].name, b.id, d)
		}
		s.recordDelivery(r, d, s.now+s.cfg.ClientDelay)
		if s.cfg.Trace != nil {
			// The trace shows a violation at the instant it happens;
			// without a trace the online check waits for FirstViolation.
			s.checkOnline(env.To, int(r.sub), d.Pub)
			s.onlineDone = s.log.NumDeliveries()
		}
		return
	}
	c := s.clients[env.To]
	inc := b.inc
	s.schedule(s.now+s.cfg.ClientDelay, func() {
		if c.dead || b.inc != inc {
			return // the edge crashed: the session is gone
		}
		s.clientRecv(c, m)
	})
}

// recordDelivery records in the log the delivery of d to the subscription
// of the client of route r (r.sub >= 0), received at the time at. The
// common case (the subscription's ID, as the route knows it; the
// publication the last delivery named, known to the log; its attributes
// or none) is appended here without touching the subscription's record;
// the rest goes through Log.compact.
func (s *Sim) recordDelivery(r *clientRoute, d *message.Deliver, at time.Duration) {
	l := s.log
	if !s.lastDelOK || d.Pub != s.lastDelPub {
		s.lastDelPub, s.lastDelOK = d.Pub, true
		s.lastDelPi, s.lastDelAttrs = -1, nil
		if i, ok := l.pubIdx[d.Pub]; ok {
			s.lastDelPi = i
			if len(d.Attrs) > 0 && oracle.SameAttrs(d.Attrs, l.Pubs[i].Attrs) {
				s.lastDelAttrs, s.lastDelAttrsLen = unsafe.SliceData(d.Attrs), len(d.Attrs)
			}
		}
	}
	if pi := s.lastDelPi; pi >= 0 && r.idEpoch != 0 && d.Sub.N == r.idN && d.Sub.Epoch == r.idEpoch && d.Sub.Edge == r.edge.id && pi < math.MaxInt32/2 {
		if d.Attrs == nil {
			l.dels = append(l.dels, delRec{sub: r.sub, pub: int32(2*pi + 1), at: at, pubTime: d.Time})
			return
		}
		if s.lastDelAttrs != nil && unsafe.SliceData(d.Attrs) == s.lastDelAttrs && len(d.Attrs) == s.lastDelAttrsLen {
			l.dels = append(l.dels, delRec{sub: r.sub, pub: int32(2 * pi), at: at, pubTime: d.Time})
			return
		}
	}
	l.dels = append(l.dels, l.compact(&Delivery{Sub: int(r.sub), SubID: d.Sub, Pub: d.Pub, Attrs: d.Attrs, At: at, PubTime: d.Time}, s.lastDelPi))
}

func (s *Sim) clientRecv(c *client, m message.Message) {
	if s.cfg.Trace != nil {
		s.tracef("client %s <- %s %s %+v", c.name, c.edge.id, m.Type(), m)
	}
	if c.dur != nil {
		s.durRecv(c, m)
		return
	}
	switch m := m.(type) {
	case *message.PubAck:
		s.onPubAck(c, m)
	case *message.SubAck:
		s.onSubAck(c, m)
	case *message.UnsubAck:
	case *message.Deliver:
		if c.sub < 0 {
			s.stats.ClientMisses++
			return
		}
		// Not seen by the online check (only toClient's are).
		s.catchUpOnline()
		s.recordDelivery(&s.routes[c.id], m, s.now)
		s.onlineDone++
	case *message.Gap:
		if c.sub < 0 {
			s.stats.ClientMisses++
			return
		}
		s.log.Gaps = append(s.log.Gaps, GapRecord{Sub: c.sub, Gap: *m, At: s.now})
	}
}

// AddPublisher attaches a publisher named name at edge. It publishes
// gen() every period from now until the virtual time until, one
// publication in flight at a time, retrying the same Seq on backpressure.
func (s *Sim) AddPublisher(name string, edge message.BrokerID, every, until time.Duration, gen func() []matching.Attr) error {
	if every <= 0 {
		return fmt.Errorf("sim: publisher %s: period must be > 0", name)
	}
	c, err := s.newClient(name, edge)
	if err != nil {
		return err
	}
	c.pub = &publisher{name: name, epoch: 1, every: every, until: until, gen: gen, next: 1}
	s.clientSend(c, &message.ClientHello{Publisher: name, Epoch: 1})
	var tick func()
	tick = func() {
		p := c.pub
		if c.dead || p.stopped || s.now >= p.until {
			return
		}
		if !p.inflight {
			if p.current == nil {
				id := message.PubID{Publisher: name, Epoch: p.epoch, Seq: p.next}
				p.current = s.log.AddPub(PubRecord{ID: id, Edge: edge, Attrs: gen(), SentAt: s.now, AckedAt: -1})
				p.records = append(p.records, p.current)
			}
			p.inflight = true
			s.clientSend(c, &message.Publish{Seq: p.current.ID.Seq, Attrs: p.current.Attrs, Time: int64(s.now)})
		}
		s.schedule(s.now+p.every, tick)
	}
	s.schedule(s.now+s.cfg.ClientDelay, tick)
	return nil
}

func (s *Sim) onPubAck(c *client, m *message.PubAck) {
	p := c.pub
	if p == nil || p.current == nil || m.Seq < p.current.ID.Seq {
		return // an ack of something already acknowledged
	}
	p.inflight = false
	switch m.Err {
	case "":
		p.current.AckedAt = s.now
		p.current = nil
		p.next++
		p.retries = 0
	case "backpressure":
		p.retries++
		if p.retries > maxPublishRetries {
			s.stats.PublishErrors++
			p.stopped = true
		}
	default:
		s.stats.PublishErrors++
		s.tracef("client %s publish %d refused: %s", c.name, m.Seq, m.Err)
		p.stopped = true
	}
}

// StopPublishers ends every publisher's stream now.
func (s *Sim) StopPublishers() {
	for _, c := range s.clientList() {
		if c.pub != nil {
			c.pub.stopped = true
		}
	}
}

// AddSubscriber attaches a subscriber named name at edge and subscribes
// with filter f.
func (s *Sim) AddSubscriber(name string, edge message.BrokerID, f matching.Filter) error {
	if s.log.SubIndex(name) >= 0 {
		return fmt.Errorf("sim: subscriber %s already exists", name)
	}
	c, err := s.newClient(name, edge)
	if err != nil {
		return err
	}
	c.sub = s.log.AddSub(SubRecord{Name: name, Edge: edge, Filter: f, SubscribedAt: s.now, ConfirmedAt: -1, UnsubAt: -1})
	s.routes[c.id].sub = int32(c.sub) // c.sub < len(s.log.Subs), far below 2^31
	s.clientSend(c, &message.Subscribe{Req: uint64(c.id), Filter: f})
	return nil
}

func (s *Sim) onSubAck(c *client, m *message.SubAck) {
	if c.sub < 0 {
		return
	}
	r := s.log.Subs[c.sub]
	if m.Err != "" {
		r.Err = m.Err
		return
	}
	if !r.HasID {
		r.ID, r.HasID = m.Sub, true
		if m.Sub.Epoch != 0 && m.Sub.Edge == c.edge.id && c.sub <= math.MaxInt32 {
			s.routes[c.id].idEpoch, s.routes[c.id].idN = m.Sub.Epoch, m.Sub.N
		}
	}
	if m.Confirmed && r.ConfirmedAt < 0 {
		r.ConfirmedAt = s.now
	}
}

// Unsubscribe withdraws the subscription of subscriber name.
func (s *Sim) Unsubscribe(name string) error {
	i := s.log.SubIndex(name)
	if i < 0 {
		return fmt.Errorf("sim: unknown subscriber %s", name)
	}
	r := s.log.Subs[i]
	if !r.HasID {
		return fmt.Errorf("sim: unsubscribe %s: not acknowledged yet", name)
	}
	if r.UnsubAt >= 0 {
		return fmt.Errorf("sim: unsubscribe %s: already unsubscribed", name)
	}
	for _, c := range s.clientList() {
		if c.sub == i {
			r.UnsubAt = s.now
			s.clientSend(c, &message.Unsubscribe{Sub: r.ID})
			return nil
		}
	}
	return fmt.Errorf("sim: unknown subscriber %s", name)
}

// Confirmed reports whether subscriber name's subscription is confirmed.
func (s *Sim) Confirmed(name string) bool {
	if d := s.durables[name]; d != nil {
		return d.cur != nil && d.cur.dur == d && d.confirmed
	}
	i := s.log.SubIndex(name)
	return i >= 0 && s.log.Subs[i].ConfirmedAt >= 0
}

// AllConfirmed reports whether every live subscription is confirmed.
// A subscription once settled (confirmed, refused, withdrawn or excluded)
// stays so: the subscriptions before s.settled are not looked at again,
// and polling it every tick costs O(1) amortized, not a scan of them all.
func (s *Sim) AllConfirmed() bool {
	if !s.durablesConfirmed() {
		return false
	}
	subs := s.log.Subs
	for s.settled < len(subs) {
		if r := subs[s.settled]; !r.Excluded && r.ConfirmedAt < 0 && r.Err == "" && r.UnsubAt < 0 {
			return false
		}
		s.settled++
	}
	return true
}

func (s *Sim) clientList() []*client {
	return append([]*client(nil), s.clients[1:]...)
}

// CheckLiveness records a liveness problem for every live subscription not
// confirmed and every live publisher whose last Publish was never answered
// (call after quiescence).
func (s *Sim) CheckLiveness() {
	s.checkDurableLiveness()
	for _, c := range s.clientList() {
		if c.dead {
			continue
		}
		if c.pub != nil && c.pub.inflight {
			s.log.problem(&s.log.Stuck, "publisher %s at %s: Publish %d never answered", c.name, c.edge.id, c.pub.current.ID.Seq)
		}
		if c.sub >= 0 {
			r := s.log.Subs[c.sub]
			if r.ConfirmedAt < 0 && r.Err == "" && r.UnsubAt < 0 {
				s.log.problem(&s.log.Stuck, "subscription %s at %s never confirmed", r.Name, r.Edge)
			}
		}
	}
}

// online is the continuous part of the checkers: exactly once and
// per-source FIFO, checked as each delivery is recorded when there is a
// trace, so that the trace shows a violation at the instant it happens
// (without a trace, FirstViolation catches up when called; the full
// verdict is still Log.Check after the run). Sim.online holds, by source
// index (Sim.srcIdx), what each subscriber (by index in Log.Subs) got from
// that source: the deliveries of one publication, which come in a row,
// touch one array.
type online []seen

// seen is what one subscriber got from one source: the highest sequence
// number (last, once set) and the set of sequence numbers delivered, as a
// bitmap below seenBits (sequence numbers start at 1 and grow by one; the
// first seenLow of them in place) and a map above (a stray huge number
// must not allocate a huge bitmap).
type seen struct {
	last    uint64
	hasLast bool
	low     [seenLow / 64]uint64
	bits    []uint64 // from seenLow on
	far     map[uint64]bool
}

const (
	seenBits = 1 << 20
	seenLow  = 256
)

func (x *seen) has(seq uint64) bool {
	if seq < seenLow {
		return x.low[seq/64]&(1<<(seq%64)) != 0
	}
	if seq < seenBits {
		w := (seq - seenLow) / 64
		return w < uint64(len(x.bits)) && x.bits[w]&(1<<(seq%64)) != 0
	}
	return x.far[seq]
}

func (x *seen) add(seq uint64) {
	if seq < seenLow {
		x.low[seq/64] |= 1 << (seq % 64)
		return
	}
	if seq < seenBits {
		w := int((seq - seenLow) / 64)
		for len(x.bits) <= w {
			x.bits = append(x.bits, 0)
		}
		x.bits[w] |= 1 << (seq % 64)
		return
	}
	if x.far == nil {
		x.far = map[uint64]bool{}
	}
	x.far[seq] = true
}

// clientRoute is what toClient needs of a client, in a dense array by
// ClientID (Sim.routes): its edge's incarnation and its subscription.
// (32 bytes: the incarnations and subscriptions of a run are far fewer
// than 2^31.)
type clientRoute struct {
	edge    *broker
	edgeInc int32
	sub     int32 // index in the log's subscriptions, or -1
	// idEpoch and idN are the subscription's ID (its Edge is the client's
	// edge) once the log's record has it (idEpoch != 0; set once, as the
	// record's): recordDelivery compares a Deliver's with them here
	// rather than in the record.
	idEpoch, idN uint64
}

// checkOnline checks the delivery of pub to subscription sub (by client
// id, named in the trace), now.
func (s *Sim) checkOnline(id message.ClientID, sub int, pub message.PubID) {
	// One small map shared by all subscribers (hot in the cache) numbers
	// the sources, instead of a map per subscriber; bounded by the
	// publishers (and their epochs) of the run. The deliveries of one
	// publication come in a row: the last source is remembered.
	src := pub.Source()
	i := s.lastSrcIdx
	if src != s.lastSrc || s.srcIdx == nil {
		var ok bool
		i, ok = s.srcIdx[src]
		if !ok {
			if s.srcIdx == nil {
				s.srcIdx = map[message.Source]int{}
			}
			i = len(s.srcIdx)
			s.srcIdx[src] = i
			s.online = append(s.online, nil)
		}
		s.lastSrc, s.lastSrcIdx = src, i
	}
	o := s.online[i]
	if len(o) <= sub {
		o = append(o, make(online, max(sub+1, len(s.log.Subs))-len(o))...)
		s.online[i] = o
	}
	x := &o[sub]
	violation := ""
	if x.has(pub.Seq) {
		violation = "duplicate"
	} else if x.hasLast && pub.Seq <= x.last {
		violation = fmt.Sprintf("reorder (after seq %d)", x.last)
	}
	x.add(pub.Seq)
	if pub.Seq > x.last {
		x.last, x.hasLast = pub.Seq, true
	}
	if violation != "" {
		if s.firstViolation < 0 {
			s.firstViolation = s.now
		}
		if s.cfg.Trace != nil {
			c := s.clients[id]
			s.tracef("CHECK %s: %s delivered to %s at %s", violation, pub, c.name, c.edge.id)
		}
	}
}

// catchUpOnline runs the online check over the deliveries recorded since
// the last time, each at the instant it was recorded (its arrival time
// minus the client delay, see toClient): the same verdicts, computed only
// when asked for (runs without a trace).
func (s *Sim) catchUpOnline() {
	now := s.now
	for ; s.onlineDone < s.log.NumDeliveries(); s.onlineDone++ {
		sub, pub, at := s.log.deliverySub(s.onlineDone)
		s.now = at - s.cfg.ClientDelay
		s.checkOnline(0, sub, pub)
	}
	s.now = now
}

// FirstViolation is when the first duplicate or reordered delivery
// happened, or -1.
func (s *Sim) FirstViolation() time.Duration {
	s.catchUpOnline()
	return s.firstViolation
}
