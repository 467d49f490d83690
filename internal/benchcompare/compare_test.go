package benchcompare

import (
	"bytes"
	"context"
	"encoding/json"
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
		"single 1→1", "300,000", "500,000", "0.60  ≥ 0.5 met",
		"two servers", "0.25  ≥ 0.5 MISSED",
		"3-broker chain B1→B3", "80,000",
		"fan-out 1→100", "0.90  ≥ 0.8 met",
		"latency p99", "2.25  ≤ 2 MISSED",
		"filtered, 10000 subs", "1.20  > 1 met",
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

// The deltapub side of every run at a tiny size, brokers in-process: the
// harness starts, loads, counts and stops them, and every expected
// delivery arrives (deltapub delivers exactly once).
func TestDeltapubSideTiny(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	var progress bytes.Buffer
	cfg := Config{
		Messages: 300, FanoutSubs: 3, FanoutMessages: 100,
		LatencyRate: 2000, LatencyMessages: 200,
		FilterSubs: 60, FilterConns: 4, FilterPubs: 300, Seed: 7,
		Timeout: 20 * time.Second, Launcher: InProcessLauncher(), Progress: &progress,
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	d := rep.Deltapub
	if len(d.Errors) > 0 {
		t.Fatalf("failed runs: %v\n%s", d.Errors, progress.String())
	}
	if rep.NATS != nil || rep.SingleRatio != 0 {
		t.Errorf("NATS figures without a NATS server: %+v", rep)
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
	if n := strings.Count(progress.String(), "\n"); n != 6 {
		t.Errorf("%d progress lines, want 6:\n%s", n, progress.String())
	}
}
