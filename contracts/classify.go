package contracts

import (
	"encoding/json"
	"time"
)

// Outcome is what one stage of a call decided. One function renders an
// outcome into the envelope, the metric labels and the log line.
type Outcome struct {
	Status    Status
	Reason    Reason
	Retryable bool
	// Effect is the side effect as if the tool had one; the envelope of a
	// read-only tool always says none. It also tells whether anything
	// happened at the backend, which decides 503 versus 502.
	Effect     SideEffect
	RetryAfter time.Duration
	HTTPCode   int        // the backend's HTTP status, when it answered
	Args       *ArgErrors // what is wrong with the arguments of a bad_args outcome
	Data       json.RawMessage
	Members    []Member // where Data's top-level members lie, when known
	Detail     string   // safe extra words for the message (a limit)
	// ErrorDetail is the backend's own words for a failure, as
	// response.error_detail found them: one line, bounded (OneLineDetail).
	// Only the message carries it, never the data.
	ErrorDetail string
	// Text is the answer as text, for message templates that read .text;
	// set only for those.
	Text string
}

// RetryLater reports whether nothing happened at the backend and a retry may
// succeed: `upstream` answered with 503 and Retry-After in mapped mode.
func (o *Outcome) RetryLater() bool {
	return o.Status == StatusUpstream && o.Retryable && o.Effect == SideEffectNone
}

// ClassifyHTTP applies the default table to a backend answer that is not
// 2xx. sideEffect says the tool has one; dedupes says the backend dedupes on
// a forwarded idempotency key, which makes an unknown outcome safe to resend.
// retryAfter is the backend's Retry-After, zero when absent.
func ClassifyHTTP(code int, sideEffect, dedupes bool, retryAfter time.Duration) Outcome {
	return row(httpReason(code)).outcome(code, true, sideEffect, dedupes, retryAfter)
}

// httpReason names what a non-2xx answer code means.
func httpReason(code int) Reason {
	switch {
	case code == 409:
		// Usually "already exists": the model should look before it
		// changes anything.
		return ReasonConflict
	case code == 401 || code == 403:
		return ReasonUnauthorized
	case code == 404 || code == 410:
		return ReasonMissing
	case code == 408:
		// The backend gave up reading the request: nothing was done.
		return ReasonRequestTimeout
	case code == 429:
		return ReasonThrottled
	case code == 503:
		return ReasonUnavailable
	case code == 501 || code == 505:
		return ReasonNotImplemented
	case code == 504:
		return ReasonGatewayTimeout
	case code >= 500:
		return ReasonServerError
	case code >= 400:
		// 400, 413, 422 and the other client errors (405, 411, 415, ...)
		// say the request was wrong.
		return ReasonRejected
	default:
		// 1xx and 3xx are not answers a JSON API gives (redirects are not
		// followed).
		return ReasonUnexpectedAnswer
	}
}

// Failure is a transport-level way for a backend call to fail.
type Failure uint8

// The transport failures.
const (
	FailConnect  Failure = iota + 1 // dial or DNS failed: nothing was sent
	FailReset                       // the connection broke
	FailDeadline                    // the call's deadline passed
	FailTLS                         // the certificate is not trusted: a configuration fault
	FailCanceled                    // the caller went away
)

// ClassifyTransport applies the default table to a transport failure.
// written says the request reached the wire completely, so the backend may
// have acted on it. A backend does not act on a request it did not receive
// whole, so a failure before that leaves nothing done.
func ClassifyTransport(f Failure, written, sideEffect, dedupes bool) Outcome {
	var r Reason
	switch f {
	case FailConnect:
		r, written = ReasonConnect, false
	case FailTLS:
		r, written = ReasonTLS, false
	case FailDeadline:
		r = ReasonDeadline
	case FailCanceled:
		r = ReasonCanceled
	default:
		r = ReasonReset
	}
	return row(r).outcome(0, written, sideEffect, dedupes, 0)
}

// Answered is the outcome of a readable 2xx answer: ok, the action done.
// The caller makes it empty with Empty once it has looked at the data.
func Answered(code int) Outcome {
	return row(ReasonOK).outcome(code, true, false, false, 0)
}

// Empty turns an answered outcome into one that found nothing.
func (o *Outcome) Empty() {
	e := row(ReasonEmpty)
	o.Status, o.Reason = e.Status, e.Reason
}

// AnswerCut is the outcome of a 2xx answer that began but did not finish
// before the deadline: the action ran, its answer is lost, so only a
// read-only call may be repeated.
func AnswerCut(code int, sideEffect bool) Outcome {
	o := row(ReasonDeadline).outcome(code, true, sideEffect, false, 0)
	o.Effect = SideEffectDone
	o.Retryable = row(ReasonDeadline).retryable(o.Effect, sideEffect, false)
	return o
}

// AnswerAbandoned is the outcome of a 2xx answer whose reading stopped
// because the caller went away: the action ran, and nobody is left to
// read its result. Like a cut answer it was the call's end, not the
// backend's fault.
func AnswerAbandoned(code int, sideEffect, dedupes bool) Outcome {
	o := row(ReasonCanceled).outcome(code, true, sideEffect, dedupes, 0)
	o.Effect = SideEffectDone
	o.Retryable = row(ReasonCanceled).retryable(o.Effect, sideEffect, dedupes)
	return o
}

// BadResponse is the outcome of a 2xx answer that cannot be read: the action
// ran, but its result is lost, so it must not be repeated.
func BadResponse(code int) Outcome {
	return row(ReasonBadResponse).outcome(code, true, false, false, 0)
}

// Unreadable is the outcome of an answer the contract's rules cannot read:
// an error rule, or the data or empty expression, failed to evaluate (the
// cost limit, the deadline, a value of another type). A 2xx answer is
// BadResponse: the action ran. Any other answer keeps the side effect the
// default table gave it (table, the outcome ClassifyHTTP made of it, with
// anything the transport learned), since the answer's code still tells
// whether the backend acted. It is never retryable: the same answer would
// be as unreadable again.
func Unreadable(code int, table Outcome) Outcome {
	o := BadResponse(code)
	if code < 200 || code >= 300 {
		o.Effect = table.Effect
	}
	return o
}

// ApplyRule turns a matched error rule into an outcome. A rule matching a 2xx
// answer defaults to no side effect (a business rejection); on other answers
// it keeps the default table's side effect and retryability. Whatever the
// rule says, the outcome keeps the retry rule (safeToRepeat): on a
// side-effecting tool, a done outcome is not retryable, nor is an unknown
// one at a backend that does not dedupe. A policy cannot write such a rule
// (Compile refuses it); this holds the same for the status's default and
// for a rule that matches an answer the table calls unknown.
func ApplyRule(m MatchedRule, code int, sideEffect, dedupes bool, retryAfter time.Duration) Outcome {
	var base Outcome
	if code >= 200 && code < 300 {
		base = Outcome{Effect: SideEffectNone, HTTPCode: code}
		base.Retryable = statusRetryable(m.Status)
		if m.Status.Success() {
			base.Effect = SideEffectDone // the rule says the action succeeded
		}
	} else {
		base = ClassifyHTTP(code, sideEffect, dedupes, retryAfter)
		if base.Status != m.Status {
			base.Retryable = statusRetryable(m.Status)
		}
	}
	base.Status, base.Reason = m.Status, ReasonRule
	if m.Retryable != nil {
		base.Retryable = *m.Retryable
	}
	if m.SideEffect != nil {
		base.Effect = *m.SideEffect
	}
	if m.Status.Success() || !safeToRepeat(base.Effect, sideEffect, dedupes) {
		base.Retryable = false
	}
	return base
}
