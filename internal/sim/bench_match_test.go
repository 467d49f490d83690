package sim

import (
	"math/rand/v2"
	"os"
	"runtime/debug"
	"testing"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/routing"
)

// The routing tables of deltapub sim srds09 (--crashes 0), built without
// the simulator: the same tree and subscriptions (the same random
// sequence as RunSRDS09), every broker's entries with the from-pointer and
// direction the floods give them, inserted in subscription order. Unlike
// the SRDS09Floor benchmarks (one table, kept hot in the caches), these
// touch the 83 tables as the simulation does, one hop after another. GOGC
// is 400 as in deltapub sim srds09 (unless the GOGC variable is set).

func srdsSituGC() func() {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(400)
	return func() { debug.SetGCPercent(old) }
}

type srdsSituTables struct {
	tree   Tree
	order  []message.BrokerID
	idx    map[message.BrokerID]int
	tables []*routing.Table // by index in order
	pubs   []srdsSituPub
	next   [][]int // [at][toward]: the next hop (indices in order)
}

type srdsSituPub struct {
	edge int
	pub  matching.Publication
}

const srdsSituDelta = 3

// srdsSituEntries returns, per broker, the entries of its table.
func srdsSituEntries() (Tree, map[message.BrokerID][]routing.Entry, map[[2]message.BrokerID]message.BrokerID, []message.BrokerID, *workload.Small, *rand.Rand) {
	o := DefaultSRDSOptions()
	pr := rand.New(rand.NewPCG(uint64(o.Seed), 0x5d5))
	tree := RandomTree(pr, o.Brokers, 4)
	edges := tree.Order
	w := srdsWorkload(pr, o.Publishers)
	next := map[[2]message.BrokerID]message.BrokerID{}
	paths := map[[2]message.BrokerID][]message.BrokerID{}
	for _, a := range tree.Order {
		for _, b := range tree.Order {
			if a != b {
				p := tree.Path(a, b)
				paths[[2]message.BrokerID{a, b}] = p
				next[[2]message.BrokerID{a, b}] = p[1]
			}
		}
	}
	per := map[message.BrokerID][]routing.Entry{}
	counts := map[message.BrokerID]uint64{}
	for i := 1; i <= o.Subs; i++ {
		edge := edges[pr.IntN(len(edges))]
		f := w.Filter()
		counts[edge]++
		sub := message.SubID{Edge: edge, Epoch: 1, N: counts[edge]}
		for _, b := range tree.Order {
			if b == edge {
				per[b] = append(per[b], routing.Entry{Sub: sub, Filter: f, From: b, Local: true, Client: message.ClientID(i)})
				continue
			}
			p := paths[[2]message.BrokerID{b, edge}]
			from := p[min(srdsSituDelta+1, len(p)-1)]
			per[b] = append(per[b], routing.Entry{Sub: sub, Filter: f, From: from, Dir: p[1]})
		}
	}
	return tree, per, next, edges, w, pr
}

func newSRDSSitu(tb testing.TB, pubs int) *srdsSituTables {
	tree, per, next, edges, w, pr := srdsSituEntries()
	s := &srdsSituTables{tree: tree, order: tree.Order, idx: map[message.BrokerID]int{}}
	for i, b := range tree.Order {
		s.idx[b] = i
	}
	for _, a := range tree.Order {
		row := make([]int, len(tree.Order))
		for j, b := range tree.Order {
			if a != b {
				row[j] = s.idx[next[[2]message.BrokerID{a, b}]]
			}
		}
		s.next = append(s.next, row)
	}
	for _, b := range tree.Order {
		t := routing.New(matching.NewIndex())
		for _, e := range per[b] {
			if _, err := t.Insert(e); err != nil {
				tb.Fatal(err)
			}
		}
		s.tables = append(s.tables, t)
	}
	for i := 0; i < pubs; i++ {
		class := w.Classes[i%len(w.Classes)]
		p := w.Publication()
		p.Attrs[0].Value = matching.Str(class)
		s.pubs = append(s.pubs, srdsSituPub{edge: s.idx[edges[pr.IntN(len(edges))]], pub: p})
	}
	return s
}

// route forwards p from its edge hop by hop as the brokers would (each
// hop sends it toward the next hop of each recipient, never back) and
// returns the hops (Recipients calls) and matches delivered locally.
func (s *srdsSituTables) route(p *srdsSituPub, buf []message.BrokerID, stack [][2]int) (hops, locals int, _ []message.BrokerID, _ [][2]int) {
	stack = append(stack[:0], [2]int{p.edge, -1})
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		hops++
		var except message.BrokerID
		if h[1] >= 0 {
			except = s.order[h[1]]
		}
		buf = s.tables[h[0]].Recipients(&p.pub, except, buf[:0], func(*routing.Entry) { locals++ })
		var sent [8]int
		ns := 0
	recips:
		for _, r := range buf {
			n := s.next[h[0]][s.idx[r]]
			for _, x := range sent[:ns] {
				if x == n {
					continue recips
				}
			}
			if ns < len(sent) {
				sent[ns] = n
				ns++
			}
			stack = append(stack, [2]int{n, h[0]})
		}
	}
	return hops, locals, buf, stack
}

// BenchmarkSRDS09SituPublishing: one op is one publication routed through
// the 83 tables; ns_per_hop is the cost of one Recipients call in situ.
func BenchmarkSRDS09SituPublishing(b *testing.B) {
	defer srdsSituGC()()
	s := newSRDSSitu(b, 4096)
	var buf []message.BrokerID
	var stack [][2]int
	hops, locals := 0, 0
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		var h, l int
		h, l, buf, stack = s.route(&s.pubs[i%len(s.pubs)], buf, stack)
		hops += h
		locals += l
	}
	el := time.Since(start)
	b.ReportMetric(float64(el.Nanoseconds())/float64(hops), "ns_per_hop")
	b.ReportMetric(float64(hops)/float64(b.N), "hops_per_pub")
	b.ReportMetric(float64(locals)/float64(b.N), "deliveries_per_pub")
}

// BenchmarkSRDS09SituSetup: one op is the 83 tables filled (215,800
// inserts) as the floods do, one subscription into every table after
// another (so each insert finds its table cold, as in the simulation);
// ns_per_insert is the cost of one insert.
func BenchmarkSRDS09SituSetup(b *testing.B) {
	defer srdsSituGC()()
	tree, per, _, _, _, _ := srdsSituEntries()
	n := 0
	for _, b := range tree.Order {
		n += len(per[b])
	}
	subs := len(per[tree.Order[0]])
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		ts := make([]*routing.Table, len(tree.Order))
		for j := range ts {
			ts[j] = routing.New(matching.NewIndex())
		}
		for k := 0; k < subs; k++ {
			for j, br := range tree.Order {
				if _, err := ts[j].Insert(per[br][k]); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(el.Nanoseconds())/float64(n*b.N), "ns_per_insert")
}
