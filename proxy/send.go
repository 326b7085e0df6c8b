package proxy

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// send is toolgate's own send: attempts under the breaker and the
// bulkhead, within the call's deadline (ctx), retried while that is safe,
// each answer classified. It returns the final outcome.
//
// The wait before a retry is the upstream's retries.backoff, or the
// backend's Retry-After when it sent a longer one. The 1 s retry_after_ms a
// connect failure tells the agent is advice for the agent's next call, not
// a wait within this one.
func (c *Core) send(ctx context.Context, cl *Call) {
	retries := cl.tool.upstream.cfg.Retries
	o := &cl.out
	for n := 1; ; n++ {
		final := c.attempt(ctx, cl)
		if final || n >= retries.Attempts || !safeToRetry(cl.tool.contract, o, cl.sent) {
			return
		}
		delay := retries.Delay(n+1, nil)
		if o.HTTPCode != 0 && o.RetryAfter > delay {
			// An answer's wait is the backend's own (Retry-After).
			delay = o.RetryAfter
		}
		deadline, _ := ctx.Deadline()
		if c.now().Add(delay).After(deadline) {
			return // retry_after_ms tells the agent when to come back
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// safeToRetry: a read-only tool may resend any retryable failure. A
// side-effecting call is resent within the call only when no attempt of it
// reached the backend (sent is false: a connect failure, a connection that
// broke before the request went out whole, a missing credential), or when
// its backend dedupes on the forwarded key and the outcome says nothing
// was done. An answer, even a 503, 429 or 408 that says nothing was done,
// proves nothing about a side effect: a proxy in front of the app (Envoy's
// "reset before headers", an nginx upstream timeout) answers 503 after the
// app may have acted. Such a call ends with its retryable envelope and its
// key released, so the agent's retry, after the wait it is told, is the
// only resend.
func safeToRetry(ct *contracts.Contract, o *contracts.Outcome, sent bool) bool {
	if !o.Retryable || o.Reason == contracts.ReasonCircuitOpen || o.Reason == contracts.ReasonBulkhead || o.Reason == contracts.ReasonCanceled {
		return false
	}
	if !ct.SideEffect {
		return true
	}
	return o.Effect == contracts.SideEffectNone && (!sent || ct.Idempotency.ForwardHeader != "")
}

// attempt runs one backend attempt: the breaker and the bulkhead admit
// it, the backend request is built (backend.go) and sent, and the answer
// is classified. final says the outcome must not be retried whatever its
// class (a success, or an answer the rules classified). The outcome is
// the call's (cl.out).
func (c *Core) attempt(ctx context.Context, cl *Call) bool {
	t := cl.tool
	up := t.upstream
	done, wait, err := up.breaker.Allow()
	if err != nil {
		up.codes.circuit.Inc()
		cl.unsent(contracts.ReasonCircuitOpen, "circuit_open", wait)
		return false
	}
	if !up.bulk.Acquire(cl.caller) {
		done.Done(policy.VerdictIgnored)
		cl.unsent(contracts.ReasonBulkhead, "bulkhead", 0)
		return false
	}
	cl.attempts++
	actx, span := c.tr.child(ctx, "toolgate.upstream.attempt", trace.SpanKindClient)
	// toolgate's HTTP/1 client is done with the request when it returns;
	// the learn observer keeps it.
	var pr *pooledRequest
	var req *http.Request
	if up.pooled && c.observer == nil {
		pr, req = cl.pooledHTTPRequest()
	} else {
		req = cl.httpRequest()
	}
	c.tr.inject(actx, cl.req, req.Header)
	ct := t.contract
	sentAt := c.observeStart()
	a := &cl.att
	*a = attempt{}
	up.send(actx, t.auth, req, cl.st.snap.Server.MaxResponseBytes, ct.SideEffect, ct.Idempotency.ForwardHeader != "", c.now, &cl.rep, a)
	up.bulk.Release(cl.caller)
	done.Done(a.verdict)
	c.redactAnswer(cl, a)
	c.observeAttempt(cl, req, a, sentAt)
	if pr != nil {
		putRequest(pr)
	}
	if span != nil {
		endAttemptSpan(span, cl, a)
	}
	// The answer's buffer goes back once the answer is classified (the
	// envelope's data is always a copy).
	defer cl.rep.Release()
	return c.conclude(ctx, cl, a)
}

// unsent ends an attempt the breaker or the bulkhead refused. Out of
// line, as the outcome it builds would otherwise take room on the stack
// of every attempt.
//
//go:noinline
func (cl *Call) unsent(r contracts.Reason, upCode string, retryAfter time.Duration) {
	cl.upCode = upCode
	cl.out = contracts.Reject(r)
	if retryAfter > 0 {
		cl.out.RetryAfter = retryAfter // the breaker's; the bulkhead's is Reject's
	}
}

// endAttemptSpan ends an attempt's span with what the attempt came to. It
// is out of line so that its attributes take no room on the stack of an
// untraced call.
//
//go:noinline
func endAttemptSpan(span trace.Span, cl *Call, a *attempt) {
	span.SetAttributes(attribute.Int("toolgate.attempt", cl.attempts), attribute.String("toolgate.upstream", cl.tool.contract.Upstream))
	if a.code != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", a.code))
	}
	endChild(span, &a.outcome)
}
