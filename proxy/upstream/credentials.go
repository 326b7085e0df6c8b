package upstream

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/redact"
)

// This file is an upstream's authentication at run time: the credential
// each backend request carries (upstreams.<name>.auth). Every front sends
// the same: the pipeline puts it in tool calls, passthrough routes and the
// requests Envoy sends under toolgate extproc (proxy's auth.go).

// Env is what an upstream's credentials and TLS need besides their
// settings: the clock (token expiry, file checks) and the logger.
type Env struct {
	Now    func() time.Time
	Logger *slog.Logger
}

// Auth makes an upstream's credential. A nil *Auth is an upstream without
// auth: its credential is empty.
type Auth struct {
	header string // canonical header name, or ""
	query  string // query parameter, or ""
	value  func(context.Context) (Credential, error)
	tokens *tokenSource // oauth2 only
	// secrets are the values the credential is made of, for redaction.
	secrets *redact.SecretSet
}

// Credential is what one request carries: value in header, or in the
// query parameter. The zero Credential adds nothing.
type Credential struct {
	header, query, value string
	token                *cachedToken // the OAuth2 token, to drop if the backend refuses it
}

// NewAuth makes the runtime of an upstream's auth settings; nil for none.
// name is the upstream's, for the log.
func NewAuth(name string, a *policy.UpstreamAuth, env Env) *Auth {
	if a == nil {
		return nil
	}
	what := "upstream " + name + " " + string(a.Kind)
	out := &Auth{header: a.Header, query: a.Query, secrets: &redact.SecretSet{}}
	set := out.secrets
	prefix := ""
	switch {
	case a.Scheme != "":
		prefix = a.Scheme + " "
	case a.Cookie != "":
		prefix = a.Cookie + "="
	}
	switch a.Kind {
	case policy.AuthBasic:
		user := secretSource(a.Username, policy.CheckUsername, env, what+" username_file", set)
		pass := secretSource(a.Password, policy.CheckPassword, env, what+" password_file", set)
		out.value = func(context.Context) (Credential, error) {
			u, err := user()
			if err != nil {
				return Credential{}, err
			}
			p, err := pass()
			if err != nil {
				return Credential{}, err
			}
			// What the header's base64 encodes is a secret of its own:
			// it is found where the user name or password alone is too
			// short to be searched for.
			set.Add(u + ":" + p)
			return Credential{header: a.Header, value: prefix + base64.StdEncoding.EncodeToString([]byte(u+":"+p))}, nil
		}
		if a.Username.File == "" && a.Password.File == "" {
			set.AddStatic(a.Username.Value + ":" + a.Password.Value)
			cred, _ := out.value(context.Background())
			out.value = func(context.Context) (Credential, error) { return cred, nil }
		}
	case policy.AuthBearer, policy.AuthAPIKey:
		key := secretSource(a.Token, policy.CheckHeaderSecret, env, what+" file", set)
		out.value = func(context.Context) (Credential, error) {
			v, err := key()
			if err != nil {
				return Credential{}, err
			}
			return Credential{header: a.Header, query: a.Query, value: prefix + v}, nil
		}
	case policy.AuthOAuth2:
		out.tokens = newTokenSource(name, a.OAuth2, env, set)
		out.value = func(ctx context.Context) (Credential, error) {
			tok, err := out.tokens.token(ctx)
			if err != nil {
				return Credential{}, err
			}
			return Credential{header: a.Header, value: tok.header, token: tok}, nil
		}
	default:
		return nil
	}
	return out
}

// secretSource returns a secret's current value: the policy's value, or
// the file's content as last read and checked. Every value it takes is
// added to set.
func secretSource(s policy.Secret, check func(string) error, env Env, what string, set *redact.SecretSet) func() (string, error) {
	if s.File == "" {
		set.AddStatic(s.Value)
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
			set.Add(v)
		}
		return v, err
	}, env, what)
	return w.get
}

// Credential returns the credential of the next request.
func (a *Auth) Credential(ctx context.Context) (Credential, error) {
	if a == nil {
		return Credential{}, nil
	}
	return a.value(ctx)
}

// Answered tells the auth what the backend answered a request that
// carried cred: a 401 refuses its OAuth2 token.
func (a *Auth) Answered(cred Credential, code int) {
	if code == http.StatusUnauthorized && cred.token != nil && a != nil && a.tokens != nil {
		a.tokens.rejected(cred.token)
	}
}

// Secrets are the values the credential is made of, the policy's and the
// ones it took at run time (files as read, OAuth2 tokens as issued), for
// redaction; nil without auth.
func (a *Auth) Secrets() *redact.SecretSet {
	if a == nil {
		return nil
	}
	return a.secrets
}

// CloseIdle closes the token endpoint's idle connections.
func (a *Auth) CloseIdle() {
	if a != nil && a.tokens != nil {
		a.tokens.closeIdle()
	}
}

// Apply puts the credential in a request's header, or in its query
// (rawQuery, returned with the parameter; any value the request had for
// it is replaced).
func (cr Credential) Apply(h http.Header, rawQuery string) string {
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

// NewStaticAuth is an Auth whose credential is always value, in header or
// in the query parameter query, and that holds no secret: the dry run
// (proxy.Try) puts its mask where the real credential goes with it.
func NewStaticAuth(header, query, value string) *Auth {
	cred := Credential{header: header, query: query, value: value}
	return &Auth{header: header, query: query, value: func(context.Context) (Credential, error) { return cred, nil }}
}
