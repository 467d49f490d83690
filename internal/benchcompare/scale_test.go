package benchcompare

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Scale at a tiny size, brokers in-process: every point completes, the
// subscriptions spread over connections of at most 1,000, and the JSON
// and plots are written.
func TestScaleTiny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var progress bytes.Buffer
	cfg := ScaleConfig{Launcher: InProcessLauncher(), Chains: []int{1, 3}, Subs: []int{50, 1200}, Messages: 200,
		Rate: 500, LatencyMsgs: 100, Timeout: 40 * time.Second, Progress: &progress}
	rep, err := Scale(ctx, cfg)
	if err != nil {
		t.Fatalf("Scale: %v\n%s", err, progress.String())
	}
	if len(rep.Chain) != 2 || len(rep.Subs) != 2 {
		t.Fatalf("points: %+v", rep)
	}
	for _, p := range append(rep.Chain, rep.Subs...) {
		if p.Error != "" || !p.Through.Complete || p.Through.Delivered != 200 || p.Latency.Lost != 0 || p.Latency.P99Us < p.Latency.P50Us {
			t.Errorf("point %+v", p)
		}
	}
	if rep.Chain[1].Brokers != 3 || rep.Subs[1].Connected != 2 || rep.Subs[0].Connected != 1 || rep.Subs[1].SubSecs <= 0 {
		t.Errorf("shape: chain %+v subs %+v", rep.Chain[1], rep.Subs[1])
	}
	dir := t.TempDir()
	files, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"scale.json", "scale-chain.png", "scale-subs.svg", "scale-memory.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if len(files) != 7 {
		t.Errorf("files %v", files)
	}
	var tb bytes.Buffer
	rep.WriteText(&tb)
	if !strings.Contains(tb.String(), "routed subscriptions") || !strings.Contains(tb.String(), "1200") {
		t.Errorf("text:\n%s", tb.String())
	}
}

func TestScaleConfigRejectsBadSizes(t *testing.T) {
	for _, c := range []ScaleConfig{
		{},
		{Launcher: InProcessLauncher(), Chains: []int{0}},
		{Launcher: InProcessLauncher(), Subs: []int{3_000_000}},
		{Launcher: InProcessLauncher(), Messages: -1},
	} {
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "benchcompare: scale: ") {
			t.Errorf("Validate(%+v) = %v", c, err)
		}
	}
}
