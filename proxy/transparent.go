package proxy

import (
	"net/http"
	"sort"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/boundedio"
)

// router finds the tool whose legacy route a request takes. It is built
// with each snapshot, so nothing about routes is parsed per request.
type router struct {
	byMethod    map[string][]*tool // most specific route first
	passthrough []passthrough      // longest prefix first
}

func newRouter(st *state, callerHeader string) *router {
	r := &router{byMethod: map[string][]*tool{}}
	names := make([]string, 0, len(st.tools))
	for name := range st.tools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := st.tools[name]
		m := t.contract.Binding.Method()
		r.byMethod[m] = append(r.byMethod[m], t)
	}
	for m, tools := range r.byMethod {
		sort.SliceStable(tools, func(i, j int) bool {
			return contracts.MoreSpecific(tools[i].contract.Binding, tools[j].contract.Binding)
		})
		r.byMethod[m] = tools
	}
	for _, p := range st.snap.Server.Passthrough {
		up := st.upstreams[p.Upstream]
		if up == nil {
			continue
		}
		r.passthrough = append(r.passthrough, newPassthrough(p.Prefix, up, callerHeader))
	}
	sort.SliceStable(r.passthrough, func(i, j int) bool { return len(r.passthrough[i].prefix) > len(r.passthrough[j].prefix) })
	return r
}

// match returns the tool whose route the request takes, with the path
// placeholder values.
func (r *router) match(method, escapedPath string) (*tool, map[string]string) {
	segs, ok := contracts.SplitPath(escapedPath)
	if !ok {
		return nil, nil
	}
	for _, t := range r.byMethod[method] {
		if vals, ok := t.contract.Binding.MatchPath(segs); ok {
			return t, vals
		}
	}
	return nil, nil
}

// serveTransparent handles a request on a legacy route: a passthrough, the
// tool's call, or a not_found envelope. It decodes the legacy request into
// a Request (the arguments from the path, query, headers and body, as the
// binding writes them) and encodes the Result.
func (c *Core) serveTransparent(w http.ResponseWriter, r *http.Request, v View) {
	escapedPath := r.URL.EscapedPath()
	if p := v.st.router.passthroughFor(escapedPath); p != nil {
		c.servePassthrough(w, r, v.st.snap, p)
		return
	}
	route, ok := v.MatchRoute(r.Method, escapedPath)
	if !ok {
		serveNoRoute(w, r, v)
		return
	}
	req := requestFrom(r, v, route.Tool, "transparent")
	var body []byte
	if route.HasBody {
		var err error
		body, req.BodyTooLarge, err = boundedio.ReadHTTPBody(r, v.st.snap.Server.MaxRequestBytes, new([]byte))
		if err != nil {
			w.Header().Set("Connection", "close")
			req.Invalid = &contracts.ArgError{Problem: contracts.ProblemIncomplete}
		}
	}
	if !req.BodyTooLarge && req.Invalid == nil {
		args, err := route.Args(r.URL.RawQuery, r.Header, body)
		if err != nil {
			req.Invalid = err
		}
		req.Args = args
	}
	writeResult(w, v.Call(r.Context(), req))
}
