package testbed

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// Recorder collects what happens during a run, from any goroutine of a
// backend. Times are durations since the start of the run (virtual time in
// sim mode). Everything the oracle and the results need is here; backends
// only report.
type Recorder struct {
	mu      sync.Mutex
	pubs    map[message.PubID]*PubRecord
	pubList []*PubRecord
	confs   map[subKey]time.Duration
	dels    []Delivery
	gaps    []GapRecord
	faults  []AppliedFault
	samples []BrokerSample
	manual  []manualFault
	leaves  []LeaveRecord
	ctrl    int64
	ctrlOK  bool
	notes   []string
	// readings are the brokers' liveness counters (liveness.go), read
	// until observedUntil.
	readings      []BrokerReading
	observedUntil time.Duration

	// Online counters for the progress line.
	nPubs, nDels, nFaults, nAnomalies atomic.Int64
	last                              map[streamKey]uint64 // highest seq delivered per subscription and source
	dropped                           atomic.Int64         // deliveries beyond maxRecordedDeliveries

	startWall  time.Time
	phase      string
	virtual    atomic.Int64
	hasVirtual atomic.Bool
}

// maxRecordedDeliveries bounds the memory of a run (about 80 bytes each).
// Deliveries beyond it are counted (and make the verdict FAIL, since the
// oracle can no longer check them) but not stored.
const maxRecordedDeliveries = 30_000_000

// PubRecord is one publication a publisher made.
type PubRecord struct {
	ID        message.PubID
	Publisher string
	At        time.Duration // when it was sent to the edge broker
	Acked     bool          // the edge broker acknowledged it
	Attrs     []matching.Attr
}

// Delivery is one publication delivered to one subscription.
type Delivery struct {
	Subscriber  int // index into Plan.Subscribers
	Sub         int // index of the subscription within the subscriber
	Pub         message.PubID
	PublishedAt time.Duration
	At          time.Duration
}

// GapRecord is an explicit notice of possible loss (beyond δ).
type GapRecord struct {
	Subscriber, Sub int
	Source          message.Source
	From, To        uint64
	At              time.Duration
}

// AppliedFault is a fault as it was applied (At is when it took effect).
type AppliedFault struct {
	Index int // into Plan.Faults
	At    time.Duration
	Err   string
}

// BrokerSample is one per-period measurement of one broker. Counters are
// per-period deltas; negative values mean "not available in this mode".
type BrokerSample struct {
	At      time.Duration
	Broker  string
	MsgsIn  int64
	MsgsOut int64
	Queue   int64
	CPU     float64 // percent of one core over the period
	RSS     int64   // bytes
	Up      bool

	// What the liveness rules read (liveness.go), not written to
	// brokers.csv: cumulative control messages sent by type (nil: not
	// read), joined, and the incarnation they belong to.
	ctl    map[string]int64
	joined bool
	inc    int
}

type subKey struct{ subscriber, sub int }

type streamKey struct {
	subKey
	src message.Source
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{
		pubs:  map[message.PubID]*PubRecord{},
		confs: map[subKey]time.Duration{},
		last:  map[streamKey]uint64{},
	}
}

// Published records a publication sent to its edge broker.
func (r *Recorder) Published(id message.PubID, publisher string, at time.Duration, attrs []matching.Attr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.pubs[id]; dup {
		return // a retry of the same publication
	}
	pr := &PubRecord{ID: id, Publisher: publisher, At: at, Attrs: attrs}
	r.pubs[id] = pr
	r.pubList = append(r.pubList, pr)
	r.nPubs.Add(1)
}

// Acked records the edge broker's acknowledgement of a publication.
func (r *Recorder) Acked(id message.PubID) {
	r.mu.Lock()
	if pr := r.pubs[id]; pr != nil {
		pr.Acked = true
	}
	r.mu.Unlock()
}

// Confirmed records that subscription sub of subscriber s was confirmed at
// at. Only the first confirmation counts.
func (r *Recorder) Confirmed(s, sub int, at time.Duration) {
	r.mu.Lock()
	k := subKey{s, sub}
	if _, ok := r.confs[k]; !ok {
		r.confs[k] = at
	}
	r.mu.Unlock()
}

// Delivered records a delivery.
func (r *Recorder) Delivered(d Delivery) { r.DeliveredBatch([]Delivery{d}) }

// DeliveredBatch records deliveries in their order of arrival, under one
// lock: thousands of subscriptions report at once in a large run, and one
// lock per delivery made the recorder the bottleneck.
func (r *Recorder) DeliveredBatch(ds []Delivery) {
	r.mu.Lock()
	for _, d := range ds {
		k := streamKey{subKey{d.Subscriber, d.Sub}, d.Pub.Source()}
		if d.Pub.Seq <= r.last[k] {
			r.nAnomalies.Add(1)
		} else {
			r.last[k] = d.Pub.Seq
		}
		if len(r.dels) < maxRecordedDeliveries {
			r.dels = append(r.dels, d)
		} else {
			r.dropped.Add(1)
		}
	}
	r.mu.Unlock()
	r.nDels.Add(int64(len(ds)))
}

// Gap records an explicit loss notice.
func (r *Recorder) Gap(g GapRecord) {
	r.mu.Lock()
	r.gaps = append(r.gaps, g)
	r.mu.Unlock()
}

// FaultApplied records that fault i took effect (err non-empty if applying
// it failed).
func (r *Recorder) FaultApplied(i int, at time.Duration, err error) {
	af := AppliedFault{Index: i, At: at}
	if err != nil {
		af.Err = err.Error()
	}
	r.mu.Lock()
	r.faults = append(r.faults, af)
	r.mu.Unlock()
	r.nFaults.Add(1)
}

// LeaveRecord is how a graceful leave ended: the broker was gone after
// Took (process mode: from SIGTERM to the process's exit; inproc: from the
// runtime's stop to its return; sim: virtual time until the neighbourhood
// confirmed), or Err says why it did not leave cleanly.
type LeaveRecord struct {
	Fault  int // into Plan.Faults; -1 for one sent through the control socket
	Broker string
	Took   time.Duration
	Err    string
}

// LeaveDone records the end of a graceful leave (err non-nil: a non-zero
// exit, a timeout, a leave the neighbourhood never confirmed).
func (r *Recorder) LeaveDone(fault int, broker string, took time.Duration, err error) {
	lr := LeaveRecord{Fault: fault, Broker: broker, Took: took}
	if err != nil {
		lr.Err = err.Error()
	}
	r.mu.Lock()
	r.leaves = append(r.leaves, lr)
	r.mu.Unlock()
}

type manualFault struct {
	at time.Duration
	a  Action
}

// ManualFault records a fault injected by hand through the control socket,
// so that the oracle knows what was down.
func (r *Recorder) ManualFault(at time.Duration, a Action) {
	r.mu.Lock()
	if len(r.manual) < 10000 {
		r.manual = append(r.manual, manualFault{at, a})
	}
	r.mu.Unlock()
	r.Note(fmt.Sprintf("manual fault at %v: %s", at.Round(time.Millisecond), a))
}

// Sample records a broker measurement.
func (r *Recorder) Sample(s BrokerSample) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
}

// ControlMessages sets the number of control messages (heartbeats, DACKs,
// confirmations, joins: everything between brokers that is not a
// publication) the backend counted.
func (r *Recorder) ControlMessages(n int64) {
	r.mu.Lock()
	r.ctrl, r.ctrlOK = n, true
	r.mu.Unlock()
}

// Note records a remark for the summary (what a mode cannot measure, a
// warning).
func (r *Recorder) Note(s string) {
	r.mu.Lock()
	if len(r.notes) < 100 {
		r.notes = append(r.notes, s)
	}
	r.mu.Unlock()
}

// Progress is the live view of a run.
type Progress struct {
	Publications, Deliveries, Faults, Anomalies int64
}

// Progress returns the counters so far (safe to call concurrently).
func (r *Recorder) Progress() Progress {
	return Progress{r.nPubs.Load(), r.nDels.Load(), r.nFaults.Load(), r.nAnomalies.Load()}
}
