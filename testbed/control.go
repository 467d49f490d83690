// The control socket of a real-time run: one fault command per line on
// 127.0.0.1, applied to the live overlay.

package testbed

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// control is the testbed's control socket: a TCP listener on 127.0.0.1
// taking one command per line ("crash B2", "restart B2", "freeze B3",
// "resume B3", "cut B1 B2", "heal B1 B2", "leave B2", "brokers"), answering "ok" or
// "error: …". Its address is written to OUT/control.addr for the scripts.
type control struct {
	ln net.Listener
}

func (c *control) Addr() string { return c.ln.Addr().String() }
func (c *control) Close()       { c.ln.Close() }

// maxControlLine bounds one command line.
const maxControlLine = 1024

func startControl(ctx context.Context, out string, p *Plan, live *liveState) (*control, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &control{ln: ln}
	if out != "" {
		if err := os.WriteFile(filepath.Join(out, "control.addr"), []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			ln.Close()
			return nil, err
		}
	}
	var mu sync.Mutex // one command at a time
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(conn net.Conn) {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(time.Minute))
				r := bufio.NewReader(io.LimitReader(conn, 64*maxControlLine))
				for {
					line, err := r.ReadString('\n')
					line = strings.TrimSpace(line)
					if line != "" {
						mu.Lock()
						reply := c.do(ctx, p, live, line)
						mu.Unlock()
						fmt.Fprintln(conn, reply)
					}
					if err != nil {
						return
					}
				}
			}(conn)
		}
	}()
	return c, nil
}

func (c *control) do(ctx context.Context, p *Plan, live *liveState, line string) string {
	f := strings.Fields(line)
	if len(f) == 1 && f[0] == "brokers" {
		return strings.Join(p.Topo.Names, " ")
	}
	kinds := map[string]int{ActCrash: 1, ActRestart: 1, ActFreeze: 1, ActResume: 1, ActLeave: 1, ActCut: 2, ActHeal: 2}
	n, ok := kinds[f[0]]
	if !ok || len(f) != n+1 {
		return "error: want crash|restart|freeze|resume|leave BROKER, cut|heal BROKER BROKER, or brokers"
	}
	for _, b := range f[1:] {
		if !p.Topo.Has(b) {
			return fmt.Sprintf("error: unknown broker %q", b)
		}
	}
	a := Action{Kind: f[0], Broker: f[1]}
	if n == 2 {
		a.Peer = f[2]
	}
	errs := live.apply(ctx, []Action{a}, -1)
	if len(errs) == 0 {
		live.rec.ManualFault(time.Since(live.start), a)
	}
	if len(errs) > 0 {
		return "error: " + strings.Join(errs, "; ")
	}
	return "ok"
}
