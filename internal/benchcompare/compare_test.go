package benchcompare

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// The table and the JSON keys, from a report with known figures (no
// servers).
func TestReportTableAndJSON(t *testing.T) {
	rep := &Report{PayloadBytes: PayloadSize, Delta: 1, NATSVersion: NATSVersion, Machine: Machine{CPUs: 2, Model: "test cpu"}}
	rep.Deltapub = Figures{
		Single:    Throughput{Rate: 300_000},
		TwoServer: Throughput{Rate: 100_000},
		Chain3:    &Throughput{Rate: 80_000},
		Fanout:    Throughput{Rate: 900_000, Subs: 100},
		Latency:   Latency{Rate: 10_000, P50Us: 300, P99Us: 900, P999Us: 2000},
		Filtered:  Filtered{Subs: 10_000, Rate: 60_000, BytesToSubs: 3_000_000, Carried: 10_000},
	}
	rep.NATS = &Figures{
		Single:    Throughput{Rate: 500_000},
		TwoServer: Throughput{Rate: 400_000},
		Fanout:    Throughput{Rate: 1_000_000, Subs: 100},
		Latency:   Latency{Rate: 10_000, P50Us: 200, P99Us: 400, P999Us: 800},
		Filtered:  Filtered{Subs: 10_000, Rate: 50_000, BytesToSubs: 6_000_000, Carried: 20_000},
		Errors:    map[string]string{"latency": "boom"},
	}
	// What Run computes at the end.
	rep.SingleRatio = ratio(rep.Deltapub.Single.Rate, rep.NATS.Single.Rate)
	rep.P99Ratio = ratio(rep.Deltapub.Latency.P99Us, rep.NATS.Latency.P99Us)
	var tb bytes.Buffer
	if err := rep.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	table := tb.String()
	for _, want := range []string{
		"single 1→1", "300,000", "500,000", "0.60  ≥ 0.6 met",
		"two servers", "0.25  ≥ 0.5 MISSED",
		"3-broker chain B1→B3", "80,000",
		"fan-out 1→100", "0.90  ≥ 0.8 met",
		"latency p99", "2.25  ≤ 2 MISSED",
		"filtered, 10000 subs", "1.20  ≥ 1.2 met",
		"bytes to subscribers", "3.0", "6.0", "0.50",
		"failed run: latency: boom",
		"machine: 2 CPUs, test cpu",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if got := strings.Count(table, "\n"); got != 13 {
		t.Errorf("table has %d lines, want 13 (header, 10 rows, 1 error, machine):\n%s", got, table)
	}

	var jb bytes.Buffer
	if err := rep.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(jb.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"single_throughput_ratio", "two_server_throughput_ratio", "fanout_ratio",
		"p99_latency_ratio", "filtered_ratio", "deltapub", "nats", "machine", "payload_bytes"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks key %q", k)
		}
	}
	if r := m["single_throughput_ratio"].(float64); r != 0.6 {
		t.Errorf("single_throughput_ratio = %v, want 0.6", r)
	}
	dp := m["deltapub"].(map[string]any)
	if r := dp["single"].(map[string]any)["deliveries_per_s"].(float64); r != 300_000 {
		t.Errorf("deltapub.single.deliveries_per_s = %v, want 300000", r)
	}
	if _, ok := dp["three_broker_chain"]; !ok {
		t.Error("JSON lacks deltapub.three_broker_chain")
	}
	if r := dp["filtered"].(map[string]any)["bytes_to_subscribers"].(float64); r != 3_000_000 {
		t.Errorf("deltapub.filtered.bytes_to_subscribers = %v", r)
	}
}

// With two client transports the core table comes once per transport,
// and the JSON has the second one's figures and ratios.
func TestReportTableTwoTransports(t *testing.T) {
	nats := Figures{Single: Throughput{Rate: 500_000}}
	rep := &Report{NATS: &nats, ClientTransport: TransportTCP, Machine: Machine{CPUs: 2, Model: "test cpu"},
		Deltapub:        Figures{Single: Throughput{Rate: 300_000}, Errors: map[string]string{"fanout": "boom"}},
		OtherTransports: []TransportRun{{ClientTransport: TransportQUIC, Deltapub: Figures{Single: Throughput{Rate: 200_000}}}}}
	rep.Ratios = coreRatios(&rep.Deltapub, rep.NATS)
	rep.OtherTransports[0].Ratios = coreRatios(&rep.OtherTransports[0].Deltapub, rep.NATS)
	var tb bytes.Buffer
	if err := rep.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	table := tb.String()
	for _, want := range []string{"deltapub/tcp", "0.60  ≥ 0.6 met", "failed run: deltapub/tcp fanout: boom",
		"deltapub/quic", "0.40  ≥ 0.6 MISSED", "clients over tcp"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if n := strings.Count(table, "single 1→1"); n != 2 {
		t.Errorf("%d single rows, want 2:\n%s", n, table)
	}
	var jb bytes.Buffer
	if err := rep.WriteJSON(&jb); err != nil {
		t.Fatal(err)
	}
	var m struct {
		Single float64 `json:"single_throughput_ratio"`
		Other  []struct {
			Transport string  `json:"client_transport"`
			Single    float64 `json:"single_throughput_ratio"`
		} `json:"other_client_transports"`
	}
	if err := json.Unmarshal(jb.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m.Single != 0.6 || len(m.Other) != 1 || m.Other[0].Transport != "quic" || m.Other[0].Single != 0.4 {
		t.Errorf("JSON %s", jb.String())
	}
}

// Without NATS the table shows dashes and no goal verdicts; a run that
// timed out is named.
func TestReportTableWithoutNATS(t *testing.T) {
	rep := &Report{Deltapub: Figures{Single: Throughput{Rate: 1234, Messages: 10, Complete: false},
		TwoServer: Throughput{Rate: 5, Messages: 10, Complete: true}}}
	var tb bytes.Buffer
	if err := rep.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	s := tb.String()
	if strings.Contains(s, "met") || strings.Contains(s, "MISSED") || !strings.Contains(s, "1,234") {
		t.Errorf("table without NATS:\n%s", s)
	}
	if !strings.Contains(s, "incomplete run (timed out; its figure counts what arrived): single\n") || strings.Contains(s, "two_server") {
		t.Errorf("table should name the incomplete single run only:\n%s", s)
	}
}

func TestConfigRejectsBadSizes(t *testing.T) {
	for _, c := range []Config{
		{}, // no launcher
		{Launcher: InProcessLauncher(), Messages: -1}, // negative
		{Launcher: InProcessLauncher(), FilterSubs: 10, FilterConns: 20},
		{Launcher: InProcessLauncher(), LatencyMessages: 5},
		{Launcher: InProcessLauncher(), Timeout: time.Millisecond},
	} {
		if _, err := Run(context.Background(), c); err == nil || !strings.HasPrefix(err.Error(), "benchcompare: ") {
			t.Errorf("Run(%+v) = %v, want a benchcompare error", c, err)
		}
	}
}

// The deltapub side of every run at a tiny size, brokers in-process, with
// clients over TCP then over QUIC: the harness starts, loads, counts and
// stops them, and every expected delivery arrives (deltapub delivers
// exactly once).
func TestDeltapubSideTiny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	var progress bytes.Buffer
	cfg := Config{
		Messages: 300, FanoutSubs: 3, FanoutMessages: 100,
		LatencyRate: 2000, LatencyMessages: 200,
		FilterSubs: 60, FilterConns: 4, FilterPubs: 300, Seed: 7,
		Timeout: 20 * time.Second, Launcher: InProcessLauncher(), Progress: &progress,
		Reliable:         ReliableConfig{Skip: true, SkipFailover: true},
		ClientTransports: []string{TransportTCP, TransportQUIC},
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	if rep.ClientTransport != TransportTCP || len(rep.OtherTransports) != 1 || rep.OtherTransports[0].ClientTransport != TransportQUIC {
		t.Fatalf("client transports %q, %+v", rep.ClientTransport, rep.OtherTransports)
	}
	for _, d := range []Figures{rep.Deltapub, rep.OtherTransports[0].Deltapub} {
		checkTinyFigures(t, &cfg, d, progress.String())
	}
	if rep.NATS != nil || rep.SingleRatio != 0 {
		t.Errorf("NATS figures without a NATS server: %+v", rep)
	}
	if n := strings.Count(progress.String(), "\n"); n != 12 {
		t.Errorf("%d progress lines, want 12 (6 runs × 2 transports):\n%s", n, progress.String())
	}
}

func checkTinyFigures(t *testing.T, cfg *Config, d Figures, progress string) {
	t.Helper()
	if len(d.Errors) > 0 {
		t.Fatalf("failed runs: %v\n%s", d.Errors, progress)
	}
	if d.Chain3 == nil {
		t.Fatalf("no chain run\n%s", progress)
	}
	for name, tp := range map[string]Throughput{"single": d.Single, "two_server": d.TwoServer, "chain3": *d.Chain3, "fanout": d.Fanout} {
		if !tp.Complete || tp.Delivered != tp.Expected || tp.Rate <= 0 {
			t.Errorf("%s: %+v", name, tp)
		}
	}
	if d.Fanout.Expected != 300 {
		t.Errorf("fanout expected %d deliveries, want 3×100", d.Fanout.Expected)
	}
	if l := d.Latency; !l.Complete || l.Measured != 180 || l.Lost != 0 || l.P50Us <= 0 || l.P99Us < l.P50Us || l.P999Us < l.P99Us {
		t.Errorf("latency: %+v", l)
	}
	f := d.Filtered
	if !f.Complete || f.Delivered != f.Expected || f.Expected == 0 || f.Carried != f.Delivered || f.BytesToSubs < f.Carried*PayloadSize {
		t.Errorf("filtered (seed %d): %+v", cfg.Seed, f)
	}
	// Every broker of the 6 runs (1 + 2 + 3 + 2 + 2 + 1) is read; how many
	// suspicions a loaded test machine causes is not asserted.
	if s := d.FalseSuspicions; s == nil || s.Brokers != 11 || s.Unread != 0 {
		t.Errorf("false suspicions: %+v, want 11 broker runs read", s)
	}
}

// The suspicions of a broker are read from its metrics.
func TestScrapeSuspected(t *testing.T) {
	serve := func(body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	var c suspicionCount
	c.add(serve("# HELP deltapub_notices_total x\n" +
		`deltapub_notices_total{kind="bypass-up"} 4` + "\n" +
		`deltapub_notices_total{kind="suspected"} 3` + "\n"))
	c.add(serve("deltapub_client_sessions 1\n")) // never suspected: no series
	c.add("127.0.0.1:1")                         // nothing listens
	if s := c.read(); s.Brokers != 2 || s.Unread != 1 || s.Count != 3 {
		t.Errorf("read %d brokers, %d unread, %d suspicions; want 2, 1, 3", s.Brokers, s.Unread, s.Count)
	}
}

// The reliable runs of deltapub (δ = 2, B1–B2–B3, each durability) and a
// failover run at a tiny size, brokers in-process: every acknowledged
// publication arrives once, also across the stop of B2.
func TestReliableAndFailoverDeltapubTiny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	var progress bytes.Buffer
	cfg := Config{Launcher: InProcessLauncher(), Progress: &progress, Timeout: 40 * time.Second, SkipCore: true,
		Reliable: ReliableConfig{Messages: 300, Rate: 500, LatencyMsgs: 100, Durabilities: []string{"fsync", "none"},
			FailoverRate: 200, FailoverSeconds: 3, FailoverKillAt: 1}}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	if rep.Failed() {
		t.Fatalf("failed runs:\n%s", progress.String())
	}
	if len(rep.Reliable) != 2 || rep.Reliable[0].Key != "deltapub_fsync" || rep.Reliable[1].Key != "deltapub_none" {
		t.Fatalf("reliable runs %+v", rep.Reliable)
	}
	for _, r := range rep.Reliable {
		if tp := r.Throughput; !tp.Complete || tp.Delivered != 300 || tp.Rate <= 0 {
			t.Errorf("%s throughput: %+v", r.Key, tp)
		}
		if l := r.Latency; !l.Complete || l.Lost != 0 || l.Measured != 90 || l.P99Us < l.P50Us {
			t.Errorf("%s latency: %+v", r.Key, l)
		}
	}
	if len(rep.Failover) != 2 {
		t.Fatalf("failover runs %+v", rep.Failover)
	}
	for _, f := range rep.Failover {
		if f.Sent != 600 || f.Lost != 0 || f.Duplicates != 0 || f.Received != 600 || f.PauseMs <= 0 {
			t.Errorf("failover %s: %+v", f.System, f)
		}
		if rep.FailoverLost[f.System] != 0 || rep.FailoverPauseMs[f.System] != f.PauseMs {
			t.Errorf("failover %s: JSON maps %v %v", f.System, rep.FailoverLost, rep.FailoverPauseMs)
		}
	}
	var tb bytes.Buffer
	if err := rep.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deltapub δ=2, fsync", "failover @ 200 msgs/s", "deltapub_testbed_preset", "B2, the middle broker"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	if strings.Contains(tb.String(), "single 1→1") {
		t.Errorf("core rows without core runs:\n%s", tb.String())
	}
}

// The JetStream side of the reliable runs at a tiny size, when the pinned
// nats-server is installed (deltapub bench compare installs it; CI does
// not): every variant starts, creates its stream, and delivers every
// acknowledged publication.
func TestReliableJetStreamTiny(t *testing.T) {
	dir, err := NATSCacheDir()
	if err != nil {
		t.Skip(err)
	}
	bin := dir + "/nats-server"
	if !natsVersionOK(context.Background(), bin) {
		t.Skipf("no nats-server %s in %s", NATSVersion, dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var progress bytes.Buffer
	cfg := Config{Launcher: InProcessLauncher(), NATSServer: bin, Progress: &progress, Timeout: 40 * time.Second, SkipCore: true,
		Reliable: ReliableConfig{Messages: 300, Rate: 500, LatencyMsgs: 100, Durabilities: []string{"none", "fsync"}, SkipFailover: true}}
	rep, err := Run(ctx, cfg)
	if err != nil || rep.Failed() {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	if len(rep.Reliable) != 2+len(JSVariants) {
		t.Fatalf("%d reliable runs, want %d", len(rep.Reliable), 2+len(JSVariants))
	}
	for _, r := range rep.Reliable {
		if !r.Throughput.Complete || r.Throughput.Delivered != 300 || r.Latency.Lost != 0 {
			t.Errorf("%s: %+v %+v", r.Key, r.Throughput, r.Latency)
		}
	}
	if rep.JetStreamR3Ratio <= 0 || rep.JetStreamR3SyncRatio <= 0 {
		t.Errorf("ratios %v %v", rep.JetStreamR3Ratio, rep.JetStreamR3SyncRatio)
	}
}

// --readme: the block between the markers is replaced, the rest kept; a
// file without the markers is refused and left as it was.
func TestWriteMarkdownBlock(t *testing.T) {
	rep := &Report{NATSVersion: NATSVersion, Machine: Machine{CPUs: 2, Model: "test cpu"},
		NATS:     &Figures{Single: Throughput{Rate: 500_000}},
		Deltapub: Figures{Single: Throughput{Rate: 300_000}},
		Reliable: []ReliableRun{{Key: "deltapub_none", Label: "deltapub δ=2, none", Throughput: Throughput{Rate: 90_000}},
			{Key: "jetstream_r3_file", Label: "JetStream R3 file, default sync", Throughput: Throughput{Rate: 30_000}}},
		JetStreamR3Ratio: 3,
		FailoverPauseMs:  map[string]float64{"deltapub": 300, "jetstream_r3": 7000},
		FailoverLost:     map[string]int64{"deltapub": 0, "jetstream_r3": 0}, FailoverDuplicates: map[string]int64{},
	}
	dir := t.TempDir()
	path := dir + "/README.md"
	orig := "# title\n\n" + MarkdownBegin + " (regenerated) -->\nold table\n" + MarkdownEnd + "\n\nafter\n"
	if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMarkdownBlock(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	got := string(b)
	for _, want := range []string{"# title\n\n" + MarkdownBegin + " (regenerated) -->\n| figure |", "| 0.60 | ≥ 0.6 met |",
		"| 3.00 | ≥ 4 **missed** |", "| 0.04 | ≤ 0.2, 0 lost, 0 duplicates met |", "Machine: ", "test cpu", MarkdownEnd + "\n\nafter\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("block lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old table") {
		t.Errorf("old block kept:\n%s", got)
	}
	plain := dir + "/plain.md"
	os.WriteFile(plain, []byte("no markers\n"), 0o644)
	if err := rep.WriteMarkdownBlock(plain); err == nil || !strings.Contains(err.Error(), "no \""+MarkdownBegin) {
		t.Errorf("file without markers: %v", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "no markers\n" {
		t.Errorf("file without markers changed: %q", b)
	}
}
