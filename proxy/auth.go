package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// This file puts an upstream's credential (upstream.Auth) and the agent's
// forwarded headers (forward_headers) in every request that reaches the
// backend, whoever sends it: tool calls (upstreamRuntime.send), passthrough
// routes (authTransport), and the requests Envoy sends under toolgate
// extproc (Call.Backend, Passthrough.Decorate). A tool's requests carry the
// credential it names (tool.auth: one of upstreams.<name>.credentials, or
// auth for none); passthrough routes carry the upstream's auth. A credential that
// cannot be had ends the call unsent, as `auth`.

// authOutcome is the outcome of a call whose upstream credential could not
// be had (contracts.ReasonAuth): the token endpoint failed, or a credential
// file never could be read. Nothing was sent, the backend is not to blame,
// and a later identical call may succeed. The reason is also the code the
// call counts under in toolgate_upstream_requests_total.
func authOutcome() contracts.Outcome {
	return contracts.Reject(contracts.ReasonAuth)
}

// forward copies the agent's headers that the upstream's forward_headers
// lists into a backend request's header h, over what the policy set for
// them. The value slices are shared, as in backendHeader.
func (u *upstreamRuntime) forward(h, agent http.Header) {
	for _, name := range u.cfg.ForwardHeaders {
		if v, ok := agent[name]; ok {
			h[name] = v
		}
	}
}

// authorize puts the credential of auth (the tool's) in req. When none can be had,
// ok is false and the attempt ends unsent: `auth` (upstream, retryable,
// nothing happened; not a backend failure, so the breaker does not hear
// of it), or `canceled` when the caller went away meanwhile; a is then
// that attempt.
func (u *upstreamRuntime) authorize(ctx context.Context, auth *upstream.Auth, req *http.Request, a *attempt) (upstream.Credential, bool) {
	cred, err := auth.Credential(ctx)
	if err != nil {
		*a = u.authFailed(ctx)
		return upstream.Credential{}, false
	}
	req.URL.RawQuery = cred.Apply(req.Header, req.URL.RawQuery)
	return cred, true
}

// authFailed is the attempt that could not get its credential.
func (u *upstreamRuntime) authFailed(ctx context.Context) attempt {
	if errors.Is(ctx.Err(), context.Canceled) {
		return attempt{outcome: contracts.ClassifyTransport(contracts.FailCanceled, false, false, false), verdict: policy.VerdictIgnored}
	}
	u.codes.auth.Inc()
	return attempt{outcome: authOutcome(), verdict: policy.VerdictIgnored}
}

// credential gets a pending call's credential (toolgate extproc: Envoy
// sends the request, so the credential is had before it is described).
// ok=false carries the outcome that ends the call unsent.
func (c *Core) credential(ctx context.Context, cl *Call) (upstream.Credential, contracts.Outcome, bool) {
	up := cl.tool.upstream
	cred, err := cl.tool.auth.Credential(ctx)
	if err != nil {
		a := up.authFailed(ctx)
		cl.upCode = string(a.outcome.Reason)
		return upstream.Credential{}, a.outcome, false
	}
	return cred, contracts.Outcome{}, true
}

// authTransport adds the upstream's credential to passthrough requests:
// they reach the same backend as the tools, with the same credential. A
// credential that cannot be had fails the request (the reverse proxy
// answers 502).
type authTransport struct {
	next http.RoundTripper
	up   *upstreamRuntime
}

func (t authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	cred, err := t.up.auth.Credential(req.Context())
	if err != nil {
		t.up.authFailed(req.Context())
		return nil, err
	}
	out := req.Clone(req.Context())
	out.URL.RawQuery = cred.Apply(out.Header, out.URL.RawQuery)
	resp, err := t.next.RoundTrip(out)
	if err == nil {
		t.up.auth.Answered(cred, resp.StatusCode)
	}
	return resp, err
}

// passthroughTransport is the round tripper of the upstream's passthrough
// routes.
func (u *upstreamRuntime) passthroughTransport() http.RoundTripper {
	if u.auth == nil {
		return u.rt
	}
	return authTransport{next: u.rt, up: u}
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
	cred, err := p.up.auth.Credential(ctx)
	if err != nil {
		p.up.authFailed(ctx)
		return nil, "", err
	}
	return h, cred.Apply(h, rawQuery), nil
}
