package matching

import (
	"math"
	"testing"
)

// TestSatisfiableIntFastPath: the int shortcut of satisfiable for < and >
// agrees with predD and succD.
func TestSatisfiableIntFastPath(t *testing.T) {
	for _, x := range []int64{math.MinInt64, math.MinInt64 + 1, -1 << 53, -1, 0, 1, 1 << 53, math.MaxInt64 - 1, math.MaxInt64} {
		_, lt := predD(Int(x))
		_, gt := succD(Int(x))
		if got := satisfiable(&Predicate{Attr: "x", Op: OpLt, Value: Int(x)}); got != lt {
			t.Errorf("[x,<,%d]: satisfiable %v, predD %v", x, got, lt)
		}
		if got := satisfiable(&Predicate{Attr: "x", Op: OpGt, Value: Int(x)}); got != gt {
			t.Errorf("[x,>,%d]: satisfiable %v, succD %v", x, got, gt)
		}
	}
}

// TestImpliesSmallInts: the interval shortcut of implies agrees with the
// witness search of numberCandidates on every pair of numeric operators
// over ints around zero and at the shortcut's bounds (and declines
// operands past them).
func TestImpliesSmallInts(t *testing.T) {
	ops := []Op{OpNumEq, OpNumNe, OpLt, OpLe, OpGt, OpGe, OpIsPresent}
	var vals []int64
	for v := int64(-4); v <= 4; v++ {
		vals = append(vals, v)
	}
	for _, b := range []int64{smallIntMax, smallIntMax + 1, 1 << 53, math.MaxInt64} {
		vals = append(vals, b-2, b-1, b, -b+1, -b, -b-1)
	}
	vals = append(vals, math.MinInt64)
	decided := 0
	for _, ob := range ops {
		for _, oa := range ops {
			for _, c := range vals {
				for _, d := range vals {
					pb := Predicate{Attr: "x", Op: ob, Value: Int(c)}
					pa := Predicate{Attr: "x", Op: oa, Value: Int(d)}
					got, ok := impliesSmallInts(&pb, &pa)
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
					if c > smallIntMax || c < -smallIntMax || d > smallIntMax || d < -smallIntMax {
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
