package proxy

import (
	"context"
	"net/http"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/toolformats"
)

// View is the policy snapshot one request runs on, with its runtime. A
// front end takes it when the request arrives and asks it everything about
// that request: the caller, the limits, the route, the call itself and its
// answer. A reload swaps the Core's snapshot for new requests only, so it
// never changes a request midway (DESIGN section 6).
type View struct {
	c  *Core
	st *state
}

// View returns the snapshot a request arriving now runs on.
func (c *Core) View() View { return View{c: c, st: c.state.Load()} }

// Policy is the view's policy snapshot. It must not be modified.
func (v View) Policy() *policy.Snapshot { return v.st.snap }

// Identify resolves the caller of a request from its headers, by the
// policy's caller_header or caller_from.
func (v View) Identify(h http.Header) string {
	return v.st.snap.Access.Identify(v.st.snap.Server, h)
}

// Route is a tool's legacy route (method and path) that a request took, as
// transparent mode matches it: the tool and the path placeholder values.
type Route struct {
	Tool string
	// PathValues are the placeholder values of the path, unescaped.
	PathValues map[string]string
	// HasBody says the tool sends a body, whose members the legacy
	// request carries: its arguments are complete only with the body.
	HasBody bool
	tool    *tool
}

// MatchRoute returns the tool whose request route method and escapedPath
// take. ok is false when no tool's route matches. A policy loaded for a
// front that identifies calls by route (config.Options.ByRoute, or
// server.transparent) has no ambiguous routes: config refuses them, so at
// most one tool's route is the most specific.
func (v View) MatchRoute(method, escapedPath string) (route Route, ok bool) {
	t, vals := v.st.router.match(method, escapedPath)
	if t == nil {
		return Route{}, false
	}
	return Route{Tool: t.contract.Name, PathValues: vals, HasBody: t.contract.Binding.HasBody(), tool: t}, true
}

// Args builds the arguments of the route's call from the rest of the
// legacy request: the raw query, the headers (by canonical name) and the
// body, read back as the binding writes them. An error is the bad_args
// cause to put in Request.Invalid.
func (r Route) Args(rawQuery string, header http.Header, body []byte) (map[string]any, error) {
	lr := contracts.LegacyRequest{PathValues: r.PathValues, RawQuery: rawQuery, Header: header, Body: body}
	return r.tool.contract.ReadArgs(lr, contracts.MaxArgsDepth)
}

// Passthrough returns how a request whose escaped path falls under a
// server.passthrough prefix goes to its upstream (passthrough.go). ok is
// false for any other path.
func (v View) Passthrough(escapedPath string) (p Passthrough, ok bool) {
	if pt := v.st.router.passthroughFor(escapedPath); pt != nil {
		return pt.Passthrough, true
	}
	return Passthrough{}, false
}

// NoRoute answers a request whose method and (unescaped) path are no
// route: a not_found envelope that names no tool, with a message that
// names what was asked for. Every front answers an unknown route with it.
func (v View) NoRoute(ctx context.Context, req *Request, method, path string) *Result {
	asked := *req
	asked.Tool = ""
	return v.withoutTool(ctx, &asked, routeLabel(method, path), contracts.Reject(contracts.ReasonUnknownTool))
}

// UnknownTool answers a call of a tool the view's policy does not have,
// which a front found out before it called (the MCP front, whose SDK
// routes calls by tool): a not_found envelope, counted and logged as every
// call is.
func (v View) UnknownTool(ctx context.Context, req *Request) *Result {
	return v.withoutTool(ctx, req, req.Tool, contracts.Reject(contracts.ReasonUnknownTool))
}

// NullArgs is a JSON front's arguments object of a call of tool, with an
// optional argument given as null read as absent (toolformats.NullArgs),
// as the tool endpoint and MCP hand arguments to the pipeline.
func (v View) NullArgs(tool string, args []byte) []byte {
	return toolformats.NullArgs(v.st.snap.Tools[tool], args)
}

// withoutTool makes the envelope for a request that never reached a tool
// (an unknown route or tool, a refused browser request), through the same
// finish as every call: counted as tool "unknown" and logged. The message
// names what was asked for (named: a tool name, or a method and path); the
// envelope's tool is req.Tool, empty when no tool name was called.
func (v View) withoutTool(ctx context.Context, req *Request, named string, o contracts.Outcome) *Result {
	asked := *req
	asked.Tool = named
	cl := v.newCall(&asked)
	cl.ctx = ctx
	res := v.c.finish(ctx, cl, &o)
	res.Envelope.Tool = req.Tool
	return res
}
