package storage

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

// HeldLog keeps what the durable subscriptions of a subscriber hosting
// broker (SHB) hold for a resume there, across a restart: the Gryphon
// paper's persistent filtering log (docs/durable.md "An edge that
// restarts"; overlay/held.go decides what it holds). Each publication is
// kept once, however many subscriptions hold it; per subscription an index
// of the seqs and Gaps it holds, its floor and its position.
//
// Apply carries out one Ready's changes as one atomic write, not synced:
// the core's argument needs only that a crash keeps a prefix of the
// changes. Sync makes every change applied before it durable (a process
// crash and a machine crash keep it); the runtime calls it every SyncEvery
// while changes come, so a crash loses at most the changes of that long. Load
// gives back what the changes kept say.
type HeldLog interface {
	Apply(c *overlay.HeldChanges) error
	Sync() error
	Load() ([]overlay.HeldSub, error)
	Stats() HeldStats
	Close() error
}

// SyncEvery is how often a broker syncs a log it writes without sync (the
// held log; the publication log with durability write) while it changes:
// what a crash may lose of it. The simulator models the same.
const SyncEvery = 100 * time.Millisecond

// HeldStats describes a held log.
type HeldStats struct {
	Subs   int // durable subscriptions with a record
	Events int // publications kept (once each)
}

// heldMeta is a subscription's filter and floor.
type heldMeta struct {
	Filter string                    `json:"filter"`
	Floor  map[message.Source]uint64 `json:"-"`
	Floors []message.SourceSeq       `json:"floor,omitempty"` // Floor, sorted (the stored form)
}

func (m *heldMeta) sorted() []message.SourceSeq {
	out := make([]message.SourceSeq, 0, len(m.Floor))
	for _, s := range slices.SortedFunc(maps.Keys(m.Floor), cmpSource) {
		out = append(out, message.SourceSeq{Source: s, Seq: m.Floor[s]})
	}
	return out
}

func cmpSource(a, b message.Source) int {
	if c := strings.Compare(a.Publisher, b.Publisher); c != 0 {
		return c
	}
	return cmp.Compare(a.Epoch, b.Epoch)
}

// heldSub assembles a loaded subscription; get finds a held publication.
func heldSub(name string, m *heldMeta, token []byte, recs []overlay.HeldRecord, get func(message.PubID) (*message.Pub, error)) (overlay.HeldSub, error) {
	f, err := matching.ParseFilter(m.Filter)
	if err != nil {
		return overlay.HeldSub{}, fmt.Errorf("durable subscription %q: filter %q: %w", name, m.Filter, err)
	}
	h := overlay.HeldSub{Name: name, Filter: f, Floor: m.sorted(), Token: token}
	for _, r := range recs {
		if r.GapFrom > 0 {
			h.Records = append(h.Records, &message.Gap{Source: r.Source, From: r.GapFrom, To: r.Seq})
			continue
		}
		id := message.PubID{Publisher: r.Source.Publisher, Epoch: r.Source.Epoch, Seq: r.Seq}
		p, err := get(id)
		if err != nil {
			return overlay.HeldSub{}, fmt.Errorf("durable subscription %q holds %s: %w", name, id, err)
		}
		h.Records = append(h.Records, &message.Deliver{Pub: p.ID, Attrs: p.Attrs, Payload: p.Payload, Time: p.Time})
	}
	return h, nil
}

// MemoryHeld is a HeldLog in memory: the simulator's, which outlives a
// broker's crashes as a data directory would. Safe for concurrent use.
type MemoryHeld struct {
	mu     sync.Mutex
	events map[message.PubID]message.Pub
	subs   map[string]*memHeldSub
}

type memHeldSub struct {
	meta  heldMeta
	token []byte
	recs  []overlay.HeldRecord // per source in seq order (sources interleaved)
}

var _ HeldLog = (*MemoryHeld)(nil)

// NewMemoryHeld returns an empty held log.
func NewMemoryHeld() *MemoryHeld {
	return &MemoryHeld{events: map[message.PubID]message.Pub{}, subs: map[string]*memHeldSub{}}
}

// Apply implements HeldLog.
func (l *MemoryHeld) Apply(c *overlay.HeldChanges) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range c.Events {
		p.Stamps = nil
		l.events[p.ID] = p
	}
	for i := range c.Subs {
		ch := &c.Subs[i]
		if ch.Start != nil {
			m := heldMeta{Filter: ch.Start.Filter, Floor: map[message.Source]uint64{}}
			for _, f := range ch.Start.Floor {
				m.Floor[f.Source] = f.Seq
			}
			l.subs[ch.Name] = &memHeldSub{meta: m}
		}
		s := l.subs[ch.Name]
		if s == nil {
			continue // changes of a subscription that never started: nothing to keep
		}
		s.recs = append(s.recs, ch.Records...)
		for _, f := range ch.Floor {
			s.meta.Floor[f.Source] = max(s.meta.Floor[f.Source], f.Seq)
			s.recs = slices.DeleteFunc(s.recs, func(r overlay.HeldRecord) bool { return r.Source == f.Source && r.Seq <= f.Seq })
		}
		if ch.Token != nil {
			s.token = slices.Clone(ch.Token)
		}
		if ch.Drop {
			delete(l.subs, ch.Name)
		}
	}
	for _, id := range c.Dropped {
		delete(l.events, id)
	}
	return nil
}

// Load implements HeldLog.
func (l *MemoryHeld) Load() ([]overlay.HeldSub, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []overlay.HeldSub
	for _, name := range slices.Sorted(maps.Keys(l.subs)) {
		s := l.subs[name]
		recs := slices.Clone(s.recs)
		slices.SortStableFunc(recs, func(a, b overlay.HeldRecord) int { return cmpSource(a.Source, b.Source) })
		h, err := heldSub(name, &s.meta, s.token, recs, func(id message.PubID) (*message.Pub, error) {
			p, ok := l.events[id]
			if !ok {
				return nil, fmt.Errorf("storage: held log: publication missing")
			}
			return &p, nil
		})
		if err != nil {
			return nil, fmt.Errorf("storage: held log: %w", err)
		}
		out = append(out, h)
	}
	return out, nil
}

// Stats implements HeldLog.
func (l *MemoryHeld) Stats() HeldStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return HeldStats{Subs: len(l.subs), Events: len(l.events)}
}

// Sync implements HeldLog: in memory, everything applied is kept.
func (l *MemoryHeld) Sync() error { return nil }

// Close implements HeldLog.
func (l *MemoryHeld) Close() error { return nil }
