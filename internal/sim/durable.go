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

// The held log (overlay/held.go) likewise outlives a crash, and is given
// back at a restart with the data; as in the runtime, changes are applied
// at once but synced only every storage.SyncEvery, and a crash loses those not
// synced yet.

// syncHeld applies b's held changes not synced yet, every storage.SyncEvery
// (at its ticks).
func (s *Sim) syncHeld(b *broker) {
	if len(b.heldPending) == 0 || s.now < b.heldSyncAt {
		return
	}
	if b.held == nil {
		b.held = storage.NewMemoryHeld()
	}
	for i := range b.heldPending {
		if err := b.held.Apply(&b.heldPending[i]); err != nil && s.err == nil {
			s.err = err
		}
	}
	clear(b.heldPending)
	b.heldPending = b.heldPending[:0]
	b.heldSyncAt = s.now + storage.SyncEvery
}

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
	if !r.Held.Empty() {
		b.heldPending = append(b.heldPending, r.Held) // syncHeld
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
	if n := len(b.heldPending); n > 0 {
		s.tracef("%s loses %d batches of held changes not synced", b.id, n)
		clear(b.heldPending)
		b.heldPending = b.heldPending[:0]
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

// restoreDurable gives a restarted b its log (withLog, and the log on
// disk) or loses it: a log kept in memory only (Core.MemoryLog) never
// survives a restart, whichever way the broker restarts.
func (s *Sim) restoreDurable(b *broker, withLog bool) {
	if !s.cfg.Core.Durable {
		return
	}
	if !withLog || s.cfg.Core.MemoryLog {
		b.log, b.durable, b.held = nil, nil, nil
		return
	}
	if b.held != nil {
		subs, err := b.held.Load()
		if err != nil && s.err == nil {
			s.err = err
		}
		b.node.RestoreHeld(subs)
		s.tracef("%s restores its held log: %d durable subscriptions to install again once joined", b.id, len(subs))
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
