package wire

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/deltapub/deltapub/message"
)

// FuzzReader feeds arbitrary byte streams to a Reader: every outcome must
// be a message or an error, never a panic, a hang or a huge allocation
// (the Reader's buffer is bounded by maxFrame).
func FuzzReader(f *testing.F) {
	p, _ := AppendFrame(nil, samplePublish(250))
	f.Add(p)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		defer watchdog(in)()
		const maxFrame = 1 << 16
		r := NewReader(bytes.NewReader(in), maxFrame)
		for i := 0; i < 10000; i++ {
			m, err := r.Read()
			if errors.Is(err, ErrUnknownType) {
				continue
			}
			if err != nil {
				return
			}
			// whatever decodes must encode again, and decode to the same type
			frame, err := AppendFrame(nil, m)
			if err != nil {
				t.Fatalf("decoded %T does not re-encode: %v", m, err)
			}
			if m2, _, err := Decode(frame, 0); err != nil || m2.Type() != m.Type() {
				t.Fatalf("re-encoded %T does not decode: %v", m, err)
			}
		}
		if len(in) < 10000 {
			t.Fatalf("reader did not finish a %d-byte input in 10000 reads", len(in))
		}
	})
}

// FuzzDecodeBody decodes arbitrary bodies as every registered type.
func FuzzDecodeBody(f *testing.F) {
	f.Add(uint16(message.TypePubAck), []byte{0x81, 0xa1, 'q', 0x05})
	f.Fuzz(func(t *testing.T, typ uint16, body []byte) {
		defer watchdog(body)()
		m, ok := message.New(message.Type(typ))
		if !ok {
			return
		}
		r := NewReader(nil, 0)
		if err := r.DecodeInto(m, body); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if _, err := AppendFrame(nil, m); err != nil {
			t.Fatalf("decoded %T does not re-encode: %v", m, err)
		}
	})
}

// watchdog turns a hang into a crash that names the input (the fuzzer has
// no per-input timeout of its own). Call as defer watchdog(in)().
func watchdog(in []byte) func() {
	done := make(chan struct{})
	go func() {
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			fmt.Fprintf(os.Stderr, "input hangs for 30s: %x\n", in)
			os.Exit(3)
		}
	}()
	return func() { close(done) }
}
