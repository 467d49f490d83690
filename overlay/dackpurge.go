// DACKs and purging: the aggregated DACK sent on each link, the entries
// relayed in it, DACKs received, and the purge of queued publications every
// recipient has (with the discarded watermarks this broker reports).

package overlay

import (
	"github.com/deltapub/deltapub/dack"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// dackLinks sends the aggregated DACKs: each link carries at most one
// DACK per DACKTicks ticks, whatever the publication rate (aggregation).
// When it goes out within that budget is chosen so that relays pipeline
// (dackDue). Own discarded watermarks are refreshed right before any DACK
// is built.
func (n *Node) dackLinks() {
	ver := n.store.Version()
	due := false
	for _, p := range n.peers {
		if p.up && (p.dackSent != ver || n.fwd.discDirty) && n.dackDue(p) {
			due = true
			break
		}
	}
	if !due {
		return
	}
	if n.fwd.discDirty {
		n.fwd.discDirty = false
		n.updateDiscarded()
	}
	n.geometry()
	ver = n.store.Version()
	for _, id := range n.sortedPeers() {
		p := n.peers[id]
		if !p.up || !n.dackDue(p) || p.dackSent == ver {
			continue
		}
		pside := n.geo.side[id]
		if pside == "" {
			pside = id
		}
		entries := n.store.Build(p.dackSent, func(reporter, about message.BrokerID) bool {
			return n.dackRelays(reporter, about, pside)
		})
		p.dackSent = ver
		if len(entries) == 0 {
			continue
		}
		p.dackAt = n.now
		n.send(id, &message.DAck{Entries: entries})
	}
}

// dackRelays reports whether the DACK on the link toward side pside
// carries the entry (reporter, about): entries about brokers on that side,
// either our own or relayed from a reporter on another side within δ+1
// hops of the broker it is about.
func (n *Node) dackRelays(reporter, about, pside message.BrokerID) bool {
	if about == n.cfg.ID {
		return false
	}
	as := n.geo.side[about]
	if as == "" {
		as = about
	}
	if as != pside {
		return false
	}
	if reporter != n.cfg.ID {
		rs, ok := n.geo.side[reporter]
		if !ok || rs == pside {
			return false
		}
		if n.geo.dist[reporter]+n.geo.dist[about] > n.cfg.Delta+1 {
			return false
		}
	}
	return true
}

// dackDue reports whether the DACK on link p may go out this tick: never
// within DACKTicks ticks of the previous one on that link (one DACK per
// link per period, whatever the publication rate). At the first allowed
// tick it is held back one tick if another neighbour's DACK is due in this
// very tick — one arrived in the tick of our last DACK on p (that link
// runs at our phase) and none since — so that its reports are relayed
// with ours a tick later rather than a period later. Why: the drain after
// publishing stops is a chain of relays up to δ+1 hops back to the
// stamping broker (docs/protocol.md §6); when traffic starts everywhere
// at once every link runs at the same phase and each relay hop costs a
// whole period, while with this rule a link settles a tick behind its
// inputs (leaves first), so a chain costs about a tick per hop. The hold
// is one tick at most: a period of a link is DACKTicks or DACKTicks+1.
func (n *Node) dackDue(p *peer) bool {
	late := n.now - p.dackAt - int64(n.cfg.DACKTicks)
	if late != 0 {
		return late > 0
	}
	for _, k := range n.peers {
		if k != p && k.up && k.dackIn > 0 && k.dackIn == p.dackAt {
			return false
		}
	}
	return true
}

func (n *Node) onDAck(from message.BrokerID, m *message.DAck) {
	if p, ok := n.peers[from]; ok {
		p.dackIn = n.now
	}
	changed := false
	for _, e := range m.Entries {
		if e.Reporter == n.cfg.ID || e.Reporter == "" || e.About == "" {
			continue
		}
		if e.About == n.cfg.ID && e.AE != n.cfg.Epoch {
			continue
		}
		if n.store.Put(e) && e.About == n.cfg.ID {
			changed = true
		}
	}
	if changed {
		// Purge at once rather than on the next tick: the drain after
		// publishing stops is a chain of DACK hops, and each would
		// otherwise wait up to a tick more. One pass per DACK received,
		// i.e. at most one per link per DACK period: bounded whatever the
		// publication rate.
		n.purge()
	}
}

// purge drops every queued publication that is safe for all its
// recipients (dack.Safe along the tree path to each), and compacts the
// queue.
func (n *Node) purge() {
	n.fwd.purgeDirty = false
	// One threshold per recipient (dack.Threshold ≡ dack.Safe for every
	// stamp at once), then one comparison per queued recipient.
	th := map[message.BrokerID]uint64{}
	kept := n.fwd.queue[:0]
	for _, e := range n.fwd.queue {
		all := true
		for i, r := range e.recips {
			if e.safe[i] {
				continue
			}
			t, ok := th[r]
			if !ok {
				t = n.recipThreshold(r)
				th[r] = t
			}
			if e.stamp <= t {
				e.safe[i] = true
			} else {
				all = false
			}
		}
		if all {
			e.purged = true
			n.fwd.queueLen--
			n.fwd.discDirty = true
			n.counters.Purged++
			continue
		}
		kept = append(kept, e)
	}
	clear(n.fwd.queue[len(kept):])
	n.fwd.queue = kept
}

// recipThreshold is dack.Threshold over the tree path to r without this
// broker (0 when r is unknown or this broker).
func (n *Node) recipThreshold(r message.BrokerID) uint64 {
	path := n.pathTo(r)
	if len(path) <= 1 {
		return 0
	}
	return dack.Threshold(path[1:], n.store.About)
}

// updateDiscarded sets this broker's discarded watermark about each
// upstream broker U: every publication received with a U-stamp up to it
// is no longer queued here (nor held by a duplicate, dupHolds).
func (n *Node) updateDiscarded() {
	type pair struct {
		b message.BrokerID
		e uint64
	}
	low := map[pair]uint64{} // the lowest queued U-stamp per (B, E)
	for _, e := range n.fwd.queue {
		if e.purged {
			continue
		}
		for _, s := range e.pub.Stamps[1:] {
			k := pair{s.B, s.E}
			if v, ok := low[k]; !ok || s.S < v {
				low[k] = s.S
			}
		}
	}
	caps := map[pair]uint64{} // discarded stays below these
	for k, s := range low {
		caps[k] = s - 1 // wraps for S = 0: no cap
	}
	holds := n.fwd.dupHolds[:0]
	for _, d := range n.fwd.dupHolds {
		if d.e.purged {
			continue // the queued copy left: the hold is released
		}
		holds = append(holds, d)
		k := pair{d.s.B, d.s.E}
		c, ok := caps[k]
		if !ok {
			c = ^uint64(0)
		}
		caps[k] = min(c, d.s.S-1)
	}
	clear(n.fwd.dupHolds[len(holds):])
	n.fwd.dupHolds = holds
	for _, o := range n.store.OwnKeys() {
		c, ok := caps[pair{o.B, o.E}]
		if !ok {
			c = ^uint64(0) // none queued: discarded up to arrived
		}
		n.store.SetDiscarded(o.B, o.E, c)
	}
}

// releaseRecipients recomputes the recipients of every queued publication
// after subscriptions were withdrawn on behalf of a gone broker: what was
// queued only for it is released.
func (n *Node) releaseRecipients() {
	for _, e := range n.fwd.queue {
		if e.purged {
			continue
		}
		pm := matching.Publication{Attrs: e.pub.Attrs}
		now := n.table.Recipients(&pm, e.except, nil, nil)
		var recips []message.BrokerID
		var safe []bool
		for i, r := range e.recips {
			for _, x := range now {
				if x == r {
					recips = append(recips, r)
					safe = append(safe, e.safe[i])
					break
				}
			}
		}
		e.recips, e.safe = recips, safe
	}
	n.purge()
}
