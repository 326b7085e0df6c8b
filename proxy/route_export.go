package proxy

import (
	"net/http"
)

// This file is the surface a front end in another package (the Envoy
// external processor) needs on top of Begin and Pending: the legacy route
// table of transparent mode, argument extraction, and the HTTP encoding of
// a result. Each function is a thin wrapper, so every front end matches
// routes, extracts arguments and renders answers with the same code.

// LegacyRoute is the tool a legacy request (method and escaped path) is a
// call of, under the policy new calls run on.
type LegacyRoute struct {
	Tool string
	// PathValues are the placeholder values of the path, unescaped.
	PathValues map[string]string
	// HasBody says the tool sends a body, whose members the legacy
	// request carries: its arguments are complete only with the body.
	HasBody bool
}

// MatchRoute returns the tool whose request route method and escapedPath
// take, as transparent mode matches it. ok is false when no tool's route
// matches. A policy loaded for a front that identifies calls by route
// (config.Options.ByRoute, or server.transparent) has no ambiguous routes:
// config refuses them, so at most one tool's route is the most specific.
func (c *Core) MatchRoute(method, escapedPath string) (route LegacyRoute, ok bool) {
	t, vals := c.state.Load().router.match(method, escapedPath)
	if t == nil {
		return LegacyRoute{}, false
	}
	return LegacyRoute{Tool: t.contract.Name, PathValues: vals, HasBody: t.contract.Binding.HasBody()}, true
}

// PassthroughUpstream returns the upstream of the server.passthrough prefix
// that an escaped request path falls under, exactly as transparent mode
// decides it: the longest prefix wins, and a path with an encoded dot,
// slash or backslash, a backslash or a dot segment is never passed through.
func (c *Core) PassthroughUpstream(escapedPath string) (upstream string, ok bool) {
	if p := c.state.Load().router.passthroughFor(escapedPath); p != nil {
		return p.upstream, true
	}
	return "", false
}

// ExtractArgs builds the arguments of a call of tool from a legacy request:
// the path placeholder values, the raw query, the headers (by canonical
// name) and the body, exactly as transparent mode does. An error is the
// bad_args cause to put in Request.Invalid; an unknown tool has no
// arguments.
func (c *Core) ExtractArgs(tool string, pathValues map[string]string, rawQuery string, header http.Header, body []byte) (map[string]any, error) {
	ct := c.Snapshot().Tools[tool]
	if ct == nil {
		return nil, nil
	}
	return extractArgs(ct, pathValues, rawQuery, header, body)
}

// Rendered is a result encoded as the HTTP front writes it.
type Rendered struct {
	Code   int
	Header http.Header
	// Body is the envelope as JSON with a trailing newline.
	Body []byte
}

// Render encodes res exactly as the HTTP front answers it: the status by
// server.http_status, the headers (Content-Type, Toolgate-Status,
// Cache-Control, Idempotent-Replayed, Retry-After, Content-Length) and the
// body.
func (c *Core) Render(res *Result) Rendered {
	rec := &renderRecorder{header: http.Header{}}
	c.writeResult(rec, c.Snapshot(), res)
	return Rendered{Code: rec.code, Header: rec.header, Body: rec.body}
}

// renderRecorder is the smallest http.ResponseWriter that keeps what
// writeResult writes.
type renderRecorder struct {
	header http.Header
	code   int
	body   []byte
}

func (r *renderRecorder) Header() http.Header { return r.header }

func (r *renderRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *renderRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.body = append(r.body, b...)
	return len(b), nil
}
