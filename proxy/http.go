package proxy

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/proxy/toolformats"
)

// Front is a front of the agent port with a package of its own, which
// Handler mounts at Pattern (a ServeMux pattern): package proxy/mcpfront's
// endpoint at /mcp. It runs calls through the View API as the HTTP front
// does, and checks Host and Origin itself (BrowserGuard), to refuse in its
// own protocol.
type Front struct {
	Pattern string
	Handler http.Handler
}

// Handler returns the agent-facing HTTP handler: POST /v1/tools/{tool},
// GET /v1/tools, the fronts (cmd/toolgate mounts the MCP front at /mcp)
// and, in transparent mode, the tools' own routes. It never serves an
// admin path. Every route refuses browser requests from other sites and
// foreign Host names (crossorigin.go); the guard takes the request's View,
// which the route then serves it on.
func (c *Core) Handler(fronts ...Front) http.Handler {
	g := NewBrowserGuard(nil)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/tools/{tool}", c.guarded(g, c.serveCall))
	mux.Handle("GET /v1/tools", c.guarded(g, serveList))
	for _, f := range fronts {
		mux.Handle(f.Pattern, f.Handler)
	}
	mux.Handle("/", c.guarded(g, c.serveOther))
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
	body, tooLarge, err := boundedio.ReadHTTPBody(r, snap.Server.MaxRequestBytes, p)
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
		// (Result.head answers it with 415.)
		got, _ := json.Marshal(mediaType(r))
		req.Invalid = &contracts.ArgError{Problem: contracts.ProblemMediaType, Got: string(got)}
	default:
		body = v.NullArgs(tool, body)
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
		CallID:         headerValue(r.Header, headerRequestID),
		IdempotencyKey: headerValue(r.Header, headerIdempotencyKey),
		Front:          front,
		TraceParent:    headerValue(r.Header, headerTraceParent),
		TraceState:     headerValue(r.Header, headerTraceState),
		Header:         r.Header,
	}
}

// The names of the request and answer headers read (or written) on every
// call, in canonical form (TestHeaderNamesAreCanonical), for headerValue.
const (
	headerRequestID      = "X-Request-Id"
	headerIdempotencyKey = "Idempotency-Key"
	headerTraceParent    = "Traceparent"
	headerTraceState     = "Tracestate"
	headerOrigin         = "Origin"
	headerSecFetchSite   = "Sec-Fetch-Site"
	headerSecFetchMode   = "Sec-Fetch-Mode"
	headerContentType    = "Content-Type"
	headerRetryAfter     = "Retry-After"
	headerContentLength  = "Content-Length"
)

// headerValue is h.Get(name) for a name in canonical form: the first
// value of the header, or "". h.Get canonicalizes the name it is given on
// every call, which was most of what reading a call's headers cost; a
// constant name needs it once, when it is written.
func headerValue(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
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
	browser := headerValue(r.Header, headerOrigin) != "" || headerValue(r.Header, headerSecFetchSite) != "" ||
		headerValue(r.Header, headerSecFetchMode) != ""
	return !browser && (mt == "" || mt == "application/x-www-form-urlencoded")
}

// mediaType is the essence of the request's Content-Type (type/subtype in
// lower case, parameters dropped), as a browser judges it when it decides
// whether a request needs a preflight; "" without the header.
func mediaType(r *http.Request) string { return headerMediaType(r.Header) }

// serveList answers GET /v1/tools: the tools the caller may use, in
// toolgate's shape or, with ?format=, in the shape of a model API
// (package toolformats).
func serveList(w http.ResponseWriter, r *http.Request, v View) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	snap := v.st.snap
	caller := v.Identify(r.Header)
	allow := func(name string) bool { return snap.Access.Allows(caller, name) }
	format := r.URL.Query().Get("format")
	if format == "" {
		_ = json.NewEncoder(w).Encode(map[string]any{"tools": toolformats.List(snap, allow)})
		return
	}
	tools, left, err := toolformats.ListIn(snap, allow, format)
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
		CallID: headerValue(r.Header, headerRequestID),
		Front:  "http",
	}, r.Method, r.URL.Path)
	writeResult(w, res)
}
