package message

// LogSize is what a publication counts against the size bound of a
// publisher hosting broker's log: its identity, attributes and payload
// plus a fixed overhead per record and attribute. The core (which decides
// when the log is full) and the store (which reports its size) count with
// it, so the bound is decided deterministically.
func (p *Pub) LogSize() int64 {
	n := 48 + len(p.ID.Publisher) + len(p.Payload)
	for _, a := range p.Attrs {
		n += 16 + len(a.Name) + len(a.Value.Str)
	}
	return int64(n)
}
