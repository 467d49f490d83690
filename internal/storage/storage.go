// Package storage keeps what a broker must find again after a crash, in
// its data directory (data_dir): its incarnation (the epoch it last
// started with, so that the next one is larger whatever the clock says),
// its place in the tree (the brokers to rejoin through), its publication
// log (log.go) and what its durable subscriptions hold (held.go). All of
// it goes through Store.
package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Joinpoint is a broker to rejoin through, by name and address.
type Joinpoint struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

// Store is the state of one broker that survives a crash.
type Store interface {
	// Begin records the start of a new incarnation and returns its epoch:
	// at least epoch, and larger than every epoch begun before.
	Begin(epoch uint64) (uint64, error)
	// Place is where the broker last was a joined member (nil: never, or it
	// left gracefully since).
	Place() []Joinpoint
	// SavePlace replaces the place (nil: none); saving the same place
	// again writes nothing.
	SavePlace(p []Joinpoint) error
	// OpenLog opens the publication log (log.go), which keeps its content
	// across incarnations like the rest of the store.
	OpenLog() (Log, error)
	// OpenFilterLog opens the filtering log (filterlog.go), kept across
	// incarnations too.
	OpenFilterLog() (FilterLog, error)
	// OpenHeld opens the held log (held.go): what the durable
	// subscriptions of this broker hold for a resume here.
	OpenHeld() (HeldLog, error)
}

// maxPlace bounds a saved place: δ+1 joinpoints, δ being small.
const maxPlace = 64

// record is the file's content.
type record struct {
	Broker string      `json:"broker"`
	Epoch  uint64      `json:"epoch"`
	Place  []Joinpoint `json:"place,omitempty"`
}

// fileName is the record's file in the data directory.
const fileName = "broker.json"

// Dir is a Store in a directory: one small JSON file, replaced atomically
// (written to a temporary file, synced, renamed over the old one, the
// directory synced), so that a crash at any moment leaves either the old
// record or the new one.
type Dir struct {
	path string
	rec  record
}

var _ Store = (*Dir)(nil)

// Open opens (creating it if needed) the data directory of broker at path.
// A directory that belongs to another broker, or whose record cannot be
// read, is an error that names the file: nothing is overwritten.
func Open(path, broker string) (*Dir, error) {
	if path == "" {
		return nil, errors.New("storage: empty data directory path")
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("storage: data directory: %w", err)
	}
	d := &Dir{path: path, rec: record{Broker: broker}}
	file := filepath.Join(path, fileName)
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return d, nil
	case err != nil:
		return nil, fmt.Errorf("storage: %w", err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("storage: %s is not a broker record (%v); remove it to start this broker as a new member", file, err)
	}
	if rec.Broker != broker {
		return nil, fmt.Errorf("storage: %s belongs to broker %q, not %q: give each broker a data directory of its own", file, rec.Broker, broker)
	}
	if len(rec.Place) > maxPlace {
		return nil, fmt.Errorf("storage: %s holds %d joinpoints, more than %d; remove it to start this broker as a new member", file, len(rec.Place), maxPlace)
	}
	d.rec = rec
	return d, nil
}

// Begin implements Store.
func (d *Dir) Begin(epoch uint64) (uint64, error) {
	rec := d.rec
	rec.Epoch = max(epoch, d.rec.Epoch+1)
	if err := d.write(rec); err != nil {
		return 0, err
	}
	return rec.Epoch, nil
}

// Place implements Store.
func (d *Dir) Place() []Joinpoint { return slices.Clone(d.rec.Place) }

// SavePlace implements Store.
func (d *Dir) SavePlace(p []Joinpoint) error {
	if slices.Equal(p, d.rec.Place) {
		return nil
	}
	if len(p) > maxPlace {
		p = p[:maxPlace]
	}
	rec := d.rec
	rec.Place = slices.Clone(p)
	return d.write(rec)
}

// write replaces the record on disk, then in memory.
func (d *Dir) write(rec record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	tmp, err := os.CreateTemp(d.path, fileName+".*.tmp")
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("storage: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("storage: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(d.path, fileName)); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if dir, err := os.Open(d.path); err == nil {
		_ = dir.Sync() // the rename's durability; not every file system supports it
		dir.Close()
	}
	d.rec = rec
	return nil
}

// Memory is a Store that lives as long as the value: what a data
// directory is to a process, for brokers restarted inside one process (the
// testbed's inproc mode, tests). Safe for concurrent use: a crashed
// incarnation's goroutine may still be finishing when the next begins.
type Memory struct {
	mu    sync.Mutex
	epoch uint64
	place []Joinpoint
	log   *MemoryLog
	flog  *MemoryFilterLog
	held  *MemoryHeld
}

// OpenHeld implements Store: the same log for every incarnation.
func (m *Memory) OpenHeld() (HeldLog, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = NewMemoryHeld()
	}
	return m.held, nil
}

// OpenLog implements Store: the same log for every incarnation.
func (m *Memory) OpenLog() (Log, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.log == nil {
		m.log = NewMemoryLog()
	}
	return m.log, nil
}

// OpenFilterLog implements Store: the same log for every incarnation
// (MemoryFilterLog.Crash is what a crash keeps of it).
func (m *Memory) OpenFilterLog() (FilterLog, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.flog == nil {
		m.flog = NewMemoryFilterLog()
	}
	return m.flog, nil
}

var _ Store = (*Memory)(nil)

// Begin implements Store.
func (m *Memory) Begin(epoch uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch = max(epoch, m.epoch+1)
	return m.epoch, nil
}

// Place implements Store.
func (m *Memory) Place() []Joinpoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.place)
}

// SavePlace implements Store.
func (m *Memory) SavePlace(p []Joinpoint) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.place = slices.Clone(p[:min(len(p), maxPlace)])
	return nil
}
