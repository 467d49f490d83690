package sim

import (
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// handLog builds a log with one subscription S (class=a, confirmed at 10)
// and publications P/1/1..n of class a acknowledged at 20, 30, ...
func handLog(n int) (*Log, message.SubID) {
	l := NewLog()
	sid := message.SubID{Edge: "B2", Epoch: 1, N: 1}
	f, _ := parseFilter([]string{"class=a"})
	l.AddSub(SubRecord{Name: "S", Edge: "B2", Filter: f, ID: sid, HasID: true, ConfirmedAt: 10, UnsubAt: -1})
	for i := 1; i <= n; i++ {
		l.AddPub(PubRecord{ID: message.PubID{Publisher: "P", Epoch: 1, Seq: uint64(i)}, Edge: "B1",
			Attrs: []matching.Attr{{Name: "class", Value: matching.Str("a")}}, SentAt: 0, AckedAt: 10 + 10*toDur(i)})
	}
	return l, sid
}

func deliver(l *Log, sid message.SubID, seqs ...uint64) {
	for i, q := range seqs {
		l.AddDelivery(Delivery{Sub: 0, SubID: sid, Pub: message.PubID{Publisher: "P", Epoch: 1, Seq: q}, At: 100 + toDur(i)})
	}
}

func TestCheckerPassesCleanLog(t *testing.T) {
	l, sid := handLog(3)
	deliver(l, sid, 1, 2, 3)
	r := l.Check()
	if r.Failed(false) || r.Guaranteed != 3 || r.Delivered != 3 {
		t.Fatalf("clean log judged %+v", r)
	}
}

func TestCheckerFailsOnDuplicate(t *testing.T) {
	l, sid := handLog(3)
	deliver(l, sid, 1, 2, 2, 3)
	r := l.Check()
	if r.Duplicates != 1 || !r.Failed(false) || !r.Failed(true) {
		t.Fatalf("duplicate not caught: %+v", r)
	}
}

func TestCheckerFailsOnReorder(t *testing.T) {
	l, sid := handLog(3)
	deliver(l, sid, 1, 3, 2)
	r := l.Check()
	if r.Reordered != 1 || r.Duplicates != 0 || !r.Failed(false) || !r.Failed(true) {
		t.Fatalf("reorder not caught: %+v", r)
	}
}

func TestCheckerFailsOnLoss(t *testing.T) {
	l, sid := handLog(3)
	deliver(l, sid, 1, 3)
	r := l.Check()
	if r.Lost != 1 || r.SilentLost != 1 || !r.Failed(false) {
		t.Fatalf("loss not caught: %+v", r)
	}
}

func TestCheckerLossCoveredByGapPassesOnlyBeyondDelta(t *testing.T) {
	l, sid := handLog(3)
	deliver(l, sid, 1, 3)
	l.Gaps = append(l.Gaps, GapRecord{Sub: 0, Gap: message.Gap{Sub: sid, Source: message.Source{Publisher: "P", Epoch: 1}, From: 2, To: 2}})
	r := l.Check()
	if r.Lost != 1 || r.GapCovered != 1 || r.SilentLost != 0 {
		t.Fatalf("gap not counted: %+v", r)
	}
	if !r.Failed(false) {
		t.Fatal("a loss within δ must fail even with a gap notice")
	}
	if r.Failed(true) {
		t.Fatal("beyond δ a gap-covered loss must pass")
	}
}

func TestCheckerFailsOnSilentLossBeyondDelta(t *testing.T) {
	l, sid := handLog(4)
	deliver(l, sid, 1, 4)
	// A gap for the wrong subscription and one for seq 2 only: 3 is silent.
	other := sid
	other.N = 9
	l.Gaps = append(l.Gaps,
		GapRecord{Sub: 0, Gap: message.Gap{Sub: sid, Source: message.Source{Publisher: "P", Epoch: 1}, From: 2, To: 2}},
		GapRecord{Sub: 0, Gap: message.Gap{Sub: other, Source: message.Source{Publisher: "P", Epoch: 1}, From: 1, To: 0}})
	r := l.Check()
	if r.SilentLost != 1 || r.GapCovered != 1 || !r.Failed(true) {
		t.Fatalf("silent loss not caught: %+v", r)
	}
}

func TestCheckerOracleBoundaries(t *testing.T) {
	l, sid := handLog(4)
	// Published before confirmation (seq 1 acked at 20 > 10: move the
	// confirmation), after unsubscribe, not matching, edge crashed.
	l.Subs[0].ConfirmedAt = 20 // seq 1 acked at 20: not after → not guaranteed
	l.Subs[0].UnsubAt = 40     // seq 3 acked at 40: not before → not guaranteed
	l.Pubs[1].Attrs = []matching.Attr{{Name: "class", Value: matching.Str("b")}}
	deliver(l, sid)
	r := l.Check()
	if r.Guaranteed != 0 || r.Lost != 0 {
		t.Fatalf("oracle guaranteed too much: %+v", r)
	}
	l.Subs[0].UnsubAt = -1
	l.Pubs[3].Excluded = true
	r = l.Check()
	if r.Guaranteed != 1 || r.Lost != 1 { // only seq 3
		t.Fatalf("oracle: %+v", r)
	}
}

func TestCheckerFailsOnSpurious(t *testing.T) {
	l, sid := handLog(2)
	l.Pubs[1].Attrs = []matching.Attr{{Name: "class", Value: matching.Str("b")}}
	deliver(l, sid, 1, 2)
	if r := l.Check(); r.Spurious != 1 || !r.Failed(false) {
		t.Fatalf("non-matching delivery not caught: %+v", r)
	}
	l, sid = handLog(1)
	other := sid
	other.N = 2
	deliver(l, other, 1)
	if r := l.Check(); r.Spurious != 1 {
		t.Fatalf("misaddressed delivery not caught: %+v", r)
	}
}

func TestCheckerAnySourceGap(t *testing.T) {
	l, sid := handLog(4)
	deliver(l, sid, 1)
	// An any-source gap from seq 3 on covers 3 and 4, not 2.
	l.Gaps = append(l.Gaps, GapRecord{Sub: 0, Gap: message.Gap{Sub: sid, From: 3, To: 0}})
	r := l.Check()
	if r.Lost != 3 || r.GapCovered != 2 || r.SilentLost != 1 || !r.Failed(true) {
		t.Fatalf("any-source gap: %+v", r)
	}
}
