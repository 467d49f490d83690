package message

// Link and handshake messages (types 1–63). They open every QUIC stream of
// deltapub, broker link or client session, before any protocol message;
// internal/quic sends and checks them. They live here, not in internal/wire,
// so that this registry stays the single source of type numbers.
//
// Hello and Welcome are msgpack maps: a newer peer may add fields and an
// older one ignores them, so the handshake itself stays readable across
// versions and an incompatible peer gets a clear Refuse instead of garbage.
const (
	TypeHello Type = 1 + iota
	TypeWelcome
	TypeRefuse
	TypeReady
	// append new link/handshake types here
)

// Magic is the constant carried by Hello and Welcome: a last check that the
// peer speaks deltapub (ALPN already said so) and not something else on the
// same port.
const Magic = "deltapub"

// Role says what kind of peer opens a stream.
type Role uint8

const (
	RoleBroker Role = 1 // a broker link (ALPN "deltapub-broker")
	RoleClient Role = 2 // a client session (ALPN "deltapub-client")
)

func (r Role) String() string {
	switch r {
	case RoleBroker:
		return "broker"
	case RoleClient:
		return "client"
	}
	return "role?"
}

// Hello is the first frame of the dialling side. Version is the newest
// protocol version it speaks, MinVersion the oldest. Auth proves that a
// broker holds the overlay secret without sending it (an HMAC bound to the
// TLS session, see internal/quic); Token is a client's access token.
type Hello struct {
	Magic      string   `msgpack:"m"`
	Version    uint16   `msgpack:"v"`
	MinVersion uint16   `msgpack:"mv"`
	Role       Role     `msgpack:"r"`
	ID         BrokerID `msgpack:"i,omitempty"`
	Epoch      uint64   `msgpack:"e,omitempty"`
	Addr       string   `msgpack:"a,omitempty"`
	Auth       []byte   `msgpack:"h,omitempty"`
	Token      string   `msgpack:"t,omitempty"`
}

// Welcome accepts a Hello. Version is the version both sides will speak
// (the highest both support); Auth is the accepting broker's own proof;
// Client is the session handle the broker gave a client.
type Welcome struct {
	Magic      string   `msgpack:"m"`
	Version    uint16   `msgpack:"v"`
	MinVersion uint16   `msgpack:"mv"`
	ID         BrokerID `msgpack:"i,omitempty"`
	Epoch      uint64   `msgpack:"e,omitempty"`
	Addr       string   `msgpack:"a,omitempty"`
	Auth       []byte   `msgpack:"h,omitempty"`
	Client     ClientID `msgpack:"c,omitempty"`
}

// RefuseCode tells a program why a handshake was refused or a link closed;
// Reason tells a human.
type RefuseCode uint8

const (
	RefuseOther     RefuseCode = 0
	RefuseVersion   RefuseCode = 1 // no protocol version in common
	RefuseAuth      RefuseCode = 2 // broker authentication failed (different or missing secret)
	RefuseToken     RefuseCode = 3 // client token missing or wrong
	RefuseDuplicate RefuseCode = 4 // a link between the two brokers exists or is being set up
	RefuseBusy      RefuseCode = 5 // too many handshakes in progress
	RefuseClosing   RefuseCode = 6 // orderly close of an established link or session (last frame)
	RefuseProtocol  RefuseCode = 7 // the peer broke the handshake protocol
)

// Refuse rejects a Hello or Welcome, or ends an established link in order.
type Refuse struct {
	Code   RefuseCode `msgpack:"c"`
	Reason string     `msgpack:"r"`
}

// Ready is the dialler's last handshake frame on a broker link: it has
// checked the Welcome (version, the acceptor's Auth, no duplicate link), so
// the acceptor may declare the link up. Without it an acceptor could
// announce a link the dialler is about to refuse.
type Ready struct{}

func (*Hello) Type() Type   { return TypeHello }
func (*Welcome) Type() Type { return TypeWelcome }
func (*Refuse) Type() Type  { return TypeRefuse }
func (*Ready) Type() Type   { return TypeReady }

func init() {
	Register(TypeHello, "Hello", func() Message { return new(Hello) })
	Register(TypeWelcome, "Welcome", func() Message { return new(Welcome) })
	Register(TypeRefuse, "Refuse", func() Message { return new(Refuse) })
	Register(TypeReady, "Ready", func() Message { return new(Ready) })
}
