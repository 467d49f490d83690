package client

import (
	"context"
	"strings"

	"github.com/deltapub/deltapub/internal/quic"
)

// defaultDial is the transport used when Options.Dial is nil: a client
// session of internal/quic, presenting opts.Token, over QUIC for
// "host:port" and "quic://host:port", over TCP for "tcp://host:port" and
// TLS for "tls://host:port" (a broker's tcp_listen).
func defaultDial(opts Options) DialFunc {
	return func(ctx context.Context, addr string) (Conn, error) {
		c, err := quic.DialClient(ctx, addr, opts.Token, quic.ClientOptions{Log: opts.Log, IdleTimeout: opts.FailureTimeout})
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return c, nil
	}
}

// splitAddrs splits a comma-separated broker list, dropping empty items.
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
