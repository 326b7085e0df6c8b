package config

import (
	"fmt"
	"maps"
	"net"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// This file compiles the server section: listeners, limits, the caller
// header, tracing, the browser allow-lists, and passthrough prefixes, which
// must be plain paths and may never cover a tool's route.

// plainPrefix reports whether a passthrough prefix is a path matched as
// written: requests are matched on their decoded path, so an escape in the
// prefix would never match, and a dot segment or an empty one means
// something else to the backend than to toolgate.
func plainPrefix(prefix string) bool {
	if strings.ContainsAny(prefix, "%\\?#") {
		return false
	}
	rest := strings.TrimSuffix(prefix[1:], "/")
	if rest == "" {
		return true
	}
	for seg := range strings.SplitSeq(rest, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// passthroughCovers refuses a passthrough prefix that covers a tool's
// route: a request under the prefix is forwarded untouched (transparent
// mode and ext_proc look at passthrough first), so a call of that tool
// would skip its schema, key, access and budget. A prefix covers a route
// when some path under the prefix takes the route, whatever the method.
func (c *compiler) passthroughCovers(snap *policy.Snapshot) {
	for i, p := range snap.Server.Passthrough {
		if !strings.HasPrefix(p.Prefix, "/") || !plainPrefix(p.Prefix) {
			continue // reported already
		}
		var prefixSegs []string
		if rest := strings.Trim(p.Prefix, "/"); rest != "" {
			prefixSegs = strings.Split(rest, "/")
		}
		for _, name := range snap.ToolNames {
			b := snap.Tools[name].Binding
			tmpl, _ := contracts.SplitPath(b.PathTemplate())
			if len(prefixSegs) > len(tmpl) {
				continue
			}
			// A witness: the prefix's segments, then the template's own
			// (a placeholder takes its own text). The route takes it only
			// if every template segment can take the prefix's segment.
			witness := append(slices.Clone(prefixSegs), tmpl[len(prefixSegs):]...)
			if _, ok := b.MatchPath(witness); ok {
				c.errorAt(fmt.Sprintf("server.passthrough[%d].prefix", i), "prefix %s covers the route of tool %s (%s %s): its calls would be forwarded without the contract; use a longer prefix",
					p.Prefix, name, b.Method(), b.PathTemplate())
			}
		}
	}
}

// server checks the server section. Its limits all have to be positive
// because each bounds something an agent or a backend controls (bodies,
// connections, time, CEL cost); the admin port may never be the agent
// port, since the agent port must not serve /-/reload or /metrics.
func (c *compiler) server(s *serverSpec, upstreams map[string]*upstreamSpec) policy.Server {
	out := policy.Server{
		Listen:              s.Listen,
		AdminListen:         s.AdminListen,
		CallerHeader:        textproto.CanonicalMIMEHeaderKey(s.CallerHeader),
		CallerFrom:          s.CallerFrom,
		MaxRequestBytes:     s.MaxRequestBytes,
		MaxResponseBytes:    s.MaxResponseBytes,
		ObservationMaxChars: s.ObservationMaxChars,
		Messages:            s.Messages,
		HTTPStatus:          s.HTTPStatus,
		Transparent:         s.Transparent,
		MaxConnections:      s.MaxConnections,
		ReadTimeout:         time.Duration(s.ReadTimeout),
		WriteTimeout:        time.Duration(s.WriteTimeout),
		IdleTimeout:         time.Duration(s.IdleTimeout),
		UpstreamClient:      s.UpstreamClient,
	}
	out.Learn = c.learn(s.Learn)
	if s.Console != nil {
		out.Console = policy.ConsoleSettings{Disabled: s.Console.Enabled != nil && !*s.Console.Enabled, LiveCalls: s.Console.LiveCalls}
		if out.Console.Disabled && out.Console.LiveCalls {
			c.errorAt("server.console.live_calls", "needs the console: server.console.enabled is false")
		}
	}
	agentOK := c.listenAddress("server.listen", s.Listen)
	if c.listenAddress("server.admin_listen", s.AdminListen) && agentOK && sameListener(s.Listen, s.AdminListen) {
		c.errorAt("server.admin_listen", "must differ from server.listen: the admin port is never served on the agent port")
	}
	if !headerNameRE.MatchString(s.CallerHeader) {
		c.errorAt("server.caller_header", "%q is not a valid header name", s.CallerHeader)
	}
	if s.CallerFrom != policy.CallerFromHeader && s.CallerFrom != policy.CallerFromXFCC {
		c.errorAt("server.caller_from", "%q is not valid (want header or xfcc)", s.CallerFrom)
	}
	if s.MaxRequestBytes <= 0 {
		c.errorAt("server.max_request_bytes", "must be positive")
	}
	if s.MaxResponseBytes <= 0 {
		c.errorAt("server.max_response_bytes", "must be positive")
	}
	if s.ObservationMaxChars < contracts.MinObservationMaxChars {
		c.errorAt("server.observation_max_chars", "must be at least %d (room for the whole action clause of any message)", contracts.MinObservationMaxChars)
	}
	if s.CELCostLimit <= 0 {
		c.errorAt("server.cel_cost_limit", "must be positive")
	}
	if s.MaxConnections < 1 {
		c.errorAt("server.max_connections", "must be at least 1")
	}
	for key, d := range map[string]duration{"read_timeout": s.ReadTimeout, "write_timeout": s.WriteTimeout, "idle_timeout": s.IdleTimeout} {
		if d <= 0 {
			c.errorAt("server."+key, "must be positive")
		}
	}
	if s.HTTPStatus != policy.HTTPStatusMapped && s.HTTPStatus != policy.HTTPStatusAlways200 {
		c.errorAt("server.http_status", "%q is not valid (want mapped or always_200)", s.HTTPStatus)
	}
	if s.UpstreamClient != policy.UpstreamClientFast && s.UpstreamClient != policy.UpstreamClientNetHTTP {
		c.errorAt("server.upstream_client", "%q is not valid (want fast or nethttp)", s.UpstreamClient)
	}
	if tr := s.Tracing; tr != nil {
		if tr.Endpoint == "" {
			c.errorAt("server.tracing.endpoint", "is required (host:port of the OTLP receiver)")
		}
		if tr.Protocol != "grpc" && tr.Protocol != "http" {
			c.errorAt("server.tracing.protocol", "%q is not valid (want grpc or http)", tr.Protocol)
		}
		if tr.SamplingRatio < 0 || tr.SamplingRatio > 1 {
			c.errorAt("server.tracing.sampling_ratio", "must be between 0 and 1")
		}
		for _, k := range slices.Sorted(maps.Keys(tr.Headers)) {
			if !headerNameRE.MatchString(k) || strings.ContainsAny(tr.Headers[k], "\r\n\x00") {
				c.errorAt("server.tracing.headers."+k, "is not a valid header")
			}
		}
		out.Tracing = &policy.TracingSettings{Endpoint: tr.Endpoint, Protocol: tr.Protocol, Insecure: tr.Insecure,
			SamplingRatio: tr.SamplingRatio, Headers: tr.Headers, ServiceName: tr.ServiceName}
	}
	for i, p := range s.Passthrough {
		path := fmt.Sprintf("server.passthrough[%d]", i)
		if !strings.HasPrefix(p.Prefix, "/") {
			c.errorAt(path+".prefix", "must start with /")
		} else if !plainPrefix(p.Prefix) {
			c.errorAt(path+".prefix", "%q must be a plain path: no %%-escapes, backslashes, ? or #, and no empty, . or .. segments", p.Prefix)
		}
		if _, ok := upstreams[p.Upstream]; !ok {
			c.errorAt(path+".upstream", "upstream %q is not defined", p.Upstream)
		}
		out.Passthrough = append(out.Passthrough, policy.Passthrough{Prefix: p.Prefix, Upstream: p.Upstream})
	}
	out.AllowedHosts = c.eachValid("server.allowed_hosts", s.AllowedHosts, allowedHost,
		"%q is not a host name (want a name such as toolgate.example.com, or *.example.com for its subdomains; no scheme or port)")
	out.AdminAllowedHosts = c.eachValid("server.admin_allowed_hosts", s.AdminAllowedHosts, allowedHost,
		"%q is not a host name (want a name such as toolgate.example.com, or *.example.com for its subdomains; no scheme or port)")
	out.AllowedOrigins = c.eachValid("server.allowed_origins", s.AllowedOrigins, allowedOrigin,
		"%q is not an origin (want scheme://host[:port] with http or https, such as https://console.example.com)")
	return out
}

// listenAddress checks a host:port listen address (the host may be empty
// for every interface, the port 0 for any free one).
func (c *compiler) listenAddress(path, addr string) bool {
	if addr == "" {
		c.errorAt(path, "must not be empty")
		return false
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		c.errorAt(path, "%q is not a host:port address (\":8080\" for every interface, \"127.0.0.1:9090\" for loopback)", addr)
		return false
	}
	return true
}

// sameListener reports whether two listen addresses would claim the same
// socket: the same fixed port on the same host, or on any host when one
// of them listens on every interface.
func sameListener(a, b string) bool {
	hostA, portA, _ := net.SplitHostPort(a)
	hostB, portB, _ := net.SplitHostPort(b)
	pa, _ := strconv.Atoi(portA)
	pb, _ := strconv.Atoi(portB)
	if pa == 0 || pa != pb {
		return false
	}
	every := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return hostA == hostB || every(hostA) || every(hostB)
}

// allowedHost is a server.allowed_hosts entry in lower case: a DNS name or
// IP literal, or "*." and a name for its subdomains.
func allowedHost(h string) (string, bool) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	name := strings.TrimPrefix(h, "*.")
	if name == "" || len(name) > 253 || strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
		return "", false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return "", false
		}
	}
	return h, true
}

// allowedOrigin is a server.allowed_origins entry as browsers send it in
// the Origin header: lower-case scheme and host, no default port.
func allowedOrigin(o string) (string, bool) {
	u, err := url.Parse(strings.TrimSuffix(o, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.Contains(u.Host, "*") {
		return "", false
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", false
		}
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" || scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		return scheme + "://" + host, true
	}
	return scheme + "://" + host + ":" + port, true
}
