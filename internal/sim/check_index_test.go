package sim

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/oracle"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
	"github.com/deltapub/deltapub/message"
)

// The checker's oracle visits only candidate publications (by index, and
// by the subscription's first string equality)
// and keeps its per-subscription state in bitsets and numbered sources.
// These tests compare its reports, field by field and detail by detail,
// with checkBrute, the former implementation (every subscription against
// every publication, maps keyed by PubID and Source), kept here verbatim as
// the reference.

func (l *Log) checkBrute() Report {
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
	r.Details = append(r.Details, l.Errors...)
	r.Details = append(r.Details, l.Stuck...)
	r.Details = append(r.Details, l.QueueOverBound...)
	r.Details = append(r.Details, l.Undrained...)
	detail := func(format string, args ...any) { l.problem(&r.Details, format, args...) }

	type seen struct {
		got  map[message.PubID]bool
		last map[message.Source]uint64
	}
	per := make([]seen, len(l.Subs))
	for i := range per {
		per[i] = seen{got: map[message.PubID]bool{}, last: map[message.Source]uint64{}}
	}
	r.PerSub = make([]SubReport, len(l.Subs))
	for i, sr := range l.Subs {
		r.PerSub[i] = SubReport{Name: sr.Name, Edge: sr.Edge, Filter: fmtFilter(sr.Filter), Excluded: sr.Excluded, Confirmed: sr.ConfirmedAt >= 0}
	}
	for i := range l.NumDeliveries() {
		d := l.Delivery(i)
		if d.Sub < 0 || d.Sub >= len(l.Subs) {
			r.Spurious++
			detail("delivery of %s to an unknown subscription index %d", d.Pub, d.Sub)
			continue
		}
		sr := l.Subs[d.Sub]
		ps := &per[d.Sub]
		r.PerSub[d.Sub].Delivered++
		if ps.got[d.Pub] {
			r.Duplicates++
			detail("duplicate: %s delivered again to %s (%s) at %s", d.Pub, sr.Name, d.SubID, fmtTime(d.At))
			continue
		}
		ps.got[d.Pub] = true
		src := d.Pub.Source()
		if last, ok := ps.last[src]; ok && d.Pub.Seq <= last {
			r.Reordered++
			detail("reorder: %s delivered to %s after seq %d of the same source at %s", d.Pub, sr.Name, last, fmtTime(d.At))
		} else {
			ps.last[src] = d.Pub.Seq
		}
		p := l.Pub(d.Pub)
		switch {
		case sr.HasID && d.SubID != sr.ID:
			r.Spurious++
			detail("misaddressed: %s for %s delivered to %s (%s)", d.Pub, d.SubID, sr.Name, sr.ID)
		case p == nil:
			r.Spurious++
			detail("unknown publication %s delivered to %s", d.Pub, sr.Name)
		case !oracle.Matches(sr.Filter, p.Attrs):
			r.Spurious++
			detail("non-matching: %s %s delivered to %s %s", d.Pub, fmtAttrs(p.Attrs), sr.Name, fmtFilter(sr.Filter))
		case d.Attrs != nil && !oracle.SameAttrs(d.Attrs, p.Attrs):
			r.Spurious++
			detail("altered: %s delivered to %s as %s, published as %s", d.Pub, sr.Name, fmtAttrs(d.Attrs), fmtAttrs(p.Attrs))
		}
	}

	gaps := make(map[int][]message.Gap)
	for _, g := range l.Gaps {
		gaps[g.Sub] = append(gaps[g.Sub], g.Gap)
		if g.Sub >= 0 && g.Sub < len(l.Subs) {
			r.PerSub[g.Sub].Gaps++
		}
	}
	// The oracle: which (subscription, publication) pairs PROTOCOL §1
	// guarantees. Publications in publication order for stable details.
	for si, sr := range l.Subs {
		if sr.Excluded {
			r.ExcludedSubs++
			continue
		}
		if sr.ConfirmedAt < 0 {
			r.Unconfirmed++
			continue
		}
		for _, p := range l.Pubs {
			if p.Excluded || p.AckedAt < 0 || p.AckedAt <= sr.ConfirmedAt {
				continue
			}
			if sr.UnsubAt >= 0 && p.AckedAt >= sr.UnsubAt {
				continue
			}
			if !oracle.Matches(sr.Filter, p.Attrs) {
				continue
			}
			r.Guaranteed++
			r.PerSub[si].Guaranteed++
			if per[si].got[p.ID] {
				continue
			}
			r.Lost++
			r.PerSub[si].Lost++
			if oracle.Covered(gaps[si], sr.ID, p.ID) {
				r.GapCovered++ // counted, not detailed: beyond δ it is the expected outcome
			} else {
				r.SilentLost++
				detail("lost: %s (acked %s) never delivered to %s at %s %s (confirmed %s)", p.ID, fmtTime(p.AckedAt), sr.Name, sr.Edge, fmtFilter(sr.Filter), fmtTime(sr.ConfirmedAt))
			}
		}
	}
	return r
}

// randomLog builds a log with every oddity the checker must judge the same
// way: duplicates, reorders, unknown and misaddressed deliveries, altered
// attributes, excluded, unacknowledged, unconfirmed and withdrawn records,
// publications with a repeated or non-string class, filters without a
// string equality or with two, records added to Pubs by hand (one with the
// ID of another), gap notices.
func randomLog(r *rand.Rand) *Log {
	l := NewLog()
	classes := []string{"a", "b", "c"}
	nPubs, nSubs := 1+r.IntN(60), 1+r.IntN(25)
	for i := 1; i <= nPubs; i++ {
		attrs := workload.NewSmall(r).Publication().Attrs
		switch r.IntN(12) {
		case 0:
			attrs[0].Value = matching.Int(int64(r.IntN(3)))
		case 1:
			attrs = attrs[1:]
		case 2:
			attrs = append(attrs, matching.Attr{Name: "class", Value: matching.Str(classes[r.IntN(3)])})
		case 3:
			attrs = append(attrs, matching.Attr{Name: "z", Value: matching.Str(classes[r.IntN(3)])})
		}
		id := message.PubID{Publisher: fmt.Sprint("P", r.IntN(3)), Epoch: uint64(1 + r.IntN(2)), Seq: uint64(i)}
		rec := PubRecord{ID: id, Edge: "B1", Attrs: attrs, SentAt: toDur(i), AckedAt: -1}
		if r.IntN(8) != 0 {
			rec.AckedAt = toDur(r.IntN(100))
		}
		rec.Excluded = r.IntN(10) == 0
		switch r.IntN(20) {
		case 0:
			l.Pubs = append(l.Pubs, &rec) // by hand: not in the index
		case 1:
			if len(l.Pubs) > 0 {
				rec.ID = l.Pubs[r.IntN(len(l.Pubs))].ID // by hand, a known ID
			}
			l.Pubs = append(l.Pubs, &rec)
		default:
			l.AddPub(rec)
		}
	}
	w := workload.NewSmall(r)
	for i := 0; i < nSubs; i++ {
		f := w.Filter()
		switch r.IntN(8) {
		case 0:
			f.Preds = f.Preds[1:] // no string equality
		case 1:
			f.Preds = append(f.Preds, matching.Predicate{Attr: "class", Op: matching.OpEq, Value: matching.Str(classes[r.IntN(3)])})
		case 2:
			f.Preds[0] = matching.Predicate{Attr: "z", Op: matching.OpEq, Value: matching.Str(classes[r.IntN(3)])}
		case 3:
			f.Preds[0].Op = matching.OpNeq
		case 4:
			f.Preds = append([]matching.Predicate{{Attr: "x", Op: matching.OpIsPresent}}, f.Preds...)
		}
		sr := SubRecord{Name: fmt.Sprint("S", i), Edge: "B2", Filter: f, ID: message.SubID{Edge: "B2", Epoch: 1, N: uint64(i)},
			HasID: r.IntN(6) != 0, ConfirmedAt: -1, UnsubAt: -1}
		if r.IntN(6) != 0 {
			sr.ConfirmedAt = toDur(r.IntN(50))
		}
		if r.IntN(5) == 0 {
			sr.UnsubAt = toDur(r.IntN(100))
		}
		sr.Excluded = r.IntN(12) == 0
		l.AddSub(sr)
	}
	nDel := r.IntN(4 * nPubs * nSubs / 3)
	for i := 0; i < nDel; i++ {
		d := Delivery{Sub: r.IntN(nSubs+2) - 1, At: toDur(100 + i)}
		if d.Sub < 0 || r.IntN(30) == 0 {
			d.Sub = []int{-1, nSubs}[r.IntN(2)] // unknown subscription index
		}
		if r.IntN(15) == 0 {
			d.Pub = message.PubID{Publisher: "X", Epoch: 1, Seq: uint64(r.IntN(5))} // unknown publication
		} else {
			p := l.Pubs[r.IntN(len(l.Pubs))]
			d.Pub = p.ID
			switch r.IntN(4) {
			case 0:
			case 1:
				d.Attrs = []matching.Attr{{Name: "class", Value: matching.Str("q")}} // altered
			default:
				d.Attrs = p.Attrs
			}
		}
		if d.Sub >= 0 && d.Sub < nSubs {
			d.SubID = l.Subs[d.Sub].ID
			if r.IntN(20) == 0 {
				d.SubID.N += 100 // misaddressed
			}
		}
		l.AddDelivery(d)
	}
	for i := r.IntN(6); i > 0; i-- {
		g := GapRecord{Sub: r.IntN(nSubs+1) - 1 + r.IntN(2), At: toDur(200 + i)}
		if g.Sub >= 0 && g.Sub < nSubs {
			g.Gap.Sub = l.Subs[g.Sub].ID
		}
		if r.IntN(3) != 0 {
			g.Gap.Source = message.Source{Publisher: fmt.Sprint("P", r.IntN(3)), Epoch: uint64(1 + r.IntN(2))}
		}
		g.Gap.From = uint64(r.IntN(nPubs + 1))
		if r.IntN(2) == 0 {
			g.Gap.To = g.Gap.From + uint64(r.IntN(10))
		}
		l.Gaps = append(l.Gaps, g)
	}
	return l
}

func TestCheckMatchesBruteForceOnRandomLogs(t *testing.T) {
	var sum Report
	for seed := uint64(1); seed <= 1000; seed++ {
		l := randomLog(rand.New(rand.NewPCG(seed, 7)))
		got, want := l.Check(), l.checkBrute()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: indexed check\n%+v\nbrute force\n%+v", seed, got, want)
		}
		sum.Guaranteed += got.Guaranteed
		sum.Lost += got.Lost
		sum.GapCovered += got.GapCovered
		sum.Duplicates += got.Duplicates
		sum.Reordered += got.Reordered
		sum.Spurious += got.Spurious
	}
	if sum.Guaranteed == 0 || sum.Lost == 0 || sum.GapCovered == 0 || sum.Duplicates == 0 || sum.Reordered == 0 || sum.Spurious == 0 {
		t.Fatalf("the random logs miss a case: %+v", sum)
	}
}

func TestCheckMatchesBruteForceOnRuns(t *testing.T) {
	lost := 0
	for seed := int64(1); seed <= 4; seed++ {
		s, r := floodRun(t, seed, "B3", nil) // a crash: losses to judge
		if want := s.Log().checkBrute(); !reflect.DeepEqual(r, want) || r.Guaranteed == 0 {
			t.Fatalf("seed %d: indexed check\n%+v\nbrute force\n%+v", seed, r, want)
		}
		lost += r.Lost
	}
	if lost == 0 {
		t.Fatal("the flood runs lost nothing: no loss judged")
	}
	o := DefaultSRDSOptions()
	o.Brokers, o.Subs, o.Publishers, o.Crashes = 20, 200, 6, 1
	o.Warmup, o.After = 300*time.Millisecond, 300*time.Millisecond
	var log *Log
	o.onLog = func(l *Log) { log = l }
	res := RunSRDS09(o)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if want := log.checkBrute(); !reflect.DeepEqual(res.Report, want) || want.Guaranteed == 0 {
		t.Fatalf("srds09: indexed check\n%+v\nbrute force\n%+v", res.Report, want)
	}
}
