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
	ReasonCircuitOpen      Reason = "circuit_open"      // the breaker refused the call
	ReasonBulkhead         Reason = "bulkhead"          // too many calls in flight to the upstream
	ReasonCanceled         Reason = "canceled"          // the caller went away
	ReasonStoreUnavailable Reason = "store_unavailable" // the idempotency or budget store did not answer
	ReasonInFlightTimeout  Reason = "in_flight_timeout" // waited for an in-flight call with the same key until the deadline
	ReasonOutcomeLost      Reason = "outcome_lost"      // an earlier call with this key died mid-call
	ReasonReplayed         Reason = "replayed"          // a stored result for a repeated idempotency key
)

// Retry says when the identical call may be retried after an outcome.
type Retry uint8

// The retry rules of the table.
const (
	// RetryNever: the same call would meet the same answer.
	RetryNever Retry = iota
	// RetryAlways: nothing happened and a later identical call may succeed.
	RetryAlways
	// RetryIfSafe: yes, unless a side-effecting request may have acted (or
	// did) at a backend that does not dedupe on the forwarded key.
	RetryIfSafe
	// RetryByRule: the matched errors rule says, or its status's default.
	RetryByRule
	// RetryAsStored: a replay says what the stored envelope says.
	RetryAsStored
)

// Effect says what the backend did, as if the tool had a side effect; a
// read-only tool's envelope always says none.
type Effect uint8

// The side-effect rules of the table.
const (
	EffectNone    Effect = iota // nothing happened at the backend
	EffectDone                  // the backend acted: it answered 2xx
	EffectUnknown               // the request reached the backend, the outcome is lost
	// EffectIfSent: none when the request never went out whole, unknown
	// once it did (done when the backend's answer had begun).
	EffectIfSent
	// EffectByAnswer: done for a 2xx answer, otherwise what the answer's
	// code says in the default table.
	EffectByAnswer
	EffectByRule   // the matched errors rule says, or the default for the answer
	EffectAsStored // a replay says what the stored envelope says
)

// Wait says where an outcome's retry_after comes from.
type Wait uint8

// The waits of the table.
const (
	WaitNone       Wait = iota
	WaitOneSecond       // 1 s when nothing was sent (DESIGN section 7)
	WaitRetryAfter      // the backend's Retry-After, when it sent one
	WaitStage           // the stage that decides knows it: the limiter, the breaker, the budget
)

// ReasonRow is one line of the mapping table.
type ReasonRow struct {
	Reason Reason
	// Status is the outcome's status; empty for the rows whose status
	// comes from elsewhere (a rule's, a stored envelope's).
	Status Status
	Retry  Retry
	Effect Effect
	// HTTP is the status in mapped mode when it is not the status's own
	// (StatusHTTP); 0 for most rows.
	HTTP int
	Wait Wait
	// Gateway marks the reasons toolgate decides on its own side: a tool's
	// per-status message templates never speak for them, only a template
	// named after the reason does.
	Gateway bool
}

// reasonTable is the mapping table. It is never written.
var reasonTable = [...]ReasonRow{
	{Reason: ReasonOK, Status: StatusOK, Retry: RetryNever, Effect: EffectDone},
	{Reason: ReasonEmpty, Status: StatusEmpty, Retry: RetryNever, Effect: EffectDone},
	{Reason: ReasonRule, Retry: RetryByRule, Effect: EffectByRule},
	{Reason: ReasonSchema, Status: StatusBadArgs, Retry: RetryNever, Effect: EffectNone, Gateway: true},
	{Reason: ReasonBadJSON, Status: StatusBadArgs, Retry: RetryNever, Effect: EffectNone, Gateway: true},
	{Reason: ReasonTooLarge, Status: StatusBadArgs, Retry: RetryNever, Effect: EffectNone, HTTP: 413, Gateway: true},
	{Reason: ReasonKeyMissing, Status: StatusBadArgs, Retry: RetryNever, Effect: EffectNone, Gateway: true},
	{Reason: ReasonKeyMalformed, Status: StatusBadArgs, Retry: RetryNever, Effect: EffectNone, Gateway: true},
	{Reason: ReasonKeyConflict, Status: StatusBadArgs, Retry: RetryNever, Effect: EffectNone, Gateway: true},
	{Reason: ReasonKeyMismatch, Status: StatusBadArgs, Retry: RetryNever, Effect: EffectNone, Gateway: true},
	{Reason: ReasonUnknownTool, Status: StatusNotFound, Retry: RetryNever, Effect: EffectNone, Gateway: true},
	{Reason: ReasonDenied, Status: StatusForbidden, Retry: RetryNever, Effect: EffectNone, Gateway: true},
	// A spent budget is not retryable, yet its envelope says when it resets.
	{Reason: ReasonBudget, Status: StatusForbidden, Retry: RetryNever, Effect: EffectNone, Wait: WaitStage, Gateway: true},
	{Reason: ReasonRateLimited, Status: StatusUpstream, Retry: RetryAlways, Effect: EffectNone, Wait: WaitStage, Gateway: true},
	{Reason: ReasonRejected, Status: StatusBadArgs, Retry: RetryNever, Effect: EffectNone},
	{Reason: ReasonConflict, Status: StatusBadArgs, Retry: RetryNever, Effect: EffectNone},
	{Reason: ReasonUnauthorized, Status: StatusForbidden, Retry: RetryNever, Effect: EffectNone},
	{Reason: ReasonMissing, Status: StatusNotFound, Retry: RetryNever, Effect: EffectNone},
	{Reason: ReasonRequestTimeout, Status: StatusTimeout, Retry: RetryAlways, Effect: EffectNone},
	{Reason: ReasonThrottled, Status: StatusUpstream, Retry: RetryAlways, Effect: EffectNone, Wait: WaitRetryAfter},
	{Reason: ReasonUnavailable, Status: StatusUpstream, Retry: RetryAlways, Effect: EffectNone, Wait: WaitRetryAfter},
	{Reason: ReasonServerError, Status: StatusUpstream, Retry: RetryIfSafe, Effect: EffectUnknown},
	{Reason: ReasonGatewayTimeout, Status: StatusTimeout, Retry: RetryIfSafe, Effect: EffectUnknown},
	{Reason: ReasonNotImplemented, Status: StatusUpstream, Retry: RetryNever, Effect: EffectNone},
	// Redirects are not followed; after a POST the action may have run.
	{Reason: ReasonUnexpectedAnswer, Status: StatusUpstream, Retry: RetryNever, Effect: EffectUnknown},
	// The same answer would be as unreadable again.
	{Reason: ReasonBadResponse, Status: StatusUpstream, Retry: RetryNever, Effect: EffectByAnswer},
	{Reason: ReasonConnect, Status: StatusUpstream, Retry: RetryAlways, Effect: EffectNone, Wait: WaitOneSecond, Gateway: true},
	{Reason: ReasonReset, Status: StatusUpstream, Retry: RetryIfSafe, Effect: EffectIfSent, Wait: WaitOneSecond},
	{Reason: ReasonDeadline, Status: StatusTimeout, Retry: RetryIfSafe, Effect: EffectIfSent},
	// Retrying cannot fix a trust configuration.
	{Reason: ReasonTLS, Status: StatusUpstream, Retry: RetryNever, Effect: EffectNone, Gateway: true},
	{Reason: ReasonCircuitOpen, Status: StatusUpstream, Retry: RetryAlways, Effect: EffectNone, Wait: WaitStage, Gateway: true},
	{Reason: ReasonBulkhead, Status: StatusUpstream, Retry: RetryAlways, Effect: EffectNone, Wait: WaitOneSecond, Gateway: true},
	{Reason: ReasonCanceled, Status: StatusUpstream, Retry: RetryIfSafe, Effect: EffectIfSent, Gateway: true},
	// Side-effecting calls fail closed when their key cannot be checked.
	{Reason: ReasonStoreUnavailable, Status: StatusUpstream, Retry: RetryAlways, Effect: EffectNone, Wait: WaitOneSecond, Gateway: true},
	// The first call may still act; the same key fetches its result.
	{Reason: ReasonInFlightTimeout, Status: StatusTimeout, Retry: RetryAlways, Effect: EffectUnknown, Gateway: true},
	// The same key would only replay this record.
	{Reason: ReasonOutcomeLost, Status: StatusTimeout, Retry: RetryNever, Effect: EffectUnknown, Gateway: true},
	{Reason: ReasonReplayed, Retry: RetryAsStored, Effect: EffectAsStored, Gateway: true},
}

// ReasonTable returns the mapping table, one row per reason, in order.
func ReasonTable() []ReasonRow { return append([]ReasonRow(nil), reasonTable[:]...) }

// RowOf returns the table's row for a reason.
func RowOf(r Reason) (ReasonRow, bool) {
	for i := range reasonTable {
		if reasonTable[i].Reason == r {
			return reasonTable[i], true
		}
	}
	return ReasonRow{}, false
}

// ParseReason returns the reason named s, or false when s is not one.
func ParseReason(s string) (Reason, bool) {
	if row, ok := RowOf(Reason(s)); ok {
		return row.Reason, true
	}
	return "", false
}

// StatusHTTP is a status's HTTP status in mapped mode. `upstream` answers
// 503 (with Retry-After) only when nothing happened at the backend and the
// identical call may succeed later; the caller passes that fact in.
func StatusHTTP(s Status, retryLater bool) int {
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

// MappedHTTP is the HTTP status of an outcome in mapped mode, and whether
// the answer carries Retry-After (exactly when it is 503).
func MappedHTTP(r Reason, s Status, retryLater bool) (code int, retryAfter bool) {
	if row, ok := RowOf(r); ok && row.HTTP != 0 {
		return row.HTTP, false
	}
	code = StatusHTTP(s, retryLater)
	return code, code == 503
}

// RetryAfterHeader is the Retry-After value, in whole seconds and at least
// one, of an envelope's retry_after_ms.
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
func (row *ReasonRow) retryable(effect SideEffect, sideEffect, dedupes bool) bool {
	switch row.Retry {
	case RetryAlways:
		return true
	case RetryIfSafe:
		return !sideEffect || effect == SideEffectNone || effect == SideEffectUnknown && dedupes
	}
	return false
}

// effect applies a row's side-effect rule: written says the request went out
// whole, so the backend may have acted on it.
func (row *ReasonRow) effect(written bool) SideEffect {
	switch row.Effect {
	case EffectDone, EffectByAnswer:
		return SideEffectDone
	case EffectUnknown:
		return SideEffectUnknown
	case EffectIfSent:
		if written {
			return SideEffectUnknown
		}
	}
	return SideEffectNone
}

// outcome builds the outcome of a reason from its row.
func (row *ReasonRow) outcome(code int, written, sideEffect, dedupes bool, retryAfter time.Duration) Outcome {
	o := Outcome{Status: row.Status, Reason: row.Reason, HTTPCode: code, Effect: row.effect(written)}
	o.Retryable = row.retryable(o.Effect, sideEffect, dedupes)
	switch row.Wait {
	case WaitOneSecond:
		if o.Effect == SideEffectNone {
			o.RetryAfter = time.Second
		}
	case WaitRetryAfter:
		o.RetryAfter = retryAfter
	}
	return o
}

// row returns the row of a reason the table must have.
func row(r Reason) *ReasonRow {
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
	if r, ok := RowOf(o.Reason); !o.Retryable && (!ok || r.Wait != WaitStage) {
		return 0
	}
	return max(o.RetryAfter.Milliseconds(), 1)
}
