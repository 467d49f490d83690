package loglimit

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// limitedLogger is a JSON logger through a limiter on a fake clock.
func limitedLogger(burst int, window time.Duration, maxKeys int) (zerolog.Logger, *Limiter, *bytes.Buffer, *time.Time) {
	var buf bytes.Buffer
	l := New(&buf, zerolog.New(&buf), burst, window, maxKeys)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	return zerolog.New(l).With().Timestamp().Logger(), l, &buf, &now
}

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if ln == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("line %q: %v", ln, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLimiterCountsRepeats(t *testing.T) {
	log, _, buf, now := limitedLogger(3, time.Second, 16)
	for i := 0; i < 1000; i++ {
		log.Info().Str("peer", "B2").Msg("join retry")
		*now = now.Add(time.Millisecond / 2) // 1000 lines in 0.5 s
	}
	log.Warn().Msg("other") // a distinct line passes
	if got := lines(t, buf); len(got) != 4 || got[3]["message"] != "other" {
		t.Fatalf("before the window's end: %d lines %v", len(got), got)
	}
	// The window ends: the next line brings the summary first.
	*now = now.Add(time.Second)
	log.Info().Str("peer", "B2").Msg("join retry")
	got := lines(t, buf)
	if len(got) != 6 {
		t.Fatalf("after the window: %d lines %v", len(got), got)
	}
	sum := got[4]
	if sum["message"] != "join retry: repeated 997 times in the last 1.5s" || sum["repeated"] != float64(997) || sum["level"] != "info" {
		t.Fatalf("summary %v", sum)
	}
	// "other" had nothing suppressed: no summary; a new window lets the
	// line through.
	if got[5]["message"] != "join retry" {
		t.Fatalf("lines %v", got[4:])
	}
}

func TestLimiterLevelIsPartOfTheKey(t *testing.T) {
	log, _, buf, _ := limitedLogger(1, time.Second, 16)
	log.Info().Msg("x")
	log.Warn().Msg("x")
	log.Info().Msg("x") // suppressed
	if got := lines(t, buf); len(got) != 2 {
		t.Fatalf("%d lines: %v", len(got), got)
	}
}

func TestLimiterBoundedKeys(t *testing.T) {
	log, l, buf, _ := limitedLogger(1, time.Hour, 4)
	for i := 0; i < 100; i++ {
		log.Info().Msg("a") // suppressed after the first
		log.Info().Msgf("distinct %d", i)
	}
	l.mu.Lock()
	n := len(l.keys)
	l.mu.Unlock()
	if n > 4 {
		t.Fatalf("%d keys tracked, bound 4", n)
	}
	// Evicting "a" wrote its count: nothing is lost silently.
	if !strings.Contains(buf.String(), `"message":"a: repeated`) {
		t.Fatalf("no summary of the evicted key in %s", buf.String())
	}
}

func TestLimiterRunFlushesAtTheEnd(t *testing.T) {
	log, l, buf, _ := limitedLogger(1, time.Hour, 16)
	for i := 0; i < 10; i++ {
		log.Error().Msg("dial failed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return")
	}
	got := lines(t, buf)
	if len(got) != 2 || got[1]["message"] != "dial failed: repeated 9 times in the last 0s" {
		t.Fatalf("lines %v", got)
	}
}

func TestLimiterConcurrent(t *testing.T) {
	var buf syncBuffer
	l := New(&buf, zerolog.New(&buf), 2, time.Hour, 8)
	log := zerolog.New(l)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				log.Info().Msg("same")
			}
		}()
	}
	wg.Wait()
	l.Flush(time.Now(), true)
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 3 || !strings.Contains(out, "repeated 3998 times") {
		t.Fatalf("%d lines:\n%s", n, out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines of one message with other fields are other lines: they all pass
// (a link up to each of ten peers is ten events, not a loop).
func TestLimiterFieldsArePartOfTheKey(t *testing.T) {
	log, _, buf, _ := limitedLogger(1, time.Second, 64)
	for i := 0; i < 10; i++ {
		log.Info().Int("peer", i).Msg("link up")
	}
	log.Info().Int("peer", 3).Msg("link up") // the same line again: counted
	if got := lines(t, buf); len(got) != 10 {
		t.Fatalf("%d lines, want the 10 distinct ones: %v", len(got), got)
	}
}
