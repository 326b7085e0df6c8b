// Package mcptest is what the tests of the MCP front share: a toolgate
// serving the example policy on its agent port (Env), and the Go SDK's
// client with the checks every tools/call result must pass. The front's
// tests (proxy/mcpfront) and the cross-front ones of package proxy use it.
package mcptest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/mcpfront"
	"github.com/toolgate/toolgate/proxy/toolformats"
)

// Revisions are the protocol revisions toolgate serves over MCP; every Go
// SDK client test runs at each.
var Revisions = mcpfront.Revisions()

// Env is a toolgate serving the example policy over MCP (and the HTTP
// front, for comparisons) in front of the example backends.
type Env struct {
	Core   *proxy.Core
	Notify *examples.NotifyBackend
	Server *httptest.Server // the agent port: /mcp and /v1/tools
	Logs   *proxytest.LogBuffer

	SearchURL, NotifyURL string
}

// Policy is the example policy with its backends' addresses; edit
// rewrites it further for one test.
func Policy(t *testing.T, searchURL, notifyURL string, edit func(string) string) []byte {
	t.Helper()
	doc := strings.NewReplacer("http://127.0.0.1:7001", searchURL, "http://127.0.0.1:7002", notifyURL).Replace(string(examples.Policy()))
	if edit != nil {
		doc = edit(doc)
	}
	return []byte(doc)
}

// NewEnv starts an Env whose policy edit rewrites (nil: as it is); it
// stops with the test.
func NewEnv(t *testing.T, edit func(string) string) *Env {
	t.Helper()
	search := httptest.NewServer(examples.NewSearchBackend(examples.SearchOptions{SlowDelay: 2 * time.Second}))
	t.Cleanup(search.Close)
	notify := examples.NewNotifyBackend(examples.NotifyOptions{})
	notifySrv := httptest.NewServer(notify)
	t.Cleanup(notifySrv.Close)
	snap, err := config.CompileSource("policy.yaml", Policy(t, search.URL, notifySrv.URL, edit), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &proxytest.LogBuffer{}
	core, err := proxy.NewCore(snap, proxy.Options{Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(AgentHandler(core, mcpfront.Options{}))
	t.Cleanup(func() {
		srv.Close()
		core.Close()
	})
	return &Env{Core: core, Notify: notify, Server: srv, Logs: logs, SearchURL: search.URL, NotifyURL: notifySrv.URL}
}

// AgentHandler is core's agent port as toolgate serves it: the HTTP front,
// with the MCP front at /mcp.
func AgentHandler(core *proxy.Core, opts mcpfront.Options) http.Handler {
	return core.Handler(mcpfront.Front(core, opts))
}

// headerTransport adds fixed headers (the caller, a request id) to every
// request of an MCP client, as a configured client would.
type headerTransport struct {
	header http.Header
	next   http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header[k] = v
	}
	return h.next.RoundTrip(r)
}

// Connect opens an MCP session with the Go SDK's client at revision, with
// extra headers on every request.
func Connect(t *testing.T, endpoint, revision string, header http.Header) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "toolgate-test", Version: "1.0.0"}, nil)
	transport := &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: headerTransport{header: header, next: http.DefaultTransport}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatalf("connect at %s: %v", revision, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != revision {
		t.Fatalf("negotiated %s, want %s", got, revision)
	}
	return cs
}

// Caller is the header that names caller ("" for none).
func Caller(caller string) http.Header {
	h := http.Header{}
	if caller != "" {
		h.Set("X-Toolgate-Caller", caller)
	}
	return h
}

// CallTool calls tool name with args, and fails the test on a protocol
// error.
func CallTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	return res
}

// Result is a tools/call result as a test reads it: the fields of its
// structuredContent and its one text block.
type Result struct {
	mcpfront.Output
	Text string // the observation
}

// Data is the JSON the observation carries after its first line, or "".
func (r *Result) Data() string {
	_, data, _ := strings.Cut(r.Text, "\n")
	return data
}

// ResultOf checks the shape every tool result must have (mcpfront.Output as
// structuredContent, valid against the published output schema; one text
// block for the model; isError unless ok or empty) and returns it.
func ResultOf(t *testing.T, res *mcp.CallToolResult) *Result {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := OutputSchema(t).Validate(DecodeObject(t, raw)); err != nil {
		t.Errorf("structuredContent fails the output schema: %v: %s", err, raw)
	}
	out := &Result{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out.Output); err != nil {
		t.Fatalf("structuredContent is not an mcpfront.Output: %v: %s", err, raw)
	}
	if len(res.Content) != 1 {
		t.Fatalf("want one content block, got %d", len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content block is %T, want text", res.Content[0])
	}
	out.Text = text.Text
	if !strings.HasPrefix(out.Text, out.Status.Tag()+" ") {
		t.Errorf("text block %q does not start with %s", out.Text, out.Status.Tag())
	}
	if res.IsError != !out.Status.Success() {
		t.Errorf("isError = %v for status %s", res.IsError, out.Status)
	}
	return out
}

// OutputSchema is toolformats.MCPOutputSchema, compiled.
func OutputSchema(t *testing.T) *contracts.Schema {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(toolformats.MCPOutputSchema), &doc); err != nil {
		t.Fatal(err)
	}
	schema, err := contracts.CompileSchema(doc)
	if err != nil {
		t.Fatalf("the output schema does not compile: %v", err)
	}
	return schema
}

// DecodeObject decodes a JSON object, numbers as json.Number.
func DecodeObject(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// ToolNames are the names of tools.
func ToolNames(tools []*mcp.Tool) []string {
	names := make([]string, 0, len(tools))
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	return names
}

// ListTools lists the session's tools.
func ListTools(t *testing.T, cs *mcp.ClientSession) []*mcp.Tool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	return res.Tools
}
