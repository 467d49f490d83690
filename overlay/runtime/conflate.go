package runtime

import (
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// Conflation (message.Conflation, docs/websocket.md): a subscription that
// asks for it gets, per value of one attribute, only the latest matching
// publication of each interval. The core delivers every publication as
// usual; the runtime holds a conflated subscription's deliveries here and
// hands the latest per key to the session when the interval ends, in the
// order the kept ones arrived, so per-publisher order holds among what is
// delivered. A publication without the attribute is not conflated. It is
// the session's delivery policy, whatever transport the session rides on.

// maxConflateKeys bounds the keys one conflated subscription holds within
// an interval; at the bound the interval ends early (everything held is
// delivered), so memory stays bounded and nothing is dropped for lack of
// room.
const maxConflateKeys = 1024

type conflater struct {
	key   string
	every time.Duration
	due   time.Time // end of the current interval (zero: nothing held)
	at    map[string]int
	held  []*message.Deliver // nil entries: superseded
}

func newConflater(c *message.Conflation) *conflater {
	return &conflater{key: c.Key, every: time.Duration(c.IntervalMS) * time.Millisecond, at: map[string]int{}}
}

// keyOf is d's value of the conflation attribute, and whether it has one.
func (cf *conflater) keyOf(d *message.Deliver) (string, bool) {
	for _, a := range d.Attrs {
		if a.Name == cf.key {
			return a.Value.String(), true
		}
	}
	return "", false
}

// hold keeps d as the latest for its key, or reports false when d is to
// be delivered now (no key attribute).
func (cf *conflater) hold(d *message.Deliver, now time.Time) bool {
	k, ok := cf.keyOf(d)
	if !ok {
		return false
	}
	if len(cf.held) == 0 {
		cf.due = now.Add(cf.every)
	}
	if i, ok := cf.at[k]; ok {
		cf.held[i] = nil
	}
	cf.at[k] = len(cf.held)
	cf.held = append(cf.held, d)
	return true
}

// take returns what the interval kept, in arrival order, and starts the
// next one.
func (cf *conflater) take() []*message.Deliver {
	var out []*message.Deliver
	for _, d := range cf.held {
		if d != nil {
			out = append(out, d)
		}
	}
	clear(cf.at)
	cf.held, cf.due = cf.held[:0], time.Time{}
	return out
}

// conflateSubscribe records a Subscribe's conflation until its SubAck;
// it reports false (after refusing the subscription) when it is invalid.
func (r *Runtime) conflateSubscribe(c message.ClientID, ss *sessionState, m *message.Subscribe) bool {
	if m.Conflate == nil {
		return true
	}
	if err := m.Conflate.Check(); err != nil {
		r.answer(c, &message.SubAck{Req: m.Req, Err: err.Error()})
		return false
	}
	if ss.conflateReq == nil {
		ss.conflateReq = map[uint64]*message.Conflation{}
	}
	ss.conflateReq[m.Req] = m.Conflate
	return true
}

// conflateAck starts conflating a subscription its SubAck accepted.
func (r *Runtime) conflateAck(ss *sessionState, a *message.SubAck) {
	cf := ss.conflateReq[a.Req]
	if cf == nil {
		return
	}
	delete(ss.conflateReq, a.Req)
	if a.Err != "" || ss.conflated[a.Sub] != nil {
		return
	}
	if ss.conflated == nil {
		ss.conflated = map[message.SubID]*conflater{}
	}
	ss.conflated[a.Sub] = newConflater(cf)
	r.conflating++
}

// conflateEnd stops conflating sub: the client unsubscribed, and what was
// held for it is dropped with the subscription.
func (r *Runtime) conflateEnd(ss *sessionState, sub message.SubID) {
	if ss.conflated[sub] == nil {
		return
	}
	delete(ss.conflated, sub)
	r.conflating--
}

// divertConflated takes the deliveries of conflated subscriptions out of
// out (setting them nil) into their conflaters.
func (r *Runtime) divertConflated(out []overlay.ClientEnvelope) {
	now := r.now()
	for i := range out {
		d, ok := out[i].Msg.(*message.Deliver)
		if !ok {
			continue
		}
		ss := r.sessions[out[i].To]
		if ss == nil || ss.conflated == nil {
			continue
		}
		cf := ss.conflated[d.Sub]
		if cf == nil || !cf.hold(d, now) {
			continue
		}
		out[i].Msg = nil
		if len(cf.at) >= maxConflateKeys {
			cf.due = now // the bound: the interval ends now
		}
	}
}

// flushConflated hands every conflater whose interval ended what it kept
// (sent with the runtime's answers at the end of the next drain).
func (r *Runtime) flushConflated(now time.Time) {
	if r.conflating == 0 {
		return
	}
	for c, ss := range r.sessions {
		for _, cf := range ss.conflated {
			if len(cf.held) == 0 || now.Before(cf.due) {
				continue
			}
			for _, d := range cf.take() {
				r.answer(c, d)
			}
		}
	}
}
