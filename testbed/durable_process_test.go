package testbed

import (
	"context"
	"testing"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
)

// TestProcessDurablePHBCrash runs three broker processes with data
// directories. The publisher's edge B1 is cut off from the others, so that
// what it acknowledges stays in its queue and its log only; then it is
// killed with SIGKILL and restarted with its data directory. Every
// subscriber must get all N publications exactly once, in order: they can
// only come from B1's log. With durability fsync the kill comes right
// after the last acknowledgement; with durability write, 300 ms after it
// (the log is synced every 100 ms: pebble keeps an append without sync in
// its own buffers, where a kill lost it).
func TestProcessDurablePHBCrash(t *testing.T) {
	for _, c := range []struct {
		durability string
		wait       time.Duration
	}{{"fsync", 0}, {"write", 300 * time.Millisecond}} {
		t.Run(c.durability, func(t *testing.T) { testPHBCrash(t, c.durability, c.wait) })
	}
}

func testPHBCrash(t *testing.T, durability string, wait time.Duration) {
	const n = 40
	pc := newProcCluster(t, []string{"B1", "B2", "B3"}, "--durability", durability)
	addr, ctl, brokerLogs := pc.addr, pc.ctl, pc.logs
	pc.start("B1")
	pc.start("B2", "B1")
	pc.start("B3", "B2", "B1")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	filter, err := matching.ParseFilter("[class,eq,'a']")
	if err != nil {
		t.Fatal(err)
	}
	var subs []*client.Subscription
	for _, b := range []string{"B2", "B3"} {
		c, err := client.Connect(ctx, addr[b], client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := c.Subscribe(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WaitConfirmed(ctx); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}

	// B1 alone: its publications go nowhere until it is restarted.
	ctl("cut", "B1", "B2")
	ctl("cut", "B2", "B1")
	ctl("cut", "B1", "B3")
	ctl("cut", "B3", "B1")
	pub, err := client.Connect(ctx, addr["B1"], client.Options{Publisher: "P1", Epoch: 7})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		attrs := []matching.Attr{{Name: "class", Value: matching.Value{Kind: matching.KindString, Str: "a"}}, {Name: "n", Value: matching.Value{Kind: matching.KindInt, Int: int64(i)}}}
		if err := pub.Publish(ctx, matching.Publication{Attrs: attrs}); err != nil {
			t.Fatalf("publication %d: %v\n%s", i, err, brokerLogs())
		}
	}
	time.Sleep(wait)
	pc.kill("B1") // after the last acknowledgement
	pub.Close()
	ctl("heal", "B2", "B1")
	ctl("heal", "B3", "B1")
	pc.start("B1", "B2", "B3")

	for k, s := range subs {
		for want := uint64(1); want <= n; want++ {
			select {
			case d, ok := <-s.C:
				if !ok {
					t.Fatalf("subscriber %d: subscription ended after %d\n%s", k, want-1, brokerLogs())
				}
				if d.Pub.Publisher != "P1" || d.Pub.Seq != want {
					t.Fatalf("subscriber %d: got %v, want seq %d (exactly once, in order)", k, d.Pub, want)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("subscriber %d: only %d of %d acknowledged publications arrived\n%s", k, want-1, n, brokerLogs())
			}
		}
	}
	// Nothing more: no duplicate arrives late.
	time.Sleep(300 * time.Millisecond)
	for k, s := range subs {
		select {
		case d := <-s.C:
			t.Fatalf("subscriber %d: extra delivery %v", k, d.Pub)
		default:
		}
	}
}

// A durable subscriber gets the publication its publisher's restarted
// edge offers again, on real processes (it lost it before the late-answer
// rule in docs/durable.md; the simulator never did).
func TestDurableSubGetsARepublishedPub(t *testing.T) {
	t.Parallel()
	bin := needBinary(t)
	p, sum, dir := runExample(t, "examples/durable-sub-gets-a-republished-pub.toml", "process", Options{Binary: bin})
	if sum.Verdict.Verdict != "PASS" || sum.Verdict.Lost != 0 {
		t.Fatalf("seed %d: %s\n%s", p.Spec.Seed, FormatSummary(sum, dir), logs(dir))
	}
}
