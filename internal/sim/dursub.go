package sim

import (
	"fmt"
	"time"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// Durable subscribers (docs/durable.md, overlay/dursub.go). A durable
// subscriber is one record of the log that lives through sessions: each
// session is a client at some edge that subscribes under the subscriber's
// name with its checkpoint token, as package client does. The token is
// the client's, computed from what the sessions received (a delivery
// consumes its seq, a Silence or a Gap advances the horizon), so a
// disconnect, an edge crash (SHB) or a graceful leave of the edge loses
// nothing the subscriber has not received: the next session, at any
// broker, hands the token over and the publishers' edges (PHBs) answer
// with what it has not consumed.
//
// The checker's durable rule (Log.Check): every matching publication
// acknowledged after the subscriber's first confirmation is owed to it
// exactly once, in per-publisher order, across its sessions and its
// edges' crashes, except those in a range of a retention Gap it received
// (Report.Released). A subscriber disconnected when the run ends is
// excluded (nothing to deliver to); the fuzzer always reconnects them.

// durSub is a durable subscriber.
type durSub struct {
	name   string
	sub    int // index in the log's subscriptions
	filter matching.Filter
	tok    checkpoint.Token
	cur    *client // the current session (nil: disconnected)
	// sessionID is cur's SubID once its SubAck came; confirmed: cur
	// switched to live (SubAck{Confirmed}).
	sessionID message.SubID
	hasID     bool
	confirmed bool
	sessions  int
	lastAck   time.Duration
	// Ended: a session refused or ended by its broker (SubAck or
	// UnsubAck with an error); the subscriber reconnects (fuzz) or the
	// scenario says what to do.
	ended string
}

// durAckEvery paces a session's acknowledgements as package client does
// (client.ackEvery): the token, at most once per period, after a delivery.
const durAckEvery = 100 * time.Millisecond

// AddDurable attaches the durable subscriber name at edge, subscribing
// with filter f and a new token (nothing consumed: it starts now).
func (s *Sim) AddDurable(name string, edge message.BrokerID, f matching.Filter) error {
	if !s.cfg.Core.Durable {
		return fmt.Errorf("sim: durable subscriber %s: the brokers keep no log (config durable=on)", name)
	}
	if s.log.SubIndex(name) >= 0 {
		return fmt.Errorf("sim: subscriber %s already exists", name)
	}
	d := &durSub{name: name, filter: f, tok: checkpoint.Token{Name: name}, lastAck: -durAckEvery}
	d.sub = s.log.AddSub(SubRecord{Name: name, Edge: edge, Filter: f, SubscribedAt: s.now, ConfirmedAt: -1, UnsubAt: -1, Durable: true})
	if s.durables == nil {
		s.durables = map[string]*durSub{}
	}
	s.durables[name] = d
	s.durableSeq = append(s.durableSeq, d)
	return s.durSession(d, edge)
}

// durSession opens a session of d at edge.
func (s *Sim) durSession(d *durSub, edge message.BrokerID) error {
	c, err := s.newClient(fmt.Sprintf("%s#%d", d.name, d.sessions+1), edge)
	if err != nil {
		return err
	}
	c.dur = d
	d.cur, d.hasID, d.confirmed, d.ended = c, false, false, ""
	d.sessions++
	s.log.Subs[d.sub].Edge = edge
	m := &message.Subscribe{Req: uint64(c.id), Filter: d.filter, Durable: d.name}
	if d.sessions > 1 {
		// A resumption: the token, even with no entry yet (an empty token
		// would make a new subscription, starting now).
		m.Token = d.tok.Encode()
	}
	s.clientSend(c, m)
	return nil
}

// Disconnect ends durable subscriber name's session (the client goes
// away: its broker is told the session closed); its token stays.
func (s *Sim) Disconnect(name string) error {
	d := s.durables[name]
	if d == nil {
		return fmt.Errorf("sim: disconnect %s: not a durable subscriber", name)
	}
	c := d.cur
	if c == nil {
		return fmt.Errorf("sim: disconnect %s: not connected", name)
	}
	s.tracef("durable %s disconnects from %s", name, c.edge.id)
	s.durSessionGone(c)
	b, inc := c.edge, c.edge.inc
	s.input(b, s.cfg.ClientDelay, func() {
		if b.inc == inc && b.node != nil {
			b.node.ClientClose(c.id)
		}
	})
	return nil
}

// Reconnect opens a new session of durable subscriber name at edge with
// its token.
func (s *Sim) Reconnect(name string, edge message.BrokerID) error {
	d := s.durables[name]
	if d == nil {
		return fmt.Errorf("sim: reconnect %s: not a durable subscriber", name)
	}
	if d.cur != nil {
		return fmt.Errorf("sim: reconnect %s: still connected at %s (disconnect first)", name, d.cur.edge.id)
	}
	s.tracef("durable %s reconnects at %s with %d sources in its token", name, edge, len(d.tok.Entries))
	if err := s.durSession(d, edge); err != nil {
		return err
	}
	s.log.Subs[d.sub].Excluded = false
	return nil
}

// Durables lists the durable subscribers' names in creation order.
func (s *Sim) Durables() []string {
	out := make([]string, len(s.durableSeq))
	for i, d := range s.durableSeq {
		out[i] = d.name
	}
	return out
}

// DurableConnected reports whether durable subscriber name has a session
// now (false after a disconnect, its edge's crash or leave, or its
// broker ending the session).
func (s *Sim) DurableConnected(name string) bool {
	d := s.durables[name]
	return d != nil && d.cur != nil && d.ended == ""
}

// durSessionGone records that c, a session of a durable subscriber, is
// gone (disconnected, or its edge crashed or left): until a reconnect the
// subscriber counts as excluded (it is if the run ends so).
func (s *Sim) durSessionGone(c *client) {
	c.dead = true
	d := c.dur
	if d.cur == c {
		d.cur = nil
		s.log.Subs[d.sub].Excluded = true
	}
}

// durRecv is what a durable subscriber's session does with a message from
// its edge (as package client's durable subscription).
func (s *Sim) durRecv(c *client, m message.Message) {
	d := c.dur
	if d.cur != c {
		return
	}
	r := s.log.Subs[d.sub]
	switch m := m.(type) {
	case *message.SubAck:
		if m.Err != "" {
			d.ended = m.Err
			s.tracef("durable %s refused at %s: %s", d.name, c.edge.id, m.Err)
			return
		}
		if !d.hasID {
			d.sessionID, d.hasID = m.Sub, true
			if !r.HasID {
				r.ID, r.HasID = m.Sub, true
			}
			r.Sessions = append(r.Sessions, m.Sub)
		}
		if m.Confirmed {
			d.confirmed = true
			if r.ConfirmedAt < 0 {
				r.ConfirmedAt = s.now
			}
		}
	case *message.UnsubAck:
		if m.Err != "" && d.hasID && m.Sub == d.sessionID {
			d.ended = m.Err
			s.tracef("durable %s ended at %s: %s", d.name, c.edge.id, m.Err)
		}
	case *message.Deliver:
		s.catchUpOnline()
		id := m.Sub
		if d.hasID && id == d.sessionID {
			id = r.ID // the subscriber's deliveries, whichever session got them
			_ = d.tok.Consume(m.Pub.Source(), m.Pub.Seq)
		}
		s.log.AddDelivery(Delivery{Sub: d.sub, SubID: id, Pub: m.Pub, Attrs: m.Attrs, At: s.now, PubTime: m.Time})
		s.onlineDone++
		if s.now-d.lastAck >= durAckEvery && d.hasID {
			d.lastAck = s.now
			s.clientSend(c, &message.DurableAck{Sub: d.sessionID, Token: d.tok.Encode()})
		}
	case *message.Silence:
		if d.hasID && m.Sub == d.sessionID {
			for _, x := range m.Sources {
				_ = d.tok.Advance(x.Source, x.Seq)
			}
		}
	case *message.Gap:
		g := *m
		if d.hasID && g.Sub == d.sessionID {
			g.Sub = r.ID
			if g.Source.Publisher != "" && g.To > 0 {
				_ = d.tok.Advance(g.Source, g.To)
			}
		}
		s.log.Gaps = append(s.log.Gaps, GapRecord{Sub: d.sub, Gap: g, At: s.now})
	}
}

// durablesConfirmed reports whether every connected durable subscriber's
// session is confirmed or refused.
func (s *Sim) durablesConfirmed() bool {
	for _, d := range s.durableSeq {
		if d.cur != nil && !d.confirmed && d.ended == "" {
			return false
		}
	}
	return true
}

// checkDurableLiveness records a connected durable subscriber whose
// session is not confirmed after quiescence, or was ended by its broker.
func (s *Sim) checkDurableLiveness() {
	for _, d := range s.durableSeq {
		switch {
		case d.cur == nil:
		case d.ended != "":
			s.log.problem(&s.log.Stuck, "durable subscription %s at %s ended: %s", d.name, d.cur.edge.id, d.ended)
		case !d.confirmed:
			s.log.problem(&s.log.Stuck, "durable subscription %s at %s (session %d) never confirmed", d.name, d.cur.edge.id, d.sessions)
		}
	}
}

// retentionGaps are, per durable subscription (by index), the Gaps it
// received for a bounded range of one source: what the publisher's edge
// released before the subscription consumed it. The durable rule excuses
// what they cover.
func (l *Log) retentionGaps() map[int][]message.Gap {
	var out map[int][]message.Gap
	for _, g := range l.Gaps {
		if g.Sub < 0 || g.Sub >= len(l.Subs) || !l.Subs[g.Sub].Durable || g.Gap.Source.Publisher == "" || g.Gap.To == 0 {
			continue
		}
		if out == nil {
			out = map[int][]message.Gap{}
		}
		out[g.Sub] = append(out[g.Sub], g.Gap)
	}
	return out
}
