package benchcompare

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deltapub/deltapub/matching"
	"github.com/nats-io/nats.go"
)

// NATSServerModule is the pinned nats-server installed by EnsureNATS.
const NATSServerModule = "github.com/nats-io/nats-server/v2@v2.15.2"

// NATSVersion is the version EnsureNATS checks the binary for.
const NATSVersion = "2.15.2"

// NATSCacheDir is where EnsureNATS keeps nats-server: outside any
// repository, in the user's cache.
func NATSCacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("benchcompare: no cache directory (set XDG_CACHE_HOME): %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "deltapub", "nats"), nil
}

// EnsureNATS returns the path of the pinned nats-server in dir
// (NATSCacheDir if empty), building it there with 'go install' through
// the Go module proxy if it is missing or of another version. The NATS
// load generator is this package's own (the nats.go client compiled in),
// so no benchmark CLI is needed.
func EnsureNATS(ctx context.Context, dir string, progress io.Writer) (string, error) {
	if dir == "" {
		var err error
		if dir, err = NATSCacheDir(); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(dir, "nats-server")
	if natsVersionOK(ctx, bin) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("benchcompare: nats cache directory: %w", err)
	}
	fmt.Fprintf(progress, "installing %s into %s (once; a few minutes)\n", NATSServerModule, dir)
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", NATSServerModule)
	// Outside any module: the repository's go.mod is not touched.
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-buildvcs=false", "GO111MODULE=on")
	cmd.Stdout, cmd.Stderr = progress, progress
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("benchcompare: go install %s: %w", NATSServerModule, err)
	}
	if !natsVersionOK(ctx, bin) {
		return "", fmt.Errorf("benchcompare: %s is not nats-server %s after the install", bin, NATSVersion)
	}
	return bin, nil
}

func natsVersionOK(ctx context.Context, bin string) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	return err == nil && strings.Contains(string(out), NATSVersion)
}

type natsSystem struct {
	bin string
	// failover: clients take the other servers as reconnect targets.
	failover bool
}

func (natsSystem) Name() string { return "NATS" }

type natsServers struct {
	procs    []*Process
	urls     []string
	failover bool
	once     sync.Once
	err      error
}

func (n natsSystem) Start(ctx context.Context, count int) (servers, error) {
	s := &natsServers{failover: n.failover}
	type ports struct{ client, mon, cluster string }
	ps := make([]ports, count)
	for i := range ps {
		var err error
		if ps[i].client, err = FreeTCP(); err != nil {
			return nil, err
		}
		if ps[i].mon, err = FreeTCP(); err != nil {
			return nil, err
		}
		if ps[i].cluster, err = FreeTCP(); err != nil {
			return nil, err
		}
	}
	var routes []string
	for _, p := range ps {
		routes = append(routes, "nats://"+p.cluster)
	}
	for i, p := range ps {
		host, port := splitHostPort(p.client)
		_, mport := splitHostPort(p.mon)
		args := []string{"-a", host, "-p", port, "-m", mport, "-n", fmt.Sprintf("N%d", i+1)}
		if count > 1 {
			// Every server lists every route (its own is ignored): a full
			// mesh, so A→C is one route hop, NATS's longest path.
			args = append(args, "--cluster_name", "bench", "--cluster", "nats://"+p.cluster,
				"--routes", strings.Join(routes, ","))
		}
		pr, err := StartProcess(fmt.Sprintf("nats-server N%d", i+1), n.bin, args...)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.procs = append(s.procs, pr)
		s.urls = append(s.urls, "nats://"+p.client)
	}
	for i, p := range ps {
		want := count - 1
		err := WaitHTTP(ctx, "http://"+p.mon+"/routez", 20*time.Second, s.procs[i].Exited(), func(b []byte) bool {
			var rz struct {
				NumRoutes int `json:"num_routes"`
			}
			return json.Unmarshal(b, &rz) == nil && rz.NumRoutes >= want
		})
		if err != nil {
			out := s.procs[i].Output()
			s.Close()
			return nil, fmt.Errorf("benchcompare: nats-server N%d: %w\n%s", i+1, err, out)
		}
	}
	return s, nil
}

func splitHostPort(a string) (string, string) {
	i := strings.LastIndexByte(a, ':')
	return a[:i], a[i+1:]
}

func (s *natsServers) ProfileBase(int) string { return "" }

// Kill kills server i with SIGKILL.
func (s *natsServers) Kill(i int) error { return s.procs[i].Kill() }

func (s *natsServers) Close() error {
	s.once.Do(func() {
		var errs []error
		for _, p := range s.procs {
			errs = append(errs, p.Kill())
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

func (s *natsServers) Connect(ctx context.Context, i int, o connOptions) (endpoint, error) {
	e := &natsEndpoint{opts: o, handlers: map[*nats.Subscription]handler{}}
	url, reconnect := s.urls[i], nats.NoReconnect()
	if s.failover {
		// The others too, in order, reconnect paced and bounded.
		url = strings.Join(append([]string{s.urls[i]}, slicesWithout(s.urls, i)...), ",")
		reconnect = func(o *nats.Options) error {
			o.AllowReconnect, o.MaxReconnect, o.ReconnectWait, o.NoRandomize = true, 60, 100*time.Millisecond, true
			return nil
		}
	}
	nc, err := nats.Connect(url, reconnect, nats.Timeout(5*time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			e.mu.Lock()
			h := e.handlers[sub]
			e.mu.Unlock()
			if h != nil {
				h.Fail(fmt.Errorf("benchcompare: NATS subscription %q: %w", sub.Subject, err))
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("benchcompare: connect to nats-server N%d: %w", i+1, err)
	}
	e.nc = nc
	return e, nil
}

type natsEndpoint struct {
	nc   *nats.Conn
	opts connOptions
	buf  []byte
	sids int // nats.go numbers subscriptions 1, 2, … per connection

	mu       sync.Mutex
	handlers map[*nats.Subscription]handler // for errors
}

func (e *natsEndpoint) Publish(_ context.Context, m *outMsg) error {
	data := m.Payload
	if m.Head != nil {
		e.buf = append(append(e.buf[:0], m.Head...), m.Payload...)
		data = e.buf
	}
	return e.nc.Publish(m.Subject, data) // copies data into its buffer
}

func (e *natsEndpoint) Flush(ctx context.Context) error { return e.nc.FlushWithContext(ctx) }

// stockHead is what a NATS quote carries in front of its payload: price
// and volume (the symbol is in the subject, the class implied).
func stockHead(dst []byte, price float64, volume int64) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(price))
	return binary.LittleEndian.AppendUint64(dst, uint64(volume))
}

const stockHeadLen = 16

func (e *natsEndpoint) Subscribe(ctx context.Context, s subSpec, h handler) error {
	e.sids++
	sid := e.sids
	var pub matching.Publication
	if s.ClientFilter {
		pub.Attrs = make([]matching.Attr, 4)
	}
	cb := func(m *nats.Msg) {
		if s.CountBytes {
			// "MSG <subject> <sid> <size>\r\n<data>\r\n" as the server
			// wrote it.
			h.Raw(4 + len(m.Subject) + 1 + digits(sid) + 1 + digits(len(m.Data)) + 2 + len(m.Data) + 2)
		}
		data := m.Data
		if s.ClientFilter {
			// The application's own filtering: decode the quote and match
			// it against the subscription's filter.
			if len(data) < stockHeadLen {
				return
			}
			pub.Attrs[0] = matching.Attr{Name: "class", Value: matching.Str("STOCK")}
			pub.Attrs[1] = matching.Attr{Name: "price", Value: matching.Float(math.Float64frombits(binary.LittleEndian.Uint64(data)))}
			pub.Attrs[2] = matching.Attr{Name: "symbol", Value: matching.Str(strings.TrimPrefix(m.Subject, "stock."))}
			pub.Attrs[3] = matching.Attr{Name: "volume", Value: matching.Int(int64(binary.LittleEndian.Uint64(data[8:])))}
			if !s.Filter.Match(&pub) {
				return
			}
			data = data[stockHeadLen:]
		}
		h.Deliver(data)
	}
	sub, err := e.nc.Subscribe(s.Subject, cb)
	if err != nil {
		return fmt.Errorf("benchcompare: nats subscribe %q: %w", s.Subject, err)
	}
	e.mu.Lock()
	e.handlers[sub] = h
	e.mu.Unlock()
	// Bounded: beyond these the client drops messages for this
	// subscription and reports a slow consumer (Fail).
	if err := sub.SetPendingLimits(1<<22, 1<<30); err != nil {
		return err
	}
	return e.nc.FlushWithContext(ctx)
}

func digits(n int) int { return len(strconv.Itoa(n)) }

func (e *natsEndpoint) Close() { e.nc.Close() }
