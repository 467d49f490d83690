// The protocol core the runtime drives: the δ overlay (overlay.Node) or,
// with overlay.mode = "replicas", the replica-based baseline
// (replicas.Node, docs/baseline.md). Both are pure state machines with the
// same inputs and outputs (Step, Tick, Ready); the runtime around them —
// transport, client sessions, metrics, /state — is the same.

package runtime

import (
	"fmt"
	"strings"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/deltapub/deltapub/replicas"
)

// Core is what the runtime drives: a protocol core (overlay.Core), its
// status for metrics and /state, and Recycle, which takes back each Ready
// once carried out so that its slices are reused.
type Core interface {
	overlay.Core
	Status() overlay.Status
	Recycle(done overlay.Ready)
}

var (
	_ Core = (*overlay.Node)(nil)
	_ Core = (*replicas.Node)(nil)
)

// Overlay modes (BrokerConfig.Overlay.Mode).
const (
	ModeDelta    = "delta"
	ModeReplicas = "replicas"
)

// OverlayConfig is BrokerConfig.Overlay: which protocol the broker runs.
// The replicas mode is the comparison's baseline, not a production mode:
// every replica is given the whole layout (no join protocol), there is no
// graceful leave and no publication log (docs/baseline.md).
type OverlayConfig struct {
	// Mode is "delta" (the default: δ-fault tolerance) or "replicas".
	Mode string `toml:"mode"`
	// Replicas is k, the replicas per virtual node (replicas mode; 2..8).
	Replicas int `toml:"replicas"`
	// Tree lists the virtual nodes, every parent before its children,
	// each as "NAME" (the root, first) or "NAME:PARENT". The same list, in
	// the same order, on every replica: it ranks them.
	Tree []string `toml:"tree"`
	// Peers gives the address of every replica of the layout as
	// "ID@host:port" (this broker's own entry may be left out: it is its
	// advertised address).
	Peers []string `toml:"peers"`
}

// IsReplicas reports whether the broker runs the replica baseline.
func (c *BrokerConfig) IsReplicas() bool { return c.Overlay.Mode == ModeReplicas }

// ReplicaLayout builds the layout of overlay.tree and overlay.peers.
func (c *BrokerConfig) ReplicaLayout() (*replicas.Layout, error) {
	o := &c.Overlay
	if len(o.Tree) == 0 {
		return nil, fmt.Errorf("required in mode %q: the virtual nodes, as \"NAME\" or \"NAME:PARENT\"", ModeReplicas)
	}
	var names []string
	parent := map[string]string{}
	for _, e := range o.Tree {
		n, p, _ := strings.Cut(strings.TrimSpace(e), ":")
		if n == "" {
			return nil, fmt.Errorf("entry %q: no virtual node name", e)
		}
		names = append(names, n)
		parent[n] = p
	}
	addr := map[string]string{c.ID: c.AdvertisedAddr()}
	for _, e := range o.Peers {
		jp := SplitJoinpoint(e)
		if jp.ID == "" || jp.Addr == "" {
			return nil, fmt.Errorf("overlay.peers: %q is not ID@host:port", e)
		}
		if err := checkHostPort(jp.Addr); err != nil {
			return nil, fmt.Errorf("overlay.peers: %q: %v", e, err)
		}
		if string(jp.ID) != c.ID { // its own: where it listens now
			addr[string(jp.ID)] = jp.Addr
		}
	}
	var missing []string
	lay, err := replicas.NewLayout(names, parent, o.Replicas, func(id string) string {
		if addr[id] == "" {
			missing = append(missing, id)
		}
		return addr[id]
	})
	if err != nil {
		return nil, err
	}
	if _, ok := lay.VNodeOf(message.BrokerID(c.ID)); !ok {
		return nil, fmt.Errorf("this broker (%s) is not a replica of the tree (replicas are named NAME followed by a, b, …)", c.ID)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("overlay.peers: no address for %s", strings.Join(missing, ", "))
	}
	return lay, nil
}

// validateOverlay checks the overlay table (called by Validate).
func (c *BrokerConfig) validateOverlay(bad func(field, format string, args ...any) error) error {
	o := &c.Overlay
	switch o.Mode {
	case "", ModeDelta:
		if o.Replicas != 0 || len(o.Tree) > 0 || len(o.Peers) > 0 {
			return bad("overlay.mode", "overlay.replicas, tree and peers are for mode %q", ModeReplicas)
		}
		return nil
	case ModeReplicas:
	default:
		return bad("overlay.mode", "%q: want %q (the default) or %q", o.Mode, ModeDelta, ModeReplicas)
	}
	if o.Replicas < 2 || o.Replicas > replicas.MaxReplicas {
		return bad("overlay.replicas", "%d: want 2..%d replicas per virtual node", o.Replicas, replicas.MaxReplicas)
	}
	if len(c.Join) > 0 {
		return bad("join", "not used in mode %q: the layout (overlay.tree, overlay.peers) names every peer", ModeReplicas)
	}
	if d := c.EffectiveDurability(); d != DurabilityNone {
		return bad("durability", "%q: mode %q keeps no publication log (set durability = \"none\")", d, ModeReplicas)
	}
	if _, err := c.ReplicaLayout(); err != nil {
		return bad("overlay.tree", "%v", err)
	}
	return nil
}

// newCore builds the core of cfg (validated) for this incarnation.
func newCore(cfg *BrokerConfig, epoch uint64) (Core, error) {
	if !cfg.IsReplicas() {
		return overlay.NewNode(cfg.NodeConfig(epoch))
	}
	lay, err := cfg.ReplicaLayout()
	if err != nil {
		return nil, err
	}
	// The runtime's epochs are clock readings: a restart is told by the
	// place saved in the data directory (replicas.NewByPlace).
	return replicas.NewByPlace(cfg.NodeConfig(epoch), lay)
}
