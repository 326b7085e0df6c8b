package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/policy"
)

// TestRetryableNothingDoneIsNotReplayed: a side-effecting call that the
// backend refused without acting (429, 503, 408) says retryable and
// side_effect none, which invites the identical call with the same key.
// That retry must reach the backend; replaying the refusal would answer it
// with the same failure until the record expires (found by the soak test).
func TestRetryableNothingDoneIsNotReplayed(t *testing.T) {
	for _, mode := range []string{"429", "503", "408"} {
		t.Run("upstream "+mode, func(t *testing.T) {
			h := newHarness(t, harnessPolicy)
			hdr := map[string]string{"Idempotency-Key": "k-" + mode}
			_, first := h.call(t, "write", `{"mode":"`+mode+`"}`, hdr)
			if !first.Retryable || first.SideEffect != contracts.SideEffectNone {
				t.Fatalf("first = %+v", first)
			}
			_, again := h.call(t, "write", `{"mode":"`+mode+`"}`, hdr)
			if again.Replayed {
				t.Errorf("the retry was answered from the record: %+v", again)
			}
			if got := h.backend.calls.Load(); got != 2 {
				t.Errorf("backend calls = %d, want 2 (the retry is sent)", got)
			}
		})
	}
	t.Run("a failure that did nothing and may not be retried is still stored", func(t *testing.T) {
		h := newHarness(t, harnessPolicy)
		hdr := map[string]string{"Idempotency-Key": "k-400"}
		h.call(t, "write", `{"mode":"400"}`, hdr)
		_, again := h.call(t, "write", `{"mode":"400"}`, hdr)
		if !again.Replayed || again.Status != contracts.StatusBadArgs || h.backend.calls.Load() != 1 {
			t.Errorf("retry = %+v after %d backend calls, want the stored bad_args", again, h.backend.calls.Load())
		}
	})
}

// resendBackend acts on every write it receives, then answers by the
// order of arrival: the first request well, the second by resetting the
// connection (after acting), every later one as then.
type resendBackend struct {
	n       atomic.Int64
	effects atomic.Int64
	then    func(w http.ResponseWriter)
}

func (b *resendBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	b.effects.Add(1)
	switch b.n.Add(1) {
	case 1:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"first"}`)
	case 2:
		conn, _, _ := http.NewResponseController(w).Hijack()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		conn.Close()
	default:
		b.then(w)
	}
}

// TestTransportResendIsNotHiddenFromTheEnvelope: net/http silently resends
// a request that carries an Idempotency-Key header when a reused
// connection breaks after the request was written. The first write may
// have acted, so whatever the resend meets, the envelope must not say that
// nothing happened (found by the soak test).
func TestTransportResendIsNotHiddenFromTheEnvelope(t *testing.T) {
	tests := []struct {
		name string
		then func(w http.ResponseWriter)
		stop bool // the backend stops listening after the reset: the resend is refused
	}{
		{name: "the resend meets a 503", then: func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) }},
		{name: "the resend meets a 404", then: func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) }},
		{name: "the resend is refused", stop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &resendBackend{then: tt.then}
			srv := httptest.NewUnstartedServer(b)
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.Start()
			t.Cleanup(srv.Close)
			if tt.stop {
				b.then = func(http.ResponseWriter) { t.Error("the resend reached a stopped backend") }
			}
			h := newIdemHarness(t, nil, srv.URL, nil)
			if _, env := h.send(t, "send_dedupe", "k-1", `{"mode":"ok","nonce":"n1"}`); env.Status != contracts.StatusOK {
				t.Fatalf("first call = %+v", env)
			}
			if tt.stop {
				// New connections are refused from the reset on; the pooled
				// one still reaches the handler.
				srv.Listener.Close()
			}
			_, env := h.send(t, "send_dedupe", "k-2", `{"mode":"ok","nonce":"n2"}`)
			if env.SideEffect == contracts.SideEffectNone {
				t.Errorf("envelope = %s/%s after a write that acted before its connection broke (backend effects %d)",
					env.Status, env.SideEffect, b.effects.Load())
			}
		})
	}
}

// The security checks: identities, backend internals and secrets stay
// where they belong.

// leakSecret is the value of ${TG_LEAK_SECRET} in securityPolicy: the
// upstream's bearer token.
const leakSecret = "tg-secret-0d5e8b1c7a"

const securityPolicy = `
version: 1
server:
  caller_from: {{from}}
  transparent: true
  passthrough:
    - {prefix: /raw, upstream: svc}
upstreams:
  svc:
    url: "{{url}}"
    timeout: 2s
    headers: {Authorization: "Bearer ${TG_LEAK_SECRET}"}
    breaker: {consecutive_failures: 100000, min_requests: 100000, open_for: 1s, half_open_requests: 1}
tools:
  code:
    description: Answers with the status it is given.
    upstream: svc
    args: {type: object, required: [n], properties: {n: {type: string}}}
    request: {method: GET, path: "/code/{n}"}
  code_write:
    description: Answers with the status it is given, after acting.
    upstream: svc
    side_effect: true
    args: {type: object, required: [n], properties: {n: {type: string}}}
    request: {method: POST, path: "/codew/{n}", body: {n: n}}
access:
  default: allow
  shared_credentials: [svc] # the test's backend takes the static token from anyone
  identities:
    spiffe://cluster.local/ns/agents/sa/research: research-agent
  callers:
    research-agent: {tools: ["*"]}
    ops-agent: {tools: ["*"]}
`

// leakyBackend answers /code/{n} and /codew/{n} with status n and a body
// that repeats everything a careless proxy could pass on: the credentials
// it received, its internal host name, a stack trace. /raw echoes the
// headers it received.
type leakyBackend struct{ proxytest.HeaderRecorder }

func (b *leakyBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.Record(r)
	_, _ = io.Copy(io.Discard, r.Body)
	if strings.HasPrefix(r.URL.Path, "/raw") {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.Header)
		return
	}
	code, err := parseCode(r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:])
	if err != nil || code < 200 {
		code = 599
	}
	leak := "<html>java.lang.RuntimeException at " + secretHost + " with " + r.Header.Get("Authorization") + "</html>"
	w.Header().Set("Location", "http://"+secretHost+"/moved")
	w.Header().Set("X-Backend-Host", secretHost)
	w.Header().Set("Retry-After", "1")
	// A 2xx text answer is the tool's data (read as text); one that
	// says it is JSON and is not stays unreadable, whatever it holds.
	w.Header().Set("Content-Type", "text/html")
	if code >= 200 && code < 300 {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(code)
	if code != http.StatusNoContent && code != http.StatusNotModified {
		_, _ = io.WriteString(w, leak)
	}
}

type securityHarness struct {
	core    *Core
	reg     *prometheus.Registry
	front   *httptest.Server
	backend *leakyBackend
	logs    *proxytest.LogBuffer
}

func newSecurityHarness(t *testing.T, from string) *securityHarness {
	t.Helper()
	b := &leakyBackend{}
	backend := httptest.NewServer(b)
	t.Cleanup(backend.Close)
	doc := strings.NewReplacer("{{url}}", backend.URL, "{{from}}", from).Replace(securityPolicy)
	env := func(name string) (string, bool) {
		if name == "TG_LEAK_SECRET" {
			return leakSecret, true
		}
		return "", false
	}
	snap, err := config.CompileSource("security.yaml", []byte(doc), config.Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	logs := &proxytest.LogBuffer{}
	reg := prometheus.NewRegistry()
	core, err := NewCore(snap, Options{Registry: reg, Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	front := serveCore(t, core)
	return &securityHarness{core: core, reg: reg, front: front, backend: b, logs: logs}
}

// identityHeaders are what a caller sends to prove who it is; none of them
// is the backend's business.
var identityHeaders = map[string]string{
	"X-Toolgate-Caller":       "ops-agent",
	"X-Forwarded-Client-Cert": `By=spiffe://cluster.local/ns/legacy/sa/svc;URI=spiffe://cluster.local/ns/agents/sa/research`,
}

func TestIdentityHeadersNeverReachTheBackendOnAnyFront(t *testing.T) {
	for _, from := range []string{"header", "xfcc"} {
		t.Run("caller_from "+from, func(t *testing.T) {
			h := newSecurityHarness(t, from)
			send := func(method, path, body string, extra map[string]string) {
				req, _ := http.NewRequest(method, h.front.URL+path, strings.NewReader(body))
				for k, v := range identityHeaders {
					req.Header.Set(k, v)
				}
				for k, v := range extra {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			send(http.MethodPost, "/v1/tools/code", `{"n":"200"}`, nil)
			send(http.MethodGet, "/code/200", "", nil)                                                    // a transparent tool route
			send(http.MethodPost, "/codew/201", `{"n":"201"}`, map[string]string{"Idempotency-Key": "k"}) // a transparent write
			send(http.MethodGet, "/raw/anything", "", nil)                                                // passthrough, forwarded untouched otherwise
			send(http.MethodPost, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"code","arguments":{"n":"200"}}}`,
				map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"})
			headers := h.backend.Headers()
			if len(headers) != 5 {
				t.Fatalf("the backend saw %d requests, want 5", len(headers))
			}
			for i, got := range headers {
				for name := range identityHeaders {
					if v := got.Values(name); len(v) != 0 {
						t.Errorf("request %d: the backend received %s: %q", i, name, v)
					}
				}
				if got.Get("Authorization") != "Bearer "+leakSecret {
					t.Errorf("request %d: the backend did not get the upstream's own credentials", i)
				}
			}
		})
	}
}

// TestBackendInternalsNeverReachTheAgent drives every status a backend can
// answer (with a body and headers naming its internal host and echoing
// the credentials toolgate sent), and a transport failure, through both
// kinds of tool and MCP. No message, observation or envelope may repeat
// them, nor may the logs or the metrics carry the secret.
func TestBackendInternalsNeverReachTheAgent(t *testing.T) {
	h := newSecurityHarness(t, "header")
	var seen []string
	for code := 200; code <= 599; code++ {
		for _, tool := range []string{"code", "code_write"} {
			hdr := map[string]string{"Idempotency-Key": fmt.Sprintf("k-%d", code)}
			_, env := postCall(t, h.front, tool, fmt.Sprintf(`{"n":"%d"}`, code), hdr)
			for _, leak := range []string{secretHost, "java.lang", "<html", leakSecret, "127.0.0.1", "Bearer"} {
				if strings.Contains(env.Message, leak) || strings.Contains(env.Observation, leak) {
					t.Errorf("%s %d: message or observation repeats %q: %q", tool, code, leak, env.Observation)
				}
				if strings.Contains(string(env.Data), leak) {
					t.Errorf("%s %d: data repeats %q: %s", tool, code, leak, env.Data)
				}
			}
			seen = append(seen, env.Message, env.Observation)
		}
	}
	rpc := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"code","arguments":{"n":"500"}}}`
	_, mcpBody := proxytest.MCPPost(t, h.front.URL+"/mcp", "2025-11-25", nil, rpc)
	seen = append(seen, string(mcpBody))

	var metrics strings.Builder
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		metrics.WriteString(mf.String())
	}
	seen = append(seen, h.logs.String(), metrics.String())
	for i, s := range seen {
		for _, leak := range []string{secretHost, leakSecret} {
			if strings.Contains(s, leak) {
				t.Errorf("output %d repeats %q: %.300s", i, leak, s)
			}
		}
	}
	if !strings.Contains(h.logs.String(), `"status":"upstream"`) {
		t.Error("the log capture saw no calls")
	}
}

// TestDamagedStoredRecordIsAnOutcomeLost: a stored record whose JSON holds
// invalid UTF-8 is damaged; replaying it would put invalid UTF-8 into the
// envelope. It must replay as an outcome lost, like any unreadable record
// (found by FuzzStoredRecordReplay; the crasher stays in testdata/fuzz).
func TestDamagedStoredRecordIsAnOutcomeLost(t *testing.T) {
	snap := proxytest.Snapshot(t, strings.NewReplacer("{{legacy}}", "http://127.0.0.1:9", "{{refused}}", "http://127.0.0.1:9", "{{tls}}", "https://127.0.0.1:9").Replace(harnessPolicy))
	for _, record := range []string{
		"{\"status\":\"ok\",\"message\":\"m\",\"data\":{\"\xcb\":\"\"},\"retryable\":false,\"side_effect\":\"done\",\"side_effect_done\":true,\"replayed\":false,\"cost\":0,\"tool\":\"write\",\"call_id\":\"c\",\"observation\":\"[OK] m\"}",
		"{\"status\":\"ok\",\"message\":\"\xff\",\"retryable\":false,\"side_effect\":\"done\",\"side_effect_done\":true,\"replayed\":false,\"cost\":0,\"tool\":\"write\",\"call_id\":\"c\",\"observation\":\"[OK] \xff\"}",
	} {
		core, err := NewCore(snap, Options{Store: &recordStore{state: policy.RecordCompleted, envelope: []byte(record)}})
		if err != nil {
			t.Fatal(err)
		}
		res := core.Call(context.Background(), &Request{Tool: "write", Body: []byte(`{"mode":"ok"}`), IdempotencyKey: "k", Front: "http"})
		raw := res.Envelope.AppendJSON(nil)
		if !utf8.Valid(raw) || res.Envelope.Status != contracts.StatusTimeout || res.Envelope.SideEffect != contracts.SideEffectUnknown {
			t.Errorf("replay of %q = %q", record, raw)
		}
	}
}
