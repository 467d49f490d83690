package storage

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/deltapub/deltapub/checkpoint"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
	"github.com/deltapub/deltapub/overlay"
)

var (
	srcP1 = message.Source{Publisher: "P1", Epoch: 1}
	srcP2 = message.Source{Publisher: "P2", Epoch: 7}
)

func heldPub(s message.Source, seq uint64) message.Pub {
	return message.Pub{ID: message.PubID{Publisher: s.Publisher, Epoch: s.Epoch, Seq: seq},
		Attrs: []matching.Attr{{Name: "class", Value: matching.Str("a")}}, Payload: []byte{byte(seq)}, Time: int64(seq)}
}

func heldToken(t *testing.T, name string, pos map[message.Source]uint64) []byte {
	t.Helper()
	tok := checkpoint.Token{Name: name}
	for s, q := range pos {
		if err := tok.Consume(s, q); err != nil {
			t.Fatal(err)
		}
	}
	return tok.Encode()
}

// heldScript applies a history to l: two subscriptions sharing
// publications, an acknowledgement, a Gap, one dropped and started again.
func heldScript(t *testing.T, l HeldLog) {
	t.Helper()
	apply := func(c overlay.HeldChanges) {
		t.Helper()
		if err := l.Apply(&c); err != nil {
			t.Fatal(err)
		}
	}
	apply(overlay.HeldChanges{Subs: []overlay.HeldChange{
		{Name: "A", Start: &overlay.HeldStart{Filter: "[class,eq,'a']", Floor: []message.SourceSeq{{Source: srcP1, Seq: 2}}}},
		{Name: "B", Start: &overlay.HeldStart{Filter: "[class,eq,'a']"}},
	}})
	apply(overlay.HeldChanges{
		Events: []message.Pub{heldPub(srcP1, 3), heldPub(srcP1, 4), heldPub(srcP2, 1)},
		Subs: []overlay.HeldChange{
			{Name: "A", Records: []overlay.HeldRecord{{Source: srcP1, Seq: 3}, {Source: srcP2, Seq: 1}, {Source: srcP1, Seq: 4}}},
			{Name: "B", Records: []overlay.HeldRecord{{Source: srcP1, Seq: 4}}},
			{Name: "A", Token: heldToken(t, "A", map[message.Source]uint64{srcP1: 4, srcP2: 1})},
			{Name: "B", Token: heldToken(t, "B", map[message.Source]uint64{srcP1: 4})},
		}})
	// A acknowledges P1 up to 3; B gets a Gap; P1/3 is held by none now.
	apply(overlay.HeldChanges{
		Subs: []overlay.HeldChange{
			{Name: "A", Floor: []message.SourceSeq{{Source: srcP1, Seq: 3}}},
			{Name: "B", Records: []overlay.HeldRecord{{Source: srcP1, Seq: 9, GapFrom: 5}}},
			{Name: "B", Token: heldToken(t, "B", map[message.Source]uint64{srcP1: 9})},
		},
		Dropped: []message.PubID{heldPub(srcP1, 3).ID},
	})
	// C starts, is dropped, and starts again in one batch: only the second
	// start counts.
	apply(overlay.HeldChanges{Subs: []overlay.HeldChange{
		{Name: "C", Start: &overlay.HeldStart{Filter: "[class,eq,'c'],[x,>,1]"}, Records: []overlay.HeldRecord{{Source: srcP1, Seq: 4}}},
		{Name: "C", Drop: true},
		{Name: "C", Start: &overlay.HeldStart{Filter: "[class,eq,'c'],[x,>,2]"}},
		{Name: "C", Token: heldToken(t, "C", nil)},
	}})
}

// checkHeldScript checks what Load says after heldScript.
func checkHeldScript(t *testing.T, l HeldLog) {
	t.Helper()
	subs, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 3 || subs[0].Name != "A" || subs[1].Name != "B" || subs[2].Name != "C" {
		t.Fatalf("loaded %d subscriptions: %+v", len(subs), subs)
	}
	a, b, c := subs[0], subs[1], subs[2]
	if a.Filter.String() != "[class,eq,'a']" || c.Filter.String() != "[class,eq,'c'],[x,>,2]" {
		t.Errorf("filters %q and %q", a.Filter, c.Filter)
	}
	if want := []message.SourceSeq{{Source: srcP1, Seq: 3}}; !reflect.DeepEqual(a.Floor, want) {
		t.Errorf("A's floor %v, want %v", a.Floor, want)
	}
	p4, p21 := heldPub(srcP1, 4), heldPub(srcP2, 1)
	wantA := []message.Message{
		&message.Deliver{Pub: p4.ID, Attrs: p4.Attrs, Payload: p4.Payload, Time: p4.Time},
		&message.Deliver{Pub: p21.ID, Attrs: p21.Attrs, Payload: p21.Payload, Time: p21.Time},
	}
	if !reflect.DeepEqual(a.Records, wantA) {
		t.Errorf("A holds %v, want %v", a.Records, wantA)
	}
	wantB := []message.Message{
		&message.Deliver{Pub: p4.ID, Attrs: p4.Attrs, Payload: p4.Payload, Time: p4.Time},
		&message.Gap{Source: srcP1, From: 5, To: 9},
	}
	if !reflect.DeepEqual(b.Records, wantB) {
		t.Errorf("B holds %v, want %v", b.Records, wantB)
	}
	if tok, err := checkpoint.Decode(b.Token); err != nil || tok.Get(srcP1).From() != 9 {
		t.Errorf("B's position %v (%v), want P1 at 9", tok, err)
	}
	if len(c.Records) != 0 {
		t.Errorf("C, started again, holds %v", c.Records)
	}
	if st := l.Stats(); st.Subs != 3 || st.Events != 2 {
		t.Errorf("stats %+v, want 3 subscriptions and 2 publications", st)
	}
}

func TestMemoryHeldKeepsWhatItWasTold(t *testing.T) {
	l := NewMemoryHeld()
	heldScript(t, l)
	checkHeldScript(t, l)
}

func TestPebbleHeldKeepsWhatItWasToldAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "B1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.OpenHeld()
	if err != nil {
		t.Fatal(err)
	}
	heldScript(t, l)
	checkHeldScript(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = d.OpenHeld(); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	checkHeldScript(t, l)
	// Dropping a subscription forgets it and its records.
	if err := l.Apply(&overlay.HeldChanges{Subs: []overlay.HeldChange{{Name: "A", Drop: true}}, Dropped: []message.PubID{heldPub(srcP2, 1).ID}}); err != nil {
		t.Fatal(err)
	}
	subs, err := l.Load()
	if err != nil || len(subs) != 2 || subs[0].Name != "B" {
		t.Fatalf("after dropping A: %+v, %v", subs, err)
	}
}

func TestPebbleHeldRefusesADamagedRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "held")
	l, err := OpenPebbleHeld(path)
	if err != nil {
		t.Fatal(err)
	}
	heldScript(t, l)
	// A record whose publication is not kept.
	if err := l.Apply(&overlay.HeldChanges{Subs: []overlay.HeldChange{{Name: "B", Records: []overlay.HeldRecord{{Source: srcP2, Seq: 5}}}}}); err != nil {
		t.Fatal(err)
	}
	_, err = l.Load()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Load = %v, want an error naming %s and saying it is damaged", err, path)
	}
	l.Close()
	// A directory pebble cannot open.
	bad := filepath.Join(t.TempDir(), "held")
	if err := os.WriteFile(bad, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPebbleHeld(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("open a file: %v, want an error naming it", err)
	}
}
