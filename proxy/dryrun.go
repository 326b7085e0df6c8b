package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/redact"
	"github.com/toolgate/toolgate/proxy/toolformats"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// This file is the dry run behind `toolgate try`: one call through the
// whole pipeline of a fresh Core (access, arguments, idempotency, rate and
// budget, the binding, the upstream's credential, classification, messages,
// the envelope), whose backend is a recorder (dryBackend). It keeps the
// request it is handed, in place of a connection, and answers with a saved
// answer, or with nothing. Nothing is dialled: not the backend, not an
// OAuth2 token endpoint; no TLS or credential file is read at run time
// (loading the policy checks them, as for serve).
//
// The request is kept as toolgate writes it to a plain-HTTP backend
// (upstream.WriteRequest); for an https:// upstream, net/http sends the same fields,
// over HTTP/2 where the server speaks it. The arguments reach the Core as
// the HTTP front hands them over (toolformats.NullArgs).
//
// What differs from a served call, and why:
//   - The Core is new: an empty memory idempotency store, fresh rate
//     buckets and budgets, closed breakers. A side-effecting call runs once.
//   - One attempt: a retry would hand the recorder the same request, and
//     the saved answer would answer it the same way.
//   - The upstream's credential is a mask, put where the real one goes
//     (maskedAuth): the request shows where the secret goes, never the
//     secret, and no token is fetched. A tool that names a credential
//     (upstreams.<name>.credentials) shows that one's mask.

// DryRun is one call to try without a backend.
type DryRun struct {
	Tool string
	// Args is the arguments object as JSON, as an agent posts it to
	// POST /v1/tools/{tool}. Empty means no arguments.
	Args []byte
	// Caller is the caller the call runs as (an access.callers name);
	// empty for a caller the policy does not list.
	Caller string
	// IdempotencyKey is the Idempotency-Key header's value; empty for
	// none.
	IdempotencyKey string
	// CallID is the call's X-Request-Id; empty for a fresh id.
	CallID string
	// Answer is the backend's saved answer; nil to build the request only.
	Answer *Answer
	// Version is toolgate's version, for the User-Agent the backend sees.
	Version string
	// Logger receives the Core's log lines (a response expression that
	// fails is a warning); nil discards them.
	Logger *slog.Logger
}

// DryRunResult is what a dry run produced.
type DryRunResult struct {
	// Upstream names the tool's upstream.
	Upstream string
	// Method and URL are the backend request's method and full URL; empty
	// when nothing would be sent.
	Method, URL string
	// Request is the backend request as HTTP/1.1 writes it, with the
	// header fields after Host sorted by name and "\n" line ends: the
	// request line, Host, the fields, a blank line and the body. Nil when
	// the call ended before the send (refused arguments, access, a
	// missing idempotency key, an unknown tool).
	Request []byte
	// Result is the call's result: nil when the request was built and no
	// answer was given.
	Result *Result
}

// errNoAnswer ends a dry run given no answer, once its request is built.
var errNoAnswer = errors.New("dry run: no answer")

// errSecondAttempt refuses a second attempt of a dry run: there is one.
var errSecondAttempt = errors.New("dry run: a second attempt")

// maskedSecret stands for a secret in a dry run's request.
const maskedSecret = "***"

// Try runs one call of snap's tool through the whole pipeline against a
// recorder instead of the backend (see DryRun). snap is not modified.
func Try(ctx context.Context, snap *policy.Snapshot, d DryRun) (*DryRunResult, error) {
	return try(ctx, snap, d, nil)
}

// try is Try, with secrets besides the tool's own to clear from the
// answer (View.Try).
func try(ctx context.Context, snap *policy.Snapshot, d DryRun, secrets []redact.Needle) (*DryRunResult, error) {
	dry := *snap
	dry.Upstreams = make(map[string]*policy.Upstream, len(snap.Upstreams))
	auths := make(map[string]*policy.Upstream, len(snap.Upstreams))
	for name, up := range snap.Upstreams {
		cp := *up
		cp.Retries.Attempts = 1
		// The Core makes no credential runtime (no token source, no file
		// watch); the masks take their place below.
		auths[name], cp.Auth, cp.Credentials = up, nil, nil
		dry.Upstreams[name] = &cp
	}
	rec := &dryBackend{answer: d.Answer}
	c, err := NewCore(&dry, Options{
		Version:   d.Version,
		Logger:    d.Logger,
		Transport: func(*policy.Upstream) http.RoundTripper { return rec },
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	v := c.View()
	for name, up := range v.st.upstreams {
		cfg := auths[name]
		up.auth = maskedAuth(cfg.Auth)
		for cname, a := range cfg.Credentials {
			if up.creds == nil {
				up.creds = map[string]*upstream.Auth{}
			}
			up.creds[cname] = maskedAuth(a)
		}
	}
	for _, t := range v.st.tools {
		t.auth = t.upstream.authOf(t.contract.Credential)
	}
	out := &DryRunResult{}
	body := d.Args
	if body == nil {
		body = []byte{}
	}
	if t := v.st.tools[d.Tool]; t != nil {
		if len(secrets) > 0 {
			t.secrets = append(slices.Clip(t.secrets), secrets...)
			t.red.Store(nil) // made again, with them, on first use
		}
		out.Upstream = t.contract.Upstream
		body = toolformats.NullArgs(t.contract, body) // as the HTTP front reads them
	}
	res := v.Call(ctx, &Request{
		Tool:           d.Tool,
		Body:           body,
		Caller:         d.Caller,
		CallID:         d.CallID,
		IdempotencyKey: d.IdempotencyKey,
		Front:          "try",
	})
	if rec.req != nil {
		out.Method, out.URL, out.Request = rec.method, rec.url, rec.req
		if d.Answer == nil {
			return out, nil
		}
	}
	out.Result = res
	return out, nil
}

// maskedAuth is an upstream credential that puts a mask where the secret
// goes: "Basic ***", "Bearer ***", an API key's "***" (after its scheme,
// if any, or its cookie's name), or for OAuth2 "Bearer *** (oauth2 token from TOKEN_URL)". Nil
// for an upstream without auth.
func maskedAuth(a *policy.UpstreamAuth) *upstream.Auth {
	if a == nil {
		return nil
	}
	mask := maskedSecret
	switch {
	case a.Kind == policy.AuthOAuth2 && a.OAuth2 != nil:
		mask = "Bearer " + maskedSecret + " (oauth2 token from " + a.OAuth2.TokenURL + ")"
	case a.Scheme != "":
		mask = a.Scheme + " " + maskedSecret
	case a.Cookie != "":
		mask = a.Cookie + "=" + maskedSecret
	}
	return upstream.NewStaticAuth(a.Header, a.Query, mask)
}

// dryBackend is a dry run's backend: it records the request it is sent and
// answers with the saved answer, if any.
type dryBackend struct {
	answer *Answer

	method, url string
	req         []byte
}

func (r *dryBackend) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.req != nil {
		return nil, errSecondAttempt
	}
	// A masked query credential reads as written, not percent-encoded.
	req.URL.RawQuery = strings.ReplaceAll(req.URL.RawQuery, "="+url.QueryEscape(maskedSecret), "="+maskedSecret)
	r.method = req.Method
	r.url = req.URL.Scheme + "://" + req.Host + req.URL.Opaque
	if req.URL.RawQuery != "" {
		r.url += "?" + req.URL.RawQuery
	}
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	err := upstream.WriteRequest(w, req) // as toolgate writes it to a plain-HTTP backend
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return nil, err
	}
	r.req = sortedRequest(b.Bytes())
	if r.answer == nil {
		return nil, errNoAnswer
	}
	a := r.answer
	return &http.Response{
		Status:        http.StatusText(a.Code),
		StatusCode:    a.Code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        a.Header.Clone(),
		Body:          io.NopCloser(bytes.NewReader(a.Body)),
		ContentLength: int64(len(a.Body)),
		Request:       req,
	}, nil
}

// sortedRequest is a request as upstream.WriteRequest wrote it, with "\n" line
// ends and the header fields after Host sorted by name (stably: repeated
// fields keep their order), so that the same call always reads the same.
func sortedRequest(wire []byte) []byte {
	head, body, _ := bytes.Cut(wire, []byte("\r\n\r\n"))
	lines := strings.Split(string(head), "\r\n")
	if len(lines) > 2 {
		fields := lines[2:]
		slices.SortStableFunc(fields, func(a, b string) int {
			ka, _, _ := strings.Cut(a, ":")
			kb, _, _ := strings.Cut(b, ":")
			return strings.Compare(ka, kb)
		})
	}
	out := append([]byte(strings.Join(lines, "\n")), "\n\n"...)
	return append(out, body...)
}
