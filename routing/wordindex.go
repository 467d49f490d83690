package routing

import "github.com/deltapub/deltapub/message"

// wordIndex finds an entry's slot by its SubID: an open-addressing table
// (linear probing) of uint64 words, each the high 32 bits of the Sub's
// hash (which also give its home position) above slot+1 (0: empty). It
// replaces a map[message.SubID]*Entry: a flooded subscription is looked up
// and inserted in a table that the previous hundred floods have left
// cold, and a lookup here reads one cache line (the Go map read a control
// word, then a slot in another line); a miss never reads an entry (only a
// 32-bit hash match is verified against the entry's Sub). The words hold
// no pointers, so the collector never scans them.
type wordIndex struct {
	words []uint64 // power of two; nil until the first insert
	n     int
}

const wordIndexMin = 64

// subHash is a fixed hash of a SubID (the layout of the table never
// reaches outputs; a fixed hash keeps runs reproducible).
func subHash(s message.SubID) uint32 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s.Edge); i++ {
		h = (h ^ uint64(s.Edge[i])) * 1099511628211
	}
	h ^= s.Epoch * 0x9e3779b97f4a7c15
	h = (h ^ h>>31) * 0xbf58476d1ce4e5b9
	h ^= s.N * 0x94d049bb133111eb
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	h ^= h >> 31
	return uint32(h >> 32)
}

// find returns the slot of sub (ok) or, if absent, the position of the
// empty word where it would go (pos; -1 when the table is empty).
func (x *wordIndex) find(sub message.SubID, h uint32, slots []*Entry) (slot uint32, pos int, ok bool) {
	if len(x.words) == 0 {
		return 0, -1, false
	}
	mask := uint32(len(x.words) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		w := x.words[i]
		if w == 0 {
			return 0, int(i), false
		}
		if uint32(w>>32) == h {
			s := uint32(w) - 1
			if slots[s].Sub == sub {
				return s, int(i), true
			}
		}
	}
}

// add records slot for a Sub of hash h absent from the table; pos is
// what find returned for it (valid while the table did not change).
func (x *wordIndex) add(h uint32, slot uint32, pos int) {
	if pos < 0 || (x.n+1)*4 > len(x.words)*3 {
		x.grow()
		pos = x.free(h)
	}
	x.words[pos] = uint64(h)<<32 | uint64(slot+1)
	x.n++
}

// free returns the first empty position on h's probe sequence.
func (x *wordIndex) free(h uint32) int {
	mask := uint32(len(x.words) - 1)
	i := h & mask
	for x.words[i] != 0 {
		i = (i + 1) & mask
	}
	return int(i)
}

func (x *wordIndex) grow() {
	old := x.words
	n := 4 * len(old) // few rehashes: each reads a cold table
	if n < wordIndexMin {
		n = wordIndexMin
	}
	x.words = make([]uint64, n)
	for _, w := range old {
		if w != 0 {
			x.words[x.free(uint32(w>>32))] = w
		}
	}
}

// remove empties position pos (found by find), shifting back the words
// after it that may not stay behind the hole (no tombstones).
func (x *wordIndex) remove(pos int) {
	mask := len(x.words) - 1
	i := pos
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		w := x.words[j]
		if w == 0 {
			break
		}
		home := int(uint32(w>>32)) & mask
		// w may move to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.words[i] = w
			i = j
		}
	}
	x.words[i] = 0
	x.n--
}

func (x *wordIndex) reset() {
	clear(x.words)
	x.n = 0
}
