package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/deltapub/deltapub/matching/workload"
	"github.com/deltapub/deltapub/message"
)

// The fuzzer's durable draws (dursub.go), from a random stream of their
// own so that every seed's other draws are those of the fuzz without
// them. In half of the runs the brokers log their publications and
// retain them (long enough to cover the run, or in one such run of four
// a few hundred milliseconds, so that retention Gaps happen), restarts
// keep their data directory (a crashed PHB restarts with its log), and
// 1–3 durable subscribers join the plain ones: half of them at a broker
// the fault wave crashes (an SHB crash), and each may disconnect during
// the wave and reconnect 100 ms–1.5 s later. A subscriber whose session
// is gone (its edge crashed or left, or its broker refused or ended it)
// reconnects after 100 ms–1 s. Half of the reconnects are at the broker
// it left (which may have kept it: in three runs of four the edges keep
// away subscriptions, 0.5–2.5 s, one of four of those with a bound on what
// they hold that the traffic passes), waiting for it while it is down (a
// crashed edge restarts with its held log, overlay/held.go), the others at
// another live broker; all are reconnected when publishing stops, so that
// the settle period judges every one. A reconnect may come at any moment:
// while a publisher's edge is down, a link is cut or a broker is frozen
// (docs/durable.md "Resuming during failures").
type durFuzz struct {
	r     *rand.Rand
	w     *workload.Small
	next  map[string]time.Duration // when a gone session reconnects
	same  map[string]bool          // a gone session's draw: reconnect at the edge it left
	until time.Duration
}

// durPoll is how often the fuzzer looks for gone sessions.
const durPoll = 50 * time.Millisecond

func drawDurable(seed int64, cfg *Config) *durFuzz {
	r := rand.New(rand.NewPCG(uint64(seed), 0xd0ab1e))
	if r.IntN(2) == 0 {
		return nil
	}
	cfg.Core.Durable = true
	cfg.Core.RetainTicks = 6000 // a minute: the whole run
	if r.IntN(4) == 0 {
		cfg.Core.RetainTicks = 20 + r.IntN(60)
	}
	if r.IntN(4) != 0 {
		// Away subscriptions kept at their edge for a resume there, for
		// less or more than the subscriber stays away; sometimes with a
		// bound on what they hold that the traffic passes.
		cfg.Core.KeepAwayTicks = 50 + r.IntN(200)
		if r.IntN(4) == 0 {
			cfg.Core.MaxHeldBytes = int64(1000 + r.IntN(4000))
		}
	}
	// A quarter of the runs keep the logs in memory only (the brokers'
	// durability memory): every restart loses them. Drawn from a stream
	// of its own, so the other draws of a seed stay as they were.
	cfg.Core.MemoryLog = rand.New(rand.NewPCG(uint64(seed), 0x6d656d)).IntN(4) == 0
	return &durFuzz{r: r, w: workload.NewSmall(r), next: map[string]time.Duration{}, same: map[string]bool{}}
}

// liveBroker draws a broker that is up, joined and not leaving, other
// than not (tries a bounded number of times; "" if none was found).
func (z *durFuzz) liveBroker(s *Sim, tree Tree, not message.BrokerID) message.BrokerID {
	for range 4 * len(tree.Order) {
		b := tree.Order[z.r.IntN(len(tree.Order))]
		if b != not && z.usable(s, b) {
			return b
		}
	}
	return ""
}

// usable: b is up, joined and not leaving.
func (z *durFuzz) usable(s *Sim, b message.BrokerID) bool {
	return s.State(b) == "up" && s.Joined(b) && !s.Leaving(b)
}

// start adds the durable subscribers now and schedules their disconnects
// and the reconnects of gone sessions until until.
func (z *durFuzz) start(s *Sim, tree Tree, faults []fault, waveAt, until time.Duration, plan func(string, ...any)) error {
	z.until = until
	var crashed []message.BrokerID
	for _, f := range faults {
		if f.kind == "crash" {
			crashed = append(crashed, f.b)
		}
	}
	nd := 1 + z.r.IntN(3)
	for i := 1; i <= nd; i++ {
		name := fmt.Sprintf("D%d", i)
		e := message.BrokerID("")
		if len(crashed) > 0 && z.r.IntN(2) == 0 {
			e = crashed[z.r.IntN(len(crashed))]
			if s.State(e) != "up" {
				e = ""
			}
		}
		if e == "" {
			e = z.liveBroker(s, tree, "")
		}
		if e == "" {
			continue
		}
		f := z.w.Filter()
		plan("durable %s at %s [%s]", name, e, fmtFilter(f))
		if err := s.AddDurable(name, e, f); err != nil {
			return err
		}
		if z.r.IntN(2) == 0 {
			at := waveAt + time.Duration(z.r.IntN(600))*time.Millisecond
			away := time.Duration(100+z.r.IntN(1400)) * time.Millisecond
			plan("disconnect %s at %s, reconnect after %v", name, fmtTime(at), away)
			s.At(at, func() {
				if s.Disconnect(name) == nil {
					z.next[name] = s.Now() + away
				}
			})
		}
	}
	var poll func()
	poll = func() {
		z.reconnectDue(s, tree, false)
		if s.Now()+durPoll < z.until {
			s.At(s.Now()+durPoll, poll)
		}
	}
	s.At(s.Now()+durPoll, poll)
	return nil
}

// reconnectDue reconnects the durable subscribers whose session is gone
// and whose time has come (all: every one now).
func (z *durFuzz) reconnectDue(s *Sim, tree Tree, all bool) {
	for _, name := range s.Durables() {
		d := s.durables[name]
		if d.cur != nil && d.ended != "" {
			_ = s.Disconnect(name) // ended by its broker: go elsewhere
		}
		if d.cur != nil {
			continue
		}
		at, ok := z.next[name]
		if !ok {
			at = s.Now() + time.Duration(100+z.r.IntN(900))*time.Millisecond
			z.next[name] = at
		}
		if !all && s.Now() < at {
			continue
		}
		// At the same edge (a resume from what it holds) or elsewhere.
		last := s.log.Subs[d.sub].Edge
		same, drawn := z.same[name]
		if !drawn {
			same = z.r.IntN(2) == 0
			z.same[name] = same
		}
		b := message.BrokerID("")
		switch {
		case same && z.usable(s, last):
			b = last
		case same && !all:
			continue // wait for it to be back (at the next poll)
		default:
			b = z.liveBroker(s, tree, last)
		}
		if b != "" {
			delete(z.next, name)
			delete(z.same, name)
			s.tracef("fuzz: durable %s reconnects at %s", name, b)
			_ = s.Reconnect(name, b)
		}
	}
}

// reconnectAll reconnects every durable subscriber still away, now.
func (z *durFuzz) reconnectAll(s *Sim, tree Tree) {
	z.reconnectDue(s, tree, true)
}
