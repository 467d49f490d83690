package traffic

import (
	"strings"
	"testing"
	"time"
)

func TestStormsFlagsALoopAndNotABurst(t *testing.T) {
	var readings []Reading
	total := map[string]map[string]int64{"B1": {}, "B2": {}}
	for s := 1; s <= 10; s++ {
		at := time.Duration(s) * time.Second
		total["B1"]["Heartbeat"] += 100
		total["B2"]["Heartbeat"] += 100
		if s == 6 {
			total["B1"]["StateRequest"] += 400 // a recovery burst: legitimate
		}
		if s >= 7 {
			total["B2"]["JoinRequest"] += 20000 // an unpaced retry loop
		}
		for _, b := range []string{"B1", "B2"} {
			c := map[string]int64{}
			for k, v := range total[b] {
				c[k] = v
			}
			readings = append(readings, Reading{At: at, Broker: b, Counts: c})
		}
	}
	got := Storms(DefaultBound(), Windows(readings), 5*time.Second)
	if len(got) != 1 || got[0].Broker != "B2" || got[0].Type != "JoinRequest" || got[0].Rate != 20000 {
		t.Fatalf("storms %+v, want one: B2 JoinRequest at 20000/s", got)
	}
	if !strings.Contains(got[0].String(), "B2 sent JoinRequest at 20000/s") {
		t.Fatalf("text %q", got[0])
	}
}

func TestWindowsRestartCountsAnew(t *testing.T) {
	s := Windows([]Reading{
		{At: time.Second, Broker: "B1", Counts: map[string]int64{"DAck": 50}},
		{At: 2 * time.Second, Broker: "B1", Counts: map[string]int64{"DAck": 7}}, // restarted
	})
	if len(s) != 2 || s[1].Count != 7 {
		t.Fatalf("samples %+v", s)
	}
}

func TestNotRejoined(t *testing.T) {
	r := Rejoin{After: 5 * time.Second}
	got := r.NotRejoined([]Restart{
		{Broker: "B1", At: 10 * time.Second, JoinedAt: 11 * time.Second},
		{Broker: "B2", At: 10 * time.Second, JoinedAt: -1},
		{Broker: "B3", At: 10 * time.Second, JoinedAt: 18 * time.Second},
		{Broker: "B4", At: 28 * time.Second, JoinedAt: -1}, // not judged: the run ended first
	}, 12*time.Second, 30*time.Second)
	if len(got) != 2 || !strings.Contains(got[0], "B2") || !strings.Contains(got[1], "B3") {
		t.Fatalf("got %q", got)
	}
}
