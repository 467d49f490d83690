package runtime

import (
	"cmp"
	"hash/fnv"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// NodeConfig is the pure core's configuration for this broker: durations
// converted to ticks (rounded up), and the given epoch (see Epoch for how
// it is chosen).
func (c *BrokerConfig) NodeConfig(epoch uint64) overlay.Config {
	nc := overlay.DefaultConfig()
	nc.ID = message.BrokerID(c.ID)
	nc.Addr = c.AdvertisedAddr()
	nc.Epoch = epoch
	nc.Delta = c.Delta
	nc.HeartbeatTicks = c.HeartbeatTicks()
	nc.FailureTicks = c.FailureTicks()
	nc.DACKTicks = c.DACKTicks()
	nc.GoneAfterTicks = c.GoneAfterTicks()
	nc.MaxQueue = c.Limits.MaxQueue
	nc.MaxFrame = c.Limits.MaxFrame
	nc.Tick = c.Tick
	nc.Durable = c.EffectiveDurability() != DurabilityNone
	nc.MemoryLog = c.EffectiveDurability() == DurabilityMemory
	nc.MaxLogBytes = cmp.Or(c.Limits.MaxLogBytes, defaultMaxLogBytes)
	c.retainNodeConfig(&nc)
	// A join step unanswered for two failure timeouts is retried.
	nc.JoinRetryTicks = 2 * nc.FailureTicks
	// The backoffs' jitter: brokers restarted together must not retry in
	// lockstep, so the seed differs per broker and per incarnation.
	h := fnv.New64a()
	h.Write([]byte(c.ID))
	nc.Seed = int64(h.Sum64() ^ epoch)
	return nc
}

// EpochAt is the epoch this broker uses if it starts at now: the
// configured one, or else milliseconds since 1970, which grows across
// restarts of the same broker (a restart takes longer than a millisecond).
func (c *BrokerConfig) EpochAt(now time.Time) uint64 {
	if c.Epoch != 0 {
		return c.Epoch
	}
	return uint64(now.UnixMilli())
}
