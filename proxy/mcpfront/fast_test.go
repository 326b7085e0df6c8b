package mcpfront

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

// mcpDiffSide is one toolgate of the differential test: a core of its own
// (own backends, own idempotency store) and its MCP front.
type mcpDiffSide struct {
	front *front
	logs  *proxytest.LogBuffer
}

func newMCPDiffSide(t *testing.T, sdkOnly bool) *mcpDiffSide {
	t.Helper()
	logs := &proxytest.LogBuffer{}
	rt := proxytest.HandlerTransport()
	core, err := proxy.NewCore(proxytest.Snapshot(t, string(examples.Policy())), proxy.Options{
		Registry:  prometheus.NewRegistry(),
		Logger:    slog.New(slog.NewJSONHandler(logs, nil)),
		Transport: func(*policy.Upstream) http.RoundTripper { return rt },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Close)
	f := newFront(core, Options{})
	f.sdkOnly = sdkOnly
	return &mcpDiffSide{front: f, logs: logs}
}

func (s *mcpDiffSide) post(t *testing.T, header http.Header, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(proxytest.LoopbackContext(), http.MethodPost, "http://127.0.0.1:8080/mcp", strings.NewReader(body))
	for k, v := range header {
		req.Header[k] = slices.Clone(v)
	}
	w := httptest.NewRecorder()
	s.front.serveHTTP(w, req)
	return w
}

// callLines are the call log lines, without what differs between two runs
// of one call (the time, durations).
func (s *mcpDiffSide) callLines(t *testing.T) []map[string]any {
	var out []map[string]any
	for _, l := range s.logs.Lines(t) {
		for k := range l {
			if k == "time" || strings.Contains(k, "ms") || strings.Contains(k, "duration") {
				delete(l, k)
			}
		}
		out = append(out, l)
	}
	return out
}

// TestMCPFastPathAnswersAsTheSDK sends every kind of tools/call (each
// outcome, and messages the fast path must leave to the SDK) at every
// revision to a toolgate whose MCP front only uses the SDK and to one with
// the fast path, and requires the same answers byte for byte, the same
// headers and the same log lines; and that the fast path served the calls
// it is meant for.
func TestMCPFastPathAnswersAsTheSDK(t *testing.T) {
	key := `"idempotency_key":"diff-key"`
	type diffCase struct {
		name   string
		body   string // the whole message; {P} is replaced by params
		params string
		header http.Header
		fast   bool // served by the fast path before 2026-07-28
	}
	msg := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{P}}`
	cases := []diffCase{
		{name: "ok", params: `{"name":"search_articles","arguments":{"q":"go","limit":2}}`, fast: true},
		{name: "empty", params: `{"name":"search_articles","arguments":{"q":"量子引力"}}`, fast: true},
		{name: "bad_args", params: `{"name":"search_articles","arguments":{"q":"go","limit":50}}`, fast: true},
		{name: "bad_args with markup", params: `{"name":"search_articles","arguments":{"q":"<b>&amp;</b>","limit":"x<>&"}}`, fast: true},
		{name: "upstream", params: `{"name":"search_articles","arguments":{"q":"crash"}}`, fast: true},
		{name: "side effect", params: `{"name":"send_notification","arguments":{"user_id":"alice","text":"hi",` + key + `}}`, fast: true},
		{name: "replay", params: `{"name":"send_notification","arguments":{"user_id":"alice","text":"hi",` + key + `}}`, fast: true},
		{name: "key reused with other arguments", params: `{"name":"send_notification","arguments":{"user_id":"bob","text":"hi",` + key + `}}`, fast: true},
		{name: "forbidden caller", params: `{"name":"send_notification","arguments":{"user_id":"alice","text":"x","idempotency_key":"k2"}}`,
			header: http.Header{"X-Toolgate-Caller": {"research-agent"}}, fast: true},
		{name: "no arguments", params: `{"name":"search_articles"}`, fast: true},
		{name: "null arguments", params: `{"arguments":null,"name":"search_articles"}`, fast: true},
		{name: "array arguments", params: `{"name":"search_articles","arguments":[1,2]}`, fast: true},
		{name: "string arguments", params: `{"name":"search_articles","arguments":"q=go"}`, fast: true},
		{name: "null argument", params: `{"name":"search_articles","arguments":{"q":"go","limit":null}}`, fast: true},
		{name: "duplicate argument", params: `{"name":"search_articles","arguments":{"q":"go","q":"rust"}}`, fast: true},
		{name: "spaced message", body: " {\n \"method\" : \"tools/call\" ,\"params\":{ \"arguments\" : { \"q\" : \"go\" } , \"name\" : \"search_articles\" } , \"id\" : 8 , \"jsonrpc\" : \"2.0\" }\n", fast: true},
		{name: "string id", body: `{"jsonrpc":"2.0","id":"call-1:a.b","method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`, fast: true},
		{name: "negative id", body: `{"jsonrpc":"2.0","id":-42,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`, fast: true},
		{name: "fifteen-digit id", body: `{"jsonrpc":"2.0","id":999999999999999,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`, fast: true},
		{name: "negative fifteen-digit id", body: `{"jsonrpc":"2.0","id":-999999999999999,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`, fast: true},
		{name: "string id with markup", body: `{"jsonrpc":"2.0","id":"<a href='x'>&amp;</a>","method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`, fast: true},
		{name: "bad_args with escapes", params: `{"name":"search_articles","arguments":{"q":"go","limit":"\u2028\u2029\u0001\u001f\ud800<&>é\"\\"}}`, fast: true},
		{name: "call id with markup", params: `{"name":"search_articles","arguments":{"q":"<go>"}}`,
			header: http.Header{"X-Request-Id": {`<id>&"x"`}}, fast: true},
		{name: "zero id", body: `{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`, fast: true},
		{name: "trace context in _meta", params: `{"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"a=1"},"name":"search_articles","arguments":{"q":"go"}}`, fast: true},
		{name: "invalid traceparent in _meta", params: `{"_meta":{"traceparent":"nope"},"name":"search_articles","arguments":{"q":"go"}}`, fast: true},
		{name: "charset in Content-Type", params: `{"name":"search_articles","arguments":{"q":"go"}}`,
			header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}, fast: true},
		// Left to the SDK.
		{name: "progress token", params: `{"_meta":{"progressToken":1},"name":"search_articles","arguments":{"q":"go"}}`},
		{name: "protocol version in _meta", params: `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"},"name":"search_articles","arguments":{"q":"go"}}`},
		{name: "unknown tool", params: `{"name":"delete_everything","arguments":{}}`},
		{name: "no name", params: `{"arguments":{"q":"go"}}`},
		{name: "numeric name", params: `{"name":7}`},
		{name: "escaped name", params: `{"name":"search\u005farticles","arguments":{"q":"go"}}`},
		{name: "escaped key", params: `{"n\u0061me":"search_articles","arguments":{"q":"go"}}`},
		{name: "duplicate name", params: `{"name":"send_notification","name":"search_articles","arguments":{"q":"go"}}`},
		{name: "unknown params member", params: `{"name":"search_articles","arguments":{"q":"go"},"task":{}}`},
		{name: "params an array", params: `["search_articles"]`},
		{name: "no params", body: `{"jsonrpc":"2.0","id":7,"method":"tools/call"}`},
		{name: "fraction id", body: `{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`},
		{name: "escaped string id", body: `{"jsonrpc":"2.0","id":"a\u0041","method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`},
		{name: "null id", body: `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`},
		{name: "notification", body: `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`},
		{name: "jsonrpc 1.0", body: `{"jsonrpc":"1.0","id":7,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`},
		{name: "unknown member", body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_articles"},"extra":1}`},
		{name: "duplicate id", body: `{"jsonrpc":"2.0","id":7,"id":8,"method":"tools/call","params":{"name":"search_articles"}}`},
		{name: "tools/list", body: `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`},
		{name: "not JSON", body: `{"jsonrpc":"2.0","id":7,`},
		{name: "text/plain", params: `{"name":"search_articles","arguments":{"q":"go"}}`, header: http.Header{"Content-Type": {"text/plain"}}},
		// What a hostile caller may send: each must get the SDK's answer,
		// on whichever path takes it.
		{name: "invalid UTF-8 in an argument", params: "{\"name\":\"search_articles\",\"arguments\":{\"q\":\"g\xffo\"}}", fast: true},
		{name: "invalid UTF-8 in a string id", body: "{\"jsonrpc\":\"2.0\",\"id\":\"a\xff\",\"method\":\"tools/call\",\"params\":{\"name\":\"search_articles\",\"arguments\":{\"q\":\"go\"}}}"},
		{name: "sixteen-digit id", body: `{"jsonrpc":"2.0","id":1234567890123456,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`},
		{name: "key in another case", body: `{"jsonrpc":"2.0","id":7,"Method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"}}}`},
		{name: "arguments nested deeper than the tape reads", params: `{"name":"search_articles","arguments":{"q":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}}`},
		{name: "a session id the stateless server never gave", params: `{"name":"search_articles","arguments":{"q":"go"}}`,
			header: http.Header{"Mcp-Session-Id": {"forged"}}, fast: true},
		{name: "Last-Event-ID", params: `{"name":"search_articles","arguments":{"q":"go"}}`, header: http.Header{"Last-Event-Id": {"x"}}},
	}
	for _, rev := range append(Revisions(), "") {
		t.Run("revision "+rev, func(t *testing.T) {
			sdk, fast := newMCPDiffSide(t, true), newMCPDiffSide(t, false)
			wantFast := 0
			for i, tc := range cases {
				body := tc.body
				if body == "" {
					body = strings.Replace(msg, "{P}", tc.params, 1)
				}
				h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"},
					"X-Request-Id": {fmt.Sprintf("diff-%d", i)}}
				if rev != "" {
					h.Set("Mcp-Protocol-Version", rev)
				}
				if rev >= "2026-07-28" {
					h.Set("Mcp-Method", "tools/call")
					h.Set("Mcp-Name", "search_articles")
				}
				for k, v := range tc.header {
					h[k] = v
				}
				before := fast.front.fastCalls.Load()
				a, b := sdk.post(t, h, body), fast.post(t, h, body)
				if a.Code != b.Code || a.Body.String() != b.Body.String() || !reflect.DeepEqual(a.Header(), b.Header()) {
					t.Errorf("%s: the SDK answers\nHTTP %d %v\n%s\nthe fast path\nHTTP %d %v\n%s", tc.name, a.Code, a.Header(), a.Body, b.Code, b.Header(), b.Body)
				}
				served := fast.front.fastCalls.Load() > before
				if want := tc.fast && rev < "2026-07-28"; served != want {
					t.Errorf("%s: served by the fast path: %v, want %v", tc.name, served, want)
				}
				if served {
					wantFast++
				}
			}
			if sdk.front.fastCalls.Load() != 0 {
				t.Error("the SDK-only front used the fast path")
			}
			if a, b := sdk.callLines(t), fast.callLines(t); !reflect.DeepEqual(a, b) {
				t.Errorf("log lines differ:\nSDK:  %v\nfast: %v", a, b)
			}
			if rev < "2026-07-28" && wantFast == 0 {
				t.Error("the fast path served nothing")
			}
		})
	}
}
