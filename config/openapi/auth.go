package openapi

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/toolgate/toolgate/config/policydoc"
)

// credentialDraft is one credential drafted from a security scheme: the
// upstream's auth, or one of its named credentials.
type credentialDraft struct {
	name   string // the key under credentials; "" for auth
	scheme string // the security scheme it comes from
	block  *omap  // {basic: {...}} and the like
	header string // the header it sets (canonical), or ""
	query  string // the query parameter it sets, or ""
	env    []string
	notes  []string
}

// upstreamAuth is the upstream's credentials drafted from the document's
// security schemes, with the comments that go with them. One scheme that
// serves every operation is the upstream's auth; operations that need
// different ones (Gotify's application token to push, its client token to
// read), or some none, get named credentials and each tool names its own.
type upstreamAuth struct {
	auth  *credentialDraft   // upstreams.<name>.auth, or nil
	named []*credentialDraft // upstreams.<name>.credentials, in order
	// tools holds, by operation, the credential a tool names and the
	// comments that go with its choice.
	tools map[*operation]toolCredential
	env   []string // every variable the credentials read, in order
	notes []string // about the schemes no credential comes from
}

// toolCredential is the credential one tool names ("" for none, or for
// the upstream's auth), and why.
type toolCredential struct {
	name  string
	notes []string
}

// any says the upstream sends a credential of toolgate's.
func (a upstreamAuth) any() bool { return a.auth != nil || len(a.named) > 0 }

// all lists the credentials: auth first, then the named ones.
func (a upstreamAuth) all() []*credentialDraft {
	var out []*credentialDraft
	if a.auth != nil {
		out = append(out, a.auth)
	}
	return append(out, a.named...)
}

// setsHeader says a credential of the upstream sets header name.
func (a upstreamAuth) setsHeader(name string) bool {
	for _, c := range a.all() {
		if c.header == name {
			return true
		}
	}
	return false
}

// setsQuery says a credential of the upstream sets the query parameter.
func (a upstreamAuth) setsQuery(name string) bool {
	for _, c := range a.all() {
		if c.query == name {
			return true
		}
	}
	return false
}

// opChoice is the security scheme an operation sends: the first
// alternative of its security requirement (or, without its own, the
// document's) that toolgate can send.
type opChoice struct {
	scheme   string   // "" for none
	listed   bool     // the operation (or the document) lists a security requirement
	required bool     // the requirement asks for a credential (no {} first)
	scopes   []string // the chosen alternative's scopes
	others   []string // the requirement's other alternatives
	notes    []string
}

// chooseScheme picks the scheme op sends. An alternative that names
// several schemes at once needs them all, and toolgate sends one
// credential per call; an empty alternative makes the credential optional.
func (b *builder) chooseScheme(op *operation) opChoice {
	reqs := op.op.Security
	if reqs == nil {
		reqs = &b.doc.Security
	}
	if reqs == nil || len(*reqs) == 0 {
		return opChoice{}
	}
	schemes := b.doc.Components.SecuritySchemes
	out := opChoice{listed: true, required: true}
	var names, skipped []string
	done := false
	for _, req := range *reqs {
		keys := slices.Sorted(maps.Keys(req))
		if len(keys) == 0 {
			names = append(names, "no credential")
		} else {
			names = append(names, strings.Join(keys, " + "))
		}
		if done {
			continue
		}
		switch {
		case len(keys) == 0:
			done, out.required = true, false
			out.notes = append(out.notes, "The document lets this operation be called without a credential (an empty security requirement), so it sends none.")
		case len(keys) > 1:
			skipped = append(skipped, fmt.Sprintf("%s (several schemes at once; toolgate sends one credential per call)", strings.Join(keys, " + ")))
		case schemes[keys[0]] == nil || schemes[keys[0]].Value == nil:
			skipped = append(skipped, keys[0]+" (not declared)")
		default:
			if blk, _ := b.authBlock(keys[0], schemes[keys[0]].Value, nil, credentialVars{}); blk == nil {
				skipped = append(skipped, fmt.Sprintf("%s (%s)", keys[0], describeScheme(schemes[keys[0]].Value)))
				continue
			}
			done, out.scheme, out.scopes = true, keys[0], req[keys[0]]
		}
	}
	for _, n := range names {
		if n != out.scheme {
			out.others = append(out.others, n)
		}
	}
	switch {
	case out.scheme != "" && len(names) > 1:
		out.notes = append(out.notes, fmt.Sprintf("The document accepts any of %s; this tool sends the first toolgate supports, %s.", strings.Join(names, ", "), out.scheme))
	case out.scheme == "" && out.required:
		out.notes = append(out.notes, fmt.Sprintf("TODO: the document requires %s, which toolgate cannot send; the tool sends no credential, so the backend will likely refuse it. Configure one by hand (upstreams.%s.credentials).", strings.Join(skipped, ", or "), b.upstream))
	}
	return out
}

// draftAuth drafts the upstream's credentials from the security each
// selected operation requires (see upstreamAuth): every operation sends
// the first scheme of its requirement toolgate supports, and one without a
// requirement sends none. When no operation names a requirement, the first
// scheme the document declares that toolgate supports is the upstream's
// auth: such a document usually forgot to say where it applies.
func (b *builder) draftAuth(ops []*operation) upstreamAuth {
	if b.doc.Components == nil || len(b.doc.Components.SecuritySchemes) == 0 {
		return upstreamAuth{}
	}
	schemes := b.doc.Components.SecuritySchemes
	choices := map[*operation]opChoice{}
	var used []string // the schemes chosen, in order of the operations
	scopes := map[string][]string{}
	anyListed, anyRequired, anyNone := false, false, false
	for _, op := range ops {
		ch := b.chooseScheme(op)
		choices[op] = ch
		anyListed = anyListed || ch.listed
		anyRequired = anyRequired || ch.required
		if ch.scheme == "" {
			anyNone = true
			continue
		}
		if !slices.Contains(used, ch.scheme) {
			used = append(used, ch.scheme)
		}
		for _, sc := range ch.scopes {
			if !slices.Contains(scopes[ch.scheme], sc) {
				scopes[ch.scheme] = append(scopes[ch.scheme], sc)
			}
		}
	}
	a := upstreamAuth{tools: map[*operation]toolCredential{}}
	if !anyListed {
		// No operation says: the first declared scheme toolgate supports
		// is every request's.
		for _, name := range slices.Sorted(maps.Keys(schemes)) {
			if ref := schemes[name]; ref != nil && ref.Value != nil {
				if blk, _ := b.authBlock(name, ref.Value, nil, credentialVars{}); blk != nil {
					used = []string{name}
					break
				}
			}
		}
		anyNone = false
	}
	single := len(used) == 1 && !anyNone
	byScheme := map[string]*credentialDraft{}
	taken := map[string]bool{}
	for _, name := range used {
		vars := credentialVars{prefix: b.envPrefix()}
		cd := &credentialDraft{scheme: name}
		if !single {
			cd.name = credentialName(name, used, taken)
			taken[cd.name] = true
			vars = credentialVars{prefix: b.envPrefix() + "_" + strings.ToUpper(strings.ReplaceAll(cd.name, "-", "_")), named: true}
		}
		blk, why := b.authBlock(name, schemes[name].Value, scopes[name], vars)
		cd.block, cd.header, cd.query, cd.env = blk.block, blk.header, blk.query, blk.env
		if why != "" {
			cd.notes = append(cd.notes, why)
		}
		a.env = append(a.env, cd.env...)
		byScheme[name] = cd
		if single {
			a.auth = cd
		} else {
			a.named = append(a.named, cd)
		}
	}
	if single && anyRequired {
		// Every tool sends auth: the alternatives are said once, here.
		var others []string
		for _, op := range ops {
			for _, o := range choices[op].others {
				if !slices.Contains(others, o) {
					others = append(others, o)
				}
			}
		}
		if len(others) > 0 {
			a.auth.notes = append(a.auth.notes, fmt.Sprintf("The operations' security requirements also accept %s; each operation sends the first toolgate supports, %s.", strings.Join(others, ", "), a.auth.scheme))
		}
	}
	for _, op := range ops {
		ch := choices[op]
		tc := toolCredential{notes: ch.notes}
		if cd := byScheme[ch.scheme]; cd != nil {
			tc.name = cd.name
		}
		a.tools[op] = tc
	}
	var unused []string
	for _, name := range slices.Sorted(maps.Keys(schemes)) {
		ref := schemes[name]
		if byScheme[name] != nil || ref == nil || ref.Value == nil {
			continue
		}
		if blk, why := b.authBlock(name, ref.Value, nil, credentialVars{}); blk == nil {
			a.notes = append(a.notes, why)
			continue
		}
		unused = append(unused, fmt.Sprintf("%s (%s)", name, describeScheme(ref.Value)))
	}
	switch {
	case len(unused) == 1:
		a.notes = append(a.notes, fmt.Sprintf("The document also declares the security scheme %s, which no tool sends: each operation sends the first scheme of its security requirement that toolgate supports.", unused[0]))
	case len(unused) > 1:
		a.notes = append(a.notes, fmt.Sprintf("The document also declares the security schemes %s, which no tool sends: each operation sends the first scheme of its security requirement that toolgate supports.", strings.Join(unused, ", ")))
	}
	return a
}

// credentialName names the credential of a security scheme: the scheme's
// name in snake case without a suffix that only says where it goes
// (appTokenAuthorizationHeader is app_token), or in full when that would
// name two of the schemes alike.
func credentialName(scheme string, schemes []string, taken map[string]bool) string {
	short := func(s string) string {
		n := snakeCase(s)
		for _, suffix := range []string{"_authorization_header", "_header", "_query", "_cookie", "_auth"} {
			if t := strings.TrimSuffix(n, suffix); t != n && t != "" {
				return t
			}
		}
		return n
	}
	name := short(scheme)
	for _, other := range schemes {
		if other != scheme && short(other) == name {
			name = snakeCase(scheme)
			break
		}
	}
	for base, i := name, 2; taken[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	return name
}

// snakeCase writes a scheme name as a credential name: lower case words
// joined by _, of letters, digits, _ and - only.
func snakeCase(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case unicode.IsUpper(r):
			if i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1])) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		case r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-'):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := strings.Trim(b.String(), "_-")
	if out == "" {
		return "credential"
	}
	return out
}

// credentialVars names the variables of one credential's secrets: prefix
// with a suffix per secret (GOTIFY_TOKEN, GOTIFY_USERNAME); a named
// credential's one secret is prefix itself (GOTIFY_APP_TOKEN).
type credentialVars struct {
	prefix string
	named  bool
}

func (v credentialVars) name(suffix string, only bool) string {
	if v.named && only {
		return v.prefix
	}
	return v.prefix + "_" + suffix
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
func (b *builder) authBlock(name string, s *openapi3.SecurityScheme, scopes []string, vars credentialVars) (*credentialDraft, string) {
	if vars.prefix == "" {
		vars.prefix = b.envPrefix()
	}
	// v names the variable of a secret: suffix, when the credential has
	// others (only false).
	v := func(suffix string, only bool) string { return "${" + vars.name(suffix, only) + "}" }
	envOf := func(suffix string, only bool) string { return vars.name(suffix, only) }
	one := func(kind string, m *omap) *omap {
		o := newOmap()
		o.set(kind, m)
		return o
	}
	out := &credentialDraft{}
	switch {
	case s.Type == "http" && strings.EqualFold(s.Scheme, "basic"):
		m := newOmap()
		m.set("username", v("USERNAME", false))
		m.set("password", v("PASSWORD", false))
		out.block, out.header = one("basic", m), "Authorization"
		out.env = []string{envOf("USERNAME", false), envOf("PASSWORD", false)}
		return out, ""
	case s.Type == "http" && strings.EqualFold(s.Scheme, "bearer"):
		out.block, out.header = one("bearer", tokenMap(v("TOKEN", true))), "Authorization"
		out.env = []string{envOf("TOKEN", true)}
		return out, ""
	case s.Type == "apiKey" && s.In == "header" && strings.EqualFold(s.Name, "Authorization"):
		// An API key in the Authorization header: SendGrid and most such
		// APIs want "Bearer <key>".
		out.block, out.header = one("bearer", tokenMap(v("API_KEY", true))), "Authorization"
		out.env = []string{envOf("API_KEY", true)}
		return out, fmt.Sprintf("TODO: %s sends an API key in the Authorization header; it is drafted as a bearer token. If the backend wants another word than Bearer, use api_key: {header: Authorization, scheme: WORD, value: ...}.", name)
	case s.Type == "apiKey" && (s.In == "header" || s.In == "query" || s.In == "cookie"):
		m := newOmap()
		m.set(s.In, s.Name)
		m.set("value", v("API_KEY", true))
		out.block = one("api_key", m)
		switch s.In {
		case "header":
			out.header = http.CanonicalHeaderKey(s.Name)
		case "cookie":
			out.header = "Cookie"
		default:
			out.query = s.Name
		}
		out.env = []string{envOf("API_KEY", true)}
		return out, ""
	case s.Type == "oauth2" && s.Flows != nil && s.Flows.ClientCredentials != nil:
		f := s.Flows.ClientCredentials
		tokenURL, ok := b.absoluteURL(f.TokenURL)
		if !ok {
			return nil, fmt.Sprintf("TODO: %s is OAuth2 client credentials, but its tokenUrl %q is not a usable http(s) URL; set auth.oauth2 by hand.", name, f.TokenURL)
		}
		m := newOmap()
		m.set("token_url", policydoc.EscapeEnv(tokenURL))
		m.set("client_id", v("CLIENT_ID", false))
		m.set("client_secret", v("CLIENT_SECRET", false))
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
		out.env = []string{envOf("CLIENT_ID", false), envOf("CLIENT_SECRET", false)}
		return out, why
	case s.Type == "oauth2" || s.Type == "openIdConnect":
		// A user's token (authorization code, implicit, password flows):
		// toolgate cannot run the flow; a token obtained out of band, such
		// as a bot token, is a bearer token.
		out.block, out.header = one("bearer", tokenMap(v("TOKEN", true))), "Authorization"
		out.env = []string{envOf("TOKEN", true)}
		remove := "auth"
		if vars.named {
			remove = "this credential (and the tools' credential keys naming it)"
		}
		return out, fmt.Sprintf("TODO: %s is %s, whose tokens a user grants; toolgate cannot run that flow. The draft sends a token obtained out of band (a bot or service token); to pass on each agent's own token instead, remove %s and set forward_headers: [Authorization].", name, describeFlows(s), remove)
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
