package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// seenRequests is a backend that remembers every request it gets and
// answers 200 with a small JSON object, or status when it is set.
type seenRequests struct {
	mu     sync.Mutex
	reqs   []*http.Request
	status atomic.Int32
}

func (s *seenRequests) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r.Clone(context.Background()))
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if code := s.status.Load(); code != 0 {
		w.WriteHeader(int(code))
	}
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (s *seenRequests) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// last returns the last request the backend got.
func (s *seenRequests) last(t *testing.T) *http.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("the backend got no request")
	}
	return s.reqs[len(s.reqs)-1]
}

// authCore is a Core on a policy with upstream credentials, with a clock
// the test moves and its log kept.
type authCore struct {
	*harness
	clock *fakeClock
	logs  proxytest.LogBuffer
}

func newAuthCore(t *testing.T, doc string, env map[string]string, opts Options) *authCore {
	t.Helper()
	snap, err := config.CompileSource("auth.yaml", []byte(doc), config.Options{LookupEnv: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	a := &authCore{clock: newFakeClock()}
	reg := prometheus.NewRegistry()
	opts.Registry, opts.Now = reg, a.clock.Now
	opts.Logger = slog.New(slog.NewJSONHandler(&a.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	core, err := NewCore(snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	a.harness = &harness{core: core, reg: reg, server: serveCore(t, core)}
	return a
}

func (a *authCore) log() string { return a.logs.String() }

// passthroughHeader is what a passthrough request to upstream gets under
// ext_proc (Passthrough.Decorate): the static headers and the credential.
func (a *authCore) passthroughHeader(upstream, rawQuery string) (http.Header, string, error) {
	st := a.core.state.Load()
	p := newPassthroughRule(st.upstreams[upstream], st.snap.Server.CallerHeader)
	return p.Decorate(context.Background(), rawQuery)
}

// callDirect runs a call through the core, for its reason.
func (a *authCore) callDirect(tool, args string, header http.Header) *Result {
	return a.core.Call(context.Background(), &Request{Tool: tool, Body: []byte(args), IdempotencyKey: "key-1", Header: header, Front: "test"})
}

func (a *authCore) authCount(upstream string) float64 {
	return testutil.ToFloat64(a.core.Metrics().UpstreamRequests.WithLabelValues(upstream, "auth"))
}

func TestUpstreamCredentialOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name       string
		auth       string
		env        map[string]string
		query      string // the tool's own query binding
		wantHeader string
		wantValue  string
		wantQuery  string
	}{
		{
			name:       "basic auth sends base64 of username:password, byte for byte",
			auth:       `basic: {username: "${SID}", password: "${TOKEN}"}`,
			env:        map[string]string{"SID": "AC123", "TOKEN": "p:w d"},
			wantHeader: "Authorization", wantValue: "Basic QUMxMjM6cDp3IGQ=",
		},
		{
			name:       "basic auth without a password sends an empty one",
			auth:       `basic: {username: sk_test_1}`,
			wantHeader: "Authorization", wantValue: "Basic c2tfdGVzdF8xOg==",
		},
		{
			name:       "a bearer token goes in Authorization",
			auth:       `bearer: {token: "${SLACK}"}`,
			env:        map[string]string{"SLACK": "xoxb-123"},
			wantHeader: "Authorization", wantValue: "Bearer xoxb-123",
		},
		{
			name:       "an API key goes in its named header",
			auth:       `api_key: {header: x-api-key, value: k-1}`,
			wantHeader: "X-Api-Key", wantValue: "k-1",
		},
		{
			name:       "an API key with a scheme is sent after it",
			auth:       `api_key: {header: Authorization, scheme: Token, value: k-2}`,
			wantHeader: "Authorization", wantValue: "Token k-2",
		},
		{
			name:      "an API key in the query replaces the tool's own parameter of that name",
			auth:      `api_key: {query: key, value: "k 3&x=1"}`,
			query:     `query: {q: q, key: q}`,
			wantQuery: "q=find&key=k+3%26x%3D1",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := &seenRequests{}
			srv := httptest.NewServer(backend)
			defer srv.Close()
			doc := fmt.Sprintf(`
version: 1
upstreams:
  api:
    url: %s
    headers: {X-Static: s}
    auth:
      %s
tools:
  find:
    description: Find.
    upstream: api
    args: {type: object, properties: {q: {type: string}}}
    request: {method: GET, path: /find, %s}
access: {shared_credentials: [api]}
`, srv.URL, tc.auth, tc.query)
			doc = strings.Replace(doc, ", }", "}", 1)
			a := newAuthCore(t, doc, tc.env, Options{})
			// The agent's own Authorization is not the upstream's credential.
			_, env := a.call(t, "find", `{"q":"find"}`, map[string]string{"Authorization": "Bearer agent"})
			if env.Status != contracts.StatusOK {
				t.Fatalf("envelope %+v", env)
			}
			got := backend.last(t)
			if tc.wantHeader != "" {
				if v := got.Header.Values(tc.wantHeader); len(v) != 1 || v[0] != tc.wantValue {
					t.Errorf("%s = %q, want %q", tc.wantHeader, v, tc.wantValue)
				}
			}
			if tc.wantHeader != "Authorization" && got.Header.Get("Authorization") != "" {
				t.Errorf("Authorization = %q: the agent's reached the backend", got.Header.Get("Authorization"))
			}
			if got.URL.RawQuery != tc.wantQuery {
				t.Errorf("query = %q, want %q", got.URL.RawQuery, tc.wantQuery)
			}
			if got.Header.Get("X-Static") != "s" {
				t.Errorf("the static header is lost: %v", got.Header)
			}
		})
	}
}

// tokenEndpoint is a fake OAuth2 token endpoint: it checks the client's
// credentials and counts the tokens it hands out.
type tokenEndpoint struct {
	t         *testing.T
	requests  atomic.Int32
	expiresIn int
	fail      atomic.Int32 // answer this status instead of a token
	hang      atomic.Bool  // never answer; report when the request is given up
	gaveUp    chan struct{}
	lastForm  atomic.Value // the url.Values of the last request
}

func (e *tokenEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := e.requests.Add(1)
	if err := r.ParseForm(); err != nil {
		e.t.Errorf("token request: %v", err)
	}
	e.lastForm.Store(r.PostForm)
	if e.hang.Load() {
		<-r.Context().Done()
		close(e.gaveUp)
		return
	}
	if code := e.fail.Load(); code != 0 {
		// Some endpoints echo what they got: it must never be repeated.
		w.WriteHeader(int(code))
		_, _ = fmt.Fprintf(w, `{"error":"temporarily_unavailable","error_description":"got %s"}`, r.PostForm.Encode())
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok || id != "fcm-client" || secret != "fcm-secret" || r.PostForm.Get("grant_type") != "client_credentials" {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprintf("tok-%d", n), "token_type": "bearer", "expires_in": e.expiresIn})
}

const oauth2Policy = `
version: 1
upstreams:
  fcm:
    url: {{backend}}
    timeout: {{timeout}}
    breaker: {consecutive_failures: 2, min_requests: 2, failure_ratio: 0.5, open_for: 1h, half_open_requests: 1}
    auth:
      oauth2:
        token_url: {{token}}/token
        client_id: fcm-client
        client_secret: "${FCM_SECRET}"
        scopes: [messaging, cloud]
        params: {audience: "https://fcm.googleapis.com/"}
        auth_style: header
tools:
  lookup:
    description: Look a device up.
    upstream: fcm
    args: {type: object}
    request: {method: GET, path: /v1/devices}
  send:
    description: Send a message.
    upstream: fcm
    side_effect: true
    args: {type: object}
    request: {method: POST, path: /v1/messages:send, body: {message: {const: hi}}}
access: {shared_credentials: [fcm]}
`

func newOAuth2Core(t *testing.T, tokenURL, timeout string) (*authCore, *seenRequests) {
	t.Helper()
	backend := &seenRequests{}
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	doc := strings.NewReplacer("{{backend}}", srv.URL, "{{token}}", tokenURL, "{{timeout}}", timeout).Replace(oauth2Policy)
	return newAuthCore(t, doc, map[string]string{"FCM_SECRET": "fcm-secret"}, Options{}), backend
}

func TestOAuth2TokenRefreshedBeforeExpiry(t *testing.T) {
	te := &tokenEndpoint{t: t, expiresIn: 100}
	ts := httptest.NewServer(te)
	defer ts.Close()
	a, backend := newOAuth2Core(t, ts.URL, "2s")
	step := func(name string, advance time.Duration, wantToken string, wantRequests int32) {
		t.Helper()
		a.clock.Add(advance)
		_, env := a.call(t, "lookup", `{}`, nil)
		if env.Status != contracts.StatusOK {
			t.Fatalf("%s: envelope %+v", name, env)
		}
		if got := backend.last(t).Header.Get("Authorization"); got != "Bearer "+wantToken {
			t.Errorf("%s: Authorization = %q, want Bearer %s", name, got, wantToken)
		}
		if got := te.requests.Load(); got != wantRequests {
			t.Errorf("%s: %d token requests, want %d", name, got, wantRequests)
		}
	}
	step("the first call gets a token", 0, "tok-1", 1)
	form := te.lastForm.Load().(url.Values)
	if form.Get("scope") != "messaging cloud" || form.Get("audience") != "https://fcm.googleapis.com/" || form.Get("client_secret") != "" {
		t.Errorf("token request form = %v", form)
	}
	step("a call well before expiry reuses it", 70*time.Second, "tok-1", 1)
	step("a call in the last fifth of its lifetime refreshes it before it expires", 11*time.Second, "tok-2", 2)
	step("the refreshed token is reused", 0, "tok-2", 2)

	t.Run("a refresh that fails while the token is valid keeps the token", func(t *testing.T) {
		te.fail.Store(http.StatusServiceUnavailable)
		defer te.fail.Store(0)
		a.clock.Add(85 * time.Second) // 4 s left of tok-2's 100
		_, env := a.call(t, "lookup", `{}`, nil)
		if env.Status != contracts.StatusOK || backend.last(t).Header.Get("Authorization") != "Bearer tok-2" {
			t.Fatalf("envelope %+v, Authorization %q", env, backend.last(t).Header.Get("Authorization"))
		}
	})
	t.Run("a token the backend refuses is dropped for the next call", func(t *testing.T) {
		a.clock.Add(2 * time.Second) // past the hold-down of the failed refresh
		backend.status.Store(http.StatusUnauthorized)
		_, env := a.call(t, "lookup", `{}`, nil)
		backend.status.Store(0)
		if env.Status != contracts.StatusForbidden {
			t.Fatalf("envelope %+v", env)
		}
		refused := backend.last(t).Header.Get("Authorization")
		before := te.requests.Load()
		_, env = a.call(t, "lookup", `{}`, nil)
		if env.Status != contracts.StatusOK || te.requests.Load() != before+1 || backend.last(t).Header.Get("Authorization") == refused {
			t.Errorf("after a 401: envelope %+v, %d token requests (had %d), Authorization %q", env, te.requests.Load(), before, backend.last(t).Header.Get("Authorization"))
		}
	})
}

func TestOAuth2TokenEndpointDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name  string
		setup func(*tokenEndpoint)
		url   func(ts *httptest.Server) string
	}{
		{name: "the token endpoint answers 503", setup: func(e *tokenEndpoint) { e.fail.Store(http.StatusServiceUnavailable) }},
		{name: "the token endpoint answers 400", setup: func(e *tokenEndpoint) { e.fail.Store(http.StatusBadRequest) }},
		{name: "the token endpoint refuses connections", url: func(*httptest.Server) string { return refused }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := &tokenEndpoint{t: t, expiresIn: 3600}
			if tc.setup != nil {
				tc.setup(te)
			}
			ts := httptest.NewServer(te)
			defer ts.Close()
			tokenURL := ts.URL
			if tc.url != nil {
				tokenURL = tc.url(ts)
			}
			a, backend := newOAuth2Core(t, tokenURL, "2s")
			const calls = 10
			for i := range calls {
				a.clock.Add(2 * time.Second) // past the hold-down: every call asks
				tool, header := "lookup", map[string]string(nil)
				if i%2 == 1 {
					tool, header = "send", map[string]string{"Idempotency-Key": fmt.Sprintf("k-%d", i)}
				}
				resp, env := a.call(t, tool, `{}`, header)
				if env.Status != contracts.StatusUpstream || !env.Retryable || env.SideEffect != contracts.SideEffectNone || env.Cost != 0 || env.RetryAfterMS != 1000 {
					t.Fatalf("call %d: envelope %+v", i, env)
				}
				if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
					t.Errorf("call %d: HTTP %d, Retry-After %q", i, resp.StatusCode, resp.Header.Get("Retry-After"))
				}
			}
			if backend.count() != 0 {
				t.Errorf("the backend got %d requests without a credential", backend.count())
			}
			if got := a.authCount("fcm"); got != calls {
				t.Errorf("toolgate_upstream_requests_total{code=auth} = %v, want %d", got, calls)
			}
			if got := testutil.ToFloat64(a.core.Metrics().CircuitState.WithLabelValues("fcm")); got != 0 {
				t.Errorf("circuit state = %v after %d token failures, want closed", got, calls)
			}
			if tc.url == nil && te.requests.Load() != calls {
				t.Errorf("%d token requests, want one per call (%d)", te.requests.Load(), calls)
			}

			t.Run("calls in the hold-down after a failure do not ask again", func(t *testing.T) {
				before := te.requests.Load()
				for range 3 {
					if res := a.callDirect("lookup", `{}`, nil); res.Reason != contracts.ReasonAuth {
						t.Fatalf("reason %s", res.Reason)
					}
				}
				if tc.url == nil && te.requests.Load() != before {
					t.Errorf("%d token requests in the hold-down", te.requests.Load()-before)
				}
			})
			if tc.url != nil {
				return
			}
			t.Run("once the endpoint is back, the same key is sent: nothing was stored", func(t *testing.T) {
				te.fail.Store(0)
				a.clock.Add(2 * time.Second)
				_, env := a.call(t, "send", `{}`, map[string]string{"Idempotency-Key": "k-1"})
				if env.Status != contracts.StatusOK || env.Replayed || backend.count() != 1 {
					t.Fatalf("envelope %+v, %d backend requests", env, backend.count())
				}
			})
		})
	}
}

func TestOAuth2TokenRequestBoundedByTheCallsDeadline(t *testing.T) {
	te := &tokenEndpoint{t: t, expiresIn: 3600, gaveUp: make(chan struct{})}
	te.hang.Store(true)
	ts := httptest.NewServer(te)
	defer ts.Close()
	a, backend := newOAuth2Core(t, ts.URL, "150ms")
	res := a.callDirect("lookup", `{}`, nil)
	if res.Reason != contracts.ReasonAuth || res.Envelope.Status != contracts.StatusUpstream || !res.Envelope.Retryable {
		t.Fatalf("reason %s, envelope %+v", res.Reason, res.Envelope)
	}
	select {
	case <-te.gaveUp:
	case <-time.After(10 * time.Second):
		t.Fatal("the token request outlived the call")
	}
	if backend.count() != 0 {
		t.Error("the backend was called without a token")
	}
}

// k8sSecretDir is a directory laid out as the kubelet mounts a Secret:
// each key a symlink to ..data/key, ..data a symlink to a timestamped
// directory that an update replaces in one rename.
type k8sSecretDir struct {
	t   *testing.T
	dir string
	n   int
}

func newK8sSecretDir(t *testing.T, keys ...string) *k8sSecretDir {
	d := &k8sSecretDir{t: t, dir: t.TempDir()}
	for _, k := range keys {
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(d.dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// update publishes a new version of the Secret: files maps key to content
// (a key left out is missing from the new version).
func (d *k8sSecretDir) update(files map[string]string) {
	d.n++
	version := fmt.Sprintf("..2026_11_30_10_00_%02d.%d", d.n, d.n)
	if err := os.Mkdir(filepath.Join(d.dir, version), 0o755); err != nil {
		d.t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(d.dir, version, k), []byte(v), 0o400); err != nil {
			d.t.Fatal(err)
		}
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

func (d *k8sSecretDir) path(key string) string { return filepath.Join(d.dir, key) }

func TestSecretFileRotatedWhileServing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		auth   string
		key    string
		header func(secret string) string
	}{
		{name: "a bearer token file", auth: "bearer: {token_file: {{file}}}", key: "token",
			header: func(s string) string { return "Bearer " + s }},
		{name: "a basic password file", auth: "basic: {username: u, password_file: {{file}}}", key: "password",
			header: func(s string) string { return basicHeader("u", s) }},
		{name: "an API key file", auth: "api_key: {header: Authorization, scheme: Key, value_file: {{file}}}", key: "api-key",
			header: func(s string) string { return "Key " + s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret := newK8sSecretDir(t, tc.key)
			secret.update(map[string]string{tc.key: "one\n"})
			backend := &seenRequests{}
			srv := httptest.NewServer(backend)
			defer srv.Close()
			doc := fmt.Sprintf(`
version: 1
upstreams:
  api:
    url: %s
    auth:
      %s
tools:
  find:
    description: Find.
    upstream: api
    args: {type: object}
    request: {method: GET, path: /find}
access: {shared_credentials: [api]}
`, srv.URL, strings.ReplaceAll(tc.auth, "{{file}}", secret.path(tc.key)))
			a := newAuthCore(t, doc, nil, Options{})
			expect := func(step, want string) {
				t.Helper()
				_, env := a.call(t, "find", `{}`, nil)
				if env.Status != contracts.StatusOK {
					t.Fatalf("%s: envelope %+v", step, env)
				}
				if got := backend.last(t).Header.Get("Authorization"); got != tc.header(want) {
					t.Errorf("%s: Authorization = %q, want %q", step, got, tc.header(want))
				}
			}
			expect("before the rotation", "one")

			secret.update(map[string]string{tc.key: "two\n"})
			a.clock.Add(upstream.FileCheckInterval)
			expect("the next call after the ..data swap", "two")

			secret.update(map[string]string{}) // the key is gone
			a.clock.Add(upstream.FileCheckInterval)
			expect("the file is missing: the last good secret", "two")
			if !strings.Contains(a.log(), "credential file unusable") {
				t.Errorf("no warning logged:\n%s", a.log())
			}

			secret.update(map[string]string{tc.key: "bad\x00value"})
			a.clock.Add(upstream.FileCheckInterval)
			expect("the file holds a NUL: the last good secret", "two")

			secret.update(map[string]string{tc.key: "five"})
			a.clock.Add(upstream.FileCheckInterval)
			expect("a good file again", "five")
			if !strings.Contains(a.log(), "credential file usable again") {
				t.Errorf("no recovery logged:\n%s", a.log())
			}
		})
	}
}

func basicHeader(user, pass string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

const forwardPolicy = `
version: 1
server:
  transparent: true
upstreams:
  crm:
    url: {{url}}
    headers: {X-Tenant: default}
    forward_headers: [Authorization, X-Tenant]
  other:
    url: {{url}}
tools:
  customer:
    description: Find a customer.
    upstream: crm
    args: {type: object, properties: {id: {type: string}}}
    request: {method: GET, path: "/customers/{id}"}
  report:
    description: Read a report.
    upstream: other
    args: {type: object}
    request: {method: GET, path: /report}
`

// agentHeaders are what an agent sends: a per-user token and a tenant the
// crm upstream forwards, its identity, which never passes, and a header
// nobody listed.
func agentHeaders() http.Header {
	return http.Header{
		"Authorization":           {"Bearer user-42"},
		"X-Tenant":                {"acme"},
		"X-Toolgate-Caller":       {"ops"},
		"X-Forwarded-Client-Cert": {"By=spiffe://a;URI=spiffe://cluster.local/ns/agents/sa/ops"},
		"X-Other":                 {"o"},
	}
}

// checkForwarded checks a backend request's header against forwardPolicy.
func checkForwarded(t *testing.T, h http.Header, forwards bool) {
	t.Helper()
	for _, name := range []string{"X-Toolgate-Caller", "X-Forwarded-Client-Cert", "X-Other"} {
		if v := h.Values(name); len(v) != 0 {
			t.Errorf("%s reached the backend: %q", name, v)
		}
	}
	wantAuth, wantTenant := "", ""
	if forwards {
		wantAuth, wantTenant = "Bearer user-42", "acme"
	}
	if got := h.Get("Authorization"); got != wantAuth {
		t.Errorf("Authorization = %q, want %q", got, wantAuth)
	}
	if forwards && len(h.Values("X-Tenant")) != 1 || h.Get("X-Tenant") != wantTenant {
		t.Errorf("X-Tenant = %q, want %q", h.Values("X-Tenant"), wantTenant)
	}
}

func TestForwardHeaders(t *testing.T) {
	backend := &seenRequests{}
	srv := httptest.NewServer(backend)
	defer srv.Close()
	a := newAuthCore(t, strings.ReplaceAll(forwardPolicy, "{{url}}", srv.URL), nil, Options{})
	send := func(method, path string) {
		t.Helper()
		req, _ := http.NewRequest(method, a.server.URL+path, strings.NewReader(`{"id":"c-1"}`))
		req.Header = agentHeaders()
		req.Header.Set("Content-Type", "application/json")
		resp, err := a.server.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	t.Run("the tool endpoint passes the listed headers and no identity", func(t *testing.T) {
		send(http.MethodPost, "/v1/tools/customer")
		checkForwarded(t, backend.last(t).Header, true)
	})
	t.Run("a transparent route passes the listed headers and no identity", func(t *testing.T) {
		send(http.MethodGet, "/customers/c-1")
		checkForwarded(t, backend.last(t).Header, true)
	})
	t.Run("an upstream that lists none passes none", func(t *testing.T) {
		send(http.MethodPost, "/v1/tools/report")
		checkForwarded(t, backend.last(t).Header, false)
	})
	t.Run("the agent not sending a listed header leaves the static one", func(t *testing.T) {
		res := a.core.Call(context.Background(), &Request{Tool: "customer", Body: []byte(`{"id":"c-1"}`), Header: http.Header{"X-Other": {"o"}}})
		if res.Envelope.Status != contracts.StatusOK {
			t.Fatal(res.Envelope)
		}
		if h := backend.last(t).Header; h.Get("X-Tenant") != "default" || h.Get("Authorization") != "" {
			t.Errorf("header %v", h)
		}
	})
	t.Run("ext_proc's backend request passes the listed headers and no identity", func(t *testing.T) {
		p, res := a.core.View().Begin(context.Background(), &Request{Tool: "customer", Args: map[string]any{"id": "c-1"}, Header: agentHeaders(), Front: "extproc"})
		if res != nil {
			t.Fatal(res.Envelope)
		}
		defer p.Abandon()
		checkForwarded(t, p.Backend().Header, true)
	})
}

const pendingAuthPolicy = `
version: 1
upstreams:
  slack:
    url: http://127.0.0.1:1
    auth: {bearer: {token: "${SLACK}"}}
  maps:
    url: http://127.0.0.1:1
    auth: {api_key: {query: key, value: map-key}}
  fcm:
    url: http://127.0.0.1:1
    auth:
      oauth2: {token_url: "{{token}}/token", client_id: fcm-client, client_secret: fcm-secret}
tools:
  post:
    description: Post.
    upstream: slack
    args: {type: object}
    request: {method: POST, path: /api/chat.postMessage, body: {text: {const: hi}}}
  geocode:
    description: Geocode.
    upstream: maps
    args: {type: object, properties: {address: {type: string}}}
    request: {method: GET, path: /geocode/json, query: {address: address, key: address}}
  push:
    description: Push.
    upstream: fcm
    args: {type: object}
    request: {method: GET, path: /v1/devices}
access: {shared_credentials: [slack, maps, fcm]}
`

func TestPendingBackendCarriesCredential(t *testing.T) {
	te := &tokenEndpoint{t: t, expiresIn: 3600}
	ts := httptest.NewServer(te)
	defer ts.Close()
	a := newAuthCore(t, strings.ReplaceAll(pendingAuthPolicy, "{{token}}", ts.URL), map[string]string{"SLACK": "xoxb-9"}, Options{})
	begin := func(tool string, args map[string]any) (*Call, *Result) {
		return a.core.View().Begin(context.Background(), &Request{Tool: tool, Args: args, Front: "extproc", Header: http.Header{"Authorization": {"Bearer agent"}}})
	}
	for _, tc := range []struct {
		name, tool          string
		args                map[string]any
		wantAuth, wantQuery string
	}{
		{name: "a bearer token is in the header Envoy sends", tool: "post", wantAuth: "Bearer xoxb-9"},
		{name: "an API key is in the query Envoy sends, once", tool: "geocode", args: map[string]any{"address": "Main St"}, wantQuery: "address=Main+St&key=map-key"},
		{name: "an OAuth2 token is in the header Envoy sends", tool: "push", wantAuth: "Bearer tok-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, res := begin(tc.tool, tc.args)
			if res != nil {
				t.Fatalf("%s: %+v", res.Reason, res.Envelope)
			}
			b := p.Backend()
			if got := b.Header.Get("Authorization"); got != tc.wantAuth {
				t.Errorf("Authorization = %q, want %q", got, tc.wantAuth)
			}
			if b.RawQuery != tc.wantQuery {
				t.Errorf("query = %q, want %q", b.RawQuery, tc.wantQuery)
			}
			p.Finish(Answer{Code: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)})
		})
	}
	t.Run("a 401 through Envoy drops the OAuth2 token", func(t *testing.T) {
		p, _ := begin("push", nil)
		p.Finish(Answer{Code: http.StatusUnauthorized, Header: http.Header{}})
		p, res := begin("push", nil)
		if res != nil {
			t.Fatal(res.Envelope)
		}
		if got := p.Backend().Header.Get("Authorization"); got != "Bearer tok-2" {
			t.Errorf("Authorization = %q, want a new token", got)
		}
		p.Abandon()
	})
	t.Run("without a token the call ends before Envoy sends anything", func(t *testing.T) {
		te.fail.Store(http.StatusInternalServerError)
		p, _ := begin("push", nil)
		p.Finish(Answer{Code: http.StatusUnauthorized, Header: http.Header{}}) // drops the token
		p, res := begin("push", nil)
		if p != nil {
			t.Fatal("a pending call without a token")
		}
		if res.Reason != contracts.ReasonAuth || res.Envelope.Status != contracts.StatusUpstream || !res.Envelope.Retryable || res.Envelope.SideEffect != contracts.SideEffectNone || res.HTTPStatus() != http.StatusServiceUnavailable {
			t.Errorf("reason %s, envelope %+v", res.Reason, res.Envelope)
		}
		if a.authCount("fcm") != 1 {
			t.Errorf("auth count = %v", a.authCount("fcm"))
		}
	})
}

func TestPassthroughCarriesCredential(t *testing.T) {
	backend := &seenRequests{}
	srv := httptest.NewServer(backend)
	defer srv.Close()
	te := &tokenEndpoint{t: t, expiresIn: 3600}
	ts := httptest.NewServer(te)
	defer ts.Close()
	doc := strings.NewReplacer("{{url}}", srv.URL, "{{token}}", ts.URL).Replace(`
version: 1
server:
  transparent: true
  passthrough:
    - {prefix: /maps/health, upstream: maps}
    - {prefix: /fcm/health, upstream: fcm}
upstreams:
  maps:
    url: {{url}}
    headers: {X-Static: s}
    auth: {api_key: {query: key, value: map-key}}
  fcm:
    url: {{url}}
    auth:
      oauth2: {token_url: "{{token}}/token", client_id: fcm-client, client_secret: fcm-secret}
access: {shared_credentials: [maps, fcm]} # a passthrough checks no caller
`)
	a := newAuthCore(t, doc, nil, Options{})
	get := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, a.server.URL+path, nil)
		req.Header.Set("Authorization", "Bearer agent")
		resp, err := a.server.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	t.Run("an API key replaces the agent's parameter of that name", func(t *testing.T) {
		if resp := get("/maps/health?key=agent&v=1"); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		got := backend.last(t)
		if got.URL.RawQuery != "v=1&key=map-key" || got.Header.Get("X-Static") != "s" {
			t.Errorf("query %q, header %v", got.URL.RawQuery, got.Header)
		}
	})
	t.Run("an OAuth2 token replaces the agent's Authorization", func(t *testing.T) {
		if resp := get("/fcm/health"); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if got := backend.last(t).Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer tok-1" {
			t.Errorf("Authorization = %q", got)
		}
	})
	t.Run("ext_proc's passthrough gets the same credential", func(t *testing.T) {
		h, q, err := a.passthroughHeader("maps", "key=agent&v=1")
		if err != nil || q != "v=1&key=map-key" || h.Get("X-Static") != "s" {
			t.Errorf("header %v, query %q, err %v", h, q, err)
		}
		h, _, err = a.passthroughHeader("fcm", "")
		if err != nil || h.Get("Authorization") != "Bearer tok-1" {
			t.Errorf("header %v, err %v", h, err)
		}
	})
	t.Run("without its credential a passthrough request is not sent", func(t *testing.T) {
		te.fail.Store(http.StatusServiceUnavailable)
		backend.status.Store(http.StatusUnauthorized) // drops the token
		get("/fcm/health")
		backend.status.Store(0)
		before := backend.count()
		if resp := get("/fcm/health"); resp.StatusCode != http.StatusBadGateway {
			t.Errorf("status %d, want 502", resp.StatusCode)
		}
		if _, _, err := a.passthroughHeader("fcm", ""); err == nil {
			t.Error("PassthroughHeader without a token: no error")
		}
		if backend.count() != before {
			t.Error("the backend got a request without the credential")
		}
	})
}
