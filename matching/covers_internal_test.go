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
