// Package oracle judges the deliveries of a run against the guarantees of
// PROTOCOL.md §1, for the simulator (internal/sim) and the testbed alike:
// both give it their subscriptions, publications, deliveries and gap
// notices, and say which (subscription, publication) pairs are owed; it
// finds the duplicates, the reorderings, the spurious deliveries and the
// losses, and which losses a gap notice covers.
//
// What is owed is the caller's rule (Input.Class): the simulator knows
// which clients lost their edge broker and owes every other pair published
// between the confirmation and the unsubscription; the testbed reads it
// off the fault timeline. Whatever the faults:
//
//   - a second delivery of a publication to a subscription is a duplicate;
//   - per subscription and source, a delivery whose Seq is not above the
//     last one delivered is a reordering;
//   - a delivery is spurious if it names an unknown subscription or
//     publication, carries another subscription's ID (misaddressed), does
//     not match the filter (package matching's Filter.Match) or carries
//     other attributes than those published (altered);
//   - an owed pair that matches and was never delivered is lost; a loss is
//     covered when a Gap notice to that subscription names its source (an
//     empty Source.Publisher: every source) and a range holding its Seq
//     (To = 0: open-ended).
package oracle

import (
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// Sub is one subscription.
type Sub struct {
	Filter matching.Filter
	// ID is the ID its deliveries and gap notices carry; HasID: known (a
	// delivery carrying another is misaddressed).
	ID    message.SubID
	HasID bool
	// Owed: anything may be owed to it (the caller counts apart the
	// subscriptions never confirmed or whose edge broker went away).
	Owed bool
}

// Pub is one publication as its publisher sent it.
type Pub struct {
	ID    message.PubID
	Attrs []matching.Attr
	// Owable: it can be owed at all (acknowledged by its edge broker, and
	// not excluded by the caller).
	Owable bool
}

// Delivery is one publication delivered to one subscription.
type Delivery struct {
	Sub   int           // index in Input.Subs (out of range: unknown)
	SubID message.SubID // the ID it carried
	Pub   message.PubID
	Attrs []matching.Attr // the attributes it carried; nil: none
}

// Gap is one gap notice received by subscription Sub (an index in
// Input.Subs).
type Gap struct {
	Sub int
	Gap message.Gap
}

// Class is what the caller's rule says a (subscription, publication) pair
// is owed.
type Class uint8

const (
	// NotOwed: nothing is said of the pair (published before the
	// subscription was confirmed, after it ended); a delivery of it is
	// neither required nor extra.
	NotOwed Class = iota
	// Required: a matching publication must be delivered.
	Required
	// Allowed: it may be delivered or not (a fault excused it); a
	// delivery is extra.
	Allowed
	// Beyond: owed but for a failure beyond δ: a loss counts apart, and
	// is silent when no gap notice covers it; a delivery is extra.
	Beyond
)

// Problem is what is wrong with a delivery.
type Problem uint8

const (
	UnknownSub Problem = iota + 1
	Duplicate
	Reordered
	Misaddressed
	UnknownPub
	NonMatching
	Altered
)

// Input is a run as the oracle reads it.
type Input struct {
	Subs []Sub
	Pubs []Pub
	// Index returns the index in Pubs that the deliveries of id are
	// recorded under (false: an unknown publication).
	Index func(id message.PubID) (int, bool)
	// NumDeliveries and Delivery give the deliveries in the order they
	// were received.
	NumDeliveries int
	Delivery      func(i int) Delivery
	Gaps          []Gap
	// Class is the caller's rule for an owable publication and an owed
	// subscription (indexes in Pubs and Subs), asked before the filter
	// is matched.
	Class func(sub, pub int) Class
	// OnProblem, if set, is told every problem of a delivery, in delivery
	// order: i is its number, pub the index of its publication (-1 if
	// unknown), last (for Reordered) the Seq delivered before.
	OnProblem func(p Problem, i, pub int, last uint64)
	// OnLost, if set, is told every lost pair of class Required or
	// Beyond, by subscription and, per subscription, in publication order.
	OnLost func(sub, pub int, c Class, covered bool)
}

// Result is the oracle's judgement.
type Result struct {
	Duplicates int
	Reordered  int
	Spurious   int // every problem but Duplicate and Reordered
	// Required pairs (owed and matching), Lost of them, LostCovered of
	// those covered by a gap notice.
	Required, Lost, LostCovered int
	// BeyondLost: pairs of class Beyond never delivered, BeyondCovered of
	// them covered by a gap notice.
	BeyondLost, BeyondCovered int
	// Extra: deliveries of matching pairs of class Allowed or Beyond.
	Extra  int
	PerSub []SubResult
}

// SubResult is the judgement of one subscription.
type SubResult struct {
	Delivered int // deliveries received, duplicates included
	Required  int
	Lost      int // of the required
	Gaps      int // gap notices received
}

// Check judges in.
func Check(in Input) Result {
	res := Result{PerSub: make([]SubResult, len(in.Subs))}
	np := len(in.Pubs)
	// Per subscription: which publications it got (a bitset over the
	// indexes of Pubs; a map for publications not known) and the last
	// sequence number per source (sources numbered once per publication,
	// not hashed per delivery).
	per := make([]seen, len(in.Subs))
	srcs := map[message.Source]int{}
	pubSrc := make([]int32, np) // source number + 1 of Pubs[i], once known
	srcOf := func(id message.PubID) int {
		s := id.Source()
		i, ok := srcs[s]
		if !ok {
			i = len(srcs)
			srcs[s] = i
		}
		return i
	}
	problem := func(p Problem, i, pub int, last uint64) {
		if in.OnProblem != nil {
			in.OnProblem(p, i, pub, last)
		}
	}
	var lastPub message.PubID
	var lastPi int
	var haveLast, lastKnown bool
	for i := 0; i < in.NumDeliveries; i++ {
		d := in.Delivery(i)
		if d.Sub < 0 || d.Sub >= len(in.Subs) {
			res.Spurious++
			problem(UnknownSub, i, -1, 0)
			continue
		}
		sub := &in.Subs[d.Sub]
		ps := &per[d.Sub]
		res.PerSub[d.Sub].Delivered++
		// The deliveries of one publication come in a row: its index is
		// looked up once for them.
		if !haveLast || d.Pub != lastPub {
			lastPub, haveLast = d.Pub, true
			lastPi, lastKnown = in.Index(d.Pub)
		}
		pi, known := lastPi, lastKnown
		if !known {
			pi = -1
		}
		if ps.got(pi, known, d.Pub) {
			res.Duplicates++
			problem(Duplicate, i, pi, 0)
			continue
		}
		ps.setGot(pi, known, d.Pub, np)
		var src int
		if known {
			if pubSrc[pi] == 0 {
				pubSrc[pi] = int32(srcOf(d.Pub)) + 1
			}
			src = int(pubSrc[pi]) - 1
		} else {
			src = srcOf(d.Pub)
		}
		for len(ps.last) <= src {
			ps.last = append(ps.last, lastSeq{})
		}
		if last := ps.last[src]; last.ok && d.Pub.Seq <= last.seq {
			res.Reordered++
			problem(Reordered, i, pi, last.seq)
		} else {
			ps.last[src] = lastSeq{d.Pub.Seq, true}
		}
		var p Problem
		switch {
		case sub.HasID && d.SubID != sub.ID:
			p = Misaddressed
		case !known:
			p = UnknownPub
		case !ps.match(sub.Filter, &in.Pubs[pi], pi, np):
			p = NonMatching
		case d.Attrs != nil && !SameAttrs(d.Attrs, in.Pubs[pi].Attrs):
			p = Altered
		}
		if p != 0 {
			res.Spurious++
			problem(p, i, pi, 0)
		}
	}

	gaps := make(map[int][]message.Gap)
	for _, g := range in.Gaps {
		gaps[g.Sub] = append(gaps[g.Sub], g.Gap)
		if g.Sub >= 0 && g.Sub < len(in.Subs) {
			res.PerSub[g.Sub].Gaps++
		}
	}
	// What is owed: only the publications that can be owed at all are
	// visited, and only those carrying the value of the subscription's
	// first string equality (see candidates).
	cand := newCandidates(&in)
	for si := range in.Subs {
		sub := &in.Subs[si]
		if !sub.Owed {
			continue
		}
		for _, pi := range cand.of(sub.Filter) {
			c := in.Class(si, pi)
			if c == NotOwed {
				continue
			}
			p := &in.Pubs[pi]
			if !per[si].matched(pi) && !Matches(sub.Filter, p.Attrs) {
				continue
			}
			if c == Required {
				res.Required++
				res.PerSub[si].Required++
			}
			// Deliveries of p.ID were recorded under the index Index
			// gives it (p's own, unless two publications share an ID).
			if gi := cand.idx[pi]; per[si].got(gi, gi >= 0, p.ID) {
				if c != Required {
					res.Extra++
				}
				continue
			}
			if c == Allowed {
				continue
			}
			cov := Covered(gaps[si], sub.ID, p.ID)
			switch c {
			case Required:
				res.Lost++
				res.PerSub[si].Lost++
				if cov {
					res.LostCovered++
				}
			case Beyond:
				res.BeyondLost++
				if cov {
					res.BeyondCovered++
				}
			}
			if in.OnLost != nil {
				in.OnLost(si, pi, c, cov)
			}
		}
	}
	return res
}

// Matches reports whether a publication's attributes match f: package
// matching's Filter.Match, the full language (what the core routes by).
func Matches(f matching.Filter, attrs []matching.Attr) bool {
	p := matching.Publication{Attrs: attrs}
	return f.Match(&p)
}

// Covered reports whether a gap notice of gs to subscription sub covers
// id. A Gap with an empty Source.Publisher covers every source (the core
// sends one for sources it never saw from the failed direction); To = 0
// is open-ended.
func Covered(gs []message.Gap, sub message.SubID, id message.PubID) bool {
	for _, g := range gs {
		if g.Sub != sub || (g.Source.Publisher != "" && g.Source != id.Source()) {
			continue
		}
		if id.Seq >= g.From && (g.To == 0 || id.Seq <= g.To) {
			return true
		}
	}
	return false
}

// SameAttrs reports whether a and b are the same attributes in the same
// order.
func SameAttrs(a, b []matching.Attr) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true // the same values
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// seen is what one subscription got.
type seen struct {
	bits    []uint64 // by index in Pubs
	unknown map[message.PubID]bool
	last    []lastSeq // by source number
	// ok: the publications (by index in Pubs) a delivery found matching:
	// the owed pairs need not be matched again.
	ok []uint64
}

type lastSeq struct {
	seq uint64
	ok  bool
}

func (x *seen) got(pi int, known bool, id message.PubID) bool {
	if !known {
		return x.unknown[id]
	}
	w := pi / 64
	return w < len(x.bits) && x.bits[w]&(1<<(pi%64)) != 0
}

func (x *seen) setGot(pi int, known bool, id message.PubID, np int) {
	if !known {
		if x.unknown == nil {
			x.unknown = map[message.PubID]bool{}
		}
		x.unknown[id] = true
		return
	}
	if x.bits == nil {
		x.bits = make([]uint64, (np+63)/64)
	}
	x.bits[pi/64] |= 1 << (pi % 64)
}

// match is Matches(f, p.Attrs) for the publication at index pi,
// remembered when true.
func (x *seen) match(f matching.Filter, p *Pub, pi int, np int) bool {
	if !Matches(f, p.Attrs) {
		return false
	}
	if x.ok == nil {
		x.ok = make([]uint64, (np+63)/64)
	}
	x.ok[pi/64] |= 1 << (pi % 64)
	return true
}

func (x *seen) matched(pi int) bool {
	w := pi / 64
	return w < len(x.ok) && x.ok[w]&(1<<(pi%64)) != 0
}

// candidates lists the publications that can be owed at all (all), and
// the same grouped by the string equalities they satisfy (byEq: by the
// value of each attribute name's first occurrence, the one
// Publication.Get finds; a valid publication names each attribute once,
// matching.ValidateAttrs). Each list is in publication order.
type candidates struct {
	all  []int
	byEq map[eqKey][]int
	// idx is, by index in Pubs, Index of the publication's ID (-1: none),
	// the index its deliveries are recorded under.
	idx []int
}

type eqKey struct{ attr, value string }

func newCandidates(in *Input) candidates {
	c := candidates{idx: make([]int, len(in.Pubs)), byEq: map[eqKey][]int{}}
	for i := range in.Pubs {
		p := &in.Pubs[i]
		if !p.Owable {
			continue
		}
		c.all = append(c.all, i)
		c.idx[i] = -1
		if j, ok := in.Index(p.ID); ok {
			c.idx[i] = j
		}
		as := p.Attrs
	attrs:
		for j, a := range as {
			if a.Value.Kind != matching.KindString {
				continue
			}
			for _, b := range as[:j] {
				if b.Name == a.Name {
					continue attrs // Get finds the first one
				}
			}
			k := eqKey{a.Name, a.Value.Str}
			c.byEq[k] = append(c.byEq[k], i)
		}
	}
	return c
}

// of returns the publications filter f may match: those carrying the
// value of f's first string equality (a publication without it fails that
// predicate); all of them if f has none.
func (c candidates) of(f matching.Filter) []int {
	for _, p := range f.Preds {
		if p.Op == matching.OpEq && p.Value.Kind == matching.KindString {
			return c.byEq[eqKey{p.Attr, p.Value.Str}]
		}
	}
	return c.all
}
