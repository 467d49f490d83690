package baseline

import (
	"context"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/wire"
)

func TestPublicationSize(t *testing.T) {
	for _, size := range []int{250, 1000} {
		f, err := wire.AppendFrame(nil, Publication(size))
		if err != nil {
			t.Fatal(err)
		}
		if len(f) > size || len(f) < size-3 {
			t.Fatalf("frame of %d bytes for size %d", len(f), size)
		}
	}
}

func TestRelayChainDelivers(t *testing.T) {
	r, err := Run(context.Background(), Options{Messages: 20000, Relays: 2, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Messages != 20000 || r.MsgsPerSec <= 0 {
		t.Fatalf("%+v", r)
	}
	t.Log(r)
}

func BenchmarkRelayChain1(b *testing.B) { benchChain(b, 1) }
func BenchmarkRelayChain2(b *testing.B) { benchChain(b, 2) }
func BenchmarkRelayChain3(b *testing.B) { benchChain(b, 3) }

func benchChain(b *testing.B, relays int) {
	for b.Loop() {
		r, err := Run(context.Background(), Options{Messages: 200000, Relays: relays})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.MsgsPerSec, "msgs/s")
	}
}
