package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseMetrics(t *testing.T) {
	in := `# HELP deltapub_peer_messages_in_total x
# TYPE deltapub_peer_messages_in_total counter
deltapub_peer_messages_in_total{type="Pub"} 10
deltapub_peer_messages_in_total{type="Heartbeat"} 5
deltapub_queue_length 3
deltapub_joined 1
garbage line
not_a_number NaN-ish
`
	m, err := ParseMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m.Total["deltapub_peer_messages_in_total"] != 15 || m.Total["deltapub_queue_length"] != 3 || m.Total["deltapub_joined"] != 1 {
		t.Errorf("totals %v", m.Total)
	}
	if m.Series[`deltapub_peer_messages_in_total{type="Pub"}`] != 10 || len(m.Series) != 4 {
		t.Errorf("series %v", m.Series)
	}
}

func TestParseMetricsLineTooLong(t *testing.T) {
	if _, err := ParseMetrics(strings.NewReader("x " + strings.Repeat("1", 2<<20) + "\n")); err == nil {
		t.Fatal("a 2 MiB line was accepted")
	}
}

func TestScrapeMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("deltapub_joined 1\n"))
	}))
	defer srv.Close()
	hc := &http.Client{Timeout: 2 * time.Second}
	addr := strings.TrimPrefix(srv.URL, "http://")
	m, err := ScrapeMetrics(hc, addr)
	if err != nil || m.Total["deltapub_joined"] != 1 {
		t.Fatalf("scrape: %v %v", m, err)
	}
	bad := httptest.NewServer(http.NotFoundHandler())
	defer bad.Close()
	if _, err := ScrapeMetrics(hc, strings.TrimPrefix(bad.URL, "http://")); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("a 404 answer gave %v", err)
	}
}
