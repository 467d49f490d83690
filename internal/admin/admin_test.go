package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "deltapub_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	healthy := false
	s, err := Start(Options{
		Addr:     "127.0.0.1:0",
		Gatherer: reg,
		State: func(ctx context.Context) (any, error) {
			return map[string]any{"id": "B1", "queue": 7}, nil
		},
		Health: func(ctx context.Context) error {
			if !healthy {
				return errors.New("not joined")
			}
			return nil
		},
		Log: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	base := "http://" + s.Addr()

	if code, body := get(t, base+"/healthz"); code != 503 || !strings.Contains(body, "not joined") {
		t.Errorf("/healthz before joining: %d %q", code, body)
	}
	healthy = true // no request in flight: no race
	if code, body := get(t, base+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "deltapub_test_total 3") {
		t.Errorf("/metrics: %d %q", code, body)
	}
	code, body := get(t, base+"/state")
	var st map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st["id"] != "B1" {
		t.Errorf("/state: %d %q", code, body)
	}
	if code, _ := get(t, base+"/debug/pprof/"); code != 200 {
		t.Errorf("/debug/pprof/: %d", code)
	}
	if code, _ := get(t, base+"/nope"); code != 404 {
		t.Errorf("/nope: %d", code)
	}
}
