package quic

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

type nopHandler struct{}

func (nopHandler) PeerUp(*Link)                            {}
func (nopHandler) PeerMessage(*Link, message.Message)      {}
func (nopHandler) PeerDown(*Link, error)                   {}
func (nopHandler) ClientUp(*Session)                       {}
func (nopHandler) ClientMessage(*Session, message.Message) {}
func (nopHandler) ClientDown(*Session, error)              {}

// The certificates MakeCerts makes link two brokers over mutual TLS, and a
// second call reuses the CA.
func TestMakeCertsLinkBrokers(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	if err := MakeCerts(dir, []string{"B1", "B2"}, time.Hour, &out); err != nil {
		t.Fatal(err)
	}
	if err := MakeCerts(dir, []string{"B3"}, time.Hour, &out); err != nil { // reuses the CA
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "CA: "); got != 1 {
		t.Fatalf("CA made %d times, want once:\n%s", got, out.String())
	}
	if err := MakeCerts(dir, []string{"../B4"}, time.Hour, &out); err == nil {
		t.Fatal("a broker ID with a path in it was accepted")
	}
	ep := func(id string) *Endpoint {
		e, err := Listen(Config{ID: message.BrokerID(id), Listen: "127.0.0.1:0", Log: zerolog.Nop(),
			CertFile: filepath.Join(dir, id+".pem"), KeyFile: filepath.Join(dir, id+"-key.pem"),
			CAFile: filepath.Join(dir, "ca.pem")}, nopHandler{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	a, b, c := ep("B1"), ep("B2"), ep("B3")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Dial(ctx, "B1", a.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Dial(ctx, "B1", a.Addr().String()); err != nil {
		t.Fatalf("certificate made with the reused CA: %v", err)
	}
}
