// Package proxytest holds what the tests of toolgate's fronts share: the
// proxy package's own tests (internal and external), the MCP front's, the
// Envoy external processor's, the toolgate command's and the dashboards':
// policies, backends and transports, the log sink, the HTTP and MCP
// clients' calls. It does not import proxy, so that proxy's internal tests
// can use it.
package proxytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/policy"
)

// Snapshot compiles a policy document, failing the test on any error.
func Snapshot(t testing.TB, doc string) *policy.Snapshot {
	t.Helper()
	snap, err := config.CompileSource("policy.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// RefusedURL is an http:// URL on the loopback interface where nothing
// listens: a connection to it is refused, so nothing is ever sent.
//
// It is port 1 (tcpmux, a privileged port nothing here binds): a port
// picked free and closed again can be taken by a test running in parallel
// before it is dialled, which then answers.
func RefusedURL(t testing.TB) string {
	t.Helper()
	const addr = "127.0.0.1:1"
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s accepts connections; tests need it closed", addr)
	}
	return "http://" + addr
}

// LogBuffer is a log sink safe for the concurrent writes of a server.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines decodes what was written as JSON log lines, one object a line.
func (b *LogBuffer) Lines(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// ReadEnvelope reads an answer's body and decodes the envelope in it; the
// body is returned too.
func ReadEnvelope(resp *http.Response) (*contracts.Envelope, []byte, error) {
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	env, err := contracts.DecodeEnvelope(bytes.TrimSpace(raw))
	if err != nil {
		return nil, raw, fmt.Errorf("answer is not an envelope: %w: %s", err, raw)
	}
	return env, raw, nil
}

// PostCall calls a tool on an agent port (base is its URL): it posts args
// as JSON with the given headers and decodes the envelope.
func PostCall(client *http.Client, base, tool, args string, header map[string]string) (*http.Response, *contracts.Envelope, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/tools/"+tool, strings.NewReader(args))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	env, _, err := ReadEnvelope(resp)
	return resp, env, err
}

// HeaderRecorder is a backend that remembers the headers of every request
// it receives and answers each with a small JSON document.
type HeaderRecorder struct {
	mu      sync.Mutex
	headers []http.Header
}

func (h *HeaderRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.Record(r)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"results":[1],"total":1,"id":"x"}`))
}

// Record remembers the headers of r, for a backend that answers in its
// own way.
func (h *HeaderRecorder) Record(r *http.Request) {
	h.mu.Lock()
	h.headers = append(h.headers, r.Header.Clone())
	h.mu.Unlock()
}

// Headers are the headers of the requests received so far, in order.
func (h *HeaderRecorder) Headers() []http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]http.Header(nil), h.headers...)
}

// MCPPost posts one JSON-RPC message to an MCP endpoint as a Streamable
// HTTP client does (revision "" sends no MCP-Protocol-Version), and
// returns the answer with its body read.
func MCPPost(t testing.TB, endpoint, revision string, header http.Header, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if revision != "" {
		req.Header.Set("MCP-Protocol-Version", revision)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// HandlerTransport serves a core's backend requests with the example
// backends' handlers in process, without sockets, so a benchmark measures
// toolgate rather than the kernel: /v1/users... to the notification
// backend, anything else to the search backend.
func HandlerTransport() http.RoundTripper {
	return handlerTransport{
		search: examples.NewSearchBackend(examples.SearchOptions{}),
		notify: examples.NewNotifyBackend(examples.NotifyOptions{}),
	}
}

type handlerTransport struct {
	search, notify http.Handler
}

func (h handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	handler := h.search
	if strings.HasPrefix(r.URL.Opaque, "/v1/users") {
		handler = h.notify
	}
	r.URL.Path = r.URL.Opaque
	r.RequestURI = r.URL.RequestURI()
	handler.ServeHTTP(rec, r)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

// CannedTransport answers every backend request 200 with Body as JSON.
type CannedTransport struct{ Body []byte }

// RoundTrip implements http.RoundTripper.
func (c CannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode:    200,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(c.Body)),
		ContentLength: int64(len(c.Body)),
		Request:       r,
	}, nil
}

// SearchAnswer is the example search backend's answer to q=go&limit=5.
func SearchAnswer() []byte {
	rec := httptest.NewRecorder()
	examples.NewSearchBackend(examples.SearchOptions{}).ServeHTTP(rec, httptest.NewRequest("GET", "/api/search?q=go&limit=5", nil))
	return rec.Body.Bytes()
}

// LoopbackContext is the context of a request an agent sends to the agent
// port on loopback (the browser checks read the local address).
func LoopbackContext() context.Context {
	return context.WithValue(context.Background(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
}
