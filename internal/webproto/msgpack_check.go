package webproto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// maxDepth bounds the nesting of a msgpack frame (a filter's triples are at
// depth 3).
const maxDepth = 8

// checkMsgpack walks one msgpack value before it is decoded: every declared
// length must fit in what is left of the frame, and nesting is bounded, so
// that a few bytes claiming a map of four billion entries are refused
// instead of allocated.
func checkMsgpack(b []byte) error {
	n, err := skipValue(b, 0, 0)
	if err != nil {
		return err
	}
	if n != len(b) {
		return errors.New("trailing bytes after the msgpack value")
	}
	return nil
}

func skipValue(b []byte, pos, depth int) (int, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	if pos >= len(b) {
		return 0, errors.New("truncated")
	}
	c := b[pos]
	pos++
	length := func(size int) (int, error) {
		if pos+size > len(b) {
			return 0, errors.New("truncated")
		}
		var n uint64
		switch size {
		case 1:
			n = uint64(b[pos])
		case 2:
			n = uint64(binary.BigEndian.Uint16(b[pos:]))
		case 4:
			n = uint64(binary.BigEndian.Uint32(b[pos:]))
		}
		pos += size
		if n > uint64(len(b)-pos) {
			return 0, errors.New("length past the end of the frame")
		}
		return int(n), nil
	}
	bytesOf := func(size, extra int) (int, error) {
		n, err := length(size)
		if err != nil {
			return 0, err
		}
		if pos+extra+n > len(b) {
			return 0, errors.New("truncated")
		}
		return pos + extra + n, nil
	}
	items := func(n, per int) (int, error) {
		var err error
		for range n * per {
			if pos, err = skipValue(b, pos, depth+1); err != nil {
				return 0, err
			}
		}
		return pos, nil
	}
	fixed := func(n int) (int, error) {
		if pos+n > len(b) {
			return 0, errors.New("truncated")
		}
		return pos + n, nil
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return pos, nil
	case c >= 0x80 && c <= 0x8f:
		return items(int(c&0x0f), 2)
	case c >= 0x90 && c <= 0x9f:
		return items(int(c&0x0f), 1)
	case c >= 0xa0 && c <= 0xbf:
		return fixed(int(c & 0x1f))
	}
	switch c {
	case 0xc4, 0xd9:
		return bytesOf(1, 0)
	case 0xc5, 0xda:
		return bytesOf(2, 0)
	case 0xc6, 0xdb:
		return bytesOf(4, 0)
	case 0xc7:
		return bytesOf(1, 1)
	case 0xc8:
		return bytesOf(2, 1)
	case 0xc9:
		return bytesOf(4, 1)
	case 0xcc, 0xd0:
		return fixed(1)
	case 0xcd, 0xd1:
		return fixed(2)
	case 0xca, 0xce, 0xd2:
		return fixed(4)
	case 0xcb, 0xcf, 0xd3:
		return fixed(8)
	case 0xd4:
		return fixed(2)
	case 0xd5:
		return fixed(3)
	case 0xd6:
		return fixed(5)
	case 0xd7:
		return fixed(9)
	case 0xd8:
		return fixed(17)
	case 0xdc, 0xde:
		n, err := length(2)
		if err != nil {
			return 0, err
		}
		return items(n, map[byte]int{0xdc: 1, 0xde: 2}[c])
	case 0xdd, 0xdf:
		n, err := length(4)
		if err != nil {
			return 0, err
		}
		return items(n, map[byte]int{0xdd: 1, 0xdf: 2}[c])
	}
	return 0, fmt.Errorf("byte 0x%02x is not msgpack", c)
}
