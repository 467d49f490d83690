package testbed

import "time"

// Durable subscribers in the testbed ([[subscribers]] durable = true;
// faults disconnect = ["S3"] and reconnect = { subscriber = "S3", broker =
// "B7" }; docs/testbed.md, docs/durable.md). A durable subscriber's
// sessions are planned here; the oracle's durable rule is durableOwed.

// sessionActions adds f's disconnects and reconnect.
func sessionActions(p *Plan, f *Fault, fs FaultSpec, key func(string) int, errs *errList) {
	for _, n := range fs.Disconnect {
		if p.durableSubscriber(n) == nil {
			errs.add(key("disconnect"), "disconnect %q: not a durable subscriber (have %s)", n, describeNames(p.durableNames()))
			continue
		}
		f.Actions = append(f.Actions, Action{Kind: ActDisconnect, Subscriber: n, Line: key("disconnect")})
	}
	if r := fs.Reconnect; r != nil {
		switch {
		case p.durableSubscriber(r.Subscriber) == nil:
			errs.add(key("reconnect"), "reconnect %q: not a durable subscriber (have %s)", r.Subscriber, describeNames(p.durableNames()))
		case !p.Topo.Has(r.Broker):
			errs.add(key("reconnect"), "reconnect %s: unknown broker %q (have %s)", r.Subscriber, r.Broker, describeNames(p.Topo.Names))
		default:
			f.Actions = append(f.Actions, Action{Kind: ActReconnect, Subscriber: r.Subscriber, Broker: r.Broker, Line: key("reconnect")})
		}
	}
}

func (p *Plan) durableSubscriber(name string) *Subscriber {
	for _, s := range p.Subscribers {
		if s.Name == name && s.Durable {
			return s
		}
	}
	return nil
}

func (p *Plan) durableNames() []string {
	var out []string
	for _, s := range p.Subscribers {
		if s.Durable {
			out = append(out, s.Name)
		}
	}
	return out
}

// session is what the plan says of a durable subscriber at a time.
type session struct {
	edge      string
	connected bool
	lostAt    time.Duration // when it was last disconnected (connected false)
}

// sessionSteps replays the faults in time order for the durable
// subscribers: each step's actions in order, with each subscriber's session
// after it. A crash or leave of its edge ends its session as a disconnect
// does.
func sessionSteps(p *Plan, at func(i int) time.Duration, visit func(f Fault, t time.Duration, a Action, sess map[string]*session) error) error {
	sess := map[string]*session{}
	for _, s := range p.Subscribers {
		if s.Durable {
			sess[s.Name] = &session{edge: s.Broker, connected: true}
		}
	}
	// p.Faults is in planned time order; the applied times keep it.
	for i, f := range p.Faults {
		t := at(i)
		for _, a := range f.Actions {
			switch a.Kind {
			case ActDisconnect:
				if s := sess[a.Subscriber]; s.connected {
					s.connected, s.lostAt = false, t
				}
			case ActReconnect:
				s := sess[a.Subscriber]
				s.connected, s.edge = true, a.Broker
			case ActCrash, ActLeave:
				for _, s := range sess {
					if s.connected && s.edge == a.Broker {
						s.connected, s.lostAt = false, t
					}
				}
			}
			if visit != nil {
				if err := visit(f, t, a, sess); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// awayInterval is a time a durable subscriber had no session: from its
// disconnect (or its edge's crash or leave) to its reconnect (to the end of
// the run if never).
type awayInterval struct {
	from, to time.Duration
	back     bool
}

// durableAway lists each durable subscriber's times without a session.
func durableAway(p *Plan, at func(i int) time.Duration) map[string][]awayInterval {
	out := map[string][]awayInterval{}
	open := map[string]time.Duration{}
	_ = sessionSteps(p, at, func(_ Fault, t time.Duration, a Action, sess map[string]*session) error {
		for n, s := range sess {
			_, away := open[n]
			switch {
			case !s.connected && !away:
				open[n] = s.lostAt
			case s.connected && away:
				out[n] = append(out[n], awayInterval{from: open[n], to: t, back: true})
				delete(open, n)
			}
		}
		return nil
	})
	for n, from := range open {
		out[n] = append(out[n], awayInterval{from: from})
	}
	return out
}

// checkSessions refuses a disconnect of a subscriber not connected, and a
// reconnect of one still connected or at a broker down then.
func checkSessions(p *Plan, errs *errList) {
	state := map[string]brokerState{}
	conn := map[string]bool{}
	for _, s := range p.Subscribers {
		if s.Durable {
			conn[s.Name] = true
		}
	}
	edge := map[string]string{}
	for _, s := range p.Subscribers {
		edge[s.Name] = s.Broker
	}
	for _, f := range p.Faults {
		for _, a := range f.Actions {
			switch a.Kind {
			case ActCrash, ActLeave:
				state[a.Broker] = stCrashed
				for n, e := range edge {
					if e == a.Broker {
						conn[n] = false
					}
				}
			case ActRestart:
				delete(state, a.Broker)
			case ActDisconnect:
				if !conn[a.Subscriber] {
					errs.add(a.Line, "disconnect %s at %v: it is not connected", a.Subscriber, f.At)
				}
				conn[a.Subscriber] = false
			case ActReconnect:
				switch {
				case conn[a.Subscriber]:
					errs.add(a.Line, "reconnect %s at %v: it is still connected at %s (disconnect it first, or crash its edge)", a.Subscriber, f.At, edge[a.Subscriber])
				case state[a.Broker] != stUp:
					errs.add(a.Line, "reconnect %s at %v: broker %s is down then", a.Subscriber, f.At, a.Broker)
				}
				conn[a.Subscriber], edge[a.Subscriber] = true, a.Broker
			}
		}
	}
}
