package testbed

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The fuzzer's durable draws, from a random stream of their own, so that
// every seed's other draws are those of the fuzz without them. In one run
// of two the brokers log their publications (durability fsync, their data
// directories kept across restarts; in one of those runs in four,
// durability memory: a restart loses the log), the publishers' edges retain them
// 30 s (or, one run in four, 300 ms: retention Gaps happen), and one or
// two durable subscribers join the plain ones, each at a broker the faults
// crash and restart (one in two) or anywhere. A durable subscriber whose
// edge crashes comes back at that edge once it has restarted, resuming
// from what it held there (docs/durable.md "An edge that restarts"), or
// at once at the anchor subscriber's edge, which no fault touches; one
// whose edge leaves comes back at the anchor's; one whose edge no fault
// touches disconnects once and comes back at the same edge or the
// anchor's. A comeback that would not fit before the end of publishing is
// left out: that subscriber ends the run away, owed nothing after it left.
type fuzzDurable struct {
	r          *rand.Rand
	retain     string
	durability string
}

// drawFuzzDurable returns the durable draws of seed's run (nil: none).
func drawFuzzDurable(seed int64) *fuzzDurable {
	r := rand.New(rand.NewPCG(uint64(seed), 0xd0ab1e))
	if r.IntN(2) == 0 {
		return nil
	}
	z := &fuzzDurable{r: r, retain: "30s", durability: "fsync"}
	if r.IntN(4) == 0 {
		z.retain = "300ms"
	}
	// A stream of its own again: the draws above and after stay as they were.
	if rand.New(rand.NewPCG(uint64(seed), 0x6d656d)).IntN(4) == 0 {
		z.durability = "memory"
	}
	return z
}

// overlay is what the durable draws add to the [overlay] table.
func (z *fuzzDurable) overlay() string {
	return fmt.Sprintf("durability = %q\nretain = %q\n", z.durability, z.retain)
}

// subscribers writes the durable subscribers, named from S<first> on, and
// their disconnects and comebacks as [[faults]] tables; it returns their
// description. names are the brokers, acts the drawn faults, anchor the
// edge no fault touches, last the time every action must come before.
func (z *fuzzDurable) subscribers(b *strings.Builder, first int, names []string, acts []fuzzAction, anchor string, last time.Duration) string {
	r := z.r
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond }
	var restarted []string
	for _, a := range acts {
		if a.kind == ActRestart && !slices.Contains(restarted, a.b) {
			restarted = append(restarted, a.b)
		}
	}
	type comeback struct {
		at          time.Duration
		disconnect  bool
		sub, broker string
	}
	var plan []comeback
	var desc []string
	for i := range 1 + r.IntN(2) {
		name := fmt.Sprintf("S%d", first+i)
		e := names[r.IntN(len(names))]
		if len(restarted) > 0 && r.IntN(2) == 0 {
			e = restarted[r.IntN(len(restarted))]
		}
		filter := "[class,eq,'STOCK'],[symbol,eq,{choice(AAPL,MSFT,IBM,ORCL)}]"
		if r.IntN(2) == 0 {
			filter = "[class,eq,'STOCK'],[price,<,{uniform(30,70)}]"
		}
		fmt.Fprintf(b, "[[subscribers]]  # %s\nbrokers = [%q]\nfilter = %q\ndurable = true\n\n", name, e, filter)
		d := fmt.Sprintf("durable %s at %s", name, e)
		var mine []fuzzAction
		for _, a := range acts {
			if a.b == e || a.peer == e {
				mine = append(mine, a)
			}
		}
		firstDown := time.Duration(-1)
		var lastRestart time.Duration
		left := false
		for _, a := range mine {
			switch a.kind {
			case ActCrash, ActLeave:
				if firstDown < 0 {
					firstDown = a.at
				}
				left = left || a.kind == ActLeave
			case ActRestart:
				lastRestart = a.at
			}
		}
		var c comeback
		span := last - fuzzFirstFault - 3*time.Second // for a disconnect and its comeback
		switch {
		case firstDown < 0 && (len(mine) > 0 || span <= 0):
			desc = append(desc, d) // frozen or cut only, or a run too short: it stays
			continue
		case firstDown < 0:
			// No fault touches its edge: it goes away and comes back.
			at := fuzzFirstFault + ms(0, int(span/time.Millisecond))
			to := e
			if r.IntN(2) == 0 {
				to = anchor
			}
			plan = append(plan, comeback{at: at, disconnect: true, sub: name})
			c = comeback{at: at + ms(300, 1500), sub: name, broker: to}
			d += fmt.Sprintf(", away at %s, back at %s", fmtMs(at), to)
		case !left && mine[len(mine)-1].kind == ActRestart && r.IntN(2) == 0:
			// Back at its edge once that has restarted and rejoined (a
			// broker not joined yet refuses subscriptions).
			c = comeback{at: lastRestart + ms(2500, 3500), sub: name, broker: e}
			d += ", back at its restarted edge"
		default:
			c = comeback{at: firstDown + ms(200, 800), sub: name, broker: anchor}
			d += ", back at " + anchor
		}
		if c.at >= last {
			d += " (not before the end: away)"
			continue
		}
		plan = append(plan, c)
		desc = append(desc, d)
	}
	slices.SortStableFunc(plan, func(x, y comeback) int { return int(x.at - y.at) })
	for _, c := range plan {
		if c.disconnect {
			fmt.Fprintf(b, "[[faults]]\nat = %q\ndisconnect = [%q]\n\n", fmtMs(c.at), c.sub)
		} else {
			fmt.Fprintf(b, "[[faults]]\nat = %q\nreconnect = { subscriber = %q, broker = %q }\n\n", fmtMs(c.at), c.sub, c.broker)
		}
	}
	return strings.Join(desc, "; ")
}
