package testbed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/storage"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay/runtime"
)

// inprocBackend runs every broker inside the testbed process: the same
// runtime and core as `deltapub broker`, on the transport [inproc]
// transport names.
//
//   - "memory" (the default): runtime.MemNetwork, the runtime's in-memory
//     twin of QUIC, for the brokers' links and the clients' sessions alike.
//     A crash is silent (MemEndpoint.Crash: its peers keep their links to
//     it, what they send vanishes, and they find out from their heartbeats,
//     as after a SIGKILL); a restart listens again on the same address
//     while its peers may still hold the old incarnation's link; a freeze
//     stops the endpoint (nothing in or out, dials to it wait, its
//     senders' queues fill up) as well as the runtime's goroutine.
//   - "quic": a QUIC endpoint per broker on 127.0.0.1, with the clients
//     over real QUIC as in process mode. A crash closes the endpoint at once
//     (QUIC tells the peers the connection is closed, so they may learn of
//     the failure sooner than after a SIGKILL); a restart listens on a fresh
//     port (internal/quic's Endpoint.Close leaves its UDP socket bound:
//     quic-go does not close a socket it was given; the broker announces its
//     address when it rejoins); a freeze blocks the runtime's goroutine only
//     (the endpoint keeps reading until the runtime's input queue fills).
//
// On both, the crashed runtime is then killed (Runtime.Kill: Run returns at
// once, with no leave) and its state dropped; a freeze blocks the
// runtime's goroutine (a call into it that waits for the resume: it
// processes nothing, as under SIGSTOP); a cut is Runtime.Cut at both ends;
// a leave ends the runtime's context with the transport open. CPU and
// memory cannot be attributed to one broker in a shared process: they are
// reported as unknown.
type inprocBackend struct{ o Options }

func (b inprocBackend) Run(ctx context.Context, p *Plan, rec *Recorder) error {
	h, err := newInprocHost(p)
	if err != nil {
		return err
	}
	rec.Note("inproc: brokers share this process; per-broker CPU and memory are not measured")
	rec.Note("inproc: transport " + h.transport())
	return runRealtime(ctx, p, rec, h, b.o)
}

type inprocBroker struct {
	rt      *runtime.Runtime
	reg     *prometheus.Registry
	tr      inprocTransport
	cancel  context.CancelFunc
	done    chan struct{}
	unfreez chan struct{} // non-nil while frozen; closed by resume
	in, out int64
	ctrl    int64
	inc     int // incarnation: starts of this broker before this one
}

// inprocTransport is a broker's transport as the inproc host applies
// faults to it.
type inprocTransport interface {
	runtime.Transport
	crash()  // the broker dies: nothing more leaves it
	freeze() // nothing more to or from it, until resume (where the transport can)
	resume()
	close() // the broker is gone (after Run, or at the end of the run)
}

// memInproc is a broker on the in-memory network.
type memInproc struct{ *runtime.MemEndpoint }

func (t memInproc) crash()  { t.Crash() }
func (t memInproc) freeze() { t.Freeze() }
func (t memInproc) resume() { t.Resume() }
func (t memInproc) close()  { t.Close() }

// quicInproc is a broker on its own QUIC endpoint. Its goroutines cannot
// be frozen: only the runtime is.
type quicInproc struct{ *runtime.QUICTransport }

func (t quicInproc) crash() { t.Close() }
func (quicInproc) freeze()  {}
func (quicInproc) resume()  {}
func (t quicInproc) close() { t.Close() }

type inprocHost struct {
	p        *Plan
	mem      *runtime.MemNetwork // nil: QUIC
	mu       sync.Mutex
	brokers  map[string]*inprocBroker
	starts   map[string]int               // starts per broker so far
	removals map[string]*runtime.Removals // removals while alive per broker (their restarts are bounded)
	port     map[string]int               // QUIC only
	stores   map[string]*storage.Memory   // each broker's data directory, kept across its restarts
	ctrlDone int64
	stopOnce sync.Once
}

func newInprocHost(p *Plan) (*inprocHost, error) {
	h := &inprocHost{p: p, brokers: map[string]*inprocBroker{}, starts: map[string]int{}, removals: map[string]*runtime.Removals{}, port: map[string]int{}, stores: map[string]*storage.Memory{}}
	if p.Spec.Inproc.Transport != TransportQUIC {
		h.mem = runtime.NewMemNetwork()
		return h, nil
	}
	if base := p.Spec.Process.BasePort; base != 0 {
		for i, n := range p.Topo.Names {
			h.port[n] = base + 2*i
			if !portFree(h.port[n]) {
				return nil, fmt.Errorf("testbed: inproc mode: port %d for %s is busy", h.port[n], n)
			}
		}
	} else {
		ports, err := pickPorts(len(p.Topo.Names))
		if err != nil {
			return nil, err
		}
		for i, n := range p.Topo.Names {
			h.port[n] = ports[i]
		}
	}
	return h, nil
}

func (h *inprocHost) transport() string {
	if h.mem != nil {
		return TransportMemory
	}
	return TransportQUIC
}

// addr is where broker n listens: on the in-memory network a name of its
// own (the same after a restart), on QUIC a port of 127.0.0.1.
func (h *inprocHost) addr(n string) string {
	if h.mem != nil {
		return n + ".mem:7000"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("127.0.0.1:%d", h.port[n])
}
func (h *inprocHost) clientAddr(n string) string { return h.addr(n) }

// clientDial is how clients reach the brokers: through the in-memory
// network, or (nil) over QUIC.
func (h *inprocHost) clientDial() client.DialFunc {
	if h.mem == nil {
		return nil
	}
	return func(ctx context.Context, addr string) (client.Conn, error) {
		c, err := h.mem.DialClient(ctx, addr)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return c, nil
	}
}

func (h *inprocHost) start(ctx context.Context, name string, joinpoints []string) error {
	h.mu.Lock()
	if old := h.brokers[name]; old != nil {
		select {
		case <-old.done:
			h.ctrlDone += old.ctrl
		default:
			h.mu.Unlock()
			return fmt.Errorf("%s is still running", name)
		}
		if h.mem == nil {
			// A restarted broker listens on a fresh port: see inprocBackend.
			ports, err := pickPorts(1)
			if err != nil {
				h.mu.Unlock()
				return err
			}
			h.port[name] = ports[0]
		}
	}
	h.mu.Unlock()
	cfg, err := runtime.Preset("testbed")
	if err != nil {
		return err
	}
	o := h.p.Spec.Overlay
	cfg.ID, cfg.Delta = name, o.Delta
	cfg.Tick, cfg.Heartbeat, cfg.FailureTimeout = o.Tick.Duration, o.Heartbeat.Duration, o.FailureTimeout.Duration
	cfg.DACKPeriod, cfg.GoneAfter, cfg.Limits.MaxQueue = o.DACKPeriod.Duration, o.GoneAfter.Duration, o.MaxQueue
	cfg.Durability = o.Durability
	cfg.MaxRetain.Time = o.Retain.Duration
	cfg.DurableKeep = o.DurableKeep.Duration
	if h.p.Layout != nil {
		cfg.Overlay = h.p.brokerOverlay(h.addr)
		cfg.Durability = runtime.DurabilityNone // the baseline keeps no log
	}
	cfg.Join = nil
	for _, j := range joinpoints {
		cfg.Join = append(cfg.Join, j+"@"+h.addr(j))
	}
	h.mu.Lock()
	st := h.stores[name]
	if st == nil {
		st = &storage.Memory{} // the broker's data directory, across its restarts
		h.stores[name] = st
	}
	h.mu.Unlock()
	epoch, err := runtime.BeginIncarnation(st, cfg.EpochAt(time.Now()))
	if err != nil {
		return err
	}
	var (
		rt  *runtime.Runtime
		reg *prometheus.Registry
		tr  inprocTransport
	)
	if h.mem != nil {
		rt, reg, tr, err = h.listenMem(cfg, epoch)
	} else {
		rt, reg, tr, err = h.listenQUIC(cfg, epoch)
	}
	if err != nil {
		return err
	}
	rt.KeepState(st)
	if err := rt.OpenLog(st); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.Background())
	b := &inprocBroker{rt: rt, reg: reg, tr: tr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		err := rt.Run(rctx, tr)
		tr.close()
		if errors.Is(err, runtime.ErrRemoved) && rctx.Err() == nil {
			// As runtime.RunBroker: removed from the overlay while alive,
			// it starts again as a new incarnation after the failure
			// timeout (once this one is done), within the same bound.
			h.mu.Lock()
			rm := h.removals[name]
			if rm == nil {
				rm = &runtime.Removals{}
				h.removals[name] = rm
			}
			stop := rm.Restart(time.Now(), err)
			h.mu.Unlock()
			if stop != nil {
				return // it stays down, as a broker process that exits with the error; the rejoin rule reports it
			}
			go func() {
				select {
				case <-time.After(cfg.FailureTimeout):
				case <-rctx.Done():
					return
				}
				_ = h.start(context.Background(), name, joinpoints) // failing, it stays down: the rejoin rule reports it
			}()
		}
	}()
	h.mu.Lock()
	b.inc = h.starts[name]
	h.starts[name]++
	h.brokers[name] = b
	h.mu.Unlock()
	return nil
}

// newRuntime builds the runtime of cfg (validated) with a registry of its
// own.
func newRuntime(cfg runtime.BrokerConfig, epoch uint64) (*runtime.Runtime, *prometheus.Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	rt, err := runtime.NewRuntime(cfg, epoch, zerolog.Nop(), reg)
	return rt, reg, err
}

func (h *inprocHost) listenMem(cfg runtime.BrokerConfig, epoch uint64) (*runtime.Runtime, *prometheus.Registry, inprocTransport, error) {
	cfg.Listen = h.addr(cfg.ID)
	rt, reg, err := newRuntime(cfg, epoch)
	if err != nil {
		return nil, nil, nil, err
	}
	ep, err := runtime.ListenMem(h.mem, &cfg, rt)
	if err != nil {
		return nil, nil, nil, err
	}
	return rt, reg, memInproc{ep}, nil
}

// listenQUIC starts the broker on its port. A port picked free can be taken
// by another process before we bind it (tests of other packages run at the
// same time): bind failures of that kind move the broker to a freshly
// picked port, a few times.
func (h *inprocHost) listenQUIC(cfg runtime.BrokerConfig, epoch uint64) (*runtime.Runtime, *prometheus.Registry, inprocTransport, error) {
	for attempt := 0; ; attempt++ {
		cfg.Listen = h.addr(cfg.ID) // addr takes h.mu
		rt, reg, err := newRuntime(cfg, epoch)
		if err != nil {
			return nil, nil, nil, err
		}
		tr, err := runtime.ListenQUIC(&cfg, epoch, nil, "", rt, zerolog.Nop())
		if err == nil {
			return rt, reg, quicInproc{tr}, nil
		}
		if attempt >= 4 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, nil, err
		}
		ports, perr := pickPorts(1)
		if perr != nil {
			return nil, nil, nil, err
		}
		h.mu.Lock()
		h.port[cfg.ID] = ports[0]
		h.mu.Unlock()
	}
}

func (h *inprocHost) get(name string) (*inprocBroker, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.brokers[name]
	if b == nil {
		return nil, fmt.Errorf("%s was never started", name)
	}
	select {
	case <-b.done:
		return nil, fmt.Errorf("%s is not running", name)
	default:
	}
	return b, nil
}

func (h *inprocHost) waitJoined(ctx context.Context, name string, timeout time.Duration) error {
	b, err := h.get(name)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if b.rt.Joined() {
			return nil
		}
		select {
		case <-b.done:
			return errors.New("the broker stopped")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("not joined after %v", timeout)
}

func (h *inprocHost) crash(name string) error {
	b, err := h.get(name)
	if err != nil {
		return err
	}
	// A frozen runtime goes on to be killed (its memory endpoint stays
	// frozen until the crash: nothing in or out).
	h.release(b)
	b.tr.crash() // first: nothing more leaves this broker
	b.rt.Kill()  // and no leave: Run returns at once
	b.cancel()
	select {
	case <-b.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not stop within 10s", name)
	}
}

// leave ends the broker's Run context with its transport open (a crash
// stops the transport first): runtime.Runtime.Run then leaves the overlay
// gracefully, as `deltapub broker` does on SIGTERM, and returns once the
// neighbourhood confirmed the leave or after its own bound. The leave is
// clean when Run returned with Runtime.HasLeft; a broker still running
// after leaveWait is an error.
func (h *inprocHost) leave(name string) (<-chan leaveResult, error) {
	b, err := h.get(name)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	frozen := b.unfreez != nil
	h.mu.Unlock()
	if frozen {
		return nil, fmt.Errorf("%s is frozen (resume it first)", name)
	}
	t0 := time.Now()
	b.cancel()
	bound := leaveWait(h.p.Spec.Overlay)
	return awaitLeave(t0, bound, b.done, func() error {
		return fmt.Errorf("%s's runtime still running %v after it was asked to leave", name, bound)
	}, func() error {
		if !b.rt.HasLeft() {
			return fmt.Errorf("%s stopped, but its leave was not confirmed in time (the overlay treats it as crashed)", name)
		}
		return nil
	}), nil
}

// unfreeze resumes a frozen broker: its runtime and its transport.
func (h *inprocHost) unfreeze(b *inprocBroker) {
	h.mu.Lock()
	if b.unfreez != nil {
		close(b.unfreez)
		b.unfreez = nil
		b.tr.resume()
	}
	h.mu.Unlock()
}

// release lets a frozen broker's runtime go on, its transport still
// frozen.
func (h *inprocHost) release(b *inprocBroker) {
	h.mu.Lock()
	if b.unfreez != nil {
		close(b.unfreez)
		b.unfreez = nil
	}
	h.mu.Unlock()
}

// wipe drops the broker's store: its next start has no place and no log.
func (h *inprocHost) wipe(name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.brokers[name]; b != nil {
		select {
		case <-b.done:
		default:
			return fmt.Errorf("%s is still running", name)
		}
	}
	delete(h.stores, name)
	return nil
}

func (h *inprocHost) freeze(name string) error {
	b, err := h.get(name)
	if err != nil {
		return err
	}
	h.mu.Lock()
	if b.unfreez != nil {
		h.mu.Unlock()
		return fmt.Errorf("%s is already frozen", name)
	}
	ch := make(chan struct{})
	b.unfreez = ch
	// The transport first: with no more inputs, the runtime soon gets to
	// the call that blocks it.
	b.tr.freeze()
	h.mu.Unlock()
	entered := make(chan struct{})
	go func() {
		_ = b.rt.Do(context.Background(), func(runtime.Core) {
			close(entered)
			<-ch // the runtime goroutine waits here: frozen
		})
	}()
	select {
	case <-entered:
		return nil
	case <-b.done:
		h.unfreeze(b)
		return fmt.Errorf("%s stopped", name)
	case <-time.After(5 * time.Second):
		h.unfreeze(b)
		return fmt.Errorf("%s did not freeze within 5s (runtime busy)", name)
	}
}

func (h *inprocHost) resume(name string) error {
	b, err := h.get(name)
	if err != nil {
		return err
	}
	h.mu.Lock()
	frozen := b.unfreez != nil
	h.mu.Unlock()
	if !frozen {
		return fmt.Errorf("%s is not frozen", name)
	}
	h.unfreeze(b)
	return nil
}

// cut blocks the link a–b at both ends (Runtime.Cut, as the admin
// endpoint's /ctl/cut in process mode), on either transport. A restarted
// broker starts with no cuts.
func (h *inprocHost) cut(a, b string) error {
	ra, rb, err := h.pair(a, b)
	if err != nil {
		return err
	}
	return errors.Join(ra.Cut(message.BrokerID(b)), rb.Cut(message.BrokerID(a)))
}

// heal lifts the cut at both ends.
func (h *inprocHost) heal(a, b string) error {
	ra, rb, err := h.pair(a, b)
	if err != nil {
		return err
	}
	okA, okB := ra.Heal(message.BrokerID(b)), rb.Heal(message.BrokerID(a))
	if !okA && !okB {
		return fmt.Errorf("the link %s-%s is not cut", a, b)
	}
	return nil
}

func (h *inprocHost) pair(a, b string) (*runtime.Runtime, *runtime.Runtime, error) {
	ba, err := h.get(a)
	if err != nil {
		return nil, nil, err
	}
	bb, err := h.get(b)
	if err != nil {
		return nil, nil, err
	}
	return ba.rt, bb.rt, nil
}

func (h *inprocHost) stopAll() {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		var bs []*inprocBroker
		for _, b := range h.brokers {
			bs = append(bs, b)
		}
		h.mu.Unlock()
		for _, b := range bs {
			h.unfreeze(b)
			b.tr.close()
			b.cancel()
		}
		for _, b := range bs {
			select {
			case <-b.done:
			case <-time.After(10 * time.Second):
			}
		}
	})
}

// gather sums the broker's metrics by name.
func gather(reg *prometheus.Registry) map[string]float64 {
	out := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[mf.GetName()] += m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// gatherControl is the core's control messages sent by type, from the
// runtime's metrics (its snapshot of Status().Counters.Control, read
// without a call into the runtime goroutine).
func gatherControl(reg *prometheus.Registry) map[string]int64 {
	out := map[string]int64{}
	mfs, err := reg.Gather()
	if err != nil {
		return nil
	}
	for _, mf := range mfs {
		if mf.GetName() != controlMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && m.GetCounter() != nil {
					out[l.GetValue()] += int64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

func (h *inprocHost) sample(name string) BrokerSample {
	s := BrokerSample{CPU: -1, MsgsIn: -1, MsgsOut: -1, Queue: -1}
	b, err := h.get(name)
	if err != nil {
		return BrokerSample{Up: false}
	}
	h.mu.Lock()
	frozen := b.unfreez != nil
	h.mu.Unlock()
	s.Up = !frozen
	m := gather(b.reg)
	s.ctl, s.joined, s.inc = gatherControl(b.reg), b.rt.Joined(), b.inc
	in, out := int64(m["deltapub_peer_messages_in_total"]), int64(m["deltapub_peer_messages_out_total"])
	s.MsgsIn, s.MsgsOut = in-b.in, out-b.out
	s.Queue = int64(m["deltapub_queue_length"])
	h.mu.Lock()
	b.in, b.out, b.ctrl = in, out, int64(m["deltapub_control_messages_sent_total"])
	h.mu.Unlock()
	return s
}

func (h *inprocHost) controlMessages() (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.ctrlDone
	for _, b := range h.brokers {
		n += b.ctrl
	}
	return n, true
}
