package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/benchcompare"
	"github.com/deltapub/deltapub/matching"
)

// ClientsOptions are the sizes of a Clients run.
type ClientsOptions struct {
	Binary     string        // the deltapub executable that runs the broker
	Conns      int           // concurrent subscribed client sessions
	Transport  string        // "ws" or "quic"
	FanoutRate float64       // publications per second to all clients
	Fanout     time.Duration // length of the fan-out run
	Timeout    time.Duration // bound on the whole run
	Progress   func(format string, args ...any)
}

// Validate checks the options and fills in defaults.
func (o *ClientsOptions) Validate() error {
	switch {
	case o.Conns < 1 || o.Conns > 1_000_000:
		return fmt.Errorf("--conns %d out of range [1, 1000000]", o.Conns)
	case o.Transport != "ws" && o.Transport != "quic":
		return fmt.Errorf("--transport %q: ws or quic", o.Transport)
	case o.FanoutRate <= 0 || o.FanoutRate > 1000:
		return fmt.Errorf("--fanout-rate %v out of range (0, 1000]", o.FanoutRate)
	case o.Fanout < time.Second || o.Fanout > time.Hour:
		return fmt.Errorf("--fanout-duration %v out of range [1s, 1h]", o.Fanout)
	case o.Timeout < 10*time.Second:
		return fmt.Errorf("--timeout %v: at least 10s", o.Timeout)
	case o.Binary == "":
		return errors.New("no deltapub executable to run the broker")
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	return nil
}

// ClientsReport is what a Clients run measured.
type ClientsReport struct {
	Transport       string  `json:"transport"`
	Conns           int     `json:"conns"`
	ConnectPerS     float64 `json:"connect_per_s"`
	BytesPerConn    float64 `json:"bytes_per_conn"`
	BrokerRSSMB     float64 `json:"broker_rss_mb"`
	FanoutRate      float64 `json:"fanout_rate"`
	DeliveriesPerS  float64 `json:"deliveries_per_s"`
	Delivered       int64   `json:"delivered"`
	Expected        int64   `json:"expected"`
	P50Ms           float64 `json:"p50_ms"`
	P99Ms           float64 `json:"p99_ms"`
	ReconnectS      float64 `json:"reconnect_s"`
	FileLimit       uint64  `json:"file_limit"`
	ConnectFailures int64   `json:"connect_failures"`
}

// WriteText prints the report as a few lines.
func (r *ClientsReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "transport %s, %d subscribed connections on one broker\n", r.Transport, r.Conns)
	fmt.Fprintf(w, "  connect       %.0f connections/s (hello and subscription acknowledged)\n", r.ConnectPerS)
	fmt.Fprintf(w, "  memory        %.0f bytes per connection (broker RSS delta / conns; broker at %.0f MB)\n", r.BytesPerConn, r.BrokerRSSMB)
	fmt.Fprintf(w, "  fan-out       %.0f deliveries/s at %.1f publication/s to all (%d of %d delivered), p50 %.1f ms, p99 %.1f ms\n",
		r.DeliveriesPerS, r.FanoutRate, r.Delivered, r.Expected, r.P50Ms, r.P99Ms)
	fmt.Fprintf(w, "  reconnect     all %d dropped and subscribed again in %.1f s\n", r.Conns, r.ReconnectS)
}

// benchClient is one load-generating client of either transport.
type benchClient interface{ close() }

// Clients runs a broker as a child process and measures what --conns
// subscribed client sessions cost it, how fast they connect, the fan-out of
// publications to all of them, and a reconnect storm.
func Clients(o ClientsOptions) (*ClientsReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	limit := raiseFileLimit()
	// The broker holds one descriptor per connection, and so does this
	// process (ws: a TCP socket; quic: a UDP socket per client).
	if uint64(o.Conns)+256 > limit {
		return nil, fmt.Errorf("%d connections need more than the file limit of %d (RLIMIT_NOFILE: raise the hard limit, see docs/results/web-clients.md)", o.Conns, limit)
	}
	listen, err := benchcompare.FreeUDP()
	if err != nil {
		return nil, err
	}
	wsAddr, err := benchcompare.FreeTCP()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "deltapub-bench-clients-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	conf := filepath.Join(dir, "broker.toml")
	toml := fmt.Sprintf("id = \"B1\"\nlisten = %q\nws_listen = %q\n[limits]\nmax_clients = %d\nws_handshakes_per_s = 1000000\n[log]\nlevel = \"warn\"\nformat = \"console\"\n",
		// Dropped web sessions wait ws_resume_grace for a resume: the
		// storm's new sessions come on top of them.
		listen, wsAddr, 2*o.Conns+1024)
	if err := os.WriteFile(conf, []byte(toml), 0o600); err != nil {
		return nil, err
	}
	p, err := benchcompare.StartProcess("broker B1", o.Binary, "broker", "--config", conf)
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	if err := waitTCP(ctx, wsAddr); err != nil {
		return nil, fmt.Errorf("broker did not start: %v\n%s", err, p.Output())
	}
	rep := &ClientsReport{Transport: o.Transport, Conns: o.Conns, FanoutRate: o.FanoutRate, FileLimit: limit}
	filter, _ := matching.ParseFilter("[class,eq,'BENCH']")
	lat := newHistogram()
	var delivered atomic.Int64
	onDeliver := func(published int64) {
		delivered.Add(1)
		if published > 0 {
			lat.add(time.Since(time.Unix(0, published)))
		}
	}
	dial := func(ctx context.Context, i int) (benchClient, error) {
		if o.Transport == "ws" {
			return dialWSBench(ctx, wsAddr, i, onDeliver)
		}
		return dialQUICBench(ctx, listen, filter, onDeliver)
	}
	time.Sleep(time.Second) // the broker settles (its runtime's first ticks)
	before := rssMB(p.Pid())
	o.Progress("broker at %.0f MB; connecting %d %s clients", before, o.Conns, o.Transport)
	clients := make([]benchClient, o.Conns)
	var failures atomic.Int64
	start := time.Now()
	if err := connectAll(ctx, clients, dial, &failures, o.Progress); err != nil {
		return nil, err
	}
	rep.ConnectPerS = float64(o.Conns) / time.Since(start).Seconds()
	rep.ConnectFailures = failures.Load()
	time.Sleep(2 * time.Second) // the broker's side of the last sessions
	rep.BrokerRSSMB = rssMB(p.Pid())
	rep.BytesPerConn = (rep.BrokerRSSMB - before) * (1 << 20) / float64(o.Conns)
	o.Progress("connected at %.0f/s; broker at %.0f MB (%.0f B per connection); fan-out for %v", rep.ConnectPerS, rep.BrokerRSSMB, rep.BytesPerConn, o.Fanout)

	pub, err := client.Connect(ctx, listen, client.Options{Publisher: "bench", Epoch: uint64(time.Now().UnixNano())})
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	pubs := int(o.FanoutRate * o.Fanout.Seconds())
	tick := time.NewTicker(time.Duration(float64(time.Second) / o.FanoutRate))
	fanStart := time.Now()
	for i := range pubs {
		<-tick.C
		p := matching.Publication{Attrs: []matching.Attr{{Name: "class", Value: matching.Str("BENCH")}, {Name: "n", Value: matching.Int(int64(i))}}}
		if _, err := pub.PublishAsync(ctx, p); err != nil {
			tick.Stop()
			return nil, err
		}
	}
	tick.Stop()
	rep.Expected = int64(pubs) * int64(o.Conns)
	// The last deliveries: at most 10 s more.
	for end := time.Now().Add(10 * time.Second); delivered.Load() < rep.Expected && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	rep.Delivered = delivered.Load()
	rep.DeliveriesPerS = float64(rep.Delivered) / time.Since(fanStart).Seconds()
	rep.P50Ms, rep.P99Ms = lat.quantile(0.5), lat.quantile(0.99)
	o.Progress("fan-out: %d of %d delivered, p99 %.1f ms; reconnect storm", rep.Delivered, rep.Expected, rep.P99Ms)

	for _, c := range clients {
		c.close()
	}
	start = time.Now()
	if err := connectAll(ctx, clients, dial, &failures, o.Progress); err != nil {
		return nil, err
	}
	rep.ReconnectS = time.Since(start).Seconds()
	rep.ConnectFailures = failures.Load()
	for _, c := range clients {
		c.close()
	}
	return rep, nil
}

// connectAll fills clients, 256 dials at a time; a failed dial is retried
// (at most 5 times, 200 ms apart).
func connectAll(ctx context.Context, clients []benchClient, dial func(context.Context, int) (benchClient, error), failures *atomic.Int64, progress func(string, ...any)) error {
	var done atomic.Int64
	var firstErr error
	var mu sync.Mutex
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				progress("  %d/%d connected", done.Load(), len(clients))
			case <-stop:
				return
			}
		}
	}()
	defer close(stop)
	for i := range clients {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var err error
			for attempt := range 5 {
				if attempt > 0 {
					failures.Add(1)
					time.Sleep(200 * time.Millisecond)
				}
				dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				clients[i], err = dial(dctx, i)
				cancel()
				if err == nil {
					done.Add(1)
					return
				}
			}
			mu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("client %d: %w", i, err)
			}
			mu.Unlock()
		}()
		if ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

type wsBench struct{ c *websocket.Conn }

func (w *wsBench) close() { w.c.CloseNow() }

// dialWSBench opens a web client session from source address 127.x.y.z
// (spread over the loopback network so that ports do not run out), says
// hello, subscribes, waits for the acknowledgement and reads deliveries.
func dialWSBench(ctx context.Context, addr string, i int, onDeliver func(int64)) (benchClient, error) {
	src := net.IPv4(127, byte(1+i/64516%254), byte(i/254%254+1), byte(i%254+1))
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	for _, f := range []string{`{"type":"hello"}`, `{"type":"subscribe","id":1,"filter":"[class,eq,'BENCH']"}`} {
		if err := c.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			c.CloseNow()
			return nil, err
		}
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			c.CloseNow()
			return nil, err
		}
		if strings.Contains(string(data), `"suback"`) {
			break
		}
	}
	go func() {
		for {
			_, data, err := c.Read(context.Background())
			if err != nil {
				return
			}
			if t, ok := frameTime(data); ok {
				onDeliver(t)
			}
		}
	}()
	return &wsBench{c}, nil
}

// frameTime reads the "time" of a delivery frame without decoding it all.
func frameTime(data []byte) (int64, bool) {
	s := string(data)
	if !strings.HasPrefix(s, `{"type":"deliver"`) {
		return 0, false
	}
	i := strings.Index(s, `"time":`)
	if i < 0 {
		return 0, true
	}
	var t int64
	for _, ch := range s[i+7:] {
		if ch < '0' || ch > '9' {
			break
		}
		t = t*10 + int64(ch-'0')
	}
	return t, true
}

type quicBench struct{ c *client.Client }

func (q *quicBench) close() { q.c.Close() }

func dialQUICBench(ctx context.Context, addr string, f matching.Filter, onDeliver func(int64)) (benchClient, error) {
	c, err := client.Connect(ctx, addr, client.Options{DeliveryBuffer: 16})
	if err != nil {
		return nil, err
	}
	if _, err := c.SubscribeFunc(ctx, f, func(d client.Delivery) { onDeliver(d.PublishedAt.UnixNano()) }); err != nil {
		c.Close()
		return nil, err
	}
	return &quicBench{c}, nil
}

func waitTCP(ctx context.Context, addr string) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// raiseFileLimit raises the soft file limit to the hard one and returns it.
func raiseFileLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	return l.Cur
}

// histogram counts latencies in 100 µs buckets up to 10 s (the last bucket
// holds everything beyond).
type histogram struct {
	mu sync.Mutex
	b  []int64
	n  int64
}

func newHistogram() *histogram { return &histogram{b: make([]int64, 100_001)} }

func (h *histogram) add(d time.Duration) {
	i := min(max(int(d/(100*time.Microsecond)), 0), len(h.b)-1)
	h.mu.Lock()
	h.b[i]++
	h.n++
	h.mu.Unlock()
}

func (h *histogram) quantile(q float64) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	want := int64(q * float64(h.n))
	var sum int64
	for i, c := range h.b {
		sum += c
		if sum > want {
			return float64(i+1) / 10 // upper edge, ms
		}
	}
	return float64(len(h.b)) / 10
}
