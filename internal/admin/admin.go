// Package admin serves a broker's HTTP admin endpoint: /healthz, /metrics
// (Prometheus), /state (JSON snapshot of the protocol core),
// /debug/pprof/ and the failure-injection controls /ctl/cut, /ctl/heal and
// /ctl/cuts. It knows nothing of the protocol: the runtime hands it
// functions to call.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
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
	// Control, when set, serves the failure-injection endpoints (see
	// ControlHeader for who may call them).
	Control Control
	// ControlToken, when set, must also be sent by callers of the control
	// endpoints as "Authorization: Bearer TOKEN" (the broker passes its
	// client token).
	ControlToken string
	Log          zerolog.Logger
}

// Control is what the failure-injection endpoints call:
//
//	POST /ctl/cut?peer=B2   cut the link to broker B2 (refused until healed)
//	POST /ctl/heal?peer=B2  heal it (404 if it was not cut)
//	GET  /ctl/cuts          the peers cut now, as a JSON list
type Control interface {
	Cut(peer string) error
	Heal(peer string) (bool, error)
	Cuts() []string
}

// ControlHeader must be present (any value) on every /ctl/ request. A web
// page cannot make a browser send a custom header to another origin
// without a CORS preflight, which this endpoint never approves, so a page
// the operator visits cannot cut links through a loopback admin address.
// Besides, /ctl/ answers only requests from a loopback address, whatever
// address the endpoint is bound to (it may be exposed for scraping
// /metrics), and checks ControlToken when one is set.
const ControlHeader = "X-Deltapub-Control"

// maxPeerName bounds the peer parameter of the control endpoints.
const maxPeerName = 256

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
	if o.Control != nil {
		ctl := func(f func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				if err := controlAllowed(r, o.ControlToken); err != nil {
					http.Error(w, "admin: control: "+err.Error(), http.StatusForbidden)
					return
				}
				f(w, r)
			}
		}
		peerOf := func(w http.ResponseWriter, r *http.Request) (string, bool) {
			peer := r.URL.Query().Get("peer")
			if peer == "" || len(peer) > maxPeerName || strings.ContainsAny(peer, " \t\r\n") {
				http.Error(w, "admin: control: want ?peer=BROKER (a broker ID, no spaces)", http.StatusBadRequest)
				return "", false
			}
			return peer, true
		}
		mux.HandleFunc("POST /ctl/cut", ctl(func(w http.ResponseWriter, r *http.Request) {
			peer, ok := peerOf(w, r)
			if !ok {
				return
			}
			if err := o.Control.Cut(peer); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			o.Log.Warn().Str("peer", peer).Str("from", r.RemoteAddr).Msg("admin: link cut on request")
			fmt.Fprintln(w, "ok")
		}))
		mux.HandleFunc("POST /ctl/heal", ctl(func(w http.ResponseWriter, r *http.Request) {
			peer, ok := peerOf(w, r)
			if !ok {
				return
			}
			healed, err := o.Control.Heal(peer)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if !healed {
				http.Error(w, "admin: control: the link to "+peer+" is not cut", http.StatusNotFound)
				return
			}
			o.Log.Warn().Str("peer", peer).Str("from", r.RemoteAddr).Msg("admin: link healed on request")
			fmt.Fprintln(w, "ok")
		}))
		mux.HandleFunc("GET /ctl/cuts", ctl(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(o.Control.Cuts())
		}))
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "deltapub broker admin: /healthz /metrics /state /debug/pprof/ /ctl/")
	})
	return mux
}

// controlAllowed checks a /ctl/ request: from a loopback address, with
// ControlHeader, and with the bearer token when one is set.
func controlAllowed(r *http.Request, token string) error {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return fmt.Errorf("cannot tell the caller's address %q", r.RemoteAddr)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("only from a loopback address, not %s", host)
	}
	if r.Header.Get(ControlHeader) == "" {
		return fmt.Errorf("header %s missing", ControlHeader)
	}
	if token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return errors.New("wrong or missing bearer token (the broker's client token)")
		}
	}
	return nil
}
