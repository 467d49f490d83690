package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/deltapub/deltapub/message"
)

// cutStubLink is a PeerLink that only records Close.
type cutStubLink struct {
	peer   message.BrokerID
	closed string
}

func (l *cutStubLink) Peer() message.BrokerID       { return l.peer }
func (l *cutStubLink) TrySend(message.Message) bool { return l.closed == "" }
func (l *cutStubLink) Send(message.Message) error   { return nil }
func (l *cutStubLink) Queued() int                  { return 0 }
func (l *cutStubLink) Close(reason string)          { l.closed = reason }

// cutStubTransport dials a fresh stub link to whoever answers at addr.
type cutStubTransport struct {
	at    map[string]message.BrokerID
	dials int
}

func (t *cutStubTransport) Dial(_ context.Context, peer message.BrokerID, addr string) (PeerLink, error) {
	t.dials++
	p, ok := t.at[addr]
	if !ok {
		return nil, errors.New("nobody there")
	}
	return &cutStubLink{peer: p}, nil
}

func TestLinkCutsBlockAndHeal(t *testing.T) {
	var c linkCuts
	b2, b3 := &cutStubLink{peer: "B2"}, &cutStubLink{peer: "B3"}
	if !c.up(b2) || !c.up(b3) {
		t.Fatal("links refused with nothing cut")
	}
	if c.isBlocked("B2") {
		t.Fatal("B2 blocked before any cut")
	}
	if ok, err := c.cut("B2"); !ok || err != nil {
		t.Fatalf("cut B2 = %v, %v", ok, err)
	}
	if b2.closed == "" {
		t.Error("the up link to B2 was not closed by the cut")
	}
	if b3.closed != "" {
		t.Errorf("the link to B3 was closed by a cut of B2: %q", b3.closed)
	}
	if ok, _ := c.cut("B2"); ok {
		t.Error("a second cut of B2 reported new")
	}
	// A link B2 dials while cut is closed on arrival and not reported.
	again := &cutStubLink{peer: "B2"}
	if c.up(again) {
		t.Error("a link from cut B2 was admitted")
	}
	if again.closed == "" {
		t.Error("a link from cut B2 was left open")
	}
	c.down(b2)
	if got := c.list(); !slices.Equal(got, []message.BrokerID{"B2"}) {
		t.Errorf("cuts = %v, want [B2]", got)
	}
	if c.heal("B3") {
		t.Error("healed B3, which was not cut")
	}
	if !c.heal("B2") {
		t.Fatal("heal B2 reported not cut")
	}
	if c.isBlocked("B2") || len(c.list()) != 0 {
		t.Errorf("still blocked after heal: %v", c.list())
	}
	fresh := &cutStubLink{peer: "B2"}
	if !c.up(fresh) || fresh.closed != "" {
		t.Error("a link to B2 refused after heal")
	}
}

func TestLinkCutsBound(t *testing.T) {
	var c linkCuts
	for i := range maxCuts {
		if _, err := c.cut(message.BrokerID(fmt.Sprintf("B%d", i))); err != nil {
			t.Fatalf("cut %d: %v", i, err)
		}
	}
	if _, err := c.cut("one-too-many"); err == nil {
		t.Fatalf("cut beyond %d accepted", maxCuts)
	}
	if !c.heal("B0") {
		t.Fatal("heal B0")
	}
	if _, err := c.cut("one-too-many"); err != nil {
		t.Fatalf("cut after a heal made room: %v", err)
	}
}

func TestCutTransportRefusesDials(t *testing.T) {
	var c linkCuts
	tr := &cutStubTransport{at: map[string]message.BrokerID{"a2": "B2", "a3": "B3"}}
	ct := cutTransport{tr, &c}
	ctx := context.Background()
	if _, err := c.cut("B2"); err != nil {
		t.Fatal(err)
	}
	if _, err := ct.Dial(ctx, "B2", "a2"); err == nil {
		t.Error("dial of cut B2 by ID succeeded")
	}
	if tr.dials != 0 {
		t.Errorf("a dial of a cut peer reached the network (%d dials)", tr.dials)
	}
	// By address only (a joinpoint): the answer names B2, which is cut.
	if _, err := ct.Dial(ctx, "", "a2"); err == nil {
		t.Error("dial by address of cut B2 succeeded")
	}
	if l, err := ct.Dial(ctx, "B3", "a3"); err != nil || l.Peer() != "B3" {
		t.Errorf("dial of B3 (not cut) = %v, %v", l, err)
	}
	c.heal("B2")
	if _, err := ct.Dial(ctx, "B2", "a2"); err != nil {
		t.Errorf("dial of B2 after heal: %v", err)
	}
}

func TestRuntimeCutRefusesItself(t *testing.T) {
	r := &Runtime{cfg: BrokerConfig{ID: "B1"}}
	if err := r.Cut("B1"); err == nil {
		t.Error("a broker cut its link to itself")
	}
	if err := r.Cut(""); err == nil {
		t.Error("a cut of no peer accepted")
	}
}
