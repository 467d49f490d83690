package wire

import (
	"bytes"
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/deltapub/deltapub/matching"
	"github.com/deltapub/deltapub/message"
)

// The messages as they were before More (parts) existed: a message that
// fits in one frame (and carries none of the later omitempty fields, such
// as TopoChange.Logs) must encode to the same bytes, so that older brokers
// see no difference.
type oldJoinReply struct {
	Err    string             `msgpack:"x,omitempty"`
	Rejoin bool               `msgpack:"r,omitempty"`
	Parent message.BrokerID   `msgpack:"p"`
	Map    []message.MapNode  `msgpack:"m"`
	Subs   []message.SubState `msgpack:"s"`
}

type oldStateReply struct {
	Map        []message.MapNode  `msgpack:"m"`
	Subs       []message.SubState `msgpack:"s"`
	NotMember  bool               `msgpack:"n,omitempty"`
	Joinpoints []message.MapNode  `msgpack:"j,omitempty"`
}

type oldTopoChange struct {
	Origin   message.BrokerID   `msgpack:"o"`
	Seq      uint64             `msgpack:"q"`
	Hops     int                `msgpack:"h"`
	Add      []message.MapNode  `msgpack:"a,omitempty"`
	Remove   []message.BrokerID `msgpack:"r,omitempty"`
	Leaver   message.BrokerID   `msgpack:"l,omitempty"`
	Reparent []message.MapNode  `msgpack:"p,omitempty"`
	Via      []message.SubsVia  `msgpack:"v,omitempty"`
}

func (*oldJoinReply) Type() message.Type  { return message.TypeJoinReply }
func (*oldStateReply) Type() message.Type { return message.TypeStateReply }
func (*oldTopoChange) Type() message.Type { return message.TypeTopoChange }

func TestMoreOmittedIsByteIdentical(t *testing.T) {
	rng := rand.New(rand.NewSource(testSeed(t)))
	for _, pair := range []struct{ now, old message.Message }{
		{&message.JoinReply{}, &oldJoinReply{}},
		{&message.StateReply{}, &oldStateReply{}},
		{&message.TopoChange{}, &oldTopoChange{}},
	} {
		for variant := 0; variant < 3; variant++ {
			now := reflect.New(reflect.TypeOf(pair.now).Elem())
			if variant > 0 {
				populate(t, now.Elem(), rng, pair.now.Type().String(), 0)
			}
			old := reflect.New(reflect.TypeOf(pair.old).Elem())
			// More and the fields added later (omitempty) left out.
			for i := 0; i < now.Elem().NumField(); i++ {
				if _, ok := old.Elem().Type().FieldByName(now.Elem().Type().Field(i).Name); !ok {
					now.Elem().Field(i).SetZero()
				}
			}
			for i := 0; i < old.Elem().NumField(); i++ {
				f := old.Elem().Type().Field(i).Name
				old.Elem().Field(i).Set(now.Elem().FieldByName(f))
			}
			a, err := AppendFrame(nil, now.Interface().(message.Message))
			if err != nil {
				t.Fatal(err)
			}
			b, err := AppendFrame(nil, old.Interface().(message.Message))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%v (variant %d) with More=0 encodes differently from the old message:\n%x\n%x", pair.now.Type(), variant, a, b)
			}
		}
	}
}

// A list's cost is its elements' costs, one value each, and a header of at
// most 5 bytes: the core sums element costs to cut parts.
func TestValueCostAddsUp(t *testing.T) {
	subs := make([]message.SubState, 3000)
	for i := range subs {
		subs[i] = message.SubState{Sub: message.SubID{Edge: "B12", Epoch: 1764460000000, N: uint64(i)}, From: "B7",
			Filter: matching.Filter{Preds: []matching.Predicate{{Attr: "class", Op: matching.OpEq, Value: matching.Value{Kind: matching.KindString, Str: fmt.Sprint("c", i)}}}}}
	}
	head, err := FrameCost(&message.StateReply{})
	if err != nil {
		t.Fatal(err)
	}
	sum := head
	for i := range subs {
		c, err := ValueCost(&subs[i])
		if err != nil {
			t.Fatal(err)
		}
		sum = sum.Add(Cost{Bytes: c.Bytes, Values: c.Values + 1})
	}
	whole, err := FrameCost(&message.StateReply{Subs: subs})
	if err != nil {
		t.Fatal(err)
	}
	if whole.Values != sum.Values || whole.Bytes < sum.Bytes || whole.Bytes > sum.Bytes+5 {
		t.Fatalf("whole %+v, sum of the parts %+v (bytes may differ by the list header only)", whole, sum)
	}
	// And the reader agrees with Fits.
	frame, _ := AppendFrame(nil, &message.StateReply{Subs: subs})
	_, _, decErr := Decode(frame, whole.Bytes-1)
	if whole.Fits(whole.Bytes-1) || decErr == nil {
		t.Fatalf("a %d-byte frame fits a %d-byte limit (Fits %v, Decode %v)", whole.Bytes, whole.Bytes-1, whole.Fits(whole.Bytes-1), decErr)
	}
	if _, _, err := Decode(frame, whole.Bytes); !whole.Fits(whole.Bytes) || err != nil {
		t.Fatalf("a %d-byte frame does not fit its own length: %v", whole.Bytes, err)
	}
}
