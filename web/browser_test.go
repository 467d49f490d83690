package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/internal/benchcompare"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/overlay/runtime"
	"github.com/rs/zerolog"
)

const chromium = "/usr/bin/chromium"

// delivery is what both clients are compared on.
type delivery struct {
	Publisher string         `json:"publisher"`
	Epoch     uint64         `json:"epoch"`
	Seq       uint64         `json:"seq"`
	Attrs     map[string]any `json:"attrs"`
	Payload   string         `json:"payload"`
}

// startBroker runs a real broker (QUIC, and WebSocket when ws) in this
// process until the test ends.
func startBroker(t *testing.T, id, join string, ws bool) (*runtime.Broker, string) {
	tb := runBroker(t, id, join, ws, nil)
	return tb.b, tb.addr
}

// testBroker is a broker this process runs; kill crashes it.
type testBroker struct {
	b    *runtime.Broker
	addr string
	kill func()
}

// runBroker starts a broker (edit changes its configuration first); it
// stops when the test ends, or crashes (no leave) at kill.
func runBroker(t *testing.T, id, join string, ws bool, edit func(*runtime.BrokerConfig)) *testBroker {
	t.Helper()
	cfg, _ := runtime.Preset("testbed")
	listen, err := benchcompare.FreeUDP()
	if err != nil {
		t.Fatal(err)
	}
	cfg.ID, cfg.Listen = id, listen
	if join != "" {
		cfg.Join = []string{join}
	}
	if ws {
		cfg.WSListen = "127.0.0.1:0"
	}
	if edit != nil {
		edit(&cfg)
	}
	b, err := runtime.NewBroker(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Run(ctx); close(done) }()
	var once sync.Once
	stop := func(crash bool) {
		once.Do(func() {
			if crash {
				b.Runtime.Kill() // Run returns without leaving the overlay
			}
			cancel()
			<-done
		})
	}
	t.Cleanup(func() { stop(false) })
	return &testBroker{b: b, addr: listen, kill: func() { stop(true) }}
}

// TestBrowserPageShowsExactlyTheMatchingDeliveries runs the example page in
// headless Chromium against real brokers: the page (on B2, over WebSocket)
// and a Go client (on B2, over QUIC) subscribe with the same filter, a Go
// publisher on B1 publishes, and both must get exactly the matching
// publications, identical, in order. Halfway the page loses its
// connection; the second half is published while it reconnects, and it
// must resume with nothing missed and nothing twice.
func TestBrowserPageShowsExactlyTheMatchingDeliveries(t *testing.T) {
	script := browserTools(t)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
	defer cancel()
	_, addr1 := startBroker(t, "B1", "", false)
	b2, addr2 := startBroker(t, "B2", addr1, true)
	filterText, filter, pubs, want := stockPubs(t)

	page := fmt.Sprintf("http://%s/index.html", b2.WSAddr())
	// The page drops its connection after the matching publications of
	// the first half.
	half := len(pubs) / 2
	first := 0
	for _, p := range pubs[:half] {
		if filter.Match(&p) {
			first++
		}
	}
	cmd := exec.CommandContext(ctx, "node", script, page, filterText, fmt.Sprint(first), fmt.Sprint(want), "30000")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	lines := bufio.NewScanner(out)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() || lines.Text() != "READY" {
		t.Fatalf("the page did not get its subscription confirmed: %q", lines.Text())
	}

	sub, err := client.Connect(ctx, addr2, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s, err := sub.Subscribe(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitConfirmed(ctx); err != nil {
		t.Fatal(err)
	}
	pub, err := client.Connect(ctx, addr1, client.Options{Publisher: "go-pub", Epoch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i, p := range pubs {
		if i == half && (!lines.Scan() || lines.Text() != "DROPPED") {
			t.Fatalf("the page did not show the first %d deliveries: %q", first, lines.Text())
		}
		if err := pub.Publish(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	var fromGo []delivery
	for len(fromGo) < want {
		select {
		case d := <-s.C:
			var attrs map[string]any
			_ = json.Unmarshal(matching.Publication{Attrs: d.Attrs}.JSON(), &attrs)
			fromGo = append(fromGo, delivery{d.Pub.Publisher, d.Pub.Epoch, d.Pub.Seq, attrs, string(d.Payload)})
		case <-ctx.Done():
			t.Fatalf("Go subscriber: %d of %d deliveries", len(fromGo), want)
		}
	}
	if !lines.Scan() {
		t.Fatal("the page did not show its deliveries")
	}
	var fromJS []delivery
	if err := json.Unmarshal(lines.Bytes(), &fromJS); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || !strings.Contains(lines.Text(), "reconnected to B2, nothing missed") {
		t.Errorf("page status %q, want a resume with nothing missed", lines.Text())
	}
	if !reflect.DeepEqual(fromJS, fromGo) {
		t.Errorf("deliveries differ:\n JS %v\n Go %v", fromJS, fromGo)
	}
	for i, d := range fromGo {
		if price := d.Attrs["price"].(float64); price <= 100 || d.Publisher != "go-pub" || !strings.HasPrefix(d.Payload, "payload ") {
			t.Errorf("delivery %d %v does not match the filter", i, d)
		}
	}
}

// browserTools returns the path of the script that drives Chromium. Without
// Chromium the test is skipped (saying so); with it, a missing node or
// playwright-core fails the test: CI has all three (.ci/run).
func browserTools(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("no " + chromium + " on this machine (apt-get install chromium; .ci/run installs it)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("chromium is installed but node is not: apt-get install nodejs npm (.ci/run does)")
	}
	if _, err := os.Stat("testdata/node_modules/playwright-core"); err != nil {
		t.Fatal("playwright-core is not installed: run npm install in web/testdata (.ci/run does)")
	}
	script, _ := filepath.Abs("testdata/browser.mjs")
	return script
}

// stockPubs are the test's publications and filter: every other one
// matches, a non-matching class among them, the last one matches (and
// tells the subscribers they have everything, per-publisher FIFO).
func stockPubs(t *testing.T) (string, matching.Filter, []matching.Publication, int) {
	t.Helper()
	const filterText = "[class,eq,'STOCK'],[price,>,100]"
	filter, err := matching.ParseFilter(filterText)
	if err != nil {
		t.Fatal(err)
	}
	var pubs []matching.Publication
	want := 0
	for i := range 11 {
		price := 95 + 3*i
		p, err := matching.ParsePublication(fmt.Sprintf("[class,'STOCK'],[price,%d],[n,%d],[ratio,%d.5]", price, i, i))
		if err != nil {
			t.Fatal(err)
		}
		p.Payload = []byte(fmt.Sprintf("payload %d é", i))
		pubs = append(pubs, p)
		if price > 100 {
			want++
		}
	}
	other, _ := matching.ParsePublication("[class,'BOND'],[price,500]")
	pubs = append(pubs[:3], append([]matching.Publication{other}, pubs[3:]...)...)
	return filterText, filter, pubs, want
}

// expected is what a subscriber with filter gets of pubs published in
// order by publisher/epoch (seqs from 1).
func expected(filter matching.Filter, pubs []matching.Publication, publisher string, epoch uint64) []delivery {
	var out []delivery
	for i, p := range pubs {
		if !filter.Match(&p) {
			continue
		}
		var attrs map[string]any
		_ = json.Unmarshal(p.JSON(), &attrs)
		out = append(out, delivery{publisher, epoch, uint64(i + 1), attrs, string(p.Payload)})
	}
	return out
}

// TestBrowserPageRecoversOnAnotherBrokerAfterACrash: the page subscribes
// through broker A (its client knows A and B), a Go publisher on P (whose
// edge keeps its publication history in memory, by default) publishes; once the page shows the first
// half, A crashes; the rest is published while the page reconnects to B,
// subscribes again with its positions and recovers. The page must show
// exactly the matching publications, nothing missing, nothing twice, and
// say it recovered everything.
func TestBrowserPageRecoversOnAnotherBrokerAfterACrash(t *testing.T) {
	script := browserTools(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	p := runBroker(t, "P", "", false, nil) // its default publication history holds what the page misses
	a := runBroker(t, "A", p.addr, true, nil)
	b := runBroker(t, "B", p.addr, true, nil)
	filterText, filter, pubs, want := stockPubs(t)
	half := len(pubs) / 2
	first := len(expected(filter, pubs[:half], "", 0))

	page := fmt.Sprintf("http://%s/index.html?ws=ws://%s/v1/ws,ws://%s/v1/ws", a.b.WSAddr(), a.b.WSAddr(), b.b.WSAddr())
	cmd := exec.CommandContext(ctx, "node", script, page, filterText, fmt.Sprint(first), fmt.Sprint(want), "60000", "crash")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	lines := bufio.NewScanner(out)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() || lines.Text() != "READY" {
		t.Fatalf("the page did not get its subscription confirmed on A: %q", lines.Text())
	}
	pub, err := client.Connect(ctx, p.addr, client.Options{Publisher: "go-pub", Epoch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i, m := range pubs {
		if i == half {
			if !lines.Scan() || lines.Text() != "SHOWN" {
				t.Fatalf("the page did not show the first %d deliveries: %q", first, lines.Text())
			}
			a.kill()
		}
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if !lines.Scan() {
		t.Fatalf("the page did not show its %d deliveries after recovering on B", want)
	}
	var fromJS []delivery
	if err := json.Unmarshal(lines.Bytes(), &fromJS); err != nil {
		t.Fatalf("%v: %q", err, lines.Text())
	}
	if !lines.Scan() || !strings.Contains(lines.Text(), "recovered to B, nothing missed") {
		t.Errorf("page status %q, want a recovery on B with nothing missed", lines.Text())
	}
	if wantDs := expected(filter, pubs, "go-pub", 4); !reflect.DeepEqual(fromJS, wantDs) {
		t.Errorf("the page's deliveries are not exactly the matching publications:\n got  %v\n want %v", fromJS, wantDs)
	}
}
