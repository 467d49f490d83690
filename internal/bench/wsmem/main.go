// Command wsmem measures what an idle WebSocket connection costs a server,
// for the two libraries the broker's WebSocket listener was chosen from:
// github.com/coder/websocket (a goroutine per connection, on net/http) and
// github.com/lesismal/nbio (epoll, no goroutine per idle connection).
//
//	go run ./internal/bench/wsmem --lib coder --conns 10000
//
// The server runs in a child process (this program with --serve), so that
// its resident memory is the server's alone; the parent dials the
// connections from source addresses spread over 127.0.0.0/8 and asks the
// child for its memory before and after (after a GC and returning freed
// memory to the OS). The figures go to docs/websocket.md. With --lib
// deltapub the server is a broker with its WebSocket listener, and each
// connection is a subscribed web client session.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/deltapub/deltapub/overlay/runtime"
	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	nbws "github.com/lesismal/nbio/nbhttp/websocket"
	"github.com/rs/zerolog"
)

func main() {
	lib := flag.String("lib", "coder", "coder, nbio, or deltapub (a broker with ws_listen; each connection says hello and subscribes)")
	conns := flag.Int("conns", 10000, "idle connections to open (at most 100000)")
	serve := flag.Bool("serve", false, "internal: run the server (child process)")
	flag.Parse()
	raiseFileLimit()
	if *serve {
		if err := runServer(*lib); err != nil {
			fmt.Fprintln(os.Stderr, "wsmem server:", err)
			os.Exit(1)
		}
		return
	}
	if *conns < 1 || *conns > 100000 {
		fmt.Fprintln(os.Stderr, "wsmem: --conns must be within 1..100000")
		os.Exit(2)
	}
	if err := run(*lib, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "wsmem:", err)
		os.Exit(1)
	}
}

func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// runServer listens on 127.0.0.1, prints its address, and answers every
// line on stdin with its memory figures.
func runServer(lib string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	switch lib {
	case "coder":
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				if _, _, err := c.Read(r.Context()); err != nil {
					return
				}
			}
		})
		go http.Serve(ln, h)
	case "nbio":
		addr := ln.Addr().String()
		ln.Close()
		logging.Output = os.Stderr // stdout is the answers' channel
		up := nbws.NewUpgrader()
		up.OnMessage(func(*nbws.Conn, nbws.MessageType, []byte) {})
		mux := http.NewServeMux()
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { _, _ = up.Upgrade(w, r, nil) })
		e := nbhttp.NewEngine(nbhttp.Config{Network: "tcp", Addrs: []string{addr}, Handler: mux, MaxLoad: 200000})
		if err := e.Start(); err != nil {
			return err
		}
		fmt.Println(addr)
		return answer()
	case "deltapub":
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		cfg := runtime.DefaultBrokerConfig()
		cfg.ID, cfg.Listen, cfg.WSListen = "B1", udp.LocalAddr().String(), ln.Addr().String()
		udp.Close()
		ln.Close()
		cfg.Limits.MaxClients = 200_000
		b, err := runtime.NewBroker(cfg, zerolog.Nop())
		if err != nil {
			return err
		}
		go b.Run(context.Background())
		fmt.Println(b.WSAddr())
		return answer()
	default:
		return fmt.Errorf("unknown --lib %q (coder, nbio or deltapub)", lib)
	}
	fmt.Println(ln.Addr().String())
	return answer()
}

func answer() error {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		goruntime.GC()
		debug.FreeOSMemory()
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		fmt.Printf("%d %d %d\n", rss(), ms.HeapInuse+ms.StackInuse, goruntime.NumGoroutine())
	}
	return sc.Err()
}

// rss is this process's resident set in bytes (Linux).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

type stats struct{ rss, goHeap, goroutines uint64 }

func run(lib string, n int) error {
	cmd := exec.Command(os.Args[0], "--serve", "--lib", lib)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { in.Close(); cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewScanner(outp)
	if !out.Scan() {
		return errors.New("server did not start")
	}
	addr := out.Text()
	stat := func() (stats, error) {
		fmt.Fprintln(in)
		if !out.Scan() {
			return stats{}, errors.New("server gone")
		}
		var s stats
		_, err := fmt.Sscan(out.Text(), &s.rss, &s.goHeap, &s.goroutines)
		return s, err
	}
	// A few connections first, so that the baseline includes what any
	// first connection sets up (pools, the poller's goroutines).
	warm := dialAll(addr, 10, lib == "deltapub")
	before, err := stat()
	if err != nil {
		return err
	}
	start := time.Now()
	cs := dialAll(addr, n, lib == "deltapub")
	took := time.Since(start)
	if len(cs) < n {
		return fmt.Errorf("only %d of %d connections opened", len(cs), n)
	}
	time.Sleep(2 * time.Second) // the server finishes its side of the handshakes
	after, err := stat()
	if err != nil {
		return err
	}
	per := func(a, b uint64) float64 { return float64(int64(b)-int64(a)) / float64(n) }
	fmt.Printf("lib=%s conns=%d connect=%.1fs rss_per_conn=%.0fB go_heap_stack_per_conn=%.0fB goroutines=%d->%d\n",
		lib, n, took.Seconds(), per(before.rss, after.rss), per(before.goHeap, after.goHeap), before.goroutines, after.goroutines)
	for _, c := range append(warm, cs...) {
		c.CloseNow()
	}
	return nil
}

// dialAll opens n connections to addr, from source addresses 127.x.y.z
// rotating over the whole loopback network, at most 64 at a time.
func dialAll(addr string, n int, subscribe bool) []*websocket.Conn {
	type res struct {
		c   *websocket.Conn
		err error
	}
	results := make(chan res, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			c, err := dialFrom(addr, i, subscribe)
			results <- res{c, err}
		}()
	}
	var cs []*websocket.Conn
	var firstErr error
	for range n {
		r := <-results
		if r.err != nil {
			if firstErr == nil {
				firstErr = r.err
			}
			continue
		}
		cs = append(cs, r.c)
	}
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "wsmem: some dials failed, first:", firstErr)
	}
	return cs
}

func dialFrom(addr string, i int, subscribe bool) (*websocket.Conn, error) {
	src := net.IPv4(127, byte(1+i/65000%254), byte(i/254%254+1), byte(i%254+1))
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 10 * time.Second}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	path := "/"
	if subscribe {
		path = runtime.WSPath
	}
	c, _, err := websocket.Dial(ctx, "ws://"+addr+path, &websocket.DialOptions{HTTPClient: hc})
	if err != nil || !subscribe {
		return c, err
	}
	// A session as a web client opens it: hello, one subscription, and
	// the broker's acknowledgement.
	for _, f := range []string{`{"type":"hello"}`, fmt.Sprintf(`{"type":"subscribe","id":1,"filter":"[class,eq,'T'],[n,=,%d]"}`, i)} {
		if err := c.Write(ctx, websocket.MessageText, []byte(f)); err != nil {
			return nil, err
		}
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return nil, err
		}
		if strings.Contains(string(data), `"suback"`) {
			return c, nil
		}
	}
}
