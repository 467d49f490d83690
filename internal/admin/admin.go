// Package admin serves a broker's HTTP admin endpoint: /healthz, /metrics
// (Prometheus), /state (JSON snapshot of the protocol core) and
// /debug/pprof/. It knows nothing of the protocol: the runtime hands it
// functions to call.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Options configure the endpoint.
type Options struct {
	// Addr is the TCP address to listen on ("127.0.0.1:9001"; port 0 picks
	// a free one, see Server.Addr).
	Addr string
	// Gatherer provides /metrics. Nil: /metrics answers 404.
	Gatherer prometheus.Gatherer
	// State returns the value served as JSON on /state. It is called on the
	// request's goroutine with the request's context; it must be safe for
	// that (the runtime passes it to its own goroutine and waits).
	State func(ctx context.Context) (any, error)
	// Health returns nil when the broker is healthy (joined the overlay);
	// otherwise /healthz answers 503 with the error.
	Health func(ctx context.Context) error
	Log    zerolog.Logger
}

// Server is a running admin endpoint.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// requestTimeout bounds the time a request may wait for the runtime; a
// wedged runtime then shows as a 503, not as a hung scrape.
const requestTimeout = 5 * time.Second

// Start listens on o.Addr and serves in a goroutine until Close.
func Start(o Options) (*Server, error) {
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	s := &Server{ln: ln, srv: &http.Server{
		Handler:           Handler(o),
		ReadHeaderTimeout: 5 * time.Second,
		// pprof's CPU profile streams for up to its ?seconds=; allow a
		// 30-second profile.
		WriteTimeout: 60 * time.Second,
	}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Log.Error().Err(err).Msg("admin: serve")
		}
	}()
	return s, nil
}

// Addr is the address the endpoint listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the endpoint, waiting up to a second for requests in flight.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}

// Handler returns the endpoint's routes, for tests and for embedding.
func Handler(o Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		if o.Health != nil {
			if err := o.Health(ctx); err != nil {
				http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	if o.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{ErrorLog: nil}))
	}
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		if o.State == nil {
			http.Error(w, "no state", http.StatusNotFound)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		v, err := o.State(ctx)
		if err != nil {
			http.Error(w, "state: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			o.Log.Warn().Err(err).Msg("admin: /state encode")
		}
	})
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "deltapub broker admin: /healthz /metrics /state /debug/pprof/")
	})
	return mux
}
