package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/deltapub/deltapub/internal/oracle"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// Log is the record of a run that the checkers judge: every publication a
// publisher sent, every subscription, every delivery and gap notice, and
// the problems found while running (queue over its bound, undrained queue).
// It can also be built by hand (the checkers' self-tests do).
type Log struct {
	Pubs []*PubRecord
	Subs []*SubRecord
	Gaps []GapRecord
	// The deliveries (AddDelivery, NumDeliveries, Delivery) are kept
	// compact: see delRec.
	dels   []delRec
	extras []Delivery // the deliveries delRec cannot describe

	// QueueOverBound and Undrained are filled by the simulator.
	QueueOverBound []string
	Undrained      []string
	// Stuck lists liveness failures found after quiescence: a live
	// subscription never confirmed, a publication never answered.
	Stuck []string
	// Storms and NotRejoined are the liveness rules of internal/traffic
	// (Sim.CheckTraffic): a broker's control traffic far above its steady
	// state; a restarted broker not joined within the bound.
	Storms      []string
	NotRejoined []string
	// Phases lists membership phase changes that the state machine does
	// not allow (overlay.LegalPhaseChange): a bug of the core, within δ or
	// beyond.
	Phases []string
	// Errors lists environment-level failures: a message that does not
	// round-trip through the wire format.
	Errors []string

	pubIdx map[message.PubID]int
	subIdx map[string]int // by subscriber name
}

// PubRecord is one publication as its publisher saw it.
type PubRecord struct {
	ID        message.PubID
	Edge      message.BrokerID
	Attrs     []matching.Attr
	SentAt    time.Duration // first Publish sent
	AckedAt   time.Duration // PubAck without error received; -1 if never
	Excluded  bool          // the publisher's edge crashed during the run
	excludeBy string
}

// SubRecord is one subscription as its subscriber saw it.
type SubRecord struct {
	Name         string
	Edge         message.BrokerID
	Filter       matching.Filter
	ID           message.SubID
	HasID        bool
	SubscribedAt time.Duration
	ConfirmedAt  time.Duration // SubAck{Confirmed} received; -1 if never
	UnsubAt      time.Duration // Unsubscribe sent; -1 if never
	Err          string
	Excluded     bool // the subscriber's edge crashed during the run
	// Durable: a durable subscriber (dursub.go): its sessions' IDs are
	// Sessions (ID is the first; deliveries and gaps to any of them are
	// recorded under ID), it outlives its edges' crashes, and Excluded
	// means it ended the run disconnected.
	Durable  bool
	Sessions []message.SubID
}

// reserveDeliveries makes room for n more deliveries (a capacity hint:
// the log still grows past it).
func (l *Log) reserveDeliveries(n int) {
	if n > 0 {
		l.dels = slices.Grow(l.dels, n)
	}
}

// delRec is one delivery as the log keeps it: 24 bytes without pointers
// (the garbage collector never scans the log, which holds hundreds of
// thousands of them) instead of a 112-byte Delivery with three. A regular
// delivery (nearly all) names a subscription of the log that has its ID,
// carries that ID and a publication of the log, and carries the
// publication's attributes (the same values) or none: pub is then twice
// the publication's index in Log.Pubs, plus one if the Deliver carried no
// attributes. Any other delivery is kept whole in Log.extras, at index
// -pub-1.
type delRec struct {
	sub     int32
	pub     int32
	at      time.Duration
	pubTime int64
}

// AddDelivery records d.
func (l *Log) AddDelivery(d Delivery) {
	l.dels = append(l.dels, l.compact(&d, -1))
}

// compact returns the record of d; pi is d.Pub's index in l.Pubs if the
// caller knows it (else -1).
func (l *Log) compact(d *Delivery, pi int) delRec {
	if d.Sub >= 0 && d.Sub < len(l.Subs) && d.Sub <= math.MaxInt32 && len(l.Pubs) < math.MaxInt32/2 {
		if sr := l.Subs[d.Sub]; sr.HasID && d.SubID == sr.ID {
			if pi < 0 {
				if i, ok := l.pubIdx[d.Pub]; ok {
					pi = i
				}
			}
			if pi >= 0 {
				if d.Attrs == nil {
					return delRec{sub: int32(d.Sub), pub: int32(2*pi + 1), at: d.At, pubTime: d.PubTime}
				}
				if oracle.SameAttrs(d.Attrs, l.Pubs[pi].Attrs) {
					return delRec{sub: int32(d.Sub), pub: int32(2 * pi), at: d.At, pubTime: d.PubTime}
				}
			}
		}
	}
	l.extras = append(l.extras, *d)
	return delRec{pub: int32(-len(l.extras))}
}

// NumDeliveries is the number of deliveries recorded.
func (l *Log) NumDeliveries() int { return len(l.dels) }

// Delivery returns the i-th delivery recorded. Its Attrs, if the Deliver
// carried any equal to the publication's, are the publication record's.
func (l *Log) Delivery(i int) Delivery {
	r := &l.dels[i]
	if r.pub < 0 {
		return l.extras[-r.pub-1]
	}
	sub := int(r.sub)
	p := l.Pubs[r.pub>>1]
	d := Delivery{Sub: sub, SubID: l.Subs[sub].ID, Pub: p.ID, At: r.at, PubTime: r.pubTime}
	if r.pub&1 == 0 {
		d.Attrs = p.Attrs
	}
	return d
}

// deliverySub returns the subscription index, publication and arrival
// time of the i-th delivery (Delivery without the copy).
func (l *Log) deliverySub(i int) (int, message.PubID, time.Duration) {
	r := &l.dels[i]
	if r.pub < 0 {
		d := &l.extras[-r.pub-1]
		return d.Sub, d.Pub, d.At
	}
	return int(r.sub), l.Pubs[r.pub>>1].ID, r.at
}

// deliveryTimes returns the publication time and arrival time of the i-th
// delivery.
func (l *Log) deliveryTimes(i int) (pubTime int64, at time.Duration) {
	r := &l.dels[i]
	if r.pub < 0 {
		d := &l.extras[-r.pub-1]
		return d.PubTime, d.At
	}
	return r.pubTime, r.at
}

// Delivery is one Deliver received by a subscriber.
type Delivery struct {
	Sub     int           // index in Log.Subs
	SubID   message.SubID // as carried by the Deliver
	Pub     message.PubID
	Attrs   []matching.Attr
	At      time.Duration // received by the subscriber
	PubTime int64         // the publisher's clock when publishing (ns of virtual time)
}

// GapRecord is one Gap notice received by a subscriber.
type GapRecord struct {
	Sub int
	Gap message.Gap
	At  time.Duration
}

func newLog() *Log {
	return &Log{pubIdx: map[message.PubID]int{}, subIdx: map[string]int{}}
}

// NewLog returns an empty log (for hand-made logs).
func NewLog() *Log { return newLog() }

// AddPub records a publication; it returns the existing record for a
// PubID already known (a retry).
func (l *Log) AddPub(p PubRecord) *PubRecord {
	if i, ok := l.pubIdx[p.ID]; ok {
		return l.Pubs[i]
	}
	rec := p
	l.pubIdx[p.ID] = len(l.Pubs)
	l.Pubs = append(l.Pubs, &rec)
	return &rec
}

// Pub returns the record of id, or nil.
func (l *Log) Pub(id message.PubID) *PubRecord {
	if i, ok := l.pubIdx[id]; ok {
		return l.Pubs[i]
	}
	return nil
}

// AddSub records a subscription and returns its index.
func (l *Log) AddSub(r SubRecord) int {
	rec := r
	l.subIdx[r.Name] = len(l.Subs)
	l.Subs = append(l.Subs, &rec)
	return len(l.Subs) - 1
}

// SubIndex returns the index of the subscription named name, or -1.
func (l *Log) SubIndex(name string) int {
	if i, ok := l.subIdx[name]; ok {
		return i
	}
	return -1
}

func (l *Log) excludeClient(c *client) {
	if c.pub != nil {
		c.pub.edgeCrashed = true
		for _, r := range c.pub.records {
			r.Excluded = true
		}
	}
	if c.sub >= 0 {
		l.Subs[c.sub].Excluded = true
	}
}

const maxDetails = 20

func (l *Log) problem(list *[]string, format string, args ...any) {
	if len(*list) < maxDetails {
		*list = append(*list, fmt.Sprintf(format, args...))
	} else if len(*list) == maxDetails {
		*list = append(*list, "...")
	}
}

// Report is the checkers' verdict on a log.
type Report struct {
	Published     int // publications acknowledged to their publisher
	Subscriptions int
	ExcludedSubs  int // subscriptions whose edge crashed: no guarantee
	ExcludedPubs  int // publications whose publisher's edge crashed: no guarantee
	Guaranteed    int // (subscription, publication) pairs PROTOCOL §1 guarantees
	Delivered     int // deliveries received (all, guaranteed or not)
	Lost          int // guaranteed and never delivered
	GapCovered    int // lost but covered by a Gap notice to that subscription
	// Released: pairs of durable subscriptions never delivered, covered by
	// a Gap of the publisher's edge's retention (a bounded range of one
	// source): allowed, and not counted in Lost.
	Released       int
	SilentLost     int // lost and not covered by a Gap notice
	Duplicates     int // a (subscription, publication) delivered more than once
	Reordered      int // a delivery whose Seq is not above the last of its source
	Spurious       int // delivered but not matching, unknown, altered or misaddressed
	GapNotices     int
	QueueOverBound int
	Undrained      int
	Unconfirmed    int // subscriptions never confirmed (not a failure by itself)
	Stuck          int // liveness failures after quiescence (see Log.Stuck)
	Storms         int // (broker, type) whose control rate broke the storm bound
	NotRejoined    int // restarts not joined within the rejoin bound (within δ)
	Phases         int // illegal membership phase changes (Log.Phases)
	Errors         int // messages that do not round-trip through the wire format
	PerSub         []SubReport
	Details        []string
}

// SubReport is the verdict for one subscription.
type SubReport struct {
	Name       string
	Edge       message.BrokerID
	Filter     string
	Excluded   bool
	Confirmed  bool
	Guaranteed int
	Delivered  int
	Lost       int
	Gaps       int
	Durable    bool
	Sessions   int // a durable subscriber's sessions
}

// Failed reports whether the run broke a guarantee: within δ every loss
// counts; beyond δ only duplicates, reordering, spurious deliveries and
// silent loss do.
func (r Report) Failed(beyond bool) bool {
	bad := r.Duplicates + r.Reordered + r.Spurious + r.Errors + r.Storms + r.Phases
	if beyond {
		return bad+r.SilentLost > 0
	}
	return bad+r.Lost+r.Undrained+r.QueueOverBound+r.Stuck+r.NotRejoined > 0
}

// Check judges the log (package oracle): exactly once, per-source FIFO,
// no spurious delivery, no loss of a guaranteed delivery, and which losses
// are covered by gap notices. A pair is guaranteed when the publication
// was acknowledged strictly after the subscription was confirmed and
// before it was withdrawn, and neither the publisher's nor the
// subscriber's edge crashed during the run (those are excluded).
func (l *Log) Check() Report {
	var r Report
	for _, p := range l.Pubs {
		if p.AckedAt >= 0 {
			r.Published++
			if p.Excluded {
				r.ExcludedPubs++
			}
		}
	}
	r.Subscriptions = len(l.Subs)
	r.Delivered = l.NumDeliveries()
	r.GapNotices = len(l.Gaps)
	r.QueueOverBound = len(l.QueueOverBound)
	r.Undrained = len(l.Undrained)
	r.Stuck = len(l.Stuck)
	r.Errors = len(l.Errors)
	r.Storms = len(l.Storms)
	r.NotRejoined = len(l.NotRejoined)
	r.Phases = len(l.Phases)
	r.Details = append(r.Details, l.Errors...)
	r.Details = append(r.Details, l.Phases...)
	// A storm or a broker that never rejoined is usually the cause of the
	// stuck subscriptions and undrained queues that follow: first.
	r.Details = append(r.Details, l.Storms...)
	r.Details = append(r.Details, l.NotRejoined...)
	r.Details = append(r.Details, l.Stuck...)
	r.Details = append(r.Details, l.QueueOverBound...)
	r.Details = append(r.Details, l.Undrained...)
	detail := func(format string, args ...any) { l.problem(&r.Details, format, args...) }

	in := oracle.Input{
		Subs:          make([]oracle.Sub, len(l.Subs)),
		Pubs:          make([]oracle.Pub, len(l.Pubs)),
		Index:         func(id message.PubID) (int, bool) { i, ok := l.pubIdx[id]; return i, ok },
		NumDeliveries: l.NumDeliveries(),
		Delivery: func(i int) oracle.Delivery {
			d := l.Delivery(i)
			return oracle.Delivery{Sub: d.Sub, SubID: d.SubID, Pub: d.Pub, Attrs: d.Attrs}
		},
		Gaps: make([]oracle.Gap, len(l.Gaps)),
	}
	for i, sr := range l.Subs {
		switch {
		case sr.Excluded:
			r.ExcludedSubs++
		case sr.ConfirmedAt < 0:
			r.Unconfirmed++
		}
		in.Subs[i] = oracle.Sub{Filter: sr.Filter, ID: sr.ID, HasID: sr.HasID, Owed: !sr.Excluded && sr.ConfirmedAt >= 0}
	}
	for i, p := range l.Pubs {
		in.Pubs[i] = oracle.Pub{ID: p.ID, Attrs: p.Attrs, Owable: !p.Excluded && p.AckedAt >= 0}
	}
	for i, g := range l.Gaps {
		in.Gaps[i] = oracle.Gap{Sub: g.Sub, Gap: g.Gap}
	}
	retained := l.retentionGaps()
	in.Class = func(si, pi int) oracle.Class {
		sr, p := l.Subs[si], l.Pubs[pi]
		if p.AckedAt <= sr.ConfirmedAt || sr.UnsubAt >= 0 && p.AckedAt >= sr.UnsubAt {
			return oracle.NotOwed
		}
		return oracle.Required
	}
	in.OnProblem = func(kind oracle.Problem, i, pi int, last uint64) {
		d := l.Delivery(i)
		var sr *SubRecord
		if d.Sub >= 0 && d.Sub < len(l.Subs) {
			sr = l.Subs[d.Sub]
		}
		switch kind {
		case oracle.UnknownSub:
			detail("delivery of %s to an unknown subscription index %d", d.Pub, d.Sub)
		case oracle.Duplicate:
			detail("duplicate: %s delivered again to %s (%s) at %s", d.Pub, sr.Name, d.SubID, fmtTime(d.At))
		case oracle.Reordered:
			detail("reorder: %s delivered to %s after seq %d of the same source at %s", d.Pub, sr.Name, last, fmtTime(d.At))
		case oracle.Misaddressed:
			detail("misaddressed: %s for %s delivered to %s (%s)", d.Pub, d.SubID, sr.Name, sr.ID)
		case oracle.UnknownPub:
			detail("unknown publication %s delivered to %s", d.Pub, sr.Name)
		case oracle.NonMatching:
			detail("non-matching: %s %s delivered to %s %s", d.Pub, fmtAttrs(l.Pubs[pi].Attrs), sr.Name, fmtFilter(sr.Filter))
		case oracle.Altered:
			detail("altered: %s delivered to %s as %s, published as %s", d.Pub, sr.Name, fmtAttrs(d.Attrs), fmtAttrs(l.Pubs[pi].Attrs))
		}
	}
	in.OnLost = func(si, pi int, c oracle.Class, covered bool) {
		if c == oracle.Required && l.Subs[si].Durable && oracle.Covered(retained[si], l.Subs[si].ID, l.Pubs[pi].ID) {
			r.Released++ // the durable rule: released by the retention, and told
			r.PerSub[si].Lost--
			return
		}
		if covered {
			return // counted, not detailed: beyond δ it is the expected outcome
		}
		sr, p := l.Subs[si], l.Pubs[pi]
		detail("lost: %s (acked %s) never delivered to %s at %s %s (confirmed %s)", p.ID, fmtTime(p.AckedAt), sr.Name, sr.Edge, fmtFilter(sr.Filter), fmtTime(sr.ConfirmedAt))
	}
	r.PerSub = make([]SubReport, len(l.Subs))
	res := oracle.Check(in)
	// (OnLost took the released pairs off Lost and LostCovered: a
	// retention gap also covers them in the oracle's count.)
	r.Guaranteed, r.Lost, r.GapCovered = res.Required, res.Lost-r.Released, res.LostCovered-r.Released
	r.SilentLost = r.Lost - r.GapCovered
	r.Duplicates, r.Reordered, r.Spurious = res.Duplicates, res.Reordered, res.Spurious
	for i, sr := range l.Subs {
		x := res.PerSub[i]
		r.PerSub[i] = SubReport{Name: sr.Name, Edge: sr.Edge, Filter: fmtFilter(sr.Filter), Excluded: sr.Excluded, Confirmed: sr.ConfirmedAt >= 0,
			Guaranteed: x.Required, Delivered: x.Delivered, Lost: x.Lost + r.PerSub[i].Lost, Gaps: x.Gaps, Durable: sr.Durable, Sessions: len(sr.Sessions)}
	}
	return r
}

// Delays returns every delivery's delay (receipt minus publication time),
// by the publication time, sorted by publication time (stable: deliveries
// of the same time in log order).
//
// The deliveries share a few publication times (one per publication, and
// those of one publication come in a row): a counting sort over the
// distinct times sorted, instead of a comparison sort of every delivery.
func (l *Log) Delays() []DelaySample {
	n := l.NumDeliveries()
	group := make([]int32, n) // index in times of each delivery's time
	idx := map[time.Duration]int32{}
	var times []time.Duration
	var count []int
	last, lastG := time.Duration(0), int32(-1)
	for i := range l.dels {
		pt, _ := l.deliveryTimes(i)
		t := time.Duration(pt)
		g := lastG
		if g < 0 || t != last {
			var ok bool
			if g, ok = idx[t]; !ok {
				g = int32(len(times))
				idx[t] = g
				times = append(times, t)
				count = append(count, 0)
			}
			last, lastG = t, g
		}
		group[i] = g
		count[g]++
	}
	// The groups in time order; start[g] is where group g's samples go.
	order := make([]int32, len(times))
	for g := range order {
		order[g] = int32(g)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmp.Compare(times[a], times[b]) })
	start := make([]int, len(times))
	pos := 0
	for _, g := range order {
		start[g] = pos
		pos += count[g]
	}
	out := make([]DelaySample, n)
	for i := range l.dels {
		pt, at := l.deliveryTimes(i)
		g := group[i]
		out[start[g]] = DelaySample{Published: time.Duration(pt), Delay: at - time.Duration(pt)}
		start[g]++
	}
	return out
}

// DelaySample is one delivery's publication time and delay.
type DelaySample struct {
	Published time.Duration
	Delay     time.Duration
}
