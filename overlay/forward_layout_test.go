package overlay

import (
	"testing"
	"unsafe"
)

// TestQentrySize keeps a queue entry a whole number of cache lines on
// 64-bit platforms (384 bytes: a size class of 64-byte aligned objects),
// and what a next hop reads (pub, stampBuf) within four lines.
func TestQentrySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("64-bit layout")
	}
	if s := unsafe.Sizeof(qentry{}); s%64 != 0 {
		t.Errorf("qentry is %d bytes, not a multiple of 64", s)
	}
	if o := unsafe.Offsetof(qentry{}.stampBuf) + unsafe.Sizeof(qentry{}.stampBuf); o > 256 {
		t.Errorf("pub and stampBuf end at byte %d, beyond four cache lines", o)
	}
}
