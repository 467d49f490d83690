// The driver of the real-time modes (process and inproc): the host each
// mode implements, and runRealtime, which builds the overlay, connects and
// subscribes the clients, runs the workload and the fault schedule, and
// waits for the deliveries still arriving.

package testbed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// host is what the real-time modes differ in: how a broker is started,
// killed, frozen and measured. The driver below does the rest (clients,
// schedule, faults, sampling) the same way for both.
type host interface {
	// start launches broker name (restart: again, after a crash, with a new
	// epoch) joining through joinpoints (broker names, tried in order).
	start(ctx context.Context, name string, joinpoints []string) error
	// waitJoined returns once name is a full member, or an error at the
	// deadline.
	waitJoined(ctx context.Context, name string, timeout time.Duration) error
	crash(name string) error
	// wipe loses the data directory of crashed broker name (restart_clean).
	wipe(name string) error
	freeze(name string) error
	resume(name string) error
	cut(a, b string) error
	heal(a, b string) error
	// leave starts a graceful leave of name and returns once it is under
	// way; the channel then reports, within leaveWait, how it ended.
	leave(name string) (<-chan leaveResult, error)
	// clientAddr is where clients of name connect, and clientDial how
	// (nil: over QUIC, client's default).
	clientAddr(name string) string
	clientDial() client.DialFunc
	// sample measures name since the previous sample.
	sample(name string) BrokerSample
	// controlMessages is the total of control messages sent by every
	// broker, or false when unknown.
	controlMessages() (int64, bool)
	// stopAll ends every broker; it is called on every exit path and must
	// be safe to call twice.
	stopAll()
}

// maxJoinWait bounds how long the overlay build waits for one broker.
const maxJoinWait = 20 * time.Second

// setupTimeout bounds one client connection or subscription request at
// the start of a run; setupParallel is how many are opened at once. On a
// loaded 2-core machine a QUIC handshake can take seconds.
const (
	setupTimeout  = 30 * time.Second
	setupParallel = 16
	setupTries    = 3
	// maxDrainExtension bounds how long a run waits past its end for
	// deliveries that are still arriving.
	maxDrainExtension = 30 * time.Second
	// sampleParallel bounds concurrent /metrics scrapes.
	sampleParallel = 8
	// rejoinSlack bounds how long past a rejoin bound the end of a run
	// waits for the reading that shows the bound passed.
	rejoinSlack = 5 * time.Second
)

// subscribeWindow bounds the subscriptions made but not yet confirmed
// during the setup. Each one floods through the overlay; thousands at once
// (srds09: 2,600) queue up in every broker's input ahead of the heartbeats,
// which then arrive later than the failure timeout: brokers suspect each
// other, bypass and retransmit, and on a small machine that storm fed on
// itself until the run failed. A window paces the setup at the overlay's
// own speed.
const subscribeWindow = 32

// waitWindowEmpty waits (at most d) until no slot of win is held; it
// returns how many still were at the deadline.
func waitWindowEmpty(ctx context.Context, win chan struct{}, d time.Duration) int {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if len(win) == 0 {
			return 0
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return len(win)
}

func countSubs(p *Plan) int {
	n := 0
	for _, sb := range p.Subscribers {
		n += len(sb.Parsed)
	}
	return n
}

// deliveryBudget bounds the deliveries buffered in the testbed's clients,
// over all subscriptions; deliveryBuffer divides it. A buffer is allocated
// in full when the subscription is made (168 bytes per slot, holding
// pointers the garbage collector scans on every cycle): 65,536 slots for
// each of srds09's 2,600 subscriptions were 28 GB of heap to scan, and the
// run drowned in garbage collection. A full buffer loses nothing: the
// client stops reading the connection until the drainer catches up.
const (
	deliveryBudget    = 1 << 19
	minDeliveryBuffer = 128
	maxDeliveryBuffer = 1 << 16
)

// deliveryBuffer is the per-subscription client buffer for p: the budget
// shared by its subscriptions, within [minDeliveryBuffer, maxDeliveryBuffer].
func deliveryBuffer(p *Plan) int {
	return min(maxDeliveryBuffer, max(minDeliveryBuffer, deliveryBudget/max(countSubs(p), 1)))
}

// runRealtime runs a plan in wall-clock time on a host.
func runRealtime(ctx context.Context, p *Plan, rec *Recorder, h host, o Options) (err error) {
	defer h.stopAll()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "testbed: "+format+"\n", args...)
		}
	}
	// Build the overlay, one broker at a time in breadth-first order, so
	// each joinpoint is a member before anyone joins through it.
	buildStart := time.Now()
	for i, n := range p.Topo.Names {
		rec.SetPhase(fmt.Sprintf("building the overlay %d/%d", i+1, len(p.Topo.Names)))
		var jps []string
		// Replicas start without joinpoints: the layout names their
		// peers, and each dials those listed before it.
		if n != p.Topo.Names[0] && p.Layout == nil {
			jps = joinpointsFor(p.Topo, n, p.Spec.Overlay.Delta)
		}
		if err := h.start(ctx, n, jps); err != nil {
			return fmt.Errorf("testbed: starting %s: %w", n, err)
		}
		if err := h.waitJoined(ctx, n, maxJoinWait); err != nil {
			return fmt.Errorf("testbed: %s did not join: %w", n, err)
		}
	}
	logf("overlay of %d brokers built in %v", len(p.Topo.Names), time.Since(buildStart).Round(time.Millisecond))
	rec.Note(fmt.Sprintf("overlay of %d brokers built in %v before t=0", len(p.Topo.Names), time.Since(buildStart).Round(time.Millisecond)))

	// t = 0 is set once every client is connected and subscribed (the
	// setup can take seconds with hundreds of clients); goroutines started
	// during the setup read start only after startedCh is closed.
	var start time.Time
	startedCh := make(chan struct{})
	since := func(t time.Time) time.Duration { return t.Sub(start) }
	var wg sync.WaitGroup
	live := newLiveState(p, h, rec, &wg)
	// cancel first: goroutines wait on ctx; live.end: no leave (from the
	// control socket) adds a goroutine to wg once Wait has begun.
	defer func() { cancel(); live.end(); wg.Wait() }()
	var clients []*client.Client
	var clientsMu sync.Mutex
	defer func() {
		clientsMu.Lock()
		closeClients(clients)
		clientsMu.Unlock()
	}()
	connect := func(name, broker string) (*client.Client, error) {
		var c *client.Client
		var err error
		// A handshake can time out on a saturated machine; a few tries
		// (bounded) before the run gives up.
		for try := 0; try < setupTries; try++ {
			cctx, ccancel := context.WithTimeout(ctx, setupTimeout)
			c, err = client.Connect(cctx, h.clientAddr(broker), client.Options{Publisher: name, Epoch: 1, DeliveryBuffer: deliveryBuffer(p), Dial: h.clientDial()})
			ccancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			logf("%s: connect to %s failed (try %d of %d): %v", name, broker, try+1, setupTries, err)
		}
		if err != nil {
			return nil, err
		}
		clientsMu.Lock()
		clients = append(clients, c)
		clientsMu.Unlock()
		return c, nil
	}

	// watch records sub's confirmation (record: the first session of its
	// subscription) and its deliveries as subscription k of subscriber si.
	watch := func(si, k int, sub *client.Subscription, record bool) {
		wg.Add(2)
		go func(k int, sub *client.Subscription) {
			defer wg.Done()
			select {
			case <-sub.Confirmed():
				if !record {
					return // a durable subscriber's later session: confirmed once
				}
				at := time.Now()
				select {
				case <-startedCh:
					rec.Confirmed(si, k, since(at))
				case <-ctx.Done():
				}
			case <-ctx.Done():
			}
		}(k, sub)
		go func(k int, sub *client.Subscription) {
			defer wg.Done()
			select {
			case <-startedCh:
			case <-ctx.Done():
				return
			}
			// Take what else is waiting (up to a batch) before
			// reporting: one recorder lock per batch.
			batch := make([]Delivery, 0, 64)
			for {
				// The run's end (ctx) stops the drainer even if
				// the client's Close is slow to close C; what C
				// already holds is still recorded.
				var d client.Delivery
				var ok bool
				select {
				case d, ok = <-sub.C:
				case <-ctx.Done():
					select {
					case d, ok = <-sub.C:
					default:
					}
				}
				if !ok {
					return
				}
				for {
					if d.Gap != nil {
						rec.Gap(GapRecord{Subscriber: si, Sub: k, Source: d.Gap.Source, From: d.Gap.From, To: d.Gap.To, At: since(d.ReceivedAt)})
					} else {
						batch = append(batch, Delivery{Subscriber: si, Sub: k, Pub: d.Pub, PublishedAt: since(d.PublishedAt), At: since(d.ReceivedAt)})
					}
					if len(batch) == cap(batch) {
						break
					}
					var ok bool
					select {
					case d, ok = <-sub.C:
					default:
					}
					if !ok {
						break
					}
				}
				rec.DeliveredBatch(batch)
				batch = batch[:0]
			}
		}(k, sub)
	}
	// Durable subscribers' sessions (durable.go): a disconnect closes the
	// client (its token, after every delivery already recorded, stays); a
	// reconnect opens a new client at the broker with that token and
	// records its deliveries under the same subscription.
	type durSession struct {
		c   *client.Client
		sub *client.Subscription
	}
	durables := map[string]*durSession{}
	var durMu sync.Mutex
	live.session = func(ctx context.Context, a Action) error {
		durMu.Lock()
		defer durMu.Unlock()
		d := durables[a.Subscriber]
		if d == nil {
			return fmt.Errorf("%s is not a durable subscriber", a.Subscriber)
		}
		if a.Kind == ActDisconnect {
			return d.c.Close()
		}
		d.c.Close() // its edge crashed or left: the session is gone already
		si := -1
		for i, sb := range p.Subscribers {
			if sb.Name == a.Subscriber {
				si = i
			}
		}
		c, err := connect(a.Subscriber, a.Broker)
		if err != nil {
			return err
		}
		sctx, scancel := context.WithTimeout(ctx, setupTimeout)
		sub, err := c.SubscribeDurable(sctx, a.Subscriber, p.Subscribers[si].Parsed[0], d.sub.Token())
		scancel()
		if err != nil {
			return err
		}
		durables[a.Subscriber] = &durSession{c: c, sub: sub}
		watch(si, 0, sub, false)
		return nil
	}

	// Subscribers: one client session each, one goroutine per subscription
	// draining its deliveries. Sessions are opened setupParallel at a time
	// (a QUIC handshake each), so hundreds of subscribers start in seconds.
	sem := make(chan struct{}, setupParallel)
	// subWin holds a slot per subscription not confirmed yet: at most
	// subscribeWindow are being flooded through the overlay at once (see
	// subscribeWindow).
	subWin := make(chan struct{}, subscribeWindow)
	var setupErr error
	var setupMu sync.Mutex
	var setup sync.WaitGroup
	for si, sb := range p.Subscribers {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			setup.Wait()
			return ctx.Err()
		}
		rec.SetPhase(fmt.Sprintf("connecting subscribers %d/%d", si+1, len(p.Subscribers)))
		setup.Add(1)
		go func(si int, sb *Subscriber) {
			defer setup.Done()
			defer func() { <-sem }()
			fail := func(err error) {
				setupMu.Lock()
				if setupErr == nil {
					setupErr = err
				}
				setupMu.Unlock()
			}
			c, err := connect(sb.Name, sb.Broker)
			if err != nil {
				fail(fmt.Errorf("testbed: subscriber %s at %s: %w", sb.Name, sb.Broker, err))
				return
			}
			for k, f := range sb.Parsed {
				select {
				case subWin <- struct{}{}:
				case <-ctx.Done():
					return
				}
				sctx, scancel := context.WithTimeout(ctx, setupTimeout)
				var sub *client.Subscription
				if sb.Durable {
					sub, err = c.SubscribeDurable(sctx, sb.Name, f, nil)
				} else {
					sub, err = c.Subscribe(sctx, f)
				}
				scancel()
				if err != nil {
					<-subWin
					fail(fmt.Errorf("testbed: subscriber %s at %s: subscribe %s: %w", sb.Name, sb.Broker, sb.Filters[k], err))
					return
				}
				if sb.Durable {
					durMu.Lock()
					durables[sb.Name] = &durSession{c: c, sub: sub}
					durMu.Unlock()
				}
				// The slot is freed at the confirmation, or after
				// setupTimeout for one that is slow to confirm (the
				// oracle judges it by its confirmation time, if any).
				wg.Add(1)
				go func() {
					defer wg.Done()
					t := time.NewTimer(setupTimeout)
					defer t.Stop()
					select {
					case <-sub.Confirmed():
					case <-t.C:
					case <-ctx.Done():
					}
					<-subWin
				}()
				watch(si, k, sub, true)
			}
		}(si, sb)
	}
	setup.Wait()
	if setupErr != nil {
		return setupErr
	}
	// Let the last subscriptions settle before the clock starts: the run
	// then begins with an overlay at rest, not in the middle of a flood.
	rec.SetPhase("waiting for the subscriptions to confirm")
	if n := waitWindowEmpty(ctx, subWin, setupTimeout); n > 0 {
		rec.Note(fmt.Sprintf("%d subscriptions still unconfirmed %v after the last was made; starting anyway", n, setupTimeout))
	}
	logf("%d subscriptions made in %v", countSubs(p), time.Since(buildStart).Round(time.Millisecond))

	// Publishers: one goroutine each publishes on schedule; a second one
	// collects the acknowledgements in order.
	pubClients := make([]*client.Client, len(p.Publishers))
	for i, pb := range p.Publishers {
		rec.SetPhase(fmt.Sprintf("connecting publishers %d/%d", i+1, len(p.Publishers)))
		c, err := connect(pb.Name, pb.Broker)
		if err != nil {
			return fmt.Errorf("testbed: publisher %s at %s: %w", pb.Name, pb.Broker, err)
		}
		pubClients[i] = c
	}
	start = time.Now()
	live.start = start
	close(startedCh)
	rec.SetPhase("")
	for i, pb := range p.Publishers {
		c := pubClients[i]
		type inflight struct {
			id   message.PubID
			done <-chan error
		}
		acks := make(chan inflight, 4096) // bounded: at the bound the publisher waits for acks
		wg.Add(2)
		go func(pb *Publisher) {
			defer wg.Done()
			defer close(acks)
			st := pb.Stream()
			payload := pb.PayloadBytes()
			left := live.stopped(pb.Broker)
			for ev, ok := st.Next(); ok; ev, ok = st.Next() {
				wait := time.Until(start.Add(ev.At))
				if wait > 0 {
					select {
					case <-time.After(wait):
					case <-ctx.Done():
						return
					case <-left:
					}
				}
				// Its broker left: a real publisher would move to
				// another broker; this one stops (what it published
				// stays required, docs/testbed.md).
				select {
				case <-left:
					return
				default:
				}
				id := message.PubID{Publisher: pb.Name, Epoch: 1, Seq: ev.Seq}
				rec.Published(id, pb.Name, time.Since(start), ev.Attrs)
				done, err := c.PublishAsync(ctx, matching.Publication{Attrs: ev.Attrs, Payload: payload})
				if err != nil {
					if ctx.Err() == nil {
						rec.Note(fmt.Sprintf("publisher %s stopped at seq %d: %v", pb.Name, ev.Seq, err))
					}
					return
				}
				select {
				case acks <- inflight{id, done}:
				case <-ctx.Done():
					return
				}
			}
		}(pb)
		go func() {
			defer wg.Done()
			for a := range acks {
				select {
				case err := <-a.done:
					if err == nil {
						rec.Acked(a.id)
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}

	// Faults, from the plan and from the control socket.
	ctl, ctlErr := startControl(ctx, o.Out, p, live)
	if ctlErr != nil {
		rec.Note("control socket: " + ctlErr.Error())
	} else {
		defer ctl.Close()
		logf("control socket: %s (scripts/crash.sh etc.)", ctl.Addr())
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, f := range p.Faults {
			wait := time.Until(start.Add(f.At))
			if wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
			}
			errs := live.apply(ctx, f.Actions, i)
			var err error
			if len(errs) > 0 {
				err = errors.New(strings.Join(errs, "; "))
			}
			rec.FaultApplied(i, time.Since(start), err)
			logf("t=%v applied %s%s", time.Since(start).Round(time.Millisecond), f, errSuffix(err))
		}
	}()

	// Sampling, in its own goroutine so that slow brokers (a loaded
	// machine, a frozen admin endpoint) never hold up the clock or the end;
	// brokers are sampled sampleParallel at a time.
	end := start.Add(p.Spec.End())
	period := p.Spec.Metrics.Sample.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		round := func(keep bool) {
			at := time.Since(start)
			sem := make(chan struct{}, sampleParallel)
			var sw sync.WaitGroup
			for _, n := range p.Topo.Names {
				if ctx.Err() != nil {
					break
				}
				sem <- struct{}{}
				sw.Add(1)
				go func(n string) {
					defer sw.Done()
					defer func() { <-sem }()
					// The reading's time is taken before it is read: a
					// broker restarted before it is seen joined only by
					// readings taken after the restart.
					rat := time.Since(start)
					s := h.sample(n)
					// The liveness readings of the baseline round are
					// kept: the first window's counts are from there.
					rec.Reading(BrokerReading{At: rat, Broker: n, Control: s.ctl, Joined: s.joined, Incarnation: s.inc})
					if keep {
						s.At, s.Broker = at, n
						rec.Sample(s)
					}
				}(n)
			}
			sw.Wait()
		}
		// A first round, discarded, sets the counters' baseline: the first
		// period then shows its own traffic, not everything since the
		// brokers started (the overlay build and the subscription flood).
		round(false)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
			round(true)
		}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// The drain is extended while deliveries are still arriving (a loaded
	// machine delays them past the planned end), by at most
	// maxDrainExtension: a delivery that is merely late is not counted lost.
	lastCount, lastChange := int64(-1), time.Now()
	// The drain ends after quiet without a delivery: long enough for a
	// retransmission after a failure detection (a few failure timeouts).
	quiet := max(2*time.Second, 3*p.Spec.Overlay.FailureTimeout.Duration)
	rejoinNoted := false
	for {
		now := time.Now()
		rec.SetElapsed(now.Sub(start))
		if c := rec.Progress().Deliveries; c != lastCount {
			lastCount, lastChange = c, now
		}
		if !now.Before(end) && (now.Sub(lastChange) >= quiet || now.Sub(end) >= maxDrainExtension) {
			// The rejoin rule judges a restarted broker once its bound
			// has passed: while one has not rejoined and its bound has
			// not passed, the brokers are still observed (bounded: the
			// bound is a time of the run, and a sampler that stopped
			// answering is waited for at most rejoinSlack more).
			if d, wait := rec.rejoinWait(p); wait && now.Sub(start) < d+2*period+rejoinSlack {
				if !rejoinNoted {
					rejoinNoted = true
					rec.Note(fmt.Sprintf("run observed until %v: a restarted broker had not rejoined yet", d.Round(time.Millisecond)))
				}
			} else {
				if ext := now.Sub(end); ext >= time.Second {
					rec.Note(fmt.Sprintf("drain extended by %v: deliveries were still arriving", ext.Round(100*time.Millisecond)))
				}
				break
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			cancel()
			return ctx.Err()
		}
	}
	if n, ok := h.controlMessages(); ok {
		rec.ControlMessages(n)
	}
	cancel()
	clientsMu.Lock()
	closeClients(clients)
	clients = nil
	clientsMu.Unlock()
	return nil
}

// closeWait bounds how long the end of a run waits for its clients to
// close.
const closeWait = 5 * time.Second

// closeClients closes every client at once and waits at most closeWait. A
// client's Close waits for its queued frames to be written, which an
// overloaded broker can hold up; closed one after another, srds09's 304
// clients made a Ctrl-C take minutes. A Close still running after closeWait
// finishes in the background (the brokers are killed next, which ends it).
func closeClients(cs []*client.Client) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeWait):
	}
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (error: " + err.Error() + ")"
}
