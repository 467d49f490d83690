package storage

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/deltapub/deltapub/message"
)

var (
	srcA = message.Source{Publisher: "a", Epoch: 7}
	srcB = message.Source{Publisher: "b", Epoch: 7}
)

// filterLogs runs body against both logs; reopen returns the log as a
// restarted broker finds it after a clean close.
func filterLogs(t *testing.T, body func(t *testing.T, l FilterLog, reopen func() FilterLog)) {
	t.Run("memory", func(t *testing.T) {
		l := NewMemoryFilterLog()
		body(t, l, func() FilterLog { l.Close(); return l })
	})
	t.Run("pebble", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "filter")
		l, err := OpenPebbleFilterLog(path)
		if err != nil {
			t.Fatal(err)
		}
		cur := l
		t.Cleanup(func() { cur.Close() })
		body(t, l, func() FilterLog {
			if err := cur.Close(); err != nil {
				t.Fatal(err)
			}
			if cur, err = OpenPebbleFilterLog(path); err != nil {
				t.Fatal(err)
			}
			return cur
		})
	})
}

func register(t *testing.T, l FilterLog, names ...string) []SubKey {
	t.Helper()
	keys := make([]SubKey, len(names))
	for i, n := range names {
		k, err := l.Register(n)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	return keys
}

func mustAppend(t *testing.T, l FilterLog, sync bool, recs ...FilterRecord) {
	t.Helper()
	if err := l.Append(recs, sync); err != nil {
		t.Fatal(err)
	}
}

func wantRead(t *testing.T, l FilterLog, src message.Source, sub SubKey, after uint64, limit int, want FilterRead) {
	t.Helper()
	got, err := l.Read(src, sub, after, limit)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Seqs, want.Seqs) || got.From != want.From || got.UpTo != want.UpTo {
		t.Fatalf("Read(%s, %d, after %d, limit %d) = %+v, want %+v", src.Publisher, sub, after, limit, got, want)
	}
}

func TestFilterLogChainsAndReopen(t *testing.T) {
	filterLogs(t, func(t *testing.T, l FilterLog, reopen func() FilterLog) {
		k := register(t, l, "x", "y", "z")
		x, y, z := k[0], k[1], k[2]
		if again := register(t, l, "y"); again[0] != y {
			t.Fatalf("y registered again as %d, was %d", again[0], y)
		}
		// Two sources interleaved; y's chain skips x's and z's records.
		mustAppend(t, l, true,
			FilterRecord{srcA, 1, []SubKey{x}},
			FilterRecord{srcB, 1, []SubKey{y}},
			FilterRecord{srcA, 2, []SubKey{y, x}},
			FilterRecord{srcA, 4, []SubKey{z}},
			FilterRecord{srcA, 5, []SubKey{x, y, z, y}}, // a repeated key counts once
		)
		mustAppend(t, l, false, FilterRecord{srcA, 9, nil}) // silence up to 9
		check := func(l FilterLog) {
			t.Helper()
			wantRead(t, l, srcA, x, 0, 100, FilterRead{Seqs: []uint64{1, 2, 5}, From: 0, UpTo: 9})
			wantRead(t, l, srcA, y, 0, 100, FilterRead{Seqs: []uint64{2, 5}, From: 0, UpTo: 9})
			wantRead(t, l, srcA, z, 2, 100, FilterRead{Seqs: []uint64{4, 5}, From: 2, UpTo: 9})
			wantRead(t, l, srcA, y, 5, 100, FilterRead{From: 5, UpTo: 9})
			wantRead(t, l, srcB, y, 0, 100, FilterRead{Seqs: []uint64{1}, From: 0, UpTo: 1})
			wantRead(t, l, srcB, x, 0, 100, FilterRead{From: 0, UpTo: 1})
			// Nothing known of an unknown source, or after the horizon.
			wantRead(t, l, message.Source{Publisher: "c"}, x, 3, 100, FilterRead{From: 3, UpTo: 3})
			wantRead(t, l, srcA, x, 12, 100, FilterRead{From: 12, UpTo: 12})
			if st := l.Stats(); st.Records != 5 || st.Bytes != 5*8+16*(1+1+2+1+3) || st.Streams != 2 || st.Subs != 3 {
				t.Fatalf("stats %+v", st)
			}
		}
		check(l)
		l = reopen()
		check(l)
		if again := register(t, l, "z"); again[0] != z {
			t.Fatalf("z after reopen is %d, was %d", again[0], z)
		}
		mustAppend(t, l, true, FilterRecord{srcA, 10, []SubKey{x}})
		wantRead(t, l, srcA, x, 2, 100, FilterRead{Seqs: []uint64{5, 10}, From: 2, UpTo: 10})
		// A forgotten name's key is not given again, even after a reopen.
		if err := l.Forget("x"); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, l, true)
		l = reopen()
		if w := register(t, l, "w"); w[0] == x || w[0] == y || w[0] == z {
			t.Fatalf("new name got a used key %d", w[0])
		}
		if err := l.Append([]FilterRecord{{srcA, 11, []SubKey{x}}}, true); err == nil {
			t.Fatal("a forgotten key was appended")
		}
		wantRead(t, l, srcA, y, 0, 100, FilterRead{Seqs: []uint64{2, 5}, From: 0, UpTo: 10})
	})
}

func TestFilterLogBatchLimit(t *testing.T) {
	filterLogs(t, func(t *testing.T, l FilterLog, _ func() FilterLog) {
		k := register(t, l, "x", "y")
		var recs []FilterRecord
		for seq := uint64(1); seq <= 10; seq++ {
			recs = append(recs, FilterRecord{srcA, seq, []SubKey{k[seq%2]}}) // x on even seqs, y on odd
		}
		mustAppend(t, l, true, recs...)
		// The oldest max come first; UpTo stops at the last returned, and
		// the next read carries on from there.
		wantRead(t, l, srcA, k[0], 0, 2, FilterRead{Seqs: []uint64{2, 4}, From: 0, UpTo: 4})
		wantRead(t, l, srcA, k[0], 4, 2, FilterRead{Seqs: []uint64{6, 8}, From: 4, UpTo: 8})
		wantRead(t, l, srcA, k[0], 8, 2, FilterRead{Seqs: []uint64{10}, From: 8, UpTo: 10})
		wantRead(t, l, srcA, k[1], 0, 5, FilterRead{Seqs: []uint64{1, 3, 5, 7, 9}, From: 0, UpTo: 10})
		wantRead(t, l, srcA, k[1], 0, 1, FilterRead{Seqs: []uint64{1}, From: 0, UpTo: 1})
		if _, err := l.Read(srcA, k[0], 0, 0); err == nil {
			t.Fatal("a read of max 0 was answered")
		}
	})
}

func TestFilterLogReleaseAndStarts(t *testing.T) {
	filterLogs(t, func(t *testing.T, l FilterLog, reopen func() FilterLog) {
		x := register(t, l, "x")[0]
		// A stream answers from its first record on.
		mustAppend(t, l, true, FilterRecord{srcA, 3, []SubKey{x}}, FilterRecord{srcA, 5, []SubKey{x}}, FilterRecord{srcA, 8, []SubKey{x}})
		wantRead(t, l, srcA, x, 0, 100, FilterRead{Seqs: []uint64{3, 5, 8}, From: 2, UpTo: 8})
		// A subscription registered now is known only from the horizon on.
		y := register(t, l, "y")[0]
		mustAppend(t, l, true, FilterRecord{srcA, 9, []SubKey{x, y}}, FilterRecord{srcB, 4, []SubKey{y}})
		wantRead(t, l, srcA, y, 0, 100, FilterRead{Seqs: []uint64{9}, From: 8, UpTo: 9})
		wantRead(t, l, srcB, y, 0, 100, FilterRead{Seqs: []uint64{4}, From: 3, UpTo: 4})
		// Release drops records; a read from before answers after it, its
		// chain cut where the released records were.
		if err := l.Release(srcA, 5); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, l, true, FilterRecord{srcA, 11, []SubKey{x}})
		check := func(l FilterLog) {
			t.Helper()
			wantRead(t, l, srcA, x, 0, 100, FilterRead{Seqs: []uint64{8, 9, 11}, From: 5, UpTo: 11})
			wantRead(t, l, srcA, x, 8, 100, FilterRead{Seqs: []uint64{9, 11}, From: 8, UpTo: 11})
			wantRead(t, l, srcA, y, 0, 100, FilterRead{Seqs: []uint64{9}, From: 8, UpTo: 11})
			if st := l.Stats(); st.Records != 4 {
				t.Fatalf("stats after release %+v", st)
			}
		}
		check(l)
		l = reopen()
		check(l)
		// Past y's start and past the horizon: nothing retained, the
		// stream answers after the release only.
		if err := l.Release(srcA, 20); err != nil {
			t.Fatal(err)
		}
		wantRead(t, l, srcA, x, 0, 100, FilterRead{From: 20, UpTo: 20})
		if err := l.Append([]FilterRecord{{srcA, 20, []SubKey{x}}}, true); err == nil {
			t.Fatal("a released seq was appended")
		}
		mustAppend(t, l, true, FilterRecord{srcA, 21, []SubKey{x, y}})
		l = reopen()
		wantRead(t, l, srcA, y, 0, 100, FilterRead{Seqs: []uint64{21}, From: 20, UpTo: 21})
		if st := l.Stats(); st.Records != 2 || st.Streams != 2 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestFilterLogRefusesBadAppends(t *testing.T) {
	filterLogs(t, func(t *testing.T, l FilterLog, _ func() FilterLog) {
		x := register(t, l, "x")[0]
		mustAppend(t, l, true, FilterRecord{srcA, 5, []SubKey{x}})
		for _, c := range []struct {
			recs []FilterRecord
			err  string
		}{
			{[]FilterRecord{{srcA, 5, []SubKey{x}}}, "seq 5 appended after seq 5"},
			{[]FilterRecord{{srcA, 7, []SubKey{x}}, {srcA, 6, nil}}, "seq 6 appended after seq 7"},
			{[]FilterRecord{{srcB, 0, []SubKey{x}}}, "seq 0 appended"},
			{[]FilterRecord{{srcA, 6, []SubKey{x}}, {srcB, 1, []SubKey{x + 1}}}, "not registered"},
		} {
			if err := l.Append(c.recs, true); err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Append(%v) = %v, want %q", c.recs, err, c.err)
			}
		}
		// A refused batch changed nothing.
		wantRead(t, l, srcA, x, 0, 10, FilterRead{Seqs: []uint64{5}, From: 4, UpTo: 5})
		wantRead(t, l, srcB, x, 0, 10, FilterRead{})
		for _, name := range []string{"", strings.Repeat("n", 257)} {
			if _, err := l.Register(name); err == nil {
				t.Errorf("name of %d bytes registered", len(name))
			}
		}
	})
}

// TestFilterLogMatchesModel appends random interleaved records with
// releases and checks every read against a plain list of what matched.
func TestFilterLogMatchesModel(t *testing.T) {
	filterLogs(t, func(t *testing.T, l FilterLog, reopen func() FilterLog) {
		rng := rand.New(rand.NewPCG(1, 2))
		keys := register(t, l, "s0", "s1", "s2", "s3", "s4", "s5")
		srcs := []message.Source{srcA, srcB}
		matched := map[message.Source]map[SubKey][]uint64{srcA: {}, srcB: {}}
		next := map[message.Source]uint64{srcA: 1 + uint64(rng.IntN(5)), srcB: 1}
		start := map[message.Source]uint64{}   // the seq before a stream's first record
		horizon := map[message.Source]uint64{} // its last record, or its release if later
		for round := range 40 {
			var recs []FilterRecord
			for range 1 + rng.IntN(20) {
				src := srcs[rng.IntN(2)]
				var subs []SubKey
				for _, k := range keys {
					if rng.IntN(3) == 0 {
						subs = append(subs, k)
						matched[src][k] = append(matched[src][k], next[src])
					}
				}
				recs = append(recs, FilterRecord{src, next[src], subs})
				if _, ok := start[src]; !ok {
					start[src] = next[src] - 1
				}
				horizon[src] = next[src]
				next[src] += 1 + uint64(rng.IntN(3))
			}
			mustAppend(t, l, rng.IntN(2) == 0, recs...)
			if src := srcs[rng.IntN(2)]; round%7 == 6 && horizon[src] > 0 {
				upTo := start[src] + uint64(rng.IntN(10))
				if err := l.Release(src, upTo); err != nil {
					t.Fatal(err)
				}
				start[src] = max(start[src], upTo)
				horizon[src] = max(horizon[src], upTo)
				next[src] = max(next[src], upTo+1)
			}
			if round%13 == 12 {
				l = reopen()
			}
			for range 10 {
				src, sub := srcs[rng.IntN(2)], keys[rng.IntN(len(keys))]
				after, limit := uint64(rng.IntN(int(next[src]+2))), 1+rng.IntN(8)
				got, err := l.Read(src, sub, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				var want []uint64
				from, more := max(after, start[src]), false
				for _, seq := range matched[src][sub] {
					if seq > from {
						if len(want) == limit {
							more = true
							break
						}
						want = append(want, seq)
					}
				}
				upTo := max(horizon[src], from)
				if more {
					upTo = want[limit-1] // a full batch ends at its last seq
				}
				if !slices.Equal(got.Seqs, want) || got.From != from || got.UpTo != upTo {
					t.Fatalf("round %d: Read(%s, %d, after %d, max %d) = %v in (%d, %d], want %v in (%d, %d]",
						round, src.Publisher, sub, after, limit, got.Seqs, got.From, got.UpTo, want, from, upTo)
				}
			}
		}
	})
}

func TestMemoryFilterLogCrashKeepsWhatWasSynced(t *testing.T) {
	l := NewMemoryFilterLog()
	x := register(t, l, "x")[0]
	mustAppend(t, l, true, FilterRecord{srcA, 1, []SubKey{x}}) // syncs the registration too
	mustAppend(t, l, false, FilterRecord{srcA, 2, []SubKey{x}})
	y := register(t, l, "y")[0]
	if err := l.Release(srcA, 1); err != nil {
		t.Fatal(err)
	}
	wantRead(t, l, srcA, x, 0, 10, FilterRead{Seqs: []uint64{2}, From: 1, UpTo: 2})
	l.Crash()
	wantRead(t, l, srcA, x, 0, 10, FilterRead{Seqs: []uint64{1}, From: 0, UpTo: 1})
	if st := l.Stats(); st.Subs != 1 || st.Records != 1 {
		t.Fatalf("after the crash: %+v", st)
	}
	if again := register(t, l, "y")[0]; again != y {
		t.Fatalf("y re-registered as %d, want %d (its first key was lost with the crash)", again, y)
	}
	// Synced calls survive; the log carries on after the crash.
	mustAppend(t, l, false, FilterRecord{srcA, 2, []SubKey{x}})
	mustAppend(t, l, true, FilterRecord{srcA, 3, []SubKey{y}})
	l.Crash()
	wantRead(t, l, srcA, x, 0, 10, FilterRead{Seqs: []uint64{1, 2}, From: 0, UpTo: 3})
	wantRead(t, l, srcA, y, 0, 10, FilterRead{Seqs: []uint64{3}, From: 1, UpTo: 3})
	// A clean close keeps everything.
	mustAppend(t, l, false, FilterRecord{srcA, 4, []SubKey{x}})
	l.Close()
	l.Crash()
	wantRead(t, l, srcA, x, 2, 10, FilterRead{Seqs: []uint64{4}, From: 2, UpTo: 4})
}

func TestMemoryFilterLogBounds(t *testing.T) {
	l := NewMemoryFilterLog()
	for i := range maxFilterSubs {
		if _, err := l.Register(fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Register("one more"); err == nil || !strings.Contains(err.Error(), "at most 65536") {
		t.Fatalf("registration beyond the bound: %v", err)
	}
	if _, err := l.Register("17"); err != nil {
		t.Fatalf("a registered name at the bound: %v", err)
	}
	// Streams beyond the bound: the oldest with nothing retained is
	// forgotten, and answers again from its next record only.
	x := register(t, l, "0")[0]
	mustAppend(t, l, true, FilterRecord{srcA, 5, nil}, FilterRecord{srcB, 1, []SubKey{x}})
	recs := make([]FilterRecord, 0, maxFilterStreams)
	for i := range maxFilterStreams - 2 {
		recs = append(recs, FilterRecord{message.Source{Publisher: fmt.Sprint("p", i)}, 1, nil})
	}
	mustAppend(t, l, true, recs...)
	if st := l.Stats(); st.Streams != maxFilterStreams {
		t.Fatalf("%d streams, want %d", st.Streams, maxFilterStreams)
	}
	wantRead(t, l, srcB, x, 0, 10, FilterRead{Seqs: []uint64{1}, From: 0, UpTo: 1})
	wantRead(t, l, srcA, x, 0, 10, FilterRead{From: 4, UpTo: 5})
	// srcB has a record retained: srcA goes.
	mustAppend(t, l, true, FilterRecord{message.Source{Publisher: "new"}, 1, nil})
	if st := l.Stats(); st.Streams != maxFilterStreams {
		t.Fatalf("%d streams after one more, want %d", st.Streams, maxFilterStreams)
	}
	wantRead(t, l, srcA, x, 0, 10, FilterRead{})
	wantRead(t, l, srcB, x, 0, 10, FilterRead{Seqs: []uint64{1}, From: 0, UpTo: 1})
	mustAppend(t, l, true, FilterRecord{srcA, 9, []SubKey{x}})
	wantRead(t, l, srcA, x, 0, 10, FilterRead{Seqs: []uint64{9}, From: 8, UpTo: 9})
}

func TestPebbleFilterLogRefusesDamage(t *testing.T) {
	// Each case writes one bad key beside a valid log and expects the
	// open to refuse, naming the path.
	for _, c := range []struct {
		name string
		k, v []byte
		err  string
	}{
		{"short record", filterRecordKey(srcA, 2), []byte{1, 2, 3}, "a record of 3 bytes"},
		{"broken chain", filterRecordKey(srcA, 3), encodeFilterEntries([]filterEntry{{1, 1}}), "does not continue its chain"},
		{"unassigned key", filterRecordKey(srcA, 3), encodeFilterEntries([]filterEntry{{9, 0}}), "key 9 was never assigned"},
		{"record past the horizon", filterRecordKey(srcA, 50), encodeFilterEntries([]filterEntry{{1, 2}}), "outside its stream"},
		{"bad stream", appendSource([]byte{keyFilterStream}, srcB), []byte{1}, "bad stream record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "filter")
			l, err := OpenPebbleFilterLog(path)
			if err != nil {
				t.Fatal(err)
			}
			x := register(t, l, "x")[0]
			mustAppend(t, l, true, FilterRecord{srcA, 1, []SubKey{x}}, FilterRecord{srcA, 2, []SubKey{x}}, FilterRecord{srcA, 10, nil})
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := pebble.Open(path, &pebble.Options{Logger: quietLogger{}})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Set(c.k, c.v, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			db.Close()
			_, err = OpenPebbleFilterLog(path)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.k)) {
				t.Fatalf("open: %v, want an error naming %s and %q", err, path, c.err)
			}
		})
	}
	t.Run("not a pebble store", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "filter")
		if err := os.MkdirAll(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, "CURRENT"), []byte("garbage\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenPebbleFilterLog(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Fatalf("open: %v, want an error naming %s", err, path)
		}
	})
}

func TestStoresOpenFilterLog(t *testing.T) {
	d, err := Open(t.TempDir(), "B1")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []Store{d, &Memory{}} {
		l, err := st.OpenFilterLog()
		if err != nil {
			t.Fatal(err)
		}
		register(t, l, "x")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if l, err = st.OpenFilterLog(); err != nil {
			t.Fatal(err)
		}
		if l.Stats().Subs != 1 {
			t.Fatalf("%T: the registration did not outlive a reopen", st)
		}
		l.Close()
	}
}

// BenchmarkFilterLogVsQueues is the Gryphon paper's figure 4 as a
// benchmark (the table with its ratio: 'deltapub bench gryphon --pfs'):
// 100 durable subscriptions, events from 4 sources each matching n of
// them, 64 events per group commit, written to the filtering log (one
// record per event) or to per-subscriber queues (the 418-byte event copied
// into each matching subscription's queue).
func BenchmarkFilterLogVsQueues(b *testing.B) {
	event := make([]byte, 418)
	_, _ = rand.NewChaCha8([32]byte{}).Read(event) // incompressible, as a 250-byte payload with its headers
	// Each store opens in dir and returns its write and its keys.
	stores := []struct {
		name string
		open func(b *testing.B, dir string, sync bool) (func([]FilterRecord) error, []SubKey)
	}{
		{"filterlog", func(b *testing.B, dir string, sync bool) (func([]FilterRecord) error, []SubKey) {
			l, err := OpenPebbleFilterLog(filepath.Join(dir, "filter"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			keys := make([]SubKey, 100)
			for i := range keys {
				if keys[i], err = l.Register(fmt.Sprint("d", i)); err != nil {
					b.Fatal(err)
				}
			}
			return func(recs []FilterRecord) error { return l.Append(recs, sync) }, keys
		}},
		{"queues", func(b *testing.B, dir string, sync bool) (func([]FilterRecord) error, []SubKey) {
			q, err := OpenPebbleQueues(filepath.Join(dir, "queues"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { q.Close() })
			keys := make([]SubKey, 100)
			for i := range keys {
				keys[i] = SubKey(i + 1)
			}
			return func(recs []FilterRecord) error { return q.Append(recs, event, sync) }, keys
		}},
	}
	for _, n := range []int{1, 4, 20} {
		for _, sync := range []bool{true, false} {
			for _, st := range stores {
				b.Run(fmt.Sprintf("n=%d/%s/%s", n, map[bool]string{true: "fsync", false: "nosync"}[sync], st.name), func(b *testing.B) {
					write, keys := st.open(b, b.TempDir(), sync)
					benchEvents(b, keys, n, write)
				})
			}
		}
	}
}

// benchEvents writes b.N events in batches of 64 and reports events/s.
func benchEvents(b *testing.B, keys []SubKey, n int, write func([]FilterRecord) error) {
	w := NewFilterWorkload(keys, n, 4, 1)
	var recs []FilterRecord
	b.ResetTimer()
	for done := 0; done < b.N; done += len(recs) {
		recs = w.Next(recs, min(64, b.N-done))
		if err := write(recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
