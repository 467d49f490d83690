package wire

import (
	"encoding/binary"
	"errors"
)

// validate checks that b holds exactly one well-formed msgpack value whose
// every declared length fits in what remains of b, with lists of at most
// MaxListLen elements and nesting of at most MaxDepth. It allocates nothing.
// msgpack's own decoder trusts declared lengths (it preallocates up to a
// million elements for an array header of 5 bytes); after validate it
// cannot be made to.
func validate(b []byte) error { return Validate(b) }

// Validate is validate for other decoders of msgpack from untrusted peers
// (internal/webproto's binary frames).
func Validate(b []byte) error {
	budget := MaxFrameValues
	end, err := skipValue(b, 0, 0, &budget)
	if err != nil {
		return err
	}
	if end != len(b) {
		return errTrailing
	}
	return nil
}

var (
	errTruncated = errors.New("truncated msgpack value")
	errTrailing  = errors.New("trailing bytes after the msgpack value")
	errTooDeep   = errors.New("msgpack nesting deeper than the maximum")
	errTooLong   = errors.New("msgpack list longer than the maximum")
	errReserved  = errors.New("reserved msgpack code 0xc1")
	errTooMany   = errors.New("more msgpack list elements in the frame than the maximum")
)

// skipValue returns the offset just past the value that starts at b[i].
func skipValue(b []byte, i, depth int, budget *int) (int, error) {
	if i >= len(b) {
		return 0, errTruncated
	}
	c := b[i]
	i++
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		return i, nil
	case c >= 0x80 && c <= 0x8f: // fixmap
		return skipList(b, i, int(c&0x0f), 2, depth, budget)
	case c >= 0x90 && c <= 0x9f: // fixarray
		return skipList(b, i, int(c&0x0f), 1, depth, budget)
	case c >= 0xa0 && c <= 0xbf: // fixstr
		return skipBytes(b, i, int(c&0x1f))
	}
	switch c {
	case 0xc1:
		return 0, errReserved
	case 0xc4, 0xd9: // bin8, str8
		n, i, err := readLen(b, i, 1)
		if err != nil {
			return 0, err
		}
		return skipBytes(b, i, n)
	case 0xc5, 0xda: // bin16, str16
		n, i, err := readLen(b, i, 2)
		if err != nil {
			return 0, err
		}
		return skipBytes(b, i, n)
	case 0xc6, 0xdb: // bin32, str32
		n, i, err := readLen(b, i, 4)
		if err != nil {
			return 0, err
		}
		return skipBytes(b, i, n)
	case 0xc7, 0xc8, 0xc9: // ext8/16/32: length, type byte, data
		w := 1 << (c - 0xc7) // 1, 2 or 4 length bytes
		n, i, err := readLen(b, i, w)
		if err != nil {
			return 0, err
		}
		return skipBytes(b, i, n+1)
	case 0xca: // float32
		return skipBytes(b, i, 4)
	case 0xcb: // float64
		return skipBytes(b, i, 8)
	case 0xcc, 0xd0: // uint8, int8
		return skipBytes(b, i, 1)
	case 0xcd, 0xd1:
		return skipBytes(b, i, 2)
	case 0xce, 0xd2:
		return skipBytes(b, i, 4)
	case 0xcf, 0xd3:
		return skipBytes(b, i, 8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1,2,4,8,16 plus the type byte
		return skipBytes(b, i, 1+(1<<(c-0xd4)))
	case 0xdc: // array16
		n, i, err := readLen(b, i, 2)
		if err != nil {
			return 0, err
		}
		return skipList(b, i, n, 1, depth, budget)
	case 0xdd: // array32
		n, i, err := readLen(b, i, 4)
		if err != nil {
			return 0, err
		}
		return skipList(b, i, n, 1, depth, budget)
	case 0xde: // map16
		n, i, err := readLen(b, i, 2)
		if err != nil {
			return 0, err
		}
		return skipList(b, i, n, 2, depth, budget)
	case 0xdf: // map32
		n, i, err := readLen(b, i, 4)
		if err != nil {
			return 0, err
		}
		return skipList(b, i, n, 2, depth, budget)
	}
	return 0, errReserved // unreachable: every byte value is covered above
}

func readLen(b []byte, i, w int) (int, int, error) {
	if len(b)-i < w {
		return 0, 0, errTruncated
	}
	var n uint64
	switch w {
	case 1:
		n = uint64(b[i])
	case 2:
		n = uint64(binary.BigEndian.Uint16(b[i:]))
	case 4:
		n = uint64(binary.BigEndian.Uint32(b[i:]))
	}
	// A declared length can never exceed the bytes left in the frame; the
	// comparison is in uint64 so that no int overflow can hide a huge value.
	if n > uint64(len(b)-i-w) {
		return 0, 0, errTruncated
	}
	return int(n), i + w, nil
}

func skipBytes(b []byte, i, n int) (int, error) {
	if n < 0 || n > len(b)-i {
		return 0, errTruncated
	}
	return i + n, nil
}

// skipList skips a list of n elements of per values each (1 for an array,
// 2 for a map: key and value).
func skipList(b []byte, i, n, per, depth int, budget *int) (int, error) {
	if n > MaxListLen {
		return 0, errTooLong
	}
	n *= per
	if *budget -= n; *budget < 0 {
		return 0, errTooMany
	}
	if n > len(b)-i { // every value takes at least one byte
		return 0, errTruncated
	}
	if n > 0 && depth >= MaxDepth {
		return 0, errTooDeep
	}
	var err error
	for k := 0; k < n; k++ {
		if i, err = skipValue(b, i, depth+1, budget); err != nil {
			return 0, err
		}
	}
	return i, nil
}
