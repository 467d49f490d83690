// Package checkpoint is the checkpoint token (CT) of a durable
// subscription: per source (publisher, epoch), the last sequence number the
// subscriber consumed and the silence horizon (every publication of the
// source up to it is consumed or did not match). The subscriber keeps its
// token, hands it to a broker when it subscribes again (to the same broker
// or another), and acknowledges by sending it (docs/durable.md).
//
// The encoding is binary, versioned and checksummed:
//
//	"DPCT" | version (1 byte) | uvarint len(name) | name |
//	uvarint count | count × (uvarint len(publisher) | publisher |
//	uvarint epoch | uvarint seq | uvarint horizon) | CRC-32C (4 bytes, big endian)
//
// entries in strictly increasing source order. A token that does not
// start with the magic, has another version, fails its checksum, names more
// than MaxSources sources or is not canonical is refused by Decode with an
// error saying which.
package checkpoint

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/deltapub/deltapub/message"
)

// Version is the encoding version written by Encode.
const Version = 1

// Bounds of a token. At MaxSources a token refuses a new source
// (Consume and Advance report it): the subscription must be made anew
// (a fresh token) or its name retired.
const (
	MaxSources   = 4096
	MaxName      = 256
	MaxPublisher = 256
)

var magic = [4]byte{'D', 'P', 'C', 'T'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrFull is reported when a token would name more than MaxSources sources.
var ErrFull = fmt.Errorf("checkpoint: token full (%d sources)", MaxSources)

// Entry is what a token holds for one source.
type Entry struct {
	Source  message.Source
	Seq     uint64 // last sequence number consumed (delivered and handled)
	Horizon uint64 // every publication up to Horizon is consumed, filtered out or given up (Gap)
}

// From is the sequence number after which the source is still to be
// consumed.
func (e Entry) From() uint64 { return max(e.Seq, e.Horizon) }

// Token is a decoded checkpoint token. The zero value with a Name is the
// token of a new subscription.
type Token struct {
	Name    string  // the durable subscription's name
	Entries []Entry // sorted by source, one per source
}

func srcCmp(a, b message.Source) int {
	if c := cmp.Compare(a.Publisher, b.Publisher); c != 0 {
		return c
	}
	return cmp.Compare(a.Epoch, b.Epoch)
}

func (t *Token) find(s message.Source) (int, bool) {
	return slices.BinarySearchFunc(t.Entries, s, func(e Entry, s message.Source) int { return srcCmp(e.Source, s) })
}

// Get returns the entry of s (the zero entry when s is not named).
func (t *Token) Get(s message.Source) Entry {
	if i, ok := t.find(s); ok {
		return t.Entries[i]
	}
	return Entry{Source: s}
}

// Consume records the delivery of seq of s.
func (t *Token) Consume(s message.Source, seq uint64) error {
	return t.update(s, func(e *Entry) { e.Seq = max(e.Seq, seq) })
}

// Advance records that nothing of s up to h is still to be consumed.
func (t *Token) Advance(s message.Source, h uint64) error {
	return t.update(s, func(e *Entry) { e.Horizon = max(e.Horizon, h) })
}

func (t *Token) update(s message.Source, f func(*Entry)) error {
	i, ok := t.find(s)
	if !ok {
		if len(t.Entries) >= MaxSources {
			return ErrFull
		}
		if len(s.Publisher) > MaxPublisher {
			return fmt.Errorf("checkpoint: publisher name of %d bytes, at most %d", len(s.Publisher), MaxPublisher)
		}
		t.Entries = slices.Insert(t.Entries, i, Entry{Source: s})
	}
	f(&t.Entries[i])
	return nil
}

// Clone returns a deep copy of t.
func (t *Token) Clone() Token {
	return Token{Name: t.Name, Entries: slices.Clone(t.Entries)}
}

// Encode returns the binary token.
func (t *Token) Encode() []byte {
	n := 4 + 1 + binary.MaxVarintLen64 + len(t.Name) + binary.MaxVarintLen64 + 4
	for _, e := range t.Entries {
		n += len(e.Source.Publisher) + 4*binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = append(b, magic[:]...)
	b = append(b, Version)
	b = binary.AppendUvarint(b, uint64(len(t.Name)))
	b = append(b, t.Name...)
	b = binary.AppendUvarint(b, uint64(len(t.Entries)))
	for _, e := range t.Entries {
		b = binary.AppendUvarint(b, uint64(len(e.Source.Publisher)))
		b = append(b, e.Source.Publisher...)
		b = binary.AppendUvarint(b, e.Source.Epoch)
		b = binary.AppendUvarint(b, e.Seq)
		b = binary.AppendUvarint(b, e.Horizon)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// Errors of Decode (wrapped with details).
var (
	ErrForeign   = errors.New("checkpoint: not a deltapub checkpoint token")
	ErrVersion   = errors.New("checkpoint: unsupported token version")
	ErrChecksum  = errors.New("checkpoint: token checksum mismatch (damaged)")
	ErrMalformed = errors.New("checkpoint: malformed token")
)

// Decode parses a token written by Encode.
func Decode(b []byte) (Token, error) {
	if len(b) < 4+1+4 || [4]byte(b[:4]) != magic {
		return Token{}, ErrForeign
	}
	if b[4] != Version {
		return Token{}, fmt.Errorf("%w %d (this build reads %d)", ErrVersion, b[4], Version)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return Token{}, ErrChecksum
	}
	d := dec{b: body[5:]}
	var t Token
	t.Name = d.str(MaxName, "name")
	n := d.uvarint()
	if d.err == nil && n > MaxSources {
		return Token{}, fmt.Errorf("%w: %d sources, at most %d", ErrMalformed, n, MaxSources)
	}
	if d.err == nil && n > 0 {
		t.Entries = make([]Entry, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		var e Entry
		e.Source.Publisher = d.str(MaxPublisher, "publisher")
		e.Source.Epoch = d.uvarint()
		e.Seq = d.uvarint()
		e.Horizon = d.uvarint()
		if d.err == nil && len(t.Entries) > 0 && srcCmp(t.Entries[len(t.Entries)-1].Source, e.Source) >= 0 {
			d.err = errors.New("sources not in increasing order")
		}
		t.Entries = append(t.Entries, e)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d bytes after the last entry", len(d.b))
	}
	if d.err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrMalformed, d.err)
	}
	return t, nil
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.err = errors.New("truncated number")
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *dec) str(limit int, what string) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%s of %d bytes (at most %d, %d left)", what, n, limit, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
