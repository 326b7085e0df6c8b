package mcpfront

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"

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

// newMCPDiffSide builds one side on the example policy, changed by edit
// when given.
func newMCPDiffSide(t testing.TB, sdkOnly bool, edit ...func(string) string) *mcpDiffSide {
	t.Helper()
	logs := &proxytest.LogBuffer{}
	rt := proxytest.HandlerTransport()
	doc := string(examples.Policy())
	for _, e := range edit {
		doc = e(doc)
	}
	core, err := proxy.NewCore(proxytest.Snapshot(t, doc), proxy.Options{
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

func (s *mcpDiffSide) post(t testing.TB, header http.Header, body string) *httptest.ResponseRecorder {
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

// modernMeta are the _meta members every 2026-07-28 request carries, as
// the TypeScript 2.x client sends them.
const modernMeta = `"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
	`"io.modelcontextprotocol/clientInfo":{"name":"toolgate-client-test","version":"1.0.0"},` +
	`"io.modelcontextprotocol/clientCapabilities":{}`

// asModern is a message as a 2026-07-28 client sends it: modernMeta added
// to its _meta, or a _meta of them added to its params.
func asModern(body string) string {
	if strings.Contains(body, `"_meta":{`) {
		return strings.Replace(body, `"_meta":{`, `"_meta":{`+modernMeta+`,`, 1)
	}
	return strings.Replace(body, `"params":{`, `"params":{"_meta":{`+modernMeta+`},`, 1)
}

// toolNameOf is the tool a message calls, for its Mcp-Name header, or ""
// when it names none.
func toolNameOf(body string) string {
	var msg struct {
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	_ = json.Unmarshal([]byte(body), &msg)
	return msg.Params.Name
}

// diffCase is a message of the differential test.
type diffCase struct {
	name   string
	body   string // the whole message; {P} is replaced by params
	params string
	header http.Header // set over the defaults; a nil value removes one
	fast   bool        // served by the fast path
	asIs   bool        // sent at 2026-07-28 as written, without asModern
}

// TestMCPFastPathAnswersAsTheSDK sends every kind of tools/call (each
// outcome, and messages the fast path must leave to the SDK) at every
// revision to a toolgate whose MCP front only uses the SDK and to one with
// the fast path, and requires the same answers byte for byte, the same
// headers and the same log lines; and that the fast path served the calls
// it is meant for. At 2026-07-28 every message carries the _meta that
// revision requires (asModern) and the routing headers matching its body,
// and the messages of modernCases, each a way of getting that wrong or a
// shape of it, are sent too.
func TestMCPFastPathAnswersAsTheSDK(t *testing.T) {
	key := `"idempotency_key":"diff-key"`
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
			all := cases
			if rev >= "2026-07-28" {
				all = append(slices.Clone(cases), modernCases(msg)...)
			}
			sendBothWays(t, rev, all)
		})
	}
	// A tool that binds an argument to a header (x-mcp-header): from
	// 2026-07-28 the SDK checks the Mcp-Param-* header against the
	// arguments, so its calls go to the SDK, with the header or without.
	t.Run("revision 2026-07-28, a tool binding a header", func(t *testing.T) {
		bind := func(doc string) string {
			return strings.Replace(doc, `q: {type: string`, `q: {x-mcp-header: Query, type: string`, 1)
		}
		params := `{"name":"search_articles","arguments":{"q":"go"}}`
		sendBothWays(t, "2026-07-28", []diffCase{
			{name: "without its header", params: params},
			{name: "with its header", params: params, header: http.Header{"Mcp-Param-Query": {"go"}}},
			{name: "with another value in its header", params: params, header: http.Header{"Mcp-Param-Query": {"rust"}}},
		}, bind)
	})
}

// modernCases are the messages of 2026-07-28 only: the plain forms the
// fast path serves, and routing headers or _meta that are missing,
// disagree with the body or are unusual, which go to the SDK. msg is a
// tools/call whose params are {P}.
func modernCases(msg string) []diffCase {
	call := `"name":"search_articles","arguments":{"q":"go"}`
	withMeta := func(meta string) string {
		return strings.Replace(msg, "{P}", `{"_meta":{`+meta+`},`+call+`}`, 1)
	}
	const (
		version = `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`
		caps    = `"io.modelcontextprotocol/clientCapabilities":{}`
		info    = `"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}`
	)
	plain := withMeta(version + "," + caps)
	cases := []diffCase{
		{name: "the TypeScript 2.x client's call", fast: true,
			body: `{"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go","limit":3},"_meta":{` + modernMeta + `}},"jsonrpc":"2.0","id":1}`},
		{name: "no client information", body: plain, fast: true},
		{name: "every capability the fast path reads", fast: true, body: withMeta(version + "," + info + `,"io.modelcontextprotocol/clientCapabilities":` +
			`{"roots":{"listChanged":true},"sampling":{"context":{},"tools":{}},"elicitation":{"form":{},"url":{}}}`)},
		{name: "empty capability objects", fast: true, body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":{"roots":{},"sampling":{},"elicitation":{}}`)},
		{name: "all of the client information", fast: true, body: withMeta(version + "," + caps +
			`,"io.modelcontextprotocol/clientInfo":{"name":"c","title":"C","description":"d","version":"1","websiteUrl":"https://c.example"}`)},
		{name: "empty client information", fast: true, body: withMeta(version + "," + caps + `,"io.modelcontextprotocol/clientInfo":{}`)},
		{name: "trace context beside the revision", fast: true, body: withMeta(`"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",` + version + "," + caps)},
		// The routing headers.
		{name: "no Mcp-Method", body: plain, header: http.Header{"Mcp-Method": nil}},
		{name: "another Mcp-Method", body: plain, header: http.Header{"Mcp-Method": {"tools/list"}}},
		{name: "Mcp-Method in another case", body: plain, header: http.Header{"Mcp-Method": {"Tools/call"}}},
		{name: "Mcp-Method twice", body: plain, header: http.Header{"Mcp-Method": {"tools/call", "tools/call"}}},
		{name: "Mcp-Method twice, the second other", body: plain, header: http.Header{"Mcp-Method": {"tools/call", "tools/list"}}},
		{name: "Mcp-Method with a space", body: plain, header: http.Header{"Mcp-Method": {"tools/call "}}},
		{name: "no Mcp-Name", body: plain, header: http.Header{"Mcp-Name": nil}},
		{name: "an empty Mcp-Name", body: plain, header: http.Header{"Mcp-Name": {""}}},
		{name: "another tool in Mcp-Name", body: plain, header: http.Header{"Mcp-Name": {"send_notification"}}},
		{name: "Mcp-Name in another case", body: plain, header: http.Header{"Mcp-Name": {"Search_articles"}}},
		{name: "Mcp-Name twice", body: plain, header: http.Header{"Mcp-Name": {"search_articles", "search_articles"}}},
		{name: "Mcp-Name twice, the second other", body: plain, header: http.Header{"Mcp-Name": {"search_articles", "send_notification"}}},
		{name: "an Mcp-Param header the tool does not bind", body: plain, header: http.Header{"Mcp-Param-Query": {"go"}}},
		{name: "no MCP-Protocol-Version", body: plain, header: http.Header{"Mcp-Protocol-Version": nil}},
		{name: "an older MCP-Protocol-Version", body: plain, header: http.Header{"Mcp-Protocol-Version": {"2025-11-25"}}},
		// The per-request _meta.
		{name: "no _meta", body: strings.Replace(msg, "{P}", `{`+call+`}`, 1)},
		{name: "no protocol version", body: withMeta(caps + "," + info)},
		{name: "an older protocol version", body: withMeta(`"io.modelcontextprotocol/protocolVersion":"2025-11-25",` + caps)},
		{name: "a protocol version with escapes", body: withMeta(`"io.modelcontextprotocol/protocolVersion":"2026\u002d07-28",` + caps)},
		{name: "a numeric protocol version", body: withMeta(`"io.modelcontextprotocol/protocolVersion":20260728,` + caps)},
		{name: "the protocol version twice", body: withMeta(version + "," + version + "," + caps)},
		{name: "no capabilities", body: withMeta(version + "," + info)},
		{name: "null capabilities", body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":null`)},
		{name: "capabilities an array", body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":[]`)},
		{name: "a capability of the wrong type", body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":{"roots":5}`)},
		{name: "listChanged a string", body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":"yes"}}`)},
		{name: "a null capability", body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":{"roots":null}`)},
		{name: "sampling tools with content", body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":{"sampling":{"tools":{"x":1}}}`)},
		{name: "experimental capabilities", body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":{"experimental":{"x":{}}}`)},
		{name: "extensions", body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.example/x":{}}}`)},
		{name: "an unknown capability", body: withMeta(version + `,"io.modelcontextprotocol/clientCapabilities":{"tasks":{}}`)},
		{name: "null client information", body: withMeta(version + "," + caps + `,"io.modelcontextprotocol/clientInfo":null`)},
		{name: "client information a string", body: withMeta(version + "," + caps + `,"io.modelcontextprotocol/clientInfo":"c"`)},
		{name: "a numeric client name", body: withMeta(version + "," + caps + `,"io.modelcontextprotocol/clientInfo":{"name":7}`)},
		{name: "client icons", body: withMeta(version + "," + caps + `,"io.modelcontextprotocol/clientInfo":{"name":"c","icons":[]}`)},
		{name: "a client name beyond ASCII", body: withMeta(version + "," + caps + `,"io.modelcontextprotocol/clientInfo":{"name":"café"}`)},
		{name: "a log level", body: withMeta(version + "," + caps + `,"io.modelcontextprotocol/logLevel":"debug"`)},
		{name: "an unknown _meta member", body: withMeta(version + "," + caps + `,"io.modelcontextprotocol/other":1`)},
		{name: "a progress token", body: withMeta(version + "," + caps + `,"progressToken":1`)},
		{name: "a request state", body: strings.Replace(msg, "{P}", `{"_meta":{`+version+","+caps+`},`+call+`,"requestState":"s"}`, 1)},
		{name: "input responses", body: strings.Replace(msg, "{P}", `{"_meta":{`+version+","+caps+`},`+call+`,"inputResponses":{}}`, 1)},
	}
	for i := range cases {
		cases[i].asIs = true
	}
	return cases
}

// sendBothWays sends each case at revision rev to a toolgate whose MCP
// front only uses the SDK and to one with the fast path, both on the
// example policy changed by edit, and requires the same answers.
func sendBothWays(t *testing.T, rev string, cases []diffCase, edit ...func(string) string) {
	t.Helper()
	sdk, fast := newMCPDiffSide(t, true, edit...), newMCPDiffSide(t, false, edit...)
	msg := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{P}}`
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
			if !tc.asIs {
				body = asModern(body)
			}
			h.Set("Mcp-Method", "tools/call")
			if name := toolNameOf(body); name != "" {
				h.Set("Mcp-Name", name)
			} else {
				h.Set("Mcp-Name", "search_articles")
			}
		}
		for k, v := range tc.header {
			if v == nil {
				delete(h, k)
			} else {
				h[k] = v
			}
		}
		before := fast.front.fastCalls.Load()
		a, b := sdk.post(t, h, body), fast.post(t, h, body)
		if a.Code != b.Code || a.Body.String() != b.Body.String() || !reflect.DeepEqual(a.Header(), b.Header()) {
			t.Errorf("%s: the SDK answers\nHTTP %d %v\n%s\nthe fast path\nHTTP %d %v\n%s", tc.name, a.Code, a.Header(), a.Body, b.Code, b.Header(), b.Body)
		}
		served := fast.front.fastCalls.Load() > before
		if served != tc.fast {
			t.Errorf("%s: served by the fast path: %v, want %v (HTTP %d)", tc.name, served, tc.fast, b.Code)
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
	want := 0
	for _, tc := range cases {
		if tc.fast {
			want++
		}
	}
	if want > 0 && wantFast == 0 {
		t.Error("the fast path served nothing")
	}
}

// FuzzMCPFastPath sends any message, at any revision, with any routing
// headers, to a toolgate whose MCP front only uses the SDK and to one with
// the fast path, and requires the same answers (status, headers, body).
// The seeds are the differential test's messages, each as sent before
// 2026-07-28 and as a 2026-07-28 client sends it.
func FuzzMCPFastPath(f *testing.F) {
	msg := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{P}}`
	for _, tc := range modernCases(msg) {
		f.Add(tc.body, uint8(0), "tools/call", toolNameOf(tc.body))
	}
	for _, params := range []string{
		`{"name":"search_articles","arguments":{"q":"go","limit":2}}`,
		`{"name":"search_articles","arguments":{"q":"go","limit":50}}`,
		`{"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},"name":"search_articles"}`,
		`{"name":"send_notification","arguments":{"user_id":"alice","text":"hi","idempotency_key":"k"}}`,
	} {
		body := strings.Replace(msg, "{P}", params, 1)
		for rev := range uint8(len(Revisions()) + 1) {
			f.Add(body, rev, "tools/call", toolNameOf(body))
		}
		f.Add(asModern(body), uint8(0), "tools/call", toolNameOf(body))
		f.Add(asModern(body), uint8(0), "tools/call", "")
		f.Add(asModern(body), uint8(0), "", toolNameOf(body))
	}
	sdk, fast := newMCPDiffSide(f, true), newMCPDiffSide(f, false)
	f.Fuzz(func(t *testing.T, body string, rev uint8, method, name string) {
		h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "X-Request-Id": {"fuzz"}}
		if revs := Revisions(); int(rev) < len(revs) {
			h.Set("Mcp-Protocol-Version", revs[rev])
		}
		// Header values net/http would refuse are not sent.
		if method != "" && httpguts.ValidHeaderFieldValue(method) {
			h.Set("Mcp-Method", method)
		}
		if name != "" && httpguts.ValidHeaderFieldValue(name) {
			h.Set("Mcp-Name", name)
		}
		a, b := sdk.post(t, h, body), fast.post(t, h, body)
		if a.Code != b.Code || a.Body.String() != b.Body.String() || !reflect.DeepEqual(a.Header(), b.Header()) {
			t.Errorf("the SDK answers\nHTTP %d %v\n%s\nthe fast path\nHTTP %d %v\n%s", a.Code, a.Header(), a.Body, b.Code, b.Header(), b.Body)
		}
	})
}
