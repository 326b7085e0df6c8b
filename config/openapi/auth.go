package openapi

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/toolgate/toolgate/config/policydoc"
)

// upstreamAuth is the upstream's auth block drafted from the document's
// security schemes, with the comments that go with it.
type upstreamAuth struct {
	scheme string // the security scheme it comes from; "" when none is usable
	block  *omap  // auth: {basic: {...}} and the like; nil when none
	header string // the header the block sets (canonical), or ""
	query  string // the query parameter the block sets, or ""
	env    []string
	notes  []string
}

// draftAuth picks the security scheme the upstream authenticates with and
// drafts its auth block. The scheme is the first of the first security
// requirement the selected operations (or, without their own, the document)
// name, else the first declared scheme; toolgate sends one credential per
// upstream, so any other scheme only gets a comment.
func (b *builder) draftAuth(ops []*operation) upstreamAuth {
	if b.doc.Components == nil || len(b.doc.Components.SecuritySchemes) == 0 {
		return upstreamAuth{}
	}
	schemes := b.doc.Components.SecuritySchemes
	var order []string
	scopes := map[string][]string{}
	note := func(reqs *openapi3.SecurityRequirements) {
		if reqs == nil {
			return
		}
		for _, req := range *reqs {
			for _, name := range slices.Sorted(maps.Keys(req)) {
				if !slices.Contains(order, name) {
					order = append(order, name)
				}
				for _, s := range req[name] {
					if !slices.Contains(scopes[name], s) {
						scopes[name] = append(scopes[name], s)
					}
				}
			}
		}
	}
	for _, op := range ops {
		if op.op.Security != nil {
			note(op.op.Security)
		} else {
			note(&b.doc.Security)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(schemes)) {
		if !slices.Contains(order, name) {
			order = append(order, name)
		}
	}
	var a upstreamAuth
	for _, name := range order {
		ref := schemes[name]
		if ref == nil || ref.Value == nil {
			continue
		}
		if a.block != nil {
			a.notes = append(a.notes, fmt.Sprintf("The document also declares the security scheme %s (%s); toolgate sends one credential per upstream.", name, describeScheme(ref.Value)))
			continue
		}
		blk, why := b.authBlock(name, ref.Value, scopes[name])
		if blk == nil {
			a.notes = append(a.notes, why)
			continue
		}
		a.scheme, a.block = name, blk.block
		a.header, a.query, a.env = blk.header, blk.query, blk.env
		if why != "" {
			a.notes = append(a.notes, why)
		}
	}
	return a
}

func describeScheme(s *openapi3.SecurityScheme) string {
	switch s.Type {
	case "http":
		return "http " + strings.ToLower(s.Scheme)
	case "apiKey":
		return fmt.Sprintf("an API key in the %s %s", s.In, s.Name)
	}
	return s.Type
}

// authBlock maps one security scheme to an auth block; nil with a reason
// when toolgate has no form for it. A non-empty reason with a block is a
// note that goes with it.
func (b *builder) authBlock(name string, s *openapi3.SecurityScheme, scopes []string) (*upstreamAuth, string) {
	env := b.envPrefix()
	v := func(suffix string) string { return "${" + env + "_" + suffix + "}" }
	one := func(kind string, m *omap) *omap {
		o := newOmap()
		o.set(kind, m)
		return o
	}
	out := &upstreamAuth{}
	switch {
	case s.Type == "http" && strings.EqualFold(s.Scheme, "basic"):
		m := newOmap()
		m.set("username", v("USERNAME"))
		m.set("password", v("PASSWORD"))
		out.block, out.header = one("basic", m), "Authorization"
		out.env = []string{env + "_USERNAME", env + "_PASSWORD"}
		return out, ""
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		out.block, out.header = one("bearer", tokenMap(v("TOKEN"))), "Authorization"
		out.env = []string{env + "_TOKEN"}
		return out, ""
	case s.Type == "apiKey" && s.In == "header" && strings.EqualFold(s.Name, "Authorization"):
		// An API key in the Authorization header: SendGrid and most such
		// APIs want "Bearer <key>".
		out.block, out.header = one("bearer", tokenMap(v("API_KEY"))), "Authorization"
		out.env = []string{env + "_API_KEY"}
		return out, fmt.Sprintf("TODO: %s sends an API key in the Authorization header; it is drafted as a bearer token. If the backend wants another word than Bearer, use api_key: {header: Authorization, scheme: WORD, value: ...}.", name)
	case s.Type == "apiKey" && (s.In == "header" || s.In == "query"):
		m := newOmap()
		m.set(s.In, s.Name)
		m.set("value", v("API_KEY"))
		out.block = one("api_key", m)
		if s.In == "header" {
			out.header = http.CanonicalHeaderKey(s.Name)
		} else {
			out.query = s.Name
		}
		out.env = []string{env + "_API_KEY"}
		return out, ""
	case s.Type == "oauth2" && s.Flows != nil && s.Flows.ClientCredentials != nil:
		f := s.Flows.ClientCredentials
		tokenURL, ok := b.absoluteURL(f.TokenURL)
		if !ok {
			return nil, fmt.Sprintf("TODO: %s is OAuth2 client credentials, but its tokenUrl %q is not a usable http(s) URL; set auth.oauth2 by hand.", name, f.TokenURL)
		}
		m := newOmap()
		m.set("token_url", policydoc.EscapeEnv(tokenURL))
		m.set("client_id", v("CLIENT_ID"))
		m.set("client_secret", v("CLIENT_SECRET"))
		why := ""
		if len(scopes) == 0 {
			scopes = slices.Sorted(maps.Keys(f.Scopes))
			if len(scopes) > 0 {
				why = fmt.Sprintf("TODO: no operation names the scopes of %s it needs; these are all the scopes the document declares, keep only those the tools need.", name)
			}
		}
		var ok2 []any
		for _, sc := range scopes {
			if sc != "" && !strings.ContainsAny(sc, " \t\r\n\"\\") {
				ok2 = append(ok2, policydoc.EscapeEnv(sc))
			}
		}
		if len(ok2) > 0 {
			m.set("scopes", ok2)
		}
		out.block, out.header = one("oauth2", m), "Authorization"
		out.env = []string{env + "_CLIENT_ID", env + "_CLIENT_SECRET"}
		return out, why
	case s.Type == "oauth2" || s.Type == "openIdConnect":
		// A user's token (authorization code, implicit, password flows):
		// toolgate cannot run the flow; a token obtained out of band, such
		// as a bot token, is a bearer token.
		out.block, out.header = one("bearer", tokenMap(v("TOKEN"))), "Authorization"
		out.env = []string{env + "_TOKEN"}
		return out, fmt.Sprintf("TODO: %s is %s, whose tokens a user grants; toolgate cannot run that flow. The draft sends a token obtained out of band (a bot or service token); to pass on each agent's own token instead, remove auth and set forward_headers: [Authorization].", name, describeFlows(s))
	case s.Type == "apiKey":
		return nil, fmt.Sprintf("TODO: %s sends an API key in the %s %q, which toolgate cannot set; use a header or query key if the backend accepts one.", name, s.In, s.Name)
	case s.Type == "mutualTLS":
		return nil, fmt.Sprintf("TODO: %s is mutual TLS: set tls: {cert_file: ..., key_file: ...} on the upstream.", name)
	}
	return nil, fmt.Sprintf("TODO: %s (%s) has no toolgate auth form; configure credentials by hand.", name, describeScheme(s))
}

func tokenMap(token string) *omap {
	m := newOmap()
	m.set("token", token)
	return m
}

func describeFlows(s *openapi3.SecurityScheme) string {
	if s.Type == "openIdConnect" {
		return "OpenID Connect"
	}
	var flows []string
	if f := s.Flows; f != nil {
		if f.AuthorizationCode != nil {
			flows = append(flows, "authorization code")
		}
		if f.Implicit != nil {
			flows = append(flows, "implicit")
		}
		if f.Password != nil {
			flows = append(flows, "password")
		}
	}
	if len(flows) == 0 {
		return "OAuth2"
	}
	return "OAuth2 (" + strings.Join(flows, ", ") + ")"
}

// absoluteURL resolves a URL the document gives (a token URL may be
// relative to the server) to an http(s) URL without credentials.
func (b *builder) absoluteURL(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", false
	}
	if !u.IsAbs() {
		base, _, _ := b.serverURL()
		bu, err := url.Parse(base + "/")
		if err != nil {
			return "", false
		}
		u = bu.ResolveReference(u)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return "", false
	}
	return u.String(), true
}

// envPrefix names the environment variables of the upstream's secrets:
// the upstream's name in upper case, without an _API suffix.
func (b *builder) envPrefix() string {
	env := strings.Trim(nonEnvRun.ReplaceAllString(strings.ToUpper(b.upstream), "_"), "_")
	env = strings.TrimSuffix(env, "_API")
	if env == "" || env[0] >= '0' && env[0] <= '9' {
		env = "API_" + env
	}
	return strings.TrimSuffix(env, "_")
}

var nonEnvRun = regexp.MustCompile(`[^A-Z0-9]+`)
