package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/redisstate"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// secretHost appears in every test backend's error bodies; no envelope may
// ever repeat it.
const secretHost = "db-7.internal:5432"

// testBackend answers by the last path segment ("mode"), the way a legacy
// service with many failure shapes would.
type testBackend struct {
	calls   atomic.Int64
	effects atomic.Int64 // side effects performed (POST requests handled)
}

func (b *testBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.calls.Add(1)
	body, _ := io.ReadAll(r.Body)
	if r.Method == http.MethodPost {
		b.effects.Add(1)
	}
	mode := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	if code, err := parseCode(mode); err == nil {
		if code == 429 || code == 503 {
			w.Header().Set("Retry-After", "7")
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "<html>java.lang.IllegalStateException at "+secretHost+"</html>")
		return
	}
	switch mode {
	case "ok":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"results":[{"id":1,"title":"t"}],"total":1,"echo":`+jsonString(string(body))+`}`)
	case "empty":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"results":[],"total":0}`)
	case "created":
		w.WriteHeader(http.StatusNoContent)
	case "html":
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html>ok from "+secretHost+"</html>")
	case "badjson":
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = io.WriteString(w, "<html>ok from "+secretHost+"</html>")
	case "big":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"results":["`+strings.Repeat("x", 4096)+`"],"total":1}`)
	case "reset":
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("no hijacker")
		}
		conn, _, _ := hj.Hijack()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST instead of FIN
		}
		conn.Close()
	case "hang":
		<-r.Context().Done()
	case "nocode":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"code":"E_NOPERM"}`)
	default:
		w.WriteHeader(http.StatusTeapot)
	}
}

func parseCode(s string) (int, error) {
	var code int
	if len(s) != 3 {
		return 0, io.EOF
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, io.EOF
		}
		code = code*10 + int(c-'0')
	}
	return code, nil
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// harnessPolicy has a read-only and a side-effecting tool on one backend
// (no retries, so every row of the table is one attempt), plus upstreams
// that refuse connections and that present an untrusted certificate.
const harnessPolicy = `
version: 1
server:
  max_response_bytes: 2048
  observation_max_chars: 400
upstreams:
  legacy:
    url: {{legacy}}
    timeout: 300ms
    breaker: {consecutive_failures: 1000, min_requests: 1000, open_for: 1s, half_open_requests: 1}
  dedupe:
    url: {{legacy}}
    timeout: 300ms
    breaker: {consecutive_failures: 1000, min_requests: 1000, open_for: 1s, half_open_requests: 1}
  refused:
    url: {{refused}}
  untrusted:
    url: {{tls}}
tools:
  read:
    description: Read something.
    upstream: legacy
    cost: 0.5
    args: {type: object, required: [mode], properties: {mode: {type: string}, limit: {type: integer, maximum: 5}}}
    request: {method: GET, path: "/r/{mode}"}
    response:
      data: '{"items": body.results, "total": body.total}'
      empty: size(body.results) == 0
    errors:
      - when: status == 200 && has(body.code) && body.code == "E_NOPERM"
        status: forbidden
  write:
    description: Write something.
    upstream: legacy
    side_effect: true
    cost: 2
    args: {type: object, required: [mode], properties: {mode: {type: string}, limit: {type: integer, maximum: 5}}}
    request: {method: POST, path: "/w/{mode}", body: {mode: mode}}
  write_dedupe:
    description: Write something the backend dedupes.
    upstream: dedupe
    side_effect: true
    idempotency: {forward_header: Idempotency-Key}
    args: {type: object, required: [mode], properties: {mode: {type: string}}}
    request: {method: POST, path: "/w/{mode}"}
  read_refused:
    description: Read from a dead backend.
    upstream: refused
    args: {type: object}
    request: {method: GET, path: /x}
  write_refused:
    description: Write to a dead backend.
    upstream: refused
    side_effect: true
    args: {type: object}
    request: {method: POST, path: /x}
  read_tls:
    description: Read from an untrusted backend.
    upstream: untrusted
    args: {type: object}
    request: {method: GET, path: /x}
`

type harness struct {
	core    *Core
	reg     *prometheus.Registry
	backend *testBackend
	server  *httptest.Server // toolgate's agent port
}

func newHarness(t *testing.T, policyYAML string) *harness {
	t.Helper()
	b := &testBackend{}
	legacy := httptest.NewServer(b)
	t.Cleanup(legacy.Close)
	tlsServer := httptest.NewUnstartedServer(b)
	tlsServer.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are the point
	tlsServer.StartTLS()
	t.Cleanup(tlsServer.Close)
	doc := strings.NewReplacer("{{legacy}}", legacy.URL, "{{refused}}", proxytest.RefusedURL(t), "{{tls}}", tlsServer.URL).Replace(policyYAML)
	reg := prometheus.NewRegistry()
	core := newTestCore(t, doc, Options{Registry: reg})
	return &harness{core: core, reg: reg, backend: b, server: serveCore(t, core)}
}

// newTestCore is a core serving a policy document; it closes with the
// test. A nil Options.Registry is a fresh registry.
func newTestCore(t testing.TB, doc string, opts Options) *Core {
	t.Helper()
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	core, err := NewCore(proxytest.Snapshot(t, doc), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Close)
	return core
}

// serveCore serves core's agent port (the tool API, /mcp, transparent
// routes) on a test server; the server and then the core close with the
// test.
func serveCore(t *testing.T, core *Core) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(agentHandler(core))
	t.Cleanup(func() {
		srv.Client().CloseIdleConnections()
		srv.Close()
		core.Close()
	})
	return srv
}

// leaveOnceCalled is the context of an agent that leaves once the
// backend has its call: it is cancelled when the backend has received one
// more call than now, or after 5 s (and then the envelope says the call
// never got there).
func (h *harness) leaveOnceCalled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	before := h.backend.calls.Load()
	go func() {
		for deadline := time.Now().Add(5 * time.Second); h.backend.calls.Load() == before && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	return ctx
}

// call posts a tool call and decodes the envelope.
func (h *harness) call(t *testing.T, tool, args string, header map[string]string) (*http.Response, *contracts.Envelope) {
	t.Helper()
	return postCall(t, h.server, tool, args, header)
}

// postCall posts a tool call to an agent port and decodes the envelope.
func postCall(t *testing.T, front *httptest.Server, tool, args string, header map[string]string) (*http.Response, *contracts.Envelope) {
	t.Helper()
	resp, env, err := proxytest.PostCall(front.Client(), front.URL, tool, args, header)
	if err != nil {
		t.Fatal(err)
	}
	return resp, env
}

// fakeBackend is an in-memory round tripper: no network, so tests run in a
// testing/synctest bubble where time is fake and sleeps are instant.
type fakeBackend struct {
	calls atomic.Int64
	fail  atomic.Bool
	// cut answers 200 and the start of its body, then stops until the
	// request's context ends.
	cut atomic.Bool
}

func (f *fakeBackend) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	code, body := 200, `{"results":[1],"total":1}`
	if f.fail.Load() {
		code, body = 500, "boom"
	}
	var rd io.Reader = bytes.NewReader([]byte(body))
	if f.cut.Load() {
		rd = io.MultiReader(strings.NewReader(`{"results":[`), stalledReader{r.Context()})
	}
	return &http.Response{StatusCode: code, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(rd), Request: r}, nil
}

// stalledReader reads nothing until its context ends, then fails with the
// context's error, as a connection closed under the read does.
type stalledReader struct{ ctx context.Context }

func (s stalledReader) Read([]byte) (int, error) {
	<-s.ctx.Done()
	return 0, s.ctx.Err()
}

const breakerPolicy = `
version: 1
upstreams:
  legacy:
    url: http://legacy.invalid
    timeout: 1s
    breaker: {consecutive_failures: 3, failure_ratio: 0.5, min_requests: 100, window: 60s, open_for: 10s, half_open_requests: 1}
tools:
  read:
    description: Read.
    upstream: legacy
    args: {type: object}
    request: {method: GET, path: /r}
`

func newFakeCore(t *testing.T, doc string, fb *fakeBackend) (*Core, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return newTestCore(t, doc, Options{Registry: reg, Transport: func(*policy.Upstream) http.RoundTripper { return fb }}), reg
}

func callRead(core *Core) *Result {
	return core.Call(context.Background(), &Request{Tool: "read", Body: []byte(`{}`), Front: "test"})
}

const retryPolicy = `
version: 1
upstreams:
  legacy:
    url: http://legacy.invalid
    timeout: 5s
    retries: {attempts: 3, backoff: 100ms, max_backoff: 1s}
tools:
  read:
    description: Read.
    upstream: legacy
    args: {type: object}
    request: {method: GET, path: /r}
  write:
    description: Write.
    upstream: legacy
    side_effect: true
    args: {type: object}
    request: {method: POST, path: /w}
`

// scriptedBackend answers from a script of status codes, then 200.
type scriptedBackend struct {
	mu         sync.Mutex
	script     []int
	retryAfter string
	calls      int
	connErr    int // the first n calls fail to connect
}

func (s *scriptedBackend) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.connErr > 0 {
		s.connErr--
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connection refused")}
	}
	code := 200
	if len(s.script) > 0 {
		code, s.script = s.script[0], s.script[1:]
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if s.retryAfter != "" && code != 200 {
		h.Set("Retry-After", s.retryAfter)
	}
	return &http.Response{StatusCode: code, Header: h, Body: io.NopCloser(bytes.NewReader([]byte(`{"ok":true}`))), Request: r}, nil
}

func newScriptedCore(t *testing.T, sb *scriptedBackend) *Core {
	t.Helper()
	return newTestCore(t, retryPolicy, Options{Transport: func(*policy.Upstream) http.RoundTripper { return sb }})
}

// blockingBackend holds every request until released.
type blockingBackend struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingBackend) RoundTrip(r *http.Request) (*http.Response, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"a":1}`)), Request: r}, nil
}

// recordStore is an idempotency store that answers every claim with one
// stored record, as a damaged or foreign Redis record would reach the core.
type recordStore struct {
	state    policy.RecordState
	envelope []byte
}

func (s *recordStore) claim() policy.Claim {
	rec := policy.Record{State: s.state, Envelope: s.envelope}
	if s.state == policy.RecordCompleted {
		return policy.Claim{Outcome: policy.ClaimCompleted, Record: rec}
	}
	return policy.Claim{Outcome: policy.ClaimUnknown, Record: rec}
}

func (s *recordStore) Claim(context.Context, policy.IdempotencyKey, policy.Fingerprint, time.Duration, time.Duration) (policy.Claim, error) {
	return s.claim(), nil
}

func (s *recordStore) Reclaim(context.Context, policy.IdempotencyKey, policy.Fingerprint, time.Duration, time.Duration) (policy.Claim, error) {
	return s.claim(), nil
}

func (s *recordStore) Complete(context.Context, policy.IdempotencyKey, string, []byte, time.Duration) error {
	return nil
}

func (s *recordStore) MarkUnknown(context.Context, policy.IdempotencyKey, string, []byte, time.Duration) error {
	return nil
}

func (s *recordStore) Release(context.Context, policy.IdempotencyKey, string) error { return nil }

func (s *recordStore) Get(context.Context, policy.IdempotencyKey) (policy.Record, bool, error) {
	return s.claim().Record, true, nil
}

func (s *recordStore) Wait(context.Context, policy.IdempotencyKey) (policy.Record, error) {
	return s.claim().Record, nil
}

func (s *recordStore) Ping(context.Context) error { return nil }

func (s *recordStore) ScopeKey(context.Context) ([]byte, error) {
	return []byte("0123456789abcdef0123456789abcdef"), nil
}

func (s *recordStore) Close() error { return nil }

func newWireCore(t testing.TB, url string, rt func(*policy.Upstream) http.RoundTripper) *Core {
	t.Helper()
	return newTestCore(t, strings.ReplaceAll(wirePolicy, "{{url}}", url), Options{Transport: rt})
}

// tlsTransport is toolgate's own transport for an upstream, trusting the
// test server's certificate.
func tlsTransport(srv *httptest.Server) func(*policy.Upstream) http.RoundTripper {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return func(cfg *policy.Upstream) http.RoundTripper {
		t := upstream.NewTransport(cfg, upstream.Env{Now: time.Now, Logger: slog.New(slog.DiscardHandler)})
		t.TLSClientConfig = &tls.Config{RootCAs: pool}
		return t
	}
}

// effectBackend performs side effects and remembers each one by the
// `nonce` body field, so a test can count effects per idempotency key.
// It dedupes on Idempotency-Key when the request carries one, like a
// backend that is told about keys.
type effectBackend struct {
	mu      sync.Mutex
	effects map[string]int
	byKey   map[string]string // forwarded key -> stored answer
	hold    chan struct{}     // when set, "slow" requests wait on it
	keys    []string          // forwarded keys seen
}

func newEffectBackend() *effectBackend {
	return &effectBackend{effects: map[string]int{}, byKey: map[string]string{}}
}

func (b *effectBackend) count(nonce string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.effects[nonce]
}

func (b *effectBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Nonce string `json:"nonce"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	mode := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	key := r.Header.Get("Idempotency-Key")
	b.mu.Lock()
	if key != "" {
		b.keys = append(b.keys, key)
		if answer, ok := b.byKey[key]; ok {
			b.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, answer)
			return
		}
	}
	b.effects[body.Nonce]++
	n := b.effects[body.Nonce]
	answer := fmt.Sprintf(`{"id":"%s-%d"}`, body.Nonce, n)
	if key != "" && mode != "reset" {
		b.byKey[key] = answer
	}
	hold := b.hold
	b.mu.Unlock()
	switch mode {
	case "reset":
		// The effect happened; the answer is lost on the wire. A backend
		// that dedupes remembers it for the retry.
		if key != "" {
			b.mu.Lock()
			b.byKey[key] = answer
			b.mu.Unlock()
		}
		conn, _, _ := w.(http.Hijacker).Hijack()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		conn.Close()
		return
	case "hang":
		<-r.Context().Done()
		return
	case "slow":
		if hold != nil {
			<-hold
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, answer)
}

const idemPolicy = `
version: 1
upstreams:
  svc:
    url: {{url}}
    timeout: 2s
tools:
  send:
    description: Send something.
    upstream: svc
    side_effect: true
    cost: 0.25
    timeout: 1s
    args: {type: object, required: [mode, nonce], additionalProperties: false, properties: {mode: {type: string}, nonce: {type: string}, text: {type: string}}}
    request: {method: POST, path: "/w/{mode}", body: {nonce: nonce, text: text}}
    response: {data: '{"id": body.id}'}
  send_dedupe:
    description: Send something to a backend that dedupes on the key.
    upstream: svc
    side_effect: true
    timeout: 1s
    idempotency: {forward_header: Idempotency-Key, ttl: 1h}
    args: {type: object, required: [mode, nonce], additionalProperties: false, properties: {mode: {type: string}, nonce: {type: string}}}
    request: {method: POST, path: "/w/{mode}", body: {nonce: nonce}}
    response: {data: '{"id": body.id}'}
  read:
    description: Read something.
    upstream: svc
    args: {type: object}
    request: {method: GET, path: /r}
`

type idemHarness struct {
	core    *Core
	backend *effectBackend
	front   *httptest.Server
	reg     *prometheus.Registry
}

func newIdemHarness(t *testing.T, store policy.IdempotencyStore, backendURL string, b *effectBackend) *idemHarness {
	t.Helper()
	if b == nil {
		b = newEffectBackend()
	}
	if backendURL == "" {
		srv := httptest.NewServer(b)
		t.Cleanup(srv.Close)
		backendURL = srv.URL
	}
	h := newIdemHarnessDoc(t, strings.ReplaceAll(idemPolicy, "{{url}}", backendURL), store)
	h.backend = b
	return h
}

// newIdemHarnessDoc serves a policy document with a store.
func newIdemHarnessDoc(t *testing.T, doc string, store policy.IdempotencyStore) *idemHarness {
	t.Helper()
	reg := prometheus.NewRegistry()
	core := newTestCore(t, doc, Options{Registry: reg, Store: store})
	return &idemHarness{core: core, front: serveCore(t, core), reg: reg}
}

func (h *idemHarness) send(t *testing.T, tool, key, args string) (*http.Response, *contracts.Envelope) {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Idempotency-Key"] = key
	}
	return postCall(t, h.front, tool, args, hdr)
}

func newRedisStore(t *testing.T, srv *redistest.Server) *redisstate.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	return redisstate.NewStore(client, redisstate.StoreOptions{})
}
