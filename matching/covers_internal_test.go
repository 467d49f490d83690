package matching

import (
	"math"
	"testing"
)

// TestSatisfiableFastPath: the int and float shortcuts of satisfiable for
// < and > agree with predD and succD.
func TestSatisfiableFastPath(t *testing.T) {
	var vals []Value
	for _, x := range []int64{math.MinInt64, math.MinInt64 + 1, -1 << 53, -1, 0, 1, 1 << 53, math.MaxInt64 - 1, math.MaxInt64} {
		vals = append(vals, Int(x))
	}
	for _, x := range []float64{-math.MaxFloat64, math.Nextafter(-math.MaxFloat64, 0), -1e300, -0.5, 0, 12.5, 1e300,
		math.Nextafter(math.MaxFloat64, 0), math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN()} {
		vals = append(vals, Float(x))
	}
	for _, x := range vals {
		_, lt := predD(x)
		_, gt := succD(x)
		lt, gt = lt && x.IsNumber(), gt && x.IsNumber()
		if got := satisfiable(&Predicate{Attr: "x", Op: OpLt, Value: x}); got != lt {
			t.Errorf("[x,<,%v]: satisfiable %v, predD %v", x, got, lt)
		}
		if got := satisfiable(&Predicate{Attr: "x", Op: OpGt, Value: x}); got != gt {
			t.Errorf("[x,>,%v]: satisfiable %v, succD %v", x, got, gt)
		}
	}
}

// TestImpliesSmall: the interval shortcut of implies agrees with the
// witness search of numberCandidates on every pair of numeric operators
// over ints and floats around zero, adjacent floats, and operands at the
// shortcut's bounds (and declines operands past them).
func TestImpliesSmall(t *testing.T) {
	ops := []Op{OpNumEq, OpNumNe, OpLt, OpLe, OpGt, OpGe, OpIsPresent}
	var vals []Value
	for v := int64(-4); v <= 4; v++ {
		vals = append(vals, Int(v))
	}
	for _, b := range []int64{smallMax, smallMax + 1, 1 << 53, math.MaxInt64} {
		for _, x := range []int64{b - 2, b - 1, b, -b + 1, -b, -b - 1} {
			vals = append(vals, Int(x), Float(float64(x)))
		}
	}
	vals = append(vals, Int(math.MinInt64))
	for _, f := range []float64{0.1, -0.1, 0.5, 1, -1, 1.5, math.Copysign(0, -1), 1e300, -math.MaxFloat64,
		smallMax - 0.5, smallMax + 0.5, 1<<52 - 0.5, 12.34} {
		vals = append(vals, Float(f), Float(math.Nextafter(f, math.Inf(1))), Float(math.Nextafter(f, math.Inf(-1))))
	}
	decided := 0
	for _, ob := range ops {
		for _, oa := range ops {
			for _, c := range vals {
				for _, d := range vals {
					pb := Predicate{Attr: "x", Op: ob, Value: c}
					pa := Predicate{Attr: "x", Op: oa, Value: d}
					got, ok := impliesSmall(&pb, &pa)
					if !ok {
						continue
					}
					decided++
					if !satisfiable(&pb) {
						t.Fatalf("decided an unsatisfiable pb %v", pb)
					}
					var buf [9]Value
					want := true
					for _, w := range numberCandidates(&buf, pb.Value, pa.Value) {
						if holds(pb.Op, pb.Value, w) && !holds(pa.Op, pa.Value, w) {
							want = false
						}
					}
					if got != want {
						t.Errorf("implies(%v, %v): shortcut %v, witnesses %v", pb, pa, got, want)
					}
					if x, _ := toFloat(c); math.Abs(x) > smallMax {
						t.Errorf("implies(%v, %v): decided past the bound", pb, pa)
					}
					if x, _ := toFloat(d); math.Abs(x) > smallMax {
						t.Errorf("implies(%v, %v): decided past the bound", pb, pa)
					}
				}
			}
		}
	}
	if decided == 0 {
		t.Fatal("nothing decided")
	}
}

// toFloat is v as a float64, rounded (tests).
func toFloat(v Value) (float64, bool) {
	switch v.Kind {
	case KindInt:
		return float64(v.Int), true
	case KindFloat:
		return v.Float, true
	}
	return 0, false
}

// TestPinned: Pinned names the one value of every string predicate that
// admits exactly one (the predicate and [x,eq,v] cover each other), and
// no predicate admits exactly one value it leaves out: for every other
// predicate, no candidate value (stringCandidates holds a witness of any
// difference between two operands' sets) is equivalent to it.
func TestPinned(t *testing.T) {
	ops := []Op{OpEq, OpNeq, OpStrLt, OpStrLe, OpStrGt, OpStrGe, OpStrPrefix, OpStrPostfix, OpStrContains, OpIsPresent}
	operands := []string{"", "\x00", "\x00\x00", "\x01", "a", "ab", "\xff", "\xff\xff"}
	same := func(p *Predicate, v string) bool {
		q := Filter{Preds: []Predicate{{Attr: "x", Op: OpEq, Value: Str(v)}}}
		f := Filter{Preds: []Predicate{*p}}
		return Covers(q, f) && Covers(f, q)
	}
	pinned := 0
	for _, op := range ops {
		for _, c := range operands {
			p := &Predicate{Attr: "x", Op: op, Value: Str(c)}
			if v, ok := p.Pinned(); ok {
				pinned++
				if !satisfiable(p) || !same(p, v) {
					t.Errorf("[x,%v,%q]: pinned to %q, not equivalent", op, c, v)
				}
				continue
			}
			if !satisfiable(p) {
				continue
			}
			for _, v := range stringCandidates(c, "") {
				if same(p, v) {
					t.Errorf("[x,%v,%q]: admits only %q, not pinned", op, c, v)
				}
			}
		}
	}
	if pinned != len(operands)+2 {
		t.Errorf("%d predicates pinned, want %d (eq, str-le '', str-lt '\\x00')", pinned, len(operands)+2)
	}
	if _, ok := (&Predicate{Attr: "x", Op: OpNumEq, Value: Int(1)}).Pinned(); ok {
		t.Error("[x,=,1] pinned (numbers are not)")
	}
}
