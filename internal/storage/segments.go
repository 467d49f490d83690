package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/deltapub/deltapub/internal/wire"
	"github.com/deltapub/deltapub/message"
)

// pubLogDirName is the publication log's directory inside the data
// directory; legacyLogDirName held it in pebble before (migrated at open).
const (
	pubLogDirName    = "publog"
	legacyLogDirName = "log"
)

// SegmentLog is a Log in append-only segment files: each Append is one
// write of its records (and one fsync with sync), each Release one
// unsynced write of release records. A publication lives a few DACK
// periods, so the log is a queue, not a table: a segment file is deleted
// once every publication in it is released, and nothing is ever rewritten.
// (The pebble log it replaced spent twice as much CPU flushing and
// compacting those short-lived keys as on the appends themselves:
// docs/results/durable.md.)
//
// Every segment starts with a checkpoint record: each known source's last
// seq and first retained seq when the segment was started (the older
// segments synced before). So deleting any older segment loses nothing:
// its releases and last seqs are in the checkpoint of every segment after
// it. A new segment is started at every open and when the active one
// reaches segmentBytes.
//
// Disk use: the retained publications, plus the released ones that share
// a segment with a retained one. A publication retained long (a durable
// subscriber away, up to max_retain) keeps its segment and every later
// one until it is released: the log then holds everything written since
// it was appended, bounded by the retention.
//
// Recovery reads the segments in order. A record that is short or fails
// its checksum ends the last segment (a write the crash cut: it was never
// acknowledged, since an acknowledged append was synced whole); the file
// is truncated there. Anywhere else it is damage, and opening fails
// naming the file. Safe for concurrent use.
type SegmentLog struct {
	dir          string
	segmentBytes int64

	mu     sync.Mutex
	idx    logIndex
	segs   []*segment // oldest first; the last one is active
	f      *os.File   // the active segment
	size   int64      // bytes in the active segment
	buf    []byte
	failed error // a failed write: the file's content is unknown, nothing more is written
}

// segment is one file of a SegmentLog and the highest seq of each source
// it holds publications of (when each is released, the file may go).
type segment struct {
	n    uint64
	high map[message.Source]uint64
}

var _ Log = (*SegmentLog)(nil)

// defaultSegmentBytes is the size at which a new segment is started.
const defaultSegmentBytes = 64 << 20

// Record kinds (the first byte of a record's body).
const (
	recPub        = 'p' // the publication's wire frame, without stamps
	recRelease    = 'r' // source, seq: released up to seq
	recCheckpoint = 'c' // count, then per source: source, last, first retained
)

// recordHeader is a record's length (of the body, 4 bytes) and the body's
// CRC-32C (4 bytes), little-endian.
const recordHeader = 8

// maxRecord bounds a record's body on reading (a checkpoint of
// maxLogSources sources with long names is the largest).
const maxRecord = 1 << 30

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// OpenLog opens (creating it if needed) the publication log in data
// directory dir, moving a log of the earlier pebble format into it. A log
// that cannot be opened or read is an error naming its path: the broker
// must not start and acknowledge on top of it.
func (d *Dir) OpenLog() (Log, error) {
	l, err := OpenSegmentLog(filepath.Join(d.path, pubLogDirName))
	if err != nil {
		return nil, err
	}
	if err := l.migrate(filepath.Join(d.path, legacyLogDirName)); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// OpenSegmentLog opens the log in directory path, reads its index and
// starts a new segment.
func OpenSegmentLog(path string) (*SegmentLog, error) {
	return openSegmentLog(path, defaultSegmentBytes)
}

func openSegmentLog(path string, segmentBytes int64) (*SegmentLog, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("storage: publication log: %w", err)
	}
	l := &SegmentLog{dir: path, segmentBytes: segmentBytes, idx: newLogIndex()}
	if _, err := l.read(false); err != nil {
		return nil, err
	}
	if err := l.startSegment(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *SegmentLog) segPath(n uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%016x.seg", n))
}

// segmentNumbers lists the segment files of the directory, oldest first.
func (l *SegmentLog) segmentNumbers() ([]uint64, error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("storage: publication log: %w", err)
	}
	var ns []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".seg")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(name, 16, 64)
		if err != nil || len(name) != 16 {
			return nil, fmt.Errorf("storage: publication log %s: unexpected file %s", l.dir, e.Name())
		}
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns, nil
}

// recSource is one source's state while the segments are read.
type recSource struct {
	last  uint64
	first uint64 // first seq not released
	pubs  []message.Pub
}

// read reads every segment in order, rebuilding the index and the
// segments' list, and returns the retained publications if want.
func (l *SegmentLog) read(want bool) (Recovered, error) {
	ns, err := l.segmentNumbers()
	if err != nil {
		return Recovered{}, err
	}
	state := map[message.Source]*recSource{}
	get := func(s message.Source) *recSource {
		r := state[s]
		if r == nil {
			r = &recSource{}
			state[s] = r
		}
		return r
	}
	release := func(r *recSource, upTo uint64) {
		r.first = max(r.first, upTo+1)
		i := 0
		for i < len(r.pubs) && r.pubs[i].ID.Seq <= upTo {
			i++
		}
		r.pubs = r.pubs[i:]
	}
	var segs []*segment
	for i, n := range ns {
		seg := &segment{n: n, high: map[message.Source]uint64{}}
		segs = append(segs, seg)
		last := i == len(ns)-1
		err := l.readSegment(n, last, func(body []byte) error {
			switch body[0] {
			case recPub:
				m, n, err := wire.Decode(body[1:], 0)
				if err != nil {
					return err
				}
				if n != len(body)-1 {
					return errors.New("trailing bytes after the publication")
				}
				p, ok := m.(*message.Pub)
				if !ok {
					return fmt.Errorf("a %v where a publication was expected", m.Type())
				}
				s := p.ID.Source()
				r := get(s)
				r.last = max(r.last, p.ID.Seq)
				if p.ID.Seq >= r.first {
					r.pubs = append(r.pubs, *p)
				}
				seg.high[s] = max(seg.high[s], p.ID.Seq)
			case recRelease:
				s, rest, err := parseSource(body[1:])
				if err != nil || len(rest) != 8 {
					return errors.New("bad release record")
				}
				release(get(s), binary.BigEndian.Uint64(rest))
			case recCheckpoint:
				rest := body[1:]
				if len(rest) < 4 {
					return errors.New("bad checkpoint record")
				}
				count := binary.BigEndian.Uint32(rest)
				rest = rest[4:]
				for range count {
					s, more, err := parseSource(rest)
					if err != nil || len(more) < 16 {
						return errors.New("bad checkpoint record")
					}
					r := get(s)
					r.last = max(r.last, binary.BigEndian.Uint64(more))
					if first := binary.BigEndian.Uint64(more[8:]); first > 0 {
						release(r, first-1)
					}
					rest = more[16:]
				}
				if len(rest) != 0 {
					return errors.New("bad checkpoint record")
				}
			default:
				return fmt.Errorf("unknown record kind %q", body[0])
			}
			return nil
		})
		if err != nil {
			return Recovered{}, err
		}
	}
	srcs := make([]message.Source, 0, len(state))
	for s := range state {
		srcs = append(srcs, s)
	}
	slices.SortFunc(srcs, compareSource)
	idx := newLogIndex()
	var rec Recovered
	for _, s := range srcs {
		r := state[s]
		for i := range r.pubs {
			idx.add(&r.pubs[i])
		}
		if want {
			rec.Pubs = append(rec.Pubs, r.pubs...)
		}
		idx.noteLast(s, r.last)
	}
	l.idx = idx
	l.segs = segs
	rec.Last = idx.lasts()
	return rec, nil
}

// readSegment calls record with the body of each record of segment n. A
// record cut short or failing its checksum ends the last segment (the
// file is truncated there); in any other it is damage.
func (l *SegmentLog) readSegment(n uint64, last bool, record func(body []byte) error) error {
	path := l.segPath(n)
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("storage: publication log: %w", err)
	}
	damaged := func(off int, why error) error {
		return fmt.Errorf("storage: publication log %s: record at offset %d: %v; the log is damaged: move the data directory aside to start this broker without it (its unsafe publications are then lost)", path, off, why)
	}
	off := 0
	for off < len(data) {
		var bad error
		if len(data)-off < recordHeader {
			bad = errors.New("cut short")
		} else if size := binary.LittleEndian.Uint32(data[off:]); size == 0 || size > maxRecord || int(size) > len(data)-off-recordHeader {
			bad = errors.New("cut short or a bad length")
		} else if body := data[off+recordHeader : off+recordHeader+int(size)]; crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(data[off+4:]) {
			bad = errors.New("checksum mismatch")
		} else {
			if err := record(body); err != nil {
				return damaged(off, err)
			}
			off += recordHeader + int(size)
			continue
		}
		if !last {
			return damaged(off, bad)
		}
		// The tail a crash cut: never acknowledged (see SegmentLog). The
		// cut is synced before a later segment exists, in which this one
		// is no longer the last.
		return truncateSynced(path, int64(off))
	}
	return nil
}

// beginRecord starts a record in l.buf: the body is appended after it,
// then endRecord(start) fills in the header.
func (l *SegmentLog) beginRecord() (start int) {
	start = len(l.buf)
	l.buf = append(l.buf, make([]byte, recordHeader)...)
	return start
}

func (l *SegmentLog) endRecord(start int) {
	b := l.buf[start+recordHeader:]
	binary.LittleEndian.PutUint32(l.buf[start:], uint32(len(b)))
	binary.LittleEndian.PutUint32(l.buf[start+4:], crc32.Checksum(b, crcTable))
}

// write writes l.buf to the active segment (and syncs it), then empties
// l.buf. A failed write fails the log for good: what reached the file is
// unknown.
func (l *SegmentLog) write(sync bool) error {
	if l.failed != nil {
		return l.failed
	}
	if len(l.buf) > 0 {
		if _, err := l.f.Write(l.buf); err != nil {
			l.failed = fmt.Errorf("storage: publication log %s: %w", l.f.Name(), err)
			return l.failed
		}
		l.size += int64(len(l.buf))
		l.buf = l.buf[:0]
	}
	if sync {
		if err := l.f.Sync(); err != nil {
			l.failed = fmt.Errorf("storage: publication log %s: %w", l.f.Name(), err)
			return l.failed
		}
	}
	return nil
}

// startSegment syncs the active segment and starts the next one with a
// checkpoint of the index, synced along with the directory entry.
func (l *SegmentLog) startSegment() error {
	var n uint64
	if len(l.segs) > 0 {
		n = l.segs[len(l.segs)-1].n + 1
	}
	if l.f != nil {
		if err := l.write(true); err != nil {
			return err
		}
		if err := l.f.Close(); err != nil {
			return fmt.Errorf("storage: publication log: %w", err)
		}
		l.f = nil
	}
	f, err := os.OpenFile(l.segPath(n), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		l.failed = fmt.Errorf("storage: publication log: %w", err)
		return l.failed
	}
	l.f, l.size = f, 0
	l.segs = append(l.segs, &segment{n: n, high: map[message.Source]uint64{}})
	l.buf = l.buf[:0]
	start := l.beginRecord()
	l.buf = append(l.buf, recCheckpoint, 0, 0, 0, 0)
	count := 0
	for _, s := range l.idx.order {
		if m := l.idx.src[s]; m != nil {
			l.buf = appendSource(l.buf, s)
			l.buf = binary.BigEndian.AppendUint64(l.buf, m.last)
			l.buf = binary.BigEndian.AppendUint64(l.buf, m.first)
			count++
		}
	}
	binary.BigEndian.PutUint32(l.buf[start+recordHeader+1:], uint32(count))
	l.endRecord(start)
	if err := l.write(true); err != nil {
		return err
	}
	if err := syncDir(l.dir); err != nil {
		l.failed = err
		return err
	}
	l.dropReleased()
	return nil
}

// dropReleased deletes the segments before the active one whose
// publications are all released. Not synced: a deleted segment that comes
// back after a crash only offers released publications again, which the
// active segment's checkpoint releases at once.
func (l *SegmentLog) dropReleased() {
	kept := l.segs[:0]
	for i, seg := range l.segs {
		if i < len(l.segs)-1 && l.released(seg) {
			if err := os.Remove(l.segPath(seg.n)); err == nil || errors.Is(err, os.ErrNotExist) {
				continue
			}
		}
		kept = append(kept, seg)
	}
	clear(l.segs[len(kept):])
	l.segs = kept
}

func (l *SegmentLog) released(seg *segment) bool {
	for s, high := range seg.high {
		if m := l.idx.src[s]; m != nil && len(m.sizes) > 0 && m.first <= high {
			return false
		}
	}
	return true
}

// Append implements Log: one write of all the records, then an fsync if
// sync.
func (l *SegmentLog) Append(pubs []message.Pub, sync bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return l.failed
	}
	if l.size >= l.segmentBytes {
		if err := l.startSegment(); err != nil {
			return err
		}
	}
	l.buf = l.buf[:0]
	for i := range pubs {
		p := pubs[i]
		p.Stamps = nil
		start := l.beginRecord()
		var err error
		if l.buf, err = wire.AppendFrame(append(l.buf, recPub), &p); err != nil {
			l.buf = l.buf[:0]
			return fmt.Errorf("storage: publication log: %s: %w", p.ID, err)
		}
		l.endRecord(start)
	}
	if err := l.write(sync); err != nil {
		return err
	}
	seg := l.segs[len(l.segs)-1]
	for i := range pubs {
		s := pubs[i].ID.Source()
		seg.high[s] = max(seg.high[s], pubs[i].ID.Seq)
		l.idx.add(&pubs[i]) // a source forgotten at the bound is left out of the next checkpoint
	}
	return nil
}

// Release implements Log: release records written, not synced.
func (l *SegmentLog) Release(rs []Release) error {
	if len(rs) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return l.failed
	}
	l.buf = l.buf[:0]
	for _, r := range rs {
		start := l.beginRecord()
		l.buf = appendSource(append(l.buf, recRelease), r.Source)
		l.buf = binary.BigEndian.AppendUint64(l.buf, r.Seq)
		l.endRecord(start)
	}
	if err := l.write(false); err != nil {
		return err
	}
	for _, r := range rs {
		l.idx.release(r.Source, r.Seq)
	}
	l.dropReleased()
	return nil
}

// Recover implements Log.
func (l *SegmentLog) Recover() (Recovered, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.write(false); err != nil {
		return Recovered{}, err
	}
	return l.read(true)
}

// Stats implements Log.
func (l *SegmentLog) Stats() LogStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idx.stats()
}

// Sync implements Log.
func (l *SegmentLog) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.write(true)
}

// Close implements Log: the active segment is synced and closed.
func (l *SegmentLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.write(true)
	if cerr := l.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("storage: publication log: %w", cerr)
	}
	l.f = nil
	if l.failed == nil {
		l.failed = errors.New("storage: publication log: closed")
	}
	return err
}

// migrate moves a log of the earlier pebble format at path into l (its
// retained publications and every source's last seq), synced, then
// removes it.
func (l *SegmentLog) migrate(path string) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	old, err := OpenPebbleLog(path)
	if err != nil {
		return err
	}
	rec, err := old.Recover()
	old.Close()
	if err != nil {
		return err
	}
	if err := l.Append(rec.Pubs, false); err != nil {
		return err
	}
	l.mu.Lock()
	for _, id := range rec.Last {
		l.idx.noteLast(id.Source(), id.Seq)
	}
	err = l.startSegment() // a checkpoint with the last seqs, synced
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("storage: publication log: removing the migrated %s: %w", path, err)
	}
	return nil
}

// truncateSynced truncates the file at path to size, durably.
func truncateSynced(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("storage: publication log: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("storage: publication log: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("storage: publication log: %w", err)
	}
	return nil
}

// syncDir makes a directory's entries (a new file) durable.
func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("storage: syncing %s: %w", path, err)
	}
	return nil
}
