// Broker links: resolving the joinpoints, dials (timeouts, slow handshakes),
// links coming up (what arrives before the core is told of them) and going down,
// and sending on them (the policy when a link's queue is full).

package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

type linkState struct {
	l         PeerLink
	announced bool   // the core has been told LinkUp for this link
	sends     uint64 // messages sent, for sampling the queue length
	held      bool   // frames held for the end of the drain (holder)
	// heard is when the runtime last took messages from the link (or
	// when it came up): sendPeer does not wait for room on the full link
	// of a peer silent for long.
	heard time.Time

	// early holds, in order, what arrived on the link before the core was
	// told of it (before start: the joinpoint not resolved yet); stepped
	// right after the LinkUp (announce). The peer's core was told the
	// link is up and relies on it being FIFO and reliable: a StateRequest
	// is sent once.
	early []message.Message
}

// dialTimeout and dialPatience are overlay's, at this broker's timers.
func (r *Runtime) dialTimeout() time.Duration { return overlay.DialTimeout(r.cfg.FailureTimeout) }

func (r *Runtime) dialPatience() time.Duration {
	return overlay.DialPatience(r.dialTimeout(), r.cfg.GoneAfter)
}

// resolveJoinpoints turns the configured joinpoints into the core's list:
// an "ID@addr" one as it is (the core dials it, paced by its own backoff);
// a bare address is dialled to learn which broker answers there (all at
// once, each bounded by dialTimeout), and left out if none does. Only when
// no joinpoint at all is left is the round repeated, after a backoff that
// doubles up to maxJoinPause, for as long as the broker runs: its
// joinpoints may be restarting too.
func (r *Runtime) resolveJoinpoints(ctx context.Context) {
	const maxJoinPause = 5 * time.Second
	pause := min(max(r.cfg.FailureTimeout, 200*time.Millisecond), maxJoinPause)
	join := r.joinList()
	for round := 1; ; round++ {
		jps := make([]overlay.Peer, len(join))
		errs := make([]error, len(join))
		var wg sync.WaitGroup
		for i, j := range join {
			jp := SplitJoinpoint(j)
			if jp.ID != "" {
				jps[i] = jp
				continue
			}
			wg.Go(func() {
				dctx, cancel := context.WithTimeout(ctx, r.dialTimeout())
				defer cancel()
				l, err := r.tr.Dial(dctx, "", jp.Addr)
				if err != nil {
					errs[i] = err
					return
				}
				r.put(event{kind: evDialed, link: l})
				jps[i] = overlay.Peer{ID: l.Peer(), Addr: jp.Addr}
			})
		}
		wg.Wait()
		found := slices.DeleteFunc(jps, func(p overlay.Peer) bool { return p.ID == "" })
		if len(found) > 0 {
			r.put(event{kind: evJoinpoints, peers: found})
			return
		}
		r.log.Warn().Err(errors.Join(errs...)).Int("round", round).Str("next_in", pause.String()).Msg("no joinpoint answered")
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, maxJoinPause)
	}
}

// maxEarly bounds the messages held on a link before the core is told of
// it (linkState.early): a peer heartbeats every heartbeat period, so this
// covers a joinpoint resolution of many seconds. Beyond it the link is
// closed: its peer sees it go down, and its core re-sends what matters on
// the next link (LinkUp: a StateRequest still awaited, floods,
// retransmissions).
const maxEarly = 1024

// announce tells the core of a link it was not told of yet, then steps
// what arrived on it meanwhile, in order.
func (r *Runtime) announce(peer message.BrokerID, ls *linkState) {
	ls.announced = true
	r.node.LinkUp(peer)
	early := ls.early
	ls.early = nil
	if len(early) > 0 {
		r.peerMessages(ls.l, early)
	}
}

// peerMessages steps the core with messages received on l.
func (r *Runtime) peerMessages(l PeerLink, msgs []message.Message) {
	peer := l.Peer()
	ls := r.links[peer]
	if ls == nil || ls.l != l {
		// A link closed on the core's request, or replaced: what was in
		// flight on it is lost, as for any link that goes down.
		r.log.Debug().Str("peer", string(peer)).Int("messages", len(msgs)).Msg("messages on a closed link ignored")
		return
	}
	if !ls.announced {
		// The core has not been told of this link yet (it is not started:
		// the joinpoint is being resolved). Dropped, a message is lost on
		// a link its sender sees up, and not every one is sent again: a
		// recovering neighbour's StateRequest is not, and the neighbour
		// then waited for us until gone_after and became routable without
		// our side's subscriptions. Held until announce.
		if len(ls.early)+len(msgs) > maxEarly {
			r.log.Warn().Str("peer", string(peer)).Int("held", len(ls.early)).Msg("too many messages before the core started; closing the link")
			ls.l.Close("too many messages before the broker started")
			delete(r.links, peer)
			r.m.linkCloses.WithLabelValues("early").Inc()
			return
		}
		ls.early = append(ls.early, msgs...)
		return
	}
	ls.heard = r.now()
	for _, m := range msgs {
		if r.trace {
			r.log.Trace().Str("from", string(peer)).Str("type", m.Type().String()).Msg("step")
		}
		r.m.peerIn(m.Type())
		r.node.Step(peer, m)
		if r.links[peer] != ls {
			return // closed while stepping (a slow link): the rest is lost with it
		}
	}
}

// dialFailed tells the core that its dial of peer did not succeed,
// unless the peer's own dial won the race and its link is up.
func (r *Runtime) dialFailed(peer message.BrokerID, err error) {
	if ls := r.links[peer]; ls != nil {
		if !ls.announced && r.started {
			r.announce(peer, ls)
		}
		return
	}
	r.log.Debug().Str("peer", string(peer)).Err(err).Msg("dial failed")
	if r.started {
		r.node.DialFailed(peer)
	}
}

// linkUp records a link (replacing an older one to the same peer) and
// tells the core, once the core is a member or joining.
func (r *Runtime) linkUp(l PeerLink) {
	peer := l.Peer()
	delete(r.dialing, peer)
	if old := r.links[peer]; old != nil {
		if old.l == l {
			return
		}
		// The transport keeps one link per pair; a second one means the
		// first is dead and was not reported yet.
		old.l.Close("replaced by a new link")
		r.m.linkCloses.WithLabelValues("replaced").Inc()
		if old.announced {
			r.node.LinkDown(peer)
		}
	}
	ls := &linkState{l: l, heard: r.now()}
	r.links[peer] = ls
	r.log.Debug().Str("peer", string(peer)).Msg("link up")
	if r.started {
		r.announce(peer, ls)
	}
}

func (r *Runtime) dial(p overlay.Peer) {
	if ls := r.links[p.ID]; ls != nil {
		if !ls.announced {
			r.announce(p.ID, ls)
			return
		}
		// The core asks for a link it was told is up: it must consider
		// that one dead. Replace it.
		ls.l.Close("core asked for a new link")
		delete(r.links, p.ID)
		r.m.linkCloses.WithLabelValues("redial").Inc()
	}
	switch r.dialing[p.ID] {
	case dialActive, dialSlowAsked:
		return // the dial in flight will answer
	case dialSlow:
		r.dialing[p.ID] = dialSlowAsked // its outcome answers this request
		return
	}
	r.dialing[p.ID] = dialActive
	ctx, tr, timeout, patience := r.dialCtx, r.tr, r.dialTimeout(), r.dialPatience()
	go func() {
		dctx, cancel := context.WithTimeout(ctx, patience)
		defer cancel()
		type result struct {
			l   PeerLink
			err error
		}
		done := make(chan result, 1)
		go func() {
			l, err := tr.Dial(dctx, p.ID, p.Addr)
			done <- result{l, err}
		}()
		var res result
		slow := time.NewTimer(timeout)
		select {
		case res = <-done:
			slow.Stop()
		case <-slow.C:
			// The core is told now, as for a peer that does not answer
			// (it suspects it and goes around it), but the handshake is
			// not thrown away: on a starved machine it is slow, not
			// lost, and each new one costs more CPU than waiting.
			r.put(event{kind: evDialSlow, peer: p.ID})
			res = <-done
		}
		switch {
		case res.err != nil:
			r.put(event{kind: evDialFailed, peer: p.ID, err: res.err})
		case res.l.Peer() != p.ID:
			// Another broker answers at that address now.
			r.put(event{kind: evDialed, link: res.l})
			r.put(event{kind: evDialFailed, peer: p.ID, err: fmt.Errorf("runtime: %s answered at %s instead of %s", res.l.Peer(), p.Addr, p.ID)})
		default:
			r.put(event{kind: evDialed, link: res.l})
		}
	}()
}

// dialState is where a dial in flight stands with the core.
type dialState uint8

const (
	dialNone      dialState = iota
	dialActive              // the core waits for its outcome
	dialSlow                // the core was told DialFailed at dialTimeout; the handshake goes on
	dialSlowAsked           // as dialSlow, and the core asked again: it waits for the outcome
)

// sendPeer sends m on the link to peer; see Runtime for the policy when
// the link's queue is full.
func (r *Runtime) sendPeer(peer message.BrokerID, m message.Message) {
	ls := r.links[peer]
	if ls == nil || !ls.announced {
		r.m.unroutable.WithLabelValues("peer").Inc()
		r.log.Debug().Str("peer", string(peer)).Str("type", m.Type().String()).Msg("no link for a core output (link just went down)")
		return
	}
	if r.trace {
		r.log.Trace().Str("to", string(peer)).Str("type", m.Type().String()).Msg("send")
	}
	var ok bool
	if h, held := ls.l.(holder); held {
		r.markHeld(h, &ls.held)
		ok = h.Hold(m)
	} else {
		ok = ls.l.TrySend(m)
	}
	if ok {
		r.m.peerOut(m.Type())
		// Above the high-water mark the link is congested: refuse new
		// publications for a tick (PubAck "backpressure") before the
		// queue is full and the whole runtime has to wait. Checked every
		// 64 sends (Queued takes the link's lock).
		if ls.sends++; ls.sends%64 == 0 && ls.l.Queued() > r.highWater {
			r.congested = r.now().Add(r.cfg.Tick)
		}
		return
	}
	// Full, or closed. A peer silent for half the failure timeout is
	// likely dead (a live one sends a DACK every period and heartbeats
	// on idle links): waiting for room would stall every other link and
	// session for LinkBlock, for a link closed as stuck at the end of it.
	// Closed now; the core goes on as after any link down. Measured: with
	// 1 s failure timeouts, a killed broker's full link held its
	// neighbour for 500 ms more, in about half the runs, before the bypass.
	if silent := r.now().Sub(ls.heard); silent > r.cfg.FailureTimeout/2 {
		r.log.Warn().Str("peer", string(peer)).Str("silent", silent.Round(time.Millisecond).String()).Msg("closing the full link of a silent peer")
		ls.l.Close(fmt.Sprintf("silent peer: send queue full, nothing heard for %v", silent.Round(time.Millisecond)))
		r.m.linkCloses.WithLabelValues("silent peer").Inc()
		delete(r.links, peer)
		r.node.LinkDown(peer)
		return
	}
	// Wait for room, at most LinkBlock: Send returns as soon as the
	// writer freed some room, or at once if the link is closed.
	r.m.linkBlocked.Inc()
	start := r.now()
	errc := make(chan error, 1)
	l := ls.l
	go func() { errc <- l.Send(m) }()
	timer := time.NewTimer(r.cfg.Limits.LinkBlock)
	defer timer.Stop()
	select {
	case err := <-errc:
		if err == nil {
			// Room came, but the link is the bottleneck: refuse new
			// publications for as long as we had to wait.
			r.m.peerOut(m.Type())
			r.congested = r.now().Add(max(r.cfg.Tick, r.now().Sub(start)))
			return
		}
		// The link closed under us; its PeerDown is on its way, but the
		// core must not wait for it (it would keep sending into the void).
		r.log.Info().Str("peer", string(peer)).Err(err).Msg("link closed while sending")
		r.m.unroutable.WithLabelValues("peer").Inc()
		r.m.linkCloses.WithLabelValues("down").Inc()
	case <-timer.C:
		r.log.Warn().Str("peer", string(peer)).Str("waited", r.now().Sub(start).String()).Msg("closing a stuck link: no room in its send queue")
		l.Close(fmt.Sprintf("slow peer: no room in the send queue for %v", r.cfg.Limits.LinkBlock))
		r.m.linkCloses.WithLabelValues("slow peer").Inc()
	}
	delete(r.links, peer)
	r.node.LinkDown(peer)
}
