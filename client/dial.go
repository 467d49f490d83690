package client

import (
	"context"
	"errors"
)

// defaultDial is the transport used when Options.Dial is nil.
func defaultDial(opts Options) DialFunc {
	return func(ctx context.Context, addr string) (Conn, error) {
		return nil, errors.New("client: no default transport yet; set Options.Dial")
	}
}
