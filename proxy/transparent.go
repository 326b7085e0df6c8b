package proxy

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// router finds the tool whose legacy route a request takes. It is built
// with each snapshot, so nothing about routes is parsed per request.
type router struct {
	byMethod    map[string][]*tool // most specific route first
	passthrough []passthrough      // longest prefix first
}

type passthrough struct {
	prefix   string
	upstream string
	proxy    *httputil.ReverseProxy
	up       *upstream
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
		r.passthrough = append(r.passthrough, passthrough{prefix: p.Prefix, upstream: p.Upstream, proxy: newPassthrough(up, callerHeader), up: up})
	}
	sort.SliceStable(r.passthrough, func(i, j int) bool { return len(r.passthrough[i].prefix) > len(r.passthrough[j].prefix) })
	return r
}

// newPassthrough forwards requests untouched (streaming both ways), minus
// the identity headers that are toolgate's business, never the backend's.
func newPassthrough(up *upstream, callerHeader string) *httputil.ReverseProxy {
	target := up.cfg.URL
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			pr.Out.Header.Del(callerHeader)
			pr.Out.Header.Del("X-Forwarded-Client-Cert")
			for k, v := range up.cfg.Headers {
				pr.Out.Header[k] = v
			}
		},
		Transport:     up.client.Transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
}

// passthroughFor returns the passthrough whose prefix covers a request's
// escaped path (the longest prefix winning), or nil.
//
// The path is checked once (cleanPassthroughPath) and the prefix matched,
// on segment boundaries, against the decoded path that check returns: the
// path forwarded is the request's own, which decodes to exactly that path
// with the same segments, so the backend serves the path that was matched.
// A path the check refuses is never passed through; it can still be a
// tool's call (whose backend path toolgate builds itself), and is otherwise
// not_found.
func (r *router) passthroughFor(escapedPath string) *passthrough {
	if len(r.passthrough) == 0 {
		return nil
	}
	path, ok := cleanPassthroughPath(escapedPath)
	if !ok {
		return nil
	}
	for i := range r.passthrough {
		p := &r.passthrough[i]
		if path == p.prefix || strings.HasPrefix(path, strings.TrimSuffix(p.prefix, "/")+"/") {
			return p
		}
	}
	return nil
}

// cleanPassthroughPath decodes an escaped request path that is safe to
// forward as it is, and refuses one that a backend could read as another
// path than toolgate matched: an encoded dot (%2e, so "%2e%2e" cannot
// climb out of the prefix at the backend), an encoded slash or backslash
// (%2f, %5c: a segment toolgate sees as one may be two to the backend), a
// backslash, a control character, a malformed escape, "." or
// ".." segments (also with ;parameters, which some servers strip), bytes
// that are not UTF-8 (an overlong "%c0%ae" is a dot to lax decoders), and
// characters that Unicode compatibility normalisation turns into a dot
// segment, a slash or a backslash ("．．", "／").
func cleanPassthroughPath(escaped string) (string, bool) {
	if !strings.HasPrefix(escaped, "/") || strings.IndexByte(escaped, '\\') >= 0 {
		return "", false
	}
	for i := 0; i < len(escaped); i++ {
		if escaped[i] != '%' {
			continue
		}
		if i+2 >= len(escaped) {
			return "", false
		}
		hi, lo := unhex(escaped[i+1]), unhex(escaped[i+2])
		b := hi<<4 | lo
		if hi > 15 || lo > 15 || b == '.' || b == '/' || b == '\\' || b < 0x20 || b == 0x7f {
			return "", false
		}
		i += 2
	}
	path, err := url.PathUnescape(escaped)
	if err != nil || !utf8.ValidString(path) || hasDotSegment(path) {
		return "", false
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c < 0x20 || c == 0x7f {
			return "", false // raw or encoded: never forwarded
		}
	}
	for i := 0; i < len(path); i++ {
		if path[i] >= utf8.RuneSelf {
			// Some backends normalise (NFKC) before routing.
			n := norm.NFKC.String(path)
			if strings.Count(n, "/") != strings.Count(path, "/") || strings.IndexByte(n, '\\') >= 0 || hasDotSegment(n) {
				return "", false
			}
			break
		}
	}
	return path, true
}

// hasDotSegment reports whether a decoded path has a "." or ".." segment,
// also with ;parameters.
func hasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path[1:], "/") {
		if name, _, _ := strings.Cut(seg, ";"); name == "." || name == ".." {
			return true
		}
	}
	return false
}

// unhex is the value of a hex digit, or 16 for any other byte.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 16
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

// serveTransparent handles a request on a legacy route: the tool's call,
// a passthrough, or a not_found envelope.
func (c *Core) serveTransparent(w http.ResponseWriter, r *http.Request) {
	st := c.state.Load()
	escapedPath := r.URL.EscapedPath()
	if p := st.router.passthroughFor(escapedPath); p != nil {
		c.servePassthrough(w, r, st.snap, p)
		return
	}
	t, pathVals := st.router.match(r.Method, escapedPath)
	if t == nil {
		c.serveNoRoute(w, r)
		return
	}
	snap := st.snap
	req := &Request{
		Tool:           t.contract.Name,
		Caller:         c.Identify(r.Header),
		CallID:         r.Header.Get("X-Request-Id"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Front:          "transparent",
		TraceParent:    r.Header.Get("Traceparent"),
		TraceState:     r.Header.Get("Tracestate"),
	}
	var body []byte
	if t.contract.Binding.HasBody() {
		var tooLarge bool
		var err error
		body, tooLarge, err = readRequestBody(r, snap.Server.MaxRequestBytes, new([]byte))
		if err != nil {
			w.Header().Set("Connection", "close")
			req.Invalid = &contracts.ArgError{Problem: contracts.ProblemIncomplete}
		}
		req.BodyTooLarge = tooLarge
	}
	if !req.BodyTooLarge && req.Invalid == nil {
		args, err := extractArgs(t.contract, pathVals, r.URL.RawQuery, r.Header, body)
		if err != nil {
			req.Invalid = err
		}
		req.Args = args
	}
	c.writeResult(w, snap, c.Call(r.Context(), req))
}

// extractArgs builds a call's arguments from a legacy request: path
// placeholders, and the query parameters, headers and body members the
// binding names, read back as contracts.Contract.ReadArgs says.
func extractArgs(ct *contracts.Contract, pathVals map[string]string, rawQuery string, header http.Header, body []byte) (map[string]any, error) {
	return ct.ReadArgs(contracts.LegacyRequest{PathValues: pathVals, RawQuery: rawQuery, Header: header, Body: body}, maxArgsDepth)
}

// RouteConflicts lists the pairs of tools whose routes are ambiguous: a
// request could take either, and neither is more specific.
func RouteConflicts(snap *policy.Snapshot) []string {
	var out []string
	for i, a := range snap.ToolNames {
		for _, b := range snap.ToolNames[i+1:] {
			if contracts.Ambiguous(snap.Tools[a].Binding, snap.Tools[b].Binding) {
				out = append(out, a+" and "+b)
			}
		}
	}
	return out
}
