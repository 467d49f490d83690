package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// logLimiter rate-limits a broker's log: per (level, message) it lets the
// first burst lines of a window through and counts the rest, and when the
// window is over it writes one line "MESSAGE: repeated N times in the last
// W" instead. A broker whose join was retried in a tight loop wrote 470,000
// lines of the same two messages; with the limiter such a loop costs a few
// lines a second, and the count still shows how hard it looped.
//
// It is a zerolog hook (the message and level come without parsing the
// output, in every format): a line over the burst is discarded before it is
// written. The summaries go to out, the logger without the hook. Memory is
// bounded: at most maxKeys messages are tracked; a new one beyond that
// first ends the window of another (its summary is written then).
type logLimiter struct {
	out     zerolog.Logger
	burst   int
	window  time.Duration
	maxKeys int
	now     func() time.Time

	mu   sync.Mutex
	keys map[logKey]*logWindow
	// next is the earliest end of a window (zero: none open): windows are
	// looked at only when one may be over.
	next time.Time
}

type logKey struct {
	level zerolog.Level
	msg   string
}

type logWindow struct {
	start      time.Time
	n          int // lines in this window, written or not
	suppressed int
}

// The broker's limits: 5 lines of one message per 2 s, then a count.
const (
	logBurst   = 5
	logWindowD = 2 * time.Second
	logMaxKeys = 1024
)

func newLogLimiter(out zerolog.Logger, burst int, window time.Duration, maxKeys int) *logLimiter {
	return &logLimiter{out: out, burst: burst, window: window, maxKeys: maxKeys, now: time.Now, keys: map[logKey]*logWindow{}}
}

// Run is the zerolog hook: called for every event logged, before it is
// written.
func (l *logLimiter) Run(e *zerolog.Event, level zerolog.Level, msg string) {
	if level >= zerolog.FatalLevel || level == zerolog.NoLevel {
		return // the last words of a process, and unlevelled output, always
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked(now, false)
	k := logKey{level, msg}
	w := l.keys[k]
	if w == nil {
		if len(l.keys) >= l.maxKeys {
			l.evictLocked()
		}
		w = &logWindow{start: now}
		l.keys[k] = w
		if end := now.Add(l.window); l.next.IsZero() || end.Before(l.next) {
			l.next = end
		}
	}
	w.n++
	if w.n > l.burst {
		w.suppressed++
		e.Discard()
	}
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
		l.summaryLocked(k, w, now)
		delete(l.keys, k)
	}
}

// evictLocked ends the window of the oldest message tracked, to make room.
func (l *logLimiter) evictLocked() {
	var oldest logKey
	var ow *logWindow
	for k, w := range l.keys {
		if ow == nil || w.start.Before(ow.start) {
			oldest, ow = k, w
		}
	}
	if ow != nil {
		l.summaryLocked(oldest, ow, l.now())
		delete(l.keys, oldest)
	}
}

func (l *logLimiter) summaryLocked(k logKey, w *logWindow, now time.Time) {
	if w.suppressed == 0 {
		return
	}
	d := now.Sub(w.start).Round(time.Millisecond)
	l.out.WithLevel(k.level).Int("repeated", w.suppressed).Str("repeated_message", k.msg).
		Msg(fmt.Sprintf("%s: repeated %d times in the last %v", k.msg, w.suppressed, d))
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
