package storage

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/message"
)

func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// appendAndClose opens the log in dir, appends pubs synced and closes it.
func appendAndClose(t *testing.T, dir string, pubs ...message.Pub) {
	t.Helper()
	l, err := OpenSegmentLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(pubs, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func mustRecover(t *testing.T, l Log) Recovered {
	t.Helper()
	rec, err := l.Recover()
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func pubIDs(pubs []message.Pub) []message.PubID {
	ids := make([]message.PubID, len(pubs))
	for i := range pubs {
		ids[i] = pubs[i].ID
	}
	return ids
}

// TestSegmentLogMatchesMemoryLog drives a segment log with small segments
// and the memory log (the model) with the same random appends, releases
// and reopens: after every reopen both recover the same publications and
// last seqs, and released segments are deleted.
func TestSegmentLogMatchesMemoryLog(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			dir := t.TempDir()
			l, err := openSegmentLog(dir, 600)
			if err != nil {
				t.Fatal(err)
			}
			model := NewMemoryLog()
			next := map[string]uint64{}
			released := map[string]uint64{}
			pubs := []string{"a", "b", "c"}
			for step := range 300 {
				switch r := rng.IntN(10); {
				case r < 5:
					var batch []message.Pub
					for range 1 + rng.IntN(4) {
						p := pubs[rng.IntN(len(pubs))]
						next[p]++
						batch = append(batch, logPub(p, next[p]))
					}
					sync := rng.IntN(2) == 0
					if err := l.Append(batch, sync); err != nil {
						t.Fatal(err)
					}
					if err := model.Append(batch, sync); err != nil {
						t.Fatal(err)
					}
				case r < 8:
					p := pubs[rng.IntN(len(pubs))]
					if next[p] == released[p] {
						continue
					}
					upTo := released[p] + 1 + uint64(rng.IntN(int(next[p]-released[p])))
					released[p] = upTo
					rs := []Release{{Source: message.Source{Publisher: p, Epoch: 7}, Seq: upTo}}
					if err := l.Release(rs); err != nil {
						t.Fatal(err)
					}
					if err := model.Release(rs); err != nil {
						t.Fatal(err)
					}
				default:
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					if l, err = openSegmentLog(dir, 600); err != nil {
						t.Fatalf("step %d: reopen: %v", step, err)
					}
					got, want := mustRecover(t, l), mustRecover(t, model)
					if !slices.Equal(pubIDs(got.Pubs), pubIDs(want.Pubs)) {
						t.Fatalf("step %d: recovered %v, want %v", step, pubIDs(got.Pubs), pubIDs(want.Pubs))
					}
					if !slices.Equal(got.Last, want.Last) {
						t.Fatalf("step %d: last %v, want %v", step, got.Last, want.Last)
					}
					for i := range got.Pubs {
						if string(got.Pubs[i].Payload) != "payload" || got.Pubs[i].Attrs[0].Value.Int != int64(got.Pubs[i].ID.Seq) {
							t.Fatalf("step %d: recovered %+v", step, got.Pubs[i])
						}
					}
				}
				if g, w := l.Stats(), model.Stats(); g.Records != w.Records || g.Bytes != w.Bytes || !slices.Equal(g.Sources, w.Sources) {
					t.Fatalf("step %d: stats %+v, want %+v", step, g, w)
				}
			}
			// Release everything: one segment is left, the active one.
			for _, p := range pubs {
				if err := l.Release([]Release{{Source: message.Source{Publisher: p, Epoch: 7}, Seq: next[p]}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Append([]message.Pub{logPub("a", next["a"]+1)}, true); err != nil {
				t.Fatal(err)
			}
			if n := len(segFiles(t, dir)); n > 2 {
				t.Fatalf("%d segment files with everything but one publication released", n)
			}
			l.Close()
		})
	}
}

// TestSegmentLogCutTail: a record a crash cut short at the end of the
// last segment is dropped (it was never acknowledged), the file is
// truncated and the log goes on; everything synced before it is kept.
func TestSegmentLogCutTail(t *testing.T) {
	for _, cut := range []int{1, 5, 9, 20} {
		dir := t.TempDir()
		appendAndClose(t, dir, logPub("a", 1), logPub("a", 2))
		appendAndClose(t, dir, logPub("a", 3))
		files := segFiles(t, dir)
		last := files[len(files)-1]
		fi, err := os.Stat(last)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(last, fi.Size()-int64(cut)); err != nil {
			t.Fatal(err)
		}
		l, err := OpenSegmentLog(dir)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		rec := mustRecover(t, l)
		if want := []message.PubID{logPub("a", 1).ID, logPub("a", 2).ID}; !slices.Equal(pubIDs(rec.Pubs), want) {
			t.Fatalf("cut %d: recovered %v, want %v", cut, pubIDs(rec.Pubs), want)
		}
		if err := l.Append([]message.Pub{logPub("a", 3)}, true); err != nil {
			t.Fatal(err)
		}
		l.Close()
		if l, err = OpenSegmentLog(dir); err != nil {
			t.Fatal(err)
		}
		if rec := mustRecover(t, l); len(rec.Pubs) != 3 {
			t.Fatalf("cut %d: after the append that followed: %v", cut, pubIDs(rec.Pubs))
		}
		l.Close()
	}
}

// TestSegmentLogRefusesDamage: a bad record in a segment other than the
// last is damage, not a cut tail: opening fails naming the file.
func TestSegmentLogRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	appendAndClose(t, dir, logPub("a", 1), logPub("a", 2))
	appendAndClose(t, dir) // a second segment
	files := segFiles(t, dir)
	if len(files) != 2 {
		t.Fatalf("segments %v, want 2", files)
	}
	first := files[0]
	data, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-3] ^= 0xff
	if err := os.WriteFile(first, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = OpenSegmentLog(dir)
	if err == nil || !strings.Contains(err.Error(), first) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged segment: err = %v, want one naming %s", err, first)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.seg"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSegmentLog(dir); err == nil || !strings.Contains(err.Error(), "notes.seg") {
		t.Fatalf("stray file: err = %v", err)
	}
}

// TestDirMigratesThePebbleLog: a data directory with a log of the pebble
// format opens with its publications and last seqs, and the old log is
// gone.
func TestDirMigratesThePebbleLog(t *testing.T) {
	dir := t.TempDir()
	old, err := OpenPebbleLog(filepath.Join(dir, legacyLogDirName))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Append([]message.Pub{logPub("a", 1), logPub("a", 2), logPub("b", 1)}, true); err != nil {
		t.Fatal(err)
	}
	if err := old.Release([]Release{{Source: message.Source{Publisher: "b", Epoch: 7}, Seq: 1}}); err != nil {
		t.Fatal(err)
	}
	old.Close()
	d, err := Open(dir, "B1")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second open finds the migrated log alone
		l, err := d.OpenLog()
		if err != nil {
			t.Fatal(err)
		}
		rec := mustRecover(t, l)
		if want := []message.PubID{logPub("a", 1).ID, logPub("a", 2).ID}; !slices.Equal(pubIDs(rec.Pubs), want) {
			t.Fatalf("recovered %v, want %v", pubIDs(rec.Pubs), want)
		}
		if want := []message.PubID{logPub("a", 2).ID, logPub("b", 1).ID}; !slices.Equal(rec.Last, want) {
			t.Fatalf("last %v, want %v", rec.Last, want)
		}
		l.Close()
		if _, err := os.Stat(filepath.Join(dir, legacyLogDirName)); !os.IsNotExist(err) {
			t.Fatalf("the pebble log is still there: %v", err)
		}
	}
}

// FuzzSegmentLogOpen: any content of a last segment opens (a cut tail) or
// fails with an error; no panic, and what opens accepts appends.
func FuzzSegmentLogOpen(f *testing.F) {
	dir := f.TempDir()
	l, err := OpenSegmentLog(dir)
	if err != nil {
		f.Fatal(err)
	}
	if err := l.Append([]message.Pub{logPub("a", 1)}, true); err != nil {
		f.Fatal(err)
	}
	if err := l.Release([]Release{{Source: message.Source{Publisher: "a", Epoch: 7}, Seq: 1}}); err != nil {
		f.Fatal(err)
	}
	l.Close()
	for _, p := range segFiles(f, dir) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "0000000000000000.seg"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := OpenSegmentLog(dir)
		if err != nil {
			return
		}
		defer l.Close()
		if _, err := l.Recover(); err != nil {
			t.Fatalf("opened, then: %v", err)
		}
		if err := l.Append([]message.Pub{logPub("z", 1)}, false); err != nil {
			t.Fatal(err)
		}
	})
}
