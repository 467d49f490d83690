package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// logLimiter rate-limits a broker's log: per line (its text without the
// time stamp: the same message with the same fields) it lets the first
// burst lines of a window through and counts the rest, and when the window
// is over it writes one line "MESSAGE: repeated N times in the last W"
// instead. A broker whose join was retried in a tight loop wrote 470,000
// lines of the same two messages; with the limiter such a loop costs a few
// lines a second, the count still shows how hard it looped, and distinct
// lines (a link up to each of ten peers) all pass.
//
// It is the JSON logger's writer (zerolog writes one event per Write), in
// front of the output (the console writer, or the file as it is). The
// summaries go to out, a logger straight to the output. Memory is bounded:
// at most maxKeys lines are tracked (each key at most maxKeyLen bytes); a
// new one beyond that first ends the window of another (its summary is
// written then).
type logLimiter struct {
	w       io.Writer
	out     zerolog.Logger
	burst   int
	window  time.Duration
	maxKeys int
	now     func() time.Time

	mu   sync.Mutex
	keys map[string]*logWindow
	// next is the earliest end of a window (zero: none open): windows are
	// looked at only when one may be over.
	next time.Time
}

type logWindow struct {
	start      time.Time
	n          int // lines in this window, written or not
	suppressed int
	level      zerolog.Level
	msg        string
}

// The broker's limits: 5 identical lines per 2 s, then a count.
const (
	logBurst   = 5
	logWindowD = 2 * time.Second
	logMaxKeys = 1024
	maxKeyLen  = 512
)

func newLogLimiter(w io.Writer, out zerolog.Logger, burst int, window time.Duration, maxKeys int) *logLimiter {
	return &logLimiter{w: w, out: out, burst: burst, window: window, maxKeys: maxKeys, now: time.Now, keys: map[string]*logWindow{}}
}

var (
	timeField    = regexp.MustCompile(`"time":"[^"]*",?`)
	levelField   = regexp.MustCompile(`"level":"([a-z]+)"`)
	messageField = regexp.MustCompile(`"message":("(?:[^"\\]|\\.)*")`)
)

// Write takes one JSON log line: written through, or counted.
func (l *logLimiter) Write(p []byte) (int, error) {
	level := zerolog.NoLevel
	if m := levelField.FindSubmatch(p); m != nil {
		if lv, err := zerolog.ParseLevel(string(m[1])); err == nil {
			level = lv
		}
	}
	if level >= zerolog.FatalLevel || level == zerolog.NoLevel {
		return l.w.Write(p) // the last words of a process, and unlevelled output, always
	}
	key := timeField.ReplaceAll(p, nil)
	if len(key) > maxKeyLen {
		key = key[:maxKeyLen]
	}
	now := l.now()
	l.mu.Lock()
	l.flushLocked(now, false)
	w := l.keys[string(key)]
	if w == nil {
		if len(l.keys) >= l.maxKeys {
			l.evictLocked()
		}
		w = &logWindow{start: now, level: level}
		if m := messageField.FindSubmatch(p); m != nil {
			_ = json.Unmarshal(m[1], &w.msg)
		}
		l.keys[string(key)] = w
		if end := now.Add(l.window); l.next.IsZero() || end.Before(l.next) {
			l.next = end
		}
	}
	w.n++
	pass := w.n <= l.burst
	if !pass {
		w.suppressed++
	}
	l.mu.Unlock()
	if !pass {
		return len(p), nil
	}
	return l.w.Write(p)
}

// Flush writes the summaries of the windows that are over at now (all of
// them if all is set) and forgets them.
func (l *logLimiter) Flush(now time.Time, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked(now, all)
}

func (l *logLimiter) flushLocked(now time.Time, all bool) {
	if !all && (l.next.IsZero() || now.Before(l.next)) {
		return
	}
	l.next = time.Time{}
	for k, w := range l.keys {
		end := w.start.Add(l.window)
		if !all && now.Before(end) {
			if l.next.IsZero() || end.Before(l.next) {
				l.next = end
			}
			continue
		}
		l.summaryLocked(w, now)
		delete(l.keys, k)
	}
}

// evictLocked ends the window of the oldest message tracked, to make room.
func (l *logLimiter) evictLocked() {
	var oldest string
	var ow *logWindow
	for k, w := range l.keys {
		if ow == nil || w.start.Before(ow.start) {
			oldest, ow = k, w
		}
	}
	if ow != nil {
		l.summaryLocked(ow, l.now())
		delete(l.keys, oldest)
	}
}

func (l *logLimiter) summaryLocked(w *logWindow, now time.Time) {
	if w.suppressed == 0 {
		return
	}
	d := now.Sub(w.start).Round(time.Millisecond)
	l.out.WithLevel(w.level).Int("repeated", w.suppressed).Str("repeated_message", w.msg).
		Msg(fmt.Sprintf("%s: repeated %d times in the last %v", w.msg, w.suppressed, d))
}

// run writes the summaries of windows that end while nothing else is
// logged, until ctx ends; then every pending summary.
func (l *logLimiter) run(ctx context.Context) {
	t := time.NewTicker(l.window / 2)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.Flush(l.now(), false)
		case <-ctx.Done():
			l.Flush(l.now(), true)
			return
		}
	}
}
