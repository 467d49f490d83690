package benchcompare

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
)

// profiler takes CPU profiles of the deltapub brokers during a run
// (their /debug/pprof endpoint), for the closing note on missed goals.
// A nil profiler does nothing.
type profiler struct {
	dir     string
	seconds int
	label   string
	log     io.Writer
}

func (p *profiler) with(label string) *profiler {
	if p == nil {
		return nil
	}
	q := *p
	q.label = label
	return &q
}

// start begins one profile per server that has a pprof endpoint; the
// returned function waits for them (at most seconds+15 s each: the HTTP
// client's timeout), so call it before the servers are stopped.
func (p *profiler) start(ctx context.Context, srv servers, n int) func() {
	if p == nil || p.dir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		base := srv.ProfileBase(i)
		if base == "" {
			continue
		}
		path := filepath.Join(p.dir, fmt.Sprintf("%s-B%d.pprof", p.label, i+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := FetchProfile(ctx, base, p.seconds, path); err != nil {
				fmt.Fprintf(p.log, "profile %s: %v\n", path, err)
				return
			}
			fmt.Fprintf(p.log, "profile written: %s\n", path)
		}()
	}
	return wg.Wait
}
