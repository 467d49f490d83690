// Client sessions: requests into the core (subscriptions, publisher
// backpressure), acknowledgements coalesced, and deliveries out (encoded once
// per publication, slow consumers closed).

package runtime

import (
	"fmt"
	"slices"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

type sessionState struct {
	s    ClientSession
	subs map[message.SubID]bool // accepted subscriptions (with reqs, bounded by MaxSubsPerClient)
	reqs map[uint64]bool        // Subscribe requests not yet answered, by Req
	// Publisher backpressure. lastFwd is the highest sequence number
	// forwarded to the core. Once the runtime refused one (refusing), it
	// refuses every publication after resumeAt (lastFwd+1, or the first
	// refused one if nothing was forwarded on this session yet), so that
	// the core never sees a hole, and resumes with the first one at or
	// before it (the client sends everything again from the refused one).
	// Copies of publications already forwarded pass: the core acknowledges
	// them without publishing them twice.
	refusing bool
	resumeAt uint64
	lastFwd  uint64
	held     bool // frames held for the end of the drain (holder)
	// Conflated subscriptions (conflate.go): requested, by Req, until
	// their SubAck; then by SubID.
	conflateReq map[uint64]*message.Conflation
	conflated   map[message.SubID]*conflater
}

func (r *Runtime) clientUp(s ClientSession) (message.ClientID, bool) {
	if len(r.sessions) >= r.cfg.Limits.MaxClients {
		r.log.Warn().Int("limit", r.cfg.Limits.MaxClients).Msg("client refused: too many clients")
		r.m.clientDisconnects.WithLabelValues("too many clients").Inc()
		s.Close(fmt.Sprintf("too many clients (limit %d)", r.cfg.Limits.MaxClients))
		return 0, false
	}
	r.nextClient++
	c := r.nextClient
	r.sessions[c] = &sessionState{s: s, subs: map[message.SubID]bool{}, reqs: map[uint64]bool{}}
	r.sessionIDs[s] = c
	r.m.clientSessions.Set(float64(len(r.sessions)))
	r.node.ClientOpen(c)
	return c, true
}

func (r *Runtime) dropSession(c message.ClientID) {
	ss := r.sessions[c]
	if ss == nil {
		return
	}
	delete(r.sessions, c)
	delete(r.sessionIDs, ss.s)
	r.conflating -= len(ss.conflated)
	r.m.clientSessions.Set(float64(len(r.sessions)))
}

func (r *Runtime) clientMessage(c message.ClientID, ss *sessionState, m message.Message) {
	r.m.clientReq(m.Type())
	switch m := m.(type) {
	case *message.Publish:
		if m.Seq > ss.lastFwd && (ss.refusing && m.Seq > ss.resumeAt || r.now().Before(r.congested)) {
			if !ss.refusing {
				ss.refusing, ss.resumeAt = true, m.Seq
				if ss.lastFwd > 0 {
					ss.resumeAt = ss.lastFwd + 1
				}
			}
			r.answer(c, &message.PubAck{Seq: m.Seq, Err: "backpressure"})
			return
		}
		if m.Seq > ss.lastFwd {
			ss.refusing = false
			ss.lastFwd = m.Seq
		}
	case *message.Subscribe:
		if len(ss.subs)+len(ss.reqs) >= r.cfg.Limits.MaxSubsPerClient {
			r.answer(c, &message.SubAck{Req: m.Req, Err: fmt.Sprintf("too many subscriptions for this session (limit %d)", r.cfg.Limits.MaxSubsPerClient)})
			return
		}
		if !r.conflateSubscribe(c, ss, m) {
			return
		}
		ss.reqs[m.Req] = true
	case *message.Unsubscribe:
		delete(ss.subs, m.Sub)
		r.conflateEnd(ss, m.Sub)
	}
	r.node.Client(c, m)
}

// coalesceAcks drops (sets to nil) every successful PubAck that a later
// successful PubAck to the same client in out supersedes: acknowledgements
// are cumulative, so the client learns the same from the last one, and a
// publisher with many publications in flight gets one acknowledgement per
// batch instead of one per publication (its session queue stays short). A
// refusal in between keeps the acknowledgement before it: the client must
// see them in order.
func (r *Runtime) coalesceAcks(out []overlay.ClientEnvelope) {
	if len(out) < 2 {
		return
	}
	clear(r.laterAck)
	for i := len(out) - 1; i >= 0; i-- {
		a, ok := out[i].Msg.(*message.PubAck)
		if !ok {
			continue
		}
		if a.Err != "" {
			r.laterAck[out[i].To] = false
			continue
		}
		if r.laterAck[out[i].To] {
			out[i].Msg = nil
		} else {
			r.laterAck[out[i].To] = true
		}
	}
}

// answer queues the runtime's own answer to a client request. It is sent
// after the core's outputs of the same batch, so that a client sees the
// answers to its requests in the order it made them (a refusal must not
// overtake the acknowledgement of an earlier publication).
func (r *Runtime) answer(c message.ClientID, m message.Message) {
	r.answers = append(r.answers, overlay.ClientEnvelope{To: c, Msg: m})
}

// frameSession is a ClientSession that also takes encoded frames
// (internal/quic's Session): deliveries are encoded once per publication
// and the same bytes queued on every session.
type frameSession interface {
	// HoldFrame queues an encoded frame without blocking and without
	// waking the session's writer (false: queue full or closed); see
	// holder.
	HoldFrame(frame []byte) bool
	// Version is the protocol version agreed in the handshake: from 2 on
	// the client understands DeliverSet.
	Version() uint16
}

// trySend queues m on s (held, see holder) and remembers to flush it.
func (r *Runtime) trySendClient(ss *sessionState, m message.Message) bool {
	if h, ok := ss.s.(holder); ok {
		r.markHeld(h, &ss.held)
		return h.Hold(m)
	}
	return ss.s.TrySend(m)
}

// sendClients carries out the core's outputs to clients (nil ones are
// skipped: coalesced acknowledgements). The core emits the deliveries of one
// publication together; each such run goes to sendDeliveries.
func (r *Runtime) sendClients(out []overlay.ClientEnvelope) {
	if r.conflating > 0 {
		r.divertConflated(out)
	}
	for i := 0; i < len(out); {
		d, ok := out[i].Msg.(*message.Deliver)
		if !ok {
			if out[i].Msg != nil {
				r.sendClient(out[i].To, out[i].Msg)
			}
			i++
			continue
		}
		r.denc.Reset(d)
		j := i + 1
		for ; j < len(out); j++ {
			d2, ok := out[j].Msg.(*message.Deliver)
			if !ok || !r.denc.Same(&d2.Pub, d2.Attrs, d2.Payload, d2.Time) {
				break
			}
		}
		r.sendDeliveries(out[i:j])
		i = j
	}
}

// sendDeliveries sends the deliveries of one publication (r.denc holds it)
// to their sessions. A session that takes frames gets the publication
// encoded once for all sessions: one DeliverSet frame listing all its
// matching subscriptions (protocol version 2), or one Deliver frame per
// subscription built from the shared encoding (version 1). Per session the
// deliveries keep their order; across sessions order does not matter.
func (r *Runtime) sendDeliveries(run []overlay.ClientEnvelope) {
	if len(run) > 1 {
		// Group each session's deliveries (stable: their order is kept).
		r.runBuf = append(r.runBuf[:0], run...)
		slices.SortStableFunc(r.runBuf, func(a, b overlay.ClientEnvelope) int {
			switch {
			case a.To < b.To:
				return -1
			case a.To > b.To:
				return 1
			}
			return 0
		})
		run = r.runBuf
		defer clear(r.runBuf) // do not pin the messages until the next run
	}
	if t := run[0].Msg.(*message.Deliver).Time; t > 0 {
		// One observation per publication delivered here (not per
		// delivery: with 100 local subscribers the histogram cost as much
		// as encoding).
		r.m.deliveryLatency.Observe(r.now().Sub(time.Unix(0, t)).Seconds())
	}
	for i := 0; i < len(run); {
		c := run[i].To
		j := i + 1
		for j < len(run) && run[j].To == c {
			j++
		}
		r.deliverTo(c, run[i:j])
		i = j
	}
}

// deliverTo sends one session its deliveries of the publication r.denc
// holds; a session whose queue is full is disconnected (see Runtime).
func (r *Runtime) deliverTo(c message.ClientID, ds []overlay.ClientEnvelope) {
	ss := r.sessions[c]
	if ss == nil {
		r.m.unroutable.WithLabelValues("client").Add(float64(len(ds)))
		r.log.Debug().Uint64("client", uint64(c)).Msg("no session for a delivery (client just left)")
		return
	}
	fs, frames := ss.s.(frameSession)
	sent := true
	switch {
	case frames && fs.Version() >= 2 && r.ownSubs(ds):
		r.subsBuf = r.subsBuf[:0]
		for i := range ds {
			r.subsBuf = append(r.subsBuf, ds[i].Msg.(*message.Deliver).Sub.N)
		}
		r.markHeld(ss.s.(holder), &ss.held)
		sent = fs.HoldFrame(r.denc.DeliverSetFrame(r.subsBuf))
	case frames:
		r.markHeld(ss.s.(holder), &ss.held)
		for i := 0; i < len(ds) && sent; i++ {
			sent = fs.HoldFrame(r.denc.DeliverFrame(&ds[i].Msg.(*message.Deliver).Sub))
		}
	default:
		for i := 0; i < len(ds) && sent; i++ {
			sent = r.trySendClient(ss, ds[i].Msg)
		}
	}
	if !sent {
		r.slowConsumer(c, ss)
	}
}

// ownSubs reports whether every delivery is to a subscription this broker
// incarnation made: a DeliverSet names subscriptions by N only, the client
// knows their edge and epoch from its SubAcks.
func (r *Runtime) ownSubs(ds []overlay.ClientEnvelope) bool {
	for i := range ds {
		s := &ds[i].Msg.(*message.Deliver).Sub
		if s.Edge != message.BrokerID(r.cfg.ID) || s.Epoch != r.epoch {
			return false
		}
	}
	return true
}

// slowConsumer disconnects a client whose send queue is full.
func (r *Runtime) slowConsumer(c message.ClientID, ss *sessionState) {
	r.log.Warn().Uint64("client", uint64(c)).Int("queue", r.cfg.Limits.SendQueue).Msg("disconnecting a slow consumer: its send queue is full")
	ss.s.Close(fmt.Sprintf("slow consumer: %d messages queued and not read", r.cfg.Limits.SendQueue))
	r.m.clientDisconnects.WithLabelValues("slow consumer").Inc()
	r.dropSession(c)
	r.node.ClientClose(c)
}

// sendClient sends m to a client session; a client whose queue is full is
// disconnected (see Runtime).
func (r *Runtime) sendClient(c message.ClientID, m message.Message) {
	ss := r.sessions[c]
	if ss == nil {
		r.m.unroutable.WithLabelValues("client").Inc()
		r.log.Debug().Uint64("client", uint64(c)).Str("type", m.Type().String()).Msg("no session for a core output (client just left)")
		return
	}
	switch m := m.(type) {
	case *message.PubAck:
		if m.Err != "" {
			r.m.pubAckErrors.WithLabelValues(m.Err).Inc()
		}
	case *message.SubAck:
		delete(ss.reqs, m.Req)
		if m.Err == "" {
			ss.subs[m.Sub] = true
		}
		r.conflateAck(ss, m)
	case *message.UnsubAck:
		delete(ss.subs, m.Sub)
	}
	if r.trySendClient(ss, m) {
		return
	}
	r.slowConsumer(c, ss)
}
