package mcpfront_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/mcptest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy/mcpfront"
	"github.com/toolgate/toolgate/proxy/toolformats"
)

func TestMCPToolListIsFilteredByCaller(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	denyEnv := mcptest.NewEnv(t, func(doc string) string {
		return strings.Replace(doc, "default: allow", "default: deny", 1)
	})
	cases := []struct {
		name   string
		env    *mcptest.Env
		caller string
		want   []string
	}{
		{"a caller limited to search sees only search", env, "research-agent", []string{"search_articles"}},
		{"a caller allowed everything sees both tools", env, "ops-agent", []string{"search_articles", "send_notification"}},
		{"an unlisted caller gets access.default allow", env, "", []string{"search_articles", "send_notification"}},
		{"an unlisted caller gets access.default deny", denyEnv, "stranger", []string{}},
	}
	for _, rev := range mcptest.Revisions {
		for _, tc := range cases {
			t.Run(rev+"/"+tc.name, func(t *testing.T) {
				cs := mcptest.Connect(t, tc.env.Server.URL+"/mcp", rev, mcptest.Caller(tc.caller))
				if got := mcptest.ToolNames(mcptest.ListTools(t, cs)); !slices.Equal(got, tc.want) {
					t.Errorf("tools = %v, want %v", got, tc.want)
				}
			})
		}
	}
}

func TestMCPToolsDescribeTheirContracts(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	snap := env.Core.Snapshot()
	var outputSchema any
	if err := json.Unmarshal([]byte(toolformats.MCPOutputSchema), &outputSchema); err != nil {
		t.Fatal(err)
	}
	for _, rev := range mcptest.Revisions {
		t.Run(rev, func(t *testing.T) {
			tools := mcptest.ListTools(t, mcptest.Connect(t, env.Server.URL+"/mcp", rev, nil))
			if len(tools) != 2 {
				t.Fatalf("want 2 tools, got %v", mcptest.ToolNames(tools))
			}
			for _, tl := range tools {
				ct := snap.Tools[tl.Name]
				if tl.Description != ct.Description {
					t.Errorf("%s: description %q, want %q", tl.Name, tl.Description, ct.Description)
				}
				var published any
				if err := json.Unmarshal(ct.PublishedSchema(), &published); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(tl.InputSchema, published) {
					t.Errorf("%s: inputSchema %v, want the published schema %v", tl.Name, tl.InputSchema, published)
				}
				if !reflect.DeepEqual(tl.OutputSchema, outputSchema) {
					t.Errorf("%s: outputSchema is not the envelope schema: %v", tl.Name, tl.OutputSchema)
				}
				a := tl.Annotations
				if a == nil || a.DestructiveHint == nil {
					t.Fatalf("%s: annotations missing: %+v", tl.Name, a)
				}
				wantRO, wantDestructive := !ct.SideEffect, ct.SideEffect
				if a.ReadOnlyHint != wantRO || *a.DestructiveHint != wantDestructive || !a.IdempotentHint {
					t.Errorf("%s: annotations readOnly=%v destructive=%v idempotent=%v; want %v, %v, true",
						tl.Name, a.ReadOnlyHint, *a.DestructiveHint, a.IdempotentHint, wantRO, wantDestructive)
				}
			}
			schema := tools[1].InputSchema.(map[string]any)
			if tools[1].Name != "send_notification" || !slices.Contains(schema["required"].([]any), any(contracts.IdempotencyKeyArg)) {
				t.Errorf("send_notification must require %s: %v", contracts.IdempotencyKeyArg, schema)
			}
		})
	}
}

// TestMCPOutputSchemaMatchesMCPOutput pins the hand-written output schema
// to mcpfront.Output: same fields, required exactly when never omitted,
// and the closed sets of status and side_effect; every field is an
// envelope field of the same name.
func TestMCPOutputSchemaMatchesMCPOutput(t *testing.T) {
	var doc struct {
		Required             []string                  `json:"required"`
		AdditionalProperties bool                      `json:"additionalProperties"`
		Properties           map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal([]byte(toolformats.MCPOutputSchema), &doc); err != nil {
		t.Fatal(err)
	}
	mcptest.OutputSchema(t) // compiles
	var fields, required []string
	typ := reflect.TypeFor[mcpfront.Output]()
	envelope := reflect.TypeFor[contracts.Envelope]()
	for i := range typ.NumField() {
		tag := typ.Field(i).Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		fields = append(fields, name)
		if !strings.Contains(opts, "omitempty") {
			required = append(required, name)
		}
		if f, ok := envelope.FieldByName(typ.Field(i).Name); !ok || f.Tag.Get("json") != tag || f.Type != typ.Field(i).Type {
			t.Errorf("MCPOutput.%s is not the envelope field of that name", typ.Field(i).Name)
		}
	}
	props := make([]string, 0, len(doc.Properties))
	for name := range doc.Properties {
		props = append(props, name)
	}
	slices.Sort(fields)
	slices.Sort(props)
	if !slices.Equal(props, fields) {
		t.Errorf("schema properties %v, MCPOutput fields %v", props, fields)
	}
	slices.Sort(required)
	slices.Sort(doc.Required)
	if !slices.Equal(doc.Required, required) {
		t.Errorf("schema requires %v, MCPOutput always has %v", doc.Required, required)
	}
	if doc.AdditionalProperties {
		t.Error("the schema must not allow other fields")
	}
	var statuses []any
	for _, s := range contracts.Statuses() {
		statuses = append(statuses, string(s))
	}
	if got := doc.Properties["status"]["enum"]; !reflect.DeepEqual(got, statuses) {
		t.Errorf("status enum %v, want %v", got, statuses)
	}
	effects := []any{string(contracts.SideEffectNone), string(contracts.SideEffectDone), string(contracts.SideEffectUnknown)}
	if got := doc.Properties["side_effect"]["enum"]; !reflect.DeepEqual(got, effects) {
		t.Errorf("side_effect enum %v, want %v", got, effects)
	}
}

func TestMCPCallsRunTheSamePipeline(t *testing.T) {
	cases := []struct {
		name   string
		tool   string
		args   map[string]any
		status contracts.Status
	}{
		{"a search that finds articles is ok", "search_articles", map[string]any{"q": "go", "limit": 3}, contracts.StatusOK},
		{"a search that finds nothing is empty, not an error", "search_articles", map[string]any{"q": "量子引力"}, contracts.StatusEmpty},
		{"a limit over the schema's maximum is bad_args", "search_articles", map[string]any{"q": "go", "limit": 50}, contracts.StatusBadArgs},
		{"a wrongly typed argument is bad_args", "search_articles", map[string]any{"q": 5}, contracts.StatusBadArgs},
		{"missing arguments are bad_args", "search_articles", nil, contracts.StatusBadArgs},
		{"a 200 with E_NOPERM is forbidden by the contract's rule", "search_articles", map[string]any{"q": "secret"}, contracts.StatusForbidden},
		{"a backend slower than the deadline is timeout", "search_articles", map[string]any{"q": "slow"}, contracts.StatusTimeout},
		{"a backend crash is upstream without the stack trace", "search_articles", map[string]any{"q": "crash"}, contracts.StatusUpstream},
	}
	for _, rev := range mcptest.Revisions {
		// A toolgate per revision: the failures of one would open the
		// breaker for the next.
		env := mcptest.NewEnv(t, func(doc string) string {
			// The search tool's deadline, short so the timeout row is quick.
			return strings.Replace(doc, "timeout: 500ms", "timeout: 200ms", 1)
		})
		cs := mcptest.Connect(t, env.Server.URL+"/mcp", rev, mcptest.Caller("research-agent"))
		for _, tc := range cases {
			t.Run(rev+"/"+tc.name, func(t *testing.T) {
				e := mcptest.ResultOf(t, mcptest.CallTool(t, cs, tc.tool, tc.args))
				if e.Status != tc.status {
					t.Fatalf("status %s, want %s: %s", e.Status, tc.status, e.Text)
				}
				if e.Tool != tc.tool || e.CallID == "" {
					t.Errorf("tool %q call_id %q", e.Tool, e.CallID)
				}
				if strings.Contains(e.Text, examples.CrashInternalHost) {
					t.Errorf("observation leaks the backend: %s", e.Text)
				}
			})
		}
	}
}

// TestMCPResultIsTheHTTPEnvelope compares a tools/call result with the
// HTTP front's answer to the same call: the text block is the envelope's
// observation, structuredContent its MCPOutput fields.
func TestMCPResultIsTheHTTPEnvelope(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	for _, args := range []string{`{"q":"go","limit":2}`, `{"q":"量子引力"}`, `{"q":"secret"}`, `{"q":"go","limit":0}`} {
		t.Run(args, func(t *testing.T) {
			header := http.Header{"X-Request-Id": {"req-42"}, "X-Toolgate-Caller": {"research-agent"}}
			resp, body := proxytest.MCPPost(t, env.Server.URL+"/mcp", "2025-11-25", header,
				`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search_articles","arguments":`+args+`}}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("HTTP %d: %s", resp.StatusCode, body)
			}
			var msg struct {
				Result struct {
					Content           []struct{ Text string } `json:"content"`
					StructuredContent json.RawMessage         `json:"structuredContent"`
				} `json:"result"`
			}
			if err := json.Unmarshal(body, &msg); err != nil || len(msg.Result.Content) != 1 {
				t.Fatalf("%v: %s", err, body)
			}
			req, _ := http.NewRequest(http.MethodPost, env.Server.URL+"/v1/tools/search_articles", strings.NewReader(args))
			req.Header = header.Clone()
			req.Header.Set("Content-Type", "application/json")
			httpResp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			httpBody, _ := io.ReadAll(httpResp.Body)
			httpResp.Body.Close()
			want, err := contracts.DecodeEnvelope(bytes.TrimSpace(httpBody))
			if err != nil {
				t.Fatal(err)
			}
			if got := msg.Result.Content[0].Text; got != want.Observation {
				t.Errorf("text block differs from the HTTP observation:\n mcp:  %s\n http: %s", got, want.Observation)
			}
			wantFields, _ := json.Marshal(mcpfront.OutputOf(want))
			if got := string(msg.Result.StructuredContent); got != string(wantFields) {
				t.Errorf("structuredContent differs from the HTTP envelope's fields:\n mcp:  %s\n http: %s", got, wantFields)
			}
		})
	}
}

// TestMCPArgumentsAreParsedLikeHTTPBodies sends arguments no typed client
// would: they reach the core as raw bytes, so the HTTP front's strict
// parsing applies, and the answer is a tool result, never a JSON-RPC error.
func TestMCPArgumentsAreParsedLikeHTTPBodies(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	for _, tc := range []struct {
		name, params string
		status       contracts.Status
	}{
		{"arguments that are a string", `"arguments":"go"`, contracts.StatusBadArgs},
		{"arguments that are an array", `"arguments":[1]`, contracts.StatusBadArgs},
		{"a key given twice", `"arguments":{"q":"go","q":"rust"}`, contracts.StatusBadArgs},
		{"null arguments, read as none", `"arguments":null`, contracts.StatusBadArgs},
		{"no arguments", `"_meta":{}`, contracts.StatusBadArgs},
		{"a number with an exponent is still an integer", `"arguments":{"q":"go","limit":2e0}`, contracts.StatusOK},
		{"an optional argument given as null is absent", `"arguments":{"q":"go","limit":null}`, contracts.StatusOK},
		{"a required argument given as null is bad_args", `"arguments":{"q":null}`, contracts.StatusBadArgs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := proxytest.MCPPost(t, env.Server.URL+"/mcp", "2025-11-25", nil,
				`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_articles",`+tc.params+`}}`)
			var msg struct {
				Result *mcp.CallToolResult `json:"result"`
			}
			if err := json.Unmarshal(body, &msg); err != nil || resp.StatusCode != http.StatusOK || msg.Result == nil {
				t.Fatalf("HTTP %d, want a tool result: %s", resp.StatusCode, body)
			}
			if e := mcptest.ResultOf(t, msg.Result); e.Status != tc.status {
				t.Errorf("status %s, want %s: %s", e.Status, tc.status, e.Text)
			}
		})
	}
}

func TestMCPIdempotentReplayThroughTheKeyArgument(t *testing.T) {
	for _, rev := range mcptest.Revisions {
		t.Run(rev, func(t *testing.T) {
			env := mcptest.NewEnv(t, nil)
			cs := mcptest.Connect(t, env.Server.URL+"/mcp", rev, mcptest.Caller("ops-agent"))
			args := map[string]any{"user_id": "alice", "text": "Your report is ready.", contracts.IdempotencyKeyArg: "mcp-key-1"}
			first := mcptest.ResultOf(t, mcptest.CallTool(t, cs, "send_notification", args))
			if first.Status != contracts.StatusOK || first.SideEffect != contracts.SideEffectDone || first.Replayed {
				t.Fatalf("first call: %+v", first)
			}
			second := mcptest.ResultOf(t, mcptest.CallTool(t, cs, "send_notification", args))
			if !second.Replayed {
				t.Fatalf("second call with the same key was not replayed: %+v", second)
			}
			if second.Status != first.Status || second.Data() != first.Data() || second.Cost != 0 {
				t.Errorf("replay %+v differs from the first result %+v", second, first)
			}
			if n := env.Notify.Count(); n != 1 {
				t.Errorf("the backend sent %d notifications, want 1", n)
			}
			other := map[string]any{"user_id": "alice", "text": "Another text.", contracts.IdempotencyKeyArg: "mcp-key-1"}
			if e := mcptest.ResultOf(t, mcptest.CallTool(t, cs, "send_notification", other)); e.Status != contracts.StatusBadArgs {
				t.Errorf("key reused with other arguments: %s, want bad_args", e.Status)
			}
			noKey := map[string]any{"user_id": "alice", "text": "No key."}
			if e := mcptest.ResultOf(t, mcptest.CallTool(t, cs, "send_notification", noKey)); e.Status != contracts.StatusBadArgs {
				t.Errorf("missing key: %s, want bad_args", e.Status)
			}
		})
	}
}

func TestMCPCallerMayOnlyCallItsTools(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	for _, rev := range mcptest.Revisions {
		t.Run(rev, func(t *testing.T) {
			cs := mcptest.Connect(t, env.Server.URL+"/mcp", rev, mcptest.Caller("research-agent"))
			args := map[string]any{"user_id": "alice", "text": "hi", contracts.IdempotencyKeyArg: "k-" + rev}
			e := mcptest.ResultOf(t, mcptest.CallTool(t, cs, "send_notification", args))
			if e.Status != contracts.StatusForbidden {
				t.Fatalf("status %s, want forbidden", e.Status)
			}
			if env.Notify.Count() != 0 {
				t.Error("a forbidden call reached the backend")
			}
		})
	}
}

func TestMCPUnknownToolIsAJSONRPCError(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	for i, rev := range mcptest.Revisions {
		t.Run(rev, func(t *testing.T) {
			cs := mcptest.Connect(t, env.Server.URL+"/mcp", rev, nil)
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "delete_everything", Arguments: map[string]any{}})
			var rpcErr *jsonrpc.Error
			if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
				t.Fatalf("err = %v, want a JSON-RPC invalid params error", err)
			}
			if !strings.Contains(rpcErr.Message, "delete_everything") {
				t.Errorf("message %q does not name the tool", rpcErr.Message)
			}
			got := testutil.ToFloat64(env.Core.Metrics().ToolCalls.WithLabelValues("unknown", "not_found", "unknown"))
			if got != float64(i+1) {
				t.Errorf("toolgate_tool_calls_total{tool=unknown,status=not_found} = %v, want %d", got, i+1)
			}
		})
	}
	t.Run("the answer is HTTP 200", func(t *testing.T) {
		resp, body := proxytest.MCPPost(t, env.Server.URL+"/mcp", "2025-11-25", nil,
			`{"jsonrpc":"2.0","id":"u1","method":"tools/call","params":{"name":"nope","arguments":{}}}`)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"code":-32602`) {
			t.Errorf("HTTP %d: %s", resp.StatusCode, body)
		}
	})
}

func TestMCPCallsAreMeasuredAndLogged(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	cs := mcptest.Connect(t, env.Server.URL+"/mcp", "2026-07-28", mcptest.Caller("research-agent"))
	mcptest.ResultOf(t, mcptest.CallTool(t, cs, "search_articles", map[string]any{"q": "go"}))
	m := env.Core.Metrics()
	if got := testutil.ToFloat64(m.ToolCalls.WithLabelValues("search_articles", "ok", "research-agent")); got != 1 {
		t.Errorf("toolgate_tool_calls_total{search_articles,ok,research-agent} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.ToolCost.WithLabelValues("search_articles", "research-agent")); got != 0.001 {
		t.Errorf("toolgate_tool_cost_total = %v, want 0.001", got)
	}
	var line map[string]any
	for l := range strings.Lines(env.Logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] != "call" {
			// One line per call: the SDK's per-request session chatter
			// stays out of the log.
			t.Errorf("unexpected log line %s", l)
			continue
		}
		line = m
	}
	if line == nil {
		t.Fatalf("no call log line in %s", env.Logs.String())
	}
	for k, want := range map[string]string{"front": "mcp", "mcp_method": "tools/call", "mcp_protocol_version": "2026-07-28", "tool": "search_articles", "caller": "research-agent", "status": "ok"} {
		if line[k] != want {
			t.Errorf("log field %s = %v, want %s", k, line[k], want)
		}
	}
}

func TestMCPToolListFollowsReloads(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	original := env.Core.Snapshot()
	narrowed, err := config.CompileSource("policy.yaml", mcptest.Policy(t, env.SearchURL, env.NotifyURL, func(doc string) string {
		return strings.Replace(doc, `tools: ["*"]`, `tools: [search_articles]`, 1)
	}), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rev := range mcptest.Revisions {
		t.Run(rev, func(t *testing.T) {
			cs := mcptest.Connect(t, env.Server.URL+"/mcp", rev, mcptest.Caller("ops-agent"))
			if got := mcptest.ToolNames(mcptest.ListTools(t, cs)); len(got) != 2 {
				t.Fatalf("before the reload: %v", got)
			}
			if err := env.Core.Swap(narrowed); err != nil {
				t.Fatal(err)
			}
			if got := mcptest.ToolNames(mcptest.ListTools(t, cs)); !slices.Equal(got, []string{"search_articles"}) {
				t.Errorf("after the reload: %v, want [search_articles]", got)
			}
			if err := env.Core.Swap(original); err != nil {
				t.Fatal(err)
			}
			if got := mcptest.ToolNames(mcptest.ListTools(t, cs)); len(got) != 2 {
				t.Errorf("after reloading the original: %v", got)
			}
		})
	}
}

func TestMCPRevision20260728ChecksRoutingHeaders(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go"},` + meta + `}}`
	cases := []struct {
		name    string
		header  http.Header
		version string
		body    string
		status  int
		code    int64 // JSON-RPC error code, 0 for a result
	}{
		{"matching headers are served", http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"search_articles"}}, "2026-07-28", call, 200, 0},
		{"an Mcp-Name that differs from the body is refused", http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"send_notification"}}, "2026-07-28", call, 400, mcp.CodeHeaderMismatch},
		{"an Mcp-Method that differs from the body is refused", http.Header{"Mcp-Method": {"tools/list"}, "Mcp-Name": {"search_articles"}}, "2026-07-28", call, 400, mcp.CodeHeaderMismatch},
		{"a missing Mcp-Method is refused", http.Header{"Mcp-Name": {"search_articles"}}, "2026-07-28", call, 400, mcp.CodeHeaderMismatch},
		{"a missing Mcp-Name is refused", http.Header{"Mcp-Method": {"tools/call"}}, "2026-07-28", call, 400, mcp.CodeHeaderMismatch},
		{"a protocol version header that differs from _meta is refused", http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {"search_articles"}}, "2025-11-25", call, 400, mcp.CodeHeaderMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := proxytest.MCPPost(t, env.Server.URL+"/mcp", tc.version, tc.header, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			var msg struct {
				Result *mcp.CallToolResult `json:"result"`
				Error  *jsonrpc.Error      `json:"error"`
			}
			if err := json.Unmarshal(body, &msg); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			switch {
			case tc.code == 0 && (msg.Error != nil || msg.Result == nil || msg.Result.IsError):
				t.Errorf("want a successful result: %s", body)
			case tc.code != 0 && (msg.Error == nil || msg.Error.Code != tc.code):
				t.Errorf("want error %d: %s", tc.code, body)
			}
		})
	}
}

func TestMCPIsStateless(t *testing.T) {
	// Two replicas with the same policy; the client's requests alternate
	// between them, so no request finds the state an earlier one left.
	a, b := mcptest.NewEnv(t, nil), mcptest.NewEnv(t, nil)
	var n atomic.Int64
	rr := mcpRoundTripFunc(func(r *http.Request) (*http.Response, error) {
		target := a.Server.URL
		if n.Add(1)%2 == 0 {
			target = b.Server.URL
		}
		r = r.Clone(r.Context())
		r.URL.Host = strings.TrimPrefix(target, "http://")
		r.Host = r.URL.Host
		return http.DefaultTransport.RoundTrip(r)
	})
	for _, rev := range mcptest.Revisions {
		t.Run(rev, func(t *testing.T) {
			client := mcp.NewClient(&mcp.Implementation{Name: "toolgate-test", Version: "1.0.0"}, nil)
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
				Endpoint: a.Server.URL + "/mcp", HTTPClient: &http.Client{Transport: rr},
			}, &mcp.ClientSessionOptions{ProtocolVersion: rev})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if cs.ID() != "" {
				t.Errorf("session id %q: a stateless server has none", cs.ID())
			}
			for range 3 {
				mcptest.ListTools(t, cs)
				if e := mcptest.ResultOf(t, mcptest.CallTool(t, cs, "search_articles", map[string]any{"q": "go"})); e.Status != contracts.StatusOK {
					t.Errorf("status %s", e.Status)
				}
			}
		})
	}
	t.Run("GET is not served", func(t *testing.T) {
		resp, err := http.Get(a.Server.URL + "/mcp")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("GET /mcp: HTTP %d, want 405", resp.StatusCode)
		}
	})
}

type mcpRoundTripFunc func(*http.Request) (*http.Response, error)

func (f mcpRoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

const mcpInitializeMessage = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func TestMCPOriginValidation(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	host := strings.TrimPrefix(env.Server.URL, "http://")
	cases := []struct {
		name   string
		host   string // Host header; empty for the server's address
		origin string
		status int
	}{
		{"a request without Origin is served", "", "", 200},
		{"the server's own origin is served", "", "http://" + host, 200},
		{"a loopback origin is served", "", "http://localhost:6274", 200},
		{"an IPv6 loopback origin is served", "", "http://[::1]:3000", 200},
		{"a foreign origin is refused", "", "https://evil.example.com", 403},
		{"an opaque origin is refused", "", "null", 403},
		{"a rebinding name as Host on a loopback listener is refused", "evil.example.com", "", 403},
		{"a rebinding name as Host and Origin is refused", "evil.example.com:80", "http://evil.example.com", 403},
		{"localhost as Host is served", "localhost", "", 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, env.Server.URL+"/mcp", strings.NewReader(mcpInitializeMessage))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if tc.status == 403 {
				var msg struct {
					ID    *json.RawMessage `json:"id"`
					Error *jsonrpc.Error   `json:"error"`
				}
				if err := json.Unmarshal(body, &msg); err != nil || msg.Error == nil || msg.ID != nil {
					t.Errorf("want a JSON-RPC error without id: %s", body)
				}
			}
		})
	}
	// Behind a proxy the listener is not loopback: the Host is the public
	// name, and a page served from that name may call its own host.
	t.Run("behind a TLS-terminating proxy, the https origin of the host", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodPost, "http://toolgate.example.com/mcp", strings.NewReader(mcpInitializeMessage))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Origin", "https://toolgate.example.com")
		rec := httptest.NewRecorder()
		mcpfront.Handler(env.Core, mcpfront.Options{}).ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("HTTP %d, want 200: %s", rec.Code, rec.Body)
		}
	})
	handler := mcpfront.Handler(env.Core, mcpfront.Options{AllowedOrigins: []string{"https://console.example.com"}})
	for _, tc := range []struct {
		origin string
		status int
	}{
		{"http://toolgate.example.com:8080", 200},
		{"https://console.example.com", 200},
		{"https://console.example.com:8443", 403},
		{"http://toolgate.example.com", 403},
		{"http://other.example.com:8080", 403},
		{"http://toolgate.example.com.evil.example:8080", 403},
	} {
		t.Run("on a public host, origin "+tc.origin, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "http://toolgate.example.com:8080/mcp", strings.NewReader(mcpInitializeMessage))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Origin", tc.origin)
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Errorf("HTTP %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
		})
	}
}

func TestMCPRequestBodyIsBounded(t *testing.T) {
	env := mcptest.NewEnv(t, func(doc string) string {
		return strings.Replace(doc, "observation_max_chars: 1800", "observation_max_chars: 1800\n  max_request_bytes: 1024", 1)
	})
	big := strings.Repeat("x", 2000)
	t.Run("arguments over max_request_bytes are bad_args", func(t *testing.T) {
		cs := mcptest.Connect(t, env.Server.URL+"/mcp", "2025-11-25", nil)
		e := mcptest.ResultOf(t, mcptest.CallTool(t, cs, "search_articles", map[string]any{"q": big}))
		if e.Status != contracts.StatusBadArgs {
			t.Errorf("status %s, want bad_args", e.Status)
		}
	})
	t.Run("a message far over the limit is refused with 413", func(t *testing.T) {
		huge := strings.Repeat("x", 128<<10)
		resp, body := proxytest.MCPPost(t, env.Server.URL+"/mcp", "2025-11-25", nil,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"`+huge+`"}}}`)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("HTTP %d, want 413: %.200s", resp.StatusCode, body)
		}
	})
}

func TestMCPLeaksNoGoroutines(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last
	env := mcptest.NewEnv(t, nil)
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	for _, rev := range mcptest.Revisions {
		client := mcp.NewClient(&mcp.Implementation{Name: "toolgate-test", Version: "1.0.0"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{
			Endpoint: env.Server.URL + "/mcp", HTTPClient: &http.Client{Transport: transport},
		}, &mcp.ClientSessionOptions{ProtocolVersion: rev})
		if err != nil {
			t.Fatal(err)
		}
		mcptest.ListTools(t, cs)
		mcptest.ResultOf(t, mcptest.CallTool(t, cs, "search_articles", map[string]any{"q": "go"}))
		// A client that gives up mid-call: the server side must still end.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_articles", Arguments: map[string]any{"q": "slow"}})
		cancel()
		if err == nil {
			t.Errorf("%s: a call cancelled after 50ms returned no error", rev)
		}
		if err := cs.Close(); err != nil {
			t.Errorf("%s: close: %v", rev, err)
		}
	}
}

// TestMCPRefusalsAreJSONRPCErrors: whatever toolgate or the SDK refuses is
// answered with a JSON-RPC error body a client can parse, with the HTTP
// status the transport specifies.
func TestMCPRefusalsAreJSONRPCErrors(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	const list = `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`
	cases := []struct {
		name     string
		method   string
		header   http.Header // replaces the defaults it names
		body     string
		status   int
		code     int64 // 0: a result
		id       bool  // the error carries the request's id
		contains string
	}{
		{"Accept: application/json alone is served", "", http.Header{"Accept": {"application/json"}}, list, 200, 0, false, ""},
		{"no Accept is served", "", http.Header{"Accept": nil}, list, 200, 0, false, ""},
		{"Accept: */* is served", "", http.Header{"Accept": {"*/*"}}, list, 200, 0, false, ""},
		{"an event stream alone is not acceptable", "", http.Header{"Accept": {"text/event-stream"}}, list, 406, -32600, true, "application/json"},
		{"an unsupported MCP-Protocol-Version says which are served", "", http.Header{"Mcp-Protocol-Version": {"2099-01-01"}}, list, 400, -32022, true, "2025-11-25"},
		{"a batch from 2025-06-18 on", "", http.Header{"Mcp-Protocol-Version": {"2025-06-18"}}, `[` + list + `]`, 400, -32600, false, "batch"},
		{"a batch at 2025-03-26 is served", "", http.Header{"Mcp-Protocol-Version": {"2025-03-26"}}, `[` + list + `]`, 200, 0, false, ""},
		{"a body that is not JSON", "", nil, `{"jsonrpc":`, 400, -32700, false, "malformed"},
		{"a text/plain body", "", http.Header{"Content-Type": {"text/plain"}}, list, 415, -32600, true, "application/json"},
		{"a method no server has", "", nil, `{"jsonrpc":"2.0","id":3,"method":"tools/frobnicate"}`, 200, -32601, true, "tools/frobnicate"},
		{"a call without params", "", nil, `{"jsonrpc":"2.0","id":3,"method":"tools/call"}`, 400, -32600, true, "params"},
		{"a call without a name", "", nil, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{}}}`, 200, -32602, true, "params.name"},
		{"GET", http.MethodGet, nil, "", 405, -32600, false, "Method Not Allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, env.Server.URL+"/mcp", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
			for k, v := range tc.header {
				req.Header.Del(k)
				for _, x := range v {
					req.Header.Add(k, x)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("HTTP %d %s, want %d JSON: %s", resp.StatusCode, resp.Header.Get("Content-Type"), tc.status, body)
			}
			if tc.code == 0 {
				if bytes.Contains(body, []byte(`"error"`)) {
					t.Errorf("want a result: %s", body)
				}
				return
			}
			var msg struct {
				ID    json.RawMessage `json:"id"`
				Error *jsonrpc.Error  `json:"error"`
			}
			if err := json.Unmarshal(body, &msg); err != nil || msg.Error == nil || msg.Error.Code != tc.code {
				t.Fatalf("want JSON-RPC error %d: %s", tc.code, body)
			}
			if tc.id != (string(msg.ID) == "3") {
				t.Errorf("id %s, want it carried: %v", msg.ID, tc.id)
			}
			if !strings.Contains(msg.Error.Message, tc.contains) {
				t.Errorf("message %q does not say %q", msg.Error.Message, tc.contains)
			}
		})
	}
}

// TestMCPUnadvertisedMethodsFollowTheRevision: toolgate declares only the
// tools capability. From 2026-07-28 the other capabilities' methods are
// "method not found"; earlier revisions leave them open and the SDK's
// empty answers are true.
func TestMCPUnadvertisedMethodsFollowTheRevision(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, tc := range []struct{ method, params string }{
		{"resources/list", `{}`},
		{"resources/templates/list", `{}`},
		{"prompts/list", `{}`},
		{"completion/complete", `{"ref":{"type":"ref/prompt","name":"x"},"argument":{"name":"a","value":"b"}}`},
	} {
		t.Run(tc.method+" at 2026-07-28", func(t *testing.T) {
			params := "{" + meta + "," + strings.TrimPrefix(tc.params, "{")
			if tc.params == "{}" {
				params = "{" + meta + "}"
			}
			resp, body := proxytest.MCPPost(t, env.Server.URL+"/mcp", "2026-07-28", http.Header{"Mcp-Method": {tc.method}},
				`{"jsonrpc":"2.0","id":1,"method":"`+tc.method+`","params":`+params+`}`)
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":-32601`) {
				t.Errorf("HTTP %d, want 404 with -32601: %s", resp.StatusCode, body)
			}
		})
	}
	for _, method := range []string{"resources/list", "prompts/list"} {
		t.Run(method+" at 2025-11-25", func(t *testing.T) {
			resp, body := proxytest.MCPPost(t, env.Server.URL+"/mcp", "2025-11-25", nil, `{"jsonrpc":"2.0","id":1,"method":"`+method+`"}`)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"result"`) {
				t.Errorf("HTTP %d, want an empty list: %s", resp.StatusCode, body)
			}
		})
	}
}

// TestMCPClientMistakesAreNotErrorsInTheLog: a 2026-07-28 ping (removed in
// that revision) is the client's mistake; the client gets -32601, the log
// no ERROR line.
func TestMCPClientMistakesAreNotErrorsInTheLog(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	resp, body := proxytest.MCPPost(t, env.Server.URL+"/mcp", "2026-07-28", http.Header{"Mcp-Method": {"ping"}},
		`{"jsonrpc":"2.0","id":1,"method":"ping","params":{`+meta+`}}`)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"code":-32601`) {
		t.Fatalf("HTTP %d, want -32601: %s", resp.StatusCode, body)
	}
	if logs := env.Logs.String(); strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("an ERROR line for a client's mistake: %s", logs)
	}
}

// TestMCPTextIsTheBoundedObservation: the text block is the observation,
// within observation_max_chars, and structuredContent adds only the status
// fields, so a client that shows both to the model stays bounded.
func TestMCPTextIsTheBoundedObservation(t *testing.T) {
	env := mcptest.NewEnv(t, func(doc string) string {
		return strings.Replace(doc, "observation_max_chars: 1800", "observation_max_chars: 256", 1)
	})
	for _, rev := range mcptest.Revisions {
		t.Run(rev, func(t *testing.T) {
			cs := mcptest.Connect(t, env.Server.URL+"/mcp", rev, nil)
			res := mcptest.CallTool(t, cs, "search_articles", map[string]any{"q": "go", "limit": 20})
			r := mcptest.ResultOf(t, res)
			if n := len([]rune(r.Text)); n > 256 || !strings.Contains(r.Text, "truncated") {
				t.Errorf("text of %d characters, want the observation cut to 256: %s", n, r.Text)
			}
			fields, _ := json.Marshal(res.StructuredContent)
			if len(fields) > 250 || bytes.Contains(fields, []byte("kb-1001")) {
				t.Errorf("structuredContent carries more than the status fields: %s", fields)
			}
		})
	}
}

// TestMCPToolTheSDKRefusesIsLeftOut: a contract whose schema the SDK will
// not register (an x-mcp-header annotation on an object) is left out of
// MCP with an error in the log; the other tools are served.
func TestMCPToolTheSDKRefusesIsLeftOut(t *testing.T) {
	env := mcptest.NewEnv(t, func(doc string) string {
		return strings.Replace(doc, `limit: {type: integer, minimum: 1, maximum: 20, default: 10, description: "Maximum number of articles."}`,
			`limit: {type: integer, minimum: 1, maximum: 20, default: 10, description: "Maximum number of articles."}
        filter: {type: object, x-mcp-header: Filter}`, 1)
	})
	cs := mcptest.Connect(t, env.Server.URL+"/mcp", "2025-11-25", nil)
	if got := mcptest.ToolNames(mcptest.ListTools(t, cs)); !slices.Equal(got, []string{"send_notification"}) {
		t.Errorf("tools %v, want only send_notification", got)
	}
	if logs := env.Logs.String(); !strings.Contains(logs, "tool left out of MCP") || !strings.Contains(logs, "search_articles") {
		t.Errorf("no error line for the left-out tool: %s", logs)
	}
}
