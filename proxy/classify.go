package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/internal/jsontape"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// This file classifies what came of a sent request, whoever sent it:
// toolgate's own clients (package upstream, whose reports say what
// happened and never what it means) or Envoy (Call.Finish and Call.Fail).
// First the pre-classification, one function for an answer (answered: its
// code, a body over max_response_bytes, a body that broke off) and one for
// no answer (failure, from the report's error by transportFailure:
// connect, reset, deadline); then the contract's rules and the default
// table read the answer (classify).

// attempt is one send of the backend request and what came of it.
type attempt struct {
	outcome contracts.Outcome
	code    int // HTTP status, 0 without an answer
	header  http.Header
	body    []byte // the report's (upstream.Report.Body), until it is released
	sent    bool   // the request may have reached the backend
	verdict policy.Verdict
}

// failed classifies a report of toolgate's own clients that got no
// answer.
func (u *upstreamRuntime) failed(ctx context.Context, r *upstream.Report, sideEffect, dedupes bool, a *attempt) {
	if errors.Is(r.Err, upstream.ErrInvalidRequest) {
		// toolgate's own fault: nothing was sent, the backend is not to
		// blame (the breaker does not hear of it), and the same call
		// would fail again.
		*a = attempt{
			outcome: contracts.Reject(contracts.ReasonInvalidRequest),
			verdict: policy.VerdictIgnored,
		}
		return
	}
	f := transportFailure(ctx, r.Err, r.Connected)
	written := r.Writes > 0
	if f == contracts.FailConnect && written {
		// The resend could not connect, but the first write went out
		// whole before its connection broke.
		f = contracts.FailReset
	}
	*a = u.failure(f, written, sideEffect, dedupes)
}

// failure classifies a send that got no answer: what failed, and whether
// the request went out whole. It counts the failure on the upstream.
func (u *upstreamRuntime) failure(f contracts.Failure, written, sideEffect, dedupes bool) attempt {
	a := attempt{outcome: contracts.ClassifyTransport(f, written, sideEffect, dedupes), sent: written}
	a.verdict = policy.VerdictFailure
	switch f {
	case contracts.FailConnect:
		u.codes.connect.Inc()
	case contracts.FailDeadline:
		u.codes.timeout.Inc()
	case contracts.FailCanceled:
		u.codes.reset.Inc()
		a.verdict = policy.VerdictIgnored
	default:
		u.codes.reset.Inc()
	}
	return a
}

// answered pre-classifies an answer (a client's report, or Envoy's answer
// as Call.Finish hands it over) and counts its code on the upstream. A
// 2xx answer whose body is over max_response_bytes or broke off is
// unreadable, though the backend acted: the rules never see it. A non-2xx
// answer gets the default table's outcome, which the rules may still
// override; its body goes to them only when it was read whole. The
// attempt is written to a, which the caller holds: an attempt returned by
// value would take room twice on the stack of every call.
func (u *upstreamRuntime) answered(ctx context.Context, ans *upstream.Report, sideEffect, dedupes bool, now func() time.Time, a *attempt) {
	code := ans.Status
	*a = attempt{code: code, header: ans.Header, body: ans.Body, sent: true}
	u.codes.count(code)
	success := code >= 200 && code < 300
	switch {
	case ans.BodyErr == nil:
	case errors.Is(ans.BodyErr, boundedio.ErrBodyTooLarge):
		if success {
			a.outcome = contracts.BadResponse(code)
			a.verdict = policy.VerdictSuccess
			return
		}
		a.body = nil // an oversized error body is not read by the rules
	default:
		f := transportFailure(ctx, ans.BodyErr, true)
		if success {
			// The backend acted; only its answer is lost.
			switch f {
			case contracts.FailCanceled:
				// The agent hung up while the answer came: not the
				// backend's fault, so not a failure of it either (a
				// load of agents that leave would open the breaker
				// for every other one).
				a.outcome = contracts.AnswerAbandoned(code, sideEffect, dedupes)
				a.verdict = policy.VerdictIgnored
				return
			case contracts.FailDeadline:
				a.outcome = contracts.AnswerCut(code, sideEffect)
			default:
				a.outcome = contracts.BadResponse(code)
			}
			a.verdict = policy.VerdictFailure
			return
		}
		a.body = nil
	}
	a.verdict = breakerVerdict(code)
	if !success {
		a.outcome = contracts.ClassifyHTTP(code, sideEffect, dedupes, retryAfter(ans.Header, now()))
		if sideEffect && ans.Resent() && a.outcome.Effect == contracts.SideEffectNone {
			// This answer is to a resend: the first write may have acted
			// before its connection broke, whatever the resend met.
			a.outcome.Effect, a.outcome.Retryable = contracts.SideEffectUnknown, dedupes
		}
	}
}

func breakerVerdict(code int) policy.Verdict {
	switch {
	case code == 500 || code == 502 || code == 503 || code == 504:
		return policy.VerdictFailure
	case code == 501 || code == 505 || (code >= 400 && code < 500):
		return policy.VerdictIgnored
	case code > 505:
		return policy.VerdictFailure
	default:
		return policy.VerdictSuccess
	}
}

// conclude records an attempt on its call and, when it brought an answer
// the rules may read, classifies it. final says the outcome must not be
// retried whatever its class. The outcome is the call's (cl.out).
func (c *Core) conclude(ctx context.Context, cl *Call, a *attempt) bool {
	if a.sent {
		cl.sent = true
	}
	if a.code != 0 {
		cl.upCode = codeName(a.code)
	} else {
		cl.upCode = string(a.outcome.Reason)
	}
	if a.code == 0 || a.outcome.Reason == contracts.ReasonBadResponse || a.outcome.Reason == contracts.ReasonDeadline ||
		a.outcome.Reason == contracts.ReasonCanceled {
		cl.out = a.outcome
		return false
	}
	return c.classify(ctx, cl, a)
}

// codeNames are the HTTP codes in decimal, so that naming a call's
// upstream code costs no allocation.
var codeNames = func() (names [600]string) {
	for code := 100; code < len(names); code++ {
		names[code] = strconv.Itoa(code)
	}
	return names
}()

// codeName is code in decimal.
func codeName(code int) string {
	if code >= 100 && code < len(codeNames) {
		return codeNames[code]
	}
	return strconv.Itoa(code)
}

// classify applies the contract's rules and the default table to an answer.
//
// A 2xx answer is JSON when it parses as JSON. One that does not is read
// as text unless its Content-Type says JSON (application/json, a +json
// type), which makes it unreadable (bad_response): the data is the text as
// a JSON string, ok for a read-only tool when there is text, and ok (done)
// for a side-effecting one. The default empty (data that holds nothing)
// is a read-only tool's: a side-effecting tool's answer is empty only when
// its response.empty says so, since "found nothing, try other arguments"
// invites the model to act again.
func (c *Core) classify(ctx context.Context, cl *Call, a *attempt) bool {
	ct := cl.tool.contract
	rules := ct.Rules
	dedupes := ct.Idempotency.ForwardHeader != ""
	success := a.code >= 200 && a.code < 300
	body := bytes.TrimSpace(a.body)
	// The rules' input lives in the call: the rules keep a pointer to it
	// (their activation), so a local would be one more allocation per
	// answer.
	in := &cl.ruleIn
	*in = contracts.RuleInput{Ctx: ctx, Status: a.code, Header: a.header, Text: a.body, Args: cl.args}
	defer func() { *in = contracts.RuleInput{} }() // nothing of the answer outlives its classifying
	var parseErr error
	if len(body) > 0 && (success || rules.NeedsBody()) {
		// One parse serves the rules, the data and the envelope.
		in.Body, parseErr = contracts.ParseBody(body)
		defer in.Body.Release() // the outcome holds copies only
	}
	if success && in.Body != nil {
		if v := rules.CheckSchema(in.Body); v != nil {
			// Observe only: the answer is what it is, and the operator
			// learns that the backend no longer keeps its promise.
			if cl.tool.metrics != nil {
				cl.tool.metrics.violation(ViolationResponse)
			}
			cl.diagnose(a, "response.schema", fmt.Sprintf("at %q: keyword %s", v.Location, v.Keyword), v)
		}
	}
	final := c.readAnswer(cl, a, in, body, parseErr, success, dedupes)
	o := &cl.out
	if !o.Status.Success() && (!success || o.Reason == contracts.ReasonRule) {
		detail, err := rules.ErrorDetail(in)
		if err != nil {
			cl.diagnoseRule(a, err)
		}
		o.ErrorDetail = detail
	}
	if ct.Templates.ReadText() {
		o.Text = contracts.AnswerText(a.body)
	}
	return final
}

// readAnswer is classify's verdict on the answer, before the schema and
// the error detail are looked at.
func (c *Core) readAnswer(cl *Call, a *attempt, in *contracts.RuleInput, body []byte, parseErr error, success, dedupes bool) bool {
	ct := cl.tool.contract
	rules := ct.Rules
	m, matched, err := rules.MatchError(in)
	if err != nil {
		// A rule that could not be evaluated (cost limit, deadline, a type
		// error) leaves the answer unread: never "no match".
		cl.diagnoseRule(a, err)
		cl.out = contracts.Unreadable(a.code, a.outcome)
		return true
	}
	if matched {
		cl.out = contracts.ApplyRule(m, a.code, ct.SideEffect, dedupes, retryAfter(a.header, c.now()))
		return true
	}
	if !success {
		cl.out = a.outcome
		return false
	}
	text := false
	if parseErr != nil {
		if declaresJSON(a.header) {
			// It says it is JSON and is not: the answer is broken.
			cl.out = contracts.BadResponse(a.code)
			return true
		}
		text = true // the rules' body is null; text holds the answer
	}
	o := &cl.out
	*o = contracts.Answered(a.code)
	data, members, shaped, err := rules.DataMembers(make([]byte, 0, len(body)+2), in)
	if err != nil {
		cl.diagnoseRule(a, err)
		cl.out = contracts.BadResponse(a.code)
		return true
	}
	o.Members = members
	if !shaped {
		data = nil
		switch {
		case text:
			data = jsontape.AppendString(make([]byte, 0, len(body)+2), contracts.AnswerText(body))
		case in.Body != nil:
			data = in.Body.AppendCompact(make([]byte, 0, len(body)))
		}
	}
	if string(data) == "null" {
		data = nil
	}
	o.Data = data
	empty, ruled, err := rules.Empty(in)
	if err != nil {
		cl.diagnoseRule(a, err)
		cl.out = contracts.BadResponse(a.code)
		return true
	}
	if !ruled {
		// Without a rule, "nothing found" is a read-only answer whose data
		// holds nothing. A side-effecting call that answered 2xx did its
		// job, whatever it said ({}, no body at all).
		empty = !ct.SideEffect && isEmptyJSON(data)
	}
	if empty {
		o.Empty()
	}
	return true
}

// declaresJSON reports whether an answer's Content-Type says JSON:
// application/json or a +json type.
func declaresJSON(h http.Header) bool {
	mt := headerMediaType(h)
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// headerMediaType is the essence of a Content-Type header (type/subtype
// in lower case, parameters dropped); "" without the header.
func headerMediaType(h http.Header) string {
	v, _, _ := strings.Cut(headerValue(h, headerContentType), ";")
	return strings.ToLower(strings.TrimSpace(v))
}

func isEmptyJSON(data []byte) bool {
	switch string(data) {
	case "", "null", "[]", "{}", `""`:
		return true
	}
	return false
}

// transportFailure maps a transport error to a failure class. Each branch
// says why.
func transportFailure(ctx context.Context, err error, gotConn bool) contracts.Failure {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		// The agent hung up: not the backend's fault, not a breaker failure.
		return contracts.FailCanceled
	case ctx.Err() != nil || upstream.TimedOut(err):
		// Our deadline passed, whatever the transport was doing.
		return contracts.FailDeadline
	case upstream.Untrusted(err):
		// A certificate we do not trust is a configuration fault.
		return contracts.FailTLS
	case upstream.DialFailed(err) || !gotConn:
		// No connection was made, so nothing was sent.
		return contracts.FailConnect
	default:
		// The connection broke after it was made: reset, EOF, malformed answer.
		return contracts.FailReset
	}
}

// maxRetryAfter bounds a backend's Retry-After, whichever form it takes:
// a day is longer than any agent will wait, and far longer waits (or a
// date centuries away) are a backend's mistake, not advice.
const maxRetryAfter = 24 * time.Hour

// retryAfter parses a Retry-After header (seconds or an HTTP date),
// clamped to maxRetryAfter.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := headerValue(h, headerRetryAfter)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// A number too large for int64 is out of range, and clamped too.
		if secs <= 0 {
			return 0
		}
		if secs > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		// Sub saturates at the largest Duration rather than overflowing.
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return 0
}
