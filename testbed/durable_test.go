package testbed

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/sim"
)

// TestSimDurable runs examples/durable.toml in sim mode with the real
// core: the durable subscribers are owed everything across the disconnect,
// the reconnect elsewhere and their edge's crash, and get it.
func TestSimDurable(t *testing.T) {
	p, err := Load("examples/durable.toml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := Run(context.Background(), p, "sim", dir, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := sum.Verdict
	if v.Verdict != "PASS" || v.ExpectedDeliveries == 0 {
		t.Fatalf("%s", FormatSummary(sum, dir))
	}
	// The durable subscribers are owed what was published while they were
	// away: more required deliveries than an excluded subscriber would have.
	if v.Lost != 0 || v.Duplicates != 0 || v.Reordered != 0 {
		t.Fatalf("%+v", v)
	}
}

// TestSimDurableOracleCatchesADrop: a core that drops the 30th delivery
// to a durable session of each broker must FAIL the durable rule.
func TestSimDurableOracleCatchesADrop(t *testing.T) {
	p, err := Load("examples/durable.toml")
	if err != nil {
		t.Fatal(err)
	}
	RegisterBackend("sim-drop-durable", func(Options) Backend {
		return simBackend{factory: sim.DurableFaultFactory(true, 30)}
	})
	sum, err := Run(context.Background(), p, "sim-drop-durable", t.TempDir(), Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := sum.Verdict; v.Verdict != "FAIL" || v.Lost == 0 {
		t.Fatalf("a dropped durable delivery passed: %+v", v)
	}
}

func TestDurablePlanErrors(t *testing.T) {
	base := strings.Split(mustRead(t, "examples/durable.toml"), "[[faults]]")[0]
	for _, c := range []struct{ add, want string }{
		{"[[faults]]\nat = \"5s\"\ndisconnect = [\"S3\"]\n", "not a durable subscriber"},
		{"[[faults]]\nat = \"5s\"\nreconnect = { subscriber = \"S1\", broker = \"B3\" }\n", "still connected"},
		{"[[faults]]\nat = \"5s\"\ndisconnect = [\"S1\"]\n[[faults]]\nat = \"6s\"\ndisconnect = [\"S1\"]\n", "not connected"},
		{"[[faults]]\nat = \"5s\"\ndisconnect = [\"S1\"]\n[[faults]]\nat = \"6s\"\nreconnect = { subscriber = \"S1\", broker = \"B99\" }\n", "unknown broker"},
		{"[[faults]]\nat = \"5s\"\ncrash = [\"B3\"]\ndisconnect = [\"S1\"]\n[[faults]]\nat = \"6s\"\nreconnect = { subscriber = \"S1\", broker = \"B3\" }\n", "down then"},
	} {
		_, err := Parse("d.toml", []byte(base+c.add))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.add, err, c.want)
		}
	}
	noLog := strings.Replace(base, "durability = \"fsync\"", "durability = \"none\"", 1)
	if _, err := Parse("d.toml", []byte(noLog)); err == nil || !strings.Contains(err.Error(), "need the publication log") {
		t.Errorf("durable without a log: error %v", err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestInprocDurable runs examples/durable.toml with brokers of this
// process and real clients (client.SubscribeDurable; a disconnect closes
// the client, a reconnect resumes with its token at another broker):
// PASS.
func TestInprocDurable(t *testing.T) {
	t.Parallel()
	_, sum, dir := runExample(t, "examples/durable.toml", "inproc", Options{})
	v := sum.Verdict
	if v.Verdict != "PASS" || v.ExpectedDeliveries == 0 || v.Lost != 0 || v.Duplicates != 0 || v.Reordered != 0 {
		t.Fatalf("%s", FormatSummary(sum, dir))
	}
}

// TestOracleDurableLogLostBeforeCatchup: a durable subscriber away while
// its publisher's edge keeps the publications in memory only, and back
// just before that edge crashes and restarts without them, is not owed
// what it missed (its catch-up had nothing to read); with the log on disk
// the same losses fail the run.
func TestOracleDurableLogLostBeforeCatchup(t *testing.T) {
	plan := func(durability string) *Plan {
		return mustParse(t, `name = "lost-log"
seed = 5
duration = "8s"
[overlay]
delta = 1
durability = "`+durability+`"
retain = "30s"
[topology]
kind = "chain"
brokers = 3
[[publishers]]
brokers = ["B3"]
rate = 20
attrs = { class = "'T'", n = "seq()" }
[[subscribers]]
brokers = ["B1"]
filter = "[class,eq,'T']"
durable = true
[[faults]]
at = "2s"
crash = ["B1"]
[[faults]]
at = "3s"
restart = ["B1"]
[[faults]]
at = "5s"
reconnect = { subscriber = "S1", broker = "B1" }
[[faults]]
at = "5100ms"
crash = ["B3"]
[[faults]]
at = "6s"
restart = ["B3"]
`)
	}
	for _, c := range []struct {
		durability string
		pass       bool
	}{{"memory", true}, {"fsync", false}} {
		p := plan(c.durability)
		// S1 gets nothing from its edge's crash to its reconnect, then
		// everything live: the catch-up found the publisher's edge
		// without its log (memory), or failed (fsync).
		r := idealRun(t, p, nil)
		for _, pr := range r.pubList {
			if pr.At >= 5*time.Second {
				r.Delivered(Delivery{Subscriber: 0, Sub: 0, Pub: pr.ID, PublishedAt: pr.At, At: pr.At + 2*time.Millisecond})
			}
		}
		v := Judge(p, r)
		if got := v.Verdict == "PASS"; got != c.pass || v.ExpectedDeliveries == 0 {
			t.Errorf("durability %s: verdict %s, lost %d of %d, want pass=%v", c.durability, v.Verdict, v.Lost, v.ExpectedDeliveries, c.pass)
		}
	}
}
