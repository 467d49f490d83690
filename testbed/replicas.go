package testbed

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/deltapub/deltapub/internal/sim"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/deltapub/deltapub/overlay/runtime"
	"github.com/deltapub/deltapub/replicas"
)

// The replica-based baseline in the testbed ([overlay] mode = "replicas",
// docs/baseline.md). Every broker of the topology becomes a virtual node
// of `replicas` replicas named after it (R1 → R1a, R1b): selectors
// (brokers = "leaves(B20)") name virtual nodes, and a client attaches to
// one replica of its virtual node; faults name replicas. The plan's Topo
// lists the replicas (each one's parent in it is only for display: the
// first replica of its virtual node, whose parent is the first replica of
// the parent virtual node), VTopo keeps the tree.

// Overlay modes: the broker configuration's (overlay.mode).
const (
	ModeDelta    = runtime.ModeDelta
	ModeReplicas = runtime.ModeReplicas
)

// planReplicas checks the mode and, for replicas, builds the layout.
func planReplicas(s *Spec, p *Plan, errs *errList) bool {
	o := &s.Overlay
	L := s.lines.line
	switch o.Mode {
	case "", ModeDelta:
		o.Mode = ModeDelta
		if s.lines.has("overlay.replicas") {
			errs.add(L("overlay.replicas"), `replicas = %d is for mode = "replicas" (mode is "delta")`, o.Replicas)
			return false
		}
		return true
	case ModeReplicas:
	default:
		errs.add(L("overlay.mode"), "mode = %q: want %q (default) or %q", o.Mode, ModeDelta, ModeReplicas)
		return false
	}
	if o.Replicas == 0 && !s.lines.has("overlay.replicas") {
		o.Replicas = 2
	}
	if o.Replicas < 2 || o.Replicas > replicas.MaxReplicas {
		errs.add(L("overlay.replicas"), "replicas = %d: want 2..%d per virtual node", o.Replicas, replicas.MaxReplicas)
		return false
	}
	if o.Durability != "" && o.Durability != runtime.DurabilityNone {
		errs.add(L("overlay.durability"), "durability = %q: mode = \"replicas\" keeps no publication log (docs/baseline.md); leave it out or set \"none\"", o.Durability)
		return false
	}
	if len(p.Topo.Names)*o.Replicas > MaxBrokers {
		errs.add(L("overlay.replicas"), "%d virtual nodes × %d replicas: at most %d brokers", len(p.Topo.Names), o.Replicas, MaxBrokers)
		return false
	}
	vt := p.Topo
	lay, err := replicas.NewLayout(vt.Names, vt.Parent, o.Replicas, nil)
	if err != nil {
		errs.add(L("topology"), "%v", err)
		return false
	}
	rt := &Topology{Parent: map[string]string{}, Children: map[string][]string{}}
	for _, v := range lay.VNodes {
		first := string(v.Replicas[0].ID)
		for i, r := range v.Replicas {
			id := string(r.ID)
			if vt.Has(id) {
				errs.add(L("topology"), "replica %s of %s has the name of a broker of the tree: rename %s", id, v.Name, id)
				return false
			}
			par := first
			if i == 0 {
				par = ""
				if v.Parent >= 0 {
					par = string(lay.VNodes[v.Parent].Replicas[0].ID)
				}
			}
			rt.Names = append(rt.Names, id)
			rt.Parent[id] = par
			if par != "" {
				rt.Children[par] = append(rt.Children[par], id)
			}
		}
	}
	p.VTopo, p.Layout, p.Topo = vt, lay, rt
	return true
}

// place resolves a client selector: on the tree, or in replicas mode on
// the tree of virtual nodes, each placement then going to one replica
// (the placements of a virtual node go round its replicas in turn).
func (p *Plan) place(sel any, count int, rng *rand.Rand) ([]string, error) {
	if p.Layout == nil {
		return selectBrokers(p.Topo, sel, count, rng)
	}
	vns, err := selectBrokers(p.VTopo, sel, count, rng)
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	out := make([]string, len(vns))
	for i, vn := range vns {
		out[i] = replicas.ReplicaName(vn, seen[vn]%p.Layout.K)
		seen[vn]++
	}
	return out, nil
}

// checkReplicaFaults refuses, in replicas mode, what the baseline does not
// model (freeze, cut, leave: it has no false-suspicion repair, no
// partitions, no graceful leave) and any moment at which every replica of
// a virtual node would be down: the baseline's assumption is at most
// k − 1 crashed replicas per virtual node.
func checkReplicaFaults(p *Plan, errs *errList) {
	if p.Layout == nil {
		return
	}
	down := map[string]map[string]bool{} // virtual node → its crashed replicas
	for _, f := range p.Faults {
		for _, a := range f.Actions {
			switch a.Kind {
			case ActCrash, ActRestart:
			default:
				errs.add(a.Line, "%s at %v: mode %q models crashes and restarts only (docs/baseline.md)", a, f.At, ModeReplicas)
				continue
			}
			vn, ok := p.Layout.VNodeOf(message.BrokerID(a.Broker))
			if !ok {
				continue // planFaults said so
			}
			if down[vn] == nil {
				down[vn] = map[string]bool{}
			}
			if a.Kind == ActRestart {
				delete(down[vn], a.Broker)
				continue
			}
			down[vn][a.Broker] = true
			if len(down[vn]) >= p.Layout.K {
				var names []string
				for r := range down[vn] {
					names = append(names, r)
				}
				sort.Strings(names)
				errs.add(a.Line, "crash %s at %v: every replica of virtual node %s would be down (%s); the baseline survives k − 1 = %d per virtual node",
					a.Broker, f.At, vn, strings.Join(names, ", "), p.Layout.K-1)
			}
		}
	}
}

// tolerance is how many failures the oracle's "beyond" rule allows: δ, or
// in replicas mode k − 1 per virtual node (maxDownPerVNode counts them).
func (p *Plan) tolerance() int {
	if p.Layout != nil {
		return p.Layout.K - 1
	}
	return p.Spec.Overlay.Delta
}

// maxDownPerVNode is, in replicas mode, the most replicas of one virtual
// node not up in state.
func (p *Plan) maxDownPerVNode(state map[string]brokerState) int {
	per := map[string]int{}
	m := 0
	for b, st := range state {
		if st == stUp {
			continue
		}
		if vn, ok := p.Layout.VNodeOf(message.BrokerID(b)); ok {
			per[vn]++
			m = max(m, per[vn])
		}
	}
	return m
}

// brokerOverlay is the broker configuration's overlay table in replicas
// mode (zero otherwise): the layout, with every replica's address from
// addr.
func (p *Plan) brokerOverlay(addr func(string) string) runtime.OverlayConfig {
	if p.Layout == nil {
		return runtime.OverlayConfig{}
	}
	oc := runtime.OverlayConfig{Mode: ModeReplicas, Replicas: p.Layout.K}
	for _, v := range p.Layout.VNodes {
		e := v.Name
		if v.Parent >= 0 {
			e += ":" + p.Layout.VNodes[v.Parent].Name
		}
		oc.Tree = append(oc.Tree, e)
	}
	for _, id := range p.Layout.Replicas() {
		oc.Peers = append(oc.Peers, string(id)+"@"+addr(string(id)))
	}
	return oc
}

// replicaArgs are the `deltapub broker` flags of replicas mode (nil
// otherwise): the layout, every replica's address from addr, and no
// publication log.
func (p *Plan) replicaArgs(addr func(string) string) []string {
	oc := p.brokerOverlay(addr)
	if oc.Mode == "" {
		return nil
	}
	return []string{"--overlay-mode", oc.Mode, "--replicas", strconv.Itoa(oc.Replicas),
		"--replica-tree", strings.Join(oc.Tree, ","), "--replica-peers", strings.Join(oc.Peers, ","),
		"--durability", runtime.DurabilityNone}
}

// replicaWait is how long a replica may take to start in the simulator.
const replicaWait = 10 * time.Second

// replicaFactory is the simulator's node factory in replicas mode.
func (p *Plan) replicaFactory(nc overlay.Config) (sim.Node, error) {
	return replicas.New(nc, p.Layout)
}

// buildSimOverlay builds the overlay before t = 0: the tree one join at a
// time, or in replicas mode every replica at once (each dials the peers
// started before it), until all are joined.
func buildSimOverlay(s *sim.Sim, p *Plan) error {
	if p.Layout == nil {
		tree := sim.NewTree(message.BrokerID(p.Topo.Names[0]))
		for _, n := range p.Topo.Names[1:] {
			if err := tree.Add(message.BrokerID(p.Topo.Parent[n]), message.BrokerID(n)); err != nil {
				return fmt.Errorf("testbed: sim: %v", err)
			}
		}
		// Build the overlay one join at a time; virtual time starts
		// counting for the experiment once every broker has joined.
		if err := s.BuildTree(tree, 10*time.Second); err != nil {
			return fmt.Errorf("testbed: sim: building the overlay: %v", err)
		}
		return nil
	}
	ids := p.Layout.Replicas()
	for _, id := range ids {
		if err := s.AddBroker(id); err != nil {
			return fmt.Errorf("testbed: sim: %v", err)
		}
		if err := s.Join(id); err != nil {
			return fmt.Errorf("testbed: sim: %v", err)
		}
	}
	all := func() bool {
		for _, id := range ids {
			if !s.Joined(id) {
				return false
			}
		}
		return true
	}
	ok, err := s.RunUntilCond(replicaWait, all)
	if err != nil {
		return fmt.Errorf("testbed: sim: building the replicas: %v", err)
	}
	if !ok {
		return fmt.Errorf("testbed: sim: the replicas did not all start within %v (virtual)", replicaWait)
	}
	return nil
}

// replicasK is k in replicas mode, 0 otherwise.
func (p *Plan) replicasK() int {
	if p.Layout == nil {
		return 0
	}
	return p.Layout.K
}

// faultModel describes the fault tolerance of a run in one phrase.
func faultModel(delta, k int) string {
	if k > 0 {
		return fmt.Sprintf("%d replicas per virtual node", k)
	}
	return fmt.Sprintf("δ=%d", delta)
}
