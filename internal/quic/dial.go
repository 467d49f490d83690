package quic

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
	"github.com/quic-go/quic-go"
)

// errLostTie: our dial lost to a link the peer dialled (simultaneous dials).
var errLostTie = errors.New("quic: simultaneous dial lost")

// maxDialRounds bounds how often Dial retries after losing a tie-break to
// a link that then failed.
const maxDialRounds = 3

// Dial returns an up, authenticated link to the broker peer at addr. If a
// link to peer exists or is being set up (by a Dial or by the peer dialling
// us), Dial returns that one instead of making a second. peer may be empty
// when only the address is known (joining through a join point); the
// peer's ID comes from its handshake. PeerUp fires for the link (from the
// link's goroutine, possibly just after Dial returns).
func (e *Endpoint) Dial(ctx context.Context, peer message.BrokerID, addr string) (*Link, error) {
	if e.cfg.ID == "" {
		return nil, errors.New("quic: Dial: a dial-only endpoint without an ID cannot link to brokers")
	}
	if peer == e.cfg.ID {
		return nil, fmt.Errorf("quic: Dial: %s cannot link to itself", peer)
	}
	var lastErr error
	for round := 0; round < maxDialRounds; round++ {
		var l *Link
		var err error
		if peer != "" {
			e.mu.Lock()
			if e.closed {
				e.mu.Unlock()
				return nil, ErrClosed
			}
			if l := e.links[peer]; l != nil {
				e.mu.Unlock()
				if err := l.waitUp(ctx); err != nil {
					lastErr = err
					continue
				}
				return l, nil
			}
			if d := e.dials[peer]; d != nil {
				e.mu.Unlock()
				select {
				case <-d.done:
					l, err = d.link, d.err
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			} else {
				d := &dialCall{done: make(chan struct{})}
				e.dials[peer] = d
				e.mu.Unlock()
				l, err = e.dialOnce(ctx, peer, addr)
				d.link, d.err = l, err
				e.mu.Lock()
				delete(e.dials, peer)
				e.mu.Unlock()
				close(d.done)
			}
		} else {
			// Joining through an address: a link to the broker there may
			// already be up (it dialled us, e.g. probing for a restarted
			// peer); use it rather than being refused as a duplicate.
			if l := e.linkByAddr(addr); l != nil {
				if err := l.waitUp(ctx); err == nil {
					return l, nil
				}
			}
			l, err = e.dialOnce(ctx, "", addr)
		}
		lastErr = err
		var re *RefusedError
		switch {
		case err == nil:
			return l, nil
		case errors.Is(err, errLostTie):
			// l is the link the peer dialled, which survives.
			if err := l.waitUp(ctx); err == nil {
				return l, nil
			}
		case errors.As(err, &re) && re.Remote && re.Code == message.RefuseDuplicate:
			// The peer keeps its own link to us (it is dialling us, or
			// already did): wait for it to arrive here. Without the
			// peer's ID (a join by address) look the link up by address.
			var l *Link
			if peer != "" {
				l = e.waitLink(ctx, peer)
			} else {
				l = e.waitLinkAddr(ctx, addr)
			}
			if l != nil {
				if err := l.waitUp(ctx); err == nil {
					return l, nil
				}
			}
		default:
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, lastErr
}

// linkByAddr returns the registered link whose peer advertised addr, if any.
func (e *Endpoint) linkByAddr(addr string) *Link {
	if addr == "" {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.links {
		if l.addr == addr {
			return l
		}
	}
	return nil
}

// waitLinkAddr waits (at most the handshake timeout) for a link to the
// broker advertising addr to be registered.
func (e *Endpoint) waitLinkAddr(ctx context.Context, addr string) *Link {
	t := time.NewTimer(e.cfg.HandshakeTimeout)
	defer t.Stop()
	for {
		e.mu.Lock()
		ch := e.linkAdded
		e.mu.Unlock()
		if l := e.linkByAddr(addr); l != nil {
			return l
		}
		select {
		case <-ch:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// waitLink waits (at most the handshake timeout) for a link to peer to be
// registered.
func (e *Endpoint) waitLink(ctx context.Context, peer message.BrokerID) *Link {
	t := time.NewTimer(e.cfg.HandshakeTimeout)
	defer t.Stop()
	for {
		e.mu.Lock()
		l, ch := e.links[peer], e.linkAdded
		e.mu.Unlock()
		if l != nil || peer == "" {
			return l
		}
		select {
		case <-ch:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// waitUp waits for the link's handshake to end.
func (l *Link) waitUp(ctx context.Context) error {
	select {
	case <-l.ready:
		return l.upErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dialOnce makes one connection and runs the dialler's side of the
// handshake: Hello → Welcome (checked: version, identity, the acceptor's
// proof, no duplicate) → Ready.
func (e *Endpoint) dialOnce(ctx context.Context, peer message.BrokerID, addr string) (*Link, error) {
	who := addr
	if peer != "" {
		who = fmt.Sprintf("broker %s (%s)", peer, addr)
	}
	log := e.cfg.Log.With().Str("to", addr).Str("peer", string(peer)).Logger()
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("quic: dial %s: %w", who, err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.HandshakeTimeout)
	defer cancel()
	qc, err := e.tr.Dial(ctx, ua, e.clientTLS, quicConfig(&e.cfg, false))
	if err != nil {
		return nil, fmt.Errorf("quic: dial %s: %w", who, err)
	}
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		_ = qc.CloseWithError(codeRefused, "")
		return nil, fmt.Errorf("quic: dial %s: open stream: %w", who, err)
	}
	st := quicStream{qc, str}
	deadline, _ := ctx.Deadline()
	_ = st.SetDeadline(deadline)
	ekm, err := exportEKM(qc)
	if err != nil {
		_ = qc.CloseWithError(codeRefused, "")
		return nil, err
	}
	hello := &message.Hello{Magic: message.Magic, Version: e.cfg.version, MinVersion: e.cfg.minVersion,
		Role: message.RoleBroker, ID: e.cfg.ID, Epoch: e.cfg.Epoch, Addr: e.cfg.Addr}
	if e.cfg.Secret != nil {
		hello.Auth = authProof(e.cfg.Secret, ekm, roleDialer, e.cfg.ID)
	}
	if err := writeHandshake(st, hello); err != nil {
		_ = qc.CloseWithError(codeRefused, "")
		return nil, fmt.Errorf("quic: dial %s: %w", who, err)
	}
	rd := wire.NewReader(st, e.cfg.MaxFrame)
	rd.UseArena(readArena)
	m, err := rd.Read()
	if err != nil {
		_ = qc.CloseWithError(codeRefused, "")
		var ae *quic.ApplicationError
		if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == codeRefused {
			rerr := &RefusedError{Peer: who, Reason: ae.ErrorMessage, Remote: true}
			log.Warn().Err(rerr).Msg("link refused")
			return nil, rerr
		}
		return nil, fmt.Errorf("quic: dial %s: handshake: %w", who, err)
	}
	var w *message.Welcome
	switch m := m.(type) {
	case *message.Refuse:
		_ = qc.CloseWithError(codeRefused, "")
		rerr := &RefusedError{Peer: who, Code: m.Code, Reason: m.Reason, Remote: true}
		if m.Code == message.RefuseDuplicate {
			log.Debug().Err(rerr).Msg("peer keeps its own link")
		} else {
			log.Warn().Err(rerr).Msg("link refused")
		}
		return nil, rerr
	case *message.Welcome:
		w = m
	default:
		return nil, refuse(st, log, who, message.RefuseProtocol, fmt.Sprintf("expected Welcome, got %v", m.Type()))
	}
	if w.ID != "" {
		who = fmt.Sprintf("broker %s (%s)", w.ID, addr)
	}
	switch {
	case w.Magic != message.Magic:
		return nil, refuse(st, log, who, message.RefuseProtocol, fmt.Sprintf("bad magic %q", w.Magic))
	case peer != "" && w.ID != peer:
		return nil, refuse(st, log, who, message.RefuseProtocol, fmt.Sprintf("dialled %s but reached %s", peer, w.ID))
	case w.ID == "" || w.ID == e.cfg.ID:
		return nil, refuse(st, log, who, message.RefuseProtocol, fmt.Sprintf("peer has ID %q", w.ID))
	}
	if _, why := e.compatible(w.Version, w.MinVersion, who); why != "" {
		return nil, refuse(st, log, who, message.RefuseVersion, why)
	}
	if e.cfg.Secret != nil && !hmac.Equal(w.Auth, authProof(e.cfg.Secret, ekm, roleAcceptor, w.ID)) {
		return nil, refuse(st, log, who, message.RefuseAuth, "authentication failed: the peer does not prove it holds this overlay's secret")
	}
	l := &Link{ep: e, peer: w.ID, epoch: w.Epoch, addr: w.Addr, dialled: true,
		ready: make(chan struct{}), down: make(chan struct{})}
	l.peerConn = newPeerConn(st, rd, &e.cfg, e.cfg.Log.With().Str("peer", string(w.ID)).Logger())
	// Tie-break against a link the peer dialled meanwhile (see admitIncoming).
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, refuse(st, log, who, message.RefuseOther, "broker shutting down")
	}
	old := e.links[w.ID]
	if old != nil && w.Epoch <= old.epoch {
		e.mu.Unlock()
		refuse(st, log, who, message.RefuseDuplicate, "simultaneous dial: keeping the link the peer dialled")
		return old, errLostTie
	}
	e.register(l, old)
	e.mu.Unlock()
	if old != nil {
		old.abort(codeReplaced, "replaced by a newer link")
	}
	if err := writeHandshake(st, &message.Ready{}); err != nil {
		e.unregister(l)
		l.upErr = err
		close(l.ready)
		close(l.down)
		_ = qc.CloseWithError(codeRefused, "")
		return nil, fmt.Errorf("quic: dial %s: %w", who, err)
	}
	_ = st.SetDeadline(time.Time{})
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.runLink(l)
	}()
	return l, nil
}
