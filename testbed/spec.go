// Package testbed runs experiments described in one TOML file: an overlay
// topology, publishers and subscribers with generated workloads, and a
// schedule of faults. It launches the experiment on a backend (real broker
// processes, brokers inside this process, or the deterministic simulator),
// records every publication and delivery, computes with an oracle which
// deliveries the guarantees of PROTOCOL.md §1 require, and writes a verdict,
// numbers and plots. See docs/testbed.md for the file format.
package testbed

import (
	"fmt"
	"time"
)

// Duration is a TOML duration written as a Go duration string ("250ms",
// "30s"). A bare number is refused: its unit would be a guess.
type Duration struct{ time.Duration }

// UnmarshalText parses "30s"-style durations.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. \"250ms\" or \"30s\")", string(b))
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration back in Go syntax.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

// Spec is one experiment file, decoded. Field comments give the TOML key and
// its default; docs/testbed.md is the reference.
type Spec struct {
	Name     string   `toml:"name"`     // experiment name, used in titles; default: the file name
	Seed     int64    `toml:"seed"`     // seeds every generator and the simulator; default 1
	Duration Duration `toml:"duration"` // publishing stops at this time after the start; required
	Warmup   Duration `toml:"warmup"`   // publishers start after this time, so subscriptions can confirm; default 2s
	Drain    Duration `toml:"drain"`    // time after publishing stops to collect late deliveries; default 3s

	Overlay    OverlaySpec      `toml:"overlay"`
	Topology   TopologySpec     `toml:"topology"`
	Brokers    []BrokerSpec     `toml:"broker"` // for topology kind "explicit"
	Publishers []PublisherSpec  `toml:"publishers"`
	Subs       []SubscriberSpec `toml:"subscribers"`
	Faults     []FaultSpec      `toml:"faults"`
	Metrics    MetricsSpec      `toml:"metrics"`
	Process    ProcessSpec      `toml:"process"`
	Inproc     InprocSpec       `toml:"inproc"`
	// Mode is the backend when the command line names none: process
	// (default) | inproc | sim | netns.
	Mode    string      `toml:"mode"`
	Hosts   []HostSpec  `toml:"hosts"`   // machines the brokers run on (hosts.go)
	Network NetworkSpec `toml:"network"` // netns mode: link shaping (hosts.go)

	// File is the path the spec was read from (not a TOML key).
	File string `toml:"-"`
	// lines locates keys in the file for error messages after decoding.
	lines *locator `toml:"-"`
}

// OverlaySpec configures every broker of the overlay.
type OverlaySpec struct {
	Delta          int      `toml:"delta"`           // δ ≥ 1; default 2
	Heartbeat      Duration `toml:"heartbeat"`       // default 50ms
	FailureTimeout Duration `toml:"failure_timeout"` // default 250ms; must exceed heartbeat
	DACKPeriod     Duration `toml:"dack_period"`     // default 100ms
	GoneAfter      Duration `toml:"gone_after"`      // default 20 × failure_timeout (PROTOCOL §6)
	MaxQueue       int      `toml:"max_queue"`       // per-broker message queue bound; default 100000
	Tick           Duration `toml:"tick"`            // the protocol core's tick; default 10ms
	Durability     string   `toml:"durability"`      // publication log: fsync | write | memory | none; default the broker's (fsync with a data dir)
	LinkDelay      Duration `toml:"link_delay"`      // sim mode only: one-way delay per link; default 1ms
	LinkJitter     Duration `toml:"link_jitter"`     // sim mode only: added uniform jitter; default 0
	Mode           string   `toml:"mode"`            // delta (default) | replicas: the replica-based baseline (docs/baseline.md)
	Replicas       int      `toml:"replicas"`        // mode replicas: replicas per virtual node, 2..8; default 2
	// Retain: the publishers' edges keep what they logged this long after
	// it is safe, for durable subscribers' catch-up (the brokers'
	// max_retain.time; needs durability fsync or write); default 0:
	// released once safe (a durable subscriber away longer gets a Gap).
	Retain Duration `toml:"retain"`
	// DurableKeep: a durable subscription whose subscriber went away stays
	// at its edge this long, for a resume there without a flood (the
	// brokers' durable_keep); default 0: the brokers' default (1m); a
	// negative value: off.
	DurableKeep Duration `toml:"durable_keep"`
}

// TopologySpec says how the broker tree is built.
type TopologySpec struct {
	Kind    string `toml:"kind"`    // chain | star | balanced | random | srds09 | explicit
	Brokers int    `toml:"brokers"` // number of brokers (not for srds09 and explicit)
	Fanout  int    `toml:"fanout"`  // balanced: children per broker (default 3); random: max children (0 = unbounded)
}

// BrokerSpec is one [[broker]] of an explicit topology.
type BrokerSpec struct {
	Name string `toml:"name"`
	Join string `toml:"join"` // the broker it joins; empty for the root (exactly one)
	Host string `toml:"host"` // the [[hosts]] entry it runs on; default round-robin
}

// PublisherSpec is one [[publishers]] group.
type PublisherSpec struct {
	Count   int            `toml:"count"`   // publishers in this group; default 1
	Brokers any            `toml:"brokers"` // names, or "leaves" | "all" | "random" | "leaves(X)" | "leaves-outside(X)"
	Rate    float64        `toml:"rate"`    // publications per second per publisher; > 0
	Attrs   map[string]any `toml:"attrs"`   // attribute → constant or generator
	Payload int            `toml:"payload"` // payload bytes; default 0
	Start   Duration       `toml:"start"`   // first publication; default warmup
	Stop    Duration       `toml:"stop"`    // last publication before this; default duration
}

// SubscriberSpec is one [[subscribers]] group.
type SubscriberSpec struct {
	Count         int    `toml:"count"`         // subscribers in this group; default 1
	Brokers       any    `toml:"brokers"`       // as for publishers
	Filter        string `toml:"filter"`        // PADRES filter; {generator} is replaced per subscription
	Subscriptions int    `toml:"subscriptions"` // subscriptions per subscriber (one client session); default 1
	// Durable: each subscriber is a durable subscription (docs/durable.md)
	// that survives its edge's crash and the disconnect and reconnect
	// faults; needs overlay.durability fsync or write, one subscription.
	Durable bool `toml:"durable"`
}

// FaultSpec is one [[faults]] entry: everything in it happens at At.
type FaultSpec struct {
	At      Duration `toml:"at"`
	Crash   []string `toml:"crash"`   // kill (state lost)
	Restart []string `toml:"restart"` // start again a crashed broker (new epoch), with its data directory
	// RestartClean: as restart, but the broker's data directory is lost
	// first (its place and its publication log).
	RestartClean []string   `toml:"restart_clean"`
	Freeze       []string   `toml:"freeze"` // stop processing (SIGSTOP); a false suspicion if resumed in time
	Resume       []string   `toml:"resume"` // resume a frozen broker
	Cut          [][]string `toml:"cut"`    // cut links between pairs of brokers
	Heal         [][]string `toml:"heal"`   // heal cut links
	// Leave: the broker leaves the overlay gracefully (SIGTERM to the
	// process; docs/protocol.md §3) and is gone for good: its clients are
	// told, its publishers stop, the tree is repaired around it.
	Leave []string `toml:"leave"`
	// Partition cuts the named hosts off from the others (netns mode);
	// HealPartition joins them again.
	Partition     []string `toml:"partition"`
	HealPartition []string `toml:"heal_partition"`
	// Disconnect: durable subscribers (by name, "S3") whose session ends
	// (the client goes away, keeping its checkpoint token); Reconnect: one
	// comes back at a broker with its token (after a disconnect, or once
	// its edge crashed or left).
	Disconnect []string       `toml:"disconnect"`
	Reconnect  *ReconnectSpec `toml:"reconnect"`
}

// ReconnectSpec is a fault's reconnect = { subscriber = "S3", broker = "B7" }.
type ReconnectSpec struct {
	Subscriber string `toml:"subscriber"`
	Broker     string `toml:"broker"`
}

// MetricsSpec tunes what is measured.
type MetricsSpec struct {
	Sample      Duration `toml:"sample"`       // broker sampling period; default 1s
	FaultWindow Duration `toml:"fault_window"` // "during a fault" = [at, at+window); default 4 × failure_timeout
}

// ProcessSpec tunes the process backend.
type ProcessSpec struct {
	BasePort int    `toml:"base_port"` // if set, broker i uses UDP base+2i (QUIC) and TCP base+2i+1 (admin); default 0: free ports picked at start
	Binary   string `toml:"binary"`    // deltapub binary for the brokers; default: this executable
	// GOMAXPROCS of each broker process; default 1 (a broker's core runs
	// on one goroutine, and dozens of brokers on a few cores only lose
	// time to idle OS threads spinning for work); 0: Go's default (every
	// core).
	GOMAXPROCS int `toml:"gomaxprocs"`
	// GOGC of each broker process; default 0: Go's default (100).
	GOGC int `toml:"gogc"`
	// SSHOptions are added to every ssh command line ([[hosts]] with ssh),
	// e.g. ["-i", "/path/key", "-o", "UserKnownHostsFile=/path/known"].
	SSHOptions []string `toml:"ssh_options"`
}

// InprocSpec tunes the inproc backend.
type InprocSpec struct {
	// Transport carries the brokers' links and the clients' sessions:
	// "memory" (default), the runtime's in-memory twin of QUIC
	// (runtime.MemNetwork: no sockets, a crash is silent and a restarted
	// broker comes back on the same address, as in process mode), or
	// "quic", a QUIC endpoint per broker on 127.0.0.1.
	Transport string `toml:"transport"`
}

// Inproc transports (InprocSpec.Transport).
const (
	TransportMemory = "memory"
	TransportQUIC   = "quic"
)

// defaults fills zero values. It runs before validation so that validation
// sees the effective values.
func (s *Spec) defaults() {
	if s.Seed == 0 {
		s.Seed = 1
	}
	if s.Warmup.Duration == 0 {
		s.Warmup.Duration = 2 * time.Second
	}
	if s.Drain.Duration == 0 {
		s.Drain.Duration = 3 * time.Second
	}
	o := &s.Overlay
	if o.Delta == 0 && !s.lines.has("overlay.delta") {
		o.Delta = 2
	}
	if o.Heartbeat.Duration == 0 {
		o.Heartbeat.Duration = 50 * time.Millisecond
	}
	if o.FailureTimeout.Duration == 0 {
		o.FailureTimeout.Duration = 250 * time.Millisecond
	}
	if o.DACKPeriod.Duration == 0 {
		o.DACKPeriod.Duration = 100 * time.Millisecond
	}
	if o.GoneAfter.Duration == 0 {
		o.GoneAfter.Duration = 20 * o.FailureTimeout.Duration
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = 100000
	}
	if o.Tick.Duration == 0 {
		o.Tick.Duration = 10 * time.Millisecond
	}
	if o.LinkDelay.Duration == 0 {
		o.LinkDelay.Duration = time.Millisecond
	}
	if s.Topology.Kind == "balanced" && s.Topology.Fanout == 0 {
		s.Topology.Fanout = 3
	}
	for i := range s.Publishers {
		p := &s.Publishers[i]
		if p.Count == 0 && !s.lines.has(fmt.Sprintf("publishers[%d].count", i)) {
			p.Count = 1
		}
		if p.Start.Duration == 0 {
			p.Start = s.Warmup
		}
		if p.Stop.Duration == 0 {
			p.Stop = s.Duration
		}
	}
	for i := range s.Subs {
		sb := &s.Subs[i]
		if sb.Count == 0 && !s.lines.has(fmt.Sprintf("subscribers[%d].count", i)) {
			sb.Count = 1
		}
		if sb.Subscriptions == 0 {
			sb.Subscriptions = 1
		}
	}
	if s.Inproc.Transport == "" && !s.lines.has("inproc.transport") {
		s.Inproc.Transport = TransportMemory
	}
	if s.Process.GOMAXPROCS == 0 && !s.lines.has("process.gomaxprocs") {
		s.Process.GOMAXPROCS = 1
	}
	if s.Metrics.Sample.Duration == 0 {
		s.Metrics.Sample.Duration = time.Second
	}
	if s.Metrics.FaultWindow.Duration == 0 {
		s.Metrics.FaultWindow.Duration = 4 * o.FailureTimeout.Duration
	}
}

// End is when the run ends: publishing stops at Duration, then Drain.
func (s *Spec) End() time.Duration { return s.Duration.Duration + s.Drain.Duration }
