package sim

import (
	"github.com/deltapub/deltapub/internal/storage"
	"github.com/deltapub/deltapub/overlay"
)

// The publication log in the simulator (Config.Core.Durable). Each broker
// has an in-memory log that outlives its crashes; a Ready is carried out
// whole, so a crash keeps exactly the appends of the Readys carried out
// before it (what a runtime had synced before the PubAcks it sent), and
// loses what the core had not output yet.
//
// The guarantee then covers the publishers of a crashed edge: their
// acknowledged publications are owed to every subscriber once the edge is
// restarted with its data (restart ... data), which offers the log's
// unsafe publications again. Restarted without it, or never, they are
// excluded as before (the log is lost with the data directory).

// persist carries out r's log part for b.
func (s *Sim) persist(b *broker, r *overlay.Ready) {
	if b.log == nil {
		b.log = storage.NewMemoryLog()
	}
	if len(r.Appends) > 0 {
		if err := b.log.Append(r.Appends, true); err != nil && s.err == nil {
			s.err = err
		}
	}
	if len(r.Released) > 0 {
		rs := make([]storage.Release, len(r.Released))
		for i, id := range r.Released {
			rs[i] = storage.Release{Source: id.Source(), Seq: id.Seq}
		}
		_ = b.log.Release(rs) // never fails in memory
	}
}

// crashDurable remembers, when b keeps a log, the acknowledged
// publications of its publishers (excluded with them by the crash until a
// restart with the log makes them owed again).
func (s *Sim) crashDurable(b *broker) {
	if !s.cfg.Core.Durable {
		return
	}
	for _, c := range b.clients {
		if c.pub == nil {
			continue
		}
		for _, r := range c.pub.records {
			if r.AckedAt >= 0 {
				b.durable = append(b.durable, r)
			}
		}
	}
}

// restoreDurable gives a restarted b its log (withLog) or loses it.
func (s *Sim) restoreDurable(b *broker, withLog bool) {
	if !s.cfg.Core.Durable {
		return
	}
	if !withLog {
		b.log, b.durable = nil, nil
		return
	}
	if b.log != nil {
		rec, err := b.log.Recover()
		if err != nil && s.err == nil {
			s.err = err
		}
		b.node.Restore(rec.Last, rec.Pubs)
		s.tracef("%s restores its log: %d publications to offer again", b.id, len(rec.Pubs))
	}
	for _, r := range b.durable {
		r.Excluded = false
	}
	b.durable = nil
}
