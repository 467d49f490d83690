package overlay

import (
	"fmt"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
)

// Large state transfers (docs/protocol.md, "Large state transfers").
//
// A JoinReply or StateReply carries every subscription routed on the
// receiver's side, and a leave's TopoChange every subscription the leaver
// routes (Via): with enough subscriptions one frame cannot hold them (a
// peer's reader refuses a frame above Config.MaxFrame bytes or above
// wire.MaxFrameValues list values, and closes the link). Such a message is
// sent in parts, all on the same (FIFO) link and in the same Ready: the
// message itself (the head) with the first part and More = the number of
// message.Part that follow, then Part 1..More. The receiver keeps the head
// until its last part arrived and only then handles it, as one message:
// nothing acts on a partial state. A link that breaks in between loses the
// transfer (LinkUp and LinkDown drop it); the existing retries ask again
// (a joiner's next join attempt, a recovering broker's StateRequest on the
// new link, a flood's resend on LinkUp). A message that fits in one frame
// is sent exactly as before (More is omitted): brokers of an older version
// see no difference until the overlay outgrows one frame.

// minMaxFrame is the smallest Config.MaxFrame accepted (limits.max_frame's
// lower bound).
const minMaxFrame = 1 << 10

// maxPartsBytes bounds one split transfer to about 1 GiB: at most
// maxParts() parts of one frame each. At the bound a JoinReply is replaced
// by a refusal (the joiner tries the next joinpoint and reports
// join-failed with the reason), a StateReply is not sent (the requester
// completes its recovery without that side's state after GoneAfterTicks,
// with a gap notice), and a leave's routes are cut to what the parts hold
// (the brokers re-point the other entries to the last broker before the
// leaver: still routed, with a shorter bypass reach). A receiver refuses a
// head announcing more parts than its own bound. Each case gives a notice.
const maxPartsBytes = 1 << 30

// maxPartList bounds the entries of one part (wire.MaxListLen bounds any
// one list of a frame; half of it leaves room for the rest).
const maxPartList = wire.MaxListLen / 2

// listOverhead is what turning an empty (nil or omitted) list field into a
// list costs at most: the key, and a 5-byte array header.
var listOverhead = wire.Cost{Bytes: 8, Values: 2}

// assembly is a head whose parts are still arriving from one peer.
type assembly struct {
	head message.Message // a private copy: *JoinReply, *StateReply or *TopoChange
	more int             // parts announced
	got  int             // parts received
}

func (n *Node) maxParts() int { return max(64, maxPartsBytes/n.cfg.MaxFrame) }

// partBudget is what one part may take: 15/16 of the frame limit and of
// the reader's value bound. The part sizes are exact sums of encoded sizes;
// the margin only absorbs list headers and varint widths that grow with
// the counts.
func (n *Node) partBudget() wire.Cost {
	return wire.Cost{Bytes: n.cfg.MaxFrame - n.cfg.MaxFrame/16, Values: wire.MaxFrameValues - wire.MaxFrameValues/16}
}

// fitsFrame reports whether m, sent whole, is accepted by a peer's reader.
func (n *Node) fitsFrame(m message.Message) bool {
	c, err := wire.FrameCost(m)
	return err == nil && c.Bytes <= n.cfg.MaxFrame && c.Values <= wire.MaxFrameValues
}

// sendInParts sends m to `to` in parts if it needs them, and reports
// whether it did (false: the caller sends m as it is).
func (n *Node) sendInParts(to message.BrokerID, m message.Message) bool {
	switch h := m.(type) {
	case *message.JoinReply:
		if h.More != 0 || len(h.Subs) < 2 || n.fitsFrame(h) {
			return false
		}
		head := *h
		head.Subs = nil
		parts, ok := n.subParts(&head, h.Subs, to)
		if !ok {
			n.send(to, &message.JoinReply{Err: fmt.Sprintf("joinpoint %s: the state of %d subscriptions needs more than %d parts of limits.max_frame %d bytes",
				n.cfg.ID, len(h.Subs), n.maxParts(), n.cfg.MaxFrame)})
			return true
		}
		head.Subs, head.More = parts[0], len(parts)-1
		n.send(to, &head)
		n.sendSubParts(to, parts[1:])
		return true
	case *message.StateReply:
		if h.More != 0 || len(h.Subs) < 2 || n.fitsFrame(h) {
			return false
		}
		head := *h
		head.Subs = nil
		parts, ok := n.subParts(&head, h.Subs, to)
		if !ok {
			return true // not sent: the notice is given
		}
		head.Subs, head.More = parts[0], len(parts)-1
		n.send(to, &head)
		n.sendSubParts(to, parts[1:])
		return true
	case *message.TopoChange:
		if h.More != 0 || len(h.Via) == 0 || n.fitsFrame(h) {
			return false
		}
		head := *h
		head.Via = nil
		parts := n.viaParts(&head, h.Via, to)
		head.Via, head.More = parts[0], len(parts)-1
		n.send(to, &head)
		for i, p := range parts[1:] {
			n.send(to, &message.Part{N: i + 1, Via: p})
		}
		return true
	}
	return false
}

func (n *Node) sendSubParts(to message.BrokerID, parts [][]message.SubState) {
	for i, p := range parts {
		n.send(to, &message.Part{N: i + 1, Subs: p})
	}
}

// costOf measures v; a value the encoder refuses counts as a whole part,
// so that it travels alone (and fails there, as it did before parts).
func (n *Node) costOf(v any) wire.Cost {
	c, err := wire.ValueCost(v)
	if err != nil {
		return n.partBudget()
	}
	return c
}

// partHead is the cost of a Part without its entries.
func (n *Node) partHead() wire.Cost {
	c, err := wire.FrameCost(&message.Part{N: n.maxParts()})
	if err != nil {
		return wire.Cost{Bytes: 16, Values: 2}
	}
	return c.Add(listOverhead)
}

// subParts splits subs into the head's part and the Parts' (each part
// holds at least one entry). ok is false beyond maxParts (with a notice).
func (n *Node) subParts(head message.Message, subs []message.SubState, to message.BrokerID) (parts [][]message.SubState, ok bool) {
	budget, ph := n.partBudget(), n.partHead()
	switch h := head.(type) {
	case *message.JoinReply:
		h.More = n.maxParts() // the widest More
		defer func() { h.More = 0 }()
	case *message.StateReply:
		h.More = n.maxParts()
		defer func() { h.More = 0 }()
	}
	hc, err := wire.FrameCost(head)
	if err != nil {
		hc = budget
	}
	cur, start := hc.Add(listOverhead), 0
	for i := range subs {
		c := n.costOf(&subs[i])
		c.Values++ // the list element
		if i > start && (cur.Bytes+c.Bytes > budget.Bytes || cur.Values+c.Values > budget.Values || i-start >= maxPartList) {
			parts = append(parts, subs[start:i])
			start, cur = i, ph
		}
		cur = cur.Add(c)
	}
	parts = append(parts, subs[start:])
	if len(parts)-1 > n.maxParts() {
		n.notice(NoticeGap, to, fmt.Sprintf("%v of %d subscriptions needs %d parts, more than the bound %d (limits.max_frame %d): not sent",
			head.Type(), len(subs), len(parts)-1, n.maxParts(), n.cfg.MaxFrame))
		return nil, false
	}
	return parts, true
}

// viaParts splits a leave's routes into the head's part and the Parts'.
// A route (one path) whose subscriptions span several parts is repeated
// in each with its share. Beyond maxParts the routes are cut (see
// maxPartsBytes).
func (n *Node) viaParts(head *message.TopoChange, via []message.SubsVia, to message.BrokerID) [][]message.SubsVia {
	budget, ph := n.partBudget(), n.partHead()
	head.More = n.maxParts()
	hc, err := wire.FrameCost(head)
	head.More = 0
	if err != nil {
		hc = budget
	}
	var parts [][]message.SubsVia
	var part []message.SubsVia
	cur, count := hc.Add(listOverhead), 0
	closePart := func() {
		parts = append(parts, part)
		part, cur, count = nil, ph, 0
	}
	for _, g := range via {
		gc := n.costOf(&message.SubsVia{Path: g.Path}).Add(listOverhead)
		gc.Values++ // the list element
		if len(g.Subs) == 0 {
			part = append(part, g)
			cur = cur.Add(gc)
			continue
		}
		start, opened := 0, false
		for i := range g.Subs {
			c := n.costOf(&g.Subs[i])
			c.Values++
			need := c
			if !opened {
				need = need.Add(gc)
			}
			if count > 0 && (cur.Bytes+need.Bytes > budget.Bytes || cur.Values+need.Values > budget.Values || count >= maxPartList) {
				if opened {
					part = append(part, message.SubsVia{Path: g.Path, Subs: g.Subs[start:i]})
				}
				closePart()
				start, opened, need = i, false, c.Add(gc)
			}
			cur = cur.Add(need)
			opened = true
			count++
		}
		part = append(part, message.SubsVia{Path: g.Path, Subs: g.Subs[start:]})
	}
	parts = append(parts, part)
	if len(parts)-1 > n.maxParts() {
		n.notice(NoticeGap, to, fmt.Sprintf("the routes of the repair of %s need %d parts, more than the bound %d (limits.max_frame %d): the rest is re-pointed to the last broker before it",
			head.Leaver, len(parts)-1, n.maxParts(), n.cfg.MaxFrame))
		parts = parts[:n.maxParts()+1]
	}
	return parts
}

// reassemble is Step's first stage: a head announcing parts is kept (nil:
// nothing to handle yet), a Part completes it, and the completed head is
// returned to be handled as one message. Anything else passes through.
func (n *Node) reassemble(from message.BrokerID, m message.Message) message.Message {
	var more int
	switch h := m.(type) {
	case *message.JoinReply:
		more = h.More
	case *message.StateReply:
		more = h.More
	case *message.TopoChange:
		more = h.More
	case *message.Part:
		return n.onPart(from, h)
	default:
		return m
	}
	if more == 0 {
		return m
	}
	delete(n.assembling, from) // a new head: an unfinished one was abandoned
	if more < 0 || more > n.maxParts() {
		detail := fmt.Sprintf("%v announces %d parts, outside [1, %d] (limits.max_frame %d): ignored", m.Type(), more, n.maxParts(), n.cfg.MaxFrame)
		if _, join := m.(*message.JoinReply); join {
			n.notice(NoticeJoinFailed, from, detail)
		} else {
			n.notice(NoticeGap, from, detail)
		}
		return nil
	}
	// A private copy: the parts are appended to its lists, which may share
	// memory with the sender's (a simulation without the wire).
	var head message.Message
	switch h := m.(type) {
	case *message.JoinReply:
		c := *h
		c.Subs = append([]message.SubState(nil), h.Subs...)
		head = &c
	case *message.StateReply:
		c := *h
		c.Subs = append([]message.SubState(nil), h.Subs...)
		head = &c
	case *message.TopoChange:
		c := *h
		c.Via = append([]message.SubsVia(nil), h.Via...)
		head = &c
	}
	if n.assembling == nil {
		n.assembling = map[message.BrokerID]*assembly{}
	}
	n.assembling[from] = &assembly{head: head, more: more}
	return nil
}

func (n *Node) onPart(from message.BrokerID, p *message.Part) message.Message {
	a := n.assembling[from]
	if a == nil {
		return nil // its head was refused, or the transfer was dropped
	}
	if p.N != a.got+1 {
		// Not the next part: a sender bug or a broken stream. The
		// transfer is dropped; the retries ask again.
		delete(n.assembling, from)
		n.notice(NoticeGap, from, fmt.Sprintf("part %d of a %v where %d was expected: transfer dropped", p.N, a.head.Type(), a.got+1))
		return nil
	}
	a.got++
	switch h := a.head.(type) {
	case *message.JoinReply:
		h.Subs = append(h.Subs, p.Subs...)
		if !n.mem.member {
			n.mem.jn.wait = n.cfg.JoinRetryTicks // progress: the joinpoint answers
		}
	case *message.StateReply:
		h.Subs = append(h.Subs, p.Subs...)
	case *message.TopoChange:
		h.Via = append(h.Via, p.Via...)
	}
	if a.got < a.more {
		return nil
	}
	delete(n.assembling, from)
	switch h := a.head.(type) {
	case *message.JoinReply:
		h.More = 0
	case *message.StateReply:
		h.More = 0
	case *message.TopoChange:
		h.More = 0
	}
	return a.head
}

// dropAssembly forgets an unfinished transfer from id (its link changed:
// the rest will never arrive on it).
func (n *Node) dropAssembly(id message.BrokerID) {
	delete(n.assembling, id)
}

// SetMaxFrame sets Config.MaxFrame on a node already created (a driver
// that learns the peers' frame limit afterwards, such as the simulator).
func (n *Node) SetMaxFrame(bytes int) error {
	if bytes < minMaxFrame {
		return fmt.Errorf("overlay: MaxFrame %d must be ≥ %d", bytes, minMaxFrame)
	}
	n.cfg.MaxFrame = bytes
	return nil
}

// gapFloods builds the GapFloods announcing ranges (docs/protocol.md §8),
// each with a sequence number of its own: one GapFlood unless the ranges
// (one per source seen from that direction: up to MaxSources) do not fit
// in a frame, then as many as they need. Unlike a state transfer they need
// no reassembly: every GapFlood stands alone (a receiver notifies its
// subscribers of each), so they are simply cut where a frame is full.
func (n *Node) gapFloods(ranges []message.GapRange, reason string) []*message.GapFlood {
	budget := n.partBudget()
	head := &message.GapFlood{Origin: n.cfg.ID, Seq: n.gaps.seq + 1, Reason: reason}
	hc, err := wire.FrameCost(head)
	if err != nil {
		hc = wire.Cost{Bytes: 64 + len(reason), Values: 4}
	}
	hc = hc.Add(listOverhead)
	var out []*message.GapFlood
	cur, start := hc, 0
	flush := func(end int) {
		n.gaps.seq++
		out = append(out, &message.GapFlood{Origin: n.cfg.ID, Seq: n.gaps.seq, Ranges: ranges[start:end], Reason: reason})
		start, cur = end, hc
	}
	for i := range ranges {
		c := n.costOf(&ranges[i])
		c.Values++ // the list element
		if i > start && (cur.Bytes+c.Bytes > budget.Bytes || cur.Values+c.Values > budget.Values || i-start >= maxPartList) {
			flush(i)
		}
		cur = cur.Add(c)
	}
	flush(len(ranges))
	return out
}
