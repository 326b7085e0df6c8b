package proxy

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// Handler returns the agent-facing HTTP handler: POST /v1/tools/{tool},
// GET /v1/tools, /mcp and, in transparent mode, the tools' own routes. It
// never serves an admin path. Every route refuses browser requests from
// other sites and foreign Host names (crossorigin.go); the guard takes the
// request's View, which the route then serves it on.
func (c *Core) Handler() http.Handler {
	g := newBrowserGuard(c, nil)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/tools/{tool}", g.guard(c.serveCall))
	mux.Handle("GET /v1/tools", g.guard(serveList))
	// "/mcp" without a method: the SDK answers GET and DELETE with 405.
	// The MCP handler checks Host and Origin itself, to refuse in JSON-RPC.
	mux.Handle("/mcp", c.MCPHandler(MCPOptions{}))
	mux.Handle("/", g.guard(c.serveOther))
	return mux
}

// serveCall is the tool endpoint: the body is the arguments object, the
// headers carry the caller, the key, the call id and the trace context.
func (c *Core) serveCall(w http.ResponseWriter, r *http.Request, v View) {
	snap := v.st.snap
	tool := r.PathValue("tool")
	req := requestFrom(r, v, tool, "http")
	// The body is only read while the call runs (arguments are decoded into
	// their own strings), so its buffer goes back to the pool after.
	p := inPool.Get().(*[]byte)
	defer putIn(p)
	body, tooLarge, err := readRequestBody(r, snap.Server.MaxRequestBytes, p)
	switch {
	case err != nil:
		// The client went away or sent a broken body (a truncated chunked
		// stream): the call must not run on part of its arguments, and
		// the connection must not be reused.
		w.Header().Set("Connection", "close")
		req.Invalid = &contracts.ArgError{Problem: contracts.ProblemIncomplete}
	case !jsonBody(r):
		// A body a web page can send without asking first (text/plain, a
		// form) is not a call: nothing runs, the answer is 415.
		got, _ := json.Marshal(mediaType(r))
		req.Invalid = &contracts.ArgError{Problem: contracts.ProblemMediaType, Got: string(got)}
		w = statusRewriter{ResponseWriter: w, from: http.StatusBadRequest, to: http.StatusUnsupportedMediaType}
	default:
		body = nullArgs(snap.Tools[tool], body)
	}
	req.Body, req.BodyTooLarge = body, tooLarge
	if body == nil {
		req.Body = []byte{} // no body: no arguments
	}
	writeResult(w, v.Call(r.Context(), req))
}

// requestFrom is the Request of an HTTP request (the tool endpoint, a
// transparent route): the caller, call id, idempotency key and trace
// context from its headers; the arguments are the front's to add.
func requestFrom(r *http.Request, v View, tool, front string) *Request {
	return &Request{
		Tool:           tool,
		Caller:         v.Identify(r.Header),
		CallID:         r.Header.Get("X-Request-Id"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Front:          front,
		TraceParent:    r.Header.Get("Traceparent"),
		TraceState:     r.Header.Get("Tracestate"),
		Header:         r.Header,
	}
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
func mediaType(r *http.Request) string { return headerMediaType(r.Header) }

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

// ToolInfo is one entry of GET /v1/tools, in the shape function-calling
// APIs take.
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	SideEffect  bool            `json:"side_effect"`
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
func serveList(w http.ResponseWriter, r *http.Request, v View) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	snap := v.st.snap
	caller := v.Identify(r.Header)
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
func (c *Core) serveOther(w http.ResponseWriter, r *http.Request, v View) {
	if v.st.snap.Server.Transparent {
		c.serveTransparent(w, r, v)
		return
	}
	serveNoRoute(w, r, v)
}

func serveNoRoute(w http.ResponseWriter, r *http.Request, v View) {
	res := v.NoRoute(r.Context(), &Request{
		Caller: v.Identify(r.Header),
		CallID: r.Header.Get("X-Request-Id"),
		Front:  "http",
	}, r.Method, r.URL.Path)
	writeResult(w, res)
}
