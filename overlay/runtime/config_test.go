package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deltapub/deltapub/overlay"
)

func validBrokerConfig() BrokerConfig {
	c := TestbedBrokerConfig()
	c.ID = "B1"
	c.Listen = "127.0.0.1:7001"
	return c
}

func TestPresetsValidateOnceNamed(t *testing.T) {
	for _, name := range []string{"default", "testbed"} {
		c, err := Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		c.ID, c.Listen = "B1", "127.0.0.1:7001"
		if err := c.Validate(); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
	if _, err := Preset("fast"); err == nil {
		t.Error("unknown preset accepted")
	}
	tb := TestbedBrokerConfig()
	if tb.Heartbeat != 50*time.Millisecond || tb.FailureTimeout != 250*time.Millisecond {
		t.Errorf("testbed preset: heartbeat %v, failure timeout %v; want 50ms, 250ms", tb.Heartbeat, tb.FailureTimeout)
	}
}

// TestValidateNamesTheField breaks one field at a time and checks that the
// error names exactly that field.
func TestValidateNamesTheField(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		field string
		edit  func(c *BrokerConfig)
	}{
		{"id", func(c *BrokerConfig) { c.ID = "" }},
		{"id", func(c *BrokerConfig) { c.ID = "B 1" }},
		{"listen", func(c *BrokerConfig) { c.Listen = "" }},
		{"listen", func(c *BrokerConfig) { c.Listen = "localhost" }},
		{"listen", func(c *BrokerConfig) { c.Listen = "127.0.0.1:99999" }},
		{"advertise", func(c *BrokerConfig) { c.Listen = "0.0.0.0:7001" }},
		{"join[1]", func(c *BrokerConfig) { c.Join = []string{"127.0.0.1:1", "nope"} }},
		{"delta", func(c *BrokerConfig) { c.Delta = 0 }},
		{"tick", func(c *BrokerConfig) { c.Tick = 0 }},
		{"heartbeat", func(c *BrokerConfig) { c.Heartbeat = time.Millisecond }},
		{"failure_timeout", func(c *BrokerConfig) { c.FailureTimeout = c.Heartbeat }},
		{"dack_period", func(c *BrokerConfig) { c.DACKPeriod = 0 }},
		{"gone_after", func(c *BrokerConfig) { c.GoneAfter = c.FailureTimeout }},
		{"secret_file", func(c *BrokerConfig) { c.SecretFile = filepath.Join(dir, "missing") }},
		{"tls.ca_file", func(c *BrokerConfig) { c.TLS.CAFile = dir }},
		{"admin", func(c *BrokerConfig) { c.Admin = "9000" }},
		{"limits.max_queue", func(c *BrokerConfig) { c.Limits.MaxQueue = 0 }},
		{"limits.max_frame", func(c *BrokerConfig) { c.Limits.MaxFrame = 10 }},
		{"limits.max_clients", func(c *BrokerConfig) { c.Limits.MaxClients = -1 }},
		{"limits.max_subs_per_client", func(c *BrokerConfig) { c.Limits.MaxSubsPerClient = 0 }},
		{"limits.link_block", func(c *BrokerConfig) { c.Limits.LinkBlock = time.Hour }},
		{"log.level", func(c *BrokerConfig) { c.Log.Level = "verbose" }},
		{"log.format", func(c *BrokerConfig) { c.Log.Format = "xml" }},
	}
	for _, tc := range cases {
		c := validBrokerConfig()
		tc.edit(&c)
		err := c.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: got %v, want a *ConfigError", tc.field, err)
			continue
		}
		if ce.Field != tc.field {
			t.Errorf("error %q names field %q, want %q", err, ce.Field, tc.field)
		}
		if !strings.Contains(err.Error(), tc.field) || ce.Reason == "" {
			t.Errorf("error %q does not say the field and the reason", err)
		}
	}
}

func TestParseOverPresetAndRoundTrip(t *testing.T) {
	text := `
id = "B2"
listen = "127.0.0.1:7002"
join = ["127.0.0.1:7001"]
delta = 3
heartbeat = "100ms"
failure_timeout = "1s"

[limits]
max_queue = 5000

[log]
level = "debug"
`
	c, err := ParseBrokerConfig([]byte(text), TestbedBrokerConfig())
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "B2" || c.Delta != 3 || c.Heartbeat != 100*time.Millisecond || c.FailureTimeout != time.Second ||
		c.Limits.MaxQueue != 5000 || c.Log.Level != "debug" || len(c.Join) != 1 {
		t.Fatalf("decoded %+v", c)
	}
	// Keys absent from the file keep the preset's values.
	if c.DACKPeriod != TestbedBrokerConfig().DACKPeriod || c.Limits.MaxFrame != TestbedBrokerConfig().Limits.MaxFrame {
		t.Errorf("preset values lost: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// --print-config output reads back to the same configuration.
	back, err := ParseBrokerConfig([]byte(c.TOML()), BrokerConfig{})
	if err != nil {
		t.Fatalf("%v\n%s", err, c.TOML())
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip:\n got %+v\nwant %+v\n%s", back, c, c.TOML())
	}
}

func TestUnknownKeyIsAnError(t *testing.T) {
	for _, tc := range []struct{ text, key string }{
		{"id = \"B1\"\nheartbeet = \"1s\"\n", "heartbeet"},
		{"[limits]\nmax_queu = 3\n", "limits.max_queu"},
	} {
		_, err := ParseBrokerConfig([]byte(tc.text), DefaultBrokerConfig())
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.key {
			t.Errorf("%q: got %v, want an error naming %s", tc.text, err, tc.key)
		}
	}
	if _, err := ParseBrokerConfig([]byte("heartbeat = \"soon\"\n"), DefaultBrokerConfig()); err == nil ||
		!strings.Contains(err.Error(), "heartbeat") {
		t.Errorf("bad duration: got %v, want an error naming heartbeat", err)
	}
}

func TestTicksRoundUp(t *testing.T) {
	c := validBrokerConfig()
	c.Tick = 10 * time.Millisecond
	c.Heartbeat = 15 * time.Millisecond
	c.FailureTimeout = 250 * time.Millisecond
	if c.HeartbeatTicks() != 2 || c.FailureTicks() != 25 {
		t.Errorf("ticks: heartbeat %d, failure %d; want 2, 25", c.HeartbeatTicks(), c.FailureTicks())
	}
}

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s")
	if err := os.WriteFile(p, []byte("  correct horse battery\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ReadSecretFile("secret_file", p)
	if err != nil || string(s) != "correct horse battery" {
		t.Fatalf("got %q, %v", s, err)
	}
	if err := os.WriteFile(p, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSecretFile("secret_file", p); err == nil || !strings.Contains(err.Error(), "secret_file") {
		t.Errorf("short secret: got %v", err)
	}
}

// Joinpoints are "ID@host:port" or a bare "host:port".
func TestJoinpointForms(t *testing.T) {
	if p := SplitJoinpoint("B2@127.0.0.1:7002"); p.ID != "B2" || p.Addr != "127.0.0.1:7002" {
		t.Fatalf("ID@addr: %+v", p)
	}
	if p := SplitJoinpoint("127.0.0.1:7002"); p.ID != "" || p.Addr != "127.0.0.1:7002" {
		t.Fatalf("bare addr: %+v", p)
	}
	for _, bad := range []string{"@127.0.0.1:1", "B2@nope"} {
		c := validBrokerConfig()
		c.Join = []string{bad}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "join[0]") {
			t.Errorf("join %q: error %v, want one naming join[0]", bad, err)
		}
	}
}

// The runtime gives the core the frame limit of its readers.
func TestNodeConfigCarriesMaxFrame(t *testing.T) {
	c := DefaultBrokerConfig()
	c.ID = "B1"
	c.Limits.MaxFrame = 64 << 10
	nc := c.NodeConfig(1)
	if nc.MaxFrame != 64<<10 {
		t.Fatalf("NodeConfig.MaxFrame %d, want limits.max_frame %d", nc.MaxFrame, 64<<10)
	}
	if _, err := overlay.NewNode(nc); err != nil {
		t.Fatal(err)
	}
	nc.MaxFrame = 100
	if _, err := overlay.NewNode(nc); err == nil {
		t.Fatal("a 100-byte MaxFrame was accepted")
	}
}

// Without a data directory a broker keeps a publication history in memory (for
// recovering and durable subscribers elsewhere), always bounded in bytes;
// none turns it off, and a data directory puts the log on disk.
func TestDurabilityDefaultsAndTheRecentHistory(t *testing.T) {
	cases := []struct {
		name       string
		edit       func(c *BrokerConfig)
		durability string
		durable    bool
		retain     RetainConfig
	}{
		{"default", func(c *BrokerConfig) {}, DurabilityMemory, true, RetainConfig{DefaultMemoryRetainTime, DefaultMemoryRetainBytes}},
		{"memory, time only", func(c *BrokerConfig) { c.MaxRetain.Time = 5 * time.Second }, DurabilityMemory, true, RetainConfig{5 * time.Second, DefaultMemoryRetainBytes}},
		{"memory, bytes only", func(c *BrokerConfig) { c.MaxRetain.Bytes = 1 << 20 }, DurabilityMemory, true, RetainConfig{0, 1 << 20}},
		{"none", func(c *BrokerConfig) { c.Durability = DurabilityNone }, DurabilityNone, false, RetainConfig{}},
		{"data dir", func(c *BrokerConfig) { c.DataDir = t.TempDir() }, DurabilityFsync, true, RetainConfig{}},
		{"replicas", func(c *BrokerConfig) { c.Overlay.Mode = ModeReplicas }, DurabilityNone, false, RetainConfig{}},
	}
	for _, tc := range cases {
		c := DefaultBrokerConfig()
		c.ID = "B1"
		tc.edit(&c)
		nc := c.NodeConfig(1)
		if got := c.EffectiveDurability(); got != tc.durability || nc.Durable != tc.durable {
			t.Errorf("%s: durability %q (core log %v), want %q (%v)", tc.name, got, nc.Durable, tc.durability, tc.durable)
		}
		if got := c.effectiveRetain(); got != tc.retain {
			t.Errorf("%s: retention %+v, want %+v", tc.name, got, tc.retain)
		}
		if tc.retain.Bytes != nc.RetainBytes {
			t.Errorf("%s: core RetainBytes %d, want %d", tc.name, nc.RetainBytes, tc.retain.Bytes)
		}
	}
	c := validBrokerConfig()
	c.Durability, c.MaxRetain.Time = DurabilityNone, time.Minute
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "max_retain") {
		t.Fatalf("max_retain with durability none: %v, want an error naming max_retain", err)
	}
}
