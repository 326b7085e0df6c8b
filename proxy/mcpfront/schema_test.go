package mcpfront_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolgate/toolgate/internal/testkit/mcptest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy/mcpfront"
)

// mcpSchema is the official JSON Schema of one MCP revision
// (testdata/mcp-schema).
type mcpSchema struct {
	compiler *jsonschema.Compiler
	url      string
	defs     string // "definitions" before 2025-11-25, "$defs" after
}

func loadMCPSchema(t *testing.T, revision string) *mcpSchema {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "mcp-schema", revision+".json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	s := &mcpSchema{compiler: jsonschema.NewCompiler(), url: "https://modelcontextprotocol.io/schema/" + revision + ".json", defs: "$defs"}
	if defs, _ := doc.(map[string]any)["definitions"]; defs != nil {
		s.defs = "definitions"
	}
	if err := s.compiler.AddResource(s.url, doc); err != nil {
		t.Fatal(err)
	}
	return s
}

// has reports whether the revision defines def.
func (s *mcpSchema) has(def string) bool {
	_, err := s.compiler.Compile(s.url + "#/" + s.defs + "/" + def)
	return err == nil
}

// validate checks v against the definition def.
func (s *mcpSchema) validate(t *testing.T, def string, v any) {
	t.Helper()
	sch, err := s.compiler.Compile(s.url + "#/" + s.defs + "/" + def)
	if err != nil {
		t.Fatalf("compiling %s: %v", def, err)
	}
	if err := sch.Validate(v); err != nil {
		b, _ := json.Marshal(v)
		t.Errorf("not a valid %s: %v\n%.1500s", def, err, b)
	}
}

// mcpExchange is one raw request at a revision and what its answer must be.
type mcpExchange struct {
	name   string
	method string // JSON-RPC method; "" sends body as is
	params string // JSON object without _meta, "" for none
	body   string // with method "": the raw body
	header http.Header
	result string // the result definition; "" for a JSON-RPC error
	code   int64  // the JSON-RPC error code, with result ""
	noID   bool   // the error answers a request whose id cannot be read
}

// mcpMessage builds the request of an exchange as a client of revision
// sends it: from 2026-07-28 with the _meta triple and routing headers.
func mcpMessage(revision string, ex mcpExchange) (string, http.Header) {
	h := http.Header{}
	for k, v := range ex.header {
		h[k] = v
	}
	if ex.method == "" {
		return ex.body, h
	}
	params := ex.params
	if revision >= "2026-07-28" {
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + revision + `","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"schema-test","version":"1"}}`
		if params == "" || params == "{}" {
			params = "{" + meta + "}"
		} else {
			params = "{" + meta + "," + strings.TrimPrefix(params, "{")
		}
		if h.Get("Mcp-Method") == "" {
			h.Set("Mcp-Method", ex.method)
		}
		var p struct{ Name string }
		if json.Unmarshal([]byte(params), &p) == nil && p.Name != "" && ex.method == "tools/call" {
			h.Set("Mcp-Name", p.Name)
		}
	}
	msg := `{"jsonrpc":"2.0","id":7,"method":"` + ex.method + `"`
	if params != "" {
		msg += `,"params":` + params
	}
	return msg + "}", h
}

// TestMCPAnswersFollowEachRevisionSchema validates every kind of answer
// toolgate writes (handshake, tools/list, tools/call ok, empty, bad_args,
// upstream and replay, JSON-RPC errors) against the official JSON Schema
// of each revision it serves. Errors toolgate writes before a message is
// read (a refused Origin, a body over the limit, a batch, a body that is
// not JSON) cannot carry the request's id; MCP allows that since
// 2025-11-25, earlier schemas require an id, so those are checked against
// 2025-11-25's definition at every revision.
func TestMCPAnswersFollowEachRevisionSchema(t *testing.T) {
	latest := loadMCPSchema(t, "2025-11-25")
	for _, rev := range mcpfront.Revisions() {
		t.Run(rev, func(t *testing.T) {
			schema := loadMCPSchema(t, rev)
			env := mcptest.NewEnv(t, nil)
			key := fmt.Sprintf(`{"user_id":"alice","text":"Your report is ready.","idempotency_key":"schema-%s"}`, rev)
			handshake := mcpExchange{name: "initialize", method: "initialize", result: "InitializeResult",
				params: `{"protocolVersion":"` + rev + `","capabilities":{},"clientInfo":{"name":"schema-test","version":"1"}}`}
			if rev >= "2026-07-28" {
				handshake = mcpExchange{name: "server/discover", method: "server/discover", result: "DiscoverResult"}
			}
			// From 2026-07-28 the SDK refuses a call without the Mcp-Name
			// header (a client sends the body's name there) first.
			noName := int64(-32602)
			if rev >= "2026-07-28" {
				noName = -32020
			}
			exchanges := []mcpExchange{
				handshake,
				{name: "tools/list", method: "tools/list", result: "ListToolsResult"},
				{name: "a call that is ok", method: "tools/call", params: `{"name":"search_articles","arguments":{"q":"go","limit":2}}`, result: "CallToolResult"},
				{name: "a call that is empty", method: "tools/call", params: `{"name":"search_articles","arguments":{"q":"量子引力"}}`, result: "CallToolResult"},
				{name: "a call with bad arguments", method: "tools/call", params: `{"name":"search_articles","arguments":{"q":"go","limit":50}}`, result: "CallToolResult"},
				{name: "a call the backend fails", method: "tools/call", params: `{"name":"search_articles","arguments":{"q":"crash"}}`, result: "CallToolResult"},
				{name: "a side-effecting call", method: "tools/call", params: `{"name":"send_notification","arguments":` + key + `}`, result: "CallToolResult"},
				{name: "its replay", method: "tools/call", params: `{"name":"send_notification","arguments":` + key + `}`, result: "CallToolResult"},
				{name: "an unknown tool", method: "tools/call", params: `{"name":"delete_everything","arguments":{}}`, code: -32602},
				{name: "a call without a name", method: "tools/call", params: `{"arguments":{}}`, code: noName},
				{name: "a method no server has", method: "tools/frobnicate", params: `{}`, code: -32601},
				{name: "an unsupported protocol version", method: "tools/list", header: http.Header{"Mcp-Protocol-Version": {"2099-01-01"}}, code: -32022},
				{name: "a foreign Origin", method: "tools/list", header: http.Header{"Origin": {"https://evil.example"}}, code: -32600, noID: true},
				{name: "a body that is not JSON", body: `{"jsonrpc":`, code: -32700, noID: true},
				{name: "a body over the limit", body: `{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":"` + strings.Repeat("x", 200<<10) + `"}}`, code: -32600, noID: true},
			}
			if rev >= "2025-06-18" {
				exchanges = append(exchanges, mcpExchange{name: "a batch", body: `[{"jsonrpc":"2.0","id":7,"method":"tools/list"}]`, code: -32600, noID: true})
			}
			if rev >= "2026-07-28" {
				exchanges = append(exchanges,
					mcpExchange{name: "ping, gone in 2026-07-28", method: "ping", code: -32601},
					mcpExchange{name: "resources/list, not advertised", method: "resources/list", params: `{}`, code: -32601})
			}
			for _, ex := range exchanges {
				t.Run(ex.name, func(t *testing.T) {
					body, header := mcpMessage(rev, ex)
					version := rev
					if v := header.Get("Mcp-Protocol-Version"); v != "" {
						version = v
						header.Del("Mcp-Protocol-Version")
					}
					if ex.method == "initialize" {
						version = ""
					}
					resp, raw := proxytest.MCPPost(t, env.Server.URL+"/mcp", version, header, body)
					if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
						t.Fatalf("HTTP %d %s: %s", resp.StatusCode, ct, raw)
					}
					msg, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
					if err != nil {
						t.Fatalf("HTTP %d, not JSON: %v: %s", resp.StatusCode, err, raw)
					}
					obj, _ := msg.(map[string]any)
					if ex.result != "" {
						if obj["error"] != nil {
							t.Fatalf("HTTP %d, want a result: %s", resp.StatusCode, raw)
						}
						if schema.has("JSONRPCResultResponse") {
							schema.validate(t, "JSONRPCResultResponse", msg)
						} else {
							schema.validate(t, "JSONRPCResponse", msg)
						}
						schema.validate(t, ex.result, obj["result"])
						return
					}
					rpcErr, _ := obj["error"].(map[string]any)
					if rpcErr == nil || fmt.Sprint(rpcErr["code"]) != fmt.Sprint(ex.code) {
						t.Fatalf("HTTP %d, want error %d: %s", resp.StatusCode, ex.code, raw)
					}
					if _, hasID := obj["id"]; hasID == ex.noID {
						t.Errorf("id present = %v, want %v: %s", hasID, !ex.noID, raw)
					}
					switch {
					case schema.has("JSONRPCErrorResponse"):
						schema.validate(t, "JSONRPCErrorResponse", msg)
					case ex.noID:
						latest.validate(t, "JSONRPCErrorResponse", msg)
					default:
						schema.validate(t, "JSONRPCError", msg)
					}
				})
			}
		})
	}
}
