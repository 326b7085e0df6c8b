// Package mcpfront is toolgate's MCP front: the Model Context Protocol
// over Streamable HTTP, through the official Go SDK
// (github.com/modelcontextprotocol/go-sdk), on the agent port at /mcp
// (Front). Like proxy/extproc it is a front over the core's View API: it
// decodes a tools/call into a proxy.Request, runs View.Call, and encodes
// the envelope; the pipeline is the core's.
//
// The SDK owns the transport and the protocol: JSON-RPC framing, version
// negotiation (initialize for 2025-11-25 and older, per-request _meta and
// server/discover for 2026-07-28), the 2026-07-28 routing headers
// (MCP-Protocol-Version, Mcp-Method, Mcp-Name) and their header/body
// mismatch error (-32020, HTTP 400), and the shape of every result,
// resultType included. toolgate adds around it:
//
//   - one SDK server per policy snapshot (per View), with every tool of
//     the snapshot registered as an SDK tool whose handler is View.Call:
//     the SDK's own tool machinery writes each tools/call result, so the
//     result is what the negotiated revision requires; a middleware filters
//     tools/list by the caller of the HTTP request and answers unknown
//     tools through the same finish (same metrics and log line as the
//     HTTP front). A request is served by the server of the View taken
//     when it arrived, so a reload never changes it midway;
//   - a stateless handler: there is no Mcp-Session-Id, any replica serves
//     any request, and policy reloads need no session bookkeeping;
//   - the agent port's Host and Origin checks (proxy.BrowserGuard), a
//     request body bound derived from server.max_request_bytes, and
//     JSON-RPC error bodies for every refusal (http.go);
//   - a fast path for the plainest tools/call, which answers the SDK's
//     bytes without the SDK (fast.go, fast_encode.go).
package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/toolformats"
)

// Options tune the MCP front. The zero value is a complete configuration.
type Options struct {
	// AllowedOrigins are browser origins ("https://agents.example.com",
	// scheme://host[:port]) accepted in the Origin header besides those of
	// server.allowed_origins, the request's own host and loopback hosts.
	// Requests without an Origin header (every non-browser client) are
	// always accepted.
	AllowedOrigins []string
	// Instructions are sent to clients on initialize and server/discover;
	// empty means DefaultInstructions.
	Instructions string
}

// DefaultInstructions tells a model how to read toolgate's results.
const DefaultInstructions = "Every tool answers with one text: the observation. Its first line is [STATUS] and one " +
	"sentence saying what happened and what to do; data follows as JSON, cut to a bound when long. STATUS is one of " +
	"OK, EMPTY, BAD_ARGS, FORBIDDEN, NOT_FOUND, TIMEOUT, UPSTREAM; EMPTY means the call succeeded and found nothing. " +
	"structuredContent repeats status, retryable, retry_after_ms, side_effect and replayed as fields. Retry an " +
	"identical call only when retryable is true, after retry_after_ms when given. Tools with a side effect require " +
	"an idempotency_key argument: use a new key for each new action and the same key only to retry that action; it " +
	"runs at most once per key."

// Revisions returns the MCP protocol revisions toolgate serves, newest
// first: every revision the SDK implements, each tested with the clients
// that speak it (docs/interfaces.md, "MCP").
func Revisions() []string {
	return []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}
}

// requestOverhead is what a JSON-RPC message may add around the tool
// arguments (method, id, name, _meta with client info and capabilities)
// on top of server.max_request_bytes.
const requestOverhead = 64 << 10

// Output is the structuredContent of every tools/call result: the
// envelope's fields a program acts on. The model reads the text block,
// which is the envelope's observation; data, message and observation are
// left out here because clients such as LangChain's MCP adapter hand
// structuredContent to the model as well, and the observation is the one
// bounded text (server.observation_max_chars) meant for it. Its schema is
// toolformats.MCPOutputSchema, every tool's outputSchema.
type Output struct {
	Status       contracts.Status     `json:"status"`
	Retryable    bool                 `json:"retryable"`
	RetryAfterMS int64                `json:"retry_after_ms,omitempty"`
	SideEffect   contracts.SideEffect `json:"side_effect"`
	Replayed     bool                 `json:"replayed"`
	Cost         float64              `json:"cost"`
	Tool         string               `json:"tool"`
	CallID       string               `json:"call_id"`
}

// OutputOf is the structuredContent of a result with envelope env.
func OutputOf(env *contracts.Envelope) *Output {
	return &Output{
		Status:       env.Status,
		Retryable:    env.Retryable,
		RetryAfterMS: env.RetryAfterMS,
		SideEffect:   env.SideEffect,
		Replayed:     env.Replayed,
		Cost:         env.Cost,
		Tool:         env.Tool,
		CallID:       env.CallID,
	}
}

// Handler returns the MCP endpoint (Streamable HTTP, POST only) of core.
// Mount it at /mcp on the agent listener (Front). It reads the policy
// snapshot per request, so one handler serves across reloads.
func Handler(core *proxy.Core, opts Options) http.Handler {
	return http.HandlerFunc(newFront(core, opts).serveHTTP)
}

// Front is the MCP endpoint of core as a front of the agent port, for
// core.Handler: at /mcp, for every method (the SDK answers GET and DELETE
// with 405).
func Front(core *proxy.Core, opts Options) proxy.Front {
	return proxy.Front{Pattern: "/mcp", Handler: Handler(core, opts)}
}

func newFront(c *proxy.Core, opts Options) *front {
	f := &front{core: c, guard: proxy.NewBrowserGuard(opts.AllowedOrigins), instructions: opts.Instructions}
	if f.instructions == "" {
		f.instructions = DefaultInstructions
	}
	f.logger = slog.New(sdkLogHandler{c.Logger().Handler()}).With("front", "mcp")
	f.sdk = mcp.NewStreamableHTTPHandler(f.server, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true, // one answer per call: no progress or log notifications to stream
		Logger:       f.logger,
		// serveHTTP bounds the body by the policy's current limit.
		MaxRequestBodyBytes: -1,
		// serveHTTP checks Host and Origin itself (the same loopback Host
		// rule and more), so the rules live in one place.
		DisableLocalhostProtection:   true,
		PropagateRequestCancellation: true,
	})
	return f
}

// sdkLogHandler passes the SDK's warnings and errors to toolgate's log. Its
// info lines (connecting, connected, disconnected: three per request on a
// stateless server) would drown the call lines, and the errors it logs for
// a client's mistakes are not toolgate's errors: those go to debug.
type sdkLogHandler struct{ slog.Handler }

// sdkClientMistake reports whether the SDK logged msg at error level
// because a client sent something the protocol does not allow; the client
// gets a JSON-RPC error for it.
func sdkClientMistake(msg string) bool {
	switch msg {
	case "method removed in the new protocol", // initialize, ping, logging/setLevel... under 2026-07-28
		"method invalid during initialization":
		return true
	}
	return false
}

func (h sdkLogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn && h.Handler.Enabled(ctx, level)
}

func (h sdkLogHandler) Handle(ctx context.Context, rec slog.Record) error {
	if sdkClientMistake(rec.Message) {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		rec.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, rec)
}

func (h sdkLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return sdkLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h sdkLogHandler) WithGroup(name string) slog.Handler {
	return sdkLogHandler{h.Handler.WithGroup(name)}
}

// front adapts MCP requests to View.Call.
type front struct {
	core         *proxy.Core
	sdk          http.Handler
	guard        *proxy.BrowserGuard
	instructions string
	logger       *slog.Logger
	current      atomic.Pointer[server]

	sdkOnly   bool         // tests: every message goes to the SDK (fast.go)
	fastCalls atomic.Int64 // tests: calls answered by the fast path
}

// server is the SDK server of one policy snapshot: every tool of the
// snapshot is registered on it, so the SDK validates, routes and shapes
// tools/call exactly as for a server written with it. Its calls run on its
// view.
type server struct {
	f      *front
	view   proxy.View
	server *mcp.Server
	tools  map[string]bool // the tools registered with the SDK
	// headerBound are the tools whose input schema mentions x-mcp-header:
	// from 2026-07-28 the SDK checks their Mcp-Param-* headers, so their
	// calls of that revision go to the SDK (fast.go).
	headerBound map[string]bool
	// resultMeta is the _meta the SDK adds to every result from
	// 2026-07-28 on (the server's name and version), as it writes it.
	resultMeta []byte
}

// viewKey carries the View serveHTTP took for a request to the SDK's
// choice of server.
type viewKey struct{}

// server returns the SDK server of the request's view, building it on the
// first request after a reload. Two requests racing after a reload may
// both build one; either serves.
func (f *front) server(r *http.Request) *mcp.Server {
	v, ok := r.Context().Value(viewKey{}).(proxy.View)
	if !ok {
		v = f.core.View()
	}
	return f.serverOf(v).server
}

// serverOf returns the SDK server of view v.
func (f *front) serverOf(v proxy.View) *server {
	if s := f.current.Load(); s != nil && s.view == v {
		return s
	}
	s := f.build(v)
	f.current.Store(s)
	return s
}

func (f *front) build(v proxy.View) *server {
	snap := v.Policy()
	s := &server{f: f, view: v, tools: make(map[string]bool, len(snap.ToolNames)), headerBound: map[string]bool{}}
	impl := &mcp.Implementation{Name: "toolgate", Version: f.core.Version()}
	s.resultMeta = resultMetaOf(impl)
	s.server = mcp.NewServer(impl, &mcp.ServerOptions{
		Instructions: f.instructions,
		Logger:       f.logger,
		// Tools only; the list can change on reload, but a stateless
		// server has no stream to announce it on (clients re-list: every
		// list is sent with ttlMs 0).
		Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		SupportedProtocolVersions: Revisions(),
	})
	s.server.AddReceivingMiddleware(s.middleware)
	for _, name := range snap.ToolNames {
		s.register(snap.Tools[name])
	}
	return s
}

// register adds a contract as an SDK tool. The SDK refuses (panics on) an
// input schema it cannot serve, such as a malformed x-mcp-header
// annotation; such a tool is left out of MCP, with an error in the log,
// and stays callable on the HTTP front.
func (s *server) register(ct *contracts.Contract) {
	defer func() {
		if p := recover(); p != nil {
			s.f.logger.Error("tool left out of MCP", "tool", ct.Name, "error", fmt.Sprint(p))
		}
	}()
	t := Tool(ct)
	s.server.AddTool(t, s.call)
	s.tools[ct.Name] = true
	if schema, err := json.Marshal(t.InputSchema); err != nil || bytes.Contains(schema, []byte("x-mcp-header")) {
		s.headerBound[ct.Name] = true
	}
}

// resultMetaOf is the _meta of a result of server impl from 2026-07-28 on,
// as the SDK writes it: the SDK sets it to {serverInfo: impl} and
// CallToolResult.MarshalJSON writes it with json.Marshal.
func resultMetaOf(impl *mcp.Implementation) []byte {
	b, err := json.Marshal(mcp.Meta{mcp.MetaKeyServerInfo: impl})
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	return b
}

// unadvertised reports whether method belongs to a capability toolgate does
// not declare (it declares only tools).
func unadvertised(method string) bool {
	switch method {
	case "resources/list", "resources/templates/list", "resources/read", "resources/subscribe", "resources/unsubscribe",
		"prompts/list", "prompts/get", "completion/complete", "logging/setLevel":
		return true
	}
	return false
}

// middleware filters tools/list by caller, runs unknown tools through the
// core, and refuses methods of capabilities toolgate does not declare
// where the revision says so; everything else goes to the SDK.
func (s *server) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch r := req.(type) {
		case *mcp.ListToolsRequest:
			res, err := next(ctx, method, req)
			if list, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				return s.filter(list, requestHeader(req)), nil
			}
			return res, err
		case *mcp.CallToolRequest:
			if r.Params == nil || r.Params.Name == "" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call needs params.name: the name of one of the listed tools"}
			}
			if s.view.Policy().Tools[r.Params.Name] == nil {
				return nil, s.unknownTool(ctx, r)
			}
		}
		// Since 2026-07-28 a method behind a capability the server did
		// not advertise is "method not found"; earlier revisions leave
		// it open, and the SDK's empty answers are true for toolgate.
		if unadvertised(method) && requestRevision(req) >= "2026-07-28" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("%s is not available: toolgate serves tools only", method)}
		}
		return next(ctx, method, req)
	}
}

// unknownTool counts a call of a tool the snapshot does not have as
// not_found, like the HTTP front, and answers it as a JSON-RPC error.
func (s *server) unknownTool(ctx context.Context, req *mcp.CallToolRequest) error {
	h := requestHeader(req)
	res := s.view.UnknownTool(ctx, &proxy.Request{
		Tool:     req.Params.Name,
		Caller:   s.view.Identify(h),
		CallID:   h.Get("X-Request-Id"),
		Front:    "mcp",
		LogAttrs: logAttrs(req.ProtocolVersion()),
		Header:   h,
	})
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: res.Envelope.Message}
}

func logAttrs(revision string) []slog.Attr {
	return []slog.Attr{
		slog.String("mcp_method", "tools/call"),
		slog.String("mcp_protocol_version", revision),
	}
}

// requestRevision is the protocol revision of a request, "" when unknown.
func requestRevision(req mcp.Request) string {
	if r, ok := req.(interface{ ProtocolVersion() string }); ok {
		return r.ProtocolVersion()
	}
	return ""
}

// filter keeps the tools the caller of this HTTP request may use. The list
// depends on the caller and changes on reload, so it is private and never
// fresh for long.
func (s *server) filter(list *mcp.ListToolsResult, h http.Header) *mcp.ListToolsResult {
	snap := s.view.Policy()
	caller := s.view.Identify(h)
	out := *list
	out.Tools = make([]*mcp.Tool, 0, len(list.Tools))
	for _, t := range list.Tools {
		if snap.Access.Allows(caller, t.Name) {
			out.Tools = append(out.Tools, t)
		}
	}
	out.Cacheable = mcp.Cacheable{TTLMs: 0, CacheScope: "private"}
	return &out
}

// Tool is a contract as an SDK tool: toolformats.MCPToolOf, the entry
// GET /v1/tools?format=mcp shows too.
func Tool(ct *contracts.Contract) *mcp.Tool {
	t := toolformats.MCPToolOf(ct)
	return &mcp.Tool{
		Name:         t.Name,
		Description:  t.Description,
		InputSchema:  t.InputSchema,
		OutputSchema: t.OutputSchema,
		Annotations: &mcp.ToolAnnotations{
			ReadOnlyHint:    t.Annotations.ReadOnlyHint,
			DestructiveHint: new(t.Annotations.DestructiveHint),
			IdempotentHint:  t.Annotations.IdempotentHint,
		},
	}
}

// call is the SDK tool handler of every contract: it runs tools/call
// through the core. Every outcome is a tool result: one text block, the
// observation, for the model; Output as structuredContent; isError for
// anything but ok and empty.
func (s *server) call(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	tp, ts := req.Params.Meta["traceparent"], req.Params.Meta["tracestate"]
	return result(s.callTool(ctx, requestHeader(req), req.Params.Name, req.Params.Arguments, tp, ts, req.ProtocolVersion())), nil
}

// result is the tools/call result of envelope env (the fast path writes
// the same JSON without building it: fast_encode.go).
func result(env *contracts.Envelope) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: env.Observation}},
		StructuredContent: OutputOf(env),
		IsError:           !env.Status.Success(),
	}
}

// callTool runs a tools/call of tool name with arguments args (raw JSON as
// sent; nil when absent) through the core: for the SDK's handler and for
// the fast path (fast.go). tp and ts are _meta's traceparent and
// tracestate, revision the request's protocol revision. It returns the
// result's envelope.
func (s *server) callTool(ctx context.Context, h http.Header, name string, args []byte, tp, ts any, revision string) *contracts.Envelope {
	return &s.view.Call(ctx, s.request(h, name, args, tp, ts, revision)).Envelope
}

// request is the Request of a tools/call. Out of line, with the Request
// on the heap: the call runs on the stack below, which it would weigh on.
//
//go:noinline
func (s *server) request(h http.Header, name string, args []byte, tp, ts any, revision string) *proxy.Request {
	v := s.view
	if args == nil || string(args) == "null" {
		args = []byte{} // no arguments: the empty object
	}
	args = v.NullArgs(name, args)
	// MCP carries the W3C trace context in _meta (clients without headers),
	// otherwise in the HTTP request's headers. An invalid _meta value does
	// not replace the headers' (the core drops invalid ones either way).
	traceparent, tracestate := h.Get("Traceparent"), h.Get("Tracestate")
	if tp, ok := tp.(string); ok && proxy.ValidTraceParent(tp) {
		traceparent = tp
		tracestate, _ = ts.(string)
	}
	return &proxy.Request{
		TraceParent: traceparent,
		TraceState:  tracestate,
		Tool:        name,
		// Raw bytes, so size limits and strict parsing (duplicate keys,
		// exact numbers) apply exactly as on the HTTP front.
		Body:     args,
		Caller:   v.Identify(h),
		CallID:   h.Get("X-Request-Id"),
		Front:    "mcp",
		LogAttrs: logAttrs(revision),
		Header:   h,
	}
}

// requestHeader is the header of the HTTP request that carried an MCP
// message; the caller is identified from it as on the HTTP front.
func requestHeader(req mcp.Request) http.Header {
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		return extra.Header
	}
	return http.Header{}
}
