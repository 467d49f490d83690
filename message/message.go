// Package message holds every message of the broker protocol and of the
// client protocol as plain Go values, and the append-only registry of their
// types. It does no I/O: internal/wire turns these values into bytes.
//
// Compatibility rule: message types are only ever appended. A peer that
// receives a type it does not know ignores it (see internal/wire), so a newer
// broker can add messages without breaking older peers.
package message

import "fmt"

// Type identifies a message on the wire.
type Type uint16

// Message is implemented by every protocol message.
type Message interface {
	// Type returns the registered wire type of the message.
	Type() Type
}

var registry = map[Type]func() Message{}
var names = map[Type]string{}

// Register makes a message type known to New. It is called from init
// functions of this package; registering a type twice panics, because two
// meanings for one number would silently corrupt the wire format.
func Register(t Type, name string, ctor func() Message) {
	if _, dup := registry[t]; dup {
		panic(fmt.Sprintf("message: type %d registered twice (%s, %s)", t, names[t], name))
	}
	registry[t] = ctor
	names[t] = name
}

// New returns a fresh zero value of the message registered as t, and false
// when t is unknown (a newer peer's message).
func New(t Type) (Message, bool) {
	ctor, ok := registry[t]
	if !ok {
		return nil, false
	}
	return ctor(), true
}

// Types lists every registered type, in no particular order.
func Types() []Type {
	out := make([]Type, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	return out
}

func (t Type) String() string {
	if n, ok := names[t]; ok {
		return n
	}
	return fmt.Sprintf("Type(%d)", uint16(t))
}
