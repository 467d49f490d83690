package sim

import (
	"reflect"
	"testing"

	"github.com/deltapub/deltapub/internal/oracle"
	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// The compact delivery log gives back every delivery as recorded (a
// regular one's attributes, equal to its publication's, as the record's).
func TestDeliveryLogRoundTrip(t *testing.T) {
	l := NewLog()
	attrs := []matching.Attr{{Name: "class", Value: matching.Str("a")}}
	p := l.AddPub(PubRecord{ID: message.PubID{Publisher: "P", Epoch: 1, Seq: 1}, Attrs: attrs, AckedAt: -1})
	sid := message.SubID{Edge: "B2", Epoch: 1, N: 7}
	l.AddSub(SubRecord{Name: "S", Edge: "B2", ID: sid, HasID: true, ConfirmedAt: -1, UnsubAt: -1})
	l.AddSub(SubRecord{Name: "T", Edge: "B2", ConfirmedAt: -1, UnsubAt: -1}) // no ID yet
	other := message.SubID{Edge: "B2", Epoch: 1, N: 8}
	unknown := message.PubID{Publisher: "X", Epoch: 1, Seq: 3}
	copyAttrs := append([]matching.Attr(nil), attrs...)
	altered := []matching.Attr{{Name: "class", Value: matching.Str("b")}}
	ds := []Delivery{
		{Sub: 0, SubID: sid, Pub: p.ID, Attrs: attrs, At: 10, PubTime: 3},
		{Sub: 0, SubID: sid, Pub: p.ID, Attrs: copyAttrs, At: 11, PubTime: 4},
		{Sub: 0, SubID: sid, Pub: p.ID, At: 12, PubTime: 5},
		{Sub: 0, SubID: sid, Pub: p.ID, Attrs: altered, At: 13},
		{Sub: 0, SubID: other, Pub: p.ID, Attrs: attrs, At: 14},
		{Sub: 0, SubID: sid, Pub: unknown, Attrs: attrs, At: 15},
		{Sub: 1, SubID: sid, Pub: p.ID, Attrs: attrs, At: 16},
		{Sub: 2, SubID: sid, Pub: p.ID, At: 17},
		{Sub: -1, Pub: p.ID, At: 18},
	}
	for _, d := range ds {
		l.AddDelivery(d)
	}
	if l.NumDeliveries() != len(ds) {
		t.Fatalf("%d deliveries, want %d", l.NumDeliveries(), len(ds))
	}
	for i, want := range ds {
		got := l.Delivery(i)
		if want.Attrs != nil && oracle.SameAttrs(want.Attrs, p.Attrs) && got.Attrs != nil {
			want.Attrs = got.Attrs // the record's, same values
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("delivery %d: got %+v, want %+v", i, got, want)
		}
		if sub, pub, at := l.deliverySub(i); sub != want.Sub || pub != want.Pub || at != want.At {
			t.Errorf("delivery %d: deliverySub %d %v %v", i, sub, pub, at)
		}
		if pt, at := l.deliveryTimes(i); pt != want.PubTime || at != want.At {
			t.Errorf("delivery %d: deliveryTimes %d %v", i, pt, at)
		}
	}
	if len(l.extras) != 6 {
		t.Errorf("%d deliveries kept whole, want 6", len(l.extras))
	}
}
