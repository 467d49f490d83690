// Package loglimit rate-limits a JSON log: repeats of one line beyond a
// burst per window are counted and summarised in one line.
package loglimit

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

// Limiter rate-limits a broker's log: per line (its text without the
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
type Limiter struct {
	w       io.Writer
	out     zerolog.Logger
	burst   int
	window  time.Duration
	maxKeys int
	now     func() time.Time

	mu   sync.Mutex
	keys map[string]*lineWindow
	// next is the earliest end of a window (zero: none open): windows are
	// looked at only when one may be over.
	next time.Time
}

type lineWindow struct {
	start      time.Time
	n          int // lines in this window, written or not
	suppressed int
	level      zerolog.Level
	msg        string
}

// maxKeyLen bounds the part of a line that tells lines apart.
const maxKeyLen = 512

// New returns a limiter writing to w that lets burst identical lines per
// window through and tracks at most maxKeys distinct lines; the summaries
// go to out.
func New(w io.Writer, out zerolog.Logger, burst int, window time.Duration, maxKeys int) *Limiter {
	return &Limiter{w: w, out: out, burst: burst, window: window, maxKeys: maxKeys, now: time.Now, keys: map[string]*lineWindow{}}
}

var (
	timeField    = regexp.MustCompile(`"time":"[^"]*",?`)
	levelField   = regexp.MustCompile(`"level":"([a-z]+)"`)
	messageField = regexp.MustCompile(`"message":("(?:[^"\\]|\\.)*")`)
)

// Write takes one JSON log line: written through, or counted.
func (l *Limiter) Write(p []byte) (int, error) {
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
		w = &lineWindow{start: now, level: level}
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
func (l *Limiter) Flush(now time.Time, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked(now, all)
}

func (l *Limiter) flushLocked(now time.Time, all bool) {
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
func (l *Limiter) evictLocked() {
	var oldest string
	var ow *lineWindow
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

func (l *Limiter) summaryLocked(w *lineWindow, now time.Time) {
	if w.suppressed == 0 {
		return
	}
	d := now.Sub(w.start).Round(time.Millisecond)
	l.out.WithLevel(w.level).Int("repeated", w.suppressed).Str("repeated_message", w.msg).
		Msg(fmt.Sprintf("%s: repeated %d times in the last %v", w.msg, w.suppressed, d))
}

// Run writes the summaries of windows that end while nothing else is
// logged, until ctx ends; then every pending summary.
func (l *Limiter) Run(ctx context.Context) {
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
