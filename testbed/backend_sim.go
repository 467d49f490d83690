package testbed

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/deltapub/deltapub/internal/sim"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/deltapub/deltapub/overlay/runtime"
)

// simBackend runs the plan in internal/sim: the same protocol core as the
// brokers, over a seeded in-memory network, in virtual time. It is
// deterministic in the file's seed. Per-broker message counts come from a
// counting wrapper around each node; CPU and memory are not simulated.
type simBackend struct {
	factory sim.NodeFactory
}

// simChunk is how much virtual time runs between two looks at ctx and two
// progress updates.
const simChunk = 100 * time.Millisecond

// brokerCounters are one broker's message counters across incarnations
// (the simulator runs in one goroutine: no locks).
type brokerCounters struct {
	in, out, ctrl int64
	// byType is the control messages sent by type, cumulative over the
	// broker's incarnations (what the storm rule reads, see sentControl).
	byType map[string]int64
}

// countingNode counts what a node receives from and sends to peers.
type countingNode struct {
	sim.Node
	c *brokerCounters
}

func (n countingNode) Step(from message.BrokerID, m message.Message) {
	n.c.in++
	n.Node.Step(from, m)
}

func (n countingNode) Ready() overlay.Ready {
	r := n.Node.Ready()
	n.c.out += int64(len(r.Messages))
	for _, e := range r.Messages {
		if !isPublicationMsg(e.Msg) {
			n.c.ctrl++
			if n.c.byType == nil {
				n.c.byType = map[string]int64{}
			}
			n.c.byType[e.Msg.Type().String()]++
		}
	}
	return r
}

// controlCounter is what the simulator exposes of a broker's control
// traffic, cumulative by message type ((*sim.Sim).SentControl).
// Where the simulator has it the sim mode reads it, so that the testbed and
// the simulator's own checker judge the same counts; until then the
// counting wrapper's per-type counts stand in (both count what the core
// sent, before the simulated network drops anything).
type controlCounter interface {
	SentControl(id message.BrokerID) map[string]int64
}

// sentControl is broker id's cumulative control messages by type.
func sentControl(s *sim.Sim, c *brokerCounters, id message.BrokerID) map[string]int64 {
	if cc, ok := any(s).(controlCounter); ok {
		return cc.SentControl(id)
	}
	out := make(map[string]int64, len(c.byType))
	for t, n := range c.byType {
		out[t] = n
	}
	return out
}

// isPublicationMsg tells publication traffic (message.Pub, ReplicaPub) from control
// traffic (heartbeats, DACKs, joins, subscriptions, confirmations).
func isPublicationMsg(m message.Message) bool { return message.IsPublication(m.Type()) }

func ticks(d, tick time.Duration) int {
	n := int((d + tick - 1) / tick)
	if n < 1 {
		n = 1
	}
	return n
}

func (b simBackend) Run(ctx context.Context, p *Plan, rec *Recorder) error {
	spec := p.Spec
	o := spec.Overlay
	counters := map[message.BrokerID]*brokerCounters{}
	base := b.factory
	if p.Layout != nil {
		base = p.replicaFactory
	}
	cfg := sim.DefaultConfig()
	cfg.Seed = spec.Seed
	cfg.Core.Delta = o.Delta
	cfg.Tick = o.Tick.Duration
	cfg.Core.HeartbeatTicks = ticks(o.Heartbeat.Duration, cfg.Tick)
	cfg.Core.FailureTicks = ticks(o.FailureTimeout.Duration, cfg.Tick)
	cfg.Core.DACKTicks = ticks(o.DACKPeriod.Duration, cfg.Tick)
	cfg.Core.GoneAfterTicks = ticks(o.GoneAfter.Duration, cfg.Tick)
	cfg.Core.MaxQueue = o.MaxQueue
	// The simulator models the publication log when the file asks for one
	// (process mode keeps one by default, in each broker's data directory).
	cfg.Core.Durable = hasLog(o.Durability)
	cfg.Core.MemoryLog = o.Durability == runtime.DurabilityMemory
	if cfg.Core.Durable { // the brokers' retention, defaults included
		r := runtime.RetainFor(o.Durability, runtime.RetainConfig{Time: o.Retain.Duration})
		if r.Time > 0 {
			cfg.Core.RetainTicks = ticks(r.Time, cfg.Tick)
		}
		cfg.Core.RetainBytes = r.Bytes
	}
	// Away durable subscriptions kept at their edge, as the brokers do.
	if keep := cmp.Or(o.DurableKeep.Duration, runtime.DefaultDurableKeep); keep > 0 {
		cfg.Core.KeepAwayTicks = ticks(keep, cfg.Tick)
		cfg.Core.MaxHeldBytes = runtime.DefaultMaxHeldBytes
	}
	cfg.LinkDelay, cfg.LinkJitter = o.LinkDelay.Duration, o.LinkJitter.Duration
	if cfg.DialTimeout < 4*cfg.LinkDelay {
		cfg.DialTimeout = 4 * cfg.LinkDelay
	}
	cfg.SampleEvery = 50 * time.Millisecond
	// The event bound scales with the experiment; at the bound the run
	// stops with sim.ErrEventBound (a livelock, or a file far too big).
	cfg.MaxEvents = 200_000_000
	cfg.NewNode = func(nc overlay.Config) (sim.Node, error) {
		n, err := base(nc)
		if err != nil {
			return nil, err
		}
		c := counters[nc.ID]
		if c == nil {
			c = &brokerCounters{}
			counters[nc.ID] = c
		}
		return countingNode{n, c}, nil
	}
	s, err := sim.New(cfg)
	if err != nil {
		return fmt.Errorf("testbed: sim: %v", err)
	}
	if err := buildSimOverlay(s, p); err != nil {
		return err
	}
	start := s.Now()
	rec.Note(fmt.Sprintf("sim: overlay of %d brokers built in %v of virtual time before t=0", len(p.Topo.Names), start.Round(time.Millisecond)))
	// Subscribers: one simulated client per subscription.
	type subRef struct{ subscriber, sub int }
	var refs []subRef
	for si, sb := range p.Subscribers {
		for k, f := range sb.Parsed {
			name := fmt.Sprintf("%s.%d", sb.Name, k)
			add := s.AddSubscriber
			if sb.Durable {
				add = s.AddDurable // its sessions follow the disconnect and reconnect faults
			}
			if err := add(name, message.BrokerID(sb.Broker), f); err != nil {
				return fmt.Errorf("testbed: sim: %v", err)
			}
			refs = append(refs, subRef{si, k})
		}
	}
	// Publishers start at their time, fed by the plan's streams.
	var pubErr error
	for _, pb := range p.Publishers {
		pb := pb
		st := pb.Stream()
		every := time.Duration(float64(time.Second) / pb.Rate)
		s.At(start+pb.Start, func() {
			gen := func() []matching.Attr {
				ev, ok := st.Next()
				if !ok {
					// The stream is exhausted only if the simulator
					// publishes past Stop; repeat the last shape.
					return []matching.Attr{{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "END"}}}
				}
				return ev.Attrs
			}
			if err := s.AddPublisher(pb.Name, message.BrokerID(pb.Broker), every, start+pb.Stop, gen); err != nil && pubErr == nil {
				pubErr = err
			}
		})
	}
	if len(p.Publishers) > 0 && p.Publishers[0].Payload > 0 {
		rec.Note("sim: payload bytes are not simulated (delays do not depend on size)")
	}
	// The tree as repaired after the leaves so far: a restart rejoins
	// through the broker's current ancestors, not through one that left
	// (as internal/sim's scenario runner does with its plan).
	cur := p.Topo.clone()
	// The joinpoints are those of the real-time modes (rejoinpointsFor):
	// the ancestors nearest first, for the root its children, then the
	// nearest others up to δ+1 (with only its ancestors, a restarted root
	// had joined nowhere).
	ancestors := func(n string) []message.BrokerID {
		var out []message.BrokerID
		for _, a := range rejoinpointsFor(cur, n, o.Delta) {
			out = append(out, message.BrokerID(a))
		}
		return out
	}
	// Leaves under way: a check every tick records when each is
	// confirmed (bounded by leaveWait of virtual time).
	pendingLeaves := map[string]int{} // broker → fault index
	var watchLeave func(i int, id message.BrokerID, t0 time.Duration)
	watchLeave = func(i int, id message.BrokerID, t0 time.Duration) {
		switch {
		case s.HasLeft(id):
			delete(pendingLeaves, string(id))
			rec.LeaveDone(i, string(id), s.Now()-t0, nil)
		case s.Now()-t0 >= leaveWait(o):
			delete(pendingLeaves, string(id))
			rec.LeaveDone(i, string(id), s.Now()-t0, fmt.Errorf("%s's leave not confirmed after %v of virtual time", id, s.Now()-t0))
		default:
			s.At(s.Now()+cfg.Tick, func() { watchLeave(i, id, t0) })
		}
	}
	// Faults.
	for i, f := range p.Faults {
		i, f := i, f
		s.At(start+f.At, func() {
			var errs []string
			for _, a := range f.Actions {
				id := message.BrokerID(a.Broker)
				var err error
				switch a.Kind {
				case ActCrash:
					err = s.Crash(id)
				case ActRestart:
					// The data directory's place first, as process and
					// inproc, and its log (not with restart_clean).
					if p.Layout != nil {
						err = s.RestartWith(id, sim.RestartOptions{StaleLink: -1}) // the layout names its peers
					} else {
						err = s.RestartWith(id, sim.RestartOptions{Joinpoints: ancestors(a.Broker), StaleLink: -1, Place: !a.Clean, Log: !a.Clean})
					}
				case ActDisconnect:
					err = s.Disconnect(a.Subscriber + ".0")
				case ActReconnect:
					err = s.Reconnect(a.Subscriber+".0", id)
				case ActFreeze:
					err = s.Freeze(id)
				case ActResume:
					err = s.Resume(id)
				case ActCut:
					err = s.Cut(id, message.BrokerID(a.Peer))
				case ActHeal:
					err = s.Heal(id, message.BrokerID(a.Peer))
				case ActLeave:
					// Sim.Leave excludes the broker's subscribers from
					// now on and stops its publishers, as the oracle
					// does (docs/testbed.md).
					err = s.Leave(id)
					if err == nil {
						cur.detach(a.Broker)
						pendingLeaves[a.Broker] = i
						t0 := s.Now()
						s.At(t0+cfg.Tick, func() { watchLeave(i, id, t0) })
					}
				}
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", a, err))
				}
			}
			var err error
			if len(errs) > 0 {
				err = fmt.Errorf("%v", errs)
			}
			rec.FaultApplied(i, s.Now()-start, err)
		})
	}
	// Run in chunks, feeding the recorder as the log grows.
	log := s.Log()
	nPubs, nDels, nGaps := 0, 0, 0
	last := map[message.BrokerID]brokerCounters{}
	nextSample := spec.Metrics.Sample.Duration
	feed := func() {
		for ; nPubs < len(log.Pubs); nPubs++ {
			pr := log.Pubs[nPubs]
			rec.Published(pr.ID, pr.ID.Publisher, pr.SentAt-start, pr.Attrs)
		}
		for ; nDels < log.NumDeliveries(); nDels++ {
			d := log.Delivery(nDels)
			if d.Sub < 0 || d.Sub >= len(refs) {
				continue
			}
			r := refs[d.Sub]
			rec.Delivered(Delivery{Subscriber: r.subscriber, Sub: r.sub, Pub: d.Pub, PublishedAt: time.Duration(d.PubTime) - start, At: d.At - start})
		}
		for ; nGaps < len(log.Gaps); nGaps++ {
			g := log.Gaps[nGaps]
			if g.Sub < 0 || g.Sub >= len(refs) {
				continue
			}
			r := refs[g.Sub]
			rec.Gap(GapRecord{Subscriber: r.subscriber, Sub: r.sub, Source: g.Gap.Source, From: g.Gap.From, To: g.Gap.To, At: g.At - start})
		}
	}
	// readAll takes the liveness readings (liveness.go) at now: the
	// counters are cumulative over incarnations (one incarnation for the
	// storm rule), joined is the current incarnation's.
	readAll := func(now time.Duration) {
		for _, n := range p.Topo.Names {
			id := message.BrokerID(n)
			c := counters[id]
			if c == nil {
				c = &brokerCounters{}
			}
			var ctl map[string]int64
			if st := s.State(id); st == "up" {
				ctl = sentControl(s, c, id)
			}
			rec.Reading(BrokerReading{At: now, Broker: n, Control: ctl, Joined: s.Joined(id)})
		}
	}
	sample := func(now time.Duration) {
		qs := s.QueueLens()
		for _, n := range p.Topo.Names {
			id := message.BrokerID(n)
			c := counters[id]
			if c == nil {
				c = &brokerCounters{}
			}
			prev := last[id]
			q, up := qs[id]
			in, out := c.in-prev.in, c.out-prev.out
			rec.Sample(BrokerSample{At: now, Broker: n, MsgsIn: in, MsgsOut: out, Queue: int64(q), CPU: -1, RSS: 0, Up: up})
			last[id] = *c
		}
		readAll(now)
	}
	// Counters start at t = 0: the overlay build is not in the first
	// sample.
	for id, c := range counters {
		last[id] = *c
	}
	readAll(0)
	end := spec.End()
	for t := time.Duration(0); t < end; {
		if err := ctx.Err(); err != nil {
			feed()
			return err
		}
		t += simChunk
		if t > end {
			t = end
		}
		if err := s.RunUntil(start + t); err != nil {
			feed()
			return fmt.Errorf("testbed: sim: %v", err)
		}
		for nextSample <= t {
			sample(nextSample)
			nextSample += spec.Metrics.Sample.Duration
		}
		feed()
		rec.SetElapsed(t)
		if pubErr != nil {
			return fmt.Errorf("testbed: sim: %v", pubErr)
		}
	}
	feed()
	// A restarted broker not rejoined yet is observed until its rejoin
	// bound has passed (bounded: the bound is a time of the run), so that
	// the rule can judge it; nothing else is recorded meanwhile.
	for t := end; ctx.Err() == nil; {
		d, wait := rec.rejoinWait(p)
		if !wait {
			break
		}
		t = min(t+spec.Metrics.Sample.Duration, d)
		if err := s.RunUntil(start + t); err != nil {
			return fmt.Errorf("testbed: sim: %v", err)
		}
		readAll(t)
		if t >= d {
			break
		}
	}
	for _, b := range slices.Sorted(maps.Keys(pendingLeaves)) {
		rec.LeaveDone(pendingLeaves[b], b, 0, fmt.Errorf("the run ended before %s's leave was confirmed", b))
	}
	for _, pr := range log.Pubs {
		if pr.AckedAt >= 0 {
			rec.Acked(pr.ID)
		}
	}
	for i, sr := range log.Subs {
		if sr.ConfirmedAt >= 0 && i < len(refs) {
			rec.Confirmed(refs[i].subscriber, refs[i].sub, sr.ConfirmedAt-start)
		}
	}
	var ctrl int64
	for _, c := range counters {
		ctrl += c.ctrl
	}
	rec.ControlMessages(ctrl)
	// The simulator's own checker judges the same log; its figures are
	// a cross-check of the testbed's oracle (they differ only in the fault
	// window rules, see docs/testbed.md).
	rep := log.Check()
	rec.Note(fmt.Sprintf("sim checker: guaranteed %d, delivered %d, lost %d (silent %d), duplicates %d, reordered %d, spurious %d",
		rep.Guaranteed, rep.Delivered, rep.Lost, rep.SilentLost, rep.Duplicates, rep.Reordered, rep.Spurious))
	st := s.Stats()
	rec.Note(fmt.Sprintf("sim: %d events, %v virtual time, max queue %d, %d messages lost in flight with crashed brokers or cut links", st.Events, (st.VirtualTime - start).Round(time.Millisecond), st.MaxQueueSeen, st.InFlightLost))
	return nil
}
