// The overlay of a real-time run while it runs: which brokers are up, where
// they (re)join, and the faults applied to them (crash, restart, freeze,
// resume, cut, heal, leave) from the schedule or the control socket.

package testbed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/deltapub/deltapub/topology"
)

// joinpointsFor lists where a broker (re)joins: its ancestors nearest
// first (up to δ+1 of them, so a join survives δ crashed ancestors), then,
// for the root, its first δ+1 children.
func joinpointsFor(t *Topology, name string, delta int) []string {
	var out []string
	for n := t.Parent[name]; n != "" && len(out) < delta+1; n = t.Parent[n] {
		out = append(out, n)
	}
	if len(out) == 0 {
		// δ+1 of them: the runtime takes at most 16 (a star's root has
		// as many children as brokers).
		out = append(out, t.Children[name][:min(len(t.Children[name]), delta+1)]...)
	}
	return out
}

// rejoinpointsFor lists where a restarted broker rejoins: the policy the
// simulator's fuzzer restarts brokers with too (topology.RestartJoinpoints).
func rejoinpointsFor(t *Topology, name string, delta int) []string {
	parent := func(n string) (string, bool) { p := t.Parent[n]; return p, p != "" }
	return topology.RestartJoinpoints(name, delta, parent, t.Neighbours)
}

// leaveResult is how a graceful leave ended: how long the broker took to
// be gone, or why it did not leave cleanly.
type leaveResult struct {
	took time.Duration
	err  error
}

// leaveWait bounds how long a leave may take before it is reported as
// failed: the runtime's own bound on a leave (runtime.Runtime.leaveTimeout:
// 4 failure timeouts, within 1s..10s, after which it exits anyway and the
// overlay treats it as crashed; gone_after more for a broker still
// recovering, which leaves once joined) plus a margin for a loaded machine.
func leaveWait(o OverlaySpec) time.Duration {
	return min(max(4*o.FailureTimeout.Duration, time.Second), 10*time.Second) + o.GoneAfter.Duration + 5*time.Second
}

// awaitLeave reports, once, how a leave started at t0 ended: done closes
// when the broker stopped, and check (nil: a clean leave) judges how it
// did; still running after bound, it is reported with timeout's error
// (timeout may kill it).
func awaitLeave(t0 time.Time, bound time.Duration, done <-chan struct{}, timeout, check func() error) <-chan leaveResult {
	out := make(chan leaveResult, 1)
	go func() {
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-done:
			out <- leaveResult{took: time.Since(t0), err: check()}
		case <-t.C:
			out <- leaveResult{took: bound, err: timeout()}
		}
	}()
	return out
}

// liveState is what a real-time run changes as faults are applied: the
// tree as repaired after the leaves so far (restarts rejoin through a
// broker's current ancestors) and, per broker, a channel closed when it
// leaves, which stops its publishers.
type liveState struct {
	p     *Plan
	h     host
	rec   *Recorder
	start time.Time // t = 0; set before any fault is applied
	wg    *sync.WaitGroup
	mu    sync.Mutex
	topo  *Topology
	stop  map[string]chan struct{}
	left  map[string]bool // brokers whose leave started: gone for good
	ended bool            // the run is over: no more leaves
	// session carries out a durable subscriber's disconnect or reconnect
	// (realtime.go; nil: the backend has no clients of its own).
	session func(ctx context.Context, a Action) error
}

// end refuses leaves from now on (the run is over).
func (ls *liveState) end() {
	ls.mu.Lock()
	ls.ended = true
	ls.mu.Unlock()
}

func newLiveState(p *Plan, h host, rec *Recorder, wg *sync.WaitGroup) *liveState {
	ls := &liveState{p: p, h: h, rec: rec, wg: wg, topo: p.Topo.clone(), stop: map[string]chan struct{}{}, left: map[string]bool{}}
	for _, n := range p.Topo.Names {
		ls.stop[n] = make(chan struct{})
	}
	return ls
}

// stopped is closed when broker b left: its publishers stop publishing.
func (ls *liveState) stopped(b string) <-chan struct{} { return ls.stop[b] }

// apply carries out the actions of fault number fault (-1: one sent
// through the control socket) and returns what failed. A leave returns
// once it is under way; its end is recorded by a goroutine of the run
// (bounded by leaveWait).
func (ls *liveState) apply(ctx context.Context, acts []Action, fault int) []string {
	var errs []string
	for _, a := range acts {
		var err error
		switch a.Kind {
		case ActCrash:
			err = ls.h.crash(a.Broker)
		case ActRestart:
			// A restarted broker rejoins in the background; the oracle
			// judges what follows. One that left is gone for good (the
			// plan refuses that; a manual command is refused here).
			ls.mu.Lock()
			var jps []string // replicas: the place in the data directory says it is a restart
			if ls.p.Layout == nil {
				jps = rejoinpointsFor(ls.topo, a.Broker, ls.p.Spec.Overlay.Delta)
			}
			gone := ls.left[a.Broker]
			ls.mu.Unlock()
			switch {
			case gone:
				err = fmt.Errorf("%s left the overlay for good (a new broker needs a new name)", a.Broker)
			case a.Clean:
				if err = ls.h.wipe(a.Broker); err == nil {
					err = ls.h.start(ctx, a.Broker, jps)
				}
			default:
				err = ls.h.start(ctx, a.Broker, jps)
			}
		case ActFreeze:
			err = ls.h.freeze(a.Broker)
		case ActResume:
			err = ls.h.resume(a.Broker)
		case ActCut:
			err = ls.h.cut(a.Broker, a.Peer)
		case ActHeal:
			err = ls.h.heal(a.Broker, a.Peer)
		case ActLeave:
			err = ls.leave(ctx, a.Broker, fault)
		case ActPartition, ActHealPartition:
			err = applyPartition(ls.h, a)
		case ActDisconnect, ActReconnect:
			if ls.session == nil {
				err = errors.New("this backend has no durable sessions")
			} else {
				err = ls.session(ctx, a)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", a, err))
		}
	}
	return errs
}

// leave stops b's publishers, starts b's graceful leave, follows the
// repair in the planned tree, and records the leave's end when it comes.
func (ls *liveState) leave(ctx context.Context, b string, fault int) error {
	// Publishers first, under the lock (a scheduled leave and one from
	// the control socket may race): a publication due after this is not
	// made at all, rather than refused (one in flight may still be
	// refused with ErrLeaving; never acknowledged, it is not required).
	// If the leave then cannot start (the broker is crashed or frozen:
	// only a manual command can ask that), its publishers stay stopped:
	// they had no broker to publish to anyway.
	ls.mu.Lock()
	if ls.ended {
		ls.mu.Unlock()
		return errors.New("the run is over")
	}
	if ls.left[b] {
		ls.mu.Unlock()
		return fmt.Errorf("%s already left", b)
	}
	ch, ok := ls.stop[b]
	if !ok {
		ls.mu.Unlock()
		return fmt.Errorf("unknown broker %q", b)
	}
	ls.left[b] = true
	select {
	case <-ch:
	default:
		close(ch)
	}
	// Counted before the lock is released: end (and then wg.Wait) comes
	// either before this leave (refused above) or after this Add.
	ls.wg.Add(1)
	ls.mu.Unlock()
	t0 := time.Now()
	done, err := ls.h.leave(b)
	if err != nil {
		ls.mu.Lock()
		delete(ls.left, b)
		ls.mu.Unlock()
		ls.wg.Done()
		return err
	}
	ls.mu.Lock()
	ls.topo.detach(b)
	ls.mu.Unlock()
	go func() {
		defer ls.wg.Done()
		select {
		case r := <-done:
			ls.rec.LeaveDone(fault, b, r.took, r.err)
		case <-ctx.Done():
			ls.rec.LeaveDone(fault, b, time.Since(t0), errors.New("the run ended before the broker was gone"))
		}
	}()
	return nil
}
