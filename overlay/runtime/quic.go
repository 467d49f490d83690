package runtime

import (
	"context"

	"github.com/deltapub/deltapub/internal/quic"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// QUICTransport is the runtime's transport over QUIC (internal/quic): one
// endpoint that listens for brokers and clients, whose Handler calls become
// the runtime's inputs, and dials brokers from the same socket.
type QUICTransport struct{ ep *quic.Endpoint }

// ListenQUIC opens the QUIC endpoint of cfg for rt: it listens on
// cfg.Listen and advertises cfg.AdvertisedAddr() with this incarnation's
// epoch. secret authenticates broker links (nil: not authenticated); token
// is what clients must present ("": any client).
func ListenQUIC(cfg *BrokerConfig, epoch uint64, secret []byte, token string, rt *Runtime, log zerolog.Logger) (*QUICTransport, error) {
	ep, err := quic.Listen(quic.Config{
		ID:             message.BrokerID(cfg.ID),
		Epoch:          epoch,
		Addr:           cfg.AdvertisedAddr(),
		Listen:         cfg.Listen,
		Secret:         secret,
		ClientToken:    token,
		CertFile:       cfg.TLS.CertFile,
		KeyFile:        cfg.TLS.KeyFile,
		CAFile:         cfg.TLS.CAFile,
		MaxFrame:       cfg.Limits.MaxFrame,
		SendQueue:      cfg.Limits.SendQueue,
		SendQueueBytes: cfg.Limits.SendQueueBytes,
		Log:            log,
	}, quicHandler{rt})
	if err != nil {
		return nil, err
	}
	return &QUICTransport{ep}, nil
}

// Dial returns the link to the broker peer at addr (see quic.Endpoint.Dial).
func (t *QUICTransport) Dial(ctx context.Context, peer message.BrokerID, addr string) (PeerLink, error) {
	l, err := t.ep.Dial(ctx, peer, addr)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return l, nil
}

// Close closes the endpoint and every link and session on it; peers learn
// of it from QUIC at once.
func (t *QUICTransport) Close() error { return t.ep.Close() }

// quicHandler adapts the runtime's Handler to quic.Handler, whose calls
// name its own link and session types.
type quicHandler struct{ rt *Runtime }

func (h quicHandler) PeerUp(l *quic.Link)                         { h.rt.PeerUp(l) }
func (h quicHandler) PeerMessage(l *quic.Link, m message.Message) { h.rt.PeerMessage(l, m) }
func (h quicHandler) PeerDown(l *quic.Link, err error)            { h.rt.PeerDown(l, err) }
func (h quicHandler) ClientUp(s *quic.Session)                    { h.rt.ClientUp(s) }
func (h quicHandler) ClientMessage(s *quic.Session, m message.Message) {
	h.rt.ClientMessage(s, m)
}
func (h quicHandler) ClientDown(s *quic.Session, err error) { h.rt.ClientDown(s, err) }

// quicHandler is also a quic.BatchHandler: what a link had already
// buffered arrives as one batch, one channel operation in the runtime.
var _ quic.BatchHandler = quicHandler{}

func (h quicHandler) PeerMessages(l *quic.Link, ms []message.Message) { h.rt.PeerMessages(l, ms) }
func (h quicHandler) ClientMessages(s *quic.Session, ms []message.Message) {
	h.rt.ClientMessages(s, ms)
}
