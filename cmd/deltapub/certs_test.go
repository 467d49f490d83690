package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/deltapub/deltapub/internal/quic"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

type nopHandler struct{}

func (nopHandler) PeerUp(*quic.Link)                            {}
func (nopHandler) PeerMessage(*quic.Link, message.Message)      {}
func (nopHandler) PeerDown(*quic.Link, error)                   {}
func (nopHandler) ClientUp(*quic.Session)                       {}
func (nopHandler) ClientMessage(*quic.Session, message.Message) {}
func (nopHandler) ClientDown(*quic.Session, error)              {}

// The certificates deltapub certs makes link two brokers over mutual TLS.
func TestCertsLinkBrokers(t *testing.T) {
	dir := t.TempDir()
	if err := makeCerts(dir, []string{"B1", "B2"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := makeCerts(dir, []string{"B3"}, time.Hour); err != nil { // reuses the CA
		t.Fatal(err)
	}
	ep := func(id string) *quic.Endpoint {
		e, err := quic.Listen(quic.Config{ID: message.BrokerID(id), Listen: "127.0.0.1:0", Log: zerolog.Nop(),
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
	if code := dispatch([]string{"certs", "--dir", dir}); code != 2 {
		t.Fatalf("certs without --brokers exits %d, want 2", code)
	}
}
