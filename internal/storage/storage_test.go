package storage

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDirKeepsEpochAndPlaceAcrossOpens(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "B3")
	if err != nil {
		t.Fatal(err)
	}
	if p := d.Place(); p != nil {
		t.Fatalf("a new directory has place %v", p)
	}
	e1, err := d.Begin(1000)
	if err != nil || e1 != 1000 {
		t.Fatalf("Begin(1000) = %d, %v", e1, err)
	}
	place := []Joinpoint{{"B2", "127.0.0.1:7002"}, {"B1", "127.0.0.1:7001"}}
	if err := d.SavePlace(place); err != nil {
		t.Fatal(err)
	}
	d, err = Open(dir, "B3")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Place(), place) {
		t.Fatalf("place after reopen = %v, want %v", d.Place(), place)
	}
	// A clock that went back still yields a larger epoch.
	e2, err := d.Begin(10)
	if err != nil || e2 != e1+1 {
		t.Fatalf("Begin(10) after %d = %d, %v; want %d", e1, e2, err, e1+1)
	}
	if !slices.Equal(d.Place(), place) {
		t.Fatalf("Begin lost the place: %v", d.Place())
	}
	if err := d.SavePlace(nil); err != nil {
		t.Fatal(err)
	}
	d, _ = Open(dir, "B3")
	if d.Place() != nil {
		t.Fatalf("cleared place came back: %v", d.Place())
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	if len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestDirRefusesAnotherBrokersOrACorruptRecord(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(dir, "B1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Begin(5); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "B2"); err == nil || !strings.Contains(err.Error(), `belongs to broker "B1"`) {
		t.Fatalf("another broker's directory: err = %v", err)
	}
	file := filepath.Join(dir, fileName)
	if err := os.WriteFile(file, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, "B1")
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("corrupt record: err = %v, want one naming %s", err, file)
	}
	if b, _ := os.ReadFile(file); string(b) != "{not json" {
		t.Fatal("a corrupt record was overwritten")
	}
	if _, err := Open("", "B1"); err == nil {
		t.Fatal("an empty path was accepted")
	}
}
