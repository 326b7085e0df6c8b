package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/policytest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/policy"
)

// Hostile clients: each test sends what no well-behaved agent would, and
// checks that the answer is a clear envelope or a clean connection close,
// and that a well-behaved caller running at the same time keeps getting its
// answers within its deadline.

// hostilePolicy exposes every front end: the tool endpoint, transparent
// routes and a passthrough prefix.
const hostilePolicy = `
version: 1
server:
  max_request_bytes: 65536
  transparent: true
  passthrough:
    - {prefix: /raw, upstream: svc}
upstreams:
  svc: {url: "{{url}}", timeout: 2s}
  # The big answers have an upstream of their own: on a loaded machine
  # their calls may time out, and the breaker that opens then must not
  # be the one the bystander's calls go through.
  bigsvc: {url: "{{url}}", timeout: 2s}
tools:
  search:
    description: Search.
    upstream: svc
    args:
      type: object
      required: [q]
      additionalProperties: false
      properties:
        q: {type: string, maxLength: 1000}
        limit: {type: integer, minimum: 1, maximum: 20}
        score: {type: number}
        big: {type: integer}
        tags: {type: array, items: {type: string}}
    request: {method: GET, path: /search, query: {q: q, limit: limit, score: score, big: big}}
  item:
    description: Get an item.
    upstream: svc
    args: {type: object, required: [id], properties: {id: {type: string}}}
    request: {method: GET, path: "/items/{id}"}
  send:
    description: Send.
    upstream: svc
    side_effect: true
    idempotency: {forward_header: Idempotency-Key}
    args:
      type: object
      required: [text]
      properties:
        text: {type: string}
        amount: {type: number}
        count: {type: integer}
    request: {method: POST, path: /send, body: {text: text, amount: amount, count: count}}
  big:
    description: Big answers.
    upstream: bigsvc
    args: {type: object}
    request: {method: GET, path: /big}
`

// seenRequest is what the hostile backend received.
type seenRequest struct {
	requestURI string
	rawPath    string // the escaped path
	query      url.Values
	header     http.Header
	body       []byte
}

// hostileBackend records every request and answers quickly.
type hostileBackend struct {
	mu   sync.Mutex
	seen []seenRequest
}

func (b *hostileBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.seen = append(b.seen, seenRequest{requestURI: r.RequestURI, rawPath: r.URL.EscapedPath(), query: r.URL.Query(), header: r.Header.Clone(), body: body})
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/big":
		_, _ = io.WriteString(w, `{"blob":"`+strings.Repeat("b", 512<<10)+`"}`)
	case r.Method == http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"s-1"}`)
	default:
		_, _ = io.WriteString(w, `{"results":[{"id":1}],"total":1}`)
	}
}

// byID returns the request the backend saw with X-Request-Id id (toolgate
// forwards the call_id there).
func (b *hostileBackend) byID(id string) (seenRequest, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.seen) - 1; i >= 0; i-- {
		if b.seen[i].header.Get("X-Request-Id") == id {
			return b.seen[i], true
		}
	}
	return seenRequest{}, false
}

// last returns the last request the backend saw whose URI has prefix.
func (b *hostileBackend) last(prefix string) (seenRequest, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.seen) - 1; i >= 0; i-- {
		if strings.HasPrefix(b.seen[i].requestURI, prefix) {
			return b.seen[i], true
		}
	}
	return seenRequest{}, false
}

type hostileHarness struct {
	core    *Core
	backend *hostileBackend
	front   *httptest.Server
	addr    string // host:port of the front, for raw connections
}

func newHostileHarness(t *testing.T) *hostileHarness {
	t.Helper()
	b := &hostileBackend{}
	backend := httptest.NewServer(b)
	t.Cleanup(backend.Close)
	core := newTestCore(t, strings.ReplaceAll(hostilePolicy, "{{url}}", backend.URL), Options{Registry: prometheus.NewRegistry()})
	front := serveCore(t, core)
	return &hostileHarness{core: core, backend: b, front: front, addr: front.Listener.Addr().String()}
}

// post sends a tool call with a fresh client and decodes the envelope,
// checking it is well formed.
func (h *hostileHarness) post(t *testing.T, path string, body io.Reader, header map[string]string) (*http.Response, *contracts.Envelope) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.front.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return h.do(t, req)
}

func (h *hostileHarness) do(t *testing.T, req *http.Request) (*http.Response, *contracts.Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("answer cut: %v", err)
	}
	return resp, mustEnvelope(t, resp, raw)
}

// mustEnvelope checks an answer is a well-formed envelope in valid UTF-8.
func mustEnvelope(t *testing.T, resp *http.Response, raw []byte) *contracts.Envelope {
	t.Helper()
	env, err := contracts.DecodeEnvelope(bytes.TrimSpace(raw))
	if err != nil {
		t.Fatalf("HTTP %d without an envelope: %v: %.300s", resp.StatusCode, err, raw)
	}
	if !utf8.Valid(raw) {
		t.Errorf("the envelope is not valid UTF-8: %q", raw)
	}
	if resp.Header.Get("Toolgate-Status") != string(env.Status) || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v for %s", resp.Header, env.Status)
	}
	if !strings.HasPrefix(env.Observation, env.Status.Tag()+" "+env.Message) || strings.Contains(env.Message, "\n") {
		t.Errorf("observation %q, message %q", env.Observation, env.Message)
	}
	return env
}

// wantEnvelope checks the status, and that a refusal did nothing.
func wantEnvelope(t *testing.T, resp *http.Response, env *contracts.Envelope, status contracts.Status, code int) {
	t.Helper()
	if env.Status != status || resp.StatusCode != code || !status.Success() && env.SideEffect != contracts.SideEffectNone {
		t.Errorf("answer = HTTP %d %s/%s (%s), want HTTP %d %s", resp.StatusCode, env.Status, env.SideEffect, env.Message, code, status)
	}
}

// bystander is a well-behaved caller that keeps calling while a hostile
// client runs; stop reports whether every one of its calls was answered
// correctly within its deadline.
type bystander struct {
	calls, failures atomic.Int64
	slowest         atomic.Int64 // nanoseconds
	firstErr        atomic.Value
	stopCh          chan struct{}
	done            chan struct{}
}

// bystanderDeadline is the tool timeout (2s) plus a margin for a loaded
// race-enabled test machine.
const bystanderDeadline = 3 * time.Second

func startBystander(t *testing.T, h *hostileHarness) *bystander {
	t.Helper()
	b := &bystander{stopCh: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	go func() {
		defer close(b.done)
		defer client.CloseIdleConnections()
		for {
			select {
			case <-b.stopCh:
				return
			default:
			}
			start := time.Now()
			err := bystanderCall(client, h.front.URL)
			took := time.Since(start)
			b.calls.Add(1)
			if took > time.Duration(b.slowest.Load()) {
				b.slowest.Store(int64(took))
			}
			if err == nil && took > bystanderDeadline {
				err = fmt.Errorf("answered after %v", took)
			}
			if err != nil {
				b.failures.Add(1)
				b.firstErr.CompareAndSwap(nil, err.Error())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// The hostile client starts once the bystander has been answered.
	deadline := time.Now().Add(5 * time.Second)
	for b.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(b.stop)
	return b
}

func bystanderCall(client *http.Client, base string) error {
	_, env, err := proxytest.PostCall(client, base, "search", `{"q":"calm"}`, nil)
	if err != nil {
		return err
	}
	if env.Status != contracts.StatusOK {
		return fmt.Errorf("status %s: %s", env.Status, env.Message)
	}
	return nil
}

func (b *bystander) stop() {
	select {
	case <-b.stopCh:
	default:
		close(b.stopCh)
	}
	<-b.done
}

// check stops the bystander and fails the test if it was hurt.
func (b *bystander) check(t *testing.T) {
	t.Helper()
	b.stop()
	if b.calls.Load() == 0 {
		t.Fatal("the well-behaved caller made no call")
	}
	if n := b.failures.Load(); n > 0 {
		t.Errorf("the well-behaved caller failed %d of %d calls (slowest %v): %v", n, b.calls.Load(), time.Duration(b.slowest.Load()), b.firstErr.Load())
	}
}

// rawConn dials the front for hand-written HTTP.
func (h *hostileHarness) rawConn(t *testing.T) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readAnswer reads one HTTP answer from a raw connection.
func readAnswer(t *testing.T, conn net.Conn, br *bufio.Reader) (*http.Response, []byte) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("answer cut: %v", err)
	}
	return resp, raw
}

// handlersLeft counts goroutines still inside the agent-facing handler.
func handlersLeft() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("proxy.(*Core).serveCall")) || bytes.Contains(g, []byte("proxy.(*Core).writeResult")) {
			n++
		}
	}
	return n
}

// settleGoroutines waits until the goroutine count is back near base.
func settleGoroutines(t *testing.T, base int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+5 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %d goroutines remain, %d before", what, n, base)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHostileOversizedBodies(t *testing.T) {
	h := newHostileHarness(t)
	by := startBystander(t, h)
	tooBig := strings.Repeat("x", 70000)

	t.Run("an honest Content-Length over the limit is 413 bad_args", func(t *testing.T) {
		resp, env := h.post(t, "/v1/tools/search", strings.NewReader(`{"q":"`+tooBig+`"}`), nil)
		wantEnvelope(t, resp, env, contracts.StatusBadArgs, http.StatusRequestEntityTooLarge)
	})
	t.Run("a chunked body over the limit is 413 bad_args", func(t *testing.T) {
		body := io.MultiReader(strings.NewReader(`{"q":"`), strings.NewReader(tooBig), strings.NewReader(`"}`))
		resp, env := h.post(t, "/v1/tools/send", struct{ io.Reader }{body}, map[string]string{"Idempotency-Key": "k-chunked"})
		wantEnvelope(t, resp, env, contracts.StatusBadArgs, http.StatusRequestEntityTooLarge)
		if resp.Request.TransferEncoding == nil && resp.Request.ContentLength != -1 {
			t.Log("the client did not send chunked")
		}
	})
	t.Run("a transparent route refuses an oversized body the same way", func(t *testing.T) {
		resp, env := h.post(t, "/send", strings.NewReader(`{"text":"`+tooBig+`"}`), map[string]string{"Idempotency-Key": "k-transparent"})
		wantEnvelope(t, resp, env, contracts.StatusBadArgs, http.StatusRequestEntityTooLarge)
	})
	t.Run("a huge declared Content-Length is refused without waiting for the body", func(t *testing.T) {
		conn := h.rawConn(t)
		start := time.Now()
		fmt.Fprintf(conn, "POST /v1/tools/search HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n{\"q\":")
		resp, raw := readAnswer(t, conn, bufio.NewReader(conn))
		wantEnvelope(t, resp, mustEnvelope(t, resp, raw), contracts.StatusBadArgs, http.StatusRequestEntityTooLarge)
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("answered after %v", took)
		}
	})
	t.Run("an endless chunked body is cut off with 413 and the connection closed", func(t *testing.T) {
		conn := h.rawConn(t)
		fmt.Fprintf(conn, "POST /v1/tools/search HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
		writerDone := make(chan error, 1)
		go func() {
			chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", 4096, strings.Repeat("y", 4096)))
			_, _ = conn.Write([]byte("6\r\n{\"q\":\"\r\n"))
			for {
				_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := conn.Write(chunk); err != nil {
					writerDone <- err
					return
				}
			}
		}()
		br := bufio.NewReader(conn)
		resp, raw := readAnswer(t, conn, br)
		wantEnvelope(t, resp, mustEnvelope(t, resp, raw), contracts.StatusBadArgs, http.StatusRequestEntityTooLarge)
		// The server stops reading: the endless writer must fail soon.
		select {
		case <-writerDone:
		case <-time.After(10 * time.Second):
			t.Error("the server kept reading an endless body")
		}
	})
	t.Run("a Content-Length shorter than the body answers the declared part, then closes", func(t *testing.T) {
		conn := h.rawConn(t)
		body := `{"q":"declared"}` + `POST /v1/tools/search HTTP/1.1` + "\r\nGarbage\r\n\r\n"
		fmt.Fprintf(conn, "POST /v1/tools/search HTTP/1.1\r\nHost: localhost\r\nContent-Length: 16\r\n\r\n%s", body)
		br := bufio.NewReader(conn)
		resp, raw := readAnswer(t, conn, br)
		if env := mustEnvelope(t, resp, raw); env.Status != contracts.StatusOK {
			t.Errorf("the declared body %q answered %s: %s", `{"q":"declared"}`, env.Status, env.Message)
		}
		// The rest is a malformed request: net/http refuses it and closes.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := http.ReadResponse(br, nil); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !resp.Close {
				t.Errorf("the trailing garbage got HTTP %d (close=%v), want 400 and a close", resp.StatusCode, resp.Close)
			}
		}
	})
	by.check(t)
}

func TestHostileDeepJSON(t *testing.T) {
	h := newHostileHarness(t)
	by := startBystander(t, h)
	const depth = 10000
	arrays := `{"q":"x","tags":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
	objects := `{"text":` + strings.Repeat(`{"a":`, depth) + `1` + strings.Repeat("}", depth) + `}`
	for _, tc := range []struct{ name, path, body string }{
		{"arrays nested 10,000 deep", "/v1/tools/search", arrays},
		{"objects nested 10,000 deep", "/v1/tools/send", objects},
		{"objects nested 10,000 deep on a transparent route", "/send", objects},
		{"an unterminated 10,000-deep document", "/v1/tools/search", `{"q":` + strings.Repeat("[", depth)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			resp, env := h.post(t, tc.path, strings.NewReader(tc.body), map[string]string{"Idempotency-Key": "k-deep"})
			wantEnvelope(t, resp, env, contracts.StatusBadArgs, http.StatusBadRequest)
			if took := time.Since(start); took > time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
	t.Run("arguments nested 10,000 deep over MCP", func(t *testing.T) {
		rpc := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":` + arrays + `}}`
		resp, raw := proxytest.MCPPost(t, h.front.URL+"/mcp", "2025-11-25", nil, rpc)
		if resp.StatusCode == http.StatusBadRequest && len(raw) > 0 {
			return // the SDK refused the message before decoding it: a clear answer
		}
		var msg struct {
			Result *struct {
				IsError           bool                `json:"isError"`
				StructuredContent *contracts.Envelope `json:"structuredContent"`
			} `json:"result"`
			Error *struct{ Code int } `json:"error"`
		}
		if err := json.Unmarshal(raw, &msg); err != nil {
			t.Fatalf("HTTP %d, not JSON-RPC: %v: %.300s", resp.StatusCode, err, raw)
		}
		switch {
		case msg.Error != nil: // the SDK refused the message: a JSON-RPC error is a clear answer
		case msg.Result == nil || msg.Result.StructuredContent == nil || msg.Result.StructuredContent.Status != contracts.StatusBadArgs:
			t.Errorf("want a bad_args tool result or a JSON-RPC error: %.300s", raw)
		}
	})
	for _, prefix := range []string{"/send", "/search?q=x"} {
		if seen, ok := h.backend.last(prefix); ok {
			t.Errorf("a deep document reached the backend: %s", seen.requestURI)
		}
	}
	by.check(t)
}

func TestHostileEncodings(t *testing.T) {
	h := newHostileHarness(t)
	by := startBystander(t, h)
	bad := func(name, path, body string, header map[string]string) {
		t.Run(name, func(t *testing.T) {
			resp, env := h.post(t, path, strings.NewReader(body), header)
			wantEnvelope(t, resp, env, contracts.StatusBadArgs, http.StatusBadRequest)
		})
	}
	key := map[string]string{"Idempotency-Key": "k-enc"}
	bad("invalid UTF-8 in a value", "/v1/tools/search", "{\"q\":\"caf\xe9\"}", nil)
	bad("invalid UTF-8 in a key", "/v1/tools/search", "{\"q\":\"x\",\"\xff\":1}", nil)
	bad("a lone surrogate escape is not a string of text", "/v1/tools/search", `{"q":"\ud800","limit":99}`, nil)
	bad("a key given twice", "/v1/tools/search", `{"q":"a","q":"b"}`, nil)
	bad("the idempotency key given twice", "/v1/tools/send", `{"text":"a","idempotency_key":"k1","idempotency_key":"k2"}`, nil)
	bad("a key given twice on a transparent route", "/send", `{"text":"a","text":"b"}`, key)
	bad("an integer beyond int64 over its maximum", "/v1/tools/search", `{"q":"a","limit":9223372036854775808}`, nil)
	bad("a number beyond float64 over an integer's maximum", "/v1/tools/search", `{"q":"a","limit":1e400}`, nil)
	bad("a number below float64's range where an integer is due", "/v1/tools/send", `{"text":"a","count":1.5e-400}`, key)
	bad("a number beyond the argument bounds where any number will do", "/v1/tools/search", `{"q":"a","score":1e999999}`, nil)
	bad("trailing data after the object", "/v1/tools/search", `{"q":"a"} {"q":"b"}`, nil)
	bad("a byte order mark", "/v1/tools/search", "\ufeff{\"q\":\"a\"}", nil)

	t.Run("numbers beyond int64 and float64 reach the backend exactly as sent", func(t *testing.T) {
		const huge = "123456789012345678901234567890"
		const precise = "0.1234567890123456789012345678901e-300" // beyond float64's precision and range
		resp, env := h.post(t, "/v1/tools/search", strings.NewReader(`{"q":"n","big":`+huge+`,"score":`+precise+`}`), map[string]string{"X-Request-Id": "numbers"})
		wantEnvelope(t, resp, env, contracts.StatusOK, http.StatusOK)
		seen, ok := h.backend.byID("numbers")
		if !ok || seen.query.Get("big") != huge || seen.query.Get("score") != precise {
			t.Errorf("backend saw %q", seen.requestURI)
		}
	})
	t.Run("numbers beyond float64 in a side-effecting call are fingerprinted and sent", func(t *testing.T) {
		for i := range 2 {
			resp, env := h.post(t, "/v1/tools/send", strings.NewReader(`{"text":"n","amount":1e399,"count":`+strings.Repeat("9", 40)+`}`),
				map[string]string{"Idempotency-Key": "k-huge"})
			wantEnvelope(t, resp, env, contracts.StatusOK, http.StatusOK)
			if i == 1 && !env.Replayed {
				t.Error("the repeat was not replayed")
			}
		}
	})
	t.Run("invalid UTF-8 in headers is not echoed", func(t *testing.T) {
		resp, env := h.post(t, "/v1/tools/search", strings.NewReader(`{"q":"h"}`), map[string]string{
			"X-Request-Id": "id-\xff\xfe", "X-Toolgate-Caller": "caller-\xff",
		})
		if env.Status != contracts.StatusOK || !utf8.ValidString(env.CallID) || strings.Contains(env.CallID, "id-") {
			t.Errorf("HTTP %d %s call_id %q", resp.StatusCode, env.Status, env.CallID)
		}
	})
	t.Run("invalid UTF-8 in a transparent query answers a valid envelope", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, h.front.URL+"/search?q=caf%E9&limit=2", nil)
		_, env := h.do(t, req)
		if env.Status != contracts.StatusOK && env.Status != contracts.StatusBadArgs {
			t.Errorf("status %s: %s", env.Status, env.Message)
		}
	})
	by.check(t)
}

func TestHostileManyQueryParameters(t *testing.T) {
	h := newHostileHarness(t)
	by := startBystander(t, h)
	t.Run("1,000 unknown parameters are ignored", func(t *testing.T) {
		var q strings.Builder
		q.WriteString("q=many&limit=3")
		for i := range 1000 {
			fmt.Fprintf(&q, "&p%d=%d", i, i)
		}
		req, _ := http.NewRequest(http.MethodGet, h.front.URL+"/search?"+q.String(), nil)
		req.Header.Set("X-Request-Id", "many")
		resp, env := h.do(t, req)
		wantEnvelope(t, resp, env, contracts.StatusOK, http.StatusOK)
		seen, _ := h.backend.byID("many")
		if len(seen.query) != 2 || seen.query.Get("q") != "many" || seen.query.Get("limit") != "3" {
			t.Errorf("backend saw %q", seen.requestURI)
		}
	})
	t.Run("1,000 values of one parameter", func(t *testing.T) {
		q := strings.Repeat("q=again&", 1000)
		req, _ := http.NewRequest(http.MethodGet, h.front.URL+"/search?"+q, nil)
		resp, env := h.do(t, req)
		wantEnvelope(t, resp, env, contracts.StatusBadArgs, http.StatusBadRequest)
	})
	t.Run("a malformed query", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, h.front.URL+"/search?q=%zz", nil)
		resp, env := h.do(t, req)
		wantEnvelope(t, resp, env, contracts.StatusBadArgs, http.StatusBadRequest)
	})
	by.check(t)
}

func TestHostileInjection(t *testing.T) {
	h := newHostileHarness(t)
	by := startBystander(t, h)
	t.Run("path arguments stay one segment", func(t *testing.T) {
		// Values a server may read as a dot segment are refused, never sent
		// (TestDotSegmentPathValuesAreNeverSent).
		for i, id := range []string{"../admin", "..", ".", "%2e%2e", "é/.."} {
			body, _ := json.Marshal(map[string]string{"id": id})
			callID := fmt.Sprintf("dot-%d", i)
			resp, env := h.post(t, "/v1/tools/item", bytes.NewReader(body), map[string]string{"X-Request-Id": callID})
			wantEnvelope(t, resp, env, contracts.StatusBadArgs, http.StatusBadRequest)
			if seen, ok := h.backend.byID(callID); ok {
				t.Errorf("id %q reached the backend as %q", id, seen.requestURI)
			}
		}
		for i, id := range []string{"a/b", "a%2Fb", "a?x=1", "a#frag", "a;b=c", "a b", "a\x00b", "a\r\nX-Injected: 1", "é/x", "//evil.example/x", "v1..2"} {
			body, _ := json.Marshal(map[string]string{"id": id})
			callID := fmt.Sprintf("path-%d", i)
			resp, env := h.post(t, "/v1/tools/item", bytes.NewReader(body), map[string]string{"X-Request-Id": callID})
			if env.Status != contracts.StatusOK {
				t.Errorf("id %q: HTTP %d %s: %s", id, resp.StatusCode, env.Status, env.Message)
				continue
			}
			seen, ok := h.backend.byID(callID)
			if !ok {
				t.Fatalf("id %q: the backend saw no /items/ request", id)
			}
			seg := strings.TrimPrefix(seen.rawPath, "/items/")
			got, err := url.PathUnescape(seg)
			if strings.Contains(seg, "/") || err != nil || got != id || strings.ContainsAny(seen.requestURI, "?#") || seg == "." || seg == ".." {
				t.Errorf("id %q reached the backend as %q (segment %q)", id, seen.requestURI, got)
			}
			if seen.header.Get("X-Injected") != "" {
				t.Errorf("id %q injected a header", id)
			}
		}
	})
	t.Run("query arguments stay one parameter", func(t *testing.T) {
		for i, q := range []string{"a&limit=999", "a=b", "x\r\nX-Injected: 1", "a#b", "%00", "a+b c"} {
			body, _ := json.Marshal(map[string]string{"q": q})
			callID := fmt.Sprintf("query-%d", i)
			_, env := h.post(t, "/v1/tools/search", bytes.NewReader(body), map[string]string{"X-Request-Id": callID})
			seen, _ := h.backend.byID(callID)
			if env.Status != contracts.StatusOK || len(seen.query) != 1 || seen.query.Get("q") != q || seen.header.Get("X-Injected") != "" {
				t.Errorf("q %q: %s, backend saw %q", q, env.Status, seen.requestURI)
			}
		}
	})
	t.Run("idempotency keys with control characters are refused", func(t *testing.T) {
		for _, key := range []string{"k\r\nX-Injected: 1", "k\nX", "k\x00", "\"k\r\n\"", "k\x7f"} {
			body, _ := json.Marshal(map[string]string{"text": "t", "idempotency_key": key})
			resp, env := h.post(t, "/v1/tools/send", bytes.NewReader(body), nil)
			wantEnvelope(t, resp, env, contracts.StatusBadArgs, http.StatusBadRequest)
		}
	})
	t.Run("CRLF in request headers never reaches the backend", func(t *testing.T) {
		// A client library would refuse these; a raw connection does not.
		for _, hdr := range []string{
			"Idempotency-Key: k-crlf\r\nX-Injected: 1",
			"Idempotency-Key: k-fold\r\n X-Injected: 1",
			"X-Request-Id: id\r\nX-Injected: 1\r\nIdempotency-Key: k-rid",
			"Idempotency-Key: k-cr\rX-Injected: 1",
		} {
			conn := h.rawConn(t)
			body := `{"text":"crlf"}`
			fmt.Fprintf(conn, "POST /v1/tools/send HTTP/1.1\r\nHost: localhost\r\n%s\r\nContent-Length: %d\r\n\r\n%s", hdr, len(body), body)
			br := bufio.NewReader(conn)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				continue // closed: a clean refusal
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusBadRequest && resp.Header.Get("Toolgate-Status") == "" {
				continue // net/http refused the malformed header
			}
			mustEnvelope(t, resp, raw)
		}
		h.backend.mu.Lock()
		defer h.backend.mu.Unlock()
		for _, s := range h.backend.seen {
			if s.header.Get("X-Injected") != "" {
				t.Errorf("a header was injected into %s: %v", s.requestURI, s.header)
			}
			if k := s.header.Get("Idempotency-Key"); strings.ContainsAny(k, "\r\n\x00") {
				t.Errorf("forwarded key %q", k)
			}
		}
	})
	t.Run("a request id that is not a safe header value is replaced", func(t *testing.T) {
		_, env := h.post(t, "/v1/tools/search", strings.NewReader(`{"q":"rid"}`), map[string]string{"X-Request-Id": strings.Repeat("r", 500)})
		if _, ok := h.backend.byID(env.CallID); len(env.CallID) > 128 || !ok {
			t.Errorf("call_id %q was not what the backend got", env.CallID)
		}
	})
	by.check(t)
}

func TestHostileClientNeverReads(t *testing.T) {
	h := newHostileHarness(t)
	base := runtime.NumGoroutine()
	by := startBystander(t, h)
	// Twenty connections each pipeline calls with half-megabyte answers
	// and never read: the server's writes block once the socket buffers
	// fill.
	var conns []net.Conn
	req := "POST /v1/tools/big HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}"
	for range 20 {
		conn := h.rawConn(t)
		conns = append(conns, conn)
		go func() {
			for range 30 {
				_ = conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
				if _, err := io.WriteString(conn, req); err != nil {
					return
				}
			}
		}()
	}
	// A side-effecting call whose caller never reads still settles its key.
	conn := h.rawConn(t)
	body := `{"text":"unread"}`
	fmt.Fprintf(conn, "POST /v1/tools/send HTTP/1.1\r\nHost: localhost\r\nIdempotency-Key: k-unread\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	time.Sleep(time.Second)
	by.check(t)
	policytest.Eventually(t, "the unread call to reach the backend", func() bool { _, ok := h.backend.last("/send"); return ok })
	_, env := h.post(t, "/v1/tools/send", strings.NewReader(body), map[string]string{"Idempotency-Key": "k-unread"})
	if !env.Replayed || env.Status != contracts.StatusOK {
		t.Errorf("the retry of the unread call = %+v, want its stored result", env)
	}
	if handlersLeft() == 0 {
		t.Error("no handler was blocked writing to a client that never reads")
	}
	for _, c := range conns {
		c.Close()
	}
	conn.Close()
	// Every handler writing to a reader that went away must end; the
	// connections toolgate pooled to the backend stay, up to one per call
	// that ran at once (20 hostile connections, the unread send, and the
	// bystander's calls), three goroutines each.
	policytest.Eventually(t, "the blocked handlers to end", func() bool { return handlersLeft() == 0 })
	settleGoroutines(t, base+3*24, "after the readers that never read went away")
}

func TestHostileIdleConnections(t *testing.T) {
	h := newHostileHarness(t)
	base := runtime.NumGoroutine()
	by := startBystander(t, h)
	const n = 2000
	conns := make([]net.Conn, 0, n)
	for i := range n {
		conn, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, conn)
		if i%2 == 1 {
			// Half send a first line and stall; half send nothing at all.
			_, _ = io.WriteString(conn, "POST /v1/tools/search HTTP/1.1\r\n")
		}
	}
	time.Sleep(500 * time.Millisecond)
	by.check(t)
	for _, c := range conns {
		c.Close()
	}
	settleGoroutines(t, base, "after 2,000 idle connections closed")
	// The front still answers after the storm.
	_, env := h.post(t, "/v1/tools/search", strings.NewReader(`{"q":"after"}`), nil)
	if env.Status != contracts.StatusOK {
		t.Errorf("after the idle connections: %+v", env)
	}
}

// FuzzAgentArguments: whatever an agent sends as arguments, the strict
// parser the fronts use either refuses it or returns an object that encodes
// back to JSON, never deeper than the fronts' bound.
func FuzzAgentArguments(f *testing.F) {
	for _, seed := range []string{
		`{"q":"go","limit":3}`, `{"a":{"b":[1,2,{"c":null}]}}`, `{"q":"a","q":"b"}`, "{\"q\":\"\xff\"}",
		`{"n":1e400,"m":123456789012345678901234567890}`, `{"q":"x"} trailing`, `[]`, `"s"`, `{`,
		`{"a":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, `{"\u0000":"\ud800"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		args, err := contracts.DecodeArgs(body, contracts.MaxArgsDepth)
		if err != nil {
			if args != nil {
				t.Fatal("arguments returned with an error")
			}
			return
		}
		if !utf8.Valid(body) {
			t.Fatalf("accepted invalid UTF-8: %q", body)
		}
		out, err := json.Marshal(args)
		if err != nil {
			t.Fatalf("accepted arguments do not encode: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON out: %s", out)
		}
		if depth := jsonDepth(args); depth > contracts.MaxArgsDepth {
			t.Fatalf("depth %d over the bound %d", depth, contracts.MaxArgsDepth)
		}
	})
}

func jsonDepth(v any) int {
	switch t := v.(type) {
	case map[string]any:
		d := 0
		for _, x := range t {
			d = max(d, jsonDepth(x))
		}
		return d + 1
	case []any:
		d := 0
		for _, x := range t {
			d = max(d, jsonDepth(x))
		}
		return d + 1
	}
	return 0
}

// FuzzStoredRecordReplay: whatever bytes a stored idempotency record holds,
// the replay is a well-formed envelope in valid UTF-8 of the tool that was
// called, marked replayed, costing nothing; an unreadable record replays as
// an outcome lost, never as a result.
func FuzzStoredRecordReplay(f *testing.F) {
	good := contracts.Envelope{Status: contracts.StatusOK, Message: "ok", Data: json.RawMessage(`{"id":"x"}`),
		SideEffect: contracts.SideEffectDone, SideEffectDone: true, Cost: 1, Tool: "write", CallID: "c1", Observation: "[OK] ok"}
	for _, seed := range [][]byte{
		good.AppendJSON(nil), []byte(`{}`), []byte(`{"status":"ok"}`), []byte(`null`), []byte(``),
		[]byte(`{"status":"upstream","message":"x","retryable":true,"side_effect":"none","side_effect_done":false,"replayed":false,"cost":0,"tool":"t","call_id":"c","observation":"o","data":{"a":` + strings.Repeat("[", 50) + strings.Repeat("]", 50) + `}}`),
		[]byte("{\"status\":\"ok\",\"message\":\"\xff\",\"side_effect\":\"done\",\"side_effect_done\":true}"),
	} {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	snap, err := config.CompileSource("fuzz.yaml", []byte(strings.NewReplacer("{{legacy}}", "http://127.0.0.1:9", "{{refused}}", "http://127.0.0.1:9", "{{tls}}", "https://127.0.0.1:9").Replace(harnessPolicy)), config.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, record []byte, completed bool) {
		store := &recordStore{state: policy.RecordUnknown, envelope: record}
		if completed {
			store.state = policy.RecordCompleted
		}
		core, err := NewCore(snap, Options{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		res := core.Call(context.Background(), &Request{Tool: "write", Body: []byte(`{"mode":"ok"}`), IdempotencyKey: "k", CallID: "mine", Front: "http"})
		raw := res.Envelope.AppendJSON(nil)
		env, err := contracts.DecodeEnvelope(raw)
		if err != nil {
			t.Fatalf("the replay is not a well-formed envelope: %v: %s", err, raw)
		}
		if !utf8.Valid(raw) || !env.Replayed || env.Cost != 0 || env.CallID != "mine" || env.Tool != "write" {
			t.Fatalf("replay = %s", raw)
		}
		if _, err := contracts.DecodeEnvelope(record); err != nil {
			// A damaged record is never mistaken for a result: the outcome
			// is lost.
			if env.SideEffect != contracts.SideEffectUnknown || env.Status != contracts.StatusTimeout {
				t.Fatalf("replay of an unreadable record = %s", raw)
			}
			if !strings.HasPrefix(env.Observation, env.Status.Tag()+" "+env.Message) {
				t.Fatalf("observation %q", env.Observation)
			}
		}
	})
}
