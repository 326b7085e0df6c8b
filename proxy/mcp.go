package proxy

// The MCP front: the Model Context Protocol over Streamable HTTP, through
// the official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// The SDK owns the transport and the protocol: JSON-RPC framing, version
// negotiation (initialize for 2025-11-25 and older, per-request _meta and
// server/discover for 2026-07-28), the 2026-07-28 routing headers
// (MCP-Protocol-Version, Mcp-Method, Mcp-Name) and their header/body
// mismatch error (-32020, HTTP 400). toolgate adds three things around it:
//
//   - tools/list and tools/call are answered by a middleware, not by tools
//     registered on the SDK server, so the list is built per request for the
//     caller of that request and always reflects the current policy
//     snapshot, and every call, unknown tools included, runs through
//     Core.Call (same pipeline, metrics and log line as the HTTP front);
//   - the handler is stateless: there is no Mcp-Session-Id, any replica
//     serves any request, and policy reloads need no session bookkeeping;
//   - Origin and Host validation against DNS rebinding, and a request body
//     bound derived from server.max_request_bytes.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// MCPOptions tune the MCP front. The zero value is a complete configuration.
type MCPOptions struct {
	// AllowedOrigins are browser origins ("https://agents.example.com",
	// scheme://host[:port]) accepted in the Origin header besides the
	// request's own host and loopback hosts, which are always accepted.
	// Requests without an Origin header (every non-browser client) are
	// always accepted.
	AllowedOrigins []string
	// Instructions are sent to clients on initialize and server/discover;
	// empty means DefaultMCPInstructions.
	Instructions string
}

// DefaultMCPInstructions tells a model how to read toolgate's results.
const DefaultMCPInstructions = "Every tool returns a result envelope (structuredContent) and its observation text. " +
	"status is one of ok, empty, bad_args, forbidden, not_found, timeout, upstream; empty means the call " +
	"succeeded and found nothing. Retry an identical call only when retryable is true, after " +
	"retry_after_ms when given. Tools with a side effect require an idempotency_key argument: use a new " +
	"key for each new action and the same key only to retry that action; it runs at most once per key."

// mcpRequestOverhead is what a JSON-RPC message may add around the tool
// arguments (method, id, name, _meta with client info and capabilities)
// on top of server.max_request_bytes.
const mcpRequestOverhead = 64 << 10

// MCPEnvelopeSchema is the JSON Schema of contracts.Envelope, published as
// every tool's outputSchema: the structuredContent of a tools/call result
// is exactly the envelope the HTTP front returns. It names no $schema: MCP
// schemas default to 2020-12, and the keywords used here mean the same in
// draft-07, which some clients' validators assume.
const MCPEnvelopeSchema = `{` +
	`"title":"toolgate result envelope",` +
	`"type":"object",` +
	`"required":["status","message","retryable","side_effect","side_effect_done","replayed","cost","tool","call_id","observation"],` +
	`"additionalProperties":false,` +
	`"properties":{` +
	`"status":{"type":"string","enum":["ok","empty","bad_args","forbidden","not_found","timeout","upstream"],"description":"What happened; ok and empty are successes."},` +
	`"message":{"type":"string","description":"One sentence for the model: what happened and what to do next."},` +
	`"data":{"description":"The useful payload, shaped by the tool's contract; absent when there is none."},` +
	`"retryable":{"type":"boolean","description":"Re-sending the identical call (same arguments, same idempotency key) later may succeed."},` +
	`"side_effect":{"type":"string","enum":["none","done","unknown"],"description":"Whether the call changed anything: none, done, or unknown when the outcome was lost."},` +
	`"side_effect_done":{"type":"boolean","description":"side_effect is done."},` +
	`"replayed":{"type":"boolean","description":"A stored result for a repeated idempotency key; the backend was not called again."},` +
	`"retry_after_ms":{"type":"integer","minimum":0,"description":"When a retry makes sense, in milliseconds."},` +
	`"cost":{"type":"number","minimum":0,"description":"Cost units this call consumed."},` +
	`"tool":{"type":"string","description":"The tool's name as called."},` +
	`"call_id":{"type":"string","description":"The call's id, for support and logs."},` +
	`"observation":{"type":"string","description":"The text to feed back to the model."}` +
	`}}`

// MCPHandler returns the MCP endpoint (Streamable HTTP, POST only). Mount it
// at /mcp on the agent listener. It reads the policy snapshot per request,
// so one handler serves across reloads.
func (c *Core) MCPHandler(opts MCPOptions) http.Handler {
	f := &mcpFront{core: c, origins: make(map[string]bool, len(opts.AllowedOrigins))}
	for _, o := range opts.AllowedOrigins {
		f.origins[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	instructions := opts.Instructions
	if instructions == "" {
		instructions = DefaultMCPInstructions
	}
	logger := slog.New(sdkLogHandler{c.logger.Handler()}).With("front", "mcp")
	server := mcp.NewServer(&mcp.Implementation{Name: "toolgate", Version: c.version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       logger,
		// Tools only; the list can change on reload, but a stateless
		// server has no stream to announce it on (clients re-list: every
		// list is sent with ttlMs 0).
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	server.AddReceivingMiddleware(f.middleware)
	f.sdk = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true, // one answer per call: no progress or log notifications to stream
		Logger:       logger,
		// serveHTTP bounds the body by the policy's current limit.
		MaxRequestBodyBytes: -1,
		// serveHTTP checks Host and Origin itself (the same loopback Host
		// rule and more), so the rules live in one place.
		DisableLocalhostProtection:   true,
		PropagateRequestCancellation: true,
	})
	return http.HandlerFunc(f.serveHTTP)
}

// sdkLogHandler passes the SDK's warnings and errors to toolgate's log. Its
// info lines (connecting, connected, disconnected: three per request on a
// stateless server) would drown the call lines.
type sdkLogHandler struct{ slog.Handler }

func (h sdkLogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn && h.Handler.Enabled(ctx, level)
}

func (h sdkLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return sdkLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h sdkLogHandler) WithGroup(name string) slog.Handler {
	return sdkLogHandler{h.Handler.WithGroup(name)}
}

// mcpFront adapts MCP requests to Core.Call.
type mcpFront struct {
	core    *Core
	sdk     http.Handler
	origins map[string]bool
	tools   atomic.Pointer[mcpTools]
}

// mcpTools is every tool of one snapshot in MCP form, built once per
// snapshot and filtered per caller.
type mcpTools struct {
	snap  *policy.Snapshot
	tools []*mcp.Tool // in snap.ToolNames order
}

func (f *mcpFront) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if msg := f.rebinding(r); msg != "" {
		writeMCPForbidden(w, msg)
		return
	}
	if r.Body != nil {
		limit := f.core.Snapshot().Server.MaxRequestBytes + mcpRequestOverhead
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	f.sdk.ServeHTTP(w, r)
}

// rebinding returns why a request must be refused as a possible DNS
// rebinding or cross-site request, or "" to serve it. A browser page that
// rebinds its own name to a loopback address sends its own name as Host and
// Origin; so on a loopback listener the Host must be a loopback name, and
// the Origin, when a browser sends one, must be the request's own host, a
// loopback host or an allowed origin.
func (f *mcpFront) rebinding(r *http.Request) string {
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil {
		if isLoopbackHost(hostOnly(la.String())) && !isLoopbackHost(hostOnly(r.Host)) {
			return fmt.Sprintf("Forbidden: Host %q is not a loopback name", r.Host)
		}
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Sprintf("Forbidden: Origin %q is not allowed", origin)
	}
	switch {
	case f.origins[strings.ToLower(u.Scheme+"://"+u.Host)]:
	case isLoopbackHost(u.Hostname()):
	case sameHost(u, r.Host):
	default:
		return fmt.Sprintf("Forbidden: Origin %q is not allowed", origin)
	}
	return ""
}

// sameHost reports whether the origin names the host the request was sent
// to. The port is compared only when the Host header carries one: behind a
// TLS-terminating proxy the scheme (and so the default port) the browser
// used is unknown here.
func sameHost(origin *url.URL, host string) bool {
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name, port = strings.Trim(host, "[]"), ""
	}
	if !strings.EqualFold(origin.Hostname(), name) {
		return false
	}
	if port == "" {
		return true
	}
	originPort := origin.Port()
	if originPort == "" {
		originPort = map[string]string{"http": "80", "https": "443"}[origin.Scheme]
	}
	return originPort == port
}

// hostOnly strips the port from host[:port], and the brackets from an IPv6
// literal.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

func isLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// writeMCPForbidden answers 403 with a JSON-RPC error that has no id, as the
// Streamable HTTP transport specifies for a refused Origin.
func writeMCPForbidden(w http.ResponseWriter, msg string) {
	b := append([]byte(`{"jsonrpc":"2.0","error":{"code":-32600,"message":`), contracts.AppendJSONString(nil, msg)...)
	b = append(b, "}}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write(b)
}

// middleware answers tools/list and tools/call; every other method
// (initialize, server/discover, ping, ...) goes to the SDK.
func (f *mcpFront) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch r := req.(type) {
		case *mcp.ListToolsRequest:
			if method == "tools/list" {
				return f.list(r)
			}
		case *mcp.CallToolRequest:
			if method == "tools/call" {
				return f.call(ctx, r)
			}
		}
		return next(ctx, method, req)
	}
}

// list answers tools/list with the tools the caller of this HTTP request
// may use, from the current snapshot. There is one page.
func (f *mcpFront) list(req *mcp.ListToolsRequest) (*mcp.ListToolsResult, error) {
	if req.Params != nil && req.Params.Cursor != "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid cursor: tools/list has a single page"}
	}
	all := f.snapshotTools()
	snap := all.snap
	caller := snap.Access.Identify(snap.Server, requestHeader(req))
	res := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, 0, len(all.tools))}
	for _, t := range all.tools {
		if snap.Access.Allows(caller, t.Name) {
			res.Tools = append(res.Tools, t)
		}
	}
	// The list depends on the caller and changes on reload.
	res.Cacheable = mcp.Cacheable{TTLMs: 0, CacheScope: "private"}
	return res, nil
}

// snapshotTools returns the MCP tools of the current snapshot, building
// them once per snapshot.
func (f *mcpFront) snapshotTools() *mcpTools {
	snap := f.core.Snapshot()
	if cached := f.tools.Load(); cached != nil && cached.snap == snap {
		return cached
	}
	built := &mcpTools{snap: snap, tools: make([]*mcp.Tool, 0, len(snap.ToolNames))}
	for _, name := range snap.ToolNames {
		built.tools = append(built.tools, MCPTool(snap.Tools[name]))
	}
	f.tools.Store(built)
	return built
}

// MCPTool is a contract as an MCP tool: its published argument schema (with
// the required idempotency_key of side-effecting tools), the envelope as
// output schema, and annotations derived from side_effect.
func MCPTool(ct *contracts.Contract) *mcp.Tool {
	// A side-effecting tool is idempotent by its key: a retry with the same
	// key returns the stored result instead of acting twice.
	ann := &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: new(false), IdempotentHint: true}
	if ct.SideEffect {
		ann = &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: new(true), IdempotentHint: true}
	}
	return &mcp.Tool{
		Name:         ct.Name,
		Description:  ct.Description,
		InputSchema:  ct.PublishedSchema(),
		OutputSchema: json.RawMessage(MCPEnvelopeSchema),
		Annotations:  ann,
	}
}

// call runs tools/call through the core. Every outcome of a known tool is a
// tool result (isError for anything but ok and empty); an unknown tool is a
// JSON-RPC error, after the core has counted it as not_found.
func (f *mcpFront) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	h := requestHeader(req)
	name := ""
	var args []byte
	if req.Params != nil {
		name = req.Params.Name
		args = req.Params.Arguments
	}
	if args == nil || string(args) == "null" {
		args = []byte{} // no arguments: the empty object
	}
	// MCP carries the W3C trace context in _meta (clients without headers),
	// otherwise in the HTTP request's headers. An invalid _meta value does
	// not replace the headers' (the core drops invalid ones either way).
	traceparent, tracestate := h.Get("Traceparent"), h.Get("Tracestate")
	if req.Params != nil {
		if tp, ok := req.Params.Meta["traceparent"].(string); ok && validTraceParent(tp) {
			traceparent = tp
			tracestate, _ = req.Params.Meta["tracestate"].(string)
		}
	}
	res := f.core.Call(ctx, &Request{
		TraceParent: traceparent,
		TraceState:  tracestate,
		Tool:        name,
		// Raw bytes, so size limits and strict parsing (duplicate keys,
		// exact numbers) apply exactly as on the HTTP front.
		Body:   args,
		Caller: f.core.Identify(h),
		CallID: h.Get("X-Request-Id"),
		Front:  "mcp",
		LogAttrs: []slog.Attr{
			slog.String("mcp_method", "tools/call"),
			slog.String("mcp_protocol_version", req.ProtocolVersion()),
		},
	})
	if res.Reason == contracts.ReasonUnknownTool {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: res.Envelope.Message}
	}
	env := &res.Envelope
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: env.Observation}},
		StructuredContent: json.RawMessage(env.AppendJSON(nil)),
		IsError:           !env.Status.Success(),
	}, nil
}

// requestHeader is the header of the HTTP request that carried an MCP
// message; the caller is identified from it as on the HTTP front.
func requestHeader(req mcp.Request) http.Header {
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		return extra.Header
	}
	return http.Header{}
}
