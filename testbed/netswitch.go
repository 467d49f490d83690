// The switch of netns mode: it reads IPv4 packets from every host's TUN,
// and writes each to the TUN of its destination once the link between the
// two hosts lets it through: after the link's delay and jitter, at most at
// its rate, unless lost or partitioned.

package testbed

import (
	"math/rand"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the switch: a packet's size, and the packets one link holds in
// flight (beyond: dropped at the tail, as a full router queue does).
const (
	maxPacket     = 65535
	linkQueue     = 10000
	switchSeedMix = 0x5eed
)

// String is the shape in tc's words ("delay 5ms jitter 1ms loss 0.1% rate
// 100mbit"), "none" when it does nothing.
func (s LinkShape) String() string {
	var out []string
	if s.Delay.Duration > 0 {
		out = append(out, "delay "+s.Delay.Duration.String())
	}
	if s.Jitter.Duration > 0 {
		out = append(out, "jitter "+s.Jitter.Duration.String())
	}
	if s.Loss > 0 {
		out = append(out, "loss "+strconv.FormatFloat(s.Loss, 'f', -1, 64)+"%")
	}
	if s.Rate != "" {
		out = append(out, "rate "+s.Rate)
	}
	if len(out) == 0 {
		return "none"
	}
	r := out[0]
	for _, x := range out[1:] {
		r += " " + x
	}
	return r
}

// SwitchCounters is what the switch did with the packets it read.
type SwitchCounters struct {
	Forwarded, Lost, Partitioned, QueueFull, Unroutable int64
}

type netSwitch struct {
	ports                               []*swPort
	byIP                                map[[4]byte]*swPort
	rwg                                 sync.WaitGroup // the readers
	swg                                 sync.WaitGroup // the senders
	done                                chan struct{}  // closed by close
	closed                              atomic.Bool
	fwd, lost, parted, full, unroutable atomic.Int64
}

type swPort struct {
	host  string // "" for the testbed's own port
	ip    [4]byte
	f     *os.File
	links map[[4]byte]*swLink // by destination address
}

// swLink is one direction of the link between two ports.
type swLink struct {
	shape LinkShape
	bps   float64 // 0: no rate limit
	dst   *swPort
	q     chan swPacket
	cut   atomic.Bool
	// Read and written by the source port's reader only.
	rng       *rand.Rand
	busyUntil time.Time // the end of the last packet's transmission (rate)
	lastDue   time.Time // packets leave in order: none before the previous
}

type swPacket struct {
	b   []byte
	due time.Time
}

func newNetSwitch() *netSwitch {
	return &netSwitch{byIP: map[[4]byte]*swPort{}, done: make(chan struct{})}
}

func (s *netSwitch) addPort(host string, ip [4]byte, f *os.File) *swPort {
	p := &swPort{host: host, ip: ip, f: f, links: map[[4]byte]*swLink{}}
	s.ports = append(s.ports, p)
	s.byIP[ip] = p
	return p
}

// link shapes the direction a → b.
func (s *netSwitch) link(a, b *swPort, shape LinkShape) error {
	l := &swLink{shape: shape, dst: b, q: make(chan swPacket, linkQueue),
		rng: rand.New(rand.NewSource(int64(a.ip[3])<<8 | int64(b.ip[3]) ^ switchSeedMix))}
	if shape.Rate != "" {
		bps, err := parseRate(shape.Rate)
		if err != nil {
			return err
		}
		l.bps = bps
	}
	a.links[b.ip] = l
	return nil
}

// schedule decides a packet of size bytes arriving at now: when it leaves
// the link, or that it is dropped.
func (l *swLink) schedule(now time.Time, size int) (due time.Time, drop bool) {
	if l.shape.Loss > 0 && l.rng.Float64()*100 < l.shape.Loss {
		return time.Time{}, true
	}
	start := now
	if l.bps > 0 {
		if l.busyUntil.After(start) {
			start = l.busyUntil
		}
		l.busyUntil = start.Add(time.Duration(float64(size*8) / l.bps * float64(time.Second)))
		start = l.busyUntil
	}
	d := l.shape.Delay.Duration
	if j := l.shape.Jitter.Duration; j > 0 {
		d += time.Duration(l.rng.Int63n(int64(2*j)+1)) - j
	}
	due = start.Add(d)
	if due.Before(l.lastDue) {
		due = l.lastDue
	}
	l.lastDue = due
	return due, false
}

func (s *netSwitch) start() {
	for _, p := range s.ports {
		for _, l := range p.links {
			s.swg.Add(1)
			go s.send(l)
		}
	}
	for _, p := range s.ports {
		s.rwg.Add(1)
		go s.read(p)
	}
}

// read forwards what p's host sends until p's file is closed.
func (s *netSwitch) read(p *swPort) {
	defer s.rwg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, err := p.f.Read(buf)
		if err != nil {
			return
		}
		if n < 20 || buf[0]>>4 != 4 {
			continue // not IPv4 (the kernel's IPv6 router solicitations)
		}
		var dst [4]byte
		copy(dst[:], buf[16:20])
		l := p.links[dst]
		if l == nil {
			s.unroutable.Add(1)
			continue
		}
		if l.cut.Load() {
			s.parted.Add(1)
			continue
		}
		due, drop := l.schedule(time.Now(), n)
		if drop {
			s.lost.Add(1)
			continue
		}
		b := make([]byte, n)
		copy(b, buf[:n])
		select {
		case l.q <- swPacket{b: b, due: due}:
		default:
			s.full.Add(1)
		}
	}
}

// send writes l's packets to its destination when they are due.
func (s *netSwitch) send(l *swLink) {
	defer s.swg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for pk := range l.q {
		if d := time.Until(pk.due); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-s.done:
			}
		}
		if s.closed.Load() {
			continue
		}
		if _, err := l.dst.f.Write(pk.b); err == nil {
			s.fwd.Add(1)
		}
	}
}

// partition cuts (or with cut false restores) every link between a host
// in the set and one outside it.
func (s *netSwitch) partition(in map[string]bool, cut bool) {
	for _, a := range s.ports {
		for _, l := range a.links {
			b := l.dst
			if a.host == "" || b.host == "" || in[a.host] == in[b.host] {
				continue
			}
			l.cut.Store(cut)
		}
	}
}

func (s *netSwitch) counters() SwitchCounters {
	return SwitchCounters{Forwarded: s.fwd.Load(), Lost: s.lost.Load(), Partitioned: s.parted.Load(), QueueFull: s.full.Load(), Unroutable: s.unroutable.Load()}
}

// close stops the readers (closing the TUN files removes the interfaces),
// then the senders, dropping what is still in flight.
func (s *netSwitch) close() {
	if s.closed.Swap(true) {
		return
	}
	close(s.done)
	for _, p := range s.ports {
		p.f.Close()
	}
	s.rwg.Wait() // a read of a closed file fails at once
	for _, p := range s.ports {
		for _, l := range p.links {
			close(l.q)
		}
	}
	s.swg.Wait()
}
