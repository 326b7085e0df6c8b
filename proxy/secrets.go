package proxy

import (
	"net/http"
	"slices"

	"github.com/toolgate/toolgate/proxy/redact"
)

// This file decides which secrets a call has, for package redact to find
// and replace in what the backend answered (DESIGN section 1, "Secrets"):
// the tool's ${VAR} values and its upstream's credentials, every one of
// them whichever the call sent (tool.redactor),
// and the credentials the agent sent in the headers the call forwards
// (Call.identityMatcher). The answer is redacted once, before anything
// reads it (Core.redactAnswer, called by the send and by Call.Finish).

// redactor is a tool's matcher, and the generation of its upstream's
// secrets it was built from.
type redactor struct {
	match *redact.Matcher // nil: no secret
	gen   uint64
}

// identityCacheSize bounds the forwarded credentials an upstream keeps the
// needles of: an agent sends the same one call after call, and making
// them takes a few dozen allocations.
const identityCacheSize = 256

// identityMatcher returns the matcher of one forwarded credential header,
// from the upstream's cache when it holds it.
func (u *upstreamRuntime) identityMatcher(name, value string) *redact.Matcher {
	key := name + "\x00" + value
	u.identityMu.Lock()
	mt, ok := u.identityCache.Get(key)
	u.identityMu.Unlock()
	if ok {
		return mt
	}
	mt = redact.NewMatcher(redact.AppendHeaderSecrets(nil, name, value))
	u.identityMu.Lock()
	u.identityCache.Add(key, mt)
	u.identityMu.Unlock()
	return mt
}

// credentialGen is the generation of the upstream's credentials' secrets
// (auth's and every named credential's): it changes whenever one of them
// takes a new value.
func (u *upstreamRuntime) credentialGen() uint64 {
	_, gen := u.auth.Secrets().Current()
	for _, a := range u.creds {
		_, g := a.Secrets().Current()
		gen += g
	}
	return gen
}

// credentialNeedles are the needles of every credential of the upstream:
// auth's and every named credential's, whichever one a call sends, since
// a backend may echo any of them (a client token's answer listing the
// application tokens).
func (u *upstreamRuntime) credentialNeedles() []redact.Needle {
	ns, _ := u.auth.Secrets().Current()
	if len(u.creds) == 0 {
		return ns
	}
	ns = slices.Clip(ns)
	for _, a := range u.creds {
		more, _ := a.Secrets().Current()
		ns = append(ns, more...)
	}
	return ns
}

// redactor returns the tool's redactor: its own secrets and its
// upstream's credentials, made again when a credential took a new value.
func (t *tool) redactor() *redactor {
	gen := t.upstream.credentialGen()
	if r := t.red.Load(); r != nil && r.gen == gen {
		return r
	}
	ns := t.upstream.credentialNeedles()
	all := slices.Clip(t.secrets)
	for _, n := range ns {
		if !slices.ContainsFunc(all, func(o redact.Needle) bool { return o.Text() == n.Text() }) {
			all = append(all, n)
		}
	}
	r := &redactor{match: redact.NewMatcher(all), gen: gen}
	t.red.Store(r)
	return r
}

// identityMatcher is the matcher of the credentials the agent sent in the
// headers this call forwards to the backend; made once a call, nil for
// none.
func (cl *Call) identityMatcher() *redact.Matcher {
	up := cl.tool.upstream
	if len(up.identity) == 0 || cl.req.Header == nil {
		return nil
	}
	if !cl.identityDone {
		cl.identityDone = true
		var all []redact.Needle
		for _, name := range up.identity {
			for _, v := range cl.req.Header[name] {
				mt := up.identityMatcher(name, v)
				if cl.identity == nil && all == nil {
					cl.identity = mt
					continue
				}
				// More than one credential header: rare, so merged here.
				if all == nil && cl.identity != nil {
					all = slices.Clip(cl.identity.Needles())
				}
				if mt != nil {
					all = append(all, mt.Needles()...)
				}
			}
		}
		if all != nil {
			cl.identity = redact.NewMatcher(all)
		}
	}
	return cl.identity
}

// redactAnswer replaces every secret of the call in the answer of a, before
// anything reads it: its body, and its headers when the contract's rules
// read them. Each occurrence is counted in
// toolgate_secrets_redacted_total.
func (c *Core) redactAnswer(cl *Call, a *attempt) {
	if a.code == 0 {
		return
	}
	t := cl.tool
	set := t.redactor().match
	extra := cl.identityMatcher()
	if set.Empty() && extra.Empty() {
		return
	}
	var n int
	if len(a.body) > 0 {
		a.body, n = redact.Bytes(a.body, set, extra)
	}
	if a.header != nil && t.contract.Rules.NeedsHeaders() {
		n += redact.Header(&a.header, set, extra)
	}
	if n > 0 {
		t.metrics.redacted(n)
	}
}

// passthroughMatcher finds the secrets a passthrough exchange may hold,
// for the copy learning mode keeps of it: the upstream's credentials and
// header values, and every credential header the agent sent (a
// passthrough route forwards the agent's headers). Nil for none.
func passthroughMatcher(up *upstreamRuntime, agent http.Header) *redact.Matcher {
	out := append(slices.Clip(up.headerSecrets), up.credentialNeedles()...)
	for name, vs := range agent {
		if redact.IdentityHeader(name) {
			for _, v := range vs {
				out = redact.AppendHeaderSecrets(out, name, v)
			}
		}
	}
	return redact.NewMatcher(out)
}
