package runtime

import (
	"errors"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/replicas"
	"github.com/rs/zerolog"
)

// replicaConfig is replica Ab of the tree A – B with 2 replicas each.
func replicaConfig() BrokerConfig {
	c := validBrokerConfig()
	c.ID, c.Listen = "Ab", "127.0.0.1:7002"
	c.Overlay = OverlayConfig{Mode: ModeReplicas, Replicas: 2, Tree: []string{"A", "B:A"},
		Peers: []string{"Aa@127.0.0.1:7001", "Ab@127.0.0.1:9999", "Ba@127.0.0.1:7003", "Bb@127.0.0.1:7004"}}
	return c
}

// A broker configured in replicas mode runs the baseline's core, with the
// layout of its configuration (its own address where it listens).
func TestReplicasModeBuildsTheBaseline(t *testing.T) {
	c := replicaConfig()
	r, err := NewRuntime(c, 5, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.node.(*replicas.Node); !ok {
		t.Fatalf("core %T, want *replicas.Node", r.node)
	}
	lay, err := c.ReplicaLayout()
	if err != nil {
		t.Fatal(err)
	}
	if a := lay.VNodes[0].Replicas[1].Addr; a != "127.0.0.1:7002" {
		t.Errorf("own address %q, want the listen address", a)
	}
	// Bootstrap is a first start: it dials only Aa, ranked before it.
	r.node.Bootstrap()
	if d := r.node.Ready().Dials; len(d) != 1 || d[0].ID != "Aa" {
		t.Errorf("first start dials %v, want [Aa]", d)
	}
}

func TestReplicasModeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(c *BrokerConfig)
	}{
		{"overlay.mode", func(c *BrokerConfig) { c.Overlay.Mode = "mirror" }},
		{"overlay.mode", func(c *BrokerConfig) { c.Overlay.Mode = ""; c.Overlay.Replicas = 2 }},
		{"overlay.replicas", func(c *BrokerConfig) { c.Overlay.Replicas = 1 }},
		{"join", func(c *BrokerConfig) { c.Join = []string{"Aa@127.0.0.1:7001"} }},
		{"durability", func(c *BrokerConfig) { c.DataDir = t.TempDir() }},
		{"overlay.tree", func(c *BrokerConfig) { c.Overlay.Tree = nil }},
		{"overlay.tree", func(c *BrokerConfig) { c.Overlay.Tree = []string{"B:A", "A"} }},
		{"overlay.tree", func(c *BrokerConfig) { c.ID = "Cz" }},
		{"overlay.tree", func(c *BrokerConfig) { c.Overlay.Peers = c.Overlay.Peers[:3] }},
		{"overlay.tree", func(c *BrokerConfig) { c.Overlay.Peers[0] = "127.0.0.1:7001" }},
	} {
		c := replicaConfig()
		tc.edit(&c)
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field {
			t.Errorf("%s: got %v", tc.field, err)
		}
	}
	c := replicaConfig()
	c.Overlay.Peers = c.Overlay.Peers[:3]
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "no address for Bb") {
		t.Errorf("missing peer: %v", err)
	}
	c = replicaConfig()
	c.DataDir, c.Durability = t.TempDir(), DurabilityNone
	if err := c.Validate(); err != nil {
		t.Errorf("replicas with a data directory and durability none: %v", err)
	}
}
