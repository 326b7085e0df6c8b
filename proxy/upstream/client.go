// Package upstream is the client side of toolgate's pipeline: it sends a
// tool call's backend request and reports what came of it, as facts. It
// holds the two clients behind one interface (Client): toolgate's own
// HTTP/1.1 client for plain-HTTP backends (H1Client) and net/http's
// (NetHTTPClient: HTTPS and HTTP/2, and plain HTTP when the fast client is
// off, server.upstream_client: nethttp), and what a request needs besides:
// the upstream's credential (Auth: static values, files read again when
// they change, OAuth2 client credentials), the TLS settings of its
// transport, and the bulkhead that bounds the calls in flight.
//
// A Client never judges. Its Report says what happened on the wire (the
// answer's status, header and body, or the error that ended the request;
// whether a connection was made; how many times the request went out
// whole), and the pipeline (package proxy, classify.go) decides what it
// means for the call: which reason, whether a side effect may have
// happened, whether to retry. Both clients keep the same promises, which
// one conformance suite holds them to (internal/testkit/clienttest): a
// request that went out whole goes out again only when the caller said so
// (SendOptions.Resend); a request of which nothing was written may be sent
// again, or is reported with Writes 0; bytes that belong to no request are
// never read as an answer; the answer's header and body are bounded; the
// context's end stops the request.
package upstream

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"

	"github.com/toolgate/toolgate/internal/boundedio"
)

// Client sends the backend requests of one upstream.
type Client interface {
	// Send sends req within ctx (its deadline, or its cancellation, stops
	// the request) and writes what came of it to r. It never fails: an
	// error is a fact of the report. r is the caller's, so that a report
	// takes no room on the stack of every call; Send resets it first.
	Send(ctx context.Context, req *http.Request, o SendOptions, r *Report)
	// CloseIdleConnections closes the connections no request is using;
	// requests in flight keep theirs.
	CloseIdleConnections()
}

// Cancellation is a context that ends only at its deadline or when
// another context ends (the proxy's call context): EndsWith names that
// other context. The H1Client then sets the deadline on the connection and
// watches only the other context, so the call's context needs no timer of
// its own. It is asked of the context Send is given, not of the contexts
// it derives from: a context derived from a Cancellation (its own cancel,
// or only values, such as a tracing span's) is watched whole, as any
// other context is.
type Cancellation interface {
	context.Context
	EndsWith() context.Context
}

// SendOptions are what a Send may do with one request.
type SendOptions struct {
	// MaxBody bounds the answer's body (server.max_response_bytes): past
	// it the body is not kept (Report.BodyErr is
	// boundedio.ErrBodyTooLarge).
	MaxBody int64
	// Resend says a request that went out whole may go out again within
	// the Send when its reused connection closed before any byte of an
	// answer: acting twice is harmless (a read-only tool, or a backend
	// that dedupes on the forwarded key). A request of which nothing was
	// written may always go out again.
	Resend bool
}

// Report is what one Send came to: facts, not a verdict.
type Report struct {
	// Status is the answer's HTTP status; 0 when there is no answer (Err).
	Status int
	// Header is the answer's header, within the bounds of every answer
	// (64 KiB, 100 fields).
	Header http.Header
	// Body is the answer's body, read whole within SendOptions.MaxBody;
	// nil when BodyErr is set. It is valid until Release.
	Body []byte
	// BodyErr says the body was not read whole: boundedio.ErrBodyTooLarge,
	// or what cut it off (a reset, the deadline).
	BodyErr error
	// Err is why there is no answer: a dial error, a reset, the context's
	// end, an answer that could not be read, ErrInvalidRequest.
	Err error
	// Connected says a connection was made for the request: an error
	// without one means nothing was sent.
	Connected bool
	// Writes counts the times the request went out whole: 0 when nothing
	// of it certainly reached the backend, 2 when it was sent again.
	Writes int

	buf *[]byte // the pooled buffer behind Body
}

// Resent says the request went out whole more than once.
func (r *Report) Resent() bool { return r.Writes > 1 }

// Release gives the body's buffer back for another answer; Body may not
// be used after it.
func (r *Report) Release() {
	putBody(r.buf)
	r.buf, r.Body = nil, nil
}

// ErrInvalidRequest is a backend request net/http refuses to write before
// it dials (a header value with a line break, from a value toolgate
// forwards). The fault is toolgate's, the request never left, and the same
// call would fail the same way.
var ErrInvalidRequest = errors.New("invalid backend request")

// errHeaderTooLarge is an answer whose header exceeds the bounds: the
// request was sent, the answer is unreadable.
var errHeaderTooLarge = errors.New("backend response header too large")

// The bounds of a backend's response header. A JSON API sends a few hundred
// bytes of header in a dozen fields; these leave room for cookies and
// tracing many times over, and keep a backend that streams an endless
// header from growing toolgate's memory (net/http's Transport allows
// 10 MiB by default, in any number of fields).
const (
	// maxResponseHeaderBytes bounds the bytes read before an answer's
	// body: its status line and header, and those of the informational
	// answers before it.
	maxResponseHeaderBytes = 64 << 10
	// maxResponseHeaderFields bounds the header field lines of one answer.
	maxResponseHeaderFields = 100
)

// checkHeaderCount refuses an answer with more than maxResponseHeaderFields
// field lines.
func checkHeaderCount(h http.Header) error {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	if n > maxResponseHeaderFields {
		return errHeaderTooLarge
	}
	return nil
}

// TimedOut says err is a timeout: the context's deadline, or a network
// operation's.
func TimedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// DialFailed says err came of a connection that could not be made (a
// dial, a name lookup, a refused connection): that request was not sent.
func DialFailed(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// Backend answer buffers are pooled in two parts, so that a call waiting
// on its backend holds no buffer: bodyPool hands out the empty slice a
// send reads into, readAnswerBody gives it an array from bodyArrays once
// the answer's header has come, and putBody (Report.Release) returns the
// array once the answer is classified (the envelope's data is always a
// copy). The slices move from one pool to the other, so neither allocates
// once warm. Arrays past maxSmallBody go to largeBodyArrays instead, and
// are taken from there only by an answer that says it is that large (its
// Content-Length): a large answer then reads into an array already made,
// without allocating and clearing one the size of the answer on every
// call, and a small answer never holds a large array.
var (
	bodyPool        = sync.Pool{New: func() any { return new([]byte) }}
	bodyArrays      sync.Pool // *[]byte with an array of at most maxSmallBody
	largeBodyArrays sync.Pool // *[]byte with an array of at most maxLargeBody
)

// The bounds of the pooled answer arrays: the largest a small answer's
// array may be, and the largest array kept at all (twice the default
// server.max_response_bytes).
const (
	maxSmallBody = 256 << 10
	maxLargeBody = 2<<20 + 1
)

// readAnswerBody reads an answer's body into r's pooled buffer, within
// limit bytes (boundedio.ReadBody).
func (r *Report) readAnswerBody(body io.Reader, limit, sizeHint int64) {
	buf := bodyPool.Get().(*[]byte)
	arrays := &bodyArrays
	if sizeHint >= maxSmallBody && sizeHint < maxLargeBody && sizeHint <= limit {
		arrays = &largeBodyArrays
	}
	if p, _ := arrays.Get().(*[]byte); p != nil {
		*buf, *p = (*p)[:0], nil
		bodyPool.Put(p)
	} else {
		*buf = make([]byte, 0, 4096)
	}
	r.buf = buf
	r.Body, r.BodyErr = boundedio.ReadBody(body, limit, sizeHint, buf)
}

func putBody(buf *[]byte) {
	switch {
	case buf == nil:
	case cap(*buf) == 0:
		bodyPool.Put(buf)
	case cap(*buf) <= maxSmallBody:
		*buf = (*buf)[:0]
		bodyArrays.Put(buf)
	case cap(*buf) <= maxLargeBody:
		*buf = (*buf)[:0]
		largeBodyArrays.Put(buf)
	}
}
