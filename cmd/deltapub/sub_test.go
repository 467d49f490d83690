package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/deltapub/deltapub/client"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

func TestDeliveryJSONLine(t *testing.T) {
	pub := time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)
	d := client.Delivery{
		Sub: message.SubID{Edge: "B3", Epoch: 5, N: 1},
		Pub: message.PubID{Publisher: "p\"1", Epoch: 7, Seq: 42},
		Attrs: []matching.Attr{
			{Name: "class", Value: matching.Str("STOCK")},
			{Name: "note", Value: matching.Str("tab\there \"quoted\" \\ é \u2028 \x01")},
			{Name: "n", Value: matching.Int(-3)},
			{Name: "price", Value: matching.Float(100)},
			{Name: "ratio", Value: matching.Float(1.5e-7)},
		},
		Payload:     make([]byte, 250),
		PublishedAt: pub,
		ReceivedAt:  pub.Add(1500 * time.Microsecond),
	}
	line := appendDeliveryJSON(nil, &d)
	if !strings.HasSuffix(string(line), "}\n") || strings.Count(string(line), "\n") != 1 {
		t.Fatalf("not one line: %q", line)
	}
	var got struct {
		Publisher    string         `json:"publisher"`
		Epoch        uint64         `json:"epoch"`
		Seq          uint64         `json:"seq"`
		Sub          string         `json:"sub"`
		Attrs        map[string]any `json:"attrs"`
		PayloadBytes int            `json:"payload_bytes"`
		PublishedAt  time.Time      `json:"published_at"`
		ReceivedAt   time.Time      `json:"received_at"`
	}
	dec := json.NewDecoder(strings.NewReader(string(line)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if got.Publisher != "p\"1" || got.Epoch != 7 || got.Seq != 42 || got.Sub != "B3/5/1" || got.PayloadBytes != 250 {
		t.Errorf("decoded %+v", got)
	}
	if got.Attrs["note"] != d.Attrs[1].Value.Str || got.Attrs["n"] != float64(-3) || got.Attrs["price"] != float64(100) || got.Attrs["ratio"] != 1.5e-7 {
		t.Errorf("attrs %v", got.Attrs)
	}
	if !got.PublishedAt.Equal(pub) || got.ReceivedAt.Sub(got.PublishedAt) != 1500*time.Microsecond {
		t.Errorf("times %v %v", got.PublishedAt, got.ReceivedAt)
	}
	// Attributes keep the publication's order; a float stays a float.
	if i, j := strings.Index(string(line), `"class"`), strings.Index(string(line), `"ratio"`); i < 0 || j < i {
		t.Errorf("attribute order lost: %s", line)
	}
	if !strings.Contains(string(line), `"price":100.0`) {
		t.Errorf("float written as an integer: %s", line)
	}
}
