package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// ackEvery paces acknowledgements: at most one DurableAck per
// subscription per period, with the latest token (batched).
const ackEvery = 100 * time.Millisecond

// durable is a durable subscription's client state: its checkpoint token
// as of the last delivery handed to the application (or silence).
type durable struct {
	mu   sync.Mutex
	name string
	tok  checkpoint.Token
	// resume: the subscription exists already (a token was given, or a
	// broker accepted it): a Subscribe carries the token even with no
	// entry, which the broker would otherwise take for a new subscription
	// starting now, skipping what was published while it was away.
	resume   bool
	ack      []byte // the latest token to acknowledge, not sent yet
	ackTimer *time.Timer
}

// SubscribeDurable makes (token nil) or resumes (token from a Delivery or
// Subscription.Token) the durable subscription name with filter, on this
// client's broker whichever it is: every matching publication
// acknowledged by its publisher's edge after the subscription was first
// confirmed is delivered exactly once, in per-publisher order, across
// disconnects and reconnects to any broker, except ranges announced by a
// Gap (the publisher's edge released them: docs/durable.md). Deliveries
// flow once the subscription is confirmed (the missed ones first). A
// malformed token, or one of another subscription, is refused.
func (c *Client) SubscribeDurable(ctx context.Context, name string, filter matching.Filter, token []byte) (*Subscription, error) {
	if name == "" {
		return nil, errors.New("client: SubscribeDurable: empty name")
	}
	d := &durable{name: name, tok: checkpoint.Token{Name: name}}
	if len(token) > 0 {
		t, err := checkpoint.Decode(token)
		if err != nil {
			return nil, fmt.Errorf("client: SubscribeDurable: %w", err)
		}
		if t.Name != name {
			return nil, fmt.Errorf("client: SubscribeDurable: the token belongs to %q, not %q", t.Name, name)
		}
		d.tok, d.resume = t, true
	}
	return c.subscribe(ctx, filter, nil, d)
}

// Token is a durable subscription's current checkpoint token (nil for a
// plain subscription): after every delivery already yielded on C, and
// every silence received.
func (s *Subscription) Token() []byte {
	if s.dur == nil {
		return nil
	}
	s.dur.mu.Lock()
	defer s.dur.mu.Unlock()
	return s.dur.tok.Encode()
}

// Ack acknowledges a durable subscription's token (from a Delivery, once
// the application has stored it) to the broker. Acknowledgements are
// batched: the latest is sent at most every 100 ms.
func (s *Subscription) Ack(token []byte) error {
	if s.dur == nil {
		return errors.New("client: Ack: not a durable subscription")
	}
	d := s.dur
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ack = token
	if d.ackTimer == nil {
		d.ackTimer = time.AfterFunc(ackEvery, s.sendAck)
	}
	return nil
}

func (s *Subscription) sendAck() {
	d := s.dur
	d.mu.Lock()
	tok := d.ack
	d.ack, d.ackTimer = nil, nil
	d.mu.Unlock()
	if tok == nil {
		return
	}
	c := s.c
	id := s.ID()
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	conn, failed := c.conn, c.err != nil
	c.mu.Unlock()
	if !failed {
		_ = conn.Send(&message.DurableAck{Sub: id, Token: tok}) // lost with the connection: the next Ack carries more
	}
}

// subscribeMsg is the Subscribe for s (durable: with its current token).
func (s *Subscription) subscribeMsg(req uint64) *message.Subscribe {
	m := &message.Subscribe{Req: req, Filter: s.filter}
	if d := s.dur; d != nil {
		d.mu.Lock()
		m.Durable = d.name
		select {
		case <-s.accepted:
			d.resume = true
		default:
		}
		if d.resume || len(d.tok.Entries) > 0 {
			m.Token = d.tok.Encode()
		} else {
			m.Token = nil // a new subscription: nothing consumed yet
		}
		d.mu.Unlock()
	}
	return m
}

// after returns the token after delivery (or gap) dl, without recording
// it: commit does, once dl is handed on. Only the receive loop changes the
// token (after, commit, silence), one delivery at a time.
func (d *durable) after(dl *Delivery) checkpoint.Token {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tok.Clone()
	if dl.Gap != nil {
		_ = t.Advance(dl.Gap.Source, dl.Gap.To)
	} else {
		_ = t.Consume(dl.Pub.Source(), dl.Pub.Seq) // the broker ends the subscription before the token is full
	}
	return t
}

// commit records t, the token after a delivery handed on.
func (d *durable) commit(t checkpoint.Token) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tok = t
}

func (d *durable) silence(m *message.Silence) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range m.Sources {
		_ = d.tok.Advance(s.Source, s.Seq) // a full token takes no new source on silence
	}
}

// keepDurables (c.mu held), as the connection is lost with Reconnect on:
// the durable subscriptions still running leave c.subs (they are not
// ended) for c.durables, to be resubscribed.
func (c *Client) keepDurables() {
	c.durables = map[*Subscription]bool{}
	for id, s := range c.subs {
		if s.dur == nil {
			continue
		}
		s.mu.Lock()
		ended := s.ended
		s.mu.Unlock()
		select {
		case <-s.stop:
			ended = true
		default:
		}
		if !ended {
			c.durables[s] = true
			delete(c.subs, id)
			delete(c.subsByN, id.N)
		}
	}
}

// resubscribeDurables (c.mu held) returns the Subscribes that resume the
// kept durable subscriptions on a new connection.
func (c *Client) resubscribeDurables() []message.Message {
	var out []message.Message
	for s := range c.durables {
		c.nextReq++
		c.subReqs[c.nextReq] = s
		out = append(out, s.subscribeMsg(c.nextReq))
	}
	c.durables = map[*Subscription]bool{}
	return out
}

// resumed handles the SubAck of a durable subscription that was accepted
// before (a resubscription after a reconnect): it takes the new id, or
// ends on a refusal. It reports whether a was such an answer.
func (s *Subscription) resumed(a *message.SubAck) bool {
	select {
	case <-s.accepted:
	default:
		return false // the first answer: the common path
	}
	if a.Err != "" {
		s.end(errors.New("client: durable subscription not resumed: " + a.Err))
		return true
	}
	s.mu.Lock()
	s.id = a.Sub
	s.mu.Unlock()
	if a.Confirmed {
		s.confOnce.Do(func() { close(s.confirmed) })
	}
	return true
}
