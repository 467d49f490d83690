package overlay

import (
	"context"

	"github.com/deltapub/deltapub/internal/quic"
	"github.com/deltapub/deltapub/message"
	"github.com/rs/zerolog"
)

// The QUIC transport (internal/quic) adapted to the runtime: its Handler
// calls become runtime inputs, its Endpoint dials.

func init() { listenTransport = listenQUIC }

func listenQUIC(cfg *BrokerConfig, epoch uint64, secret []byte, token string, rt *Runtime, log zerolog.Logger) (Transport, func() error, error) {
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
	}, rt.QUICHandler())
	if err != nil {
		return nil, nil, err
	}
	return rt.CutTransport(quicTransport{ep}), ep.Close, nil
}

type quicTransport struct{ ep *quic.Endpoint }

func (t quicTransport) Dial(ctx context.Context, peer message.BrokerID, addr string) (PeerLink, error) {
	l, err := t.ep.Dial(ctx, peer, addr)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return l, nil
}

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
