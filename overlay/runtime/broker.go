package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deltapub/deltapub/internal/admin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
)

// Broker is one broker process's worth of parts: the runtime (and its
// core), the QUIC transport, the client listeners and the admin endpoint. cmd/deltapub's broker
// command is a thin shell around it; tests and benchmarks can run several
// in one process.
type Broker struct {
	Runtime *Runtime
	cfg     BrokerConfig
	log     zerolog.Logger
	tr      *QUICTransport
	ws      *WSListener  // nil without ws_listen
	tcp     *TCPListener // nil without tcp_listen
	admin   *admin.Server
	epoch   uint64
}

// NewBroker validates cfg, reads its secret files, builds the runtime and
// starts listening (QUIC and, if configured, the admin endpoint). Call Run.
func NewBroker(cfg BrokerConfig, log zerolog.Logger) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	secret, err := ReadSecretFile("secret_file", cfg.SecretFile)
	if err != nil {
		return nil, err
	}
	token, err := ReadSecretFile("client_token_file", cfg.ClientTokenFile)
	if err != nil {
		return nil, err
	}
	if secret == nil {
		log.Warn().Msg("no secret_file: broker links are not authenticated; any broker that speaks the protocol may join")
	}
	st, epoch, err := OpenStore(&cfg, cfg.EpochAt(time.Now()))
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rt, err := NewRuntime(cfg, epoch, log, reg)
	if err != nil {
		return nil, err
	}
	rt.KeepState(st)
	if err := rt.OpenLog(st); err != nil {
		return nil, err
	}
	b := &Broker{Runtime: rt, cfg: cfg, log: log, epoch: epoch}
	b.tr, err = ListenQUIC(&cfg, epoch, secret, string(token), rt, log)
	if err != nil {
		return nil, err
	}
	if cfg.WSListen != "" {
		if b.ws, err = ListenWS(&cfg, epoch, string(token), rt, log); err != nil {
			b.tr.Close()
			return nil, err
		}
	}
	if cfg.TCPListen != "" {
		if b.tcp, err = ListenTCP(&cfg, b.tr, rt, log); err != nil {
			b.closeClientListeners()
			b.tr.Close()
			return nil, err
		}
	}
	if cfg.Admin != "" {
		b.admin, err = admin.Start(admin.Options{
			Addr:     cfg.Admin,
			Gatherer: reg,
			State:    func(ctx context.Context) (any, error) { return rt.State(ctx) },
			Health:   rt.Health,
			// Failure injection (cut.go): loopback callers only.
			Control:      adminControl{rt},
			ControlToken: string(token),
			Log:          log,
		})
		if err != nil {
			b.closeClientListeners()
			b.tr.Close()
			return nil, fmt.Errorf("runtime: admin endpoint: %w", err)
		}
	}
	log.Info().Str("id", cfg.ID).Uint64("epoch", epoch).Str("listen", cfg.Listen).Str("ws_listen", b.WSAddr()).Str("tcp_listen", b.TCPAddr()).Str("admin", b.AdminAddr()).
		Int("delta", cfg.Delta).Str("durability", cfg.EffectiveDurability()).Str("heartbeat", cfg.Heartbeat.String()).Str("failure_timeout", cfg.FailureTimeout.String()).
		Msg("broker started")
	return b, nil
}

// Epoch is this incarnation's epoch.
func (b *Broker) Epoch() uint64 { return b.epoch }

// AdminAddr is the admin endpoint's address ("" without one).
func (b *Broker) AdminAddr() string {
	if b.admin == nil {
		return ""
	}
	return b.admin.Addr()
}

// WSAddr is the WebSocket listener's address ("" without one).
func (b *Broker) WSAddr() string {
	if b.ws == nil {
		return ""
	}
	return b.ws.Addr()
}

// TCPAddr is the TCP client listener's address ("" without one).
func (b *Broker) TCPAddr() string {
	if b.tcp == nil {
		return ""
	}
	return b.tcp.Addr()
}

func (b *Broker) closeClientListeners() {
	if b.ws != nil {
		b.ws.Close()
	}
	if b.tcp != nil {
		b.tcp.Close()
	}
}

// Removal restarts (RunBroker, and the inproc testbed's brokers): paced by
// the failure timeout, at most maxRemovals within removalWindow; past that
// the broker exits with ErrRemoved (a machine that starves its broker this
// often needs an operator, not a restart loop).
const (
	maxRemovals   = 5
	removalWindow = 10 * time.Minute
)

// Removals counts one broker's removals while alive, for the bound on
// restarting after them.
type Removals struct{ at []time.Time }

// Restart records a removal (err, ErrRemoved) at now and says whether the
// broker may start again: nil, or err wrapped with the bound it passed.
func (r *Removals) Restart(now time.Time, err error) error {
	for len(r.at) > 0 && now.Sub(r.at[0]) > removalWindow {
		r.at = r.at[1:]
	}
	if r.at = append(r.at, now); len(r.at) > maxRemovals {
		return fmt.Errorf("%w (%d times within %v: giving up)", err, len(r.at), removalWindow)
	}
	return nil
}

// RunBroker builds and runs a broker for cfg until ctx ends; when the
// overlay removed it while alive (ErrRemoved) it starts it again as a new
// incarnation, from its data directory, as after a crash, after one
// failure timeout (Removals bounds how often). start is called with each
// incarnation once it listens (nil: nothing).
func RunBroker(ctx context.Context, cfg BrokerConfig, log zerolog.Logger, start func(*Broker)) error {
	var removals Removals
	for {
		b, err := NewBroker(cfg, log)
		if err != nil {
			return err
		}
		if start != nil {
			start(b)
		}
		err = b.Run(ctx)
		if !errors.Is(err, ErrRemoved) || ctx.Err() != nil {
			return err
		}
		if err := removals.Restart(time.Now(), err); err != nil {
			return err
		}
		log.Warn().Uint64("epoch", b.Epoch()).Str("after", cfg.FailureTimeout.String()).Msg("removed from the overlay while alive: restarting as a new incarnation")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.FailureTimeout):
		}
	}
}

// Run runs the broker until ctx ends, leaves the overlay gracefully, and
// closes the transport and the admin endpoint.
func (b *Broker) Run(ctx context.Context) error {
	err := b.Runtime.Run(ctx, b.tr)
	b.closeClientListeners()
	if b.admin != nil {
		b.admin.Close()
	}
	if cerr := b.tr.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
