package runtime

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/internal/storage"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Durability values (BrokerConfig.Durability).
const (
	DurabilityFsync  = "fsync"
	DurabilityWrite  = "write"
	DurabilityMemory = "memory"
	DurabilityNone   = "none"
)

// The publication history a broker keeps in memory by default (durability
// memory with max_retain left 0): what a recovering web client or a
// durable subscriber that was away gets from this broker's publishers.
const (
	DefaultMemoryRetainTime  = time.Minute
	DefaultMemoryRetainBytes = 64 << 20
)

// defaultMaxLogBytes is limits.max_log_bytes when left 0.
const defaultMaxLogBytes = 1 << 30

// EffectiveDurability is Durability with its default filled in: fsync
// with a data directory, memory without one (none in mode replicas,
// which keeps no log).
func (c *BrokerConfig) EffectiveDurability() string {
	switch {
	case c.Durability != "":
		return c.Durability
	case c.DataDir != "":
		return DurabilityFsync
	case c.IsReplicas():
		return DurabilityNone
	}
	return DurabilityMemory
}

// onDisk reports whether the publication log is written to the data
// directory (durability fsync or write).
func (c *BrokerConfig) onDisk() bool {
	d := c.EffectiveDurability()
	return d == DurabilityFsync || d == DurabilityWrite
}

// errLogFailed prefixes the PubAcks refused after a failed append.
const errLogFailed = "backpressure: publication log failed"

// pubLog is the runtime's side of the publication log: it carries out
// the core's Ready.Appends (one batch per drain round: group commit) and
// Ready.Released.
type pubLog struct {
	log  storage.Log
	sync bool // fsync each batch before its PubAcks (durability fsync)
	// failed is the first append error. From then on no publication is
	// acknowledged by this incarnation (the core took the failed batch
	// for logged, and would acknowledge a resend of it): every PubAck
	// becomes a refusal until the broker is restarted and recovers what
	// was logged. Owned by the Run goroutine; failedMsg for Health.
	failed error

	fsyncSeconds prometheus.Histogram
	appends      prometheus.Counter

	// syncer syncs the appends every syncEvery with durability write
	// (nil with fsync).
	syncer *syncer
}

// persistHeld reports whether what durable subscriptions hold here is kept
// in the data directory (the held log): with a log on disk, and
// durable_keep on.
func (c *BrokerConfig) persistHeld() bool {
	return c.onDisk() && c.keepAwayTicks() > 0
}

// OpenLog opens the publication log in st (with durability fsync or write),
// hands what it holds to the core (which continues every logged source's
// sequence and offers the unsafe publications again once joined) and
// registers its metrics. Call before Run. An unreadable log is an error
// naming its path: the broker must not start on top of it.
func (r *Runtime) OpenLog(st storage.Store) error {
	d := r.cfg.EffectiveDurability()
	if !r.cfg.onDisk() {
		return nil // none, or memory: the core's log is all there is
	}
	if st == nil {
		return errors.New("runtime: durability " + d + " needs a data directory (data_dir, --data-dir)")
	}
	l, err := st.OpenLog()
	if err != nil {
		return err
	}
	rec, err := l.Recover()
	if err != nil {
		l.Close()
		return err
	}
	r.node.Restore(rec.Last, rec.Pubs)
	pl := &pubLog{log: l, sync: d == DurabilityFsync}
	pl.fsyncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "deltapub_log_append_seconds",
		Help:    "Time to append one batch of publications to the log (group commit), its fsync included with durability fsync.",
		Buckets: prometheus.ExponentialBuckets(20e-6, 2, 18), // 20 µs … 2.6 s
	})
	pl.appends = prometheus.NewCounter(prometheus.CounterOpts{Name: "deltapub_log_appended_total", Help: "Publications appended to the log."})
	stat := func(f func(s storage.LogStats) float64) func() float64 {
		return func() float64 { return f(l.Stats()) }
	}
	r.m.reg.MustRegister(pl.fsyncSeconds, pl.appends,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "deltapub_log_bytes", Help: "Publications retained in the log (not yet safe downstream), in bytes as limits.max_log_bytes counts them."},
			stat(func(s storage.LogStats) float64 { return float64(s.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "deltapub_log_records", Help: "Publications retained in the log."},
			stat(func(s storage.LogStats) float64 { return float64(s.Records) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "deltapub_log_sources", Help: "Sources with publications retained in the log (their ranges: /state log.sources)."},
			stat(func(s storage.LogStats) float64 { return float64(len(s.Sources)) })),
	)
	r.plog = pl
	if !pl.sync {
		pl.syncer = startSyncer(l, r.log, "publication log sync failed (durability write): a process crash may lose more than the last 100 ms of acknowledged publications")
	}
	if len(rec.Pubs) > 0 {
		r.log.Info().Int("publications", len(rec.Pubs)).Int("sources", len(rec.Last)).Msg("publication log recovered: offering its unsafe publications again once joined")
	}
	return r.openHeld(st)
}

// openHeld opens the held log in st (with durable_keep on) and gives the
// core the durable subscriptions it holds, installed again once joined.
func (r *Runtime) openHeld(st storage.Store) error {
	if !r.cfg.persistHeld() {
		return nil
	}
	l, err := st.OpenHeld()
	if err != nil {
		return err
	}
	subs, err := l.Load()
	if err != nil {
		l.Close()
		return err
	}
	r.node.RestoreHeld(subs)
	r.hlog = newHeldLog(l, r.log)
	stat := func(f func(s storage.HeldStats) float64) func() float64 {
		return func() float64 { return f(l.Stats()) }
	}
	r.m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "deltapub_held_subscriptions", Help: "Durable subscriptions whose held records are kept in the data directory (the held log)."},
			stat(func(s storage.HeldStats) float64 { return float64(s.Subs) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "deltapub_held_publications", Help: "Publications kept in the held log (once each, however many subscriptions hold them)."},
			stat(func(s storage.HeldStats) float64 { return float64(s.Events) })),
	)
	if len(subs) > 0 {
		r.log.Info().Int("subscriptions", len(subs)).Msg("held log recovered: installing its durable subscriptions again once joined")
	}
	return nil
}

// syncer syncs a log written without sync (the held log; the publication
// log with durability write) every storage.SyncEvery while it changes, in
// a goroutine of its own: what a crash may lose of it. pebble keeps a
// commit without sync in its own buffers until a later write fills a
// block or syncs (pebble#2624), so without it even a process crash could
// lose a write for long.
type syncer struct {
	dirty atomic.Bool // written since the last sync
	stop  chan struct{}
	done  chan struct{}
}

// startSyncer starts syncing l; a failure is logged with msg once, and
// again only after a success.
func startSyncer(l interface{ Sync() error }, log zerolog.Logger, msg string) *syncer {
	s := &syncer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(storage.SyncEvery)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			if !s.dirty.Swap(false) {
				continue
			}
			err := l.Sync()
			if err != nil && !failing {
				log.Warn().Err(err).Msg(msg)
			}
			failing = err != nil
		}
	}()
	return s
}

// written marks the log written since the last sync.
func (s *syncer) written() { s.dirty.Store(true) }

// close stops the syncer (closing the log makes the rest durable).
func (s *syncer) close() {
	close(s.stop)
	<-s.done
}

// maxHeldBatches bounds the batches of held changes waiting for the writer: at
// the bound the run loop waits for it (the disk paces the broker rather
// than memory growing).
const maxHeldBatches = 256

// heldLog is the runtime's side of the held log: a writer goroutine
// applies Ready.Held in order (the run loop only hands the batches over;
// no delivery waits for the disk), and a syncer syncs what it wrote.
type heldLog struct {
	log    storage.HeldLog
	q      chan *overlay.HeldChanges
	stop   chan struct{}
	done   chan struct{}
	syncer *syncer
	// failed: an Apply failed. Nothing is applied from then on, so that
	// the log keeps a prefix of the changes (what a restart can restore:
	// overlay/held.go); resumes here still work from memory.
	failed atomic.Bool
}

func newHeldLog(l storage.HeldLog, log zerolog.Logger) *heldLog {
	h := &heldLog{log: l, q: make(chan *overlay.HeldChanges, maxHeldBatches), stop: make(chan struct{}), done: make(chan struct{}),
		syncer: startSyncer(l, log, "held log sync failed: a crash may lose more of what durable subscriptions hold here (their resumes then flood)")}
	go h.write(log)
	return h
}

// write is the writer: it applies the batches in order until stop (after
// the batches queued before it). A failure is logged once.
func (h *heldLog) write(log zerolog.Logger) {
	defer close(h.done)
	apply := func(c *overlay.HeldChanges) {
		if h.failed.Load() {
			return
		}
		if err := h.log.Apply(c); err != nil {
			h.failed.Store(true)
			log.Error().Err(err).Msg("held log write failed: this broker keeps no more of what its durable subscriptions hold; a restart restores what was written before")
			return
		}
		h.syncer.written()
	}
	for {
		select {
		case c := <-h.q:
			apply(c)
		case <-h.stop:
			for {
				select {
				case c := <-h.q:
					apply(c)
				default:
					return
				}
			}
		}
	}
}

// persistHeld hands rd.Held to the writer.
func (r *Runtime) persistHeld(rd *overlay.Ready) {
	h := r.hlog
	if h == nil || h.failed.Load() || rd.Held.Empty() {
		return
	}
	c := rd.Held
	h.q <- &c
}

// persist carries out the log's part of rd before its ToClients are sent:
// one append (and sync) for the round's publications, then the releases.
func (r *Runtime) persist(rd *overlay.Ready) {
	r.persistHeld(rd)
	pl := r.plog
	if pl == nil || (len(rd.Appends) == 0 && len(rd.Released) == 0) {
		return
	}
	if len(rd.Appends) > 0 && pl.failed == nil {
		t0 := time.Now()
		if err := pl.log.Append(rd.Appends, pl.sync); err != nil {
			pl.failed = err
			r.logHasFailed.Store(true)
			r.log.Error().Err(err).Msg("publication log append failed: this broker acknowledges no publication until it is restarted")
		} else {
			pl.fsyncSeconds.Observe(time.Since(t0).Seconds())
			pl.appends.Add(float64(len(rd.Appends)))
			if pl.syncer != nil {
				pl.syncer.written()
			}
		}
	}
	if len(rd.Released) > 0 && pl.failed == nil {
		rs := make([]storage.Release, len(rd.Released))
		for i, id := range rd.Released {
			rs[i] = storage.Release{Source: id.Source(), Seq: id.Seq}
		}
		if err := pl.log.Release(rs); err != nil {
			// Harmless for safety (the publications are only offered
			// again after a restart), but the log stops shrinking.
			r.log.Warn().Err(err).Msg("publication log release failed")
		}
	}
	if pl.failed != nil {
		refuseAcks(rd.ToClients, pl.failed)
	}
}

// refuseAcks turns every successful PubAck in out into a refusal.
func refuseAcks(out []overlay.ClientEnvelope, why error) {
	for i := range out {
		if a, ok := out[i].Msg.(*message.PubAck); ok && a.Err == "" {
			out[i].Msg = &message.PubAck{Seq: a.Seq, Err: fmt.Sprintf("%s (%v)", errLogFailed, why)}
		}
	}
}

// logFailed is the log's failure, if any (Health).
func (r *Runtime) logFailed() error {
	if r.plog == nil {
		return nil
	}
	return r.plog.failed
}

// closeLog closes the log at shutdown.
func (r *Runtime) closeLog() {
	if r.hlog != nil {
		close(r.hlog.stop)
		<-r.hlog.done
		r.hlog.syncer.close()
		if err := r.hlog.log.Close(); err != nil {
			r.log.Warn().Err(err).Msg("closing the held log")
		}
		r.hlog = nil
	}
	if r.plog == nil {
		return
	}
	if r.plog.syncer != nil {
		r.plog.syncer.close()
	}
	if err := r.plog.log.Close(); err != nil {
		r.log.Warn().Err(err).Msg("closing the publication log")
	}
	r.plog = nil
}

// LogState is the log's part of /state.
type LogState struct {
	Durability string                `json:"durability"`
	Bytes      int64                 `json:"bytes"`
	Records    int                   `json:"records"`
	Sources    []storage.SourceRange `json:"sources,omitempty"` // retained range per source
	Failed     string                `json:"failed,omitempty"`
}

func (r *Runtime) logState() *LogState {
	if r.plog == nil {
		return nil
	}
	s := r.plog.log.Stats()
	ls := &LogState{Durability: r.cfg.EffectiveDurability(), Bytes: s.Bytes, Records: s.Records, Sources: s.Sources}
	if r.plog.failed != nil {
		ls.Failed = r.plog.failed.Error()
	}
	return ls
}

// HeldState is the held log's part of /state.
type HeldState struct {
	Subscriptions int  `json:"subscriptions"` // durable subscriptions with a record
	Publications  int  `json:"publications"`  // publications kept, once each
	Queued        int  `json:"queued"`        // batches waiting for the writer
	Failed        bool `json:"failed,omitempty"`
}

func (r *Runtime) heldState() *HeldState {
	h := r.hlog
	if h == nil {
		return nil
	}
	s := h.log.Stats()
	return &HeldState{Subscriptions: s.Subs, Publications: s.Events, Queued: len(h.q), Failed: h.failed.Load()}
}
