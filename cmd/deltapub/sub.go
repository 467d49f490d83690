package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
)

func init() {
	register(command{name: "sub", summary: "subscribe and print deliveries as JSON lines", run: runSub})
}

const subUsage = `Usage: deltapub sub --broker ADDR [--count N] [--timeout D] FILTER

Subscribes with FILTER (PADRES syntax, e.g. "[class,eq,'STOCK'],[price,>,100]")
and prints exactly one JSON object per delivery on stdout, one per line:
  {"publisher":..,"epoch":..,"seq":..,"sub":..,"attrs":{..},"payload_bytes":..,
   "published_at":..,"received_at":..}
Confirmation, gap notices and errors go to stderr. Exits 0 after --count
deliveries (or, without --count, at the timeout or on SIGINT/SIGTERM); exits 1
when the timeout comes before --count deliveries, or on an error.

Flags:
`

// deliveryJSON is one line of deltapub sub's output.
type deliveryJSON struct {
	Publisher    string         `json:"publisher"`
	Epoch        uint64         `json:"epoch"`
	Seq          uint64         `json:"seq"`
	Sub          string         `json:"sub"`
	Attrs        map[string]any `json:"attrs"`
	PayloadBytes int            `json:"payload_bytes"`
	PublishedAt  time.Time      `json:"published_at"`
	ReceivedAt   time.Time      `json:"received_at"`
}

func runSub(args []string) int {
	fs := flag.NewFlagSet("sub", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, subUsage); fs.PrintDefaults() }
	broker := fs.String("broker", "", "edge broker `address` (required)")
	count := fs.Int("count", 0, "exit after `N` deliveries (0: no limit)")
	timeout := fs.Duration("timeout", 0, "give up after this `duration` (0: none)")
	tokenFile := fs.String("token-file", "", "`file` with the client token, if the broker requires one")
	noConfirm := fs.Bool("no-wait-confirm", false, "do not report the overlay-wide confirmation")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *broker == "" || fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "deltapub sub: need --broker ADDR and exactly one FILTER (see --help)")
		return 2
	}
	filter, err := matching.ParseFilter(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "deltapub sub:", err)
		return 2
	}
	token, err := readTokenFile(*tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deltapub sub:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	timedOut := func() bool { return false }
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
		timedOut = func() bool { return errors.Is(ctx.Err(), context.DeadlineExceeded) }
	}
	log := newLogger(os.Stderr, "warn", "console")
	c, err := client.Connect(ctx, *broker, client.Options{Token: token, Log: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "deltapub sub:", err)
		return 1
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, filter)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deltapub sub:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "subscribed %s to %s (accepted by the edge broker)\n", sub.ID(), filter)
	confirmed := sub.Confirmed()
	if *noConfirm {
		confirmed = nil
	}
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	defer out.Flush()
	enc := json.NewEncoder(out)
	n := 0
	for *count == 0 || n < *count {
		select {
		case <-confirmed:
			fmt.Fprintf(os.Stderr, "confirmed %s\n", sub.ID())
			confirmed = nil
		case d, ok := <-sub.C:
			if !ok {
				out.Flush()
				fmt.Fprintf(os.Stderr, "deltapub sub: subscription ended after %d deliveries: %v\n", n, sub.Err())
				return 1
			}
			if d.Gap != nil {
				g := d.Gap
				fmt.Fprintf(os.Stderr, "gap: publications %s/%d seq %d..%d may be lost (%s)\n", g.Source.Publisher, g.Source.Epoch, g.From, g.To, g.Reason)
				continue
			}
			if err := enc.Encode(deliveryJSON{
				Publisher: d.Pub.Publisher, Epoch: d.Pub.Epoch, Seq: d.Pub.Seq, Sub: d.Sub.String(),
				Attrs: attrsJSON(d.Attrs), PayloadBytes: len(d.Payload),
				PublishedAt: d.PublishedAt.UTC(), ReceivedAt: d.ReceivedAt.UTC(),
			}); err != nil {
				fmt.Fprintln(os.Stderr, "deltapub sub:", err)
				return 1
			}
			n++
			// Flush when nothing else is waiting: line-by-line output for
			// a reader that follows along, large writes under load.
			if len(sub.C) == 0 {
				out.Flush()
			}
		case <-ctx.Done():
			out.Flush()
			if *count > 0 && timedOut() {
				fmt.Fprintf(os.Stderr, "deltapub sub: timeout after %v: %d of %d deliveries\n", *timeout, n, *count)
				return 1
			}
			fmt.Fprintf(os.Stderr, "%d deliveries\n", n)
			return 0
		}
	}
	out.Flush()
	fmt.Fprintf(os.Stderr, "%d deliveries\n", n)
	return 0
}

// attrsJSON turns attributes into a JSON object: strings, integers and
// floats keep their types.
func attrsJSON(attrs []matching.Attr) map[string]any {
	m := make(map[string]any, len(attrs))
	for _, a := range attrs {
		switch a.Value.Kind {
		case matching.KindString:
			m[a.Name] = a.Value.Str
		case matching.KindInt:
			m[a.Name] = a.Value.Int
		case matching.KindFloat:
			m[a.Name] = a.Value.Float
		}
	}
	return m
}

// readTokenFile reads a client token file ("" → no token).
func readTokenFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}
