package testbed

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// leaveHost is a host whose leave and start only count their calls (the
// rest of host is not used by these tests: calling it panics).
type leaveHost struct {
	host
	leaves, starts atomic.Int32
	fail           bool
	startedWith    []string
}

func (h *leaveHost) leave(name string) (<-chan leaveResult, error) {
	if h.fail {
		return nil, errors.New(name + " is not running")
	}
	h.leaves.Add(1)
	ch := make(chan leaveResult, 1)
	ch <- leaveResult{took: 42 * time.Millisecond}
	return ch, nil
}

func (h *leaveHost) start(_ context.Context, name string, jps []string) error {
	h.starts.Add(1)
	h.startedWith = jps
	return nil
}

// TestLiveLeave: concurrent leaves of one broker (a scheduled one and one
// from the control socket) start it once; its publishers' channel is
// closed; a restart of it is refused, a restart of its former child
// rejoins through the repaired tree (its new parent B1, then the nearest
// others up to δ+1, never B2); a leave that cannot start is an error
// and no leave starts once the run is over.
func TestLiveLeave(t *testing.T) {
	p := mustParse(t, goodBase) // B1 ─ B2 (B4, B5), B3 (B6, B7); δ = 2
	h := &leaveHost{}
	rec := NewRecorder()
	var wg sync.WaitGroup
	ls := newLiveState(p, h, rec, &wg)
	ctx := context.Background()
	var errs atomic.Int32
	var callers sync.WaitGroup
	for i := 0; i < 4; i++ {
		callers.Add(1)
		go func() {
			defer callers.Done()
			if e := ls.apply(ctx, []Action{{Kind: ActLeave, Broker: "B2"}}, 0); len(e) > 0 {
				if !strings.Contains(e[0], "B2 already left") {
					t.Errorf("second leave: %v", e)
				}
				errs.Add(1)
			}
		}()
	}
	callers.Wait()
	wg.Wait()
	if h.leaves.Load() != 1 || errs.Load() != 3 {
		t.Fatalf("4 concurrent leaves of B2: %d started, %d refused", h.leaves.Load(), errs.Load())
	}
	select {
	case <-ls.stopped("B2"):
	default:
		t.Fatal("B2's publishers were not stopped")
	}
	if len(rec.leaves) != 1 || rec.leaves[0].Broker != "B2" || rec.leaves[0].Took != 42*time.Millisecond || rec.leaves[0].Err != "" {
		t.Fatalf("leave recorded as %+v", rec.leaves)
	}
	if e := ls.apply(ctx, []Action{{Kind: ActRestart, Broker: "B2"}}, -1); len(e) != 1 || !strings.Contains(e[0], "left the overlay for good") {
		t.Fatalf("restart of a broker that left: %v", e)
	}
	if e := ls.apply(ctx, []Action{{Kind: ActRestart, Broker: "B4"}}, -1); len(e) != 0 || h.starts.Load() != 1 || !slices.Equal(h.startedWith, []string{"B1", "B3", "B5"}) {
		t.Fatalf("restart of B4 after B2 left: errors %v, joinpoints %v", e, h.startedWith)
	}
	h.fail = true
	if e := ls.apply(ctx, []Action{{Kind: ActLeave, Broker: "B3"}}, -1); len(e) != 1 || !strings.Contains(e[0], "B3 is not running") {
		t.Fatalf("a leave that cannot start: %v", e)
	}
	h.fail = false
	ls.end()
	if e := ls.apply(ctx, []Action{{Kind: ActLeave, Broker: "B3"}}, -1); len(e) != 1 || !strings.Contains(e[0], "the run is over") {
		t.Fatalf("a leave after the end: %v", e)
	}
	wg.Wait()
}
