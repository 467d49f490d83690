package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay/runtime"
)

const ctlAbout = `Asks the broker at --admin for one of:
  state      the broker's full state as JSON (what /state serves)
  topology   the broker's (δ+1)-neighbourhood map; --dot prints it for
             Graphviz (dot -Tsvg), suspected brokers in red, gone ones grey
  subs       routing table size and local subscriptions
  queue      message queue length and DACK watermarks
  peers      links: tree or bypass, up, suspected, silence
`

func ctlCmd(fs *flag.FlagSet) func([]string) int {
	adminAddr := fs.String("admin", "", "the broker's admin `address` (host:port or URL)")
	dot := fs.Bool("dot", false, "with topology: print Graphviz")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	return func(args []string) int {
		if *adminAddr == "" {
			fmt.Fprintln(os.Stderr, "deltapub ctl: --admin ADDR is required")
			return 2
		}
		what := args[0]
		if *dot && what != "topology" {
			fmt.Fprintln(os.Stderr, "deltapub ctl: --dot goes with topology")
			return 2
		}
		base := *adminAddr
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		raw, err := fetch(ctx, base+"/state")
		if err != nil {
			fmt.Fprintln(os.Stderr, "deltapub ctl:", err)
			return 1
		}
		if what == "state" {
			os.Stdout.Write(raw)
			return 0
		}
		var st runtime.State
		if err := json.Unmarshal(raw, &st); err != nil {
			fmt.Fprintln(os.Stderr, "deltapub ctl: /state is not a broker state:", err)
			return 1
		}
		switch what {
		case "topology":
			if *dot {
				fmt.Print(topologyDot(&st))
			} else {
				printTopology(os.Stdout, &st)
			}
		case "subs":
			fmt.Printf("broker %s: %d routing table entries, %d local subscriptions, %d client sessions\n",
				st.ID, st.Subs, st.LocalSubs, st.Runtime.Sessions)
		case "queue":
			printQueue(os.Stdout, &st)
		case "peers":
			printPeers(os.Stdout, &st)
		default:
			fmt.Fprintf(os.Stderr, "deltapub ctl: unknown request %q (want state, topology, subs, queue or peers)\n", what)
			return 2
		}
		return 0
	}
}

// fetch GETs url; a non-200 answer is an error carrying the body.
func fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

func brokerMark(st *runtime.State, id message.BrokerID) string {
	switch {
	case id == st.ID:
		return "self"
	case slices.Contains(st.Gone, id):
		return "gone"
	case slices.Contains(st.Suspected, id):
		return "suspected"
	}
	return ""
}

func printTopology(w io.Writer, st *runtime.State) {
	fmt.Fprintf(w, "broker %s (epoch %d), δ = %d, joined %v, %d brokers in its map\n",
		st.ID, st.Epoch, st.Runtime.Delta, st.Joined, len(st.Map))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BROKER\tPARENT\tADDR\tEPOCH\tSTATE")
	for _, n := range st.Map {
		parent := string(n.Parent)
		if parent == "" {
			parent = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", n.ID, parent, n.Addr, n.Epoch, brokerMark(st, n.ID))
	}
	tw.Flush()
}

// topologyDot renders the map for Graphviz: tree edges solid, bypass links
// dashed, this broker bold, suspected brokers red, gone brokers grey.
func topologyDot(st *runtime.State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "// deltapub topology as seen by %s (epoch %d)\ngraph deltapub {\n  node [shape=box, fontname=\"Helvetica\"];\n", st.ID, st.Epoch)
	known := map[message.BrokerID]bool{}
	for _, n := range st.Map {
		known[n.ID] = true
		attrs := []string{fmt.Sprintf("label=%q", fmt.Sprintf("%s\n%s", n.ID, n.Addr))}
		switch brokerMark(st, n.ID) {
		case "self":
			attrs = append(attrs, "style=bold", "penwidth=2")
		case "suspected":
			attrs = append(attrs, "color=red", "fontcolor=red", `xlabel="suspected"`)
		case "gone":
			attrs = append(attrs, "color=grey", "fontcolor=grey", "style=dashed", `xlabel="gone"`)
		}
		fmt.Fprintf(&b, "  %q [%s];\n", n.ID, strings.Join(attrs, ", "))
	}
	for _, n := range st.Map {
		if n.Parent != "" {
			fmt.Fprintf(&b, "  %q -- %q;\n", n.Parent, n.ID)
		}
	}
	for _, p := range st.Bypasses {
		if !known[p] {
			fmt.Fprintf(&b, "  %q [label=%q];\n", p, p)
		}
		fmt.Fprintf(&b, "  %q -- %q [style=dashed, color=blue, label=\"bypass\"];\n", st.ID, p)
	}
	b.WriteString("}\n")
	return b.String()
}

func printQueue(w io.Writer, st *runtime.State) {
	fmt.Fprintf(w, "broker %s: %d publications queued (input queue %d)\n", st.ID, st.QueueLen, st.Runtime.InputQueue)
	keys := make([]string, 0, len(st.Arrived))
	for k := range st.Arrived {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tARRIVED\tDISCARDED\tLAG")
	for _, k := range keys {
		a, d := st.Arrived[k], st.Discarded[k]
		lag := uint64(0)
		if a > d {
			lag = a - d
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", k, a, d, lag)
	}
	tw.Flush()
}

func printPeers(w io.Writer, st *runtime.State) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tKIND\tUP\tSUSPECTED\tSILENT_TICKS")
	for _, l := range st.Links {
		kind := "bypass"
		if l.Tree {
			kind = "tree"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%d\n", l.Peer, kind, l.Up, l.Suspected, l.Silent)
	}
	tw.Flush()
	if len(st.Runtime.Dialing) > 0 {
		fmt.Fprintf(w, "dialing: %v\n", st.Runtime.Dialing)
	}
}
