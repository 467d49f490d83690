package routing

import (
	"testing"

	"github.com/deltapub/deltapub/matching"
)

// TestGetThenInsert: Insert after a Get that missed (as onSubFlood and
// the local subscribe path do) still refuses a Sub present by then,
// through every change.
func TestGetThenInsert(t *testing.T) {
	tb := New(matching.NewIndex())
	f := matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: str("c")}}}
	a, b := sub("E", 1), sub("E", 2)
	if _, ok := tb.Get(a); ok {
		t.Fatal("a present in an empty table")
	}
	if ok, err := tb.Insert(Entry{Sub: a, Filter: f, From: "F", Dir: "N"}); !ok || err != nil {
		t.Fatalf("insert a: %v %v", ok, err)
	}
	if ok, _ := tb.Insert(Entry{Sub: a, Filter: f, From: "F", Dir: "N"}); ok {
		t.Fatal("a inserted twice")
	}
	tb.Get(b)
	if ok, _ := tb.Insert(Entry{Sub: a, Filter: f, From: "G", Dir: "N"}); ok {
		t.Fatal("a inserted twice after a miss on b")
	}
	tb.Get(b)
	if ok, err := tb.Insert(Entry{Sub: b, Filter: matching.Filter{}, From: "F", Dir: "N"}); ok || err == nil {
		t.Fatal("invalid b inserted")
	}
	if ok, _ := tb.Insert(Entry{Sub: b, Filter: f, From: "F", Dir: "N"}); !ok {
		t.Fatal("b refused after a failed insert")
	}
	if ok, _ := tb.Insert(Entry{Sub: b, Filter: f, From: "F", Dir: "N"}); ok {
		t.Fatal("b inserted twice")
	}
	tb.Delete(b)
	tb.Get(b)
	if ok, _ := tb.Insert(Entry{Sub: b, Filter: f, From: "F", Dir: "N"}); !ok {
		t.Fatal("b refused after its delete")
	}
	if tb.Len() != 2 {
		t.Fatalf("Len %d, want 2", tb.Len())
	}
}
