package extproc

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/toolgate/toolgate/contracts"
)

// reply is what came back on the response path: the backend's answer, or a
// local reply Envoy made itself in place of one.
type reply struct {
	// local says Envoy answered, not the backend; failure and written then
	// say which transport failure the HTTP front would have seen instead.
	local   bool
	failure contracts.Failure
	written bool
}

// backendAnswer is an answer the backend gave: classified by its status and
// body like any other, through proxy.Call.Finish.
var backendAnswer = reply{}

// Envoy's response code details (the response.code_details attribute) for
// the answers it makes itself, and the texts of its router's local replies.
const (
	detailsViaUpstream   = "via_upstream"
	detailsResetBefore   = "upstream_reset_before_response_started"
	detailsResetAfter    = "upstream_reset_after_response_started"
	bodyResetBefore      = "upstream connect error or disconnect/reset before headers."
	bodyRouteTimeout     = "upstream request timeout"
	bodyNoHealthy        = "no healthy upstream"
	headerServiceTime    = "X-Envoy-Upstream-Service-Time"
	headerOverloaded     = "X-Envoy-Overloaded"
	resetReasonSeparator = "reset reason:"
)

// classifyReply tells a backend's answer from a local reply Envoy made in
// its place, and maps each local reply to the transport failure the HTTP
// front would have met: the same failure gives the same envelope whichever
// front sent the call. details is Envoy's response code details when the
// filter sends the response.code_details attribute (the bootstrap in
// deploy/envoy does); it is exact, so it decides first. Without it, the
// headers and the fixed texts of Envoy's router decide.
func classifyReply(code int, h http.Header, body []byte, details string) reply {
	if details != "" {
		return classifyDetails(details)
	}
	// The router stamps every answer that came from the upstream with its
	// service time; a local reply never has it. (It is missing on every
	// answer when the router suppresses Envoy headers; the rules below
	// still recognise local replies by their fixed texts.)
	if h.Get(headerServiceTime) != "" {
		return backendAnswer
	}
	// Circuit breaker overflow (max_requests, max_pending_requests,
	// max_retries) or load shedding by the overload manager: the request
	// never left Envoy. Nothing was sent, so retrying is safe, as after a
	// full bulkhead or a refused connection.
	if h.Get(headerOverloaded) != "" {
		return reply{local: true, failure: contracts.FailConnect}
	}
	text := string(bytes.TrimSpace(body))
	switch {
	case strings.HasPrefix(text, bodyResetBefore):
		// "upstream connect error or disconnect/reset before headers.
		// [retried and the latest ]reset reason: R[, transport failure
		// reason: T]": the upstream request failed before any answer.
		_, reason, _ := strings.Cut(text, resetReasonSeparator)
		return resetReply(reason)
	case code == http.StatusGatewayTimeout && text == bodyRouteTimeout:
		// The route's timeout (or per-try timeout) passed after the request
		// was sent: the backend may have acted.
		return reply{local: true, failure: contracts.FailDeadline, written: true}
	case code == http.StatusServiceUnavailable && text == bodyNoHealthy:
		// No healthy endpoint to connect to: nothing was sent.
		return reply{local: true, failure: contracts.FailConnect}
	}
	// Anything else is read as the backend's answer, by its status. That
	// includes local replies of other filters (a rate limit's 429, an
	// authorization filter's 403), which are classified by status just as
	// a gateway's answer would be behind the HTTP front.
	return backendAnswer
}

// classifyDetails maps Envoy's response code details to a reply.
func classifyDetails(details string) reply {
	name, args, _ := strings.Cut(details, "{")
	switch name {
	case detailsViaUpstream:
		// The upstream answered; its status and body decide.
		return backendAnswer
	case detailsResetBefore:
		// The upstream request failed before response headers; the reset
		// reason says whether anything was sent.
		return resetReply(strings.ReplaceAll(strings.TrimSuffix(args, "}"), "_", " "))
	case detailsResetAfter:
		// The answer had started when the stream broke: the backend acted
		// on the request, and its result is lost.
		return reply{local: true, failure: contracts.FailReset, written: true}
	case "response_timeout", "upstream_per_try_timeout", "upstream_per_try_idle_timeout",
		"upstream_max_stream_duration_reached", "stream_idle_timeout", "max_duration_timeout",
		"request_overall_timeout":
		// A timeout of the route or of the stream while the backend had the
		// request: the outcome is unknown, as when toolgate's own deadline
		// passes after writing the request.
		return reply{local: true, failure: contracts.FailDeadline, written: true}
	case "no_healthy_upstream", "cluster_not_found", "maintenance_mode", "overload",
		"drop_overload", "unconditional_drop_overload":
		// Envoy refused before choosing or reaching an endpoint: nothing
		// was sent.
		return reply{local: true, failure: contracts.FailConnect}
	}
	// Other local replies (authorization, rate limits, direct responses,
	// route not found) are read by their status, like an answer.
	return backendAnswer
}

// resetReply maps the reset reason of an upstream request that failed
// before response headers ("connection failure", "overflow", "remote
// reset", ...; Envoy's spelling, with spaces) to a reply.
func resetReply(reason string) reply {
	reason = strings.ToLower(strings.TrimSpace(reason))
	// Only the reason itself counts, not the transport failure detail that
	// may follow it ("connection failure, transport failure reason: ...",
	// or "|" in response code details).
	if i := strings.IndexAny(reason, ",|"); i >= 0 {
		reason = reason[:i]
	}
	switch {
	case strings.Contains(reason, "overflow"):
		// The circuit breaker refused: the request never left Envoy.
		return reply{local: true, failure: contracts.FailConnect}
	case strings.Contains(reason, "connection failure"), strings.Contains(reason, "connection timeout"):
		// Connecting failed (refused, unreachable, TLS handshake, connect
		// timeout): nothing was sent.
		return reply{local: true, failure: contracts.FailConnect}
	case strings.Contains(reason, "refused stream"):
		// HTTP/2 REFUSED_STREAM promises the server did not process the
		// request: nothing happened.
		return reply{local: true, failure: contracts.FailConnect}
	}
	// "connection termination", "remote reset", "local reset", "protocol
	// error", "overload manager reset" and anything new: the connection
	// broke with the request possibly written, so the outcome is unknown.
	return reply{local: true, failure: contracts.FailReset, written: true}
}
