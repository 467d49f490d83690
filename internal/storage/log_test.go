package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

func logPub(pub string, seq uint64) message.Pub {
	return message.Pub{
		ID:      message.PubID{Publisher: pub, Epoch: 7, Seq: seq},
		Attrs:   []matching.Attr{{Name: "k", Value: matching.Value{Kind: matching.KindInt, Int: int64(seq)}}},
		Payload: []byte("payload"),
		Time:    int64(seq),
		Stamps:  []message.Stamp{{B: "B1", E: 1, S: seq}},
	}
}

// testLog runs one body against a log and a reopen function that returns
// the log as a restarted broker finds it.
func testLog(t *testing.T, l Log, reopen func() Log) {
	if err := l.Append([]message.Pub{logPub("a", 1), logPub("a", 2), logPub("b", 1)}, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]message.Pub{logPub("a", 3)}, false); err != nil {
		t.Fatal(err)
	}
	if err := l.Release([]Release{{Source: message.Source{Publisher: "a", Epoch: 7}, Seq: 2}, {Source: message.Source{Publisher: "b", Epoch: 7}, Seq: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(nil, true); err != nil { // syncs the release
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Records != 1 || len(st.Sources) != 1 || st.Sources[0].First != 3 || st.Sources[0].Last != 3 {
		t.Fatalf("stats after release: %+v", st)
	}
	if st.Bytes != RecordSize(&message.Pub{ID: logPub("a", 3).ID, Attrs: logPub("a", 3).Attrs, Payload: []byte("payload")}) {
		t.Fatalf("bytes %d", st.Bytes)
	}
	l = reopen()
	rec, err := l.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Pubs) != 1 || rec.Pubs[0].ID != logPub("a", 3).ID || string(rec.Pubs[0].Payload) != "payload" || rec.Pubs[0].Time != 3 || len(rec.Pubs[0].Stamps) != 0 || len(rec.Pubs[0].Attrs) != 1 || rec.Pubs[0].Attrs[0].Value.Int != 3 {
		t.Fatalf("recovered pubs %+v", rec.Pubs)
	}
	want := []message.PubID{{Publisher: "a", Epoch: 7, Seq: 3}, {Publisher: "b", Epoch: 7, Seq: 1}}
	if len(rec.Last) != 2 || rec.Last[0] != want[0] || rec.Last[1] != want[1] {
		t.Fatalf("last %+v, want %+v", rec.Last, want)
	}
	if st := l.Stats(); st.Records != 1 {
		t.Fatalf("stats after reopen: %+v", st)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryLog(t *testing.T) {
	l := NewMemoryLog()
	testLog(t, l, func() Log { return l })
}

func TestDirLog(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "B1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.OpenLog()
	if err != nil {
		t.Fatal(err)
	}
	testLog(t, l, func() Log {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l2, err := d.OpenLog()
		if err != nil {
			t.Fatal(err)
		}
		return l2
	})
}

func TestPebbleLogRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log")
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "CURRENT"), []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := OpenPebbleLog(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("damaged log: err = %v, want one naming %s", err, path)
	}
}

func TestMemoryLogRefusesOutOfOrder(t *testing.T) {
	l := NewMemoryLog()
	if err := l.Append([]message.Pub{logPub("a", 2)}, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]message.Pub{logPub("a", 2)}, true); err == nil {
		t.Fatal("a repeated seq was appended")
	}
}

// FuzzLogKey: a log key parses back to what it was built from, and any
// byte string is refused or parsed without panicking.
func FuzzLogKey(f *testing.F) {
	f.Add([]byte{}, "P1", uint64(7), uint64(1))
	f.Add([]byte{0, 3, 'a'}, "", uint64(0), uint64(1<<63))
	f.Fuzz(func(t *testing.T, raw []byte, pub string, epoch, seq uint64) {
		_, _, _ = parseSource(raw)
		if len(pub) > 1<<15 {
			return
		}
		s := message.Source{Publisher: pub, Epoch: epoch}
		k := pubKey(nil, s, seq)
		got, rest, err := parseSource(k[1:])
		if err != nil || got != s || len(rest) != 8 {
			t.Fatalf("key of %v/%d parsed as %v, %d bytes left, %v", s, seq, got, len(rest), err)
		}
	})
}
