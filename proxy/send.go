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
func (c *Core) send(ctx context.Context, cl *Call) contracts.Outcome {
	retries := cl.tool.upstream.cfg.Retries
	for n := 1; ; n++ {
		o, final := c.attempt(ctx, cl)
		if final || n >= retries.Attempts || !safeToRetry(cl.tool.contract, o) {
			return o
		}
		delay := retries.Delay(n+1, nil)
		if o.HTTPCode != 0 && o.RetryAfter > delay {
			// An answer's wait is the backend's own (Retry-After).
			delay = o.RetryAfter
		}
		deadline, _ := ctx.Deadline()
		if c.now().Add(delay).After(deadline) {
			return o // retry_after_ms tells the agent when to come back
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return o
		case <-timer.C:
		}
	}
}

// safeToRetry: a read-only tool may resend any retryable failure; a
// side-effecting call only one that never reached the backend.
func safeToRetry(ct *contracts.Contract, o contracts.Outcome) bool {
	if !o.Retryable || o.Reason == contracts.ReasonCircuitOpen || o.Reason == contracts.ReasonBulkhead || o.Reason == contracts.ReasonCanceled {
		return false
	}
	return !ct.SideEffect || o.Effect == contracts.SideEffectNone
}

// attempt runs one backend attempt: the breaker and the bulkhead admit
// it, the backend request is built (backend.go) and sent, and the answer
// is classified. final says the outcome must not be retried whatever its
// class (a success, or an answer the rules classified).
func (c *Core) attempt(ctx context.Context, cl *Call) (contracts.Outcome, bool) {
	t := cl.tool
	up := t.upstream
	done, wait, err := up.breaker.Allow()
	if err != nil {
		up.codes.circuit.Inc()
		cl.upCode = "circuit_open"
		o := contracts.Reject(contracts.ReasonCircuitOpen)
		o.RetryAfter = wait
		return o, false
	}
	if !up.bulk.acquire(cl.caller) {
		done.Done(policy.VerdictIgnored)
		cl.upCode = "bulkhead"
		return contracts.Reject(contracts.ReasonBulkhead), false
	}
	cl.attempts++
	actx, span := c.tr.child(ctx, "toolgate.upstream.attempt", trace.SpanKindClient)
	// toolgate's HTTP/1 client is done with the request when it returns;
	// the learn observer keeps it.
	var pr *pooledRequest
	var req *http.Request
	if up.direct != nil && c.observer == nil {
		pr, req = cl.pooledHTTPRequest()
	} else {
		req = t.httpRequest(cl.backendRequest(2)) // room for the trace context the attempt's span adds
	}
	c.tr.inject(actx, cl.req, req.Header)
	ct := t.contract
	sentAt := c.observeStart()
	a := up.send(actx, req, cl.st.snap.Server.MaxResponseBytes, ct.SideEffect, ct.Idempotency.ForwardHeader != "", c.now)
	up.bulk.release(cl.caller)
	done.Done(a.verdict)
	c.observeAttempt(cl, req, &a, sentAt)
	if pr != nil {
		putRequest(pr)
	}
	if span != nil {
		span.SetAttributes(attribute.Int("toolgate.attempt", cl.attempts), attribute.String("toolgate.upstream", ct.Upstream))
		if a.code != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", a.code))
		}
		endChild(span, &a.outcome)
	}
	defer putBody(a.buf)
	return c.conclude(ctx, cl, &a)
}
