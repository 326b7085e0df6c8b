package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/policy"
)

// This file compiles an upstream's credentials: auth, tls and
// forward_headers. Every file named is read at load (a file that cannot be
// read or parsed is a load error); toolgate reads it again at run time
// when it changes. No message ever repeats a secret: a value is judged,
// never quoted.

// upstreamAuth compiles upstreams.<name>.auth, .credentials, .tls and
// .forward_headers into up. u is the parsed url (nil when it did not
// parse).
func (c *compiler) upstreamAuth(base string, s *upstreamSpec, u *url.URL, up *policy.Upstream, callerHeader string) {
	dir := filepath.Dir(c.lookup(base).File)
	if s.Auth != nil {
		up.Auth = c.auth(base+".auth", s.Auth, dir, callerHeader)
	}
	if s.Credentials != nil && len(s.Credentials) == 0 {
		c.errorAt(base+".credentials", "names no credential; name one (credentials: {NAME: {bearer: ...}}) or remove the key")
	}
	for _, name := range slices.Sorted(maps.Keys(s.Credentials)) {
		path := base + ".credentials." + name
		a := s.Credentials[name]
		switch {
		case !credentialNameRE.MatchString(name):
			c.errorAt(path+"#key", "%q is not a credential name (letters, digits, _ and -)", name)
		case a == nil:
			c.errorAt(path, "must not be empty: name one of basic, bearer, api_key and oauth2")
		default:
			if ca := c.auth(path, a, dir, callerHeader); ca != nil {
				if up.Credentials == nil {
					up.Credentials = map[string]*policy.UpstreamAuth{}
				}
				up.Credentials[name] = ca
			}
		}
	}
	for k := range s.Headers {
		for _, cr := range upstreamAuths(up) {
			if http.CanonicalHeaderKey(k) == cr.auth.Header {
				c.errorAt(base+".headers."+k+"#key", "%s is set by %s.%s; remove one of them", cr.auth.Header, cr.key, cr.auth.Kind)
				break
			}
		}
	}
	if s.TLS != nil {
		if u != nil && u.Scheme != "https" {
			c.errorAt(base+".tls", "applies to https:// upstreams only")
		} else {
			up.TLS = c.tls(base+".tls", s.TLS, dir)
		}
	}
	seen := map[string]bool{}
	for i, h := range s.ForwardHeaders {
		path := fmt.Sprintf("%s.forward_headers[%d]", base, i)
		if !headerNameRE.MatchString(h) {
			c.errorAt(path, "%q is not a valid header name", h)
			continue
		}
		name := http.CanonicalHeaderKey(h)
		if why := unforwardable(name, callerHeader, upstreamAuths(up)); why != "" {
			c.errorAt(path, "%s cannot be forwarded: it %s", h, why)
			continue
		}
		if seen[name] {
			c.errorAt(path, "%s is listed twice (header names are case-insensitive)", h)
			continue
		}
		seen[name] = true
		up.ForwardHeaders = append(up.ForwardHeaders, name)
	}
	up.IdentityHeaders = c.identityHeaders(base, s.NonIdentifyingHeaders, up.ForwardHeaders)
}

// credentialNameRE matches the name of an upstream's credential.
var credentialNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// namedAuth is one credential of an upstream, with the key it is written
// at under the upstream: "auth", or "credentials.NAME".
type namedAuth struct {
	key  string
	auth *policy.UpstreamAuth
}

// upstreamAuths lists up's credentials: auth first, then the named ones
// by name.
func upstreamAuths(up *policy.Upstream) []namedAuth {
	var out []namedAuth
	if up.Auth != nil {
		out = append(out, namedAuth{"auth", up.Auth})
	}
	for _, name := range slices.Sorted(maps.Keys(up.Credentials)) {
		out = append(out, namedAuth{"credentials." + name, up.Credentials[name]})
	}
	return out
}

// identityHeaders compiles upstreams.<name>.non_identifying_headers and
// returns the forwarded headers that identify the end user: every one
// forwarded but those listed there. A listed header must be forwarded, and
// a credential or a session (AlwaysIdentifying) always identifies.
func (c *compiler) identityHeaders(base string, shared, forwarded []string) []string {
	if len(shared) == 0 {
		return forwarded
	}
	not := map[string]bool{}
	for i, h := range shared {
		path := fmt.Sprintf("%s.non_identifying_headers[%d]", base, i)
		name := http.CanonicalHeaderKey(h)
		switch {
		case !headerNameRE.MatchString(h):
			c.errorAt(path, "%q is not a valid header name", h)
		case policy.AlwaysIdentifying(name):
			c.errorAt(path, "%s always identifies the end user (a credential or a session), so calls that differ in it never share an idempotency record; remove it from this list", h)
		case !slices.Contains(forwarded, name):
			c.errorAt(path, "%s is not in forward_headers; list only forwarded headers that do not identify the end user", h)
		case not[name]:
			c.errorAt(path, "%s is listed twice (header names are case-insensitive)", h)
		default:
			not[name] = true
		}
	}
	var out []string
	for _, name := range forwarded {
		if !not[name] {
			out = append(out, name)
		}
	}
	return out
}

// unforwardable says why an agent's header may not reach a backend, or "":
// auths are the upstream's credentials, whose headers toolgate sets.
func unforwardable(name, callerHeader string, auths []namedAuth) string {
	switch name {
	case callerHeader:
		return "is the caller identity header (server.caller_header), which never reaches a backend"
	case "X-Forwarded-Client-Cert":
		return "carries the caller's identity, which never reaches a backend"
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return "is a hop-by-hop header"
	case "Host":
		return "is set from the upstream's url"
	case "Content-Length", "Content-Type":
		return "is set from the body toolgate sends"
	case "X-Request-Id":
		return "carries the call id; toolgate sets it"
	case "Traceparent", "Tracestate":
		return "carries the trace context; toolgate sets it"
	case "Idempotency-Key":
		return "is toolgate's; a tool's idempotency.forward_header passes the key on"
	}
	for _, cr := range auths {
		if name == cr.auth.Header {
			return fmt.Sprintf("is set by %s.%s", cr.key, cr.auth.Kind)
		}
	}
	return ""
}

// authHeaders maps the headers an upstream spec's credentials set
// (canonical: auth's, and each named credential's) to where each is
// written ("auth", "credentials.NAME"). Tools may not bind them.
func authHeaders(s *upstreamSpec) map[string]string {
	out := map[string]string{}
	add := func(key string, a *authSpec) {
		if h := specAuthHeader(a); h != "" {
			if _, ok := out[h]; !ok {
				out[h] = key
			}
		}
	}
	add("auth", s.Auth)
	for _, name := range slices.Sorted(maps.Keys(s.Credentials)) {
		add("credentials."+name, s.Credentials[name])
	}
	return out
}

// specAuthHeader is the header an auth spec sets, canonical, or "".
func specAuthHeader(a *authSpec) string {
	switch {
	case a == nil:
		return ""
	case a.APIKey != nil && a.APIKey.Cookie != "":
		return "Cookie"
	case a.APIKey != nil:
		if a.APIKey.Header == "" || !headerNameRE.MatchString(a.APIKey.Header) {
			return ""
		}
		return http.CanonicalHeaderKey(a.APIKey.Header)
	case a.Basic != nil || a.Bearer != nil || a.OAuth2 != nil:
		return "Authorization"
	}
	return ""
}

func (c *compiler) auth(base string, a *authSpec, dir, callerHeader string) *policy.UpstreamAuth {
	n := 0
	for _, set := range []bool{a.Basic != nil, a.Bearer != nil, a.APIKey != nil, a.OAuth2 != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		c.errorAt(base, "name one of basic, bearer, api_key and oauth2")
		return nil
	case n > 1:
		c.errorAt(base, "name only one of basic, bearer, api_key and oauth2")
		return nil
	}
	errs := len(c.errs)
	var out *policy.UpstreamAuth
	switch {
	case a.Basic != nil:
		b, p := a.Basic, base+".basic"
		out = &policy.UpstreamAuth{Kind: policy.AuthBasic, Header: "Authorization", Scheme: "Basic"}
		out.Username = c.secret(p, "username", b.Username, b.UsernameFile, dir, true, policy.CheckUsername)
		// The password may be empty (an API key sent as the username).
		out.Password = c.secret(p, "password", b.Password, b.PasswordFile, dir, false, policy.CheckPassword)
	case a.Bearer != nil:
		b, p := a.Bearer, base+".bearer"
		out = &policy.UpstreamAuth{Kind: policy.AuthBearer, Header: "Authorization", Scheme: "Bearer"}
		out.Token = c.secret(p, "token", b.Token, b.TokenFile, dir, true, policy.CheckHeaderSecret)
	case a.APIKey != nil:
		out = c.apiKey(base+".api_key", a.APIKey, dir, callerHeader)
	default:
		out = c.oauth2(base+".oauth2", a.OAuth2, dir)
	}
	if len(c.errs) > errs {
		return nil
	}
	return out
}

func (c *compiler) apiKey(base string, k *apiKeySpec, dir, callerHeader string) *policy.UpstreamAuth {
	out := &policy.UpstreamAuth{Kind: policy.AuthAPIKey}
	switch {
	case k.Cookie != "" && (k.Header != "" || k.Query != ""):
		c.errorAt(base+".cookie", "set header, query or cookie, only one")
	case k.Cookie != "":
		if !headerNameRE.MatchString(k.Cookie) {
			c.errorAt(base+".cookie", "%q is not a valid cookie name", k.Cookie)
		}
		// Cookie: NAME=value, replacing any cookie the request had.
		out.Header, out.Cookie = "Cookie", k.Cookie
	case k.Header == "" && k.Query == "":
		c.errorAt(base, "header, query or cookie is required: where the key goes")
	case k.Header != "" && k.Query != "":
		c.errorAt(base+".query", "set header or query, not both")
	case k.Header != "":
		name := http.CanonicalHeaderKey(k.Header)
		if !headerNameRE.MatchString(k.Header) {
			c.errorAt(base+".header", "%q is not a valid header name", k.Header)
		} else if why := unforwardable(name, callerHeader, nil); why != "" {
			c.errorAt(base+".header", "%s cannot carry a key: it %s", k.Header, why)
		}
		out.Header = name
	default:
		out.Query = k.Query
	}
	if k.Scheme != "" {
		switch {
		case k.Header == "":
			c.errorAt(base+".scheme", "applies to a key sent in a header")
		case !headerNameRE.MatchString(k.Scheme):
			c.errorAt(base+".scheme", "%q is not a single word (such as Token or Bearer)", k.Scheme)
		}
		out.Scheme = k.Scheme
	}
	out.Token = c.secret(base, "value", k.Value, k.ValueFile, dir, true, policy.CheckHeaderSecret)
	return out
}

// oauth2Reserved are the token request's parameters that toolgate sets.
var oauth2Reserved = map[string]string{
	"grant_type":    "is client_credentials",
	"client_id":     "is set from client_id",
	"client_secret": "is set from client_secret",
	"scope":         "is set from scopes",
}

func (c *compiler) oauth2(base string, o *oauth2Spec, dir string) *policy.UpstreamAuth {
	out := &policy.UpstreamAuth{Kind: policy.AuthOAuth2, Header: "Authorization"}
	s := &policy.OAuth2Settings{TokenURL: o.TokenURL, AuthStyle: o.AuthStyle}
	out.OAuth2 = s
	u, err := url.Parse(o.TokenURL)
	switch {
	case o.TokenURL == "":
		c.errorAt(base, "token_url is required")
	case err != nil:
		c.errorAt(base+".token_url", "is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		c.errorAt(base+".token_url", "must be an http:// or https:// URL")
	case u.Host == "":
		c.errorAt(base+".token_url", "has no host")
	case u.User != nil || u.Fragment != "":
		c.errorAt(base+".token_url", "must not carry credentials or a fragment (use client_id and client_secret)")
	}
	s.ClientID = c.secret(base, "client_id", o.ClientID, o.ClientIDFile, dir, true, policy.CheckHeaderSecret)
	s.ClientSecret = c.secret(base, "client_secret", o.ClientSecret, o.ClientSecretFile, dir, true, policy.CheckHeaderSecret)
	for i, scope := range o.Scopes {
		if scope == "" || strings.ContainsAny(scope, " \t\r\n\"\\") {
			c.errorAt(fmt.Sprintf("%s.scopes[%d]", base, i), "a scope is one word (list each scope on its own)")
			continue
		}
		s.Scopes = append(s.Scopes, scope)
	}
	for _, k := range slices.Sorted(maps.Keys(o.Params)) {
		if why, ok := oauth2Reserved[k]; ok {
			c.errorAt(base+".params."+k+"#key", "cannot be set: %s %s", k, why)
			continue
		}
		if s.Params == nil {
			s.Params = map[string]string{}
		}
		s.Params[k] = o.Params[k]
	}
	switch o.AuthStyle {
	case "", policy.OAuth2AuthHeader, policy.OAuth2AuthParams:
	default:
		c.errorAt(base+".auth_style", "%q is not valid (want header or params)", o.AuthStyle)
	}
	if o.TLS != nil {
		if err == nil && u.Scheme != "https" {
			c.errorAt(base+".tls", "applies to an https:// token_url only")
		} else {
			s.TLS = c.tls(base+".tls", o.TLS, dir)
		}
	}
	return out
}

// secret compiles a secret written as key (a value) or key_file. check,
// when not nil, judges the value (or the file's content); its error never
// repeats the value. required says one of the two must be set; an unset
// optional secret is the empty value.
func (c *compiler) secret(base, key, value, file, dir string, required bool, check func(string) error) policy.Secret {
	switch {
	case value != "" && file != "":
		c.errorAt(base+"."+key+"_file", "set %s or %s_file, not both", key, key)
		return policy.Secret{}
	case file != "":
		path := resolvePath(dir, file)
		content, err := policy.ReadSecretFile(path)
		if err != nil {
			c.errorAt(base+"."+key+"_file", "cannot read %q: %s", file, fileError(err))
			return policy.Secret{}
		}
		if check != nil {
			if err := check(content); err != nil {
				c.errorAt(base+"."+key+"_file", "the content of %q %v", file, err)
			}
		}
		return policy.Secret{File: path}
	case value == "" && required && !c.written(base+"."+key):
		c.errorAt(base, "%s or %s_file is required", key, key)
	case check != nil && (value != "" || required):
		if err := check(value); err != nil {
			c.errorAt(base+"."+key, "%v", err)
		}
	}
	return policy.Secret{Value: value}
}

// written reports whether the key at path was written in the policy.
func (c *compiler) written(path string) bool {
	_, ok := c.pos[path]
	return ok
}

// tls compiles a tls block, reading every file it names.
func (c *compiler) tls(base string, t *tlsSpec, dir string) *policy.TLSSettings {
	out := &policy.TLSSettings{ServerName: t.ServerName}
	if *t == (tlsSpec{}) {
		c.errorAt(base, "set ca_file, cert_file and key_file, or server_name")
		return nil
	}
	if t.CAFile != "" {
		out.CAFile = resolvePath(dir, t.CAFile)
		if _, err := policy.ReadCAFile(out.CAFile); err != nil {
			c.errorAt(base+".ca_file", "cannot use %q: %s", t.CAFile, fileError(err))
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		c.errorAt(base+".cert_file", "needs key_file (the certificate's private key)")
	case t.KeyFile != "" && t.CertFile == "":
		c.errorAt(base+".key_file", "needs cert_file (the client certificate)")
	case t.CertFile != "":
		out.CertFile, out.KeyFile = resolvePath(dir, t.CertFile), resolvePath(dir, t.KeyFile)
		if _, err := policy.ReadKeyPair(out.CertFile, out.KeyFile); err != nil {
			c.errorAt(base+".cert_file", "cannot use %q with %q: %s", t.CertFile, t.KeyFile, fileError(err))
		}
	}
	if t.ServerName != "" && !validServerName(t.ServerName) {
		c.errorAt(base+".server_name", "%q is not a host name", t.ServerName)
	}
	return out
}

// validServerName reports whether s is a DNS name or an IP address.
func validServerName(s string) bool {
	if net.ParseIP(s) != nil {
		return true
	}
	name, ok := allowedHost(s)
	return ok && !strings.HasPrefix(name, "*.") && !strings.Contains(s, "_")
}

// resolvePath makes a file named in a policy absolute: a relative path is
// relative to the directory of the policy file that names it.
func resolvePath(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	abs, err := filepath.Abs(filepath.Join(dir, p))
	if err != nil {
		return filepath.Join(dir, p)
	}
	return abs
}

// fileError is a file error without the path the message already names.
func fileError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
