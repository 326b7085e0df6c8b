package proxy

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/redact"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// upstreamRuntime is the runtime of one backend: its client and transport
// (package upstream), a breaker, a bulkhead, its credential and its metric
// children. It outlives policy reloads while its settings stay the same,
// so connections and breaker state are kept.
type upstreamRuntime struct {
	cfg *policy.Upstream
	// rt is the upstream's transport: its passthrough routes', and its
	// NetHTTPClient's.
	rt http.RoundTripper
	// client sends the tool calls: an H1Client for a plain-HTTP backend
	// (server.upstream_client: fast), a NetHTTPClient over rt otherwise.
	client upstream.Client
	// pooled says the client is done with a request when Send returns
	// (the H1Client), so the request may come from a pool. net/http's
	// transports may still write a request's header after the answer came.
	pooled bool
	// kind is server.upstream_client as the client was made for it.
	kind    string
	breaker *policy.Breaker
	bulk    *upstream.Bulkhead
	codes   upstreamCodes
	// auth is the default credential (upstreams.<name>.auth), of the
	// passthrough routes and the tools that name none; nil for none. creds
	// are the named ones (upstreams.<name>.credentials), each with its own
	// secrets and OAuth2 token cache.
	auth  *upstream.Auth
	creds map[string]*upstream.Auth
	// headerSecrets are the needles of the ${VAR} values in the static
	// headers; identity are the forward_headers that carry credentials
	// (secrets.go).
	headerSecrets []redact.Needle
	identity      []string
	identityMu    sync.Mutex
	identityCache *simplelru.LRU[string, *redact.Matcher] // by header name and value; nil without identity
}

// upstreamCodes caches metric children for the codes every upstream sees,
// so recording an attempt does not hash label values.
type upstreamCodes struct {
	byCode   map[int]counter
	timeout  counter
	reset    counter
	connect  counter
	circuit  counter
	auth     counter
	other    func(string) counter
	duration observer
}

type counter interface{ Inc() }
type observer interface{ Observe(float64) }

// upstreamOptions are what newUpstream needs from the Core besides the
// settings: Options.Transport, the client the snapshot names
// (server.upstream_client), and the clock and logger.
type upstreamOptions struct {
	newRT func(*policy.Upstream) http.RoundTripper
	kind  string
	env   upstream.Env
}

func newUpstream(cfg *policy.Upstream, m *Metrics, prev *upstreamRuntime, o upstreamOptions) *upstreamRuntime {
	u := &upstreamRuntime{cfg: cfg, kind: o.kind}
	for _, v := range cfg.HeaderSecrets {
		u.headerSecrets = redact.AppendNeedles(u.headerSecrets, v)
	}
	for _, name := range cfg.ForwardHeaders {
		if redact.IdentityHeader(name) {
			u.identity = append(u.identity, name)
		}
	}
	if len(u.identity) > 0 {
		u.identityCache, _ = simplelru.NewLRU[string, *redact.Matcher](identityCacheSize, nil)
	}
	if prev != nil && prev.kind == o.kind && sameTransport(prev.cfg, cfg) {
		u.rt, u.client, u.pooled = prev.rt, prev.client, prev.pooled
	} else {
		if o.newRT != nil {
			u.rt = o.newRT(cfg)
		} else {
			u.rt = upstream.NewTransport(cfg, o.env)
		}
		if o.newRT != nil {
			// A round tripper of a test's or an embedder's: every call
			// goes through it.
			u.client = upstream.NewNetHTTPClient(u.rt)
		} else {
			u.client = upstream.New(cfg, u.rt, o.kind != policy.UpstreamClientNetHTTP)
		}
		_, u.pooled = u.client.(*upstream.H1Client)
	}
	if prev != nil && prev.cfg.Auth.Equal(cfg.Auth) {
		u.auth = prev.auth // a cached token survives the reload
	} else {
		u.auth = upstream.NewAuth(cfg.Name, cfg.Auth, o.env)
	}
	for name, a := range cfg.Credentials {
		if u.creds == nil {
			u.creds = make(map[string]*upstream.Auth, len(cfg.Credentials))
		}
		if prev != nil && prev.creds[name] != nil && prev.cfg.Credentials[name].Equal(a) {
			u.creds[name] = prev.creds[name] // its cached token survives too
		} else {
			u.creds[name] = upstream.NewAuth(cfg.Name+" credential "+name, a, o.env)
		}
	}
	if prev != nil && prev.cfg.Breaker == cfg.Breaker {
		u.breaker = prev.breaker
	} else {
		gauge := m.CircuitState.WithLabelValues(cfg.Name)
		u.breaker = policy.NewBreaker(cfg.Name, cfg.Breaker, policy.BreakerOptions{
			OnStateChange: func(_ string, to policy.BreakerState) { gauge.Set(float64(to)) },
		})
		gauge.Set(float64(u.breaker.State()))
	}
	var prevBulk *upstream.Bulkhead
	if prev != nil {
		prevBulk = prev.bulk
	}
	u.bulk = prevBulk.Resized(cfg.MaxConcurrent, cfg.MaxConcurrentPerCaller)
	name := cfg.Name
	u.codes = upstreamCodes{
		byCode:   map[int]counter{},
		timeout:  m.UpstreamRequests.WithLabelValues(name, "timeout"),
		reset:    m.UpstreamRequests.WithLabelValues(name, "reset"),
		connect:  m.UpstreamRequests.WithLabelValues(name, "connect"),
		circuit:  m.UpstreamRequests.WithLabelValues(name, "circuit_open"),
		auth:     m.UpstreamRequests.WithLabelValues(name, string(contracts.ReasonAuth)),
		other:    func(code string) counter { return m.UpstreamRequests.WithLabelValues(name, code) },
		duration: m.UpstreamDuration.WithLabelValues(name),
	}
	for _, code := range []int{200, 201, 204, 400, 404, 429, 500, 502, 503, 504} {
		u.codes.byCode[code] = m.UpstreamRequests.WithLabelValues(name, strconv.Itoa(code))
	}
	return u
}

func (c *upstreamCodes) count(code int) {
	if ctr, ok := c.byCode[code]; ok {
		ctr.Inc()
		return
	}
	c.other(strconv.Itoa(code)).Inc()
}

// closeIdle closes the upstream's idle connections.
func (u *upstreamRuntime) closeIdle() {
	if ci, ok := u.rt.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
	u.client.CloseIdleConnections()
	u.auth.CloseIdle()
	for _, a := range u.creds {
		a.CloseIdle()
	}
}

// authOf is the credential of the tools that name credential: a named
// one, or auth for "" (policy.Upstream.CredentialOf).
func (u *upstreamRuntime) authOf(credential string) *upstream.Auth {
	if credential == "" {
		return u.auth
	}
	return u.creds[credential]
}

func sameTransport(a, b *policy.Upstream) bool {
	return a.URL.String() == b.URL.String() && a.MaxConcurrent == b.MaxConcurrent && a.TLS.Equal(b.TLS)
}

// send performs one attempt of toolgate's own send: the credential (auth,
// the tool's), then
// the upstream's client, whose report r is classified into a (classify.go).
// It never returns an error: every failure is the attempt's outcome.
//
// A request written whole goes out a second time within the attempt (a
// reused connection that closed before any answer) only when acting twice
// is harmless: the tool is read-only, or the backend dedupes on the key
// forwarded to it. Whatever the HTTP method: a side-effecting tool bound to
// GET acts as surely as one bound to POST.
func (u *upstreamRuntime) send(ctx context.Context, auth *upstream.Auth, req *http.Request, maxBody int64, sideEffect, dedupes bool, now func() time.Time, r *upstream.Report, a *attempt) {
	cred, ok := u.authorize(ctx, auth, req, a)
	if !ok {
		return
	}
	start := time.Now()
	u.client.Send(ctx, req, upstream.SendOptions{MaxBody: maxBody, Resend: !sideEffect || dedupes}, r)
	u.codes.duration.Observe(time.Since(start).Seconds())
	if r.Err != nil {
		u.failed(ctx, r, sideEffect, dedupes, a)
		return
	}
	auth.Answered(cred, r.Status)
	u.answered(ctx, r, sideEffect, dedupes, now, a)
}
