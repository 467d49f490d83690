package testbed

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestProcessDurableResumeAtTheSameEdge: a `deltapub sub --durable` at B2
// stops, more is published at B1, and a new one resumes from the state file
// at B2. B1 retains nothing once it is safe, so only what B2 kept for the
// away subscription (durable_keep) can give the resumed one what it missed:
// with it, every matching publication exactly once, in order, no Gap,
// also when B2 is killed while the subscriber is away and restarted with
// its data directory (its held log); with durable_keep off, the same
// resume gets a Gap (docs/durable.md "Resuming at the same edge", "An edge
// that restarts").
func TestProcessDurableResumeAtTheSameEdge(t *testing.T) {
	for _, c := range []struct {
		name    string
		extra   []string
		gap     bool
		after   int  // deliveries the resumed session prints
		restart bool // kill -9 B2 while the subscriber is away, restart it with its data
	}{
		{"kept", nil, false, 20, false},
		{"kept across a restart of the edge", nil, false, 20, true},
		{"not kept", []string{"--durable-keep", "-1s"}, true, 10, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pc := newProcCluster(t, []string{"B1", "B2"}, c.extra...)
			pc.start("B1")
			pc.start("B2", "B1")
			state := filepath.Join(pc.dir, "sub.state")
			filter := "[class,eq,'a']"
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			publish, want := pc.classPublisher(ctx, "B1")
			// session runs `deltapub sub --durable` at B2 until it printed n
			// deliveries, publishing from..to once it is confirmed. n is
			// more than what can arrive before from..to is published, so
			// the CLI is still running when its confirmation comes.
			session := func(n, from, to int) []deliveryLine {
				t.Helper()
				sub := exec.CommandContext(ctx, pc.bin, "sub", "--durable", "d1", "--state", state, "--broker", pc.addr["B2"],
					"--count", itoa(n), "--timeout", "30s", filter)
				var stderr lockedBuffer
				var stdout bytes.Buffer
				sub.Stdout, sub.Stderr = &stdout, &stderr
				if err := sub.Start(); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 20*time.Second, "the durable subscription confirmed", func() bool { return strings.Contains(stderr.String(), "confirmed") },
					func() string { return "sub stderr: " + stderr.String() }, pc.logs)
				publish(from, to)
				if err := sub.Wait(); err != nil {
					t.Fatalf("sub: %v\nstderr: %s\n%s", err, stderr.String(), pc.logs())
				}
				ch := make(chan deliveryLine, 1024)
				readDeliveryLines(bytes.NewReader(stdout.Bytes()), ch)
				var out []deliveryLine
				for l := range ch {
					out = append(out, l)
				}
				return out
			}
			var got []uint64
			for _, l := range session(10, 1, 15) {
				got = append(got, l.Seq)
			}
			publish(16, 30) // away: B1 releases them once B2 has them
			time.Sleep(500 * time.Millisecond)
			if c.restart {
				pc.kill("B2")
				pc.start("B2", "B1")
			}
			gaps := 0
			for _, l := range session(c.after, 31, 45) {
				if l.Gap != nil {
					if c.restart && !coversAny(*l.Gap, *want) {
						// The flood from the held position asks B1 for
						// what came after it; B1 kept nothing, so a
						// publication that did not match after the last
						// that did gets a Gap: nothing owed is in it.
						continue
					}
					gaps++
					continue
				}
				got = append(got, l.Seq)
			}
			if c.gap {
				if gaps == 0 {
					t.Fatalf("resumed without durable_keep and without retention: no Gap, got %v", got)
				}
				return
			}
			if gaps != 0 || !slices.Equal(got, *want) {
				t.Fatalf("got %v with %d gaps, want %v, no gap", got, gaps, *want)
			}
		})
	}
}

// coversAny reports whether the gap line g ({"from":…,"to":…}) covers one
// of seqs.
func coversAny(g map[string]any, seqs []uint64) bool {
	from, _ := g["from"].(float64)
	to, _ := g["to"].(float64)
	return slices.ContainsFunc(seqs, func(q uint64) bool { return float64(q) >= from && float64(q) <= to })
}
