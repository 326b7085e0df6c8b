package learn

import (
	"net/http"
	"time"
)

// Exchange is one request toolgate forwarded to a backend and what came of
// it, as a front end hands it to Observe. Observe reads only what it needs
// and keeps no reference to the exchange, its headers or its bodies, so
// the caller may reuse every buffer once Observe returns.
type Exchange struct {
	// Upstream names the upstream the request went to; UpstreamURL is its
	// base URL (the policy allows no credentials in it).
	Upstream    string
	UpstreamURL string
	// Tool is the tool whose backend call this was, and Route its path
	// template as the policy writes it; both are empty for a passthrough
	// request, whose route template is inferred from the path.
	Tool  string
	Route string
	// Method, EscapedPath (relative to the upstream's base URL) and
	// RawQuery are the request line as sent to the backend.
	Method      string
	EscapedPath string
	RawQuery    string
	// RequestHeader is read for Content-Type and the presence of
	// Idempotency-Key only; no other request header is looked at.
	RequestHeader http.Header
	// RequestBody is at most the first bytes of the request body;
	// RequestTruncated says there were more, so it is not parsed.
	RequestBody      []byte
	RequestTruncated bool
	// Status is the backend's HTTP status, or 0 when there was no answer;
	// Failure then says why (timeout, reset, connect, canceled, ...).
	Status  int
	Failure string
	// ResponseHeader is read for Content-Type and the headers in
	// answerHeaders only.
	ResponseHeader http.Header
	// ResponseBody is at most the first bytes of the answer body;
	// ResponseTruncated says there were more, so it is not parsed.
	ResponseBody      []byte
	ResponseTruncated bool
	// Latency is the time from sending the request to the end of the
	// answer.
	Latency time.Duration
}
