package client

import (
	"context"

	"github.com/deltapub/deltapub/internal/quic"
)

// defaultDial is the transport used when Options.Dial is nil: a QUIC client
// session (internal/quic), presenting opts.Token.
func defaultDial(opts Options) DialFunc {
	return func(ctx context.Context, addr string) (Conn, error) {
		c, err := quic.DialClient(ctx, addr, opts.Token, quic.ClientOptions{Log: opts.Log})
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return c, nil
	}
}
