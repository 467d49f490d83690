package testbed

import (
	"fmt"
	"time"

	"github.com/deltapub/deltapub/matching"
)

// PubEvent is one scheduled publication of a publisher.
type PubEvent struct {
	At    time.Duration // since the start of the run
	Seq   uint64        // 1, 2, 3, … per publisher
	Attrs []matching.Attr
}

// PubStream draws a publisher's publications in order. It is deterministic
// in the experiment seed and the publisher's name.
type PubStream struct {
	p     *Publisher
	gens  []*gen
	seq   uint64
	limit uint64
}

// Stream returns a fresh stream of p's publications.
func (p *Publisher) Stream() *PubStream {
	rng := streamRNG(p.seed, "attrs:"+p.Name)
	st := &PubStream{p: p}
	for _, a := range p.attrs {
		st.gens = append(st.gens, a.spec.instance(rng))
	}
	n := float64(p.Stop-p.Start) / float64(time.Second) * p.Rate
	if n > 0 {
		st.limit = uint64(n)
		// Include the last slot when it falls strictly before Stop.
		if p.at(st.limit+1) < p.Stop {
			st.limit++
		}
	}
	return st
}

// Count is the number of publications the publisher makes.
func (p *Publisher) Count() uint64 { return p.Stream().limit }

// at is the scheduled time of publication seq (1-based).
func (p *Publisher) at(seq uint64) time.Duration {
	return p.Start + time.Duration(float64(seq-1)/p.Rate*float64(time.Second))
}

// Next returns the next publication, or false when the publisher is done.
func (s *PubStream) Next() (PubEvent, bool) {
	if s.seq >= s.limit {
		return PubEvent{}, false
	}
	s.seq++
	ev := PubEvent{At: s.p.at(s.seq), Seq: s.seq, Attrs: make([]matching.Attr, len(s.gens))}
	for i, g := range s.gens {
		ev.Attrs[i] = matching.Attr{Name: s.p.attrs[i].name, Value: g.next()}
	}
	return ev, true
}

// Payload returns the publisher's payload: Payload bytes of a fixed
// pattern (content does not matter to filters).
func (p *Publisher) PayloadBytes() []byte {
	if p.Payload == 0 {
		return nil
	}
	b := make([]byte, p.Payload)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// Describe is a one-paragraph human summary of a plan, for `testbed check`.
func (p *Plan) Describe() string {
	s := p.Spec
	subs := 0
	for _, sb := range p.Subscribers {
		subs += len(sb.Filters)
	}
	var pubs uint64
	for _, pb := range p.Publishers {
		pubs += pb.Count()
	}
	out := fmt.Sprintf("%s: %d brokers (%s), %s, %d publishers (%d publications), %d subscribers (%d subscriptions), %d faults, duration %v + drain %v, seed %d",
		s.Name, len(p.Topo.Names), s.Topology.Kind, faultModel(s.Overlay.Delta, p.replicasK()), len(p.Publishers), pubs, len(p.Subscribers), subs, len(p.Faults), s.Duration.Duration, s.Drain.Duration, s.Seed)
	for _, f := range p.Faults {
		out += fmt.Sprintf("\n  at %v: %s", f.At, f)
	}
	return out + p.describeHosts()
}
