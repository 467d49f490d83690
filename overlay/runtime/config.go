package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// BrokerConfig is the configuration of one broker process: what the
// operator writes in the TOML file and overrides with flags. It is turned
// into the pure core's Config (durations become ticks) by NodeConfig.
//
// The TOML keys are the `toml` tags below; an unknown key is an error (a
// typo must not silently fall back to a default).
type BrokerConfig struct {
	// ID names this broker in the overlay ("B1"). Unique; required.
	ID string `toml:"id"`
	// Listen is the UDP address the QUIC endpoint listens on for brokers and
	// clients ("127.0.0.1:7001"). Required.
	Listen string `toml:"listen"`
	// Advertise is the address other brokers dial to reach this one (carried
	// in the topology maps). Empty: the listen address. Set it when Listen is
	// a wildcard address such as "0.0.0.0:7001".
	Advertise string `toml:"advertise"`
	// Join lists joinpoints: brokers already in the overlay, tried in
	// order, each as "ID@host:port" or as a bare "host:port" (the runtime
	// then dials it once to learn which broker answers there). Give a
	// restarting broker several (its former neighbours): one that is
	// itself recovering refuses it for a while. Empty: this broker
	// bootstraps a new overlay as its root.
	Join []string `toml:"join"`
	// Epoch is this incarnation's number; a restarted broker must use a
	// larger one than before. 0: derived from the wall clock at start
	// (milliseconds since 1970), which grows across restarts.
	Epoch uint64 `toml:"epoch"`
	// DataDir is where this broker keeps what it must find again after a
	// crash (internal/storage): the last epoch it started with (the next
	// one is larger whatever the clock says) and its place in the tree,
	// the brokers a restart rejoins through before the configured Join
	// (so that it recovers at its old place, also when it was placed
	// elsewhere than its configuration says). Empty: nothing is kept, and
	// a restart joins through Join alone, which should then list its
	// former neighbours. One directory per broker.
	DataDir string `toml:"data_dir"`
	// Durability of the publication log (docs/durable.md): "fsync" (a
	// PubAck only once the publication is on disk), "write" (once it is
	// written to the log, not synced: survives a process crash, not a
	// machine crash), "memory" (the log in memory only: a PubAck means
	// queued here, and a restart starts with an empty log), "none" (no
	// log, no publication history). Empty: "fsync" with a data_dir, "memory"
	// without one.
	Durability string `toml:"durability"`
	// MaxRetain keeps the log's publications after they are safe
	// downstream, for durable subscriptions that are away (docs/durable.md):
	// until older than Time or beyond Bytes of such publications, the
	// oldest first. Both 0: released as soon as safe (a durable
	// subscriber that comes back then gets a Gap for what it missed),
	// except with durability memory, whose default publication history is
	// DefaultMemoryRetainTime and DefaultMemoryRetainBytes.
	MaxRetain RetainConfig `toml:"max_retain"`
	// DurableKeep: a durable subscription whose client went away stays at
	// this broker, its edge, this long, holding what it was delivered and
	// had not acknowledged and what arrives, so that a resume here gets
	// it without a flood and without the publishers' edges retaining it
	// (docs/durable.md "Resuming at the same edge"). 0: one minute; a
	// negative value: off (a resume floods, here as elsewhere).
	DurableKeep time.Duration `toml:"durable_keep"`

	// Delta is δ, the number of adjacent brokers that may be down at the
	// same time without loss. A property of the whole overlay: every broker
	// must use the same value.
	Delta int `toml:"delta"`
	// Tick is the runtime's unit of time: the core counts every timeout in
	// ticks, and the runtime ticks it on a ticker with this period.
	Tick time.Duration `toml:"tick"`
	// Heartbeat is how often a heartbeat is sent on each idle link.
	Heartbeat time.Duration `toml:"heartbeat"`
	// FailureTimeout is how long a peer may stay silent before it is
	// suspected and bypassed. Must be several heartbeats, so that one late
	// heartbeat is not a failure.
	FailureTimeout time.Duration `toml:"failure_timeout"`
	// DACKPeriod is how often one aggregated DACK is sent per link; it
	// bounds how long a delivered publication stays queued.
	DACKPeriod time.Duration `toml:"dack_period"`
	// GoneAfter is how long a suspected broker may stay down before its
	// neighbourhood declares it gone and withdraws its subscriptions
	// (PROTOCOL §6), releasing what was queued only for it.
	GoneAfter time.Duration `toml:"gone_after"`

	// SecretFile holds the overlay secret; only brokers holding the same
	// secret may link. Empty: broker links are not authenticated.
	SecretFile string `toml:"secret_file"`
	// ClientTokenFile holds the token clients must present. Empty: any
	// client may connect.
	ClientTokenFile string `toml:"client_token_file"`
	// Admin is the HTTP address of /healthz, /metrics, /state and
	// /debug/pprof/. Empty: no admin endpoint.
	Admin string `toml:"admin"`
	// WSListen is the TCP address of the WebSocket listener for web
	// clients (path /v1/ws, docs/websocket.md); empty: none. With
	// tls.cert_file and tls.key_file set it serves wss with that
	// certificate.
	WSListen string `toml:"ws_listen"`
	// TCPListen is the TCP address of the listener for client sessions
	// over TCP (docs/operations.md "Client transports"); empty: none. The
	// handshake, frames and limits are those of QUIC client sessions. With
	// tls.cert_file and tls.key_file set it speaks TLS with that
	// certificate (clients dial tls://), else plain TCP (tcp://).
	TCPListen string `toml:"tcp_listen"`

	// Overlay chooses the protocol: δ (the default) or the replica
	// baseline (core.go).
	Overlay OverlayConfig `toml:"overlay"`

	TLS    TLSConfig    `toml:"tls"`
	Limits LimitsConfig `toml:"limits"`
	Log    LogConfig    `toml:"log"`
}

// RetainConfig is BrokerConfig.MaxRetain.
type RetainConfig struct {
	Time  time.Duration `toml:"time"`
	Bytes int64         `toml:"bytes"`
}

// TLSConfig enables mutual TLS between brokers: this broker's certificate
// and key, and the overlay CA that signed every broker's certificate (PEM
// files, all three or none). All empty: an ephemeral self-signed
// certificate, and broker links are authenticated by the secret.
type TLSConfig struct {
	CertFile string `toml:"cert_file"`
	KeyFile  string `toml:"key_file"`
	CAFile   string `toml:"ca_file"`
}

// LimitsConfig bounds everything that could otherwise grow with load. Each
// comment says what happens at the bound.
type LimitsConfig struct {
	// MaxQueue bounds the core's message queue (publications not yet safe
	// to discard). At the bound new publications are refused with
	// PubAck{Err:"backpressure"} and publishers retry later.
	MaxQueue int `toml:"max_queue"`
	// MaxLogBytes bounds the publication log (publications not yet safe
	// downstream, counted as message.LogSize). At the bound new
	// publications are refused with "backpressure: publication log full"
	// (clients retry paced); nothing logged is dropped. 0: 1 GiB.
	MaxLogBytes int64 `toml:"max_log_bytes"`
	// MaxCatchupBytes bounds what this broker buffers for one durable
	// subscription catching up (its missed publications, before the switch
	// to live). Beyond it the subscription ends with an error naming this
	// key; its client's token is unchanged. 0: 256 MiB.
	MaxCatchupBytes int64 `toml:"max_catchup_bytes"`
	// MaxHeldBytes bounds what this broker holds, over all its durable
	// subscriptions, for their resumes here (durable_keep). A subscription
	// whose hold would pass it stops holding (an away one is withdrawn):
	// its next resume floods, as one elsewhere does. 0: 256 MiB.
	MaxHeldBytes int64 `toml:"max_held_bytes"`
	// MaxFrame is the largest frame, in bytes, accepted from a peer or a
	// client; a larger one closes that link as malformed.
	MaxFrame int `toml:"max_frame"`
	// MaxClients bounds concurrent client sessions; a session beyond it is
	// closed at once with the reason "too many clients".
	MaxClients int `toml:"max_clients"`
	// MaxSubsPerClient bounds the subscriptions of one session; one more is
	// answered SubAck{Err:...}.
	MaxSubsPerClient int `toml:"max_subs_per_client"`
	// SendQueue is the number of frames buffered per broker link and per
	// client session, and SendQueueBytes their bytes; the first bound
	// reached applies.
	//   - On a full broker link the runtime waits up to LinkBlock for room
	//     (every input waits meanwhile: this slows the whole broker down,
	//     publishers included), then closes the link as failed.
	//   - A client that lets its queue fill up is disconnected with a
	//     logged reason ("slow consumer"); nothing is dropped silently.
	SendQueue      int `toml:"send_queue"`
	SendQueueBytes int `toml:"send_queue_bytes"`
	// LinkBlock is how long the runtime waits for room on a full link.
	LinkBlock time.Duration `toml:"link_block"`
	// InputQueue bounds the runtime's input channel: events from all links
	// and clients, each a message or a batch of up to 256 messages that a
	// link had buffered. When full, the transport's readers wait, which
	// pushes back on the senders through QUIC flow control.
	InputQueue int `toml:"input_queue"`
	// WSHandshakes bounds new WebSocket sessions per second (burst: one
	// second's worth); a handshake over it is answered 429 and the client
	// retries later (the JS client backs off).
	WSHandshakes int `toml:"ws_handshakes_per_s"`
	// WSResumeGrace is how long a web session outlives a lost connection,
	// waiting for the client to resume it (its subscriptions stay, its
	// deliveries go to its history); after it the session ends.
	WSResumeGrace time.Duration `toml:"ws_resume_grace"`
	// WSHistory and WSHistoryAge bound a web session's recent deliveries,
	// kept for a resume: the oldest go first. A resume past them reports
	// recovered: false with the ranges lost.
	WSHistory    int           `toml:"ws_history"`
	WSHistoryAge time.Duration `toml:"ws_history_age"`
	// TCPHandshakes bounds new connections to tcp_listen per second
	// (burst: one second's worth); one over it is answered
	// Refuse{Busy} (plain TCP) or closed before its TLS handshake, and
	// the client retries later (client.Options.Reconnect).
	TCPHandshakes int `toml:"tcp_handshakes_per_s"`
}

// LogConfig chooses the log level and format.
type LogConfig struct {
	// Level is one of trace, debug, info, warn, error.
	Level string `toml:"level"`
	// Format is "json" (one object per line, for machines) or "console"
	// (human-readable).
	Format string `toml:"format"`
}

// DefaultBrokerConfig is the preset for a production-like overlay on a LAN:
// one broker per machine, a crash bypassed about a second after it (the
// failure timeout, as etcd's default election timeout), heartbeats and the
// tick gentle enough for a busy machine.
func DefaultBrokerConfig() BrokerConfig {
	return BrokerConfig{
		Delta: 2, // tolerates two adjacent crashes; the cost is a (δ+1)-neighbourhood map and δ+1 stamps per publication
		Tick:  10 * time.Millisecond,
		// Heartbeat and FailureTimeout: four heartbeats must be lost in a
		// row before a suspicion. A second of silence is far beyond a Go
		// garbage-collection pause, and a false suspicion costs a bypass,
		// not a message; each one refuted doubles the patience with that
		// peer (overlay/patience.go). srds09 runs 83 broker processes on
		// 2 cores with 250 ms / 1.5 s. The authors' implementation used
		// 1 s / 3 s, which triples the pause at a crash.
		Heartbeat:      250 * time.Millisecond,
		FailureTimeout: 1 * time.Second,
		// DACKPeriod: queued publications are purged within about two
		// periods; 100 ms keeps the queue short at 10,000 publications/s
		// while costing one small message per link per period.
		DACKPeriod: 100 * time.Millisecond,
		// GoneAfter: a broker being restarted by its supervisor (and
		// reading its data directory) is back long before this. PROTOCOL
		// §6 suggests 20 × the failure timeout; a restart does not get
		// faster with a shorter timeout, so this stays a minute.
		GoneAfter: 60 * time.Second,
		Admin:     "",
		Limits: LimitsConfig{
			MaxQueue:         100_000, // ~25 MB of 250 B publications
			MaxLogBytes:      1 << 30, // 1 GiB of unsafe publications: minutes of an overlay that cannot make them safe
			MaxFrame:         1 << 20, // 1 MiB: large payloads belong in object storage
			MaxClients:       10_000,
			MaxSubsPerClient: 1_000,
			SendQueue:        8_192,   // ~80 ms of traffic at 100,000 msgs/s
			SendQueueBytes:   4 << 20, // 4 MiB: ~14,000 publications of 300 B
			LinkBlock:        500 * time.Millisecond,
			InputQueue:       1_024,
			WSHandshakes:     2_000,
			WSResumeGrace:    30 * time.Second,
			WSHistory:        256,
			WSHistoryAge:     time.Minute,
			TCPHandshakes:    2_000,
		},
		Log: LogConfig{Level: "info", Format: "json"},
	}
}

// TestbedBrokerConfig is the preset for testbeds and tests on one machine:
// fast failure detection (50 ms heartbeat, 250 ms failure timeout) so a
// crash is bypassed within a quarter of a second, at the price of false
// suspicions on an overloaded machine (which the protocol tolerates).
func TestbedBrokerConfig() BrokerConfig {
	c := DefaultBrokerConfig()
	c.Tick = 5 * time.Millisecond
	c.Heartbeat = 50 * time.Millisecond
	c.FailureTimeout = 250 * time.Millisecond
	c.DACKPeriod = 50 * time.Millisecond
	c.GoneAfter = 20 * c.FailureTimeout
	c.Limits.LinkBlock = 100 * time.Millisecond // under the failure timeout: a blocked runtime must not starve heartbeats
	c.Log.Format = "console"
	return c
}

// Preset returns the named preset: "default" or "testbed".
func Preset(name string) (BrokerConfig, error) {
	switch name {
	case "", "default":
		return DefaultBrokerConfig(), nil
	case "testbed":
		return TestbedBrokerConfig(), nil
	}
	return BrokerConfig{}, fmt.Errorf("runtime: unknown preset %q (want default or testbed)", name)
}

// ConfigError names the configuration field that is wrong and why.
type ConfigError struct {
	Field  string // the TOML key, dotted for tables: "limits.max_queue"
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("runtime: config: %s: %s", e.Field, e.Reason)
}

// LoadBrokerConfig decodes the TOML file at path over base (usually a
// preset), so that keys absent from the file keep the preset's values. An
// unknown key is an error naming it. The result is not validated: flags may
// still override it; call Validate last.
func LoadBrokerConfig(path string, base BrokerConfig) (BrokerConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("runtime: config: %w", err)
	}
	return ParseBrokerConfig(data, base)
}

// ParseBrokerConfig is LoadBrokerConfig for TOML text.
func ParseBrokerConfig(data []byte, base BrokerConfig) (BrokerConfig, error) {
	cfg := base
	// Decode appends to slices; the file's join list replaces the base's.
	cfg.Join = nil
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&cfg)
	if err != nil {
		return base, fmt.Errorf("runtime: config: %w", err)
	}
	if !md.IsDefined("join") {
		cfg.Join = base.Join
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return base, &ConfigError{Field: keys[0], Reason: fmt.Sprintf("unknown key (unknown keys: %s)", strings.Join(keys, ", "))}
	}
	return cfg, nil
}

// TOML returns the configuration as a TOML document that
// ParseBrokerConfig reads back to the same value.
func (c BrokerConfig) TOML() string {
	var b bytes.Buffer
	// Encoding a struct of strings, numbers and durations cannot fail.
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		return "# error: " + err.Error() + "\n"
	}
	return b.String()
}

// Validate checks every field and returns the first problem as a
// *ConfigError naming the field.
func (c *BrokerConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.ID == "":
		return bad("id", "required (the broker's name in the overlay, e.g. \"B1\")")
	case len(c.ID) > 64:
		return bad("id", "%d bytes long, at most 64", len(c.ID))
	case strings.IndexFunc(c.ID, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return bad("id", "%q contains white space or a control character", c.ID)
	}
	if c.Listen == "" {
		return bad("listen", "required (a UDP address such as \"127.0.0.1:7001\")")
	}
	if err := checkHostPort(c.Listen); err != nil {
		return bad("listen", "%v", err)
	}
	if c.Advertise != "" {
		if err := checkHostPort(c.Advertise); err != nil {
			return bad("advertise", "%v", err)
		}
	} else if host, _, _ := net.SplitHostPort(c.Listen); host == "" || net.ParseIP(host).IsUnspecified() {
		return bad("advertise", "required when listen (%q) is a wildcard address: other brokers must know where to dial", c.Listen)
	}
	if len(c.Join) > 16 {
		return bad("join", "%d joinpoints, at most 16", len(c.Join))
	}
	for i, j := range c.Join {
		jp := SplitJoinpoint(j)
		if strings.Contains(j, "@") && jp.ID == "" {
			return bad(fmt.Sprintf("join[%d]", i), "%q names no broker before '@'", j)
		}
		if err := checkHostPort(jp.Addr); err != nil {
			return bad(fmt.Sprintf("join[%d]", i), "%v", err)
		}
	}
	if c.Delta < 1 || c.Delta > 16 {
		return bad("delta", "%d out of range [1, 16]", c.Delta)
	}
	if c.Tick < time.Millisecond || c.Tick > time.Second {
		return bad("tick", "%v out of range [1ms, 1s]", c.Tick)
	}
	if c.Heartbeat < c.Tick {
		return bad("heartbeat", "%v is shorter than one tick (%v)", c.Heartbeat, c.Tick)
	}
	if c.FailureTimeout < 2*c.Heartbeat {
		return bad("failure_timeout", "%v is less than two heartbeats (2 × %v): one late heartbeat would be a failure", c.FailureTimeout, c.Heartbeat)
	}
	if c.DACKPeriod < c.Tick {
		return bad("dack_period", "%v is shorter than one tick (%v)", c.DACKPeriod, c.Tick)
	}
	if c.GoneAfter <= c.FailureTimeout {
		return bad("gone_after", "%v must be longer than failure_timeout (%v)", c.GoneAfter, c.FailureTimeout)
	}
	// Ticks are counted in int on the core's side; keep them well inside.
	if c.GoneAfter/c.Tick > 1<<30 {
		return bad("gone_after", "%v is more than 2^30 ticks of %v", c.GoneAfter, c.Tick)
	}
	for _, f := range []struct{ field, path string }{
		{"secret_file", c.SecretFile}, {"client_token_file", c.ClientTokenFile},
		{"tls.cert_file", c.TLS.CertFile}, {"tls.key_file", c.TLS.KeyFile}, {"tls.ca_file", c.TLS.CAFile},
	} {
		if f.path == "" {
			continue
		}
		if st, err := os.Stat(f.path); err != nil {
			return bad(f.field, "%v", err)
		} else if st.IsDir() {
			return bad(f.field, "%s is a directory", f.path)
		}
	}
	if t := c.TLS; (t.CertFile != "" || t.KeyFile != "" || t.CAFile != "") && (t.CertFile == "" || t.KeyFile == "" || t.CAFile == "") {
		return bad("tls", "cert_file, key_file and ca_file go together (mutual TLS with the overlay CA)")
	}
	if c.Admin != "" {
		if err := checkHostPort(c.Admin); err != nil {
			return bad("admin", "%v", err)
		}
	}
	if c.WSListen != "" {
		if err := checkHostPort(c.WSListen); err != nil {
			return bad("ws_listen", "%v", err)
		}
	}
	if c.TCPListen != "" {
		if err := checkHostPort(c.TCPListen); err != nil {
			return bad("tcp_listen", "%v", err)
		}
	}
	l := &c.Limits
	for _, f := range []struct {
		field     string
		v, lo, hi int
	}{
		{"limits.max_queue", l.MaxQueue, 1, 1 << 26},
		{"limits.max_frame", l.MaxFrame, 1 << 10, 64 << 20},
		{"limits.max_clients", l.MaxClients, 1, 1 << 20},
		{"limits.max_subs_per_client", l.MaxSubsPerClient, 1, 1 << 20},
		{"limits.send_queue", l.SendQueue, 1, 1 << 20},
		{"limits.send_queue_bytes", l.SendQueueBytes, 64 << 10, 1 << 30},
		{"limits.input_queue", l.InputQueue, 1, 1 << 20},
		{"limits.ws_handshakes_per_s", l.WSHandshakes, 1, 1 << 20},
		{"limits.ws_history", l.WSHistory, 1, 1 << 16},
		{"limits.tcp_handshakes_per_s", l.TCPHandshakes, 1, 1 << 20},
	} {
		if f.v < f.lo || f.v > f.hi {
			return bad(f.field, "%d out of range [%d, %d]", f.v, f.lo, f.hi)
		}
	}
	if l.WSResumeGrace < 0 || l.WSResumeGrace > time.Hour {
		return bad("limits.ws_resume_grace", "%v out of range [0, 1h]", l.WSResumeGrace)
	}
	if l.WSHistoryAge < time.Second || l.WSHistoryAge > time.Hour {
		return bad("limits.ws_history_age", "%v out of range [1s, 1h]", l.WSHistoryAge)
	}
	if l.MaxLogBytes != 0 && (l.MaxLogBytes < 1<<20 || l.MaxLogBytes > 1<<40) {
		return bad("limits.max_log_bytes", "%d out of range [%d, %d]", l.MaxLogBytes, 1<<20, int64(1)<<40)
	}
	switch c.Durability {
	case "", DurabilityFsync, DurabilityWrite, DurabilityMemory, DurabilityNone:
	default:
		return bad("durability", "%q: one of fsync, write, memory, none", c.Durability)
	}
	if err := c.validateRetain(); err != nil {
		return err
	}
	if l.LinkBlock < 0 || l.LinkBlock > c.FailureTimeout {
		return bad("limits.link_block", "%v out of range [0, failure_timeout = %v]", l.LinkBlock, c.FailureTimeout)
	}
	switch c.Log.Level {
	case "trace", "debug", "info", "warn", "error":
	default:
		return bad("log.level", "%q is not one of trace, debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "console":
	default:
		return bad("log.format", "%q is not json or console", c.Log.Format)
	}
	return c.validateOverlay(bad)
}

// AdvertisedAddr is the address other brokers dial: Advertise, or Listen.
func (c *BrokerConfig) AdvertisedAddr() string {
	if c.Advertise != "" {
		return c.Advertise
	}
	return c.Listen
}

// ticks converts d to a whole number of ticks, rounding up so that a
// timeout is never shorter than configured, and at least 1.
func (c *BrokerConfig) ticks(d time.Duration) int {
	n := int((d + c.Tick - 1) / c.Tick)
	if n < 1 {
		n = 1
	}
	return n
}

// HeartbeatTicks, FailureTicks, DACKTicks and GoneAfterTicks are the
// configured durations in ticks (rounded up).
func (c *BrokerConfig) HeartbeatTicks() int { return c.ticks(c.Heartbeat) }
func (c *BrokerConfig) FailureTicks() int   { return c.ticks(c.FailureTimeout) }
func (c *BrokerConfig) DACKTicks() int      { return c.ticks(c.DACKPeriod) }
func (c *BrokerConfig) GoneAfterTicks() int { return c.ticks(c.GoneAfter) }

// ReadSecretFile reads a secret or token file: its content with
// surrounding white space trimmed. An empty or tiny secret is refused.
func ReadSecretFile(field, path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{Field: field, Reason: err.Error()}
	}
	data = bytes.TrimSpace(data)
	if len(data) < 8 {
		return nil, &ConfigError{Field: field, Reason: fmt.Sprintf("%s holds %d bytes, at least 8 are needed", path, len(data))}
	}
	if len(data) > 4096 {
		return nil, &ConfigError{Field: field, Reason: fmt.Sprintf("%s holds %d bytes, at most 4096", path, len(data))}
	}
	return data, nil
}

// SplitJoinpoint reads a joinpoint of BrokerConfig.Join: "ID@host:port"
// (ID known) or "host:port" (ID empty).
func SplitJoinpoint(s string) overlay.Peer {
	if id, addr, ok := strings.Cut(s, "@"); ok {
		return overlay.Peer{ID: message.BrokerID(id), Addr: addr}
	}
	return overlay.Peer{Addr: s}
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	_ = host
	if port == "" {
		return errors.New("missing port in " + fmt.Sprintf("%q", addr))
	}
	var p int
	if _, err := fmt.Sscanf(port, "%d", &p); err != nil || p < 0 || p > 65535 || fmt.Sprint(p) != port {
		return fmt.Errorf("%q: bad port %q", addr, port)
	}
	return nil
}
