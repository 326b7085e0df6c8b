package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminOptions configure the admin handler.
type AdminOptions struct {
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Ready reports whether the instance should receive traffic (a valid
	// policy is loaded, the state store answers, not draining); nil means
	// always ready.
	Ready func(ctx context.Context) error
	// Reload re-reads the policy for POST /-/reload; nil disables it.
	Reload func() error
	// Config describes the loaded policy for GET /v1/config.
	Config func() any
	// Learn serves GET /v1/learn (learning mode's summary and draft); nil
	// disables it.
	Learn http.Handler
}

// AdminHandler returns the admin handler: /metrics, /healthz, /readyz,
// POST /-/reload, GET /v1/config and GET /v1/learn. It is served on its own port only.
func AdminHandler(opts AdminOptions) http.Handler {
	mux := http.NewServeMux()
	if opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if opts.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := opts.Ready(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if opts.Reload != nil {
		mux.HandleFunc("POST /-/reload", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			if err := opts.Reload(); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(err.Error() + "\n"))
				return
			}
			_, _ = w.Write([]byte("reloaded\n"))
		})
	}
	if opts.Config != nil {
		mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(opts.Config())
		})
	}
	if opts.Learn != nil {
		mux.Handle("GET /v1/learn", opts.Learn)
	}
	return mux
}

// StoreProbe runs a readiness check of the state store (Core.Ping: for
// Redis, a write) at most once per interval and shares its result in
// between, so /readyz stays cheap however often it is asked. Concurrent
// checks wait for the one in flight.
type StoreProbe struct {
	check    func(context.Context) error
	interval time.Duration

	mu       sync.Mutex
	at       time.Time // when last was found; zero before the first check
	last     error
	inFlight chan struct{} // closed when the check in flight ends
}

// NewStoreProbe returns a probe running check at most once per interval.
func NewStoreProbe(check func(context.Context) error, interval time.Duration) *StoreProbe {
	return &StoreProbe{check: check, interval: interval}
}

// Check returns the result of a check no older than the interval, running
// one if need be, or ctx's error if ctx ends first.
func (p *StoreProbe) Check(ctx context.Context) error {
	p.mu.Lock()
	if !p.at.IsZero() && time.Since(p.at) < p.interval {
		defer p.mu.Unlock()
		return p.last
	}
	if wait := p.inFlight; wait != nil {
		p.mu.Unlock()
		select {
		case <-wait:
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.last
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := make(chan struct{})
	p.inFlight = done
	p.mu.Unlock()

	err := p.check(ctx)

	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight = nil
	p.last = err
	// A check cut short by its caller says nothing about the store.
	if ctx.Err() == nil {
		p.at = time.Now()
	} else {
		p.at = time.Time{}
	}
	close(done)
	return err
}
