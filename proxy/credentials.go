package proxy

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// This file is an upstream's authentication at run time: the credential
// each backend request carries (upstreams.<name>.auth), and the agent's
// headers passed on to the backend (forward_headers). Every front sends
// the same: tool calls (upstream.send), passthrough routes (authTransport),
// and the requests Envoy sends under toolgate extproc (Pending.Backend,
// Passthrough.Decorate).

// runtimeEnv is what an upstream's runtime needs from the Core besides its
// settings: the clock (token expiry, file checks) and the logger.
type runtimeEnv struct {
	now    func() time.Time
	logger *slog.Logger
}

// upstreamAuth makes an upstream's credential. A nil *upstreamAuth is an
// upstream without auth: its credential is empty.
type upstreamAuth struct {
	header string // canonical header name, or ""
	query  string // query parameter, or ""
	value  func(context.Context) (credential, error)
	tokens *tokenSource // oauth2 only
	// secrets are the values the credential is made of, for redaction
	// (redact.go).
	secrets *secretSet
}

// credential is what one request carries: value in header, or in the
// query parameter. The zero credential adds nothing.
type credential struct {
	header, query, value string
	token                *cachedToken // the OAuth2 token, to drop if the backend refuses it
}

// authOutcome is the outcome of a call whose upstream credential could not
// be had (contracts.ReasonAuth): the token endpoint failed, or a credential
// file never could be read. Nothing was sent, the backend is not to blame,
// and a later identical call may succeed. The reason is also the code the
// call counts under in toolgate_upstream_requests_total.
func authOutcome() contracts.Outcome {
	return contracts.Reject(contracts.ReasonAuth)
}

// newUpstreamAuth makes the runtime of an upstream's auth settings; nil
// for none.
func newUpstreamAuth(name string, a *policy.UpstreamAuth, env runtimeEnv) *upstreamAuth {
	if a == nil {
		return nil
	}
	what := "upstream " + name + " " + string(a.Kind)
	out := &upstreamAuth{header: a.Header, query: a.Query, secrets: &secretSet{}}
	set := out.secrets
	prefix := ""
	if a.Scheme != "" {
		prefix = a.Scheme + " "
	}
	switch a.Kind {
	case policy.AuthBasic:
		user := secretSource(a.Username, policy.CheckUsername, env, what+" username_file", set)
		pass := secretSource(a.Password, policy.CheckPassword, env, what+" password_file", set)
		out.value = func(context.Context) (credential, error) {
			u, err := user()
			if err != nil {
				return credential{}, err
			}
			p, err := pass()
			if err != nil {
				return credential{}, err
			}
			// What the header's base64 encodes is a secret of its own:
			// it is found where the user name or password alone is too
			// short to be searched for.
			set.add(u + ":" + p)
			return credential{header: a.Header, value: prefix + base64.StdEncoding.EncodeToString([]byte(u+":"+p))}, nil
		}
		if a.Username.File == "" && a.Password.File == "" {
			set.addStatic(a.Username.Value + ":" + a.Password.Value)
			cred, _ := out.value(context.Background())
			out.value = func(context.Context) (credential, error) { return cred, nil }
		}
	case policy.AuthBearer, policy.AuthAPIKey:
		key := secretSource(a.Token, policy.CheckHeaderSecret, env, what+" file", set)
		out.value = func(context.Context) (credential, error) {
			v, err := key()
			if err != nil {
				return credential{}, err
			}
			return credential{header: a.Header, query: a.Query, value: prefix + v}, nil
		}
	case policy.AuthOAuth2:
		out.tokens = newTokenSource(name, a.OAuth2, env, set)
		out.value = func(ctx context.Context) (credential, error) {
			tok, err := out.tokens.token(ctx)
			if err != nil {
				return credential{}, err
			}
			return credential{header: a.Header, value: tok.header, token: tok}, nil
		}
	default:
		return nil
	}
	return out
}

// secretSource returns a secret's current value: the policy's value, or
// the file's content as last read and checked. Every value it takes is
// added to set.
func secretSource(s policy.Secret, check func(string) error, env runtimeEnv, what string, set *secretSet) func() (string, error) {
	if s.File == "" {
		set.addStatic(s.Value)
		return func() (string, error) { return s.Value, nil }
	}
	w := newWatchedFiles([]string{s.File}, func() (string, error) {
		v, err := policy.ReadSecretFile(s.File)
		if err == nil && check != nil {
			if cerr := check(v); cerr != nil {
				err = errors.New("the content " + cerr.Error())
			}
		}
		if err == nil {
			set.add(v)
		}
		return v, err
	}, env, what)
	return w.get
}

// credential returns the credential of the next request.
func (a *upstreamAuth) credential(ctx context.Context) (credential, error) {
	if a == nil {
		return credential{}, nil
	}
	return a.value(ctx)
}

// answered tells the auth what the backend answered a request that
// carried cred: a 401 refuses its OAuth2 token.
func (a *upstreamAuth) answered(cred credential, code int) {
	if code == http.StatusUnauthorized && cred.token != nil && a != nil && a.tokens != nil {
		a.tokens.rejected(cred.token)
	}
}

func (a *upstreamAuth) closeIdle() {
	if a != nil && a.tokens != nil {
		a.tokens.closeIdle()
	}
}

// apply puts the credential in a request's header, or in its query
// (rawQuery, returned with the parameter; any value the request had for
// it is replaced).
func (cr credential) apply(h http.Header, rawQuery string) string {
	switch {
	case cr.header != "":
		h[cr.header] = []string{cr.value}
	case cr.query != "":
		return withQueryParam(rawQuery, cr.query, cr.value)
	}
	return rawQuery
}

// withQueryParam returns rawQuery without any name parameter, with
// name=value at its end.
func withQueryParam(rawQuery, name, value string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(rawQuery, "&") {
		if part == "" {
			continue
		}
		key, _, _ := strings.Cut(part, "=")
		if k, err := url.QueryUnescape(key); err == nil && k == name || key == name {
			continue
		}
		b.WriteString(part)
		b.WriteByte('&')
	}
	b.WriteString(url.QueryEscape(name))
	b.WriteByte('=')
	b.WriteString(url.QueryEscape(value))
	return b.String()
}

// forward copies the agent's headers that the upstream's forward_headers
// lists into a backend request's header h, over what the policy set for
// them. The value slices are shared, as in backendHeader.
func (u *upstream) forward(h, agent http.Header) {
	for _, name := range u.cfg.ForwardHeaders {
		if v, ok := agent[name]; ok {
			h[name] = v
		}
	}
}

// authorize puts the upstream's credential in req. When none can be had,
// ok is false and the attempt ends unsent: `auth` (upstream, retryable,
// nothing happened; not a backend failure, so the breaker does not hear
// of it), or `canceled` when the caller went away meanwhile; a is then
// that attempt.
func (u *upstream) authorize(ctx context.Context, req *http.Request, a *attempt) (credential, bool) {
	cred, err := u.auth.credential(ctx)
	if err != nil {
		*a = u.authFailed(ctx)
		return credential{}, false
	}
	req.URL.RawQuery = cred.apply(req.Header, req.URL.RawQuery)
	return cred, true
}

// authFailed is the attempt that could not get its credential.
func (u *upstream) authFailed(ctx context.Context) attempt {
	if errors.Is(ctx.Err(), context.Canceled) {
		return attempt{outcome: contracts.ClassifyTransport(contracts.FailCanceled, false, false, false), verdict: policy.VerdictIgnored}
	}
	u.codes.auth.Inc()
	return attempt{outcome: authOutcome(), verdict: policy.VerdictIgnored}
}

// credential gets a pending call's credential (toolgate extproc: Envoy
// sends the request, so the credential is had before it is described).
// ok=false carries the outcome that ends the call unsent.
func (c *Core) credential(ctx context.Context, cl *Call) (credential, contracts.Outcome, bool) {
	up := cl.tool.upstream
	cred, err := up.auth.credential(ctx)
	if err != nil {
		a := up.authFailed(ctx)
		cl.upCode = string(a.outcome.Reason)
		return credential{}, a.outcome, false
	}
	return cred, contracts.Outcome{}, true
}

// authTransport adds the upstream's credential to passthrough requests:
// they reach the same backend as the tools, with the same credential. A
// credential that cannot be had fails the request (the reverse proxy
// answers 502).
type authTransport struct {
	next http.RoundTripper
	up   *upstream
}

func (t authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	cred, err := t.up.auth.credential(req.Context())
	if err != nil {
		t.up.authFailed(req.Context())
		return nil, err
	}
	out := req.Clone(req.Context())
	out.URL.RawQuery = cred.apply(out.Header, out.URL.RawQuery)
	resp, err := t.next.RoundTrip(out)
	if err == nil {
		t.up.auth.answered(cred, resp.StatusCode)
	}
	return resp, err
}

// passthroughTransport is the round tripper of the upstream's passthrough
// routes.
func (u *upstream) passthroughTransport() http.RoundTripper {
	if u.auth == nil {
		return u.client.Transport
	}
	return authTransport{next: u.client.Transport, up: u}
}

// Decorate returns the headers toolgate adds to a passthrough request that
// someone else sends (Envoy, under toolgate extproc): the upstream's static
// headers and its credential; and rawQuery with the credential's query
// parameter, if it has one. The error says the credential could not be
// had; the request must not go on without it.
func (p *Passthrough) Decorate(ctx context.Context, rawQuery string) (http.Header, string, error) {
	h := p.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if p.up == nil {
		return h, rawQuery, nil
	}
	cred, err := p.up.auth.credential(ctx)
	if err != nil {
		p.up.authFailed(ctx)
		return nil, "", err
	}
	return h, cred.apply(h, rawQuery), nil
}
