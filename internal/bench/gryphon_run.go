package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/benchcompare"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

const (
	// gryphonRetain is the PHB's max_retain: far beyond any absence, so
	// that a Gap can only be a fault (the paper disabled early release).
	gryphonRetain = "1h"
	// gryphonMaxQueue is every broker's limits.max_queue.
	gryphonMaxQueue = 1_000_000
	// gryphonDrain bounds the wait for the last deliveries once
	// publishing has ended; what has not arrived by then counts as lost.
	gryphonDrain = 2 * time.Minute
	// gryphonTimedCount bounds the publications of a run bounded by time.
	gryphonTimedCount = 100_000_000
)

// gryphonLimits: deep send queues, as in Overlay (they bound broker links
// too): the subscribers share this process (and two cores) with the
// publishers, and a resumed one receives its catch-up in one burst; the
// SHB would disconnect it as a slow consumer at the default 8,192 frames.
// And room at the PHB for what the SHB has not acknowledged while down.
var gryphonLimits = fmt.Sprintf("[limits]\nsend_queue = 262144\nsend_queue_bytes = 134217728\nmax_queue = %d\n", gryphonMaxQueue)

// gryphonPublication matches every subscriber's filter.
var gryphonPublication = matching.Publication{Attrs: []matching.Attr{{Name: "class", Value: matching.Str("GRYPHON")}},
	Payload: make([]byte, gryphonPayload)}

var gryphonFilter, _ = matching.ParseFilter("[class,eq,'GRYPHON']")

type gryphon struct {
	o   GryphonOptions
	dir string // data directories, and logs unless o.LogDir
}

// gryphonRig is one run: a chain of broker processes B1–…–Bn, B1 the
// publishers' edge (PHB) and Bn the subscribers' (SHB), each with a data
// directory of its own, and the clients.
type gryphonRig struct {
	binary, logDir string
	brokers        []*benchBroker
	subs           []*durableSub
	pubs           []*gryphonPublisher
}

// setup starts run name's chain of n brokers with durability, then
// subscribers durable subscriptions at its last broker (each confirmed)
// and publishers at its first.
func (g *gryphon) setup(ctx context.Context, name string, n int, durability string, subscribers, publishers int) (*gryphonRig, error) {
	logDir := filepath.Join(g.dir, name)
	if g.o.LogDir != "" {
		logDir = filepath.Join(g.o.LogDir, name)
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	r := &gryphonRig{binary: g.o.Binary, logDir: logDir}
	for i := 1; i <= n; i++ {
		b, err := newBenchBroker(fmt.Sprintf("B%d", i))
		if err != nil {
			r.close()
			return nil, err
		}
		args := []string{"--preset", "default", "--config", filepath.Join(g.dir, "limits.toml"), "--delta", "2",
			"--data-dir", filepath.Join(g.dir, name, b.id), "--durability", durability, "--log-level", "warn", "--log-format", "json"}
		if durability != "none" {
			args = append(args, "--max-retain", gryphonRetain)
		}
		if i > 1 {
			args = append(args, "--join", r.brokers[i-2].addr)
		}
		if err := b.start(r.binary, r.logPath(b), args...); err != nil {
			r.close()
			return nil, err
		}
		r.brokers = append(r.brokers, b)
	}
	shb := r.brokers[n-1].addr
	for i := 1; i <= subscribers; i++ {
		r.subs = append(r.subs, &durableSub{name: fmt.Sprintf("D%d", i), addr: shb})
	}
	err := forEach(r.subs, func(s *durableSub) error { return s.connect(ctx, nil) })
	for i := 1; i <= publishers && err == nil; i++ {
		var c *client.Client
		if c, err = client.Connect(ctx, r.brokers[0].addr, client.Options{Publisher: fmt.Sprintf("P%d", i), MaxInFlight: 4096}); err == nil {
			acks := make(chan (<-chan error), 1<<14)
			r.pubs = append(r.pubs, &gryphonPublisher{c: c, src: message.Source{Publisher: c.Publisher(), Epoch: c.Epoch()},
				acks: acks, ackErr: waitAcks(acks)})
		}
	}
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *gryphonRig) logPath(b *benchBroker) string { return filepath.Join(r.logDir, b.id+".log") }

// close ends the clients and stops the brokers.
func (r *gryphonRig) close() {
	for _, s := range r.subs {
		_ = s.disconnect()
	}
	for _, p := range r.pubs {
		p.c.Close()
		_ = p.finish()
	}
	stopBrokers(r.brokers, 3*time.Second)
}

// issued is, per publisher, the last seq it has published.
func (r *gryphonRig) issued() map[message.Source]uint64 {
	m := map[message.Source]uint64{}
	for _, p := range r.pubs {
		m[p.src] = uint64(p.issued.Load())
	}
	return m
}

func (r *gryphonRig) totalIssued() int64 {
	var n int64
	for _, p := range r.pubs {
		n += p.issued.Load()
	}
	return n
}

func (r *gryphonRig) delivered() int64 {
	var n int64
	for _, s := range r.subs {
		n += s.delivered.Load()
	}
	return n
}

// pace waits while a subscriber is more than benchcompare.Window
// publications behind the publishers, until the deadline: the SHB
// disconnects a subscriber whose queue is full, and nothing slows the
// publishers down for it. An absent subscriber, and a resumed one until
// it is live and within the window again, do not hold the publishers
// back: in the paper too, catch-up lasts until the consolidated stream's
// position is reached.
func (r *gryphonRig) pace(until time.Time) {
	for time.Now().Before(until) {
		issued, worst := r.totalIssued(), int64(0)
		for _, s := range r.subs {
			behind := issued - s.position.Load()
			if !s.paced.Load() {
				if !s.live.Load() || behind > benchcompare.Window {
					continue
				}
				s.paced.Store(true)
				if !s.live.Load() { // its session ended meanwhile (read)
					s.paced.Store(false)
					continue
				}
			}
			worst = max(worst, behind)
		}
		if worst <= benchcompare.Window {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// finishPublishing waits for every publication's acknowledgement, then
// (at most gryphonDrain) for every subscriber to have received them all.
func (r *gryphonRig) finishPublishing() error {
	var errs []error
	for _, p := range r.pubs {
		if err := p.finish(); err != nil {
			errs = append(errs, fmt.Errorf("publisher %s: publication not acknowledged: %w", p.src.Publisher, err))
		}
	}
	total := r.totalIssued()
	waitFor(gryphonDrain, func() bool {
		for _, s := range r.subs {
			if s.position.Load() < total {
				return false
			}
		}
		return true
	})
	return errors.Join(errs...)
}

// check compares what each subscriber consumed with what was published.
func (r *gryphonRig) check() GryphonCheck {
	var c GryphonCheck
	var notes []string
	issued := r.issued()
	for _, s := range r.subs {
		s.mu.Lock()
		lost, dup, ended, firstLoss := s.lost, s.dup, s.ended, s.firstLoss
		for src, last := range issued {
			if got := max(s.next[src], 1) - 1; got < last {
				lost += int64(last - got)
			}
		}
		s.mu.Unlock()
		if firstLoss == "" {
			firstLoss = fmt.Sprintf("the last not delivered within %v after publishing ended", gryphonDrain)
		}
		c.Lost, c.Duplicates = c.Lost+lost, c.Duplicates+dup
		if lost > 0 || dup > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d lost, %d duplicated; %s", s.name, lost, dup, firstLoss))
		}
		if ended != nil {
			c.Failed++
			notes = append(notes, fmt.Sprintf("%s: session ended: %v", s.name, ended))
		}
	}
	if len(notes) > 5 {
		notes = append(notes[:5], fmt.Sprintf("and %d more", len(notes)-5))
	}
	c.Detail = strings.Join(notes, "; ")
	return c
}

// catchups are the catch-ups of the resumptions that became live so
// far, in no order, and how many resumptions there were.
func (r *gryphonRig) catchups() (cs []catchup, resumed int) {
	for _, s := range r.subs {
		s.mu.Lock()
		cs = append(cs, s.catchups...)
		resumed += s.sessions - 1
		s.mu.Unlock()
	}
	return cs, resumed
}

// gryphonPublisher is one publisher and how many publications it has
// issued: its last seq (seqs are consecutive from 1).
type gryphonPublisher struct {
	c      *client.Client
	src    message.Source
	issued atomic.Int64
	acks   chan (<-chan error) // nil once finished
	ackErr <-chan error
}

// finish waits for every acknowledgement of p's publications.
func (p *gryphonPublisher) finish() error {
	if p.acks == nil {
		return nil
	}
	close(p.acks)
	p.acks = nil
	return <-p.ackErr
}

// publish runs every publisher until it has issued count publications,
// until passes or stop is closed, at rate publications/s in all (0: as
// fast as acknowledgements and pace allow); pace (nil: none) is waited on
// before each publication.
func (r *gryphonRig) publish(ctx context.Context, count int, rate float64, until time.Time, stop <-chan struct{}, pace func(time.Time)) error {
	var wg sync.WaitGroup
	errs := make([]error, len(r.pubs))
	for i, p := range r.pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			for k := 0; k < count && time.Now().Before(until); k++ {
				select {
				case <-stop:
					return
				default:
				}
				if rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(float64(k) * float64(len(r.pubs)) / rate * float64(time.Second)))))
				}
				if pace != nil {
					pace(until)
				}
				ch, err := p.c.PublishAsync(ctx, gryphonPublication)
				if err != nil {
					errs[i] = fmt.Errorf("publisher %s: %w", p.src.Publisher, err)
					return
				}
				p.acks <- ch
				p.issued.Add(1)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// durableSub is one durable subscriber: a client session at its broker
// that it closes and opens again at will, resuming from the token of the
// last delivery it consumed, and the check of what it received.
type durableSub struct {
	name, addr string
	session    *client.Client // nil: away
	reader     chan struct{}  // closed once the session's deliveries are all read

	mu        sync.Mutex
	token     []byte                    // after the last delivery consumed
	next      map[message.Source]uint64 // per publisher, the seq expected next
	lost, dup int64
	firstLoss string // where the first loss was seen
	sessions  int    // sessions opened so far
	ended     error  // why the session ended, if not closed here
	// A resumed subscription is catching up until it receives a
	// publication published after the reconnect: a seq beyond liveAfter.
	liveAfter map[message.Source]uint64
	resumedAt time.Time
	caughtUp  int          // deliveries of this session before it was live
	catchups  []catchup    // one per resumption that became live
	latencies []float64    // publish → delivery, ms, if recorded (not nil)
	delivered atomic.Int64 // publications received (not duplicates)
	position  atomic.Int64 // Σ per publisher of the last seq consumed
	live      atomic.Bool  // connected and past its catch-up
	paced     atomic.Bool  // live and held within the end-to-end window (pace)
	closing   atomic.Bool  // disconnect has begun: what the session still yields is not consumed
}

type catchup struct {
	took time.Duration
	pubs int
}

// connect opens a session and subscribes: a new subscription when s has
// no token yet (waited for until confirmed: only then is every
// publication owed to it), else resumed from its token. liveAfter is each
// publisher's last seq at the reconnect (nil for a new subscription).
func (s *durableSub) connect(ctx context.Context, liveAfter map[message.Source]uint64) error {
	s.mu.Lock()
	if s.next == nil {
		s.next = map[message.Source]uint64{}
	}
	s.liveAfter, s.resumedAt, s.caughtUp = liveAfter, time.Now(), 0
	s.sessions++
	token := s.token
	s.mu.Unlock()
	// A failure timeout, as 'deltapub sub --durable' has: closing a
	// session whose broker was killed does not wait for QUIC's 30 s.
	c, err := client.Connect(ctx, s.addr, client.Options{FailureTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	sub, err := c.SubscribeDurable(ctx, s.name, gryphonFilter, token)
	if err == nil && token == nil {
		err = sub.WaitConfirmed(ctx)
	}
	if err != nil {
		c.Close()
		return fmt.Errorf("%s: %w", s.name, err)
	}
	s.session, s.reader = c, make(chan struct{})
	s.closing.Store(false)
	s.live.Store(liveAfter == nil)
	s.paced.Store(liveAfter == nil)
	go s.read(sub)
	return nil
}

// read consumes the session's deliveries and acknowledges each token (the
// client sends the latest every 100 ms), until the session ends.
func (s *durableSub) read(sub *client.Subscription) {
	defer close(s.reader)
	for d := range sub.C {
		// Once Close has begun, what the session still yields is not
		// consumed: the subscriber resumes from the last delivery it read
		// before, as an application that closes its client would.
		if s.closing.Load() {
			continue
		}
		s.consume(d)
		_ = sub.Ack(d.Token)
	}
	s.live.Store(false)
	s.paced.Store(false)
	if err := sub.Err(); err != nil && !errors.Is(err, client.ErrClosed) {
		s.mu.Lock()
		s.ended = err
		s.mu.Unlock()
	}
}

// disconnect closes the session (if any) once its deliveries are read,
// and returns why it had ended before, if it had.
func (s *durableSub) disconnect() error {
	if s.session == nil {
		return nil
	}
	s.closing.Store(true)
	s.session.Close()
	<-s.reader
	s.session = nil
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.ended
	s.ended = nil
	return err
}

// consume checks d against what s consumed before: per publisher the seq
// expected next; below it a duplicate, beyond it a loss.
func (s *durableSub) consume(d client.Delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = d.Token
	if d.Gap != nil { // the PHB released what the token had not consumed
		if want := max(s.next[d.Gap.Source], 1); d.Gap.To >= want {
			s.noteLoss(fmt.Sprintf("a Gap %s %d–%d (%s)", d.Gap.Source.Publisher, d.Gap.From, d.Gap.To, d.Gap.Reason), want, d.Gap.To+1)
			s.lost += int64(d.Gap.To - want + 1)
			s.position.Add(int64(d.Gap.To - want + 1))
			s.next[d.Gap.Source] = d.Gap.To + 1
		}
		return
	}
	src, seq := d.Pub.Source(), d.Pub.Seq
	want := max(s.next[src], 1)
	if seq < want {
		s.dup++
		return
	}
	if seq > want {
		s.noteLoss(fmt.Sprintf("seq %d of %s", seq, src.Publisher), want, seq)
		s.lost += int64(seq - want)
	}
	s.next[src] = seq + 1
	s.position.Add(int64(seq - want + 1))
	s.delivered.Add(1)
	if s.latencies != nil {
		s.latencies = append(s.latencies, float64(d.ReceivedAt.Sub(d.PublishedAt).Microseconds())/1000)
	}
	switch {
	case s.liveAfter == nil:
	case seq > s.liveAfter[src]:
		s.catchups = append(s.catchups, catchup{took: time.Since(s.resumedAt), pubs: s.caughtUp})
		s.liveAfter = nil
		s.live.Store(true)
	default:
		s.caughtUp++
	}
}

// noteLoss records the first loss (s.mu held): seqs [from, to) missing
// before what arrived.
func (s *durableSub) noteLoss(arrived string, from, to uint64) {
	if s.firstLoss == "" {
		s.firstLoss = fmt.Sprintf("first loss: seqs %d–%d missing before %s in its session %d", from, to-1, arrived, s.sessions)
		if s.liveAfter != nil {
			s.firstLoss += fmt.Sprintf(", resumed %v earlier, catching up", time.Since(s.resumedAt).Round(time.Millisecond))
		}
	}
}

// away disconnects s once per period from first on while before until,
// each time for awayFor, and resumes it at its broker with its token.
func (s *durableSub) away(ctx context.Context, r *gryphonRig, first, until time.Time, period, awayFor time.Duration) error {
	for at := first; at.Before(until); at = at.Add(period) {
		if !sleepCtx(ctx, time.Until(at)) {
			return ctx.Err()
		}
		if err := s.disconnect(); err != nil {
			return fmt.Errorf("%s: session ended before its disconnection: %w", s.name, err)
		}
		if !sleepCtx(ctx, awayFor) {
			return ctx.Err()
		}
		if err := s.connect(ctx, r.issued()); err != nil {
			return err
		}
	}
	return nil
}

// rateRun is figure 1's run: publishers at B1 as fast as acknowledgements
// (and pace) allow for o.Duration, the subscribers at B2; with away, each
// leaves once every o.AwayEvery for o.AwayFor, their first departures
// spread evenly over the period.
func (g *gryphon) rateRun(ctx context.Context, away bool) (GryphonRateRun, error) {
	var run GryphonRateRun
	name := "rate"
	if away {
		name = "rate-away"
	}
	r, err := g.setup(ctx, name, 2, "fsync", g.o.Subscribers, g.o.Publishers)
	if err != nil {
		return run, err
	}
	defer r.close()
	start := time.Now()
	until := start.Add(g.o.Duration)
	var wg sync.WaitGroup
	awayErrs := make([]error, len(r.subs))
	for i, s := range r.subs {
		if away {
			first := start.Add(g.o.AwayEvery * time.Duration(2*i+1) / time.Duration(2*len(r.subs)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				awayErrs[i] = s.away(ctx, r, first, until, g.o.AwayEvery, g.o.AwayFor)
			}()
		}
	}
	err = r.publish(ctx, gryphonTimedCount, 0, until, nil, r.pace)
	elapsed := time.Since(start).Seconds()
	run.DeliveriesPerS = float64(r.delivered()) / elapsed
	run.Published = r.totalIssued()
	run.PublishedPerS = float64(run.Published) / elapsed
	wg.Wait()
	if err := errors.Join(err, errors.Join(awayErrs...), r.finishPublishing()); err != nil {
		return run, err
	}
	run.GryphonCheck = r.check()
	cs, resumed := r.catchups()
	run.Reconnects, run.CaughtUp = resumed, len(cs)
	run.CatchupP50Ms, run.CatchupMaxMs = catchupMs(cs, 0.5), catchupMs(cs, 1)
	return run, nil
}

// outageRun is figure 2's run: one publisher at o.OutageRate; the SHB is
// killed, restarted with its data directory after o.Outage, and every
// subscriber resumes there with its token.
func (g *gryphon) outageRun(ctx context.Context) (GryphonOutage, error) {
	out := GryphonOutage{Subscribers: g.o.Subscribers, Rate: g.o.OutageRate, OutageS: g.o.Outage.Seconds(), ResumedAt: "the restarted SHB"}
	r, err := g.setup(ctx, "outage", 2, "fsync", g.o.Subscribers, 1)
	if err != nil {
		return out, err
	}
	defer r.close()
	// Live traffic before the kill and after the catch-up.
	steady := min(max(g.o.Outage/8, time.Second), 5*time.Second)
	stop := make(chan struct{})
	published := make(chan error, 1)
	go func() {
		published <- r.publish(ctx, gryphonTimedCount, float64(g.o.OutageRate), time.Now().Add(g.o.Outage+15*time.Minute), stop, nil)
	}()
	stopPublishing := func() error { close(stop); return <-published }
	sleepCtx(ctx, steady)
	shb := r.brokers[len(r.brokers)-1]
	shb.kill()
	killed := time.Now()
	// The sessions died with the SHB (an error from there is expected).
	_ = forEach(r.subs, func(s *durableSub) error { _ = s.disconnect(); return nil })
	sleepCtx(ctx, time.Until(killed.Add(g.o.Outage)))
	restart := time.Now()
	out.OutageS = restart.Sub(killed).Seconds()
	if err := shb.start(r.binary, r.logPath(shb), shb.args...); err != nil {
		return out, errors.Join(fmt.Errorf("SHB restart: %w", err), stopPublishing())
	}
	out.RejoinS = time.Since(restart).Seconds()
	liveAfter := r.issued()
	if err := forEach(r.subs, func(s *durableSub) error { return s.connect(ctx, liveAfter) }); err != nil {
		return out, errors.Join(fmt.Errorf("resuming at the restarted SHB: %w", err), stopPublishing())
	}
	waitFor(g.o.Outage+5*time.Minute, func() bool { cs, _ := r.catchups(); return len(cs) == len(r.subs) })
	sleepCtx(ctx, steady)
	if err := errors.Join(stopPublishing(), r.finishPublishing()); err != nil {
		return out, err
	}
	out.Published = r.totalIssued()
	out.GryphonCheck = r.check()
	cs, _ := r.catchups()
	out.CaughtUp = len(cs)
	out.CatchupP50Ms, out.CatchupMaxMs = catchupMs(cs, 0.5), catchupMs(cs, 1)
	var pubs []float64
	for _, c := range cs {
		pubs = append(pubs, float64(c.pubs))
		out.CaughtUpPubs += int64(c.pubs)
	}
	out.CaughtUpPubsP50 = quantile(pubs, 0.5)
	if out.CatchupMaxMs > 0 {
		out.CatchupDeliveriesPerS = float64(out.CaughtUpPubs) / (out.CatchupMaxMs / 1000)
	}
	return out, nil
}

// latencyRun is figure 3's run for one durability of every broker of the
// chain: one publisher at B1, one durable subscriber at the far end.
func (g *gryphon) latencyRun(ctx context.Context, durability string) (GryphonLatency, error) {
	l := GryphonLatency{Durability: durability, Hops: g.o.Hops, Count: g.o.LatencyCount, Rate: g.o.LatencyRate}
	r, err := g.setup(ctx, "latency-"+durability, g.o.Hops+1, durability, 1, 1)
	if err != nil {
		return l, err
	}
	defer r.close()
	sub := r.subs[0]
	sub.mu.Lock()
	sub.latencies = make([]float64, 0, g.o.LatencyCount)
	sub.mu.Unlock()
	until := time.Now().Add(time.Duration(g.o.LatencyCount/g.o.LatencyRate+60) * time.Second)
	if err := errors.Join(r.publish(ctx, g.o.LatencyCount, float64(g.o.LatencyRate), until, nil, nil), r.finishPublishing()); err != nil {
		return l, err
	}
	l.GryphonCheck = r.check()
	sub.mu.Lock()
	l.P50Ms, l.P99Ms = quantile(sub.latencies, 0.5), quantile(sub.latencies, 0.99)
	sub.mu.Unlock()
	return l, nil
}

// catchupMs is the q-quantile of the catch-up times, in ms.
func catchupMs(cs []catchup, q float64) float64 {
	ms := make([]float64, len(cs))
	for i, c := range cs {
		ms[i] = float64(c.took.Microseconds()) / 1000
	}
	return quantile(ms, q)
}

// forEach runs f on every subscriber at once and returns the errors.
func forEach(subs []*durableSub, f func(*durableSub) error) error {
	errs := make([]error, len(subs))
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(s) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitFor polls cond every 20 ms until it holds or limit passes.
func waitFor(limit time.Duration, cond func() bool) bool {
	for end := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// sleepCtx sleeps d unless ctx ends first; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
