package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
)

const pubAbout = `Publishes PUBLICATION, in PADRES form ("[class,'STOCK'],[price,100.3]") or JSON
form ('{"class":"STOCK","price":100.3}'), --count times at --rate per second,
waits for the edge broker's acknowledgements and reports on stdout how many
were acknowledged. With --count, publication i carries the attribute n = i
(1, 2, 3, ...) so that runs are checkable. Exits 0 when every publication was
acknowledged, 1 otherwise.
`

func pubCmd(fs *flag.FlagSet) func([]string) int {
	broker := fs.String("broker", "", "edge broker `addresses` (required; host:port over QUIC, tcp://host:port or tls://host:port to a broker's --tcp-listen; A,B,C: on to the next when the current fails, resuming the sequence)")
	failTimeout := fs.Duration("failure-timeout", 0, "a broker silent this `long` counts as failed (0: 5s with several brokers, else the transport's 30s)")
	count := fs.Int("count", 0, "publish `N` publications numbered n = 1..N (0: one publication, unnumbered)")
	rate := fs.Float64("rate", 0, "publications per second (0: as fast as acknowledgements allow)")
	payloadSize := fs.Int("payload-size", 0, "opaque payload of `B` bytes per publication")
	timeout := fs.Duration("timeout", 0, "give up after this `duration` (0: the publishing time at --rate plus 30s)")
	tokenFile := fs.String("token-file", "", "`file` with the client token, if the broker requires one")
	publisher := fs.String("publisher", "", "publisher `name` (default: random)")
	inFlight := fs.Int("in-flight", 1024, "unacknowledged publications allowed at once")
	return func(args []string) int {
		if *broker == "" {
			fmt.Fprintln(os.Stderr, "deltapub pub: --broker ADDR is required")
			return 2
		}
		switch {
		case *count < 0:
			fmt.Fprintln(os.Stderr, "deltapub pub: --count must be ≥ 0")
			return 2
		case *rate < 0:
			fmt.Fprintln(os.Stderr, "deltapub pub: --rate must be ≥ 0")
			return 2
		case *payloadSize < 0 || *payloadSize > 1<<20:
			fmt.Fprintln(os.Stderr, "deltapub pub: --payload-size out of range [0, 1 MiB]")
			return 2
		case *inFlight < 1:
			fmt.Fprintln(os.Stderr, "deltapub pub: --in-flight must be ≥ 1")
			return 2
		}
		pub, err := parsePublication(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub pub:", err)
			return 2
		}
		token, err := readTokenFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub pub:", err)
			return 2
		}
		n := max(*count, 1)
		limit := *timeout
		if limit == 0 {
			limit = 30 * time.Second
			if *rate > 0 {
				limit += time.Duration(float64(n) / *rate * float64(time.Second))
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()

		c, err := client.Connect(ctx, *broker, client.Options{
			Token: token, Publisher: *publisher, MaxInFlight: *inFlight,
			Reconnect:      strings.Contains(*broker, ","),
			FailureTimeout: failureTimeout(*failTimeout, strings.Contains(*broker, ",")),
			Log:            newLogger(os.Stderr, "warn", "console"),
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub pub:", err)
			return 1
		}
		defer c.Close()
		if *payloadSize > 0 {
			pub.Payload = make([]byte, *payloadSize)
			for i := range pub.Payload {
				pub.Payload[i] = byte('a' + i%26)
			}
		}
		start := time.Now()
		// One goroutine collects the outcomes in publication order (the
		// broker acknowledges in order); the channel holds at most what the
		// client allows in flight, so memory stays bounded for any --count.
		pending := make(chan (<-chan error), *inFlight)
		type tally struct {
			acked int
			first error
		}
		tallied := make(chan tally, 1)
		go func() {
			var t tally
			for done := range pending {
				var err error
				select {
				case err = <-done:
				case <-ctx.Done():
					err = ctx.Err()
				}
				if err == nil {
					t.acked++
				} else if t.first == nil {
					t.first = err
				}
			}
			tallied <- t
		}()
		var sendErr error
		for i := 1; i <= n; i++ {
			if *rate > 0 {
				// Pace against the start time, not the previous send, so the
				// average rate holds even when one send waited.
				due := start.Add(time.Duration(float64(i-1) / *rate * float64(time.Second)))
				if d := time.Until(due); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
					}
				}
			}
			p := pub
			if *count > 0 {
				p = withAttr(pub, "n", matching.Int(int64(i)))
			}
			done, err := c.PublishAsync(ctx, p)
			if err != nil {
				sendErr = err
				break
			}
			pending <- done
		}
		close(pending)
		t := <-tallied
		acked, firstErr := t.acked, t.first
		elapsed := time.Since(start)
		fmt.Printf("acknowledged %d of %d publications in %.3fs (publisher %s, epoch %d)\n", acked, n, elapsed.Seconds(), c.Publisher(), c.Epoch())
		if sendErr == nil {
			sendErr = firstErr
		}
		if acked < n {
			if sendErr != nil {
				fmt.Fprintln(os.Stderr, "deltapub pub:", sendErr)
			}
			return 1
		}
		return 0
	}
}

// parsePublication reads the PADRES form, or the JSON form when the text
// starts with '{'.
func parsePublication(s string) (matching.Publication, error) {
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") {
		return matching.ParsePublicationJSON([]byte(t))
	}
	return matching.ParsePublication(s)
}

// withAttr returns a copy of p with attribute name set to v (replaced if
// present, appended otherwise).
func withAttr(p matching.Publication, name string, v matching.Value) matching.Publication {
	attrs := make([]matching.Attr, 0, len(p.Attrs)+1)
	for _, a := range p.Attrs {
		if a.Name != name {
			attrs = append(attrs, a)
		}
	}
	attrs = append(attrs, matching.Attr{Name: name, Value: v})
	return matching.Publication{Attrs: attrs, Payload: p.Payload}
}
