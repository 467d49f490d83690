package overlay

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// harness wires a few Nodes by hand in lock-step: every round each node
// ticks, its outputs are collected, dials are answered at once, and the
// messages sent in a round are delivered in the next one, in order (so
// every link is FIFO). Crashed nodes drop out with their links; frozen
// nodes keep their inbound messages until they resume.
type harness struct {
	t        *testing.T
	nodes    map[message.BrokerID]*Node
	ids      []message.BrokerID
	links    map[[2]message.BrokerID]bool
	inflight []flight
	dead     map[message.BrokerID]bool
	frozen   map[message.BrokerID]bool
	held     map[message.BrokerID][]flight
	got      map[message.ClientID][]message.Message // client messages by client (ClientIDs are global in the harness)
	heldLog  map[message.BrokerID][]HeldChanges     // Ready.Held by broker (Config.PersistHeld)
	notices  []Notice
	dials    [][2]message.BrokerID // every dial requested (from, to), in order
	cfg      Config

	// prestart: restarted brokers whose core is not started yet
	// (restartLate). prestartHolds: what reaches one meanwhile is stepped
	// after the start, as the runtime does; false: it is dropped.
	prestart      map[message.BrokerID]bool
	prestartHolds bool

	// gated: dials between these pairs are left pending (neither LinkUp
	// nor DialFailed) until openGated; slow: messages from [0] to [1] wait
	// in slowHeld until releaseSlow (a link that delivers late, as a new
	// QUIC connection may next to an established one).
	gated    map[[2]message.BrokerID]bool
	slow     map[[2]message.BrokerID]bool
	slowHeld []flight
}

type flight struct {
	from, to message.BrokerID
	m        message.Message
}

func newHarness(t *testing.T, delta int) *harness {
	cfg := DefaultConfig()
	cfg.Delta = delta
	cfg.HeartbeatTicks = 2
	cfg.FailureTicks = 6
	cfg.DACKTicks = 3
	cfg.GoneAfterTicks = 400
	cfg.JoinRetryTicks = 12
	return &harness{t: t, nodes: map[message.BrokerID]*Node{}, links: map[[2]message.BrokerID]bool{},
		dead: map[message.BrokerID]bool{}, frozen: map[message.BrokerID]bool{}, held: map[message.BrokerID][]flight{},
		got: map[message.ClientID][]message.Message{}, cfg: cfg, prestart: map[message.BrokerID]bool{}}
}

func pair(a, b message.BrokerID) [2]message.BrokerID {
	if a < b {
		return [2]message.BrokerID{a, b}
	}
	return [2]message.BrokerID{b, a}
}

func (h *harness) add(id message.BrokerID, epoch uint64) *Node {
	c := h.cfg
	c.ID, c.Addr, c.Epoch = id, "addr-"+string(id), epoch
	n, err := NewNode(c)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, ok := h.nodes[id]; !ok {
		h.ids = append(h.ids, id)
		sort.Slice(h.ids, func(i, j int) bool { return h.ids[i] < h.ids[j] })
	}
	h.nodes[id] = n
	delete(h.dead, id)
	return n
}

func (h *harness) alive(id message.BrokerID) bool {
	_, ok := h.nodes[id]
	return ok && !h.dead[id]
}

func (h *harness) crash(id message.BrokerID) {
	h.dead[id] = true
	for k := range h.links {
		if k[0] == id || k[1] == id {
			delete(h.links, k)
		}
	}
	delete(h.held, id)
}

func (h *harness) collect(id message.BrokerID) {
	n := h.nodes[id]
	r := n.Ready()
	h.notices = append(h.notices, r.Notices...)
	if !r.Held.Empty() {
		if h.heldLog == nil {
			h.heldLog = map[message.BrokerID][]HeldChanges{}
		}
		h.heldLog[id] = append(h.heldLog[id], r.Held)
	}
	for _, c := range r.Closes {
		// As a runtime: the link goes, and the other end is told.
		if h.links[pair(id, c)] {
			delete(h.links, pair(id, c))
			if h.alive(c) && !h.prestart[c] {
				h.nodes[c].LinkDown(id)
				defer h.collect(c)
			}
		}
	}
	for _, d := range r.Dials {
		h.dials = append(h.dials, [2]message.BrokerID{id, d.ID})
		if h.gated[pair(id, d.ID)] {
			continue // pending until openGated
		}
		if h.alive(d.ID) && !h.frozen[d.ID] && d.ID != id {
			if !h.links[pair(id, d.ID)] {
				h.links[pair(id, d.ID)] = true
				n.LinkUp(d.ID)
				if !h.prestart[d.ID] {
					h.nodes[d.ID].LinkUp(id)
				}
			}
		} else {
			n.DialFailed(d.ID)
		}
	}
	for _, m := range r.Messages {
		if h.links[pair(id, m.To)] {
			h.inflight = append(h.inflight, flight{id, m.To, m.Msg})
		}
	}
	for _, c := range r.ToClients {
		h.got[c.To] = append(h.got[c.To], c.Msg)
	}
	if len(r.Dials) > 0 {
		h.collect(id) // LinkUp produced output
	}
}

// round runs one lock-step round.
func (h *harness) round() {
	batch := h.inflight
	h.inflight = nil
	for _, f := range batch {
		if !h.alive(f.to) || !h.links[pair(f.from, f.to)] {
			continue
		}
		if h.slow[[2]message.BrokerID{f.from, f.to}] {
			h.slowHeld = append(h.slowHeld, f)
			continue
		}
		if h.frozen[f.to] {
			h.held[f.to] = append(h.held[f.to], f)
			continue
		}
		if h.prestart[f.to] {
			if h.prestartHolds {
				h.held[f.to] = append(h.held[f.to], f)
			}
			continue // without prestartHolds: dropped, as a runtime that dropped them did
		}
		h.nodes[f.to].Step(f.from, f.m)
		h.collect(f.to)
	}
	for _, id := range h.ids {
		if h.alive(id) && !h.frozen[id] {
			h.nodes[id].Tick()
			h.collect(id)
		}
	}
}

func (h *harness) run(rounds int) {
	for i := 0; i < rounds; i++ {
		h.round()
	}
}

// runUntil runs rounds until cond holds, failing after max rounds.
func (h *harness) runUntil(max int, what string, cond func() bool) {
	for i := 0; i < max; i++ {
		if cond() {
			return
		}
		h.round()
	}
	if !cond() {
		h.t.Fatalf("after %d rounds: %s did not happen", max, what)
	}
}

func (h *harness) do(id message.BrokerID, f func(n *Node)) {
	f(h.nodes[id])
	h.collect(id)
}

// buildTree bootstraps edges[0][0] and joins the others in the order given
// (child, parent).
func (h *harness) buildTree(root message.BrokerID, edges [][2]message.BrokerID) {
	h.add(root, 1)
	h.do(root, func(n *Node) { n.Bootstrap() })
	for _, e := range edges {
		c, p := e[0], e[1]
		h.add(c, 1)
		h.do(c, func(n *Node) { n.Join([]Peer{{ID: p, Addr: "addr-" + string(p)}}) })
		h.runUntil(200, string(c)+" joined", func() bool { return h.nodes[c].Status().Joined })
	}
	h.run(10)
}

func strAttr(name, v string) matching.Attr {
	return matching.Attr{Name: name, Value: matching.Value{Kind: matching.KindString, Str: v}}
}

func intAttr(name string, v int64) matching.Attr {
	return matching.Attr{Name: name, Value: matching.Value{Kind: matching.KindInt, Int: v}}
}

func classFilter(class string) matching.Filter {
	return matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Value{Kind: matching.KindString, Str: class}}}}
}

// subscribe makes client c of broker b subscribe and waits for the
// confirmation.
func (h *harness) subscribe(b message.BrokerID, c message.ClientID, f matching.Filter) message.SubID {
	return h.subscribeWith(b, c, &message.Subscribe{Req: uint64(c), Filter: f}).Sub
}

// subscribeWith opens client c at broker b, sends s and waits for its
// confirmation (a SubAck with an error fails the test).
func (h *harness) subscribeWith(b message.BrokerID, c message.ClientID, s *message.Subscribe) *message.SubAck {
	h.t.Helper()
	h.do(b, func(n *Node) { n.ClientOpen(c); n.Client(c, s) })
	var ack *message.SubAck
	h.runUntil(300, fmt.Sprintf("subscription of client %d confirmed", c), func() bool {
		for _, m := range h.got[c] {
			if a, ok := m.(*message.SubAck); ok {
				if a.Err != "" {
					h.t.Fatalf("SubAck error: %s", a.Err)
				}
				if a.Confirmed {
					ack = a
					return true
				}
			}
		}
		return false
	})
	return ack
}

func (h *harness) publish(b message.BrokerID, c message.ClientID, seq uint64, class string) {
	h.do(b, func(n *Node) {
		n.Client(c, &message.Publish{Seq: seq, Attrs: []matching.Attr{strAttr("class", class), intAttr("n", int64(seq))}})
	})
}

// deliveries returns the sequence numbers delivered to client c, in order.
func (h *harness) deliveries(c message.ClientID) []uint64 {
	var out []uint64
	for _, m := range h.got[c] {
		if d, ok := m.(*message.Deliver); ok {
			out = append(out, d.Pub.Seq)
		}
	}
	return out
}

func (h *harness) pubAcks(c message.ClientID) (ok, refused int) {
	for _, m := range h.got[c] {
		if a, isAck := m.(*message.PubAck); isAck {
			if a.Err == "" {
				ok++
			} else {
				refused++
			}
		}
	}
	return
}

// checkExactFIFO fails unless client c got exactly 1..n in order.
func (h *harness) checkExactFIFO(c message.ClientID, n int) {
	h.t.Helper()
	got := h.deliveries(c)
	if len(got) != n {
		h.t.Fatalf("client %d: %d deliveries, want %d: %v", c, len(got), n, got)
	}
	for i, s := range got {
		if s != uint64(i+1) {
			h.t.Fatalf("client %d: delivery %d is seq %d, want %d (all: %v)", c, i, s, i+1, got)
		}
	}
}

func (h *harness) queuesEmpty() bool {
	for _, id := range h.ids {
		if h.alive(id) && h.nodes[id].Status().QueueLen > 0 {
			return false
		}
	}
	return true
}

func (h *harness) queueReport() string {
	s := ""
	for _, id := range h.ids {
		if h.alive(id) {
			s += fmt.Sprintf(" %s:%d", id, h.nodes[id].Status().QueueLen)
		}
	}
	return s
}

// A chain P - A - B - C - D - S with side branches; δ = 2.
//
//	P1 - A - B - C - D - S1
//	         |       |
//	         X       Y - S2
var chainEdges = [][2]message.BrokerID{
	{"A", "P1"}, {"B", "A"}, {"C", "B"}, {"D", "C"}, {"S1", "D"}, {"X", "B"}, {"Y", "D"}, {"S2", "Y"},
}

func TestHarnessNoFailure(t *testing.T) {
	h := newHarness(t, 2)
	h.buildTree("P1", chainEdges)
	for _, id := range h.ids {
		st := h.nodes[id].Status()
		if !st.Joined {
			t.Fatalf("%s not joined", id)
		}
	}
	// Every broker's map holds exactly its (δ+1)-neighbourhood.
	if got := len(h.nodes["S1"].Status().Map); got != 6 { // S1 D C B Y S2 (A is 4 hops away)
		t.Fatalf("S1 map has %d brokers, want 6: %v", got, h.nodes["S1"].Status().Map)
	}
	h.subscribe("S1", 101, classFilter("stock"))
	h.subscribe("S2", 102, classFilter("stock"))
	h.subscribe("X", 103, classFilter("other"))
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 1}) })
	for s := uint64(1); s <= 30; s++ {
		h.publish("P1", 1, s, "stock")
		h.round()
	}
	// A retry of an accepted Seq is acknowledged again, not published.
	h.publish("P1", 1, 30, "stock")
	h.runUntil(100, "queues drained", h.queuesEmpty)
	h.checkExactFIFO(101, 30)
	h.checkExactFIFO(102, 30)
	if got := h.deliveries(103); len(got) != 0 {
		t.Fatalf("non-matching subscriber got %v", got)
	}
	if ok, bad := h.pubAcks(1); ok != 31 || bad != 0 {
		t.Fatalf("pub acks ok=%d refused=%d, want 31/0", ok, bad)
	}
}

// chainWithTraffic builds the chain tree from P1, subscribes S1 (client
// 101) and S2 (102) to class stock, and publishes n stock publications from
// client 1 at P1, one round each. It returns the last sequence number.
func (h *harness) chainWithTraffic(n uint64) uint64 {
	h.buildTree("P1", chainEdges)
	h.subscribe("S1", 101, classFilter("stock"))
	h.subscribe("S2", 102, classFilter("stock"))
	h.do("P1", func(n *Node) { n.ClientOpen(1) })
	for seq := uint64(1); seq <= n; seq++ {
		h.publish("P1", 1, seq, "stock")
		h.round()
	}
	return n
}

func TestHarnessBypassDeltaAdjacent(t *testing.T) {
	for _, delta := range []int{1, 2} {
		t.Run(fmt.Sprint("delta=", delta), func(t *testing.T) {
			h := newHarness(t, delta)
			seq := h.chainWithTraffic(10)
			// δ adjacent crashes in the middle of the path.
			crashed := []message.BrokerID{"B", "C"}[:delta]
			for _, id := range crashed {
				h.crash(id)
			}
			for ; seq < 40; seq++ {
				h.publish("P1", 1, seq+1, "stock")
				h.round()
			}
			h.runUntil(300, "queues drained"+h.queueReport(), h.queuesEmpty)
			h.checkExactFIFO(101, 40)
			h.checkExactFIFO(102, 40)
		})
	}
}

func (h *harness) freeze(id message.BrokerID) { h.frozen[id] = true }

// openGated brings up the gated link a-b as a dial answered now: a is told
// LinkUp first (and its outputs collected) before b is.
func (h *harness) openGated(a, b message.BrokerID) {
	delete(h.gated, pair(a, b))
	h.links[pair(a, b)] = true
	h.do(a, func(n *Node) { n.LinkUp(b) })
	h.do(b, func(n *Node) { n.LinkUp(a) })
}

// releaseSlow delivers what the slow links held, in order, before anything
// newer, and makes them ordinary links again.
func (h *harness) releaseSlow() {
	h.slow = nil
	h.inflight = append(h.slowHeld, h.inflight...)
	h.slowHeld = nil
}

// resume delivers what waited in the frozen broker's links, in order,
// before anything newer.
func (h *harness) resume(id message.BrokerID) {
	delete(h.frozen, id)
	h.inflight = append(h.held[id], h.inflight...)
	delete(h.held, id)
}

// restart replaces a crashed broker by a new incarnation that rejoins
// through its former neighbours.
func (h *harness) restart(id message.BrokerID, epoch uint64, neighbours ...message.BrokerID) {
	h.add(id, epoch)
	var jps []Peer
	for _, nb := range neighbours {
		jps = append(jps, Peer{ID: nb, Addr: "addr-" + string(nb)})
	}
	h.do(id, func(n *Node) { n.Join(jps) })
}

// restartLate replaces a crashed broker by a new incarnation whose
// endpoint is up (its links come up, from its side unannounced) but whose
// core is not started yet, as in the runtime while it resolves its
// joinpoint (overlay/runtime/links.go resolveJoinpoints): start it with
// startLate.
func (h *harness) restartLate(id message.BrokerID, epoch uint64) {
	h.add(id, epoch)
	h.prestart[id] = true
}

// startLate starts a broker added by restartLate as the runtime's start
// does: the core joins through jps, then hears of every link that came up
// before; what reached it meanwhile follows (prestartHolds) or was lost.
func (h *harness) startLate(id message.BrokerID, jps ...message.BrokerID) {
	delete(h.prestart, id)
	var peers []Peer
	for _, nb := range jps {
		peers = append(peers, Peer{ID: nb, Addr: "addr-" + string(nb)})
	}
	n := h.nodes[id]
	var linked []message.BrokerID
	for k := range h.links {
		if k[0] == id {
			linked = append(linked, k[1])
		} else if k[1] == id {
			linked = append(linked, k[0])
		}
	}
	sortIDs(linked)
	for _, p := range linked {
		n.LinkUp(p)
	}
	n.Join(peers)
	h.collect(id)
	h.inflight = append(h.held[id], h.inflight...)
	delete(h.held, id)
}

func (h *harness) checkNoDupNoReorder(c message.ClientID) {
	h.t.Helper()
	last := uint64(0)
	for _, s := range h.deliveries(c) {
		if s <= last {
			h.t.Fatalf("client %d: seq %d after %d (all: %v)", c, s, last, h.deliveries(c))
		}
		last = s
	}
}

// A false suspicion: the middle broker freezes long enough to be bypassed,
// then resumes and forwards its backlog late: no duplicate, no reordering,
// no loss.
func TestHarnessFalseSuspicion(t *testing.T) {
	h := newHarness(t, 2)
	h.buildTree("P1", chainEdges)
	h.subscribe("S1", 101, classFilter("stock"))
	h.subscribe("S2", 102, classFilter("stock"))
	h.do("P1", func(n *Node) { n.ClientOpen(1) })
	seq := uint64(0)
	pubRounds := func(k int) {
		for i := 0; i < k; i++ {
			seq++
			h.publish("P1", 1, seq, "stock")
			h.round()
		}
	}
	pubRounds(5)
	h.freeze("C")
	pubRounds(4 * h.cfg.FailureTicks) // suspected and bypassed meanwhile
	suspected := false
	for _, nt := range h.notices {
		if nt.Kind == NoticeSuspected && nt.Peer == "C" {
			suspected = true
		}
	}
	if !suspected {
		t.Fatal("the frozen broker was never suspected")
	}
	h.resume("C")
	pubRounds(20)
	h.runUntil(400, "queues drained"+h.queueReport(), h.queuesEmpty)
	h.checkExactFIFO(101, int(seq))
	h.checkExactFIFO(102, int(seq))
	if d := h.nodes["D"].Status().Counters.Duplicates; d == 0 {
		t.Log("note: no duplicate reached D (the backlog may have been dropped with the closed link)")
	}
}

// A restart: the middle broker crashes (bypassed), comes back under a new
// epoch, recovers its state from its neighbours, and the bypass is torn
// down; nothing lost, duplicated or reordered across the switch-back.
func TestHarnessRestartTearsDownBypass(t *testing.T) {
	h := newHarness(t, 1)
	h.buildTree("P1", chainEdges)
	h.subscribe("S1", 101, classFilter("stock"))
	h.do("P1", func(n *Node) { n.ClientOpen(1) })
	seq := uint64(0)
	pubRounds := func(k int) {
		for i := 0; i < k; i++ {
			seq++
			h.publish("P1", 1, seq, "stock")
			h.round()
		}
	}
	pubRounds(5)
	h.crash("C")
	pubRounds(3 * h.cfg.FailureTicks)
	if st := h.nodes["B"].Status(); len(st.Bypasses) == 0 {
		t.Fatalf("B uses no bypass while C is down: %+v", st.Links)
	}
	h.restart("C", 2, "B", "D")
	h.runUntil(200, "C recovered", func() bool { return h.nodes["C"].Joined() })
	pubRounds(30)
	h.runUntil(400, "queues drained"+h.queueReport(), h.queuesEmpty)
	h.checkExactFIFO(101, int(seq))
	if st := h.nodes["B"].Status(); len(st.Bypasses) != 0 {
		t.Fatalf("B still bypasses %v after C recovered", st.Bypasses)
	}
	if st := h.nodes["C"].Status(); st.Subs == 0 {
		t.Fatal("the restarted broker learned no subscription")
	}
}

// The queue bound: with the publisher's side cut off (δ+1 brokers down next
// to it), nothing can be purged; at MaxQueue the edge refuses with
// "backpressure" and the queue stays within the bound.
func TestHarnessQueueBound(t *testing.T) {
	h := newHarness(t, 1)
	h.cfg.MaxQueue = 8
	h.buildTree("P1", chainEdges)
	h.subscribe("S1", 101, classFilter("stock"))
	h.do("P1", func(n *Node) { n.ClientOpen(1) })
	h.crash("A")
	h.crash("B")
	refused := 0
	seq := uint64(1)
	for i := 0; i < 40; i++ {
		h.publish("P1", 1, seq, "stock")
		h.round()
		if q := h.nodes["P1"].QueueLen(); q > h.cfg.MaxQueue {
			t.Fatalf("queue %d above the bound %d", q, h.cfg.MaxQueue)
		}
		last := h.got[1][len(h.got[1])-1].(*message.PubAck)
		if last.Err == "backpressure" {
			refused++
		} else if last.Err == "" {
			seq++
		} else {
			t.Fatalf("unexpected PubAck error %q", last.Err)
		}
	}
	if refused == 0 {
		t.Fatal("no backpressure at the queue bound")
	}
}

// Unsubscribe while publishing: everything acknowledged before the
// Unsubscribe is delivered, nothing after the UnsubAck.
func TestHarnessUnsubscribe(t *testing.T) {
	h := newHarness(t, 2)
	h.buildTree("P1", chainEdges)
	sub := h.subscribe("S1", 101, classFilter("stock"))
	h.do("P1", func(n *Node) { n.ClientOpen(1) })
	for s := uint64(1); s <= 10; s++ {
		h.publish("P1", 1, s, "stock")
	}
	h.do("S1", func(n *Node) { n.Client(101, &message.Unsubscribe{Sub: sub}) })
	for s := uint64(11); s <= 20; s++ {
		h.publish("P1", 1, s, "stock")
		h.round()
	}
	h.runUntil(300, "queues drained", h.queuesEmpty)
	got := h.deliveries(101)
	if len(got) < 10 {
		t.Fatalf("publications acked before the Unsubscribe were lost: %v", got)
	}
	h.checkNoDupNoReorder(101)
	acked := false
	for _, m := range h.got[101] {
		switch m := m.(type) {
		case *message.UnsubAck:
			acked = true
		case *message.Deliver:
			if acked {
				t.Fatalf("delivery %v after the UnsubAck", m.Pub)
			}
		}
	}
	if !acked {
		t.Fatal("no UnsubAck")
	}
	for _, id := range h.ids {
		if _, ok := h.nodes[id].table.Get(sub); ok {
			t.Fatalf("%s still routes toward the withdrawn subscription", id)
		}
	}
}

// Beyond δ: δ+1 adjacent crashes between publisher and subscriber. No
// duplicate, no reordering, and the subscriber gets Gap notices.
func TestHarnessBeyondDeltaGap(t *testing.T) {
	h := newHarness(t, 1)
	h.buildTree("P1", chainEdges)
	h.subscribe("S1", 101, classFilter("stock"))
	h.do("P1", func(n *Node) { n.ClientOpen(1) })
	for s := uint64(1); s <= 5; s++ {
		h.publish("P1", 1, s, "stock")
		h.round()
	}
	h.crash("B")
	h.crash("C")
	for s := uint64(6); s <= 40; s++ {
		h.publish("P1", 1, s, "stock")
		h.round()
	}
	h.run(100)
	h.checkNoDupNoReorder(101)
	gaps := 0
	for _, m := range h.got[101] {
		if g, ok := m.(*message.Gap); ok {
			gaps++
			if g.To != 0 && g.To < g.From {
				t.Fatalf("malformed gap %+v", g)
			}
		}
	}
	if gaps == 0 {
		t.Fatal("no Gap notice for a loss beyond δ")
	}
}

// Join state transfer: a new broker gets every subscription with its
// from-pointer recomputed for it (PROTOCOL §3).
func TestHarnessJoinStateTransfer(t *testing.T) {
	h := newHarness(t, 1)
	h.buildTree("P1", chainEdges)
	s1 := h.subscribe("S1", 101, classFilter("stock")) // at S1: J-D-S1 is 2 hops = δ+1
	s2 := h.subscribe("S2", 102, classFilter("stock")) // at S2: J-D-Y-S2 is 3 hops
	px := h.subscribe("X", 103, classFilter("stock"))  // at X: J-D-C-B-X
	h.add("J", 1)
	h.do("J", func(n *Node) { n.Join([]Peer{{ID: "D", Addr: "addr-D"}}) })
	h.runUntil(200, "J joined", func() bool { return h.nodes["J"].Joined() })
	j := h.nodes["J"]
	for _, tc := range []struct {
		sub  message.SubID
		from message.BrokerID
	}{{s1, "S1"}, {s2, "Y"}, {px, "C"}} {
		e, ok := j.table.Get(tc.sub)
		if !ok {
			t.Fatalf("J lacks %v", tc.sub)
		}
		if e.From != tc.from || e.Dir != "D" {
			t.Errorf("J's entry for %v: from %s dir %s, want from %s dir D", tc.sub, e.From, e.Dir, tc.from)
		}
	}
	// And the new broker can publish to all of them.
	h.do("J", func(n *Node) { n.ClientOpen(9) })
	for s := uint64(1); s <= 5; s++ {
		h.publish("J", 9, s, "stock")
		h.round()
	}
	h.runUntil(200, "queues drained", h.queuesEmpty)
	for _, c := range []message.ClientID{101, 102, 103} {
		h.checkExactFIFO(c, 5)
	}
}

// A publication naming an attribute twice is refused at the edge with a
// clear error (the index would report a subscription once per copy: a
// local subscriber got it twice); its Seq stays free for the next one.
func TestHarnessRefusesRepeatedAttribute(t *testing.T) {
	h := newHarness(t, 2)
	h.buildTree("P1", chainEdges)
	h.subscribe("P1", 101, classFilter("stock")) // local to the publisher's edge
	h.subscribe("S1", 102, classFilter("stock"))
	h.do("P1", func(n *Node) { n.ClientOpen(1); n.Client(1, &message.ClientHello{Publisher: "pub", Epoch: 1}) })
	h.do("P1", func(n *Node) {
		n.Client(1, &message.Publish{Seq: 1, Attrs: []matching.Attr{strAttr("class", "stock"), strAttr("class", "stock")}})
	})
	h.run(5)
	var refusal string
	for _, m := range h.got[1] {
		if a, ok := m.(*message.PubAck); ok && a.Seq == 1 {
			refusal = a.Err
		}
	}
	if !strings.Contains(refusal, `"class" appears twice`) {
		t.Fatalf("PubAck for a repeated attribute: %q, want a refusal naming it", refusal)
	}
	h.publish("P1", 1, 1, "stock")
	h.runUntil(100, "queues drained", h.queuesEmpty)
	h.checkExactFIFO(101, 1)
	h.checkExactFIFO(102, 1)
}
