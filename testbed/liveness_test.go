package testbed

import (
	"github.com/deltapub/deltapub/internal/admin"
	"strings"
	"testing"
	"time"
)

// withReadings adds liveness readings to an ideal run of goodBase (B2 and
// B4 crash at 4s, B2 restarts at 6s; the run ends at 13s): every broker
// sends heartbeats at 100/s; storm, if set, adds JoinRequests at that rate
// to B2 from its restart on; rejoinAt is when B2 says it is joined again
// (< 0: never).
func withReadings(t *testing.T, storm int64, rejoinAt time.Duration) (*Plan, *Recorder) {
	t.Helper()
	p := mustParse(t, goodBase)
	r := idealRun(t, p, nil)
	sent := map[string]map[string]int64{}
	inc := map[string]int{}
	until := max(p.Spec.End(), 6*time.Second+rejoinBound(p).After+time.Second)
	for at := time.Duration(0); at <= until; at += time.Second {
		for _, b := range p.Topo.Names {
			down := (b == "B4" && at >= 4*time.Second) || (b == "B2" && at >= 4*time.Second && at < 6*time.Second)
			if down {
				if sent[b] != nil {
					sent[b], inc[b] = nil, inc[b]+1
				}
				r.Reading(BrokerReading{At: at, Broker: b})
				continue
			}
			if sent[b] == nil {
				sent[b] = map[string]int64{}
			}
			sent[b]["Heartbeat"] += 100
			joined := true
			if b == "B2" && at >= 6*time.Second {
				if storm > 0 {
					sent[b]["JoinRequest"] += storm
				}
				joined = rejoinAt >= 0 && at >= rejoinAt
			}
			c := map[string]int64{}
			for k, v := range sent[b] {
				c[k] = v
			}
			r.Reading(BrokerReading{At: at, Broker: b, Control: c, Joined: joined, Incarnation: inc[b]})
		}
	}
	return p, r
}

func TestLivenessQuietRunPasses(t *testing.T) {
	p, r := withReadings(t, 0, 7*time.Second)
	v := Judge(p, r)
	if v.Verdict != "PASS" || len(v.Storms) != 0 || len(v.NotRejoined) != 0 {
		t.Fatalf("quiet run: verdict %s, reasons %q", v.Verdict, v.Reasons)
	}
}

func TestLivenessStormFails(t *testing.T) {
	p, r := withReadings(t, 20000, 7*time.Second)
	v := Judge(p, r)
	if v.Verdict != "FAIL" || len(v.Storms) != 1 {
		t.Fatalf("storm: verdict %s, storms %+v, reasons %q", v.Verdict, v.Storms, v.Reasons)
	}
	s := v.Storms[0]
	if s.Broker != "B2" || s.Type != "JoinRequest" || s.Rate != 20000 {
		t.Fatalf("storm %+v, want B2 JoinRequest at 20000/s", s)
	}
	if !strings.Contains(strings.Join(v.Reasons, "\n"), "storm: B2 sent JoinRequest at 20000/s") {
		t.Fatalf("reasons %q", v.Reasons)
	}
	// A recovery's burst is not a storm: a few hundred in one window.
	p, r = withReadings(t, 300, 7*time.Second)
	if v := Judge(p, r); v.Verdict != "PASS" {
		t.Fatalf("burst of 300/s: %q", v.Reasons)
	}
}

func TestLivenessNotRejoinedFails(t *testing.T) {
	p, r := withReadings(t, 0, -1)
	v := Judge(p, r)
	if v.Verdict != "FAIL" || len(v.NotRejoined) != 1 || !strings.Contains(v.NotRejoined[0], "rejoin: B2 restarted at 6s had not rejoined") {
		t.Fatalf("never rejoined: verdict %s, not rejoined %q", v.Verdict, v.NotRejoined)
	}
	// Rejoined after the bound (2 × gone_after + 10 failure timeouts
	// after the restart, the last fault: 6s + 12.5s) is a failure too.
	p, r = withReadings(t, 0, 19*time.Second)
	v = Judge(p, r)
	if v.Verdict != "FAIL" || len(v.NotRejoined) != 1 || !strings.Contains(v.NotRejoined[0], "rejoined only at 19s") {
		t.Fatalf("late rejoin: verdict %s, not rejoined %q", v.Verdict, v.NotRejoined)
	}
	// Not judged before its bound passed: a run observed until 13s.
	p, r = withReadings(t, 0, -1)
	r.observedUntil = 13 * time.Second
	if v := Judge(p, r); len(v.NotRejoined) != 0 {
		t.Fatalf("judged before the bound: %q", v.NotRejoined)
	}
}

func TestLivenessRejoinWait(t *testing.T) {
	p := mustParse(t, goodBase)
	r := NewRecorder()
	r.FaultApplied(0, 4*time.Second, nil)
	r.FaultApplied(1, 6*time.Second, nil)
	r.Reading(BrokerReading{At: 10 * time.Second, Broker: "B2"})
	if d, wait := r.rejoinWait(p); !wait || d != 6*time.Second+rejoinBound(p).After {
		t.Fatalf("rejoinWait = %v %v, want true at 6s + bound", d, wait)
	}
	r.Reading(BrokerReading{At: 11 * time.Second, Broker: "B2", Joined: true})
	if _, wait := r.rejoinWait(p); wait {
		t.Fatal("still waiting after B2 joined")
	}
}

func TestControlByType(t *testing.T) {
	m, err := admin.ParseMetrics(strings.NewReader("# HELP x\n" +
		`deltapub_control_messages_sent_total{type="Heartbeat"} 12` + "\n" +
		`deltapub_control_messages_sent_total{type="JoinRequest"} 3` + "\n" +
		"deltapub_joined 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := controlByType(m)
	if len(got) != 2 || got["Heartbeat"] != 12 || got["JoinRequest"] != 3 || m.Total[controlMetric] != 15 {
		t.Fatalf("control by type %v (total %v)", got, m.Total[controlMetric])
	}
}
