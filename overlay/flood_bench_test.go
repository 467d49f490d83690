package overlay

import (
	"fmt"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// floodStar builds a joined star: C in the middle, A, B and D around it.
func floodStar(t *testing.T) *harness {
	h := newHarness(t, 3)
	h.buildTree("C", [][2]message.BrokerID{{"A", "C"}, {"B", "C"}, {"D", "C"}})
	return h
}

// BenchmarkSubFloodRelay measures the relay's part of a subscription
// flood: C gets a SubFlood from A, floods it to B and D, gets their
// SubConfirms and confirms to A. Batches of 1,000 floods are pending at
// once (as during a setup); the filters are distinct, so the routing
// table's insert is part of the figure.
func BenchmarkSubFloodRelay(b *testing.B) {
	h := floodStar(&testing.T{})
	n := h.nodes["C"]
	n.Ready()
	const batch = 1000
	filters := make([]matching.Filter, batch)
	for i := range filters {
		filters[i] = matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq,
			Value: matching.Value{Kind: matching.KindString, Str: fmt.Sprintf("c%d", i)}}}}
	}
	floods := make([]message.SubFlood, batch)
	confirms := make([]message.SubConfirm, batch)
	next := uint64(1)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		b.StopTimer()
		for i := range floods {
			sub := message.SubID{Edge: "A", Epoch: 1, N: next}
			next++
			floods[i] = message.SubFlood{Sub: sub, Filter: filters[i], From: "A"}
			confirms[i] = message.SubConfirm{Sub: sub}
		}
		b.StartTimer()
		for i := range floods {
			n.Step("A", &floods[i])
			n.Ready()
		}
		for i := range confirms {
			n.Step("B", &confirms[i])
			n.Step("D", &confirms[i])
			n.Ready()
		}
	}
}
