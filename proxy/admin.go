package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolgate/toolgate/policy"
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
	// Console serves the operator's console under /ui/ (package console);
	// nil disables it. It sits behind the same guard as every admin route.
	Console http.Handler
	// Server returns the server section of the policy in force: besides
	// the names no DNS rebinding can send (see adminGuard), the admin port
	// serves the host of its admin_listen address and the names of
	// admin_allowed_hosts. nil serves the former only.
	Server func() *policy.Server
}

// AdminHandler returns the admin handler: /metrics, /healthz, /readyz,
// POST /-/reload, GET /v1/config, GET /v1/learn and the console under
// /ui/, behind adminGuard. It is served on its own port only.
func AdminHandler(opts AdminOptions) http.Handler {
	name, _ := os.Hostname()
	g := &adminGuard{server: opts.Server, hostname: strings.ToLower(strings.TrimSuffix(name, "."))}
	return g.guard(adminMux(opts))
}

// adminGuard keeps browsers off the admin port, as browserGuard keeps
// them off the agent port. A page that rebinds its own name to the admin
// address could read /v1/learn (routes, field names, upstream URLs),
// /v1/config and /metrics; any page can send a cross-site POST /-/reload,
// which does its work without the page reading the answer. So every admin
// route refuses, for every method and on every listener:
//
//   - a Host other than a loopback name, an IP literal, this machine's
//     name, the host of server.admin_listen or one of
//     server.admin_allowed_hosts. A rebinding page sends its own DNS name;
//     the kubelet's probes send the pod IP and Prometheus the target's
//     address, which are IP literals (or a name to list);
//   - a request a web page made: Sec-Fetch-Site cross-site or same-site,
//     or an Origin that is not the request's own host. No other origin is
//     trusted, loopback ones included: nothing browses the admin port but
//     a person opening its pages, which is same-origin.
//
// Probes, Prometheus and curl send neither browser header.
type adminGuard struct {
	server   func() *policy.Server
	hostname string // this machine's name, lower case; "" if unknown
}

func (g *adminGuard) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := g.refusal(r); why != "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, "forbidden: "+why+"\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusal returns why r must be refused, or "" to serve it.
func (g *adminGuard) refusal(r *http.Request) string {
	host := requestHost(r)
	if !localHost(host, g.hostname) && !g.configuredHost(host) {
		return fmt.Sprintf("Host %q is not a name of this server", r.Host)
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none": // not a browser, the page's own origin, or typed by the user
	default:
		return "cross-site browser requests are not served"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !sameHost(u, r.Host) {
			return fmt.Sprintf("Origin %q is not allowed", o)
		}
	}
	return ""
}

// configuredHost reports whether host is the host of admin_listen or one of
// admin_allowed_hosts.
func (g *adminGuard) configuredHost(host string) bool {
	if g.server == nil {
		return false
	}
	srv := g.server()
	listen := strings.TrimSuffix(strings.ToLower(hostOnly(srv.AdminListen)), ".")
	return listen != "" && host == listen || hostListed(host, srv.AdminAllowedHosts)
}

func adminMux(opts AdminOptions) *http.ServeMux {
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
	if opts.Console != nil {
		mux.Handle("/ui/", opts.Console)
		mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
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
