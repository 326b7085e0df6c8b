package proxy

// Browsers are not callers (DESIGN.md section 8). Every agent-facing route
// (the tool endpoint and list, the transparent routes, /mcp through
// BrowserGuard) refuses:
//
//   - a Host that may be a DNS rebinding: a page that rebinds its own name
//     to 127.0.0.1 reaches a loopback listener with its own name as Host.
//     On a loopback listener the Host must be an IP literal, a loopback
//     name, this machine's name or one of server.allowed_hosts. On other
//     listeners (a pod IP behind a Service, whose Host is the Service's DNS
//     name) any Host is served unless server.allowed_hosts is set, in which
//     case the same rule applies everywhere;
//   - a cross-site browser request: Sec-Fetch-Site cross-site or same-site,
//     or an Origin that is neither the request's own host, a loopback
//     origin nor one of server.allowed_origins.
//
// Go's http.CrossOriginProtection does the second part for unsafe methods
// only; a transparent route may bind a side-effecting tool to GET, so the
// rule here holds for every method. Requests without browser headers
// (every agent SDK, curl) pass both checks unless their Host is foreign
// on a loopback listener.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// BrowserGuard decides whether a request may be served on the agent port,
// by the rules above. Every route of Core.Handler has one; a front of its
// own (Front: the MCP front) makes one and asks Refusal before it serves
// a request, so that it refuses in its own protocol.
type BrowserGuard struct {
	origins  originSet // besides server.allowed_origins
	hostname string    // this machine's name, lower case; "" if unknown
}

// NewBrowserGuard is a guard that trusts allowedOrigins
// (scheme://host[:port]) besides server.allowed_origins, the request's own
// host and loopback origins.
func NewBrowserGuard(allowedOrigins []string) *BrowserGuard {
	name, _ := os.Hostname()
	return &BrowserGuard{origins: newOriginSet(allowedOrigins), hostname: strings.ToLower(strings.TrimSuffix(name, "."))}
}

// Refusal returns why r must be refused, or "" to serve it, by the server
// settings of the view the request runs on.
func (g *BrowserGuard) Refusal(r *http.Request, v View) string {
	return g.refusal(r, &v.st.snap.Server)
}

// refusal is Refusal by the server settings srv.
func (g *BrowserGuard) refusal(r *http.Request, srv *policy.Server) string {
	if !g.hostAllowed(r, srv) {
		return fmt.Sprintf("Host %q is not a name of this server", r.Host)
	}
	switch headerValue(r.Header, headerSecFetchSite) {
	case "same-origin", "none": // the page's own origin, or the user typed the URL
		return ""
	case "same-site", "cross-site":
		// The Host is the one the browser was sent to; only an origin
		// trusted by configuration (or a local one) may call it.
		if o := headerValue(r.Header, headerOrigin); o != "" && g.trustedOrigin(o, srv) {
			return ""
		}
		return "cross-site browser requests are not served"
	}
	origin := headerValue(r.Header, headerOrigin)
	if origin == "" {
		return ""
	}
	if g.trustedOrigin(origin, srv) {
		return ""
	}
	if u, err := url.Parse(origin); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && sameHost(u, r.Host) {
		return ""
	}
	return fmt.Sprintf("Origin %q is not allowed", origin)
}

// hostAllowed applies the Host rule of the package comment.
func (g *BrowserGuard) hostAllowed(r *http.Request, srv *policy.Server) bool {
	host := requestHost(r)
	if localHost(host, g.hostname) || hostListed(host, srv.AllowedHosts) {
		return true
	}
	return len(srv.AllowedHosts) == 0 && !onLoopbackListener(r.Context())
}

// requestHost is the request's Host without its port, in lower case and
// without a final dot.
func requestHost(r *http.Request) string {
	return strings.TrimSuffix(strings.ToLower(hostOnly(r.Host)), ".")
}

// localHost reports whether host (as requestHost gives it) is one no DNS
// rebinding can send: none at all (HTTP/1.0, not a browser), a loopback
// name, an IP literal (a page cannot rebind one) or this machine's name.
func localHost(host, hostname string) bool {
	switch {
	case host == "", isLoopbackHost(host):
		return true
	case hostname != "" && host == hostname:
		return true
	}
	_, err := netip.ParseAddr(host)
	return err == nil
}

// hostListed reports whether host is one of the names of an allowed_hosts
// list ("*.example.com" names the subdomains of example.com).
func hostListed(host string, allowed []string) bool {
	for _, a := range allowed {
		if host == a || strings.HasPrefix(a, "*.") && strings.HasSuffix(host, a[1:]) {
			return true
		}
	}
	return false
}

// trustedOrigin reports whether origin is configured (server.allowed_origins,
// or the guard's own) or local (a loopback host).
func (g *BrowserGuard) trustedOrigin(origin string, srv *policy.Server) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if isLoopbackHost(u.Hostname()) {
		return true
	}
	canonical := canonicalOrigin(u)
	for _, o := range srv.AllowedOrigins {
		if o == canonical {
			return true
		}
	}
	return g.origins[canonical]
}

// onLoopbackListener reports whether the request came in on a loopback
// address.
func onLoopbackListener(ctx context.Context) bool {
	switch la := ctx.Value(http.LocalAddrContextKey).(type) {
	case *net.TCPAddr:
		return la.IP.IsLoopback()
	case net.Addr:
		return isLoopbackHost(hostOnly(la.String()))
	}
	return false
}

// originSet is a set of canonical origins.
type originSet map[string]bool

func newOriginSet(origins []string) originSet {
	set := make(originSet, len(origins))
	for _, o := range origins {
		if u, err := url.Parse(strings.TrimSuffix(o, "/")); err == nil && u.Host != "" {
			set[canonicalOrigin(u)] = true
		}
	}
	return set
}

// canonicalOrigin is the origin of u as a browser sends it: lower-case
// scheme and host, no default port, no path. config writes
// server.allowed_origins in the same form.
func canonicalOrigin(u *url.URL) string {
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" || scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		return scheme + "://" + host
	}
	return scheme + "://" + host + ":" + port
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
	switch {
	case originPort != "":
	case origin.Scheme == "https":
		originPort = "443"
	default:
		originPort = "80"
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
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// guarded wraps the agent port's routes other than the fronts of their
// own (which refuse in their own protocol): it takes the request's View,
// which the route serves the request on; a refused request gets a
// forbidden envelope, counted and logged like any call, and reaches no
// route.
func (c *Core) guarded(g *BrowserGuard, next func(http.ResponseWriter, *http.Request, View)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := c.View()
		if why := g.refusal(r, &v.st.snap.Server); why != "" {
			refuseCrossSite(w, r, v, why)
			return
		}
		next(w, r, v)
	})
}

// refuseCrossSite answers a cross-site request that calls nothing. It is
// a function of its own, out of line, so that its request and result do
// not weigh on the stack of every call the guard lets through.
//
//go:noinline
func refuseCrossSite(w http.ResponseWriter, r *http.Request, v View, why string) {
	res := v.withoutTool(r.Context(), &Request{
		Tool:     calledTool(r.URL.Path),
		Caller:   v.Identify(r.Header),
		CallID:   headerValue(r.Header, headerRequestID),
		Front:    "http",
		LogAttrs: []slog.Attr{slog.String("refused", why)},
	}, routeLabel(r.Method, r.URL.Path), contracts.Reject(contracts.ReasonDenied))
	writeResult(w, res)
}

// routeLabel names what a request that reached no tool asked for, in its
// message: the tool of /v1/tools/{tool}, otherwise the method and path.
func routeLabel(method, path string) string {
	if name := calledTool(path); name != "" {
		return name
	}
	return method + " " + path
}

// calledTool is the tool named by a /v1/tools/{tool} path, or "".
func calledTool(path string) string {
	if name, ok := strings.CutPrefix(path, "/v1/tools/"); ok && !strings.Contains(name, "/") {
		return name
	}
	return ""
}
