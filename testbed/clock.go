// Clock offsets of the hosts against the controller, measured over each
// host's ssh connection: the controller sends a line, `deltapub testbed
// clock` on the host answers its time, and the round trip bounds the
// error (the answer was taken somewhere within it).

package testbed

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// clockRounds is how many round trips each host is asked; the one with the
// shortest round trip is kept (the least room for queueing in it).
const (
	clockRounds   = 32
	maxClockLines = 4096 // ClockServe answers at most this many lines
)

// ClockServe answers each line read from r with this machine's time (Unix
// nanoseconds), for at most maxClockLines lines: the host side of the
// clock offset measurement (`deltapub testbed clock`).
func ClockServe(r io.Reader, w io.Writer) error {
	sc := bufio.NewScanner(io.LimitReader(r, 64*maxClockLines))
	bw := bufio.NewWriter(w)
	for n := 0; n < maxClockLines && sc.Scan(); n++ {
		fmt.Fprintf(bw, "%d\n", time.Now().UnixNano())
		if err := bw.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

// ClockOffset is a host's clock against the controller's: host time =
// controller time + Offset, within ±Uncertainty.
type ClockOffset struct {
	Host          string  `json:"host"`
	SSH           string  `json:"ssh"`
	Address       string  `json:"address"`
	Brokers       int     `json:"brokers"`
	OffsetMs      float64 `json:"offset_ms"`
	UncertaintyMs float64 `json:"uncertainty_ms"`
	RTTMs         float64 `json:"rtt_ms"`
	Err           string  `json:"error,omitempty"`
}

// estimateOffset picks, from round trips (sent, host time, received), the
// one with the shortest round trip: the host read its clock within it, so
// the offset is host − midpoint, ± half the round trip.
func estimateOffset(sent, host, recv []time.Time) (offset, uncertainty, rtt time.Duration) {
	best := -1
	for i := range sent {
		if best < 0 || recv[i].Sub(sent[i]) < recv[best].Sub(sent[best]) {
			best = i
		}
	}
	if best < 0 {
		return 0, 0, 0
	}
	rtt = recv[best].Sub(sent[best])
	mid := sent[best].Add(rtt / 2)
	return host[best].Sub(mid), rtt / 2, rtt
}

// measureClock runs the round trips with one host.
func measureClock(ctx context.Context, h *sshHost) (ClockOffset, error) {
	ctx, cancel := context.WithTimeout(ctx, sshCmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", h.sshArgs(false, shq(h.bin)+" testbed clock")...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return ClockOffset{}, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return ClockOffset{}, err
	}
	if err := cmd.Start(); err != nil {
		return ClockOffset{}, err
	}
	defer func() { in.Close(); _ = cmd.Wait() }()
	r := bufio.NewReader(outp)
	var sent, host, recv []time.Time
	for i := 0; i < clockRounds; i++ {
		t0 := time.Now()
		if _, err := io.WriteString(in, "t\n"); err != nil {
			return ClockOffset{}, err
		}
		line, err := readLine(r, 5*time.Second)
		t1 := time.Now()
		if err != nil {
			return ClockOffset{}, fmt.Errorf("clock of host %s: %v", h.spec.Name, err)
		}
		ns, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return ClockOffset{}, fmt.Errorf("clock of host %s: bad answer %q", h.spec.Name, line)
		}
		sent, host, recv = append(sent, t0), append(host, time.Unix(0, ns)), append(recv, t1)
	}
	off, unc, rtt := estimateOffset(sent, host, recv)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return ClockOffset{Host: h.spec.Name, SSH: h.spec.SSH, Address: h.spec.Address, OffsetMs: ms(off), UncertaintyMs: ms(unc), RTTMs: ms(rtt)}, nil
}

// measureClocks measures every host, one after the other (parallel ssh
// sessions would queue behind each other on a small controller).
func measureClocks(ctx context.Context, l *sshLauncher) []ClockOffset {
	names := make([]string, 0, len(l.hosts))
	for n := range l.hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []ClockOffset
	for _, n := range names {
		c, err := measureClock(ctx, l.hosts[n])
		if err != nil {
			c = ClockOffset{Host: n, SSH: l.hosts[n].spec.SSH, Address: l.hosts[n].spec.Address, Err: err.Error()}
		}
		out = append(out, c)
	}
	return out
}

// recordClocks writes OUT/hosts.json (each host, its brokers, its clock)
// and a note per host.
func recordClocks(rec *Recorder, out string, p *Plan, cs []ClockOffset) {
	n := map[string]int{}
	for _, h := range p.Placement {
		n[h]++
	}
	for i := range cs {
		cs[i].Brokers = n[cs[i].Host]
		c := cs[i]
		if c.Err != "" {
			rec.Note(fmt.Sprintf("host %s: %d brokers, clock not measured: %s", c.Host, c.Brokers, c.Err))
			continue
		}
		rec.Note(fmt.Sprintf("host %s: %d brokers, clock %+.3f ms ± %.3f ms against the controller (rtt %.3f ms)", c.Host, c.Brokers, c.OffsetMs, c.UncertaintyMs, c.RTTMs))
	}
	if out != "" {
		if b, err := json.MarshalIndent(cs, "", "  "); err == nil {
			_ = os.WriteFile(filepath.Join(out, "hosts.json"), append(b, '\n'), 0o644)
		}
	}
}
