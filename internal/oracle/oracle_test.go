package oracle

import (
	"reflect"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

func attrs(class string, x int64) []matching.Attr {
	return []matching.Attr{{Name: "class", Value: matching.Str(class)}, {Name: "x", Value: matching.Int(x)}}
}

// run is a small run: two subscriptions (class a; class a with x < 5), six
// publications of P (seq 1..6: class a with x = seq, the sixth class b)
// and the deliveries given.
func run(dels []Delivery, class func(sub, pub int) Class, gaps ...Gap) (Result, []Problem, [][2]int) {
	id := func(seq uint64) message.PubID { return message.PubID{Publisher: "P", Epoch: 1, Seq: seq} }
	in := Input{
		Subs: []Sub{
			{Filter: matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("a")}}}, ID: message.SubID{Edge: "B1", Epoch: 1, N: 1}, HasID: true, Owed: true},
			{Filter: matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Str("a")}, {Attr: "x", Op: matching.OpLt, Value: matching.Int(5)}}}, ID: message.SubID{Edge: "B1", Epoch: 1, N: 2}, HasID: true, Owed: true},
		},
		NumDeliveries: len(dels),
		Delivery:      func(i int) Delivery { return dels[i] },
		Gaps:          gaps,
		Class:         class,
	}
	for s := uint64(1); s <= 6; s++ {
		a := attrs("a", int64(s))
		if s == 6 {
			a = attrs("b", 6)
		}
		in.Pubs = append(in.Pubs, Pub{ID: id(s), Attrs: a, Owable: s != 4}) // 4: never acknowledged
	}
	in.Index = func(x message.PubID) (int, bool) {
		if x.Publisher == "P" && x.Seq >= 1 && x.Seq <= 6 {
			return int(x.Seq) - 1, true
		}
		return 0, false
	}
	var probs []Problem
	var lost [][2]int
	in.OnProblem = func(p Problem, _, _ int, _ uint64) { probs = append(probs, p) }
	in.OnLost = func(sub, pub int, _ Class, _ bool) { lost = append(lost, [2]int{sub, pub}) }
	return Check(in), probs, lost
}

func del(sub int, seq uint64) Delivery {
	return Delivery{Sub: sub, SubID: message.SubID{Edge: "B1", Epoch: 1, N: uint64(sub + 1)}, Pub: message.PubID{Publisher: "P", Epoch: 1, Seq: seq}}
}

func required(int, int) Class { return Required }

func TestEveryProblem(t *testing.T) {
	mis := del(0, 2)
	mis.SubID.N = 9
	alt := del(0, 3)
	alt.Attrs = attrs("a", 7)
	dels := []Delivery{
		del(0, 1), del(0, 1), // duplicate
		mis,                  // misaddressed (and 2 counts as got)
		alt,                  // altered
		del(1, 2), del(1, 1), // reordered
		del(1, 5), // non-matching (x = 5)
		{Sub: 0, SubID: del(0, 0).SubID, Pub: message.PubID{Publisher: "Q", Epoch: 1, Seq: 1}}, // unknown publication
		{Sub: 7}, // unknown subscription
	}
	res, probs, lost := run(dels, required)
	want := []Problem{Duplicate, Misaddressed, Altered, Reordered, NonMatching, UnknownPub, UnknownSub}
	if !reflect.DeepEqual(probs, want) {
		t.Errorf("problems %v, want %v", probs, want)
	}
	if res.Duplicates != 1 || res.Reordered != 1 || res.Spurious != 5 {
		t.Errorf("result %+v", res)
	}
	// Sub 0 is owed 1, 2, 3, 5 (4 not acknowledged, 6 another class): 5
	// lost; sub 1 is owed 1, 2, 3: 3 lost.
	if res.Required != 7 || res.Lost != 2 || !reflect.DeepEqual(lost, [][2]int{{0, 4}, {1, 2}}) {
		t.Errorf("required %d lost %d %v, want 7, 2 [[0 4] [1 2]]", res.Required, res.Lost, lost)
	}
	if res.PerSub[0].Delivered != 5 || res.PerSub[1].Delivered != 3 {
		t.Errorf("per subscription %+v", res.PerSub)
	}
}

func TestClassesAndGaps(t *testing.T) {
	class := func(sub, pub int) Class {
		switch {
		case sub == 1:
			return NotOwed
		case pub == 0:
			return Allowed
		case pub >= 2:
			return Beyond
		}
		return Required
	}
	gap := func(publisher string, from, to uint64) Gap {
		return Gap{Sub: 0, Gap: message.Gap{Sub: message.SubID{Edge: "B1", Epoch: 1, N: 1}, Source: message.Source{Publisher: publisher, Epoch: 1}, From: from, To: to}}
	}
	// Delivered: 1 (allowed: extra), 3 (beyond: extra). Lost: 2
	// (required, covered by the gap of P 2..2), 5 (beyond, covered by
	// the gap naming no publisher).
	res, _, lost := run([]Delivery{del(0, 1), del(0, 3)}, class, gap("P", 2, 2), gap("", 5, 5), gap("Q", 1, 0))
	want := Result{Required: 1, Lost: 1, LostCovered: 1, BeyondLost: 1, BeyondCovered: 1, Extra: 2}
	res.PerSub = nil
	if !reflect.DeepEqual(res, want) || !reflect.DeepEqual(lost, [][2]int{{0, 1}, {0, 4}}) {
		t.Errorf("result %+v lost %v, want %+v [[0 1] [0 4]]", res, lost, want)
	}
	// Without the gap naming no publisher, the beyond-δ loss is silent.
	res, _, _ = run([]Delivery{del(0, 1), del(0, 3)}, class, gap("P", 2, 3))
	if res.BeyondLost != 1 || res.BeyondCovered != 0 || res.LostCovered != 1 {
		t.Errorf("result %+v", res)
	}
}
