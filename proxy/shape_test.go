package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
)

// recordingBackend keeps every request it receives, exactly.
type recordingBackend struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, uri string
	header      http.Header
	body        string
}

func (rb *recordingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rb.mu.Lock()
	rb.reqs = append(rb.reqs, recorded{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: string(body)})
	rb.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}

func (rb *recordingBackend) last(t *testing.T) recorded {
	t.Helper()
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if len(rb.reqs) == 0 {
		t.Fatal("the backend received nothing")
	}
	return rb.reqs[len(rb.reqs)-1]
}

const shapedPolicy = `
version: 1
upstreams:
  api:
    url: {{url}}/base
    headers: {Accept: text/plain, Authorization: "Bearer ${API_TOKEN}"}
  plain:
    url: {{url}}
tools:
  send_sms:
    description: Send a text message.
    upstream: plain
    side_effect: true
    args:
      type: object
      required: [to, text]
      properties:
        to: {type: string}
        text: {type: string}
        media: {type: array, items: {type: string}}
        tenant: {type: string}
    request:
      method: POST
      path: /2010-04-01/Accounts/AC123/Messages.json
      encoding: form
      query: {tenant: tenant}
      headers: {X-Tenant: tenant}
      body: {To: to, From: {const: "+15017122661"}, Body: text, MediaUrl: media}
  es_search:
    description: Search articles.
    upstream: api
    args:
      type: object
      required: [q]
      properties:
        q: {type: string}
        lang: {type: string}
        limit: {type: integer, default: 10}
    request:
      method: POST
      path: /articles/_search
      query: {pretty: {const: false}, apikey: "${API_KEY}"}
      headers:
        Accept: {const: application/json; compatible-with=8}
        X-Opaque-Id: {expr: '"search-" + args.q'}
      body:
        query: {bool: {must: [{match: {title: q}}], filter: [{term: {lang: lang}}]}}
        size: limit
access: {shared_credentials: [api]}
`

func newShapedCore(t *testing.T) (*Core, *recordingBackend) {
	t.Helper()
	rb := &recordingBackend{}
	backend := httptest.NewServer(rb)
	t.Cleanup(backend.Close)
	env := map[string]string{"API_TOKEN": "tok", "API_KEY": "k1"}
	snap, err := config.CompileSource("shaped.yaml", []byte(strings.ReplaceAll(shapedPolicy, "{{url}}", backend.URL)),
		config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	core, err := NewCore(snap, Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Close)
	return core, rb
}

// TestShapedRequestsReachTheBackendExactly sends shaped calls through the
// core to a real HTTP backend and checks every part of what arrives.
func TestShapedRequestsReachTheBackendExactly(t *testing.T) {
	core, rb := newShapedCore(t)
	tests := []struct {
		name, tool, args string
		method, uri      string
		header           map[string]string // "" means absent
		body             string
	}{
		{
			name: "a form body with repeated keys, a bound header and query", tool: "send_sms",
			args:   `{"to":"+15558675310","text":"Hi & bye","media":["https://a/1.png","https://a/2.png"],"tenant":"acme"}`,
			method: "POST", uri: "/2010-04-01/Accounts/AC123/Messages.json?tenant=acme",
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json",
				"User-Agent": "toolgate/test", "X-Tenant": "acme", "X-Request-Id": "call-1", "X-Toolgate-Caller": ""},
			body: "To=%2B15558675310&From=%2B15017122661&Body=Hi+%26+bye&MediaUrl=https%3A%2F%2Fa%2F1.png&MediaUrl=https%3A%2F%2Fa%2F2.png",
		},
		{
			name: "an absent optional argument sends no header and no parameter", tool: "send_sms",
			args:   `{"to":"+1","text":"x"}`,
			method: "POST", uri: "/2010-04-01/Accounts/AC123/Messages.json",
			header: map[string]string{"X-Tenant": "", "Content-Type": "application/x-www-form-urlencoded"},
			body:   "To=%2B1&From=%2B15017122661&Body=x",
		},
		{
			name: "a nested JSON body; the tool's Accept wins over the upstream's, the upstream's over the default", tool: "es_search",
			args:   `{"q":"go"}`,
			method: "POST", uri: "/base/articles/_search?pretty=false&apikey=k1",
			header: map[string]string{"Accept": "application/json; compatible-with=8", "Authorization": "Bearer tok",
				"Content-Type": "application/json", "X-Opaque-Id": "search-go"},
			body: `{"query":{"bool":{"must":[{"match":{"title":"go"}}]}},"size":10}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := core.Call(context.Background(), &Request{Tool: tt.tool, Body: []byte(tt.args), CallID: "call-1",
				IdempotencyKey: "k-" + tt.name, Caller: "agent"})
			if res.Envelope.Status != contracts.StatusOK {
				t.Fatalf("status %s: %s", res.Envelope.Status, res.Envelope.Message)
			}
			got := rb.last(t)
			if got.method != tt.method || got.uri != tt.uri || got.body != tt.body {
				t.Errorf("backend received\n%s %s\n%s\nwant\n%s %s\n%s", got.method, got.uri, got.body, tt.method, tt.uri, tt.body)
			}
			for k, v := range tt.header {
				if vals := got.header.Values(k); strings.Join(vals, ",") != v {
					t.Errorf("header %s = %q, want %q", k, vals, v)
				}
			}
		})
	}
}

// TestConfiguredAcceptWins: an Accept or Content-Type set in the
// upstream's static headers is sent as configured, not replaced by the
// defaults.
func TestConfiguredAcceptWins(t *testing.T) {
	rb := &recordingBackend{}
	backend := httptest.NewServer(rb)
	t.Cleanup(backend.Close)
	doc := `
version: 1
upstreams:
  xml:
    url: ` + backend.URL + `
    headers: {Accept: application/xml, Content-Type: application/json; charset=utf-8, User-Agent: legacy-client/1}
tools:
  lookup:
    description: Look something up.
    upstream: xml
    args: {type: object, properties: {id: {type: string}}}
    request: {method: POST, path: /lookup, body: {id: id}}
`
	core := newTestCore(t, doc, Options{})
	t.Cleanup(core.Close)
	core.Call(context.Background(), &Request{Tool: "lookup", Body: []byte(`{"id":"a"}`)})
	got := rb.last(t)
	for k, want := range map[string]string{"Accept": "application/xml", "Content-Type": "application/json; charset=utf-8", "User-Agent": "legacy-client/1"} {
		if vals := got.header.Values(k); len(vals) != 1 || vals[0] != want {
			t.Errorf("%s = %q, want %q", k, vals, want)
		}
	}
}

// TestExtprocBackendRequestIsTheSameRequest: the request an ext_proc call
// describes (Call.Backend) is the request the HTTP front sends, byte
// for byte: one code path binds both.
func TestExtprocBackendRequestIsTheSameRequest(t *testing.T) {
	core, rb := newShapedCore(t)
	for _, tc := range []struct{ tool, args string }{
		{"send_sms", `{"to":"+15558675310","text":"Hi","media":["https://a/1.png"],"tenant":"acme"}`},
		{"es_search", `{"q":"go","lang":"en","limit":3}`},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			req := func(key string) *Request {
				return &Request{Tool: tc.tool, Body: []byte(tc.args), CallID: "same-call", IdempotencyKey: key}
			}
			if res := core.Call(context.Background(), req("http-"+tc.tool)); res.Envelope.Status != contracts.StatusOK {
				t.Fatalf("status %s: %s", res.Envelope.Status, res.Envelope.Message)
			}
			sent := rb.last(t)
			p, res := core.View().Begin(context.Background(), req("extproc-"+tc.tool))
			if res != nil {
				t.Fatalf("begin: %s %s", res.Envelope.Status, res.Envelope.Message)
			}
			defer p.Finish(Answer{Code: 200, Header: http.Header{}, Body: []byte(`{}`)})
			b := p.Backend()
			uri := b.Path
			if b.RawQuery != "" {
				uri += "?" + b.RawQuery
			}
			if b.Method != sent.method || uri != sent.uri || string(b.Body) != sent.body {
				t.Errorf("ext_proc request\n%s %s\n%s\nHTTP front sent\n%s %s\n%s", b.Method, uri, b.Body, sent.method, sent.uri, sent.body)
			}
			for k, v := range b.Header {
				if got := sent.header.Values(k); strings.Join(got, "|") != strings.Join(v, "|") {
					t.Errorf("header %s: ext_proc %q, HTTP front %q", k, v, got)
				}
			}
			for k := range sent.header {
				switch k {
				case "Content-Length", "Traceparent", "Tracestate":
					continue
				}
				if _, ok := b.Header[k]; !ok {
					t.Errorf("the HTTP front sent %s, ext_proc would not", k)
				}
			}
		})
	}
}

// TestTransparentShapedRoutes: in transparent mode a legacy request in the
// backend's own shape (a nested JSON body, a form body, a bound header)
// is read back into arguments, validated, and sent on rebuilt from them.
func TestTransparentShapedRoutes(t *testing.T) {
	rb := &recordingBackend{}
	backend := httptest.NewServer(rb)
	t.Cleanup(backend.Close)
	doc := `
version: 1
server: {transparent: true}
upstreams:
  api: {url: ` + backend.URL + `}
tools:
  es_search:
    description: Search articles.
    upstream: api
    args:
      type: object
      required: [q]
      additionalProperties: false
      properties:
        q: {type: string, minLength: 1}
        size: {type: integer, maximum: 50, default: 10}
        tenant: {type: string}
    request:
      method: POST
      path: /articles/_search
      headers: {X-Tenant: tenant}
      body:
        query: {match: {title: q}}
        size: size
        track_total_hits: {const: false}
  send_sms:
    description: Send a text message.
    upstream: api
    side_effect: true
    args:
      type: object
      required: [to, text]
      properties: {to: {type: string}, text: {type: string}}
    request:
      method: POST
      path: /Messages.json
      encoding: form
      body: {To: to, From: {const: "+15017122661"}, Body: text}
`
	core := newTestCore(t, doc, Options{})
	front := httptest.NewServer(agentHandler(core))
	t.Cleanup(func() { front.Close(); core.Close() })
	tests := []struct {
		name, path, contentType, body string
		header                        map[string]string
		status                        contracts.Status
		sent                          string
		msg                           string
	}{
		{name: "a nested query DSL body is read back and rebuilt", path: "/articles/_search", contentType: "application/json",
			body:   `{"query":{"match":{"title":"go"}},"track_total_hits":true}`,
			header: map[string]string{"X-Tenant": "acme"},
			status: contracts.StatusOK, sent: `POST /articles/_search {"query":{"match":{"title":"go"}},"size":10,"track_total_hits":false} X-Tenant=acme`},
		{name: "the schema applies to a nested member", path: "/articles/_search", contentType: "application/json",
			body: `{"query":{"match":{"title":""}}}`, status: contracts.StatusBadArgs, msg: "Argument q must have at least 1 character"},
		{name: "a nested member the binding does not have is refused", path: "/articles/_search", contentType: "application/json",
			body: `{"query":{"match":{"title":"go"},"term":{}}}`, status: contracts.StatusBadArgs, msg: "Argument query.term is not an accepted argument"},
		{name: "a form body is read back and rebuilt", path: "/Messages.json", contentType: "application/x-www-form-urlencoded",
			body: "To=%2B1555&Body=hi+there&From=%2B1999", header: map[string]string{"Idempotency-Key": "sms-1"},
			status: contracts.StatusOK, sent: "POST /Messages.json To=%2B1555&From=%2B15017122661&Body=hi+there X-Tenant="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rb.mu.Lock()
			rb.reqs = nil
			rb.mu.Unlock()
			req, _ := http.NewRequest("POST", front.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.contentType)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			env, err := contracts.DecodeEnvelope([]byte(strings.TrimSpace(string(raw))))
			if err != nil {
				t.Fatalf("not an envelope: %s", raw)
			}
			if env.Status != tt.status || !strings.Contains(env.Message, tt.msg) {
				t.Fatalf("envelope %s %q, want %s %q", env.Status, env.Message, tt.status, tt.msg)
			}
			rb.mu.Lock()
			defer rb.mu.Unlock()
			if tt.sent == "" {
				if len(rb.reqs) != 0 {
					t.Errorf("the backend was called: %+v", rb.reqs)
				}
				return
			}
			if len(rb.reqs) != 1 {
				t.Fatalf("backend received %d requests", len(rb.reqs))
			}
			r := rb.reqs[0]
			if got := r.method + " " + r.uri + " " + r.body + " X-Tenant=" + r.header.Get("X-Tenant"); got != tt.sent {
				t.Errorf("backend received %q, want %q", got, tt.sent)
			}
		})
	}
}
