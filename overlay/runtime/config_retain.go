package runtime

import (
	"cmp"
	"fmt"
	"time"

	"github.com/deltapub/deltapub/overlay"
)

// Defaults of limits.max_catchup_bytes, limits.max_held_bytes and
// durable_keep when left 0.
const (
	defaultMaxCatchupBytes = 256 << 20
	DefaultMaxHeldBytes    = 256 << 20
	DefaultDurableKeep     = time.Minute
)

// validateRetain checks max_retain and limits.max_catchup_bytes.
func (c *BrokerConfig) validateRetain() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	r := c.MaxRetain
	if r.Time < 0 || r.Time > 30*24*time.Hour {
		return bad("max_retain.time", "%v out of range [0, 720h]", r.Time)
	}
	if r.Bytes < 0 || r.Bytes > 1<<40 {
		return bad("max_retain.bytes", "%d out of range [0, %d]", r.Bytes, int64(1)<<40)
	}
	if (r.Time > 0 || r.Bytes > 0) && c.EffectiveDurability() == DurabilityNone {
		return bad("max_retain", "needs a publication log (durability fsync, write or memory)")
	}
	if m := c.Limits.MaxCatchupBytes; m < 0 || m > 1<<40 {
		return bad("limits.max_catchup_bytes", "%d out of range [0, %d]", m, int64(1)<<40)
	}
	if m := c.Limits.MaxHeldBytes; m < 0 || m > 1<<40 {
		return bad("limits.max_held_bytes", "%d out of range [0, %d]", m, int64(1)<<40)
	}
	if k := c.DurableKeep; k > 30*24*time.Hour {
		return bad("durable_keep", "%v out of range (at most 720h; negative: off)", k)
	}
	return nil
}

// retainNodeConfig sets the core's retention, catchup bound and away
// subscriptions.
func (c *BrokerConfig) retainNodeConfig(nc *overlay.Config) {
	r := c.effectiveRetain()
	if r.Time > 0 {
		nc.RetainTicks = c.ticks(r.Time)
	}
	nc.RetainBytes = r.Bytes
	nc.MaxCatchupBytes = cmp.Or(c.Limits.MaxCatchupBytes, defaultMaxCatchupBytes)
	nc.KeepAwayTicks = c.keepAwayTicks()
	nc.MaxHeldBytes = cmp.Or(c.Limits.MaxHeldBytes, DefaultMaxHeldBytes)
	nc.PersistHeld = c.persistHeld()
}

// effectiveRetain is max_retain with the defaults of its durability
// filled in (RetainFor).
func (c *BrokerConfig) effectiveRetain() RetainConfig {
	return RetainFor(c.EffectiveDurability(), c.MaxRetain)
}

// RetainFor is the retention r gives with durability d: with memory, the
// publication history when r is left 0, and always a bound in bytes,
// since it is held in memory; otherwise r as it is.
func RetainFor(d string, r RetainConfig) RetainConfig {
	if d != DurabilityMemory {
		return r
	}
	if r == (RetainConfig{}) {
		r.Time = DefaultMemoryRetainTime
	}
	r.Bytes = cmp.Or(r.Bytes, DefaultMemoryRetainBytes)
	return r
}

// keepAwayTicks is durable_keep in ticks (0: off).
func (c *BrokerConfig) keepAwayTicks() int {
	if k := cmp.Or(c.DurableKeep, DefaultDurableKeep); k > 0 {
		return c.ticks(k)
	}
	return 0
}
