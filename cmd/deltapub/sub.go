package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
)

const subAbout = `Subscribes with FILTER (PADRES syntax, e.g. "[class,eq,'STOCK'],[price,>,100]")
and prints exactly one JSON object per delivery on stdout, one per line:
  {"publisher":..,"epoch":..,"seq":..,"sub":..,"attrs":{..},"payload_bytes":..,
   "published_at":..,"received_at":..}
Confirmation, gap notices and errors go to stderr. With --durable NAME --state
FILE the subscription is durable: it resumes from the checkpoint token in FILE
(if FILE exists) on whichever broker of --broker A,B,C it reaches, moving to
the next one when its broker fails; FILE is rewritten atomically after each
delivery printed, and gaps are printed on stdout as
  {"gap":{"publisher":..,"epoch":..,"from":..,"to":..,"reason":..}}
Exits 0 after --count
deliveries (or, without --count, at the timeout or on SIGINT/SIGTERM); exits 1
when the --timeout comes before --count deliveries, or on an error.
`

// appendDeliveryJSON appends one line of deltapub sub's output: a JSON
// object with the keys publisher, epoch, seq, sub, attrs (in publication
// order; strings, integers and floats keep their types), payload_bytes,
// published_at and received_at (RFC 3339, UTC, nanoseconds). Written by
// hand: reflection-based encoding was the subscriber's bottleneck, and a
// subscriber that cannot keep up is disconnected by its broker.
func appendDeliveryJSON(b []byte, d *client.Delivery) []byte {
	b = append(b, `{"publisher":`...)
	b = appendJSONString(b, d.Pub.Publisher)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendUint(b, d.Pub.Epoch, 10)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, d.Pub.Seq, 10)
	b = append(b, `,"sub":`...)
	b = appendJSONString(b, d.Sub.String())
	b = append(b, `,"attrs":{`...)
	for i, a := range d.Attrs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, a.Name)
		b = append(b, ':')
		switch a.Value.Kind {
		case matching.KindString:
			b = appendJSONString(b, a.Value.Str)
		case matching.KindInt:
			b = strconv.AppendInt(b, a.Value.Int, 10)
		case matching.KindFloat:
			f := a.Value.Float
			if math.IsInf(f, 0) || math.IsNaN(f) {
				b = append(b, "null"...) // not representable in JSON
			} else {
				n0 := len(b)
				b = strconv.AppendFloat(b, f, 'g', -1, 64)
				if !bytes.ContainsAny(b[n0:], ".e") {
					b = append(b, ".0"...) // keep it a float for readers that care
				}
			}
		default:
			b = append(b, "null"...)
		}
	}
	b = append(b, `},"payload_bytes":`...)
	b = strconv.AppendInt(b, int64(len(d.Payload)), 10)
	b = append(b, `,"published_at":"`...)
	b = d.PublishedAt.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","received_at":"`...)
	b = d.ReceivedAt.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, "\"}\n"...)
	return b
}

// appendJSONString appends s as a JSON string (invalid UTF-8 becomes
// U+FFFD, as encoding/json does).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
		case r == 0x2028 || r == 0x2029:
			b = append(b, `\u202`...)
			b = append(b, hex[r&0xf])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

func subCmd(fs *flag.FlagSet) func([]string) int {
	broker := fs.String("broker", "", "edge broker `addresses` (required; host:port over QUIC, tcp://host:port or tls://host:port to a broker's --tcp-listen; A,B,C: on to the next when the current fails)")
	durableName := fs.String("durable", "", "durable subscription `name` (needs --state)")
	stateFile := fs.String("state", "", "`file` holding the durable subscription's checkpoint token")
	failTimeout := fs.Duration("failure-timeout", 0, "a broker silent this `long` counts as failed (0: 5s with --durable or several brokers, else the transport's 30s)")
	count := fs.Int("count", 0, "exit after `N` deliveries (0: no limit)")
	timeout := fs.Duration("timeout", 0, "give up after this `duration` (0: none)")
	tokenFile := fs.String("token-file", "", "`file` with the client token, if the broker requires one")
	noConfirm := fs.Bool("no-wait-confirm", false, "do not report the overlay-wide confirmation")
	return func(args []string) int {
		if *broker == "" {
			fmt.Fprintln(os.Stderr, "deltapub sub: --broker ADDR is required")
			return 2
		}
		filter, err := matching.ParseFilter(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sub:", err)
			return 2
		}
		token, err := readTokenFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sub:", err)
			return 2
		}
		if (*durableName == "") != (*stateFile == "") {
			fmt.Fprintln(os.Stderr, "deltapub sub: --durable NAME and --state FILE go together")
			return 2
		}
		var ckpt []byte
		if *stateFile != "" {
			if ckpt, err = readState(*stateFile, *durableName); err != nil {
				fmt.Fprintln(os.Stderr, "deltapub sub:", err)
				return 2
			}
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
		moves := *durableName != "" || strings.Contains(*broker, ",")
		c, err := client.Connect(ctx, *broker, client.Options{Token: token, Log: log,
			Reconnect: moves, FailureTimeout: failureTimeout(*failTimeout, moves)})
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub sub:", err)
			return 1
		}
		defer c.Close()
		var sub *client.Subscription
		if *durableName != "" {
			sub, err = c.SubscribeDurable(ctx, *durableName, filter, ckpt)
			if err == nil {
				defer func() {
					if err := writeState(*stateFile, sub.Token()); err != nil { // silence since the last delivery
						fmt.Fprintln(os.Stderr, "deltapub sub:", err)
					}
				}()
			}
		} else {
			sub, err = c.Subscribe(ctx, filter)
		}
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
		var line []byte
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
				if d.Gap != nil && d.Token != nil {
					line = appendGapJSON(line[:0], d.Gap)
					if err := printAndSave(out, line, *stateFile, sub, d.Token); err != nil {
						fmt.Fprintln(os.Stderr, "deltapub sub:", err)
						return 1
					}
					continue
				}
				if d.Gap != nil {
					g := d.Gap
					fmt.Fprintf(os.Stderr, "gap: publications %s/%d seq %d..%d may be lost (%s)\n", g.Source.Publisher, g.Source.Epoch, g.From, g.To, g.Reason)
					continue
				}
				line = appendDeliveryJSON(line[:0], &d)
				if d.Token != nil {
					if err := printAndSave(out, line, *stateFile, sub, d.Token); err != nil {
						fmt.Fprintln(os.Stderr, "deltapub sub:", err)
						return 1
					}
					n++
					continue
				}
				if _, err := out.Write(line); err != nil {
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
