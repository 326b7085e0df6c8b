package contracts

import (
	"encoding/json"
	"time"
)

// Reason is why a call ended with its status. It picks the message from the
// catalogue and is logged; it is not part of the envelope.
type Reason string

// The reasons a call can end with.
const (
	ReasonOK                Reason = "ok"
	ReasonEmpty             Reason = "empty"
	ReasonRule              Reason = "rule"              // a per-tool error rule matched
	ReasonSchema            Reason = "schema"            // arguments fail the schema
	ReasonBadJSON           Reason = "bad_json"          // the arguments are not a JSON object
	ReasonTooLarge          Reason = "too_large"         // the request body is over max_request_bytes
	ReasonKeyMissing        Reason = "key_missing"       // side-effecting tool without idempotency key
	ReasonKeyMalformed      Reason = "key_malformed"     // idempotency key not 1-255 printable ASCII
	ReasonKeyConflict       Reason = "key_conflict"      // header and argument carry different keys
	ReasonKeyMismatch       Reason = "key_mismatch"      // key reused with other arguments
	ReasonUnknownTool       Reason = "unknown_tool"      // no such tool
	ReasonDenied            Reason = "denied"            // the caller may not use the tool
	ReasonBudget            Reason = "budget"            // the caller's cost budget is spent
	ReasonRateLimited       Reason = "rate_limited"      // the caller is over its local rate limit
	ReasonRejected          Reason = "rejected"          // backend 400, 409, 413, 422 (and other 4xx)
	ReasonUnauthorized      Reason = "unauthorized"      // backend 401, 403
	ReasonMissing           Reason = "missing"           // backend 404, 410
	ReasonRequestTimeout    Reason = "request_timeout"   // backend 408
	ReasonThrottled         Reason = "throttled"         // backend 429
	ReasonUnavailable       Reason = "unavailable"       // backend 503
	ReasonServerError       Reason = "server_error"      // backend 500, 502 and other 5xx
	ReasonGatewayTimeout    Reason = "gateway_timeout"   // backend 504
	ReasonNotImplemented    Reason = "not_implemented"   // backend 501, 505
	ReasonUnexpectedAnswer  Reason = "unexpected"        // backend 1xx/3xx
	ReasonBadResponse       Reason = "bad_response"      // 2xx with unreadable, non-JSON or oversized body, or a body the rules cannot read
	ReasonConnect           Reason = "connect"           // connect or DNS failure: nothing was sent
	ReasonReset             Reason = "reset"             // the connection broke
	ReasonDeadline          Reason = "deadline"          // our deadline passed
	ReasonTLS               Reason = "tls"               // the backend's certificate is not trusted
	ReasonCircuitOpen       Reason = "circuit_open"      // the breaker refused the call
	ReasonBulkhead          Reason = "bulkhead"          // too many calls in flight to the upstream
	ReasonCanceled          Reason = "canceled"          // the caller went away
	ReasonStoreUnavailable  Reason = "store_unavailable" // the idempotency store did not answer
	ReasonInFlightTimeout   Reason = "in_flight_timeout" // waited for an in-flight call with the same key until the deadline
	ReasonOutcomeLost       Reason = "outcome_lost"      // an earlier call with this key died mid-call
	ReasonRetryAfterTooLong Reason = "retry_after_long"  // the backend asked to wait longer than the deadline allows
	ReasonReplayed          Reason = "replayed"          // a stored result for a repeated idempotency key
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
	HTTPCode   int       // the backend's HTTP status, when it answered
	Arg        *ArgError // the failing argument of a bad_args outcome
	Data       json.RawMessage
	Members    []Member // where Data's top-level members lie, when known
	Detail     string   // safe extra words for the message (a caller name, a limit)
}

// RetryLater reports whether nothing happened at the backend and a retry may
// succeed: `upstream` answered with 503 and Retry-After in mapped mode.
func (o *Outcome) RetryLater() bool {
	return o.Status == StatusUpstream && o.Retryable && o.Effect == SideEffectNone
}

// Reject is an outcome decided before anything was sent.
func Reject(status Status, reason Reason) Outcome {
	return Outcome{Status: status, Reason: reason, Effect: SideEffectNone}
}

// ClassifyHTTP applies the default table to a backend answer that is not
// 2xx. sideEffect says the tool has one; dedupes says the backend dedupes on
// a forwarded idempotency key, which makes an unknown outcome safe to resend.
// retryAfter is the backend's Retry-After, zero when absent.
func ClassifyHTTP(code int, sideEffect, dedupes bool, retryAfter time.Duration) Outcome {
	o := Outcome{HTTPCode: code, Effect: SideEffectNone}
	// An unknown outcome may be resent only by a read-only tool or when the
	// backend dedupes on the key we forward.
	unknownRetryable := !sideEffect || dedupes
	switch {
	case code == 400 || code == 409 || code == 413 || code == 422:
		o.Status, o.Reason = StatusBadArgs, ReasonRejected
	case code == 401 || code == 403:
		o.Status, o.Reason = StatusForbidden, ReasonUnauthorized
	case code == 404 || code == 410:
		o.Status, o.Reason = StatusNotFound, ReasonMissing
	case code == 408:
		// The backend gave up reading the request: nothing was done.
		o.Status, o.Reason, o.Retryable = StatusTimeout, ReasonRequestTimeout, true
	case code == 429:
		o.Status, o.Reason, o.Retryable, o.RetryAfter = StatusUpstream, ReasonThrottled, true, retryAfter
	case code == 503:
		o.Status, o.Reason, o.Retryable, o.RetryAfter = StatusUpstream, ReasonUnavailable, true, retryAfter
	case code == 501 || code == 505:
		o.Status, o.Reason = StatusUpstream, ReasonNotImplemented
	case code == 504:
		o.Status, o.Reason, o.Retryable, o.Effect = StatusTimeout, ReasonGatewayTimeout, unknownRetryable, SideEffectUnknown
	case code >= 500:
		o.Status, o.Reason, o.Retryable, o.Effect = StatusUpstream, ReasonServerError, unknownRetryable, SideEffectUnknown
	case code >= 400:
		// Other client errors (405, 411, 415, ...) say the request was wrong.
		o.Status, o.Reason = StatusBadArgs, ReasonRejected
	default:
		// 1xx and 3xx are not answers a JSON API gives (redirects are not
		// followed); after a POST the action may have run.
		o.Status, o.Reason, o.Effect = StatusUpstream, ReasonUnexpectedAnswer, SideEffectUnknown
	}
	return o
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
// have acted on it.
func ClassifyTransport(f Failure, written, sideEffect, dedupes bool) Outcome {
	unknownRetryable := !sideEffect || dedupes
	switch f {
	case FailConnect:
		// Nothing was sent; any retry is safe.
		return Outcome{Status: StatusUpstream, Reason: ReasonConnect, Retryable: true, Effect: SideEffectNone, RetryAfter: time.Second}
	case FailTLS:
		// Retrying cannot fix a trust configuration.
		return Outcome{Status: StatusUpstream, Reason: ReasonTLS, Effect: SideEffectNone}
	case FailDeadline:
		if !written {
			// The deadline passed before the request was out: nothing happened.
			return Outcome{Status: StatusTimeout, Reason: ReasonDeadline, Retryable: true, Effect: SideEffectNone}
		}
		return Outcome{Status: StatusTimeout, Reason: ReasonDeadline, Retryable: unknownRetryable, Effect: SideEffectUnknown}
	case FailCanceled:
		if !written {
			return Outcome{Status: StatusUpstream, Reason: ReasonCanceled, Retryable: true, Effect: SideEffectNone}
		}
		return Outcome{Status: StatusUpstream, Reason: ReasonCanceled, Retryable: unknownRetryable, Effect: SideEffectUnknown}
	default: // FailReset
		if !written {
			// The connection broke while the request was being written: a
			// backend does not act on a request it did not receive whole.
			return Outcome{Status: StatusUpstream, Reason: ReasonReset, Retryable: true, Effect: SideEffectNone, RetryAfter: time.Second}
		}
		return Outcome{Status: StatusUpstream, Reason: ReasonReset, Retryable: unknownRetryable, Effect: SideEffectUnknown}
	}
}

// BadResponse is the outcome of a 2xx answer that cannot be read: the action
// ran, but its result is lost, so it must not be repeated.
func BadResponse(code int) Outcome {
	return Outcome{Status: StatusUpstream, Reason: ReasonBadResponse, HTTPCode: code, Effect: SideEffectDone}
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
	if code >= 200 && code < 300 {
		return BadResponse(code)
	}
	return Outcome{Status: StatusUpstream, Reason: ReasonBadResponse, HTTPCode: code, Effect: table.Effect}
}

// ApplyRule turns a matched error rule into an outcome. A rule matching a 2xx
// answer defaults to no side effect (a business rejection); on other answers
// it keeps the default table's side effect and retryability.
func ApplyRule(m MatchedRule, code int, sideEffect, dedupes bool, retryAfter time.Duration) Outcome {
	var base Outcome
	if code >= 200 && code < 300 {
		base = Outcome{Effect: SideEffectNone, HTTPCode: code}
		base.Retryable = defaultRetryable(m.Status)
		if m.Status.Success() {
			base.Effect = SideEffectDone // the rule says the action succeeded
		}
	} else {
		base = ClassifyHTTP(code, sideEffect, dedupes, retryAfter)
		if base.Status != m.Status {
			base.Retryable = defaultRetryable(m.Status)
		}
	}
	base.Status, base.Reason = m.Status, ReasonRule
	if m.Retryable != nil {
		base.Retryable = *m.Retryable
	}
	if m.SideEffect != nil {
		base.Effect = *m.SideEffect
	}
	if m.Status.Success() {
		base.Retryable = false
	}
	return base
}

func defaultRetryable(s Status) bool {
	return s == StatusTimeout || s == StatusUpstream
}
