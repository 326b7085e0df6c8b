package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	doc := strings.NewReplacer("{{legacy}}", legacy.URL, "{{refused}}", refused, "{{tls}}", tlsServer.URL).Replace(policyYAML)
	snap, err := config.CompileSource("harness.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	core, err := NewCore(snap, Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{core: core, reg: reg, backend: b, server: serveCore(t, core)}
}

// serveCore serves core's agent port (the tool API, /mcp, transparent
// routes) on a test server; the server and then the core close with the
// test.
func serveCore(t *testing.T, core *Core) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(core.Handler())
	t.Cleanup(func() {
		srv.Client().CloseIdleConnections()
		srv.Close()
		core.Close()
	})
	return srv
}

// call posts a tool call and decodes the envelope.
func (h *harness) call(t *testing.T, tool, args string, header map[string]string) (*http.Response, *contracts.Envelope) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, h.server.URL+"/v1/tools/"+tool, strings.NewReader(args))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := h.server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	env, err := contracts.DecodeEnvelope(bytes.TrimSpace(body))
	if err != nil {
		t.Fatalf("answer is not an envelope: %v: %s", err, body)
	}
	return resp, env
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
