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

	"github.com/deltapub/deltapub/internal/quic"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// inprocBackend runs every broker inside the testbed process: the same
// runtime and core as `deltapub broker`, each on its own QUIC endpoint on
// 127.0.0.1, with the clients over real QUIC as in process mode.
//
// The testbed owns each broker's endpoint, which is what makes a crash
// possible without a process to kill: the endpoint is closed at once (no
// leave, no goodbye from the core; QUIC tells the peers the connection is
// closed, so they may learn of the failure sooner than after a SIGKILL),
// then the runtime is stopped and its state dropped. A freeze blocks the
// runtime's goroutine (a call into it that waits for the resume): it
// processes nothing and its input queue fills, as under SIGSTOP. CPU and
// memory cannot be attributed to one broker in a shared process: they are
// reported as unknown.
type inprocBackend struct{ o Options }

func (b inprocBackend) Run(ctx context.Context, p *Plan, rec *Recorder) error {
	h, err := newInprocHost(p)
	if err != nil {
		return err
	}
	rec.Note("inproc: brokers share this process; per-broker CPU and memory are not measured")
	return runRealtime(ctx, p, rec, h, b.o)
}

type inprocBroker struct {
	rt      *overlay.Runtime
	reg     *prometheus.Registry
	ep      *quic.Endpoint
	cancel  context.CancelFunc
	done    chan struct{}
	unfreez chan struct{} // non-nil while frozen; closed by resume
	in, out int64
	ctrl    int64
	inc     int // incarnation: starts of this broker before this one
}

type inprocHost struct {
	p        *Plan
	mu       sync.Mutex
	brokers  map[string]*inprocBroker
	starts   map[string]int // starts per broker so far
	port     map[string]int
	ctrlDone int64
	stopOnce sync.Once
}

func newInprocHost(p *Plan) (*inprocHost, error) {
	h := &inprocHost{p: p, brokers: map[string]*inprocBroker{}, starts: map[string]int{}, port: map[string]int{}}
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

func (h *inprocHost) addr(n string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("127.0.0.1:%d", h.port[n])
}
func (h *inprocHost) clientAddr(n string) string { return h.addr(n) }

type endpointTransport struct{ ep *quic.Endpoint }

func (t endpointTransport) Dial(ctx context.Context, peer message.BrokerID, addr string) (overlay.PeerLink, error) {
	l, err := t.ep.Dial(ctx, peer, addr)
	if err != nil {
		return nil, err
	}
	return l, nil
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
		// A restarted broker listens on a fresh port: internal/quic's
		// Endpoint.Close leaves its UDP socket bound (quic-go does not
		// close a socket it was given), so the old port stays taken. The
		// broker announces its address when it rejoins.
		ports, err := pickPorts(1)
		if err != nil {
			h.mu.Unlock()
			return err
		}
		h.port[name] = ports[0]
	}
	h.mu.Unlock()
	cfg, err := overlay.Preset("testbed")
	if err != nil {
		return err
	}
	o := h.p.Spec.Overlay
	cfg.ID, cfg.Delta = name, o.Delta
	cfg.Tick, cfg.Heartbeat, cfg.FailureTimeout = o.Tick.Duration, o.Heartbeat.Duration, o.FailureTimeout.Duration
	cfg.DACKPeriod, cfg.GoneAfter, cfg.Limits.MaxQueue = o.DACKPeriod.Duration, o.GoneAfter.Duration, o.MaxQueue
	cfg.Join = nil
	for _, j := range joinpoints {
		cfg.Join = append(cfg.Join, j+"@"+h.addr(j))
	}
	// A port picked free can be taken by another process before we bind
	// it (tests of other packages run at the same time): bind failures of
	// that kind move the broker to a freshly picked port, a few times.
	var (
		rt  *overlay.Runtime
		reg *prometheus.Registry
		ep  *quic.Endpoint
	)
	log := zerolog.Nop()
	epoch := cfg.EpochAt(time.Now())
	for attempt := 0; ; attempt++ {
		cfg.Listen = h.addr(name) // addr takes h.mu
		if err := cfg.Validate(); err != nil {
			return err
		}
		reg = prometheus.NewRegistry()
		rt, err = overlay.NewRuntime(cfg, epoch, log, reg)
		if err != nil {
			return err
		}
		ep, err = quic.Listen(quic.Config{
			ID: message.BrokerID(name), Epoch: epoch, Addr: cfg.AdvertisedAddr(), Listen: cfg.Listen,
			MaxFrame: cfg.Limits.MaxFrame, SendQueue: cfg.Limits.SendQueue, Log: log,
		}, rt.QUICHandler()) // the runtime's own handler, honouring cuts
		if err == nil {
			break
		}
		if attempt >= 4 || !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
		ports, perr := pickPorts(1)
		if perr != nil {
			return err
		}
		h.mu.Lock()
		h.port[name] = ports[0]
		h.mu.Unlock()
	}
	rctx, cancel := context.WithCancel(context.Background())
	b := &inprocBroker{rt: rt, reg: reg, ep: ep, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		_ = rt.Run(rctx, rt.CutTransport(endpointTransport{ep}))
		ep.Close()
	}()
	h.mu.Lock()
	b.inc = h.starts[name]
	h.starts[name]++
	h.brokers[name] = b
	h.mu.Unlock()
	return nil
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
	h.unfreeze(b)
	b.ep.Close() // first: nothing more leaves this broker, not even a leave
	b.cancel()
	select {
	case <-b.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not stop within 10s", name)
	}
}

// leave ends the broker's Run context without closing its endpoint first
// (a crash closes it first): overlay.Runtime.Run then leaves the overlay
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

func (h *inprocHost) unfreeze(b *inprocBroker) {
	h.mu.Lock()
	if b.unfreez != nil {
		close(b.unfreez)
		b.unfreez = nil
	}
	h.mu.Unlock()
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
	h.mu.Unlock()
	entered := make(chan struct{})
	go func() {
		_ = b.rt.Do(context.Background(), func(*overlay.Node) {
			close(entered)
			<-ch // the runtime goroutine waits here: frozen
		})
	}()
	select {
	case <-entered:
		return nil
	case <-b.done:
		return fmt.Errorf("%s stopped", name)
	case <-time.After(5 * time.Second):
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
// endpoint's /ctl/cut in process mode). A restarted broker starts with no
// cuts.
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

func (h *inprocHost) pair(a, b string) (*overlay.Runtime, *overlay.Runtime, error) {
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
			b.ep.Close()
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
