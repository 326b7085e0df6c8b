package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/clienttest"
	"github.com/toolgate/toolgate/internal/testkit/policytest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// The backend wire: which bytes belong to which call, and when a request
// may go out a second time. Each test is a misbehaviour seen from real
// backends, driven through the core.

// wirePolicy has one upstream with a single connection's worth of
// bulkhead, so calls made one after the other share a pooled connection,
// and retries, so an outcome wrongly classified as "nothing happened" is
// sent again by toolgate itself.
const wirePolicy = `
version: 1
upstreams:
  svc:
    url: "{{url}}"
    timeout: 5s
    max_concurrent: 1
    breaker: {consecutive_failures: 3, min_requests: 1000, open_for: 1m, half_open_requests: 1}
    retries: {attempts: 3, backoff: 1ms, max_backoff: 2ms}
tools:
  read:
    description: Read.
    upstream: svc
    args: {type: object, required: [n], properties: {n: {type: string}}}
    request: {method: GET, path: /r}
  write:
    description: Write.
    upstream: svc
    side_effect: true
    args: {type: object, required: [n], properties: {n: {type: string}}}
    request: {method: POST, path: /w, body: {n: n}}
  write_get:
    description: Write, bound to GET.
    upstream: svc
    side_effect: true
    args: {type: object, required: [n], properties: {n: {type: string}}}
    request: {method: GET, path: /wg}
`

// wireCall calls tool as call id, with key k-<id> and the call id as the
// request id the backend sees.
func wireCall(core *Core, tool, id string) *Result {
	return core.Call(context.Background(), &Request{Tool: tool, Body: []byte(`{"n":"` + id + `"}`),
		IdempotencyKey: "k-" + id, CallID: id, Front: "test"})
}

// whoAnswer answers with the request's own id: whoever reads it can tell
// whose answer it is.
func whoAnswer(c *clienttest.RawConn) string {
	code := http.StatusOK
	if c.Req.Method == http.MethodPost {
		code = http.StatusCreated
	}
	return clienttest.JSONAnswer(code, `{"who":"`+c.Req.Header.Get("X-Request-Id")+`"}`)
}

// pooledConnStirred says a connection in the upstream's pool is no longer
// quiet: bytes or an end arrived on it. Tests wait for it, so the race
// between the backend's bytes and the next call is decided before the call.
func pooledConnStirred(core *Core, name string) bool {
	_, stirred := core.state.Load().upstreams[name].client.(*upstream.H1Client).Idle()
	return stirred > 0
}

// pooledConns is the number of connections in the upstream's pool.
func pooledConns(core *Core, name string) int {
	n, _ := core.state.Load().upstreams[name].client.(*upstream.H1Client).Idle()
	return n
}

func wantEnv(t *testing.T, res *Result, status contracts.Status, effect contracts.SideEffect, retryable bool) {
	t.Helper()
	env := res.Envelope
	if env.Status != status || env.SideEffect != effect || env.Retryable != retryable {
		t.Errorf("envelope %s/%s/retryable=%v (%s: %s), want %s/%s/retryable=%v",
			env.Status, env.SideEffect, env.Retryable, res.Reason, env.Message, status, effect, retryable)
	}
}

// TestStrayBytesAreNeverAnotherCallsAnswer: a backend writes past the end
// of caller A's answer, once A has its answer and the connection is back
// in the pool, and keeps serving the connection. Caller B, next on that
// connection, must get its own answer: the stray bytes poison the
// connection. Before, B read them as its answer (another caller's data; a
// stray 503 made B's write look undone, and the retry acted twice).
func TestStrayBytesAreNeverAnotherCallsAnswer(t *testing.T) {
	tests := []struct {
		name          string
		tool          string
		answer, stray string // A's answer, then the stray bytes
	}{
		{name: "a late second answer", tool: "read",
			answer: clienttest.JSONAnswer(200, `{"who":"A"}`), stray: clienttest.JSONAnswer(200, `{"who":"A-late"}`)},
		{name: "a body longer than its Content-Length", tool: "read",
			answer: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"who\":\"A\"}",
			stray:  `,"more":"than promised"}`},
		{name: "a stray 503 after a side-effecting answer", tool: "write",
			answer: clienttest.JSONAnswer(201, `{"who":"A"}`), stray: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"},
		{name: "a stray 503 after a side-effecting GET's answer", tool: "write_get",
			answer: clienttest.JSONAnswer(200, `{"who":"A"}`), stray: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeStray, strayWritten := make(chan struct{}), make(chan struct{})
			b := clienttest.NewRawBackend(t, func(c *clienttest.RawConn, n int) bool {
				if c.Req.Header.Get("X-Request-Id") == "A" {
					c.Answer(tt.answer)
					<-writeStray
					c.Answer(tt.stray) // late: the connection is idle in toolgate's pool
					close(strayWritten)
					return true // and the connection is served on
				}
				return c.Answer(whoAnswer(c))
			})
			core := newWireCore(t, b.URL(), nil)
			a := wireCall(core, tt.tool, "A")
			if a.Envelope.Status != contracts.StatusOK || string(a.Envelope.Data) != `{"who":"A"}` {
				t.Fatalf("A got %s %s", a.Envelope.Status, a.Envelope.Data)
			}
			if n := pooledConns(core, "svc"); n != 1 {
				t.Fatalf("%d pooled connections after A, want 1", n)
			}
			close(writeStray)
			<-strayWritten
			policytest.Eventually(t, "the stray bytes to reach toolgate", func() bool { return pooledConnStirred(core, "svc") })

			res := wireCall(core, tt.tool, "B")
			effect := contracts.SideEffectNone
			if tt.tool != "read" {
				effect = contracts.SideEffectDone
			}
			wantEnv(t, res, contracts.StatusOK, effect, false)
			if got := string(res.Envelope.Data); got != `{"who":"B"}` {
				t.Errorf("B got the data %s", got)
			}
			if got := b.Received("B"); got != 1 {
				t.Errorf("the backend received B's request %d times, want once", got)
			}
		})
	}
}

// TestReusedConnectionClosedUnanswered: the backend reads the request that
// reused a connection, then closes it without answering. A side-effecting
// call may have acted, whatever its method: it is sent once and ends
// unknown. Before, a side-effecting GET was sent again and said done after
// acting twice. A read-only call is sent again on a new connection.
func TestReusedConnectionClosedUnanswered(t *testing.T) {
	tests := []struct {
		tool      string
		status    contracts.Status
		effect    contracts.SideEffect
		retryable bool
		received  int
	}{
		{"read", contracts.StatusOK, contracts.SideEffectNone, false, 2},
		{"write_get", contracts.StatusUpstream, contracts.SideEffectUnknown, false, 1},
		{"write", contracts.StatusUpstream, contracts.SideEffectUnknown, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			b := clienttest.NewRawBackend(t, func(c *clienttest.RawConn, n int) bool {
				if n == 2 {
					c.Close() // the request was read; no answer comes
					return false
				}
				return c.Answer(whoAnswer(c))
			})
			core := newWireCore(t, b.URL(), nil)
			if a := wireCall(core, tt.tool, "A"); a.Envelope.Status != contracts.StatusOK {
				t.Fatalf("A got %s", a.Envelope.Status)
			}
			res := wireCall(core, tt.tool, "B")
			wantEnv(t, res, tt.status, tt.effect, tt.retryable)
			if got := b.Received("B"); got != tt.received {
				t.Errorf("the backend received B's request %d times, want %d", got, tt.received)
			}
		})
	}
}

// TestQuickCloseBeforeReuse: the backend closes a kept-alive connection
// right after its answer, without Connection: close, and the next call
// comes at once. The close is found before the request is written: the
// call goes out once, on a new connection, and ends done. Before, a
// connection idle under 100 ms was not checked, and the call ended
// unknown though the backend never saw it.
func TestQuickCloseBeforeReuse(t *testing.T) {
	for _, tool := range []string{"write", "write_get"} {
		t.Run(tool, func(t *testing.T) {
			closed := make(chan struct{}, 1)
			b := clienttest.NewRawBackend(t, func(c *clienttest.RawConn, n int) bool {
				c.Answer(whoAnswer(c))
				if c.Req.Header.Get("X-Request-Id") == "A" {
					c.Close()
					closed <- struct{}{}
					return false
				}
				return true
			})
			core := newWireCore(t, b.URL(), nil)
			if a := wireCall(core, tool, "A"); a.Envelope.Status != contracts.StatusOK {
				t.Fatalf("A got %s", a.Envelope.Status)
			}
			<-closed
			policytest.Eventually(t, "the close to reach toolgate", func() bool { return pooledConnStirred(core, "svc") })
			res := wireCall(core, tool, "B")
			wantEnv(t, res, contracts.StatusOK, contracts.SideEffectDone, false)
			if got, conns := b.Received("B"), b.Conns(); got != 1 || conns != 2 {
				t.Errorf("the backend received B %d times over %d connections, want once on a second connection", got, conns)
			}
		})
	}
}

// TestNothingWrittenIsNothingDone: a write that failed before any byte of
// the request left (the socket had already been reset) demonstrably
// reached no backend: side_effect none, retryable.
func TestNothingWrittenIsNothingDone(t *testing.T) {
	b := clienttest.NewRawBackend(t, func(c *clienttest.RawConn, n int) bool { return c.Answer(whoAnswer(c)) })
	cfg := &policy.Upstream{Name: "svc", URL: mustURL(t, b.URL()), MaxConcurrent: 1}
	u := newUpstream(cfg, NewMetrics(prometheus.NewRegistry(), "test"), nil, upstreamOptions{env: upstream.Env{Now: time.Now, Logger: slog.New(slog.DiscardHandler)}})
	fail := &atomic.Bool{}
	fail.Store(true)
	u.client = upstream.NewH1Client(upstream.H1Options{Addr: b.Addr(), MaxIdle: 1, Dial: clienttest.FailingDial(fail, 0)})
	defer u.closeIdle()
	req, _ := http.NewRequest(http.MethodPost, "http://backend.test/w", strings.NewReader(`{"n":"x"}`))
	var a attempt
	var r upstream.Report
	u.send(context.Background(), u.auth, req, 1<<20, true, false, time.Now, &r, &a)
	if a.sent || a.outcome.Effect != contracts.SideEffectNone || !a.outcome.Retryable || b.Requests() != 0 {
		t.Errorf("attempt %+v sent=%v after %d backend requests, want nothing sent, none, retryable", a.outcome, a.sent, b.Requests())
	}
}

// trackingListener remembers the TCP connections it accepted, so a test
// can break them underneath TLS and HTTP/2.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

// TestHTTPSNeverResendsASideEffect: an HTTPS backend reads a
// side-effecting call that reused a connection, acts, and breaks the
// connection without answering. net/http's transport resends a GET, or a
// request with an Idempotency-Key header, by itself in that case; a
// side-effecting request must not be one it resends. Over HTTP/1.1 and
// HTTP/2: one effect, and the envelope says unknown.
func TestHTTPSNeverResendsASideEffect(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, tool := range []string{"write_get", "write"} {
			t.Run(fmt.Sprintf("%s over HTTP/%d", tool, map[bool]int{false: 1, true: 2}[h2]), func(t *testing.T) {
				var (
					mu     sync.Mutex
					seen   = map[string]int{}
					protos = map[int]bool{}
					n      atomic.Int64
				)
				tl := &trackingListener{}
				srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					mu.Lock()
					seen[r.Header.Get("X-Request-Id")]++
					protos[r.ProtoMajor] = true
					mu.Unlock()
					if r.Method == http.MethodGet && (len(body) != 0 || r.Header.Get("Content-Length") != "" || len(r.TransferEncoding) != 0 && r.ProtoMajor == 1) {
						t.Errorf("a GET arrived with a body: %q %v %v", body, r.Header, r.TransferEncoding)
					}
					if n.Add(1) == 2 {
						tl.closeAll() // acted on the request, then the connection broke
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"ok":true}`)
				}))
				tl.Listener = srv.Listener
				srv.Listener = tl
				srv.EnableHTTP2 = h2
				srv.Config.ErrorLog = log.New(io.Discard, "", 0)
				srv.StartTLS()
				t.Cleanup(srv.Close)
				core := newWireCore(t, srv.URL, tlsTransport(srv))
				if a := wireCall(core, tool, "A"); a.Envelope.Status != contracts.StatusOK {
					t.Fatalf("A got %s: %s", a.Envelope.Status, a.Envelope.Message)
				}
				res := wireCall(core, tool, "B")
				wantEnv(t, res, contracts.StatusUpstream, contracts.SideEffectUnknown, false)
				mu.Lock()
				defer mu.Unlock()
				if seen["B"] != 1 {
					t.Errorf("the backend acted on B %d times, want once", seen["B"])
				}
				if want := map[bool]int{false: 1, true: 2}[h2]; !protos[want] || len(protos) != 1 {
					t.Errorf("protocols %v, want HTTP/%d", protos, want)
				}
			})
		}
	}
}

// brokenTransport is an injected round tripper that fails every request
// with err, and counts them. It reports nothing through httptrace, as
// most round trippers toolgate did not write.
type brokenTransport struct {
	calls atomic.Int64
	err   error
}

func (b *brokenTransport) RoundTrip(*http.Request) (*http.Response, error) {
	b.calls.Add(1)
	return nil, b.err
}

// TestInjectedTransportFailures: for a transport toolgate did not write,
// only a dial error proves that nothing was sent. Any other failure may
// have come after the request reached the backend: a side-effecting call
// ends unknown and is not sent again. Before, every failure of such a
// transport counted as a failure to connect, and the call was resent.
func TestInjectedTransportFailures(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		tool      string
		status    contracts.Status
		effect    contracts.SideEffect
		retryable bool
		calls     int64
	}{
		{"a reset after connecting, side-effecting", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, "write",
			contracts.StatusUpstream, contracts.SideEffectUnknown, false, 1},
		{"an answer cut short, side-effecting", io.ErrUnexpectedEOF, "write",
			contracts.StatusUpstream, contracts.SideEffectUnknown, false, 1},
		{"an error of its own, side-effecting GET", errors.New("stream broken"), "write_get",
			contracts.StatusUpstream, contracts.SideEffectUnknown, false, 1},
		{"a dial error, side-effecting", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, "write",
			contracts.StatusUpstream, contracts.SideEffectNone, true, 3},
		{"a reset, read-only", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, "read",
			contracts.StatusUpstream, contracts.SideEffectNone, true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bt := &brokenTransport{err: tt.err}
			core := newWireCore(t, "http://backend.invalid", func(*policy.Upstream) http.RoundTripper { return bt })
			res := wireCall(core, tt.tool, "A")
			wantEnv(t, res, tt.status, tt.effect, tt.retryable)
			if got := bt.calls.Load(); got != tt.calls {
				t.Errorf("the transport was called %d times, want %d", got, tt.calls)
			}
		})
	}
}

// TestMalformedRequestIsNotAConnectFailure: a header value with a line
// break makes net/http refuse the request before it dials. The edges keep
// such values out (the policy refuses them in static headers, the agent's
// traceparent is validated and dropped), so the test plants one behind the
// policy's back. Refusing it is toolgate's fault, not the backend's: the
// call ends upstream, not retryable, nothing done, and the breaker does not
// count it. Before, each such call counted as a failure to connect, and
// three opened the breaker for every caller.
func TestMalformedRequestIsNotAConnectFailure(t *testing.T) {
	var served atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	compile := func() *policy.Snapshot {
		snap, err := config.CompileSource("wire.yaml", []byte(strings.ReplaceAll(wirePolicy, "{{url}}", srv.URL)), config.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	planted := compile()
	for _, up := range planted.Upstreams {
		up.Headers.Set("X-Planted", "a\r\nX-Injected: 1")
	}
	core, err := NewCore(planted, Options{Registry: prometheus.NewRegistry(), Transport: tlsTransport(srv)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Close)
	for i := range 10 {
		for _, tool := range []string{"read", "write"} {
			id := fmt.Sprintf("bad-%s-%d", tool, i)
			res := core.Call(context.Background(), &Request{Tool: tool, Body: []byte(`{"n":"x"}`), IdempotencyKey: "k-" + id,
				CallID: id, Front: "test"})
			wantEnv(t, res, contracts.StatusUpstream, contracts.SideEffectNone, false)
		}
	}
	if served.Load() != 0 {
		t.Errorf("the backend served %d malformed requests", served.Load())
	}
	if state := testutil.ToFloat64(core.Metrics().CircuitState.WithLabelValues("svc")); state != 0 {
		t.Errorf("circuit_state = %v after malformed requests, want 0 (closed)", state)
	}
	// The same upstream without the planted header: its breaker, still
	// closed, carries over.
	if err := core.Swap(compile()); err != nil {
		t.Fatal(err)
	}
	wantEnv(t, wireCall(core, "read", "good"), contracts.StatusOK, contracts.SideEffectNone, false)
	t.Run("the key of a side-effecting call that never left is free again", func(t *testing.T) {
		res := core.Call(context.Background(), &Request{Tool: "write", Body: []byte(`{"n":"x"}`), IdempotencyKey: "k-bad-write-0",
			CallID: "again", Front: "test"})
		wantEnv(t, res, contracts.StatusOK, contracts.SideEffectDone, false)
	})
}

// TestResponseHeaderBounds: a backend that streams a 256 MiB header, or
// sends too many fields, costs a bounded amount of memory; the connection
// is closed and the call ends upstream, unknown for a side-effecting call
// (the request was sent). Before, the plain-HTTP client read the whole
// header line into memory.
func TestResponseHeaderBounds(t *testing.T) {
	bombH1 := func(t *testing.T) string {
		b := clienttest.NewRawBackend(t, func(c *clienttest.RawConn, n int) bool {
			clienttest.StreamHeaderBomb(c)
			return false
		})
		return "http://" + b.Addr()
	}
	fieldsH1 := func(t *testing.T) string {
		b := clienttest.NewRawBackend(t, func(c *clienttest.RawConn, n int) bool { return c.Answer(clienttest.ManyFields()) })
		return "http://" + b.Addr()
	}
	var tlsSrv *httptest.Server
	bombTLS := func(t *testing.T) string {
		tlsSrv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			clienttest.StreamHeaderBomb(conn)
		}))
		tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
		tlsSrv.StartTLS()
		t.Cleanup(tlsSrv.Close)
		return tlsSrv.URL
	}
	tests := []struct {
		name      string
		backend   func(t *testing.T) string
		tls       bool
		tool      string
		effect    contracts.SideEffect
		retryable bool
	}{
		{"a 256 MiB header, read-only", bombH1, false, "read", contracts.SideEffectNone, true},
		{"a 256 MiB header, side-effecting", bombH1, false, "write", contracts.SideEffectUnknown, false},
		{"150 header fields", fieldsH1, false, "read", contracts.SideEffectNone, true},
		{"a 256 MiB header over HTTPS, side-effecting", bombTLS, true, "write", contracts.SideEffectUnknown, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := tt.backend(t)
			var rt func(*policy.Upstream) http.RoundTripper
			if tt.tls {
				rt = tlsTransport(tlsSrv)
			}
			core := newWireCore(t, url, rt)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res := wireCall(core, tt.tool, "A")
			runtime.ReadMemStats(&after)
			wantEnv(t, res, contracts.StatusUpstream, tt.effect, tt.retryable)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
				t.Errorf("the call allocated %d MiB", alloc>>20)
			}
		})
	}
}

// TestRetryAfterIsClamped: a backend's Retry-After is clamped to a day
// whether it comes as seconds or as a date. Before, a date far in the
// future gave retry_after_ms 9223372036854.
func TestRetryAfterIsClamped(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{"0", 0},
		{"-5", 0},
		{"86401", 24 * time.Hour},
		{"99999999999999999999999", 24 * time.Hour},
		{"Sun, 01 Jun 2025 12:00:30 GMT", 30 * time.Second},
		{"Sun, 01 Jun 2025 11:00:00 GMT", 0},
		{"Fri, 31 Dec 9999 23:59:59 GMT", 24 * time.Hour},
		{"soon", 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("Retry-After %q", tt.value), func(t *testing.T) {
			if got := retryAfter(http.Header{"Retry-After": {tt.value}}, now); got != tt.want {
				t.Errorf("retryAfter = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("in the envelope", func(t *testing.T) {
		core := newScriptedCore(t, &scriptedBackend{script: []int{429}, retryAfter: "Fri, 31 Dec 9999 23:59:59 GMT"})
		res := core.Call(context.Background(), &Request{Tool: "read", Body: []byte(`{}`), Front: "test"})
		if got := res.Envelope.RetryAfterMS; got != 86400000 {
			t.Errorf("retry_after_ms = %d, want 86400000", got)
		}
	})
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
