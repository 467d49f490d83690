package testbed

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/replicas"
)

// Error is one problem in an experiment file, at a line (0 when the line is
// not known).
type Error struct {
	File string
	Line int
	Msg  string
}

func (e Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("testbed: %s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("testbed: %s: %s", e.File, e.Msg)
}

// Errors is every problem found in a file, in line order.
type Errors []Error

func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// errList collects errors during validation; maxErrors bounds it so that a
// badly broken file gives a readable list, not thousands of lines.
type errList struct {
	file string
	errs Errors
}

const maxErrors = 20

func (l *errList) add(line int, format string, args ...any) {
	if len(l.errs) < maxErrors {
		l.errs = append(l.errs, Error{File: l.file, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
}

func (l *errList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	sort.SliceStable(l.errs, func(i, j int) bool { return l.errs[i].Line < l.errs[j].Line })
	return l.errs
}

// Plan is a validated experiment: the tree, every publisher and subscriber
// placed and its workload drawn, and the faults in time order. A Plan is
// deterministic in the file and its seed.
type Plan struct {
	Spec        *Spec
	Topo        *Topology
	Publishers  []*Publisher
	Subscribers []*Subscriber
	Faults      []Fault
	// With [overlay] mode = "replicas": the tree of virtual nodes, and
	// the layout of their replicas (Topo then lists the replicas;
	// replicas.go).
	VTopo  *Topology
	Layout *replicas.Layout
	// Placement is the host of every broker (nil without [[hosts]]).
	Placement map[string]string
}

// Publisher is one publishing client.
type Publisher struct {
	Name    string
	Broker  string
	Rate    float64
	Start   time.Duration // first publication (includes a per-publisher phase)
	Stop    time.Duration // no publication at or after this
	Payload int
	attrs   []attrGen
	seed    int64
}

// Subscriber is one subscribing client with its subscriptions.
type Subscriber struct {
	Name    string
	Broker  string
	Filters []string          // expanded filter texts
	Parsed  []matching.Filter // the same, parsed
	Durable bool              // a durable subscription (one filter)
}

// Action kinds of a fault.
const (
	ActCrash   = "crash"
	ActRestart = "restart"
	ActFreeze  = "freeze"
	ActResume  = "resume"
	ActCut     = "cut"
	ActHeal    = "heal"
	ActLeave   = "leave"
	// Durable subscribers' sessions (not failures: they never count
	// toward δ). Subscriber names the subscriber; Broker, for reconnect,
	// the broker it comes back at.
	ActDisconnect = "disconnect"
	ActReconnect  = "reconnect"
)

// Action is one thing a fault does to one broker (or one link for cut and
// heal, Peer being the other end).
type Action struct {
	Kind   string
	Broker string
	Peer   string
	Line   int  // where the file asks for it
	Clean  bool // ActRestart: the data directory is lost first (restart_clean)
	// Subscriber: ActDisconnect and ActReconnect, the durable subscriber.
	Subscriber string
	// Hosts and Members: ActPartition and ActHealPartition, the hosts cut
	// off and the brokers placed on them.
	Hosts, Members []string
}

func (a Action) String() string {
	switch a.Kind {
	case ActDisconnect:
		return "disconnect " + a.Subscriber
	case ActReconnect:
		return fmt.Sprintf("reconnect %s at %s", a.Subscriber, a.Broker)
	}
	if len(a.Hosts) > 0 {
		return a.Kind + " " + strings.Join(a.Hosts, ",")
	}
	if a.Peer != "" {
		return fmt.Sprintf("%s %s-%s", a.Kind, a.Broker, a.Peer)
	}
	if a.Clean {
		return "restart_clean " + a.Broker
	}
	return a.Kind + " " + a.Broker
}

// Fault is everything scheduled at one time.
type Fault struct {
	At      time.Duration
	Actions []Action
	Line    int
}

func (f Fault) String() string {
	parts := make([]string, len(f.Actions))
	for i, a := range f.Actions {
		parts[i] = a.String()
	}
	return strings.Join(parts, ", ")
}

// Limits on what one file may ask for. At the bound the file is refused
// with the reason: a testbed on one machine cannot honour more, and a typo
// must not fork thousands of processes.
const (
	maxClients         = 20000   // publishers + subscribers
	maxSubscriptions   = 200000  // in total
	maxPublications    = 5000000 // scheduled in total
	maxPayload         = 1 << 20 // bytes per publication (the wire's frame bound)
	maxDuration        = 24 * time.Hour
	maxFilterExpansion = 4096 // bytes of one expanded filter
)

// Load reads, validates and plans an experiment file.
func Load(path string) (*Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("testbed: %v", err)
	}
	return Parse(filepath.Base(path), data)
}

// Parse validates and plans an experiment given as TOML text; name is used
// in error messages.
func Parse(name string, data []byte) (*Plan, error) {
	s := &Spec{File: name, lines: newLocator(string(data))}
	md, err := toml.Decode(string(data), s)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, Errors{{File: name, Line: pe.Position.Line, Msg: strings.TrimPrefix(pe.Message, "toml: ")}}
		}
		// Type mismatches come as "toml: line N (last key …): …".
		msg := strings.TrimPrefix(err.Error(), "toml: ")
		var line int
		if n, _ := fmt.Sscanf(msg, "line %d", &line); n == 1 {
			if i := strings.Index(msg, ": "); i > 0 {
				msg = msg[i+2:]
			}
		}
		return nil, Errors{{File: name, Line: line, Msg: msg}}
	}
	errs := &errList{file: name}
	for _, k := range md.Undecoded() {
		line, path := s.lines.lineOfKey(k)
		errs.add(line, "unknown key %q", path)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(name, filepath.Ext(name))
	}
	s.defaults()
	return build(s, errs)
}

func build(s *Spec, errs *errList) (*Plan, error) {
	L := s.lines.line
	// Times.
	if !s.lines.has("duration") {
		errs.add(0, "duration is required (e.g. duration = \"30s\")")
	} else if s.Duration.Duration <= 0 || s.Duration.Duration > maxDuration {
		errs.add(L("duration"), "duration %v: want > 0 and ≤ %v", s.Duration.Duration, maxDuration)
	}
	if s.Warmup.Duration < 0 || s.Warmup.Duration >= s.Duration.Duration && s.Duration.Duration > 0 {
		errs.add(L("warmup"), "warmup %v: want ≥ 0 and shorter than duration (%v)", s.Warmup.Duration, s.Duration.Duration)
	}
	if s.Drain.Duration < 0 || s.Drain.Duration > time.Hour {
		errs.add(L("drain"), "drain %v: want between 0 and 1h", s.Drain.Duration)
	}
	// Overlay.
	o := s.Overlay
	if o.Delta < 1 {
		errs.add(L("overlay.delta"), "delta = %d: δ must be ≥ 1", o.Delta)
	} else if o.Delta > 16 {
		errs.add(L("overlay.delta"), "delta = %d: at most 16 (maps grow with the (δ+1)-neighbourhood)", o.Delta)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"heartbeat", o.Heartbeat.Duration}, {"failure_timeout", o.FailureTimeout.Duration}, {"dack_period", o.DACKPeriod.Duration}, {"gone_after", o.GoneAfter.Duration}, {"tick", o.Tick.Duration}} {
		if d.v <= 0 {
			errs.add(L("overlay."+d.key), "%s = %v: must be > 0", d.key, d.v)
		}
	}
	if o.LinkDelay.Duration < 0 || o.LinkJitter.Duration < 0 {
		errs.add(L("overlay.link_delay"), "link_delay and link_jitter must be ≥ 0")
	}
	if o.Heartbeat.Duration > 0 && o.FailureTimeout.Duration <= o.Heartbeat.Duration {
		line := L("overlay.failure_timeout")
		if !s.lines.has("overlay.failure_timeout") {
			line = L("overlay.heartbeat")
		}
		errs.add(line, "failure_timeout (%v) must be longer than heartbeat (%v), or every peer looks dead", o.FailureTimeout.Duration, o.Heartbeat.Duration)
	}
	if o.Tick.Duration > 0 && o.Heartbeat.Duration > 0 && o.Heartbeat.Duration < o.Tick.Duration {
		errs.add(L("overlay.heartbeat"), "heartbeat (%v) is shorter than the tick (%v)", o.Heartbeat.Duration, o.Tick.Duration)
	}
	if o.MaxQueue < 1 {
		errs.add(L("overlay.max_queue"), "max_queue = %d: must be ≥ 1", o.MaxQueue)
	}
	switch o.Durability {
	case "", "fsync", "write", "memory", "none":
	default:
		errs.add(L("overlay.durability"), "durability = %q: one of fsync, write, memory, none", o.Durability)
	}
	if o.DurableKeep.Duration > 720*time.Hour {
		errs.add(L("overlay.durable_keep"), "durable_keep = %v: at most 720h (negative: off)", o.DurableKeep.Duration)
	}
	if o.Retain.Duration < 0 || o.Retain.Duration > 720*time.Hour {
		errs.add(L("overlay.retain"), "retain = %v: out of range [0, 720h]", o.Retain.Duration)
	} else if o.Retain.Duration > 0 && !hasLog(o.Durability) {
		errs.add(L("overlay.retain"), "retain needs the publication log: durability = \"fsync\", \"write\" or \"memory\"")
	}
	// Topology.
	topo := buildTopology(s, errs)
	if topo == nil {
		return nil, errs.err()
	}
	p := &Plan{Spec: s, Topo: topo}
	if !planReplicas(s, p, errs) {
		return nil, errs.err()
	}
	planHosts(s, p, errs)
	planClients(s, p, errs)
	planFaults(s, p, errs)
	checkReplicaFaults(p, errs)
	if s.Metrics.Sample.Duration < 10*time.Millisecond {
		errs.add(L("metrics.sample"), "sample = %v: at least 10ms", s.Metrics.Sample.Duration)
	}
	if s.Process.GOMAXPROCS < 0 || s.Process.GOMAXPROCS > 1024 {
		errs.add(L("process.gomaxprocs"), "gomaxprocs = %d: must be within 0..1024 (0: Go's default)", s.Process.GOMAXPROCS)
	}
	if s.Process.GOGC < 0 || s.Process.GOGC > 100000 {
		errs.add(L("process.gogc"), "gogc = %d: must be within 0..100000 (0: Go's default)", s.Process.GOGC)
	}
	if t := s.Inproc.Transport; t != TransportMemory && t != TransportQUIC {
		errs.add(L("inproc.transport"), "transport = %q: must be %q (default) or %q", t, TransportMemory, TransportQUIC)
	}
	if s.Process.BasePort != 0 && (s.Process.BasePort < 1024 || s.Process.BasePort+2*len(topo.Names) > 65535) {
		errs.add(L("process.base_port"), "base_port = %d: brokers need ports %d..%d within 1024..65535", s.Process.BasePort, s.Process.BasePort, s.Process.BasePort+2*len(topo.Names))
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return p, nil
}

func buildTopology(s *Spec, errs *errList) *Topology {
	t := s.Topology
	L := s.lines.line
	needN := func() bool {
		if t.Brokers < 1 || t.Brokers > MaxBrokers {
			errs.add(L("topology.brokers"), "brokers = %d: want 1..%d", t.Brokers, MaxBrokers)
			return false
		}
		return true
	}
	if t.Kind != "explicit" && len(s.Brokers) > 0 && !placementOnly(s.Brokers) {
		errs.add(L("broker[0]"), "[[broker]] tables are only for topology kind \"explicit\" (kind is %q), or name and host alone to place a broker", t.Kind)
		return nil
	}
	switch t.Kind {
	case "chain":
		if needN() {
			return fromParents(chainParents(t.Brokers), nil)
		}
	case "star":
		if needN() {
			return fromParents(starParents(t.Brokers), nil)
		}
	case "balanced":
		if t.Fanout < 1 {
			errs.add(L("topology.fanout"), "fanout = %d: must be ≥ 1", t.Fanout)
			return nil
		}
		if needN() {
			return fromParents(balancedParents(t.Brokers, t.Fanout), nil)
		}
	case "random":
		if t.Fanout < 0 {
			errs.add(L("topology.fanout"), "fanout = %d: must be ≥ 0 (0 = unbounded)", t.Fanout)
			return nil
		}
		if needN() {
			return fromParents(randomParents(t.Brokers, t.Fanout, streamRNG(s.Seed, "topology")), nil)
		}
	case "srds09":
		if s.lines.has("topology.brokers") && t.Brokers != SRDS09Brokers {
			errs.add(L("topology.brokers"), "kind srds09 has %d brokers; drop brokers = %d", SRDS09Brokers, t.Brokers)
			return nil
		}
		par, keep := srds09Parents()
		return fromParents(par, keep)
	case "explicit":
		return explicitTopology(s, errs)
	case "":
		errs.add(L("topology"), "topology.kind is required: chain | star | balanced | random | srds09 | explicit")
	default:
		errs.add(L("topology.kind"), "unknown topology kind %q: want chain | star | balanced | random | srds09 | explicit", t.Kind)
	}
	return nil
}

func planClients(s *Spec, p *Plan, errs *errList) {
	clients, subs := 0, 0
	pubs := 0.0
	for i, ps := range s.Publishers {
		key := func(k string) int { return s.lines.line(fmt.Sprintf("publishers[%d].%s", i, k)) }
		if ps.Count < 1 || ps.Count > maxClients {
			errs.add(key("count"), "publishers count = %d: want 1..%d", ps.Count, maxClients)
			continue
		}
		if !(ps.Rate > 0) || math.IsInf(ps.Rate, 0) || ps.Rate > 100000 {
			errs.add(key("rate"), "rate = %v: publications per second must be > 0 and ≤ 100000", ps.Rate)
			continue
		}
		if ps.Payload < 0 || ps.Payload > maxPayload {
			errs.add(key("payload"), "payload = %d: want 0..%d bytes", ps.Payload, maxPayload)
		}
		if ps.Start.Duration < 0 || ps.Stop.Duration <= ps.Start.Duration || ps.Stop.Duration > s.Duration.Duration {
			errs.add(key("start"), "publishing window [%v, %v) must be non-empty and within [0, duration = %v]", ps.Start.Duration, ps.Stop.Duration, s.Duration.Duration)
			continue
		}
		attrs, err := parseAttrs(ps.Attrs)
		if err != nil {
			errs.add(key("attrs"), "%v", err)
			continue
		}
		if len(attrs) == 0 {
			errs.add(s.lines.line(fmt.Sprintf("publishers[%d]", i)), "publishers need attrs (e.g. attrs = { class = \"'STOCK'\", price = \"uniform(0,200)\" })")
			continue
		}
		brokers, err := p.place(ps.Brokers, ps.Count, streamRNG(s.Seed, fmt.Sprintf("place:pub:%d", i)))
		if err != nil {
			errs.add(key("brokers"), "%v", err)
			continue
		}
		clients += ps.Count
		pubs += float64(ps.Count) * ps.Rate * (ps.Stop.Duration - ps.Start.Duration).Seconds()
		for k := 0; k < ps.Count; k++ {
			name := fmt.Sprintf("P%d", len(p.Publishers)+1)
			phase := streamRNG(s.Seed, "phase:"+name).Float64() / ps.Rate
			p.Publishers = append(p.Publishers, &Publisher{
				Name: name, Broker: brokers[k], Rate: ps.Rate,
				Start: ps.Start.Duration + time.Duration(phase*float64(time.Second)), Stop: ps.Stop.Duration,
				Payload: ps.Payload, attrs: attrs, seed: s.Seed,
			})
		}
	}
	for i, ss := range s.Subs {
		key := func(k string) int { return s.lines.line(fmt.Sprintf("subscribers[%d].%s", i, k)) }
		if ss.Count < 1 || ss.Count > maxClients {
			errs.add(key("count"), "subscribers count = %d: want 1..%d", ss.Count, maxClients)
			continue
		}
		if ss.Subscriptions < 1 || ss.Subscriptions > 10000 {
			errs.add(key("subscriptions"), "subscriptions = %d: want 1..10000 per subscriber", ss.Subscriptions)
			continue
		}
		if ss.Durable {
			if ss.Subscriptions != 1 {
				errs.add(key("subscriptions"), "durable subscribers have one subscription each (subscriptions = %d)", ss.Subscriptions)
				continue
			}
			if s.Overlay.Mode == ModeReplicas {
				errs.add(key("durable"), "durable subscribers are not supported in [overlay] mode = \"replicas\" (the baseline has no publication log, docs/baseline.md)")
				continue
			}
			if d := s.Overlay.Durability; !hasLog(d) {
				errs.add(key("durable"), "durable subscribers need the publication log: [overlay] durability = \"fsync\", \"write\" or \"memory\" (have %q)", d)
				continue
			}
		}
		if strings.TrimSpace(ss.Filter) == "" {
			errs.add(s.lines.line(fmt.Sprintf("subscribers[%d]", i)), "subscribers need a filter")
			continue
		}
		tpl, err := parseFilterTemplate(ss.Filter)
		if err != nil {
			errs.add(key("filter"), "%v", err)
			continue
		}
		brokers, err := p.place(ss.Brokers, ss.Count, streamRNG(s.Seed, fmt.Sprintf("place:sub:%d", i)))
		if err != nil {
			errs.add(key("brokers"), "%v", err)
			continue
		}
		clients += ss.Count
		subs += ss.Count * ss.Subscriptions
		if clients > maxClients || subs > maxSubscriptions {
			errs.add(key("count"), "too many clients (%d, at most %d) or subscriptions (%d, at most %d)", clients, maxClients, subs, maxSubscriptions)
			return
		}
		bad := false
		for k := 0; k < ss.Count && !bad; k++ {
			name := fmt.Sprintf("S%d", len(p.Subscribers)+1)
			gens := tpl.instances(streamRNG(s.Seed, "filter:"+name))
			sub := &Subscriber{Name: name, Broker: brokers[k], Durable: ss.Durable}
			for j := 0; j < ss.Subscriptions; j++ {
				text := tpl.expand(gens)
				if len(text) > maxFilterExpansion {
					errs.add(key("filter"), "expanded filter is %d bytes, at most %d", len(text), maxFilterExpansion)
					bad = true
					break
				}
				f, err := matching.ParseFilter(text)
				if err != nil {
					errs.add(key("filter"), "filter %q: %v", text, err)
					bad = true
					break
				}
				sub.Filters = append(sub.Filters, text)
				sub.Parsed = append(sub.Parsed, f)
			}
			p.Subscribers = append(p.Subscribers, sub)
		}
	}
	if clients > maxClients {
		errs.add(0, "%d clients: at most %d", clients, maxClients)
	}
	if pubs > maxPublications {
		errs.add(0, "the publishers would publish %.0f publications: at most %d", pubs, maxPublications)
	}
}

// brokerState is what the fault schedule believes of a broker at a time.
type brokerState int

const (
	stUp brokerState = iota
	stCrashed
	stFrozen
	stLeft // left the overlay gracefully: gone for good
)

func planFaults(s *Spec, p *Plan, errs *errList) {
	type idxFault struct {
		f Fault
		i int
	}
	var fs []idxFault
	for i, fs0 := range s.Faults {
		line := s.lines.line(fmt.Sprintf("faults[%d].at", i))
		if line == 0 {
			line = s.lines.line(fmt.Sprintf("faults[%d]", i))
		}
		key := func(k string) int {
			if n := s.lines.line(fmt.Sprintf("faults[%d].%s", i, k)); n > 0 {
				return n
			}
			return line
		}
		if !s.lines.has(fmt.Sprintf("faults[%d].at", i)) {
			errs.add(line, "fault %d has no at = \"…\" time", i+1)
			continue
		}
		at := fs0.At.Duration
		if at < s.Warmup.Duration {
			errs.add(line, "fault at %v is before the start (publishing starts after warmup = %v)", at, s.Warmup.Duration)
		} else if at > s.Duration.Duration {
			errs.add(line, "fault at %v is after the end (duration = %v)", at, s.Duration.Duration)
		}
		f := Fault{At: at, Line: line}
		single := func(kind string, names []string) {
			seen := map[string]bool{}
			for _, n := range names {
				if !p.Topo.Has(n) {
					errs.add(key(kind), "unknown broker %q in %s (have %s)", n, kind, describeNames(p.Topo.Names))
					continue
				}
				if seen[n] {
					errs.add(key(kind), "broker %q twice in %s", n, kind)
					continue
				}
				seen[n] = true
				f.Actions = append(f.Actions, Action{Kind: kind, Broker: n, Line: key(kind)})
			}
		}
		pairs := func(kind string, pp [][]string) {
			for _, pr := range pp {
				if len(pr) != 2 {
					errs.add(key(kind), "%s takes pairs of brokers, like [[\"B1\",\"B2\"]], got %v", kind, pr)
					continue
				}
				okp := true
				for _, n := range pr {
					if !p.Topo.Has(n) {
						errs.add(key(kind), "unknown broker %q in %s (have %s)", n, kind, describeNames(p.Topo.Names))
						okp = false
					}
				}
				if okp && pr[0] == pr[1] {
					errs.add(key(kind), "%s of a broker with itself (%q)", kind, pr[0])
					okp = false
				}
				if okp {
					f.Actions = append(f.Actions, Action{Kind: kind, Broker: pr[0], Peer: pr[1], Line: key(kind)})
				}
			}
		}
		single(ActCrash, fs0.Crash)
		single(ActRestart, fs0.Restart)
		nr := len(f.Actions)
		single(ActRestart, fs0.RestartClean)
		for i := nr; i < len(f.Actions); i++ {
			f.Actions[i].Clean, f.Actions[i].Line = true, key("restart_clean")
		}
		single(ActFreeze, fs0.Freeze)
		single(ActResume, fs0.Resume)
		pairs(ActCut, fs0.Cut)
		pairs(ActHeal, fs0.Heal)
		single(ActLeave, fs0.Leave)
		partitionActions(p, &f, fs0, key, errs)
		sessionActions(p, &f, fs0, key, errs)
		if len(f.Actions) == 0 && len(fs0.Crash)+len(fs0.Restart)+len(fs0.RestartClean)+len(fs0.Freeze)+len(fs0.Resume)+len(fs0.Cut)+len(fs0.Heal)+len(fs0.Leave)+len(fs0.Partition)+len(fs0.HealPartition)+len(fs0.Disconnect) == 0 && fs0.Reconnect == nil {
			errs.add(line, "fault %d does nothing: give crash, restart, restart_clean, freeze, resume, cut, heal, leave, partition, heal_partition, disconnect or reconnect", i+1)
		}
		fs = append(fs, idxFault{f, i})
	}
	sort.SliceStable(fs, func(a, b int) bool { return fs[a].f.At < fs[b].f.At })
	// Replay the schedule to refuse impossible transitions.
	state := map[string]brokerState{}
	leftAt := map[string]time.Duration{}
	allGone := false
	cut := map[[2]string]bool{}
	pairKey := func(a, b string) [2]string {
		if a > b {
			a, b = b, a
		}
		return [2]string{a, b}
	}
	// gone refuses any action on a broker that left: it is not coming
	// back under that name (the overlay removed it from the tree, and a
	// broker that joins later is a new one, with a new name).
	gone := func(a Action, at time.Duration, b string) bool {
		if state[b] != stLeft {
			return false
		}
		what := a.Kind + " " + b
		if a.Peer != "" {
			what = fmt.Sprintf("%s %s-%s", a.Kind, a.Broker, a.Peer)
		}
		if a.Kind == ActRestart {
			errs.add(a.Line, "restart %s at %v: it left the overlay at %v, for good (a broker joining later is a new one: give it a new name)", b, at, leftAt[b])
		} else {
			errs.add(a.Line, "%s at %v: %s left the overlay at %v", what, at, b, leftAt[b])
		}
		return true
	}
	for _, x := range fs {
		f := x.f
		for _, a := range f.Actions {
			st := state[a.Broker]
			if gone(a, f.At, a.Broker) || (a.Peer != "" && gone(a, f.At, a.Peer)) {
				continue
			}
			switch a.Kind {
			case ActCrash:
				if st == stCrashed {
					errs.add(a.Line, "crash %s at %v: it is already crashed", a.Broker, f.At)
				}
				state[a.Broker] = stCrashed
			case ActRestart:
				if st != stCrashed {
					errs.add(a.Line, "restart %s at %v: it is not crashed", a.Broker, f.At)
				}
				state[a.Broker] = stUp
			case ActFreeze:
				if st != stUp {
					errs.add(a.Line, "freeze %s at %v: it is not up", a.Broker, f.At)
				}
				state[a.Broker] = stFrozen
			case ActResume:
				if st != stFrozen {
					errs.add(a.Line, "resume %s at %v: it is not frozen", a.Broker, f.At)
				}
				state[a.Broker] = stUp
			case ActCut:
				k := pairKey(a.Broker, a.Peer)
				if cut[k] {
					errs.add(a.Line, "cut %s-%s at %v: already cut", a.Broker, a.Peer, f.At)
				}
				cut[k] = true
			case ActHeal:
				k := pairKey(a.Broker, a.Peer)
				if !cut[k] {
					errs.add(a.Line, "heal %s-%s at %v: that link is not cut", a.Broker, a.Peer, f.At)
				}
				delete(cut, k)
			case ActLeave:
				// Only a live broker can leave: a crashed one has no
				// process to tell, and a frozen one would act on the
				// SIGTERM only once resumed.
				switch st {
				case stCrashed:
					errs.add(a.Line, "leave %s at %v: it is crashed (a crashed broker cannot leave; restart it first)", a.Broker, f.At)
				case stFrozen:
					errs.add(a.Line, "leave %s at %v: it is frozen (resume it first)", a.Broker, f.At)
				}
				state[a.Broker] = stLeft
				leftAt[a.Broker] = f.At
			}
		}
		// A leave must leave someone behind.
		up := 0
		for _, n := range p.Topo.Names {
			if state[n] != stLeft {
				up++
			}
		}
		if up == 0 && !allGone {
			allGone = true
			errs.add(f.Line, "fault at %v: every broker would have left the overlay", f.At)
		}
		p.Faults = append(p.Faults, f)
	}
	checkPartitions(p, errs)
	checkSessions(p, errs)
}

// hasLog reports whether a testbed's durability names a publication log
// (on disk, or in memory only).
func hasLog(durability string) bool {
	return durability == "fsync" || durability == "write" || durability == "memory"
}
