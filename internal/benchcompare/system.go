package benchcompare

import (
	"context"
	"strings"
	"time"

	"github.com/deltapub/deltapub/matching"
)

// A system is one of the pub/sub systems compared. The scenarios are
// written once against this interface, so both systems are loaded and
// counted the same way: same payloads, same pacing, and a message counts
// when the subscriber application's handler sees it.
type system interface {
	Name() string
	// Start starts n servers: for deltapub a chain B1–…–Bn (each joins the
	// previous one); for NATS one server or an n-server cluster (routes
	// form a full mesh).
	Start(ctx context.Context, n int) (servers, error)
}

type servers interface {
	// Connect opens one client connection to server i (0-based).
	Connect(ctx context.Context, i int, o connOptions) (endpoint, error)
	// ProfileBase is the http://host:port of server i's Go pprof endpoint
	// ("" if it has none).
	ProfileBase(i int) string
	// Close stops every server (idempotent).
	Close() error
}

type connOptions struct {
	// SubBuffer bounds the messages buffered per subscription between
	// the connection and the handler (0: the client's default).
	SubBuffer int
}

// outMsg is one publication. Subject is NATS's, Attrs deltapub's; Head is
// sent by NATS in front of the payload to carry what deltapub carries in
// Attrs (the filtering scenario's price and volume).
type outMsg struct {
	Subject string
	Attrs   []matching.Attr
	Head    []byte
	Payload []byte // not reused by the caller: deltapub keeps it until acknowledged
}

// subSpec is one subscription: NATS subscribes to Subject (and, when
// ClientFilter is set, the handler only sees messages whose decoded
// attributes match it); deltapub subscribes with Filter.
type subSpec struct {
	Subject      string
	Filter       matching.Filter
	ClientFilter bool
	// CountBytes: report the size of each delivery as it was framed on
	// the connection (application protocol, no transport headers).
	CountBytes bool
}

// handler sees each message that reaches the application: its payload
// and, with CountBytes, the bytes its delivery took on the connection
// (raw counts every message the connection carried for the
// subscription, also those the client-side filter then dropped).
type handler interface {
	Deliver(payload []byte)
	Raw(wireBytes int)
	// Fail reports that the subscription ended or lost messages (deltapub:
	// disconnected as a slow consumer; NATS: a slow-consumer error).
	Fail(err error)
}

type endpoint interface {
	// Publish may wait for the client's window (deltapub) until ctx ends.
	Publish(ctx context.Context, m *outMsg) error
	// Flush returns once everything published is accepted by the server
	// (deltapub: acknowledged; NATS: a PING round trip).
	Flush(ctx context.Context) error
	// Subscribe returns once the server has the subscription (deltapub:
	// confirmed by the overlay; NATS: flushed to its server).
	Subscribe(ctx context.Context, s subSpec, h handler) error
	Close()
}

// startAttempts bounds start: a server can lose the free port it was given
// to another program (an outgoing connection's source port, often the
// cluster's own routes) before it binds it.
const startAttempts = 3

// start starts sys's servers, again (paced, at most startAttempts times in
// all) when one of them could not bind its port.
func start(ctx context.Context, sys system, n int) (servers, error) {
	for attempt := 1; ; attempt++ {
		srv, err := sys.Start(ctx, n)
		if err == nil || attempt == startAttempts || !strings.Contains(err.Error(), "address already in use") {
			return srv, err
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return nil, err
		}
	}
}
