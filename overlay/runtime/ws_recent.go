package runtime

import (
	"time"

	"github.com/deltapub/deltapub/internal/webproto"
	"github.com/deltapub/deltapub/message"
)

// maxLostKeys bounds what a session's history remembers of the deliveries
// it evicted (one entry per subscription and publisher stream); beyond it,
// a resume cannot say what is missing and reports recovered: false with no
// ranges.
const maxLostKeys = 1024

type subSource struct {
	sub message.SubID
	src message.Source
}

// recentRing is one web session's recent deliveries, kept for a resume
// after a lost connection: at most cap entries, none older than age (the
// oldest go first). The entries share the publication's attributes and
// payload with every other session's (the core's Deliver messages).
type recentRing struct {
	items    []recentItem // a ring: head is the oldest
	head, n  int
	lost     map[subSource]uint64 // the highest evicted seq per key
	overflow bool                 // lost outgrew maxLostKeys
}

type recentItem struct {
	d  *message.Deliver
	at time.Time
}

func (r *recentRing) add(d *message.Deliver, now time.Time, capacity int, age time.Duration) {
	r.prune(now, age)
	if r.items == nil {
		r.items = make([]recentItem, capacity)
	}
	if r.n == len(r.items) {
		r.evict()
	}
	r.items[(r.head+r.n)%len(r.items)] = recentItem{d, now}
	r.n++
}

func (r *recentRing) prune(now time.Time, age time.Duration) {
	for r.n > 0 && now.Sub(r.items[r.head].at) > age {
		r.evict()
	}
}

func (r *recentRing) evict() {
	d := r.items[r.head].d
	k := subSource{d.Sub, d.Pub.Source()}
	switch {
	case r.lost[k] >= d.Pub.Seq:
	case r.lost == nil:
		r.lost = map[subSource]uint64{k: d.Pub.Seq}
	case len(r.lost) < maxLostKeys || r.lost[k] > 0:
		r.lost[k] = d.Pub.Seq
	default:
		r.overflow = true
	}
	r.items[r.head] = recentItem{}
	r.head = (r.head + 1) % len(r.items)
	r.n--
}

// since returns the deliveries after the client's positions, in order, and
// what it cannot give: the ranges evicted past a position. Without a
// position for a key the client is taken to have none of it.
func (r *recentRing) since(pos []webproto.Position, now time.Time, age time.Duration) ([]*message.Deliver, []webproto.Gap, bool) {
	r.prune(now, age)
	last := make(map[subSource]uint64, len(pos))
	for _, p := range pos {
		last[subSource{p.Sub, message.Source{Publisher: p.Publisher, Epoch: p.Epoch}}] = p.Seq
	}
	var gaps []webproto.Gap
	for k, seq := range r.lost {
		if last[k] < seq {
			gaps = append(gaps, webproto.Gap{Sub: k.sub, Source: k.src, From: last[k] + 1, To: seq})
		}
	}
	var out []*message.Deliver
	for i := range r.n {
		d := r.items[(r.head+i)%len(r.items)].d
		if d.Pub.Seq > last[subSource{d.Sub, d.Pub.Source()}] {
			out = append(out, d)
		}
	}
	return out, gaps, len(gaps) == 0 && !r.overflow
}
