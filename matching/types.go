// Package matching is the content-based filter language of deltapub: values,
// predicates, filters (subscriptions and advertisements), publications,
// parsing and formatting in the PADRES syntax, matching, covering, and an
// index that finds the subscriptions matching a publication without a linear
// scan. It does no I/O. See docs/filters.md for the language.
package matching

import "fmt"

// Kind is the type of a value, decided by how it is written: 'quoted' (or a
// bare name) is a string, 12 is an integer, 12.5 is a float.
type Kind uint8

const (
	KindString Kind = iota + 1
	KindInt
	KindFloat
)

// Value is one typed attribute value or predicate operand.
type Value struct {
	Kind  Kind    `msgpack:"k"`
	Str   string  `msgpack:"s,omitempty"`
	Int   int64   `msgpack:"i,omitempty"`
	Float float64 `msgpack:"f,omitempty"`
}

// Op is a predicate operator.
type Op uint8

const (
	OpInvalid Op = iota
	// String operators.
	OpEq         // eq
	OpNeq        // neq
	OpStrLt      // str-lt
	OpStrLe      // str-le
	OpStrGt      // str-gt
	OpStrGe      // str-ge
	OpStrPrefix  // str-prefix
	OpStrPostfix // str-postfix
	OpStrContains
	// Numeric operators.
	OpNumEq // =
	OpNumNe // <>
	OpLt    // <
	OpLe    // <=
	OpGt    // >
	OpGe    // >=
	// OpIsPresent holds when the attribute is present (its operand is a
	// dummy; see docs/filters.md for what its type means).
	OpIsPresent
)

// Predicate is one [attr,op,value] term of a filter.
type Predicate struct {
	Attr  string `msgpack:"a"`
	Op    Op     `msgpack:"o"`
	Value Value  `msgpack:"v"`
}

// Filter is a conjunction of predicates: a subscription or an advertisement.
// By PADRES convention Preds[0] is the [class,eq,...] predicate.
type Filter struct {
	Preds []Predicate `msgpack:"p"`
}

// Attr is one [name,value] pair of a publication.
type Attr struct {
	Name  string `msgpack:"n"`
	Value Value  `msgpack:"v"`
}

// ValidateAttrs checks what a publication's attributes must satisfy
// whatever their source (parsed text, a client library, a raw frame):
// every name non-empty and named once. A repeated name would make the
// index report a subscription once per copy, so a local subscriber would
// get the publication twice.
func ValidateAttrs(attrs []Attr) error {
	for i, a := range attrs {
		if a.Name == "" {
			return fmt.Errorf("matching: publication attribute %d has an empty name", i+1)
		}
		for _, b := range attrs[:i] {
			if b.Name == a.Name {
				return fmt.Errorf("matching: publication attribute %q appears twice", a.Name)
			}
		}
	}
	return nil
}

// Publication is what publishers send: typed attributes that filters read,
// and an opaque payload that filters never read.
type Publication struct {
	Attrs   []Attr `msgpack:"a"`
	Payload []byte `msgpack:"p,omitempty"`
}
