package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/deltapub/deltapub/internal/loglimit"
	"github.com/deltapub/deltapub/overlay/runtime"
	"github.com/rs/zerolog"
)

const brokerAbout = `Runs one broker. Configuration: the --preset's defaults, then the TOML
--config file, then the flags given. Without --join the broker starts a new
overlay. SIGTERM or SIGINT leaves the overlay gracefully and exits 0.
`

func brokerCmd(fs *flag.FlagSet) func([]string) int {
	var (
		configFile  = fs.String("config", "", "TOML configuration `file` (see docs/operations.md)")
		preset      = fs.String("preset", "default", "defaults: default (250ms heartbeat, 1s failure timeout) or testbed (50ms, 250ms)")
		printConfig = fs.Bool("print-config", false, "print the effective configuration as TOML and exit")
		id          = fs.String("id", "", "broker `id` in the overlay (e.g. B1)")
		listen      = fs.String("listen", "", "UDP `address` to listen on (e.g. 127.0.0.1:7001)")
		advertise   = fs.String("advertise", "", "`address` other brokers dial (default: --listen)")
		join        = fs.String("join", "", "comma-separated joinpoint `addresses`, tried in order (none: start a new overlay)")
		delta       = fs.Int("delta", 0, "δ: adjacent broker failures tolerated (same on every broker)")
		epoch       = fs.Uint64("epoch", 0, "incarnation `number` (0: milliseconds since 1970)")
		dataDir     = fs.String("data-dir", "", "`directory` where the broker keeps its epoch and its place in the tree across crashes (empty: nothing kept)")
		durability  = fs.String("durability", "", "publication log: fsync, write, memory or none (default: fsync with --data-dir, else memory)")
		maxRetain   = fs.Duration("max-retain", 0, "keep logged publications this `long` after they are safe, for durable subscribers that are away (max_retain.time)")
		retainBytes = fs.Int64("max-retain-bytes", 0, "keep at most this many `bytes` of such publications (max_retain.bytes)")
		durableKeep = fs.Duration("durable-keep", 0, "keep a durable subscription whose client went away this `long` at its edge, for a resume there without a flood (durable_keep; 0: 1m, negative: off)")
		tick        = fs.Duration("tick", 0, "runtime tick `duration`")
		heartbeat   = fs.Duration("heartbeat", 0, "heartbeat `interval`")
		failure     = fs.Duration("failure-timeout", 0, "silence after which a peer is suspected")
		dack        = fs.Duration("dack-period", 0, "DACK `period`")
		goneAfter   = fs.Duration("gone-after", 0, "suspicion after which a peer is declared gone")
		wsListen    = fs.String("ws-listen", "", "TCP `address` of the WebSocket listener for web clients (path /v1/ws; docs/websocket.md)")
		tcpListen   = fs.String("tcp-listen", "", "TCP `address` of the listener for client sessions over TCP (TLS with tls.cert_file/key_file; clients dial tcp:// or tls://)")
		admin       = fs.String("admin", "", "admin HTTP `address` (/healthz /metrics /state /debug/pprof/)")
		secretFile  = fs.String("secret-file", "", "overlay secret `file`: only brokers with the same secret may link")
		tokenFile   = fs.String("client-token-file", "", "`file` with the token clients must present")
		maxQueue    = fs.Int("max-queue", 0, "bound on the message queue (publications)")
		logLevel    = fs.String("log-level", "", "trace, debug, info, warn or error")
		logFormat   = fs.String("log-format", "", "json or console")
		ovMode      = fs.String("overlay-mode", "", "protocol: delta (default) or replicas, the replica baseline of docs/baseline.md (overlay.mode)")
		ovReplicas  = fs.Int("replicas", 0, "replicas per virtual node in --overlay-mode replicas (overlay.replicas)")
		ovTree      = fs.String("replica-tree", "", "comma-separated virtual `nodes`, parents first, as NAME or NAME:PARENT (overlay.tree)")
		ovPeers     = fs.String("replica-peers", "", "comma-separated `addresses` of every replica as ID@host:port (overlay.peers)")
	)
	list := func(s string) []string {
		var out []string
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
		return out
	}
	return func([]string) int {
		cfg, err := runtime.Preset(*preset)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub broker:", err)
			return 2
		}
		if *configFile != "" {
			if cfg, err = runtime.LoadBrokerConfig(*configFile, cfg); err != nil {
				fmt.Fprintln(os.Stderr, "deltapub broker:", err)
				return 2
			}
		}
		// Flags given on the command line override the file.
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "id":
				cfg.ID = *id
			case "listen":
				cfg.Listen = *listen
			case "advertise":
				cfg.Advertise = *advertise
			case "join":
				cfg.Join = list(*join)
			case "delta":
				cfg.Delta = *delta
			case "epoch":
				cfg.Epoch = *epoch
			case "data-dir":
				cfg.DataDir = *dataDir
			case "durability":
				cfg.Durability = *durability
			case "max-retain":
				cfg.MaxRetain.Time = *maxRetain
			case "max-retain-bytes":
				cfg.MaxRetain.Bytes = *retainBytes
			case "durable-keep":
				cfg.DurableKeep = *durableKeep
			case "tick":
				cfg.Tick = *tick
			case "heartbeat":
				cfg.Heartbeat = *heartbeat
			case "failure-timeout":
				cfg.FailureTimeout = *failure
			case "dack-period":
				cfg.DACKPeriod = *dack
			case "gone-after":
				cfg.GoneAfter = *goneAfter
			case "ws-listen":
				cfg.WSListen = *wsListen
			case "tcp-listen":
				cfg.TCPListen = *tcpListen
			case "admin":
				cfg.Admin = *admin
			case "secret-file":
				cfg.SecretFile = *secretFile
			case "client-token-file":
				cfg.ClientTokenFile = *tokenFile
			case "max-queue":
				cfg.Limits.MaxQueue = *maxQueue
			case "log-level":
				cfg.Log.Level = *logLevel
			case "log-format":
				cfg.Log.Format = *logFormat
			case "overlay-mode":
				cfg.Overlay.Mode = *ovMode
			case "replicas":
				cfg.Overlay.Replicas = *ovReplicas
			case "replica-tree":
				cfg.Overlay.Tree = list(*ovTree)
			case "replica-peers":
				cfg.Overlay.Peers = list(*ovPeers)
			}
		})
		if *printConfig {
			fmt.Print(cfg.TOML())
			if err := cfg.Validate(); err != nil {
				fmt.Fprintln(os.Stderr, "deltapub broker:", err)
				return 2
			}
			return 0
		}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub broker:", err)
			return 2
		}
		// A repeated line is counted, not repeated (internal/loglimit): the
		// summaries go to out, everything else through the limiter.
		out := logOutput(os.Stderr, cfg.Log.Format)
		summaries := loggerTo(out, cfg.Log.Level).With().Str("broker", cfg.ID).Logger()
		limiter := loglimit.New(out, summaries, logBurst, logWindow, logMaxKeys)
		log := loggerTo(limiter, cfg.Log.Level).With().Str("broker", cfg.ID).Logger()
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		limCtx, limStop := context.WithCancel(context.Background())
		limDone := make(chan struct{})
		go func() { defer close(limDone); limiter.Run(limCtx) }()
		// On the way out, the pending summaries are written.
		defer func() { limStop(); <-limDone }()
		started := false
		if err := runtime.RunBroker(ctx, cfg, log, func(*runtime.Broker) { started = true }); err != nil {
			if !started {
				fmt.Fprintln(os.Stderr, "deltapub broker:", err)
				return 1
			}
			log.Error().Err(err).Msg("broker stopped with an error")
			return 1
		}
		log.Info().Msg("broker stopped")
		return 0
	}
}

// newLogger makes a zerolog logger writing JSON lines or console text to
// w. level and format were validated by the configuration.
func newLogger(w io.Writer, level, format string) zerolog.Logger {
	return loggerTo(logOutput(w, format), level)
}

// logOutput is where log lines go in format ("console": readable lines,
// else JSON as written).
func logOutput(w io.Writer, format string) io.Writer {
	if format != "console" {
		return w
	}
	// Colours only on a terminal: logs redirected to files stay plain.
	color := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			color = true
		}
	}
	return zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !color}
}

// loggerTo is a JSON logger at level writing to w.
func loggerTo(w io.Writer, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// The broker's log limits: 5 identical lines per 2 s, then a count; at most
// 1024 distinct lines tracked.
const (
	logBurst   = 5
	logWindow  = 2 * time.Second
	logMaxKeys = 1024
)
