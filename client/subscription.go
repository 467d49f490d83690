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

// Delivery is one publication delivered to a subscription, or (Gap set) a
// notice that publications of a source may have been lost (more than δ
// brokers failed in a row). Attrs and Payload may be shared with the
// deliveries of the same publication to this client's other subscriptions:
// treat them as read-only.
type Delivery struct {
	Sub         message.SubID
	Pub         message.PubID // publisher, epoch, sequence number
	Attrs       []matching.Attr
	Payload     []byte
	PublishedAt time.Time // the publisher's clock
	ReceivedAt  time.Time // this client's clock
	Gap         *message.Gap
	// Token (durable subscriptions): the checkpoint token once this
	// delivery is consumed. Store it with what the delivery changed; hand
	// the stored one to SubscribeDurable to resume after it.
	Token []byte
}

// Subscription is one subscription of a Client.
type Subscription struct {
	// C yields the deliveries in order, per publisher in publication
	// order. It is closed when the subscription ends (Unsubscribe, Close,
	// connection lost); Err then says why. For a subscription made with
	// SubscribeFunc, C yields nothing and is only closed at the end.
	C <-chan Delivery

	c         *Client
	dur       *durable       // durable subscriptions only (durable.go)
	fn        func(Delivery) // SubscribeFunc's handler, or nil: deliveries go to ch
	filter    matching.Filter
	ch        chan Delivery
	accepted  chan struct{} // closed at the first SubAck
	confirmed chan struct{} // closed at the SubAck with Confirmed
	stop      chan struct{} // closed by Unsubscribe: stop delivering
	stopOnce  sync.Once

	mu        sync.Mutex
	id        message.SubID
	err       error
	ended     bool
	dropped   bool // a delivery was not handed on (withdrawn, closed): none after it is
	abandoned bool // Subscribe gave up waiting: unsubscribe when accepted
	confOnce  sync.Once
}

// ID is the overlay-wide identity of the subscription.
func (s *Subscription) ID() message.SubID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Filter is the subscription's filter.
func (s *Subscription) Filter() matching.Filter { return s.filter }

// Confirmed is closed once every broker has the subscription: from then
// on every matching publication is delivered (PROTOCOL §1).
func (s *Subscription) Confirmed() <-chan struct{} { return s.confirmed }

// WaitConfirmed waits for the confirmation.
func (s *Subscription) WaitConfirmed(ctx context.Context) error {
	select {
	case <-s.confirmed:
		return nil
	case <-ctx.Done():
		if err := s.Err(); err != nil {
			return err
		}
		return fmt.Errorf("client: subscription not confirmed: %w", ctx.Err())
	}
}

// Err is why the subscription ended (nil after a clean Unsubscribe or
// while it runs).
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Subscribe subscribes to filter and returns once the edge broker accepted
// the subscription (deliveries may flow from then on). Wait on Confirmed
// for the overlay-wide confirmation.
func (c *Client) Subscribe(ctx context.Context, filter matching.Filter) (*Subscription, error) {
	return c.subscribe(ctx, filter, nil, nil)
}

// SubscribeFunc is Subscribe with a handler instead of a channel: handle is
// called for every delivery (and gap notice) of the subscription, in order,
// on the client's receive goroutine, without a channel hand-off per
// delivery. While handle runs the client reads nothing else from the broker,
// so handle must return promptly and must not wait for the client: calling
// Subscribe, Unsubscribe or Publish from inside handle may deadlock (they
// wait for answers that the receive goroutine would read); start a
// goroutine for those. A slow handler slows the connection down like an
// unread C (and finally gets the client disconnected as a slow consumer).
// No call of handle starts after Unsubscribe was called or the
// subscription ended; C is closed at the end and Err says why.
func (c *Client) SubscribeFunc(ctx context.Context, filter matching.Filter, handle func(Delivery)) (*Subscription, error) {
	if handle == nil {
		return nil, errors.New("client: SubscribeFunc: nil handler")
	}
	return c.subscribe(ctx, filter, handle, nil)
}

func (c *Client) subscribe(ctx context.Context, filter matching.Filter, fn func(Delivery), dur *durable) (*Subscription, error) {
	s := &Subscription{
		c:         c,
		dur:       dur,
		filter:    filter,
		fn:        fn,
		accepted:  make(chan struct{}),
		confirmed: make(chan struct{}),
		stop:      make(chan struct{}),
	}
	if fn != nil {
		s.ch = make(chan Delivery) // never sent to: closed at the end
	} else {
		s.ch = make(chan Delivery, c.opts.DeliveryBuffer)
	}
	s.C = s.ch
	c.sendMu.Lock()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		c.sendMu.Unlock()
		return nil, err
	}
	c.nextReq++
	req := c.nextReq
	c.subReqs[req] = s
	conn := c.conn
	c.mu.Unlock()
	err := conn.Send(s.subscribeMsg(req))
	c.sendMu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(c.subReqs, req)
		c.mu.Unlock()
		return nil, fmt.Errorf("client: subscribe: %w", err)
	}
	select {
	case <-s.accepted:
		if err := s.Err(); err != nil {
			return nil, err
		}
		return s, nil
	case <-ctx.Done():
		s.mu.Lock()
		s.abandoned = true
		s.mu.Unlock()
		// Accepted in the meantime? Then withdraw it now.
		select {
		case <-s.accepted:
			if s.Err() == nil {
				go s.Unsubscribe(context.Background())
			}
		default:
		}
		return nil, fmt.Errorf("client: subscribe: no answer from the broker: %w", ctx.Err())
	}
}

// onSubAck is called by the receive loop.
func (c *Client) onSubAck(a *message.SubAck) {
	c.mu.Lock()
	s := c.subReqs[a.Req]
	if s != nil {
		delete(c.subReqs, a.Req)
		if a.Err == "" {
			c.subs[a.Sub] = s
			c.subsByN[a.Sub.N] = s
		}
	} else {
		s = c.subs[a.Sub]
	}
	c.mu.Unlock()
	if s == nil {
		return
	}
	if s.dur != nil && s.resumed(a) {
		return // durable.go: a resubscription after a reconnect
	}
	if a.Err != "" {
		s.accept(nil, errors.New("client: subscribe refused: "+a.Err))
		return
	}
	id := a.Sub
	s.accept(&id, nil)
	if a.Confirmed {
		s.confOnce.Do(func() { close(s.confirmed) })
	}
	s.mu.Lock()
	abandoned := s.abandoned
	s.mu.Unlock()
	if abandoned {
		go s.Unsubscribe(context.Background())
	}
}

// accept records the first answer (idempotent).
func (s *Subscription) accept(id *message.SubID, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.accepted:
		return
	default:
	}
	if id != nil {
		s.id = *id
	}
	if err != nil {
		s.err = err
		s.ended = true
		close(s.ch)
	}
	close(s.accepted)
}

// deliver hands d to the application, waiting while C is full (see the
// package comment for why nothing is dropped), unless the subscription was
// withdrawn or the client closed.
//
// A delivery not handed on ends the hand-offs, and a durable
// subscription's token never counts it: handed on, a later delivery's
// token would count it consumed, and a resume from that token would never
// get it (when the client closes while deliveries flow, the select below
// picks at random between a free C and done).
func (s *Subscription) deliver(d Delivery, g *gate) {
	s.mu.Lock()
	ended := s.ended || s.dropped
	s.mu.Unlock()
	if ended || g.closed() {
		return // closed: what still arrives on the connection is not handed on
	}
	var next checkpoint.Token
	if s.dur != nil {
		// The token counts d only once d is handed on (Token must not
		// name a delivery the application never got).
		next = s.dur.after(&d)
		d.Token = next.Encode()
	}
	var handed bool
	if s.dur != nil {
		// Inside the gate: Close waits for it, and the token it leaves
		// counts exactly what was handed on.
		g.mu.Lock()
		if handed = s.handOff(&d, g.done); handed {
			s.dur.commit(next)
		}
		g.mu.Unlock()
	} else {
		handed = s.handOff(&d, g.done)
	}
	if !handed {
		s.mu.Lock()
		s.dropped = true
		s.mu.Unlock()
		return
	}
	if s.fn != nil {
		s.fn(d) // outside the gate: the handler may close the client
	}
}

// handOff hands d on (to C, or for a handler reports that it may be
// called) unless the subscription was withdrawn or the client closed.
func (s *Subscription) handOff(d *Delivery, done <-chan struct{}) bool {
	if s.fn != nil {
		select {
		case <-s.stop:
		case <-done:
		default:
			return true
		}
		return false
	}
	select {
	case s.ch <- *d:
		return true
	case <-s.stop:
	case <-done:
	}
	return false
}

// gate is a client's hand-off of deliveries to the application. Once done
// is closed nothing more is handed on, and shut returns only after a
// durable subscription's hand-off in progress ended, so that when
// Client.Close returns its Token counts exactly what the application got.
// (A plain subscription's hand-off does not take the gate: it costs a
// lock per delivery, and its outcome changes no token.)
type gate struct {
	mu   sync.Mutex
	done <-chan struct{}
}

func (g *gate) closed() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// shut waits for a hand-off in progress (done is closed already: it ends
// at once).
func (g *gate) shut() {
	g.mu.Lock()
	g.mu.Unlock() //nolint:staticcheck // an empty critical section: the barrier is the point
}

// end closes C; called only from the receive loop (the only sender).
func (s *Subscription) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	s.err = err
	close(s.ch)
}

// Unsubscribe withdraws the subscription and waits for the edge broker's
// answer. Deliveries still buffered in C stay readable; C is then closed.
func (s *Subscription) Unsubscribe(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stop) })
	c := s.c
	id := s.ID()
	ch := make(chan error, 1)
	c.sendMu.Lock()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		c.sendMu.Unlock()
		return err
	}
	if _, ok := c.subs[id]; !ok {
		c.mu.Unlock()
		c.sendMu.Unlock()
		return nil // already ended
	}
	c.unsubs[id] = ch
	conn := c.conn
	c.mu.Unlock()
	err := conn.Send(&message.Unsubscribe{Sub: id})
	c.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("client: unsubscribe: %w", err)
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("client: unsubscribe not confirmed: %w", ctx.Err())
	}
}
