package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// Credentials open to anyone. toolgate sends its own credential for an
// upstream (auth, a client certificate, a credential header or query
// parameter the policy writes; the credential a tool names) on every
// request it makes there, and drops the caller's own (an agent's headers
// reach a backend only through forward_headers; a legacy client's query
// parameters only as the binding reads them). So a backend that authenticated every client serves
// anyone toolgate serves: with access.default allow, any caller toolgate
// cannot identify — no caller name, an unlisted one, anything that
// reaches its port — and on passthrough routes, which check no caller,
// anyone at all. The loader refuses such a policy unless it says so:
// access.shared_credentials lists the upstreams whose credentials anyone
// who reaches toolgate may use.

// credentialWords are the parts of a header or query parameter name that
// say it carries a credential (compared in lower case, without - and _).
var credentialWords = []string{"auth", "key", "token", "secret", "password", "passwd", "session", "signature", "credential", "cookie"}

// credentialName reports whether a header or query parameter name says it
// carries a credential: Authorization, Cookie, X-Api-Key, access_token,
// client_secret, X-Auth-Token...
func credentialName(name string) bool {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(name))
	for _, w := range credentialWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// credential is where a policy gives toolgate a credential to send.
type credential struct {
	path string // the key it is written at
	what string // how the message names it
}

// upstreamCredential returns the first credential the upstream sends on
// the requests of its passthrough routes and of the tools that name no
// credential (withAuth: some such request is open; auth is sent only
// there), or on every request (a client certificate, a credential header),
// or ok false.
func upstreamCredential(name string, s *upstreamSpec, withAuth bool) (credential, bool) {
	base := "upstreams." + name
	switch {
	case s.Auth != nil && withAuth:
		return credential{base + ".auth", "this credential"}, true
	case s.TLS != nil && s.TLS.CertFile != "":
		return credential{base + ".tls.cert_file", "this client certificate"}, true
	}
	for _, h := range slices.Sorted(maps.Keys(s.Headers)) {
		if credentialName(h) {
			return credential{base + ".headers." + h, "this credential header"}, true
		}
	}
	return credential{}, false
}

// toolCredential returns the first credential a tool's request writes as
// a constant header or query parameter, or ok false.
func toolCredential(name string, t *toolSpec) (credential, bool) {
	if t.Request == nil {
		return credential{}, false
	}
	for _, part := range []struct {
		key   string
		shape *contracts.Shape
	}{{"headers", t.Request.Headers}, {"query", t.Request.Query}} {
		if part.shape == nil || part.shape.Kind != contracts.ShapeObject {
			continue
		}
		for _, m := range part.shape.Members {
			if m.Shape != nil && m.Shape.Kind == contracts.ShapeConst && credentialName(m.Name) {
				what := map[string]string{"headers": "this credential header", "query": "this credential query parameter"}[part.key]
				return credential{"tools." + name + ".request." + part.key + "." + m.Name, what}, true
			}
		}
	}
	return credential{}, false
}

// sharedCredentials checks access.shared_credentials and refuses every
// credential that callers toolgate cannot identify could use without the
// policy listing its upstream there (see the comment above). Each
// credential is judged by the requests that carry it: a named credential
// (upstreams.<name>.credentials) by the tools that name it, and is
// reported on its own; auth by the other tools and the passthrough routes.
func (c *compiler) sharedCredentials(f *fileSpec, snap *policy.Snapshot) {
	shared := map[string]bool{}
	if f.Access != nil {
		for i, name := range f.Access.SharedCredentials {
			path := fmt.Sprintf("access.shared_credentials[%d]", i)
			u, ok := f.Upstreams[name]
			switch {
			case !ok:
				c.errorAt(path, "upstream %q is not defined", name)
			case u != nil && !holdsCredential(name, u, f.Tools):
				c.warnAt(path, "upstream %s has no credential toolgate sends (auth, a client certificate, a credential header or query parameter); remove it", name)
			}
			shared[name] = true
		}
	}
	defaultText := "access.default is allow"
	if f.Access == nil || f.Access.Default == "" {
		defaultText += " (the default)"
	}
	for _, name := range slices.Sorted(maps.Keys(f.Upstreams)) {
		u := f.Upstreams[name]
		if u == nil || shared[name] {
			continue
		}
		// The tools any caller may call, by the credential they name ("":
		// none, so the upstream's auth).
		var tools []string
		byCredential := map[string][]string{}
		if snap.Access.DefaultAllow {
			for _, t := range snap.ToolNames {
				if ct := snap.Tools[t]; ct.Upstream == name {
					tools = append(tools, t)
					byCredential[ct.Credential] = append(byCredential[ct.Credential], t)
				}
			}
		}
		// Each named credential is open to the tools that name it, and
		// reported on its own.
		for _, cname := range slices.Sorted(maps.Keys(u.Credentials)) {
			if ts := byCredential[cname]; len(ts) > 0 {
				cred := credential{"upstreams." + name + ".credentials." + cname, "this credential"}
				c.openCredential(cred, name, fmt.Sprintf("%s, so any caller may call %s", defaultText, listShort(ts)), true, false)
			}
		}
		var prefixes []string
		for _, p := range snap.Server.Passthrough {
			if p.Upstream == name {
				prefixes = append(prefixes, p.Prefix)
			}
		}
		withAuth := len(byCredential[""]) > 0 || len(prefixes) > 0
		cred, ok := upstreamCredential(name, u, withAuth)
		if ok && cred.path == "upstreams."+name+".auth" {
			tools = byCredential[""] // auth goes only with the tools that name no credential
		}
		var open []string // how unidentified callers reach the upstream
		if len(tools) > 0 {
			open = append(open, fmt.Sprintf("%s, so any caller may call %s", defaultText, listShort(tools)))
		}
		if len(prefixes) > 0 {
			open = append(open, fmt.Sprintf("server.passthrough forwards anyone's requests under %s", listShort(prefixes)))
		}
		if len(open) == 0 {
			continue
		}
		if ok {
			c.openCredential(cred, name, strings.Join(open, ", and "), true, len(prefixes) > 0)
			continue
		}
		if !snap.Access.DefaultAllow {
			continue
		}
		for _, t := range slices.Sorted(maps.Keys(f.Tools)) {
			if ts := f.Tools[t]; ts != nil && ts.Upstream == name && snap.Tools[t] != nil {
				if cred, ok := toolCredential(t, ts); ok {
					c.openCredential(cred, name, defaultText+", so any caller may call "+t, false, false)
				}
			}
		}
	}
	c.unusedCredentials(f)
}

// unusedCredentials warns of each named credential of an upstream that no
// tool names: a typo in a tool's credential key is an error, but a
// credential left behind is worth a word.
func (c *compiler) unusedCredentials(f *fileSpec) {
	used := map[string]bool{}
	for _, t := range f.Tools {
		if t != nil && t.Credential != "" {
			used[t.Upstream+"\x00"+t.Credential] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.Upstreams)) {
		u := f.Upstreams[name]
		if u == nil {
			continue
		}
		for _, cname := range slices.Sorted(maps.Keys(u.Credentials)) {
			if !used[name+"\x00"+cname] {
				c.warnAt("upstreams."+name+".credentials."+cname, "no tool names this credential (tools.<name>.credential: %s); remove it, or name it where it is needed", cname)
			}
		}
	}
}

// holdsCredential reports whether upstream name, or a tool on it, sends a
// credential of toolgate's.
func holdsCredential(name string, u *upstreamSpec, tools map[string]*toolSpec) bool {
	if _, ok := upstreamCredential(name, u, true); ok || len(u.Credentials) > 0 {
		return true
	}
	for t, ts := range tools {
		if ts != nil && ts.Upstream == name {
			if _, ok := toolCredential(t, ts); ok {
				return true
			}
		}
	}
	return false
}

// openCredential reports a credential that callers toolgate cannot
// identify can use, with the ways to close it or to say so: an upstream's
// credential can give way to each caller's own (forwardable); a
// passthrough checks no caller, so only tools can require one.
func (c *compiler) openCredential(cred credential, upstream, open string, forwardable, passthrough bool) {
	fix := "set access.default: deny and list the callers in access.callers"
	if passthrough {
		fix = "serve those routes as tools (a passthrough checks no caller), with access.default: deny and the callers listed in access.callers"
	}
	if forwardable {
		fix += ", or forward each caller's own credential (forward_headers) instead"
	}
	c.errorAt(cred.path, "callers toolgate cannot identify use %s: %s, and toolgate sends it in place of theirs; %s, or write access.shared_credentials: [%s] if anyone who reaches toolgate may use it",
		cred.what, open, fix, upstream)
}

// listShort names up to three items, then how many more.
func listShort(items []string) string {
	if len(items) <= 3 {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:3], ", "), len(items)-3)
}

// warnAt reports a warning at the value of path.
func (c *compiler) warnAt(path, format string, args ...any) {
	w := &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
	c.warns = append(c.warns, w)
	c.unplaced = append(c.unplaced, placement{e: w, at: path})
}
