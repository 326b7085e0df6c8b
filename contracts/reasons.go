package contracts

import (
	"strconv"
	"time"
)

// This file is the mapping table of DESIGN.md section 1 in one place: for
// every reason a call can end with, its status, whether the identical call
// may be retried, its side effect, its HTTP status in mapped mode, the wait
// it carries, and whether toolgate decided it itself (a gateway reason, which
// a tool's status templates do not speak for). The proxy's stages build
// outcomes with Reject and the classification functions of classify.go, which
// read the table; the envelope's HTTP status comes from MappedHTTP. The
// catalogues (messages.go) have what-happened words for every row, in every
// language (TestReasonTable).

// Reason is why a call ended with its status. It picks the message from the
// catalogue and is logged; it is not part of the envelope.
type Reason string

// The reasons a call can end with, in the order of the table.
const (
	ReasonOK               Reason = "ok"                // a 2xx answer with data
	ReasonEmpty            Reason = "empty"             // a 2xx answer that holds nothing
	ReasonRule             Reason = "rule"              // a per-tool error rule matched
	ReasonSchema           Reason = "schema"            // arguments fail the schema or the binding
	ReasonBadJSON          Reason = "bad_json"          // the arguments are not one JSON object
	ReasonTooLarge         Reason = "too_large"         // the request body is over max_request_bytes
	ReasonKeyMissing       Reason = "key_missing"       // side-effecting tool without idempotency key
	ReasonKeyMalformed     Reason = "key_malformed"     // idempotency key not 1-255 printable ASCII
	ReasonKeyConflict      Reason = "key_conflict"      // header and argument carry different keys
	ReasonKeyMismatch      Reason = "key_mismatch"      // key reused with other arguments
	ReasonUnknownTool      Reason = "unknown_tool"      // no such tool
	ReasonDenied           Reason = "denied"            // the caller may not use the tool
	ReasonBudget           Reason = "budget"            // the caller's cost budget is spent
	ReasonRateLimited      Reason = "rate_limited"      // the caller is over its local rate limit
	ReasonRejected         Reason = "rejected"          // backend 400, 413, 422 and other 4xx
	ReasonConflict         Reason = "conflict"          // backend 409
	ReasonUnauthorized     Reason = "unauthorized"      // backend 401, 403
	ReasonMissing          Reason = "missing"           // backend 404, 410
	ReasonRequestTimeout   Reason = "request_timeout"   // backend 408
	ReasonThrottled        Reason = "throttled"         // backend 429
	ReasonUnavailable      Reason = "unavailable"       // backend 503
	ReasonServerError      Reason = "server_error"      // backend 500, 502 and other 5xx
	ReasonGatewayTimeout   Reason = "gateway_timeout"   // backend 504
	ReasonNotImplemented   Reason = "not_implemented"   // backend 501, 505
	ReasonUnexpectedAnswer Reason = "unexpected"        // backend 1xx, 3xx
	ReasonBadResponse      Reason = "bad_response"      // an answer that cannot be read: not JSON, oversized, or beyond the rules
	ReasonConnect          Reason = "connect"           // connect or DNS failure: nothing was sent
	ReasonReset            Reason = "reset"             // the connection broke
	ReasonDeadline         Reason = "deadline"          // our deadline passed
	ReasonTLS              Reason = "tls"               // the backend's certificate is not trusted
	ReasonAuth             Reason = "auth"              // the upstream's credential could not be had: nothing was sent
	ReasonInvalidRequest   Reason = "invalid_request"   // the backend request could not be written (a forwarded value): nothing was sent
	ReasonCircuitOpen      Reason = "circuit_open"      // the breaker refused the call
	ReasonBulkhead         Reason = "bulkhead"          // too many calls in flight to the upstream
	ReasonCanceled         Reason = "canceled"          // the caller went away
	ReasonStoreUnavailable Reason = "store_unavailable" // the idempotency or budget store did not answer
	ReasonInFlightTimeout  Reason = "in_flight_timeout" // waited for an in-flight call with the same key until the deadline
	ReasonOutcomeLost      Reason = "outcome_lost"      // an earlier call with this key died mid-call
	ReasonReplayed         Reason = "replayed"          // a stored result for a repeated idempotency key
)

// retryRule says when the identical call may be retried after an outcome.
type retryRule uint8

// The retry rules of the table.
const (
	// retryNever: the same call would meet the same answer.
	retryNever retryRule = iota
	// retryAlways: nothing happened and a later identical call may succeed.
	retryAlways
	// retryIfSafe: yes, unless a side-effecting request may have acted (or
	// did) at a backend that does not dedupe on the forwarded key.
	retryIfSafe
	// retryByRule: the matched errors rule says, or its status's default.
	retryByRule
	// retryAsStored: a replay says what the stored envelope says.
	retryAsStored
)

// effectRule says what the backend did, as if the tool had a side effect; a
// read-only tool's envelope always says none.
type effectRule uint8

// The side-effect rules of the table.
const (
	effectNone    effectRule = iota // nothing happened at the backend
	effectDone                      // the backend acted: it answered 2xx
	effectUnknown                   // the request reached the backend, the outcome is lost
	// effectIfSent: none when the request never went out whole, unknown
	// once it did (done when the backend's answer had begun).
	effectIfSent
	// effectByAnswer: done for a 2xx answer, otherwise what the answer's
	// code says in the default table.
	effectByAnswer
	effectByRule   // the matched errors rule says, or the default for the answer
	effectAsStored // a replay says what the stored envelope says
)

// waitRule says where an outcome's retry_after comes from.
type waitRule uint8

// The waits of the table.
const (
	waitNone       waitRule = iota
	waitOneSecond           // 1 s when nothing was sent (DESIGN section 7)
	waitRetryAfter          // the backend's Retry-After, when it sent one
	waitStage               // the stage that decides knows it: the limiter, the breaker, the budget
)

// reasonRow is one line of the mapping table.
type reasonRow struct {
	Reason Reason
	// Status is the outcome's status; empty for the rows whose status
	// comes from elsewhere (a rule's, a stored envelope's).
	Status Status
	Retry  retryRule
	Effect effectRule
	// HTTP is the status in mapped mode when it is not the status's own
	// (statusHTTP); 0 for most rows.
	HTTP int
	Wait waitRule
	// Gateway marks the reasons toolgate decides on its own side: a tool's
	// per-status message templates never speak for them, only a template
	// named after the reason does.
	Gateway bool
}

// reasonTable is the mapping table. It is never written.
var reasonTable = [...]reasonRow{
	{Reason: ReasonOK, Status: StatusOK, Retry: retryNever, Effect: effectDone},
	{Reason: ReasonEmpty, Status: StatusEmpty, Retry: retryNever, Effect: effectDone},
	{Reason: ReasonRule, Retry: retryByRule, Effect: effectByRule},
	{Reason: ReasonSchema, Status: StatusBadArgs, Retry: retryNever, Effect: effectNone, Gateway: true},
	{Reason: ReasonBadJSON, Status: StatusBadArgs, Retry: retryNever, Effect: effectNone, Gateway: true},
	{Reason: ReasonTooLarge, Status: StatusBadArgs, Retry: retryNever, Effect: effectNone, HTTP: 413, Gateway: true},
	{Reason: ReasonKeyMissing, Status: StatusBadArgs, Retry: retryNever, Effect: effectNone, Gateway: true},
	{Reason: ReasonKeyMalformed, Status: StatusBadArgs, Retry: retryNever, Effect: effectNone, Gateway: true},
	{Reason: ReasonKeyConflict, Status: StatusBadArgs, Retry: retryNever, Effect: effectNone, Gateway: true},
	{Reason: ReasonKeyMismatch, Status: StatusBadArgs, Retry: retryNever, Effect: effectNone, Gateway: true},
	{Reason: ReasonUnknownTool, Status: StatusNotFound, Retry: retryNever, Effect: effectNone, Gateway: true},
	{Reason: ReasonDenied, Status: StatusForbidden, Retry: retryNever, Effect: effectNone, Gateway: true},
	// A spent budget is not retryable, yet its envelope says when it resets.
	{Reason: ReasonBudget, Status: StatusForbidden, Retry: retryNever, Effect: effectNone, Wait: waitStage, Gateway: true},
	{Reason: ReasonRateLimited, Status: StatusUpstream, Retry: retryAlways, Effect: effectNone, Wait: waitStage, Gateway: true},
	{Reason: ReasonRejected, Status: StatusBadArgs, Retry: retryNever, Effect: effectNone},
	{Reason: ReasonConflict, Status: StatusBadArgs, Retry: retryNever, Effect: effectNone},
	{Reason: ReasonUnauthorized, Status: StatusForbidden, Retry: retryNever, Effect: effectNone},
	{Reason: ReasonMissing, Status: StatusNotFound, Retry: retryNever, Effect: effectNone},
	{Reason: ReasonRequestTimeout, Status: StatusTimeout, Retry: retryAlways, Effect: effectNone},
	{Reason: ReasonThrottled, Status: StatusUpstream, Retry: retryAlways, Effect: effectNone, Wait: waitRetryAfter},
	{Reason: ReasonUnavailable, Status: StatusUpstream, Retry: retryAlways, Effect: effectNone, Wait: waitRetryAfter},
	{Reason: ReasonServerError, Status: StatusUpstream, Retry: retryIfSafe, Effect: effectUnknown},
	{Reason: ReasonGatewayTimeout, Status: StatusTimeout, Retry: retryIfSafe, Effect: effectUnknown},
	{Reason: ReasonNotImplemented, Status: StatusUpstream, Retry: retryNever, Effect: effectNone},
	// Redirects are not followed; after a POST the action may have run.
	{Reason: ReasonUnexpectedAnswer, Status: StatusUpstream, Retry: retryNever, Effect: effectUnknown},
	// The same answer would be as unreadable again.
	{Reason: ReasonBadResponse, Status: StatusUpstream, Retry: retryNever, Effect: effectByAnswer},
	{Reason: ReasonConnect, Status: StatusUpstream, Retry: retryAlways, Effect: effectNone, Wait: waitOneSecond, Gateway: true},
	{Reason: ReasonReset, Status: StatusUpstream, Retry: retryIfSafe, Effect: effectIfSent, Wait: waitOneSecond},
	{Reason: ReasonDeadline, Status: StatusTimeout, Retry: retryIfSafe, Effect: effectIfSent},
	// Retrying cannot fix a trust configuration.
	{Reason: ReasonTLS, Status: StatusUpstream, Retry: retryNever, Effect: effectNone, Gateway: true},
	// The token endpoint failed, or a credential file never could be read:
	// the backend is not to blame, and a later call may get a credential.
	{Reason: ReasonAuth, Status: StatusUpstream, Retry: retryAlways, Effect: effectNone, Wait: waitOneSecond, Gateway: true},
	// toolgate's own fault (a value net/http refuses to write): the same
	// call would fail the same way.
	{Reason: ReasonInvalidRequest, Status: StatusUpstream, Retry: retryNever, Effect: effectNone, Gateway: true},
	{Reason: ReasonCircuitOpen, Status: StatusUpstream, Retry: retryAlways, Effect: effectNone, Wait: waitStage, Gateway: true},
	{Reason: ReasonBulkhead, Status: StatusUpstream, Retry: retryAlways, Effect: effectNone, Wait: waitOneSecond, Gateway: true},
	{Reason: ReasonCanceled, Status: StatusUpstream, Retry: retryIfSafe, Effect: effectIfSent, Gateway: true},
	// Side-effecting calls fail closed when their key cannot be checked.
	{Reason: ReasonStoreUnavailable, Status: StatusUpstream, Retry: retryAlways, Effect: effectNone, Wait: waitOneSecond, Gateway: true},
	// The first call may still act; the same key fetches its result.
	{Reason: ReasonInFlightTimeout, Status: StatusTimeout, Retry: retryAlways, Effect: effectUnknown, Gateway: true},
	// The same key would only replay this record.
	{Reason: ReasonOutcomeLost, Status: StatusTimeout, Retry: retryNever, Effect: effectUnknown, Gateway: true},
	{Reason: ReasonReplayed, Retry: retryAsStored, Effect: effectAsStored, Gateway: true},
}

// rowOf returns the table's row for a reason.
func rowOf(r Reason) (reasonRow, bool) {
	for i := range reasonTable {
		if reasonTable[i].Reason == r {
			return reasonTable[i], true
		}
	}
	return reasonRow{}, false
}

// parseReason returns the reason named s, or false when s is not one.
func parseReason(s string) (Reason, bool) {
	if row, ok := rowOf(Reason(s)); ok {
		return row.Reason, true
	}
	return "", false
}

// statusHTTP is a status's HTTP status in mapped mode. `upstream` answers
// 503 (with Retry-After) only when nothing happened at the backend and the
// identical call may succeed later; the caller passes that fact in.
func statusHTTP(s Status, retryLater bool) int {
	switch s {
	case StatusOK, StatusEmpty:
		return 200
	case StatusBadArgs:
		return 400
	case StatusForbidden:
		return 403
	case StatusNotFound:
		return 404
	case StatusTimeout:
		return 504
	default:
		if retryLater {
			return 503
		}
		return 502
	}
}

// MappedHTTP is the HTTP status of an outcome in mapped mode. Whether the
// answer carries Retry-After is the envelope's to say, not the status's:
// exactly when retry_after_ms is set (RetryAfterHeader).
func MappedHTTP(r Reason, s Status, retryLater bool) int {
	if row, ok := rowOf(r); ok && row.HTTP != 0 {
		return row.HTTP
	}
	return statusHTTP(s, retryLater)
}

// RetryAfterHeader is the Retry-After value, in whole seconds and at least
// one, of an envelope's retry_after_ms; an answer whose envelope has none
// carries no Retry-After.
func RetryAfterHeader(ms int64) string {
	return strconv.FormatInt(max((ms+999)/1000, 1), 10)
}

// statusRetryable is whether the identical call may be retried after an
// outcome a rule gives a status, when the rule does not say.
func statusRetryable(s Status) bool {
	return s == StatusTimeout || s == StatusUpstream
}

// retryable applies a row's retry rule to an outcome with the given side
// effect. sideEffect says the tool has one; dedupes that its backend dedupes
// on the forwarded key, so an unknown outcome is safe to resend.
func (row *reasonRow) retryable(effect SideEffect, sideEffect, dedupes bool) bool {
	switch row.Retry {
	case retryAlways:
		return true
	case retryIfSafe:
		return safeToRepeat(effect, sideEffect, dedupes)
	}
	return false
}

// safeToRepeat is the retry rule every outcome of a backend's answer keeps,
// whoever classified it (the table or an errors rule): the identical call
// may be retried only when it cannot act twice. That holds for a read-only
// tool, for an outcome where nothing was done, and for an unknown outcome
// at a backend that dedupes on the forwarded key (the retry is sent with
// the same key). An action that was done is never retried; an unknown one
// at a backend that does not dedupe neither, since the retry would only
// replay the stored unknown record, which says the same again.
func safeToRepeat(effect SideEffect, sideEffect, dedupes bool) bool {
	return !sideEffect || effect == SideEffectNone || effect == SideEffectUnknown && dedupes
}

// ruleRetryConflict says why an errors rule's written side_effect and
// retryable contradict the retry rule (safeToRepeat) on a tool, or "" when
// they do not. A rule that leaves retryable out gets the rule's answer at
// run time (ApplyRule); one that writes it must not promise a retry that
// cannot happen.
func ruleRetryConflict(e ErrorRuleSpec, sideEffect, dedupes bool) string {
	if e.Retryable == nil || !*e.Retryable || e.SideEffect == nil || safeToRepeat(*e.SideEffect, sideEffect, dedupes) {
		return ""
	}
	if *e.SideEffect == SideEffectDone {
		return "retryable: true contradicts side_effect: done: the action was performed, and a repeat must not be asked for (drop retryable, or say side_effect: none if the backend did nothing)"
	}
	return "retryable: true contradicts side_effect: unknown on a backend that does not dedupe: a retry with the same idempotency key only replays the unknown outcome (drop retryable, or set idempotency.forward_header if the backend dedupes on the key)"
}

// effect applies a row's side-effect rule: written says the request went out
// whole, so the backend may have acted on it.
func (row *reasonRow) effect(written bool) SideEffect {
	switch row.Effect {
	case effectDone, effectByAnswer:
		return SideEffectDone
	case effectUnknown:
		return SideEffectUnknown
	case effectIfSent:
		if written {
			return SideEffectUnknown
		}
	}
	return SideEffectNone
}

// outcome builds the outcome of a reason from its row.
func (row *reasonRow) outcome(code int, written, sideEffect, dedupes bool, retryAfter time.Duration) Outcome {
	o := Outcome{Status: row.Status, Reason: row.Reason, HTTPCode: code, Effect: row.effect(written)}
	o.Retryable = row.retryable(o.Effect, sideEffect, dedupes)
	switch row.Wait {
	case waitOneSecond:
		if o.Effect == SideEffectNone {
			o.RetryAfter = time.Second
		}
	case waitRetryAfter:
		o.RetryAfter = retryAfter
	}
	return o
}

// row returns the row of a reason the table must have.
func row(r Reason) *reasonRow {
	for i := range reasonTable {
		if reasonTable[i].Reason == r {
			return &reasonTable[i]
		}
	}
	panic("contracts: reason " + string(r) + " has no row in the table")
}

// Reject is the outcome of a reason decided before anything was sent:
// status, retryability, side effect and any fixed wait come from the table.
// A stage that knows a wait (the limiter, the breaker, the budget) sets
// RetryAfter itself.
func Reject(r Reason) Outcome {
	return row(r).outcome(0, false, false, false, 0)
}

// RetryAfterMS is the envelope's retry_after_ms: set whenever a wait is
// known for a call that may be retried, and for a spent budget (when it
// resets), the one refusal whose wait the table gives though the call is
// not retryable. At least 1 when there is a wait at all.
func (o *Outcome) RetryAfterMS() int64 {
	if o.RetryAfter <= 0 {
		return 0
	}
	if r, ok := rowOf(o.Reason); !o.Retryable && (!ok || r.Wait != waitStage) {
		return 0
	}
	return max(o.RetryAfter.Milliseconds(), 1)
}
