package benchcompare

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
)

// The block of a Markdown file that WriteMarkdownBlock replaces: from the
// line holding MarkdownBegin to the line holding MarkdownEnd, both kept.
const (
	MarkdownBegin = "<!-- bench-compare:begin"
	MarkdownEnd   = "<!-- bench-compare:end -->"
)

// WriteMarkdown writes the ratios of the report as a Markdown table (one
// row per figure: deltapub, the peer, the ratio, the goal and whether it
// is met), then the failover runs and the machine line.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	b.WriteString("| figure | deltapub | peer | ratio | goal |\n|---|---:|---:|---:|---|\n")
	if n := r.NATS; n != nil && !r.CoreSkipped {
		d := r.Deltapub
		chain := 0.0
		if d.Chain3 != nil {
			chain = d.Chain3.Rate
		}
		for _, x := range []struct {
			name   string
			dp, nt float64
			g      goal
		}{
			{"single 1→1, msgs/s", d.Single.Rate, n.Single.Rate, goalSingle},
			{"two servers (B1→B2; A→C), msgs/s", d.TwoServer.Rate, n.TwoServer.Rate, goalTwoServer},
			{fmt.Sprintf("fan-out 1→%d, deliveries/s", d.Fanout.Subs), d.Fanout.Rate, n.Fanout.Rate, goalFanout},
			{fmt.Sprintf("latency p99 @ %d/s, µs", d.Latency.Rate), d.Latency.P99Us, n.Latency.P99Us, goalP99},
			{fmt.Sprintf("filtered, %d subs, deliveries/s", d.Filtered.Subs), d.Filtered.Rate, n.Filtered.Rate, goalFiltered},
		} {
			rv := ratio(x.dp, x.nt)
			fmt.Fprintf(&b, "| %s (core NATS %s) | %s | %s | %.2f | %s %s |\n", x.name, r.NATSVersion, num(x.dp), num(x.nt), rv, x.g, verdict(x.g.met(rv)))
		}
		fmt.Fprintf(&b, "| 3-broker chain B1→B3, msgs/s | %s | — | — | |\n", num(chain))
		if s := d.FalseSuspicions; s != nil {
			fmt.Fprintf(&b, "| false suspicions in the core runs (no broker killed) | %d of %d broker runs | — | — | |\n", s.Count, s.Brokers)
		}
	}
	if r.JetStreamR3Ratio > 0 {
		fmt.Fprintf(&b, "| acknowledged, δ = 2 durability none vs JetStream R3 file default sync, msgs/s | %s | %s | %.2f | ≥ 4 %s |\n",
			num(r.reliableRate("deltapub_none")), num(r.reliableRate("jetstream_r3_file")), r.JetStreamR3Ratio, verdict(r.JetStreamR3Ratio >= 4))
	}
	if r.JetStreamR3SyncRatio > 0 {
		fmt.Fprintf(&b, "| acknowledged, durability fsync vs JetStream R3 file `sync_interval: always`, msgs/s | %s | %s | %.2f | ≥ 2 %s |\n",
			num(r.reliableRate("deltapub_fsync")), num(r.reliableRate("jetstream_r3_file_sync")), r.JetStreamR3SyncRatio, verdict(r.JetStreamR3SyncRatio >= 2))
	}
	dp, okDP := r.FailoverPauseMs["deltapub"]
	if js, ok := r.FailoverPauseMs["jetstream_r3"]; ok && okDP && js > 0 {
		rv := ratio(dp, js)
		fmt.Fprintf(&b, "| failover pause, kill -9 on the path, ms (lost, duplicates) | %s (%d, %d) | %s (%d, %d) | %.2f | ≤ 0.2, 0 lost, 0 duplicates %s |\n",
			num(dp), r.FailoverLost["deltapub"], r.FailoverDuplicates["deltapub"], num(js), r.FailoverLost["jetstream_r3"], r.FailoverDuplicates["jetstream_r3"],
			rv, verdict(rv <= 0.2 && r.FailoverLost["deltapub"] == 0 && r.FailoverDuplicates["deltapub"] == 0))
	}
	if len(r.Reliable) > 0 {
		b.WriteString("\n| acknowledged publish → consume | msgs/s | p50 µs | p99 µs |\n|---|---:|---:|---:|\n")
		for _, x := range r.Reliable {
			if x.Error != "" {
				fmt.Fprintf(&b, "| %s | failed: %s | | |\n", x.Label, mdCell(x.Error))
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.Label, num(x.Throughput.Rate), num(x.Latency.P50Us), num(x.Latency.P99Us))
		}
	}
	if len(r.Failover) > 0 {
		f0 := r.Failover[0]
		fmt.Fprintf(&b, "\n| failover at %d msgs/s, kill -9 at %d s | killed | pause ms | lost (of them unacknowledged) | duplicates | error |\n|---|---|---:|---:|---:|---|\n", f0.Rate, f0.KillAtS)
		for _, f := range r.Failover {
			if f.Error != "" && f.Sent == 0 {
				fmt.Fprintf(&b, "| %s | failed | | | | %s |\n", f.System, mdCell(f.Error))
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %d (%d) | %d | %s |\n", f.System, f.Killed, num(f.PauseMs), f.Lost, f.GaveUp, f.Duplicates, mdCell(f.Error))
		}
	}
	m := r.Machine
	clients := ""
	if r.ClientTransport != "" {
		clients = "; deltapub's clients over " + r.ClientTransport
	}
	fmt.Fprintf(&b, "\nMachine: %s UTC, %d CPUs, %s, %s, %s, nats-server %s; load average %s at the start, %s at the end; %.0f s%s.\n",
		r.Started.Format("2006-01-02 15:04"), m.CPUs, m.Model, m.GoVersion, m.OS, r.NATSVersion, m.LoadStart, m.LoadEnd, r.Seconds, clients)
	_, err := io.WriteString(w, b.String())
	return err
}

// mdCell makes s safe inside a Markdown table cell (one line, no pipe).
func mdCell(s string) string {
	return strings.NewReplacer("|", "/", "\n", " ").Replace(strings.TrimSpace(s))
}

// WriteMarkdownBlock replaces the block between the marker lines of the
// Markdown file at path with the report's table. A file without both
// markers, in order, is left untouched and the error says so.
func (r *Report) WriteMarkdownBlock(path string) error {
	old, i, j, err := markdownBlock(path)
	if err != nil {
		return err
	}
	var table bytes.Buffer
	if err := r.WriteMarkdown(&table); err != nil {
		return err
	}
	var out bytes.Buffer
	out.Write(old[:i])
	out.Write(table.Bytes())
	out.Write(old[j:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path) // atomic: a failed write leaves the old file
}

// CheckMarkdownBlock checks that the file at path has the block (before a
// run that takes minutes).
func CheckMarkdownBlock(path string) error {
	_, _, _, err := markdownBlock(path)
	return err
}

// markdownBlock reads path and finds the block: the table goes between
// old[:i] (up to the end of the begin marker's line) and old[j:].
func markdownBlock(path string) (old []byte, i, j int, err error) {
	if old, err = os.ReadFile(path); err != nil {
		return nil, 0, 0, fmt.Errorf("benchcompare: %w", err)
	}
	b := bytes.Index(old, []byte(MarkdownBegin))
	j = bytes.Index(old, []byte(MarkdownEnd))
	if b < 0 || j < b {
		return nil, 0, 0, fmt.Errorf("benchcompare: %s has no %q … %q block", path, MarkdownBegin+" -->", MarkdownEnd)
	}
	eol := bytes.IndexByte(old[b:], '\n')
	if eol < 0 || b+eol > j {
		return nil, 0, 0, fmt.Errorf("benchcompare: %s: the begin marker must end its line", path)
	}
	return old, b + eol + 1, j, nil
}
