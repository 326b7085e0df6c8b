package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// Handler returns the agent-facing HTTP handler: POST /v1/tools/{tool} and
// GET /v1/tools. It never serves an admin path.
func (c *Core) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tools/{tool}", c.serveCall)
	mux.HandleFunc("GET /v1/tools", c.serveList)
	// "/mcp" without a method: the SDK answers GET and DELETE with 405.
	mux.Handle("/mcp", c.MCPHandler(MCPOptions{}))
	mux.HandleFunc("/", c.serveOther)
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
	body, tooLarge, err := readRequestBodyInto(r, snap.Server.MaxRequestBytes, p)
	var invalid error
	if err != nil {
		// The client went away or sent a broken body (a truncated chunked
		// stream): the call must not run on part of its arguments, and
		// the connection must not be reused.
		w.Header().Set("Connection", "close")
		invalid = &contracts.ArgError{Problem: contracts.ProblemIncomplete}
	}
	req := &Request{
		Invalid:        invalid,
		Tool:           r.PathValue("tool"),
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

// inPool recycles request body buffers.
var inPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func putIn(p *[]byte) {
	if cap(*p) <= 64<<10 {
		*p = (*p)[:0]
		inPool.Put(p)
	}
}

// readRequestBodyInto is readRequestBody into a pooled buffer.
func readRequestBodyInto(r *http.Request, limit int64, p *[]byte) ([]byte, bool, error) {
	if r.ContentLength > limit {
		return nil, true, nil
	}
	b, err := readBody(r.Body, limit, r.ContentLength, p)
	switch {
	case errors.Is(err, errBodyTooLarge):
		return nil, true, nil
	case err != nil:
		return nil, false, err
	}
	return b, false, nil
}

// readRequestBody reads at most limit bytes. The size is found by reading,
// not by trusting Content-Length; a declared length over the limit is
// refused without reading.
func readRequestBody(r *http.Request, limit int64) ([]byte, bool, error) {
	if r.ContentLength > limit {
		return nil, true, nil
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 512), limit+1)))
	n, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, false, err
	}
	if n > limit {
		return nil, true, nil
	}
	return buf.Bytes(), false, nil
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

func (c *Core) serveList(w http.ResponseWriter, r *http.Request) {
	tools := c.Tools(c.Identify(r.Header))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"tools": tools})
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
	o := contracts.Reject(contracts.ReasonUnknownTool)
	res := c.render(r, o)
	c.writeResult(w, snap, res)
}

// render makes the envelope for a request that never reached a tool
// (an unknown route), through the same finish as every call.
func (c *Core) render(r *http.Request, o contracts.Outcome) *Result {
	st := c.state.Load()
	cl := &call{st: st, req: &Request{Tool: "", Front: "http"}, start: c.now(), callID: callID(r.Header.Get("X-Request-Id"))}
	cl.caller = st.snap.Access.CallerLabel(c.Identify(r.Header))
	return c.finish(r.Context(), cl, o)
}

// Identify resolves the caller of a request from its headers, by the
// policy's caller_header.
func (c *Core) Identify(h http.Header) string {
	snap := c.Snapshot()
	return snap.Access.Identify(snap.Server, h)
}
