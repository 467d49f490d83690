package overlay

import (
	"math"

	"github.com/deltapub/deltapub/message"
)

// ErrLogFull refuses a publication while the publication log holds
// Config.MaxLogBytes of publications not yet safe downstream. It begins
// with "backpressure", so clients retry it paced, as any backpressure.
const ErrLogFull = "backpressure: publication log full"

// The publication log (docs/durable.md, docs/protocol.md §"Log once").
// With Config.Durable the core decides what the log holds, and the
// environment carries it out, like etcd/raft's "entries to persist before
// messages are sent":
//
//   - every publication accepted from a local client is in Ready.Appends;
//     its PubAck is in the same Ready's ToClients, and the environment
//     must persist Appends before it sends ToClients (it may send
//     Messages first: a publication may travel before it is
//     acknowledged, see the protocol's argument);
//   - Ready.Released reports, per local source, the seq up to which its
//     publications are safe (out of the queue: proven safe for every
//     recipient, or never queued): the environment may drop them from
//     the log;
//   - a broker restarted with its log is given its content (Restore)
//     before it starts; once joined it offers the retained publications
//     again under their original identity, and it continues every
//     logged source's sequence.

// durableState is the core's view of the publication log.
type durableState struct {
	on    bool
	max   int64 // Config.MaxLogBytes
	bytes int64 // message.LogSize of every publication not yet released
	src   map[message.Source]*durSrc
	order []message.Source // sources in the order first logged (the bound)
	// recover holds the logged publications to offer again once joined
	// (Restore), per source in seq order.
	recover []message.Pub
	// purged is Counters.Purged when the safe watermarks were last
	// computed: they can only advance when the queue lost entries or a
	// publication was logged (dirty).
	purged uint64
	dirty  bool
	// retain: released publications are kept until the retention
	// (Config.RetainTicks, RetainBytes) lets them go; kept is the bytes of
	// those already safe downstream (they do not count toward MaxLogBytes).
	retain bool
	kept   int64
}

// durSrc is one local source's log state.
type durSrc struct {
	last  uint64      // last seq logged
	safe  uint64      // seq up to which Released was reported
	sizes fifo[int64] // LogSize of the publications safe+1 … last
	// With retention (Config.RetainTicks or RetainBytes, dursub.go): ok is
	// the seq up to which the queue made them safe (safe ≤ ok ≤ last);
	// pubs and ticks (when logged, or restored) are the publications
	// safe+1 … last, kept to answer durable subscriptions' catchups.
	ok   uint64
	pubs fifo[retained]
	// born is the tick x was first logged at in this incarnation
	// (math.MinInt64: restored, older than that); rel the tick the newest
	// publication released from pubs was logged at (math.MinInt64: none
	// yet; a restored source: the restart, before which nothing is known).
	// windowStart reads them.
	born, rel int64
}

// retained is a publication of the log kept for catchups, with the tick
// it was logged (or restored) at.
type retained struct {
	pub  message.Pub
	tick int64
}

func (d *durableState) init(cfg *Config) {
	d.on = cfg.Durable
	d.max = cfg.MaxLogBytes
	d.src = map[message.Source]*durSrc{}
	d.retain = cfg.Durable && (cfg.RetainTicks > 0 || cfg.RetainBytes > 0)
}

// source returns the state of s, creating it (and forgetting, at the
// MaxSources bound, the oldest sources with nothing unreleased).
func (n *Node) durSource(s message.Source) *durSrc {
	d := &n.dur
	if x := d.src[s]; x != nil {
		return x
	}
	x := &durSrc{born: n.now, rel: math.MinInt64}
	d.src[s] = x
	d.order = append(d.order, s)
	if excess := len(d.order) - n.cfg.MaxSources; excess > 0 {
		kept := d.order[:0]
		for _, o := range d.order {
			if excess > 0 && d.src[o].sizes.Len() == 0 && o != s {
				delete(d.src, o)
				excess--
				continue
			}
			kept = append(kept, o)
		}
		clear(d.order[len(kept):])
		d.order = kept
	}
	return x
}

// logFull reports whether a new publication must be refused (ErrLogFull).
func (n *Node) logFull() bool {
	return n.dur.on && n.dur.max > 0 && n.dur.bytes-n.dur.kept >= n.dur.max
}

// logAppend records the accepted local publication p in the log.
func (n *Node) logAppend(p *message.Pub) {
	if !n.dur.on {
		return
	}
	x := n.durSource(p.ID.Source())
	sz := p.LogSize()
	if x.sizes.Len() == 0 {
		x.safe = p.ID.Seq - 1
	}
	x.last = p.ID.Seq
	x.sizes.Push(sz)
	n.dur.bytes += sz
	n.dur.dirty = true
	lp := message.Pub{ID: p.ID, Attrs: p.Attrs, Payload: p.Payload, Time: p.Time}
	if !n.cfg.MemoryLog {
		n.out.Appends = append(n.out.Appends, lp)
	}
	n.keep(x, lp)
}

// restoredSource is durSource for a source of a restored log: older than
// this incarnation, and what was released before the restart unknown.
func (n *Node) restoredSource(s message.Source) *durSrc {
	x := n.durSource(s)
	x.born, x.rel = math.MinInt64, n.now
	return x
}

// Restore gives a broker restarted with its log what the log holds, before
// Bootstrap or Join: last is every logged source's last seq, pubs the
// publications not released (per source in seq order). A publisher of
// such a source continues its sequence here (a resend of a logged
// publication is acknowledged, not published twice), and pubs are offered
// to the overlay again once this broker is joined. Ignored without
// Config.Durable.
func (n *Node) Restore(last []message.PubID, pubs []message.Pub) {
	if !n.dur.on || n.mem.member {
		return
	}
	for _, id := range last {
		s := id.Source()
		x := n.restoredSource(s)
		x.last, x.safe = max(x.last, id.Seq), max(x.safe, id.Seq)
		st := n.fwd.seen[s]
		if st == nil {
			st = &srcState{}
			st.toward = st.tbuf[:0]
			n.fwd.seen[s] = st
			n.fwd.seenOrder = append(n.fwd.seenOrder, s)
		}
		st.seq = max(st.seq, id.Seq)
	}
	for i := range pubs {
		p := pubs[i]
		p.Stamps = nil
		x := n.restoredSource(p.ID.Source())
		if x.sizes.Len() == 0 {
			x.safe = p.ID.Seq - 1
		}
		x.last = max(x.last, p.ID.Seq)
		sz := p.LogSize()
		x.sizes.Push(sz)
		n.dur.bytes += sz
		n.dur.recover = append(n.dur.recover, p)
		n.keep(x, p)
	}
}

// reoffer sends the restored publications into the overlay, once joined,
// before anything a client publishes here: under their original identity,
// so brokers that had them already drop the copies as duplicates.
func (n *Node) reoffer() {
	if len(n.dur.recover) == 0 {
		return
	}
	pubs := n.dur.recover
	n.dur.recover = nil
	for i := range pubs {
		p := &pubs[i]
		s := p.ID.Source()
		st := n.fwd.seen[s]
		last := uint64(0)
		if st != nil {
			last = st.seq
		}
		n.counters.Reoffered++
		n.acceptSeen(s, st, p, "")
		n.fwd.seen[s].seq = max(last, p.ID.Seq)
	}
	n.dur.dirty = true
}

// durableTick reports the safe watermarks that advanced (Ready.Released),
// once per DACK period: it scans the whole queue, and a release that
// waits that long only keeps the log a little longer.
func (n *Node) durableTick() {
	d := &n.dur
	if !d.on || !n.mem.joined || len(d.recover) > 0 || n.now%int64(n.cfg.DACKTicks) != 0 {
		return
	}
	expire := d.retain && d.bytes > 0
	if !d.dirty && d.purged == n.counters.Purged && !expire {
		return
	}
	d.dirty, d.purged = false, n.counters.Purged
	var low map[message.Source]uint64 // lowest queued seq per local source
	for _, e := range n.fwd.queue {
		if e.purged || e.except != "" {
			continue
		}
		if low == nil {
			low = map[message.Source]uint64{}
		}
		s := e.pub.ID.Source()
		if v, ok := low[s]; !ok || e.pub.ID.Seq < v {
			low[s] = e.pub.ID.Seq
		}
	}
	for _, s := range d.order {
		x := d.src[s]
		if x.sizes.Len() == 0 {
			continue
		}
		safe := x.last
		if v, ok := low[s]; ok {
			safe = v - 1
		}
		if d.retain {
			n.retainSafe(x, safe)
			safe = n.retainedUpTo(x)
		}
		if safe <= x.safe {
			continue
		}
		k := int(min(safe-x.safe, uint64(x.sizes.Len())))
		for i := range k {
			d.bytes -= *x.sizes.At(i)
		}
		x.sizes.Drop(k)
		x.safe = safe
		if !n.cfg.MemoryLog {
			n.out.Released = append(n.out.Released, message.PubID{Publisher: s.Publisher, Epoch: s.Epoch, Seq: safe})
		}
	}
}

// LogStatus describes the core's view of the log (Status.Log).
type LogStatus struct {
	Bytes   int64 // publications not yet released, as message.LogSize counts
	Pending int   // publications not yet released
	Reoffer int   // restored publications waiting to be offered again
}

func (n *Node) logStatus() LogStatus {
	st := LogStatus{Bytes: n.dur.bytes, Reoffer: len(n.dur.recover)}
	for _, x := range n.dur.src {
		st.Pending += x.sizes.Len()
	}
	return st
}
