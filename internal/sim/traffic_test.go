package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
	"github.com/deltapub/deltapub/topology"
)

// probeNode is a minimal broker for the tests of the liveness rules and
// of the drawn network behaviours: it joins through its first joinpoint
// (joined once a link is up), sends one heartbeat per tick to every up
// link (burst per tick while *loop is set: a retry loop), greets every
// new link with a heartbeat, and records every input with its virtual
// time in a log shared by the brokers of a test.
type probeNode struct {
	nodeBase
	id     message.BrokerID
	joined bool
	peers  []message.BrokerID
	loop   *bool
	burst  int
	rec    func(format string, args ...any)
	// backward: once set, the node says it is joining again although
	// joined (an illegal phase change, TestPhaseRule).
	backward *bool
}

type probeLog struct {
	s        *Sim
	lines    []string
	backward map[message.BrokerID]*bool // see probeNode.backward
}

func (l *probeLog) factory(loop map[message.BrokerID]*bool, burst int) NodeFactory {
	return func(cfg overlay.Config) (Node, error) {
		n := &probeNode{id: cfg.ID, loop: loop[cfg.ID], burst: burst, backward: l.backward[cfg.ID]}
		n.rec = func(format string, args ...any) {
			l.lines = append(l.lines, fmt.Sprintf("%s %s ", fmtTime(l.s.Now()), cfg.ID)+fmt.Sprintf(format, args...))
		}
		return n, nil
	}
}

// at is the time of the first line of the log that ends with suffix
// (broker and event), from line from on.
func (l *probeLog) at(suffix string, from ...int) (time.Duration, bool) {
	i := 0
	if len(from) > 0 {
		i = from[0]
	}
	for _, ln := range l.lines[i:] {
		if strings.HasSuffix(ln, suffix) {
			var sec, usec int64
			fmt.Sscanf(ln, "%d.%ds", &sec, &usec)
			return time.Duration(sec)*time.Second + time.Duration(usec)*time.Microsecond, true
		}
	}
	return 0, false
}

func (n *probeNode) Bootstrap() {
	n.joined = true
	n.out.Notices = append(n.out.Notices, overlay.Notice{Kind: overlay.NoticeJoined})
}

func (n *probeNode) Join(jps []overlay.Peer) {
	if len(jps) > 0 {
		n.out.Dials = append(n.out.Dials, jps[0])
	}
}

func (n *probeNode) Tick() {
	k := 1
	if n.loop != nil && *n.loop {
		k = n.burst
	}
	for _, p := range n.peers {
		for i := 0; i < k; i++ {
			n.out.Messages = append(n.out.Messages, overlay.Envelope{To: p, Msg: pingMsg})
		}
	}
}

func (n *probeNode) LinkUp(p message.BrokerID) {
	n.rec("linkup %s", p)
	if !slices.Contains(n.peers, p) {
		n.peers = append(n.peers, p)
	}
	n.out.Messages = append(n.out.Messages, overlay.Envelope{To: p, Msg: pingMsg})
	if !n.joined {
		n.joined = true
		n.out.Notices = append(n.out.Notices, overlay.Notice{Kind: overlay.NoticeJoined, Peer: p})
	}
}

func (n *probeNode) LinkDown(p message.BrokerID) {
	n.rec("linkdown %s", p)
	n.peers = slices.DeleteFunc(n.peers, func(x message.BrokerID) bool { return x == p })
}

func (n *probeNode) DialFailed(p message.BrokerID)                 { n.rec("dialfailed %s", p) }
func (n *probeNode) Step(from message.BrokerID, m message.Message) { n.rec("step %s", from) }
func (n *probeNode) ClientOpen(message.ClientID)                   {}
func (n *probeNode) ClientClose(message.ClientID)                  {}
func (n *probeNode) Client(message.ClientID, message.Message)      {}
func (n *probeNode) Joined() bool                                  { return n.joined }
func (n *probeNode) Phase() overlay.Phase {
	if n.backward != nil && *n.backward {
		return overlay.PhaseJoining
	}
	return joinedPhase(n.joined)
}

// probeSim builds a chain B1-B2-...-Bn of probe nodes.
func probeSim(t *testing.T, n int, edit func(*Config), loop map[message.BrokerID]*bool) (*Sim, *probeLog) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Wire = false
	lg := &probeLog{}
	cfg.NewNode = lg.factory(loop, 30)
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lg.s = s
	tree := NewTree("B1")
	for i := 2; i <= n; i++ {
		_ = tree.Add(message.BrokerID(fmt.Sprintf("B%d", i-1)), message.BrokerID(fmt.Sprintf("B%d", i)))
	}
	if err := s.BuildTree(tree, time.Second); err != nil {
		t.Fatal(err)
	}
	_ = s.RunFor(100 * time.Millisecond) // the acceptors' LinkUp (Config.AcceptDelay)
	return s, lg
}

// A broker whose control traffic jumps from its steady state (100/s per
// link) to a loop (3,000/s per link) after a fault is flagged, by broker
// and type; the same run without the loop is not.
func TestStormRule(t *testing.T) {
	for _, looping := range []bool{false, true} {
		on := false
		s, _ := probeSim(t, 3, nil, map[message.BrokerID]*bool{"B2": &on})
		s.At(3*time.Second, func() { _ = s.Crash("B3") })
		s.At(4*time.Second, func() { on = looping })
		s.At(5*time.Second, func() { on = false })
		if err := s.RunUntil(8 * time.Second); err != nil {
			t.Fatal(err)
		}
		if got := s.SentControl("B2")["Heartbeat"]; got < 700 {
			t.Fatalf("SentControl(B2) = %d heartbeats in 8s, want some hundreds at least", got)
		}
		if len(s.ControlReadings()) < 3*7 {
			t.Fatalf("%d readings, want one per broker per second", len(s.ControlReadings()))
		}
		storms := s.Storms()
		if !looping {
			if len(storms) != 0 {
				t.Fatalf("quiet run flagged: %v", storms)
			}
			continue
		}
		if len(storms) != 1 || storms[0].Broker != "B2" || storms[0].Type != "Heartbeat" {
			t.Fatalf("storms = %v, want B2 Heartbeat", storms)
		}
		s.CheckTraffic(true)
		rep := s.Log().Check()
		if rep.Storms != 1 || !rep.Failed(false) || !rep.Failed(true) || !strings.Contains(strings.Join(rep.Details, "\n"), "storm: B2 sent Heartbeat") {
			t.Fatalf("report: storms=%d details %v", rep.Storms, rep.Details)
		}
	}
}

// A restart through a live joinpoint rejoins; one through a crashed
// joinpoint never does and is reported once the bound has passed (not
// before).
func TestRejoinRule(t *testing.T) {
	fast := func(c *Config) { c.Core.GoneAfterTicks = 30 } // bound 2×300ms + 10×100ms
	s, _ := probeSim(t, 3, fast, nil)
	_ = s.Crash("B3")
	_ = s.RunFor(200 * time.Millisecond)
	_ = s.Restart("B3", "B2")
	if ok, _ := s.RunUntilCond(time.Second, s.AllRejoined); !ok {
		t.Fatal("B3 did not rejoin through a live B2")
	}
	if p := s.NotRejoined(); len(p) != 0 {
		t.Fatalf("NotRejoined = %v", p)
	}

	s, _ = probeSim(t, 3, fast, nil)
	_ = s.Crash("B2")
	_ = s.Crash("B3")
	_ = s.RunFor(200 * time.Millisecond)
	_ = s.Restart("B3", "B2") // B2 stays down
	d := s.RejoinDeadline()
	if d != s.Now()+s.RejoinBound().After {
		t.Fatalf("deadline %v, want restart + %v", d, s.RejoinBound().After)
	}
	_ = s.RunUntil(d - time.Millisecond)
	if p := s.NotRejoined(); len(p) != 0 {
		t.Fatalf("judged before the deadline: %v", p)
	}
	_ = s.RunUntil(d)
	s.CheckTraffic(true)
	rep := s.Log().Check()
	if rep.NotRejoined != 1 || !rep.Failed(false) || rep.Failed(true) {
		t.Fatalf("not_rejoined=%d failed=%v/%v details %v", rep.NotRejoined, rep.Failed(false), rep.Failed(true), rep.Details)
	}
	if !strings.Contains(rep.Details[0], "B3") {
		t.Fatalf("details %v", rep.Details)
	}
}

// A restarted broker's peer keeps the old incarnation's link for the
// stale delay: what it sends on it is lost (the new incarnation gets
// nothing), then it is told LinkDown.
func TestStaleLink(t *testing.T) {
	s, lg := probeSim(t, 2, nil, nil)
	_ = s.Crash("B2")
	_ = s.RunFor(500 * time.Millisecond)
	restart := s.Now()
	lost := s.Stats().InFlightLost
	n := len(lg.lines)
	if err := s.RestartWith("B2", RestartOptions{StaleLink: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	_ = s.RunFor(time.Second)
	down, ok := lg.at("B1 linkdown B2", n)
	if !ok || down != restart+300*time.Millisecond {
		t.Fatalf("B1 told LinkDown at %v (%v), want restart %v + 300ms\n%s", down, ok, restart, strings.Join(lg.lines, "\n"))
	}
	if s.Stats().InFlightLost-lost < 20 {
		t.Fatalf("%d messages lost on the stale link, want B1's heartbeats of 300ms", s.Stats().InFlightLost-lost)
	}
	if _, got := lg.at("B2 step B1", n); got {
		t.Fatal("the new incarnation received a message of the old link")
	}
	// Without StaleLink (and LinkDownAfter never), no LinkDown at all.
	s, lg = probeSim(t, 2, nil, nil)
	_ = s.Crash("B2")
	_ = s.RunFor(500 * time.Millisecond)
	_ = s.Restart("B2")
	_ = s.RunFor(time.Second)
	if _, got := lg.at("B1 linkdown B2"); got {
		t.Fatal("LinkDown without a stale link or an idle timeout")
	}
}

// A restarted broker that dials its old peer replaces the old link: the
// peer is told LinkDown for the old one before LinkUp for the new one, as
// the runtime does.
func TestReplacedLinkReportedDownFirst(t *testing.T) {
	s, lg := probeSim(t, 2, func(c *Config) { c.ReplacedDown = true }, nil)
	_ = s.Crash("B2")
	_ = s.RunFor(500 * time.Millisecond)
	n := len(lg.lines)
	_ = s.Restart("B2", "B1")
	_ = s.RunFor(100 * time.Millisecond)
	var b1 []string
	for _, l := range lg.lines[n:] {
		if f := strings.Fields(l); f[1] == "B1" && f[2] != "step" {
			b1 = append(b1, f[2]+" "+f[3])
		}
	}
	if want := []string{"linkdown B2", "linkup B2"}; !slices.Equal(b1, want) {
		t.Fatalf("B1 saw %v, want %v", b1, want)
	}
}

// The acceptor of a new link is told LinkUp up to AcceptDelay after the
// dialler; the dialler's first message (sent at its LinkUp) reaches the
// acceptor only after the acceptor's LinkUp, never before.
func TestAcceptDelay(t *testing.T) {
	delayed := false
	for seed := int64(1); seed <= 8; seed++ {
		s, lg := probeSim(t, 2, func(c *Config) {
			c.Seed = seed
			c.LinkDelay, c.LinkJitter = time.Millisecond, 0
			c.AcceptDelay = 20 * time.Millisecond
		}, nil)
		dialler, _ := lg.at("B2 linkup B1")
		acceptor, _ := lg.at("B1 linkup B2")
		first, ok := lg.at("B1 step B2")
		if !ok || acceptor < dialler || acceptor > dialler+20*time.Millisecond || first < acceptor {
			t.Fatalf("seed %d: dialler up %v, acceptor up %v, first message %v\n%s", seed, dialler, acceptor, first, strings.Join(lg.lines, "\n"))
		}
		for i, l := range lg.lines {
			if strings.HasSuffix(l, "B1 step B2") {
				if !strings.HasSuffix(lg.lines[i-1], "B1 linkup B2") && acceptor > dialler+time.Millisecond {
					t.Fatalf("seed %d: the held message is not the first input after the LinkUp:\n%s", seed, strings.Join(lg.lines[:i+1], "\n"))
				}
				break
			}
		}
		delayed = delayed || acceptor > dialler+time.Millisecond
		_ = s
	}
	if !delayed {
		t.Fatal("no seed drew an accept delay above the link delay")
	}
}

// A dial to a crashed broker fails after a drawn delay within the dial
// timeout (not always at it); with DialFailLive at 1000‰ a dial to a live
// broker fails too.
func TestDialFailDraws(t *testing.T) {
	s, lg := probeSim(t, 3, func(c *Config) {
		c.DialFailDraw = true
		c.DialTimeout = 500 * time.Millisecond
	}, nil)
	_ = s.Crash("B3")
	var delays []time.Duration
	for i := 0; i < 10; i++ {
		b2 := s.brokers["B2"]
		at := s.Now()
		n := len(lg.lines)
		s.dial(b2, "B3")
		_ = s.RunFor(600 * time.Millisecond)
		for _, l := range lg.lines[n:] {
			if strings.HasSuffix(l, "B2 dialfailed B3") {
				d, _ := (&probeLog{lines: []string{l}}).at("dialfailed B3")
				delays = append(delays, d-at)
			}
		}
	}
	if len(delays) != 10 {
		t.Fatalf("%d DialFailed for 10 dials", len(delays))
	}
	distinct := map[time.Duration]bool{}
	for _, d := range delays {
		if d < 2*s.cfg.LinkDelay || d > 500*time.Millisecond {
			t.Fatalf("DialFailed after %v, want within [round trip, dial timeout]", d)
		}
		distinct[d] = true
	}
	if len(distinct) < 5 {
		t.Fatalf("dial failure delays %v: not drawn", delays)
	}

	s, lg = probeSim(t, 2, nil, nil)
	s.cfg.DialFailLive = 1000
	_ = s.AddBroker("B3")
	_ = s.Join("B3", "B1")
	_ = s.RunFor(time.Second)
	if _, ok := lg.at("B3 dialfailed B1"); !ok || s.Joined("B3") {
		t.Fatalf("a dial to a live broker did not fail with DialFailLive=1000:\n%s", strings.Join(lg.lines, "\n"))
	}
}

// A stall freezes a broker for its length and loses nothing: what reached
// it meanwhile is stepped when it resumes.
func TestStall(t *testing.T) {
	s, lg := probeSim(t, 2, nil, nil)
	start := s.Now()
	n := len(lg.lines)
	_ = s.Stall("B2", 50*time.Millisecond)
	_ = s.RunFor(49 * time.Millisecond)
	if s.State("B2") != "frozen" {
		t.Fatalf("B2 is %s during its stall", s.State("B2"))
	}
	for _, l := range lg.lines[n:] {
		if strings.Contains(l, " B2 ") {
			t.Fatalf("B2 had an input during its stall: %s", l)
		}
	}
	_ = s.RunFor(2 * time.Millisecond)
	if s.State("B2") != "up" {
		t.Fatalf("B2 is %s after its stall", s.State("B2"))
	}
	resumed, _ := lg.at("B2 step B1", n)
	if resumed != start+50*time.Millisecond || s.Stats().InFlightLost != 0 {
		t.Fatalf("the inputs held during the stall were stepped at %v (want %v), lost %d", resumed, start+50*time.Millisecond, s.Stats().InFlightLost)
	}
}

// The joinpoint policy shared with the testbed: ancestors nearest first,
// up to δ+1, and for the root its children.
func TestRestartJoinpoints(t *testing.T) {
	tr := NewTree("B1")
	for _, e := range [][2]message.BrokerID{{"B1", "B2"}, {"B2", "B3"}, {"B3", "B4"}, {"B1", "B5"}, {"B4", "B6"}} {
		_ = tr.Add(e[0], e[1])
	}
	for _, c := range []struct {
		id    message.BrokerID
		delta int
		want  []message.BrokerID
	}{
		{"B6", 1, []message.BrokerID{"B4", "B3"}},
		{"B6", 3, []message.BrokerID{"B4", "B3", "B2", "B1"}},
		{"B2", 2, []message.BrokerID{"B1", "B3", "B5"}}, // the root's child: not the root alone
		{"B1", 2, []message.BrokerID{"B2", "B5", "B3"}},
	} {
		if got := tr.RestartJoinpoints(c.id, c.delta); !slices.Equal(got, c.want) {
			t.Errorf("RestartJoinpoints(%s, δ=%d) = %v, want %v", c.id, c.delta, got, c.want)
		}
	}
	// The testbed's form: names, the root's parent "".
	parent := map[string]string{"r": "", "a": "r", "b": "a"}
	children := map[string][]string{"r": {"a"}, "a": {"b"}}
	p := func(n string) (string, bool) { return parent[n], parent[n] != "" }
	c := func(n string) []string { return children[n] }
	if got := topology.RestartJoinpoints("b", 1, p, c); !slices.Equal(got, []string{"a", "r"}) {
		t.Errorf("b: %v", got)
	}
	if got := topology.RestartJoinpoints("r", 1, p, c); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("r: %v", got)
	}
}

// With Resolve, a restarted broker's runtime dials its joinpoints in
// order and gives the core the first that answers, alone: a crashed first
// joinpoint is skipped (after its dial fails), and the core joins through
// the second one only.
func TestRestartResolve(t *testing.T) {
	s, lg := probeSim(t, 4, func(c *Config) { c.DialFailDraw = true }, nil)
	_ = s.Crash("B3")
	_ = s.Crash("B4")
	_ = s.RunFor(200 * time.Millisecond)
	n := len(lg.lines)
	if err := s.RestartWith("B4", RestartOptions{Joinpoints: []message.BrokerID{"B3", "B2", "B1"}, StaleLink: -1, Resolve: true}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.RunUntilCond(time.Second, s.AllRejoined); !ok {
		t.Fatalf("B4 did not rejoin through B2:\n%s", strings.Join(lg.lines[n:], "\n"))
	}
	if _, ok := lg.at("B4 linkup B2", n); !ok {
		t.Fatalf("B4 did not link to B2:\n%s", strings.Join(lg.lines[n:], "\n"))
	}
	if _, ok := lg.at("B4 dialfailed B3", n); ok {
		t.Fatal("the core was given the crashed B3 (the runtime resolves it away)")
	}
	// No joinpoint answering: the rounds go on, paced (a pause doubling
	// from 200 ms to 5 s after each round of dials), until one answers.
	s, _ = probeSim(t, 3, nil, nil)
	_ = s.Crash("B2")
	_ = s.Crash("B3")
	_ = s.RestartWith("B3", RestartOptions{Joinpoints: []message.BrokerID{"B2"}, StaleLink: -1, Resolve: true})
	_ = s.RunFor(10 * time.Second)
	if f := s.Stats().DialsFailed; s.Joined("B3") || f < 4 || f > 8 {
		t.Fatalf("joined=%v after %d failed dials in 10 s, want not joined after 4..8 paced rounds", s.Joined("B3"), f)
	}
	_ = s.Restart("B2", "B1")
	if ok, _ := s.RunUntilCond(10*time.Second, s.AllRejoined); !ok {
		t.Fatal("B3 did not join once its joinpoint B2 was back")
	}
}

// A broker whose membership phase moves backwards (joined, then joining
// again in the same incarnation) fails the run, within δ and beyond,
// naming the broker and both phases; the same run without it passes.
func TestPhaseRule(t *testing.T) {
	for _, backwards := range []bool{false, true} {
		on := false
		s, _ := probeSim(t, 2, nil, nil)
		for _, b := range s.order {
			if b.id == "B2" {
				b.node.(*probeNode).backward = &on
			}
		}
		s.At(2*time.Second, func() { on = backwards })
		if err := s.RunUntil(3 * time.Second); err != nil {
			t.Fatal(err)
		}
		rep := s.Log().Check()
		if !backwards {
			if rep.Phases != 0 || rep.Failed(false) {
				t.Fatalf("legal run flagged: %v", rep.Details)
			}
			continue
		}
		if rep.Phases != 1 || !rep.Failed(false) || !rep.Failed(true) || !strings.Contains(strings.Join(rep.Details, "\n"), "B2 (epoch 1) went from joined to joining") {
			t.Fatalf("report: phases=%d details %v", rep.Phases, rep.Details)
		}
	}
}
