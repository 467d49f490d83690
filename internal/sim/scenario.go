package sim

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/matching/workload"
	"github.com/deltapub/deltapub/message"
)

// A scenario file is a short script, one command per line (# starts a
// comment), then a line "----", then the expected outcome, which
// `go test ./internal/sim -rewrite` regenerates. Commands:
//
//	config key=value ...        before anything else: delta, seed, tick, heartbeat, failure,
//	                            dack, gone (ticks), delay, jitter, dialtimeout, accept (the
//	                            accepting end of a link is told LinkUp up to this later), linkdown
//	                            (a duration or "never"), maxqueue, wire (on|off: messages
//	                            through the wire format, default on), frame (bytes: the
//	                            largest frame a receiver accepts, as limits.max_frame),
//	                            durable (on|off: publication logs at the edges, durable.go),
//	                            maxlog (bytes: the log bound), retain (ticks: the
//	                            publishers' edges keep what they logged that long after it
//	                            is safe, for durable subscribers' catch-up; 0: released
//	                            at once), retainbytes (bytes: at most that much kept)
//	tree chain=N | tree random=N [degree=D] | tree B1-B2 B2-B3 ...
//	                            create the brokers and join them one after another
//	join B9 via B3 [B2 ...]     a new broker joins now (does not wait)
//	wait joined B9 | wait confirmed [S1 ...] | wait rejoined   [max=DURATION]
//	                            (rejoined: every restarted broker is a member again; by
//	                            default waits up to the rejoin bound, which is then judged)
//	subscribe S1 B6 class=a x<5 | subscribe S1 B6 [class,eq,'a'],[x,<,5] | subscribe S1 B6 random
//	subscribers N               N random subscriptions S1..SN at random brokers
//	publish P1 B1 every=20ms for=2s [class=a x=3 ... | [class,'a'],[x,3]]   (random attributes if none)
//	                            (filters and publications in the short notation of
//	                            notation.go or in the PADRES syntax; matched by package
//	                            matching; the random ones are workload.Small's)
//	unsubscribe S1
//	durable D1 B4 class=a ...   a durable subscriber (dursub.go; needs config durable=on),
//	                            filter as for subscribe
//	disconnect D1               its session ends (the client goes away, keeping its token)
//	reconnect D1 B5             a new session at B5 with its token
//	crash B3 [B4 ...] | restart B3 [via B2 ...] [stale-link D] | freeze B5 ... | resume B5 ...
//	                            (stale-link: B3's peers keep its old links D after the
//	                            restart, losing what they send on them, then LinkDown;
//	                            resolve: every joinpoint is dialled at once and the core is
//	                            given all that answered, as the runtime does; place: B3 has a data
//	                            directory and rejoins through the place it saved there first;
//	                            data: place, and B3 finds its publication log again, with
//	                            config durable=on: its acknowledged publications are owed)
//	slow B3 DURATION            a stall: frozen for DURATION, then resumed (does not wait)
//	slowdial B3 B2 DURATION     B3's next dial to B2 takes DURATION to complete its handshake
//	                            (longer than the dial timeout: told DialFailed at the timeout,
//	                            the link comes up later, as the runtime keeps a slow handshake)
//	cut B2 B3 | heal B2 B3
//	leave B3 [max=DURATION]     graceful leave; runs until B3 has left (leave.go)
//	leave B3 start              begin B3's leave and go on at once (what follows happens
//	                            while B3 drains)
//	run DURATION                advance virtual time
//	settle [for=DURATION]       stop publishing, run, then check that every queue drained
//	beyond                      the scenario exceeds δ: judge it by the beyond-δ rules
type Scenario struct {
	Name     string
	Script   string // the text before "----", kept verbatim for -rewrite
	Expected string
	lines    []scriptLine
}

type scriptLine struct {
	n     int
	words []string
}

// ParseScenario reads a scenario file.
func ParseScenario(name, text string) (*Scenario, error) {
	sc := &Scenario{Name: name}
	all := strings.SplitAfter(text, "\n")
	sep := -1
	for i, l := range all {
		if strings.TrimSpace(l) == "----" {
			sep = i
			break
		}
	}
	scriptLines := all
	if sep >= 0 {
		scriptLines = all[:sep]
		sc.Expected = strings.Join(all[sep+1:], "")
	}
	sc.Script = strings.Join(scriptLines, "")
	for i, l := range scriptLines {
		if j := strings.IndexByte(l, '#'); j >= 0 {
			l = l[:j]
		}
		w := strings.Fields(l)
		if len(w) == 0 {
			continue
		}
		sc.lines = append(sc.lines, scriptLine{n: i + 1, words: w})
	}
	if len(sc.lines) == 0 {
		return nil, fmt.Errorf("sim: %s: empty script", name)
	}
	return sc, nil
}

// Format returns the file text with outcome as the expected outcome.
func (sc *Scenario) Format(outcome string) string {
	return sc.Script + "----\n" + outcome
}

// ScenarioResult is what running a scenario produced.
type ScenarioResult struct {
	// Outcome is the stable part of the result, compared with the
	// expected outcome of the file: the verdict and every count that must
	// be zero, per subscription whether it was confirmed, lost anything and
	// got gap notices, and which kinds of notices the brokers gave. Counts
	// that move with any change of the core's timing (deliveries, notices)
	// are left to Details, so that the files fail on behaviour, not on
	// timing.
	Outcome string
	// Details is the full outcome with every count (deltapub sim run).
	Details string
	Report  Report
	Beyond  bool
	Stats   Stats
	log     *Log // the run's log (tests)
}

type runner struct {
	sc      *Scenario
	cfg     Config
	s       *Sim
	tree    Tree
	beyond  bool
	events  []string
	w       *workload.Small // drawing from the Sim's random source, once built
	pubGens int
}

// RunScenario runs sc with nodes from factory; trace, when not nil,
// receives the trace.
func RunScenario(sc *Scenario, factory NodeFactory, trace io.Writer) (*ScenarioResult, error) {
	r := &runner{sc: sc, cfg: DefaultConfig()}
	r.cfg.NewNode = factory
	r.cfg.Trace = trace
	r.cfg.Wire = true
	for _, l := range sc.lines {
		if err := r.exec(l); err != nil {
			return nil, fmt.Errorf("sim: %s:%d: %s: %w", sc.Name, l.n, l.words[0], err)
		}
	}
	if r.s == nil {
		return nil, fmt.Errorf("sim: %s: no tree was built", sc.Name)
	}
	// The liveness rules: storms always, the rejoin bound within δ (judged
	// only if the script ran past it: see "wait rejoined").
	r.s.CheckTraffic(!r.beyond)
	rep := r.s.Log().Check()
	res := &ScenarioResult{Report: rep, Beyond: r.beyond, Stats: r.s.Stats(), log: r.s.Log()}
	res.Outcome = r.outcome(rep, false)
	res.Details = r.outcome(rep, true)
	return res, nil
}

func (r *runner) sim() (*Sim, error) {
	if r.s == nil {
		return nil, fmt.Errorf("build the tree first")
	}
	return r.s, nil
}

// kv splits key=value words from the others.
func kv(words []string) (map[string]string, []string) {
	m := map[string]string{}
	var rest []string
	for _, w := range words {
		if i := strings.IndexByte(w, '='); i > 0 && !strings.ContainsAny(w[:i], "<>!") && isKey(w[:i]) {
			m[w[:i]] = w[i+1:]
			continue
		}
		rest = append(rest, w)
	}
	return m, rest
}

func isKey(k string) bool {
	switch k {
	case "every", "for", "max", "chain", "random", "degree":
		return true
	}
	return false
}

func parseDur(key, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s: %q is not a duration (e.g. 500ms, 2s)", key, v)
	}
	return d, nil
}

func ids(words []string) []message.BrokerID {
	out := make([]message.BrokerID, len(words))
	for i, w := range words {
		out[i] = message.BrokerID(w)
	}
	return out
}

func (r *runner) note(format string, args ...any) {
	r.events = append(r.events, fmt.Sprintf("%s ", fmtTime(r.s.Now()))+fmt.Sprintf(format, args...))
}

func (r *runner) exec(l scriptLine) error {
	cmd, args := l.words[0], l.words[1:]
	if cmd == "config" {
		if r.s != nil {
			return fmt.Errorf("config must come before the tree")
		}
		return r.config(args)
	}
	if cmd == "tree" {
		return r.buildTree(args)
	}
	s, err := r.sim()
	if err != nil {
		return err
	}
	opts, rest := kv(args)
	switch cmd {
	case "join":
		if len(rest) < 3 || rest[1] != "via" {
			return fmt.Errorf("want: join NEW via JOINPOINT [...]")
		}
		id := message.BrokerID(rest[0])
		if err := r.tree.Add(message.BrokerID(rest[2]), id); err != nil {
			return err
		}
		if err := s.AddBroker(id); err != nil {
			return err
		}
		return s.Join(id, ids(rest[2:])...)
	case "wait":
		max := 2 * time.Second
		if v, ok := opts["max"]; ok {
			if max, err = parseDur("max", v); err != nil {
				return err
			}
		}
		if len(rest) == 0 {
			return fmt.Errorf("want: wait joined B | wait confirmed [S ...]")
		}
		var cond func() bool
		switch rest[0] {
		case "joined":
			if len(rest) != 2 {
				return fmt.Errorf("want: wait joined BROKER")
			}
			cond = func() bool { return s.Joined(message.BrokerID(rest[1])) }
		case "rejoined":
			// Every restart so far has rejoined; by default wait as long
			// as the rejoin rule allows, so that it is judged.
			if _, ok := opts["max"]; !ok {
				max = 0
				if d := s.RejoinDeadline() - s.Now(); d > 0 {
					max = d
				}
			}
			cond = s.AllRejoined
		case "confirmed":
			names := rest[1:]
			for _, n := range names {
				if s.Log().SubIndex(n) < 0 {
					return fmt.Errorf("unknown subscriber %s", n)
				}
			}
			cond = func() bool {
				if len(names) == 0 {
					return s.AllConfirmed()
				}
				for _, n := range names {
					if !s.Confirmed(n) {
						return false
					}
				}
				return true
			}
		default:
			return fmt.Errorf("wait %s: want joined, rejoined or confirmed", rest[0])
		}
		ok, err := s.RunUntilCond(max, cond)
		if err != nil {
			return err
		}
		if !ok {
			r.note("wait %s: not reached within %v", strings.Join(rest, " "), max)
		}
		return nil
	case "subscribe", "durable":
		if len(rest) < 3 {
			return fmt.Errorf("want: %s NAME BROKER class=... | random", cmd)
		}
		var f matching.Filter
		switch {
		case rest[2] == "random":
			f = r.w.Filter()
		case strings.HasPrefix(rest[2], "["): // PADRES syntax
			if f, err = matching.ParseFilter(strings.Join(rest[2:], " ")); err != nil {
				return err
			}
		default:
			if f, err = parseFilter(rest[2:]); err != nil {
				return err
			}
		}
		if cmd == "durable" {
			return s.AddDurable(rest[0], message.BrokerID(rest[1]), f)
		}
		return s.AddSubscriber(rest[0], message.BrokerID(rest[1]), f)
	case "disconnect":
		if len(rest) == 0 {
			return fmt.Errorf("want: disconnect DURABLE ...")
		}
		for _, n := range rest {
			if err := s.Disconnect(n); err != nil {
				return err
			}
		}
		return nil
	case "reconnect":
		if len(rest) != 2 {
			return fmt.Errorf("want: reconnect DURABLE BROKER")
		}
		return s.Reconnect(rest[0], message.BrokerID(rest[1]))
	case "subscribers":
		if len(rest) != 1 {
			return fmt.Errorf("want: subscribers N")
		}
		n, err := strconv.Atoi(rest[0])
		if err != nil || n < 1 || n > 100000 {
			return fmt.Errorf("N must be 1..100000")
		}
		brokers := s.Brokers()
		for i := 1; i <= n; i++ {
			if err := s.AddSubscriber(fmt.Sprintf("S%d", i), brokers[s.Rand().IntN(len(brokers))], r.w.Filter()); err != nil {
				return err
			}
		}
		return nil
	case "publish":
		if len(rest) < 2 {
			return fmt.Errorf("want: publish NAME BROKER every=D for=D [attrs]")
		}
		every, dur := 20*time.Millisecond, time.Second
		if v, ok := opts["every"]; ok {
			if every, err = parseDur("every", v); err != nil {
				return err
			}
		}
		if v, ok := opts["for"]; ok {
			if dur, err = parseDur("for", v); err != nil {
				return err
			}
		}
		var gen func() []matching.Attr
		if len(rest) > 2 {
			var as []matching.Attr
			if strings.HasPrefix(rest[2], "[") { // PADRES syntax
				p, err := matching.ParsePublication(strings.Join(rest[2:], " "))
				if err != nil {
					return err
				}
				as = p.Attrs
			} else if as, err = parseAttrs(rest[2:]); err != nil {
				return err
			}
			gen = func() []matching.Attr { return as }
		} else {
			gen = func() []matching.Attr { return r.w.Publication().Attrs }
		}
		return s.AddPublisher(rest[0], message.BrokerID(rest[1]), every, s.Now()+dur, gen)
	case "unsubscribe":
		for _, n := range rest {
			if err := s.Unsubscribe(n); err != nil {
				return err
			}
		}
		return nil
	case "crash", "freeze", "resume":
		if len(rest) == 0 {
			return fmt.Errorf("name at least one broker")
		}
		for _, id := range ids(rest) {
			var err error
			switch cmd {
			case "crash":
				err = s.Crash(id)
			case "freeze":
				err = s.Freeze(id)
			default:
				err = s.Resume(id)
			}
			if err != nil {
				return err
			}
		}
		return nil
	case "restart":
		const want = "want: restart BROKER [via JOINPOINT ...] [stale-link DURATION] [resolve] [place] [data]"
		if len(rest) == 0 {
			return fmt.Errorf(want)
		}
		id := message.BrokerID(rest[0])
		o := RestartOptions{Joinpoints: s.existing(r.tree.Neighbours(id)), StaleLink: -1}
		if n := len(rest); n >= 2 && rest[n-1] == "data" {
			// Its whole data directory: the place and the log.
			o.Place, o.Log, rest = true, true, rest[:n-1]
		}
		if n := len(rest); n >= 2 && rest[n-1] == "place" {
			o.Place, rest = true, rest[:n-1]
		}
		if n := len(rest); n >= 2 && rest[n-1] == "resolve" {
			o.Resolve, rest = true, rest[:n-1]
		}
		if n := len(rest); n >= 3 && rest[n-2] == "stale-link" {
			if o.StaleLink, err = parseDur("stale-link", rest[n-1]); err != nil {
				return err
			}
			rest = rest[:n-2]
		}
		if len(rest) > 2 && rest[1] == "via" {
			o.Joinpoints = ids(rest[2:])
		} else if len(rest) != 1 {
			return fmt.Errorf(want)
		}
		return s.RestartWith(id, o)
	case "slowdial":
		if len(rest) != 3 {
			return fmt.Errorf("want: slowdial BROKER PEER DURATION")
		}
		d, err := parseDur("slowdial", rest[2])
		if err != nil {
			return err
		}
		for _, id := range rest[:2] {
			if _, err := s.broker(message.BrokerID(id)); err != nil {
				return err
			}
		}
		s.SlowDial(message.BrokerID(rest[0]), message.BrokerID(rest[1]), d)
		return nil
	case "slow":
		if len(rest) != 2 {
			return fmt.Errorf("want: slow BROKER DURATION")
		}
		d, err := parseDur("slow", rest[1])
		if err != nil {
			return err
		}
		return s.Stall(message.BrokerID(rest[0]), d)
	case "leave":
		if len(rest) == 2 && rest[1] == "start" {
			// Only begin the leave: what follows happens while B drains.
			// The planned tree keeps B, so a later restart next to it
			// names its joinpoints.
			return s.Leave(message.BrokerID(rest[0]))
		}
		return r.leave(opts, rest)
	case "cut", "heal":
		if len(rest) != 2 {
			return fmt.Errorf("want: %s BROKER BROKER", cmd)
		}
		if cmd == "cut" {
			return s.Cut(message.BrokerID(rest[0]), message.BrokerID(rest[1]))
		}
		return s.Heal(message.BrokerID(rest[0]), message.BrokerID(rest[1]))
	case "run":
		if len(rest) != 1 {
			return fmt.Errorf("want: run DURATION")
		}
		d, err := parseDur("run", rest[0])
		if err != nil {
			return err
		}
		return s.RunFor(d)
	case "settle":
		d := 2 * time.Second
		if v, ok := opts["for"]; ok {
			if d, err = parseDur("for", v); err != nil {
				return err
			}
		}
		s.StopPublishers()
		if err := s.RunFor(d); err != nil {
			return err
		}
		s.CheckDrained()
		s.CheckLiveness()
		return nil
	case "beyond":
		r.beyond = true
		return nil
	}
	return fmt.Errorf("unknown command (want config, tree, join, wait, subscribe, subscribers, durable, disconnect, reconnect, publish, unsubscribe, crash, restart, slow, freeze, resume, cut, heal, leave, run, settle, beyond)")
}

func (r *runner) config(args []string) error {
	for _, a := range args {
		i := strings.IndexByte(a, '=')
		if i <= 0 {
			return fmt.Errorf("%q: want key=value", a)
		}
		k, v := a[:i], a[i+1:]
		atoi := func() (int, error) {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%s: %q is not a non-negative integer", k, v)
			}
			return n, nil
		}
		var err error
		switch k {
		case "delta":
			r.cfg.Core.Delta, err = atoi()
		case "seed":
			var n int
			n, err = atoi()
			r.cfg.Seed = int64(n)
		case "heartbeat":
			r.cfg.Core.HeartbeatTicks, err = atoi()
		case "failure":
			r.cfg.Core.FailureTicks, err = atoi()
		case "dack":
			r.cfg.Core.DACKTicks, err = atoi()
		case "gone":
			r.cfg.Core.GoneAfterTicks, err = atoi()
		case "maxqueue":
			r.cfg.Core.MaxQueue, err = atoi()
		case "durable":
			if v != "on" && v != "off" {
				return fmt.Errorf("durable: %q, want on or off", v)
			}
			r.cfg.Core.Durable = v == "on"
		case "memorylog":
			if v != "on" && v != "off" {
				return fmt.Errorf("memorylog: %q, want on or off", v)
			}
			r.cfg.Core.MemoryLog = v == "on"
		case "maxlog":
			var k int
			k, err = atoi()
			r.cfg.Core.MaxLogBytes = int64(k)
		case "retain":
			r.cfg.Core.RetainTicks, err = atoi()
		case "retainbytes":
			var k int
			k, err = atoi()
			r.cfg.Core.RetainBytes = int64(k)
		case "keepaway":
			r.cfg.Core.KeepAwayTicks, err = atoi()
		case "heldbytes":
			var k int
			k, err = atoi()
			r.cfg.Core.MaxHeldBytes = int64(k)
		case "tick":
			r.cfg.Tick, err = parseDur(k, v)
		case "delay":
			r.cfg.LinkDelay, err = parseDur(k, v)
		case "jitter":
			r.cfg.LinkJitter, err = parseDur(k, v)
		case "dialtimeout":
			r.cfg.DialTimeout, err = parseDur(k, v)
		case "accept":
			r.cfg.AcceptDelay, err = parseDur(k, v)
		case "wire":
			if v != "on" && v != "off" {
				return fmt.Errorf("wire: %q, want on or off", v)
			}
			r.cfg.Wire = v == "on"
		case "frame":
			// The largest frame a receiver accepts (and the nodes split
			// their messages for); 0: unbounded.
			r.cfg.MaxFrame, err = atoi()
		case "linkdown":
			if v == "never" {
				r.cfg.LinkDownAfter = -1
			} else {
				r.cfg.LinkDownAfter, err = parseDur(k, v)
			}
		default:
			return fmt.Errorf("unknown key %q (want delta, seed, tick, heartbeat, failure, dack, gone, delay, jitter, dialtimeout, accept, linkdown, maxqueue, wire, frame, durable, maxlog, retain, retainbytes)", k)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) buildTree(args []string) error {
	if r.s != nil {
		return fmt.Errorf("only one tree per scenario (use join to add brokers)")
	}
	opts, rest := kv(args)
	s, err := New(r.cfg)
	if err != nil {
		return err
	}
	r.s = s
	r.w = workload.NewSmall(s.Rand())
	switch {
	case opts["chain"] != "":
		n, err := strconv.Atoi(opts["chain"])
		if err != nil || n < 1 || n > 10000 {
			return fmt.Errorf("chain=N: N must be 1..10000")
		}
		r.tree = NewTree("B1")
		for i := 2; i <= n; i++ {
			_ = r.tree.Add(message.BrokerID(fmt.Sprintf("B%d", i-1)), message.BrokerID(fmt.Sprintf("B%d", i)))
		}
	case opts["random"] != "":
		n, err := strconv.Atoi(opts["random"])
		if err != nil || n < 1 || n > 10000 {
			return fmt.Errorf("random=N: N must be 1..10000")
		}
		deg := 4
		if v := opts["degree"]; v != "" {
			if deg, err = strconv.Atoi(v); err != nil || deg < 1 {
				return fmt.Errorf("degree=D: D must be ≥ 1")
			}
		}
		r.tree = RandomTree(s.Rand(), n, deg)
	default:
		if len(rest) == 0 {
			return fmt.Errorf("want: tree chain=N | tree random=N | tree A-B B-C ...")
		}
		for i, e := range rest {
			p := strings.Split(e, "-")
			if len(p) != 2 || p[0] == "" || p[1] == "" {
				return fmt.Errorf("edge %q: want PARENT-CHILD", e)
			}
			if i == 0 {
				r.tree = NewTree(message.BrokerID(p[0]))
			}
			if err := r.tree.Add(message.BrokerID(p[0]), message.BrokerID(p[1])); err != nil {
				return err
			}
		}
	}
	return s.BuildTree(r.tree, 2*time.Second)
}

// storyNotices are the notice kinds the stable outcome lists (whether each
// occurred): the ones that tell what a scenario exercised. Other kinds the
// core may add are left to the full outcome, so that a new kind does not
// change every file.
var storyNotices = map[string]bool{"suspected": true, "unsuspected": true, "bypass-up": true, "bypass-down": true,
	"joined": true, "recovered": true, "gone": true, "gap": true}

func (r *runner) outcome(rep Report, full bool) string {
	var b strings.Builder
	st := r.s.Stats()
	if full {
		fmt.Fprintf(&b, "brokers=%d delta=%d virtual=%s\n", len(r.s.Brokers()), r.cfg.Core.Delta, fmtTime(r.s.Now()))
	} else {
		// The end time moves with how fast "wait" conditions are met.
		fmt.Fprintf(&b, "brokers=%d delta=%d\n", len(r.s.Brokers()), r.cfg.Core.Delta)
	}
	for _, e := range r.events {
		fmt.Fprintf(&b, "event: %s\n", e)
	}
	if full {
		fmt.Fprintf(&b, "published=%d subscriptions=%d excluded_subs=%d excluded_pubs=%d unconfirmed=%d\n",
			rep.Published, rep.Subscriptions, rep.ExcludedSubs, rep.ExcludedPubs, rep.Unconfirmed)
		fmt.Fprintf(&b, "guaranteed=%d delivered=%d lost=%d gap_covered=%d silent_lost=%d duplicates=%d reordered=%d spurious=%d gap_notices=%d undrained=%d over_bound=%d stuck=%d\n",
			rep.Guaranteed, rep.Delivered, rep.Lost, rep.GapCovered, rep.SilentLost, rep.Duplicates, rep.Reordered, rep.Spurious, rep.GapNotices, rep.Undrained, rep.QueueOverBound, rep.Stuck)
		fmt.Fprintf(&b, "released_by_retention=%d\n", rep.Released)
	} else {
		fmt.Fprintf(&b, "subscriptions=%d excluded_subs=%d unconfirmed=%d guaranteed>0=%v\n",
			rep.Subscriptions, rep.ExcludedSubs, rep.Unconfirmed, rep.Guaranteed > 0)
		lossNoted := "lost=0"
		if r.beyond && rep.Lost > 0 {
			lossNoted = "lost>0 (beyond δ)"
		} else if rep.Lost > 0 {
			lossNoted = fmt.Sprintf("lost=%d", rep.Lost)
		}
		fmt.Fprintf(&b, "%s silent_lost=%d duplicates=%d reordered=%d spurious=%d undrained=%d over_bound=%d stuck=%d\n",
			lossNoted, rep.SilentLost, rep.Duplicates, rep.Reordered, rep.Spurious, rep.Undrained, rep.QueueOverBound, rep.Stuck)
		if rep.Released > 0 {
			// (only when not 0: the files before durable subscribers stay
			// as they were)
			fmt.Fprintf(&b, "released_by_retention>0\n")
		}
	}
	if full || rep.Storms+rep.NotRejoined > 0 {
		// (in the stable outcome only when not 0: the files before the
		// rules stay as they were)
		fmt.Fprintf(&b, "storms=%d not_rejoined=%d\n", rep.Storms, rep.NotRejoined)
	}
	for _, ps := range rep.PerSub {
		state := ""
		if ps.Durable {
			state = fmt.Sprintf(" (durable, %d sessions)", ps.Sessions)
			if ps.Excluded {
				state = fmt.Sprintf(" (durable, %d sessions, disconnected at the end: excluded)", ps.Sessions)
			}
		}
		if ps.Excluded && !ps.Durable {
			state = " (edge crashed: excluded)"
		} else if !ps.Confirmed {
			state = " (never confirmed)"
		}
		if full {
			fmt.Fprintf(&b, "sub %s at %s [%s]%s: guaranteed=%d delivered=%d lost=%d gaps=%d\n",
				ps.Name, ps.Edge, ps.Filter, state, ps.Guaranteed, ps.Delivered, ps.Lost, ps.Gaps)
			continue
		}
		lost := "lost=0"
		if ps.Lost > 0 {
			lost = "lost>0"
		}
		if ps.Durable {
			// A durable subscriber's Gaps are the retention's: their exact
			// ranges are the behaviour shown.
			fmt.Fprintf(&b, "sub %s at %s [%s]%s: %s gaps=%s\n", ps.Name, ps.Edge, ps.Filter, state, lost, r.gapRanges(ps.Name))
			continue
		}
		fmt.Fprintf(&b, "sub %s at %s [%s]%s: %s gap_notices=%v\n", ps.Name, ps.Edge, ps.Filter, state, lost, ps.Gaps > 0)
	}
	kinds := make([]string, 0, len(st.Notices))
	for k := range st.Notices {
		if full || storyNotices[k] {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = k
		if full {
			parts[i] = fmt.Sprintf("%s=%d", k, st.Notices[k])
		}
	}
	fmt.Fprintf(&b, "notices: %s\n", strings.Join(parts, " "))
	rule := "within δ"
	if r.beyond {
		rule = "beyond δ"
	}
	if rep.Failed(r.beyond) {
		fmt.Fprintf(&b, "verdict: FAIL (%s)\n", rule)
		if full {
			for _, d := range rep.Details {
				fmt.Fprintf(&b, "  %s\n", d)
			}
		}
	} else {
		fmt.Fprintf(&b, "verdict: PASS (%s)\n", rule)
	}
	return b.String()
}

// gapRanges lists the Gaps subscriber name received: source from..to
// (to 0: open-ended), in arrival order.
func (r *runner) gapRanges(name string) string {
	l := r.s.Log()
	si := l.SubIndex(name)
	var parts []string
	for _, g := range l.Gaps {
		if g.Sub != si {
			continue
		}
		src := g.Gap.Source.Publisher
		if src == "" {
			src = "*"
		} else {
			src = fmt.Sprintf("%s/%d", src, g.Gap.Source.Epoch)
		}
		parts = append(parts, fmt.Sprintf("%s %d..%d", src, g.Gap.From, g.Gap.To))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
