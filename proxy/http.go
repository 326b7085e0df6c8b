package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// Handler returns the agent-facing HTTP handler: POST /v1/tools/{tool},
// GET /v1/tools, /mcp and, in transparent mode, the tools' own routes. It
// never serves an admin path. Every route refuses browser requests from
// other sites and foreign Host names (crossorigin.go).
func (c *Core) Handler() http.Handler {
	g := newBrowserGuard(c, nil)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/tools/{tool}", g.guard(http.HandlerFunc(c.serveCall)))
	mux.Handle("GET /v1/tools", g.guard(http.HandlerFunc(c.serveList)))
	// "/mcp" without a method: the SDK answers GET and DELETE with 405.
	// The MCP handler checks Host and Origin itself, to refuse in JSON-RPC.
	mux.Handle("/mcp", c.MCPHandler(MCPOptions{}))
	mux.Handle("/", g.guard(http.HandlerFunc(c.serveOther)))
	return mux
}

// outPool recycles the buffers envelopes are rendered into.
var outPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func (c *Core) serveCall(w http.ResponseWriter, r *http.Request) {
	snap := c.Snapshot()
	// The body is only read while the call runs (arguments are decoded into
	// their own strings), so its buffer goes back to the pool after.
	p := inPool.Get().(*[]byte)
	defer putIn(p)
	body, tooLarge, err := readRequestBody(r, snap.Server.MaxRequestBytes, p)
	var invalid error
	switch {
	case err != nil:
		// The client went away or sent a broken body (a truncated chunked
		// stream): the call must not run on part of its arguments, and
		// the connection must not be reused.
		w.Header().Set("Connection", "close")
		invalid = &contracts.ArgError{Problem: contracts.ProblemIncomplete}
	case !jsonBody(r):
		// A body a web page can send without asking first (text/plain, a
		// form) is not a call: nothing runs, the answer is 415.
		got, _ := json.Marshal(mediaType(r))
		invalid = &contracts.ArgError{Problem: contracts.ProblemMediaType, Got: string(got)}
		w = statusRewriter{ResponseWriter: w, from: http.StatusBadRequest, to: http.StatusUnsupportedMediaType}
	}
	tool := r.PathValue("tool")
	if invalid == nil {
		body = nullArgs(snap.Tools[tool], body)
	}
	req := &Request{
		Invalid:        invalid,
		Tool:           tool,
		Body:           body,
		BodyTooLarge:   tooLarge,
		Caller:         c.Identify(r.Header),
		CallID:         r.Header.Get("X-Request-Id"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Front:          "http",
		TraceParent:    r.Header.Get("Traceparent"),
		TraceState:     r.Header.Get("Tracestate"),
	}
	if body == nil {
		req.Body = []byte{} // no body: no arguments
	}
	res := c.Call(r.Context(), req)
	c.writeResult(w, snap, res)
}

// jsonBody reports whether a call's body may be read as JSON: its
// Content-Type is application/json or a +json type. A client that is not a
// browser (no Origin or Sec-Fetch-* header) may also send no type, or
// application/x-www-form-urlencoded, which is what curl -d sends.
func jsonBody(r *http.Request) bool {
	mt := mediaType(r)
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		return true
	}
	browser := r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Sec-Fetch-Mode") != ""
	return !browser && (mt == "" || mt == "application/x-www-form-urlencoded")
}

// mediaType is the essence of the request's Content-Type (type/subtype in
// lower case, parameters dropped), as a browser judges it when it decides
// whether a request needs a preflight; "" without the header.
func mediaType(r *http.Request) string {
	v, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(v))
}

// statusRewriter writes status to instead of from: the envelope stays the
// core's, the status says more (415 for a body that is not JSON).
type statusRewriter struct {
	http.ResponseWriter
	from, to int
}

func (w statusRewriter) WriteHeader(code int) {
	if code == w.from {
		code = w.to
	}
	w.ResponseWriter.WriteHeader(code)
}

// writeResult encodes a result as the HTTP answer.
func (c *Core) writeResult(w http.ResponseWriter, snap *policy.Snapshot, res *Result) {
	h := w.Header()
	// Constant values share their slices: the server only reads them.
	h["Content-Type"] = headerJSON
	h["Toolgate-Status"] = statusHeader(res.Envelope.Status)
	h["Cache-Control"] = headerNoStore
	if res.Envelope.Replayed {
		h["Idempotent-Replayed"] = headerTrue
	}
	code := http.StatusOK
	if snap.Server.HTTPStatus != policy.HTTPStatusAlways200 {
		var retryAfter bool
		code, retryAfter = contracts.MappedHTTP(res.Reason, res.Envelope.Status, res.RetryLater)
		if retryAfter {
			h.Set("Retry-After", contracts.RetryAfterHeader(res.Envelope.RetryAfterMS))
		}
	}
	p := outPool.Get().(*[]byte)
	b := res.Envelope.AppendJSON((*p)[:0])
	b = append(b, '\n')
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
	if cap(b) <= 64<<10 {
		*p = b[:0] // keep the grown array for the next call
		outPool.Put(p)
	}
}

var (
	headerJSON    = []string{"application/json"}
	headerNoStore = []string{"no-store"}
	headerTrue    = []string{"true"}
	statusHeaders = func() map[contracts.Status][]string {
		m := map[contracts.Status][]string{}
		for _, st := range contracts.Statuses() {
			m[st] = []string{string(st)}
		}
		return m
	}()
)

func statusHeader(st contracts.Status) []string {
	if v, ok := statusHeaders[st]; ok {
		return v
	}
	return []string{string(st)}
}

// ToolInfo is one entry of GET /v1/tools, in the shape function-calling
// APIs take.
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	SideEffect  bool            `json:"side_effect"`
}

// Tools lists the tools caller may use, sorted by name.
func (c *Core) Tools(caller string) []ToolInfo {
	snap := c.Snapshot()
	return ToolList(snap, func(name string) bool { return snap.Access.Allows(caller, name) })
}

// ToolList lists the tools of snap that allow accepts, sorted by name.
func ToolList(snap *policy.Snapshot, allow func(name string) bool) []ToolInfo {
	out := make([]ToolInfo, 0, len(snap.ToolNames))
	for _, name := range snap.ToolNames {
		if !allow(name) {
			continue
		}
		ct := snap.Tools[name]
		out = append(out, ToolInfo{Name: name, Description: ct.Description, Parameters: ct.PublishedSchema(), SideEffect: ct.SideEffect})
	}
	return out
}

// serveList answers GET /v1/tools: the tools the caller may use, in
// toolgate's shape or, with ?format=, in the shape of a model API
// (toolformats.go).
func (c *Core) serveList(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	snap := c.Snapshot()
	caller := c.Identify(r.Header)
	allow := func(name string) bool { return snap.Access.Allows(caller, name) }
	format := r.URL.Query().Get("format")
	if format == "" {
		_ = json.NewEncoder(w).Encode(map[string]any{"tools": ToolList(snap, allow)})
		return
	}
	tools, left, err := ToolListIn(snap, allow, format)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	answer := map[string]any{"tools": tools}
	if len(left) > 0 {
		answer["left_out"] = left
	}
	_ = json.NewEncoder(w).Encode(answer)
}

// serveOther takes every request that is not the tool API: a legacy route
// in transparent mode, otherwise a not_found envelope.
func (c *Core) serveOther(w http.ResponseWriter, r *http.Request) {
	if c.Snapshot().Server.Transparent {
		c.serveTransparent(w, r)
		return
	}
	c.serveNoRoute(w, r)
}

func (c *Core) serveNoRoute(w http.ResponseWriter, r *http.Request) {
	snap := c.Snapshot()
	res := c.NoRoute(r.Context(), &Request{
		Caller: c.Identify(r.Header),
		CallID: r.Header.Get("X-Request-Id"),
		Front:  "http",
	}, r.Method, r.URL.Path)
	c.writeResult(w, snap, res)
}

// NoRoute answers a request whose method and (unescaped) path are no
// route: a not_found envelope that names no tool, with a message that
// names what was asked for. Every front answers an unknown route with it.
func (c *Core) NoRoute(ctx context.Context, req *Request, method, path string) *Result {
	asked := *req
	asked.Tool = ""
	return c.withoutTool(ctx, &asked, routeLabel(method, path), contracts.Reject(contracts.ReasonUnknownTool))
}

// withoutTool makes the envelope for a request that never reached a tool (an
// unknown route or tool, a refused browser request), through the same
// finish as every call: counted as tool "unknown" and logged. The message
// names what was asked for (named: a tool name, or a method and path); the
// envelope's tool is req.Tool, empty when no tool name was called.
func (c *Core) withoutTool(ctx context.Context, req *Request, named string, o contracts.Outcome) *Result {
	st := c.state.Load()
	asked := *req
	asked.Tool = named
	cl := &call{st: st, req: &asked, start: c.now(), callID: callID(req.CallID)}
	cl.caller = st.snap.Access.CallerLabel(req.Caller)
	res := c.finish(ctx, cl, o)
	res.Envelope.Tool = req.Tool
	return res
}

// Identify resolves the caller of a request from its headers, by the
// policy's caller_header.
func (c *Core) Identify(h http.Header) string {
	snap := c.Snapshot()
	return snap.Access.Identify(snap.Server, h)
}
