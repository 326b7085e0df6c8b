package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/net/http/httpguts"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// upstream is the runtime of one backend: a pooled transport, a breaker and
// a bulkhead. It outlives policy reloads while its settings stay the same,
// so connections and breaker state are kept.
type upstream struct {
	cfg    *policy.Upstream
	client *http.Client // passthrough routes, and calls to HTTPS backends
	direct *h1Client    // calls to plain-HTTP backends; nil for HTTPS
	// traced says client.Transport is net/http's own, whose httptrace
	// events say exactly when a connection was made and a request
	// written. Any other round tripper (a test's, an embedder's) may
	// report neither, so for it only a dial error proves nothing was sent.
	traced  bool
	breaker *policy.Breaker
	bulk    *bulkhead
	codes   upstreamCodes
	auth    *upstreamAuth // nil: no credential
	// headerSecrets are the needles of the ${VAR} values in the static
	// headers; identity are the forward_headers that carry credentials
	// (redact.go).
	headerSecrets []needle
	identity      []string
	identityMu    sync.Mutex
	identityCache *simplelru.LRU[string, *matcher] // by header name and value; nil without identity
}

// upstreamCodes caches metric children for the codes every upstream sees,
// so recording an attempt does not hash label values.
type upstreamCodes struct {
	byCode   map[int]counter
	timeout  counter
	reset    counter
	connect  counter
	circuit  counter
	auth     counter
	other    func(string) counter
	duration observer
}

type counter interface{ Inc() }
type observer interface{ Observe(float64) }

func newUpstream(cfg *policy.Upstream, m *Metrics, prev *upstream, newRT func(*policy.Upstream) http.RoundTripper, env runtimeEnv) *upstream {
	u := &upstream{cfg: cfg}
	for _, v := range cfg.HeaderSecrets {
		u.headerSecrets = appendNeedles(u.headerSecrets, v)
	}
	for _, name := range cfg.ForwardHeaders {
		if identityHeader(name) {
			u.identity = append(u.identity, name)
		}
	}
	if len(u.identity) > 0 {
		u.identityCache, _ = simplelru.NewLRU[string, *matcher](identityCacheSize, nil)
	}
	if prev != nil && sameTransport(prev.cfg, cfg) {
		u.client, u.direct, u.traced = prev.client, prev.direct, prev.traced
	} else {
		if newRT == nil && cfg.URL.Scheme == "http" && peekable {
			u.direct = newH1Client(hostPort(cfg.URL), cfg.MaxConcurrent)
		}
		var rt http.RoundTripper
		if newRT != nil {
			rt = newRT(cfg)
		} else {
			rt = newTransport(cfg, newTLSConfig(cfg.TLS, cfg.URL.Hostname(), env, "upstream "+cfg.Name))
		}
		_, u.traced = rt.(*http.Transport)
		u.client = &http.Client{
			Transport: rt,
			// Redirects are answers to classify, not to follow: following
			// one could resend a side effect somewhere else.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if prev != nil && prev.cfg.Auth.Equal(cfg.Auth) {
		u.auth = prev.auth // a cached token survives the reload
	} else {
		u.auth = newUpstreamAuth(cfg.Name, cfg.Auth, env)
	}
	if prev != nil && prev.cfg.Breaker == cfg.Breaker {
		u.breaker = prev.breaker
	} else {
		gauge := m.CircuitState.WithLabelValues(cfg.Name)
		u.breaker = policy.NewBreaker(cfg.Name, cfg.Breaker, policy.BreakerOptions{
			OnStateChange: func(_ string, to policy.BreakerState) { gauge.Set(float64(to)) },
		})
		gauge.Set(float64(u.breaker.State()))
	}
	var prevBulk *bulkhead
	if prev != nil {
		prevBulk = prev.bulk
	}
	u.bulk = prevBulk.resized(cfg.MaxConcurrent, cfg.MaxConcurrentPerCaller)
	name := cfg.Name
	u.codes = upstreamCodes{
		byCode:   map[int]counter{},
		timeout:  m.UpstreamRequests.WithLabelValues(name, "timeout"),
		reset:    m.UpstreamRequests.WithLabelValues(name, "reset"),
		connect:  m.UpstreamRequests.WithLabelValues(name, "connect"),
		circuit:  m.UpstreamRequests.WithLabelValues(name, "circuit_open"),
		auth:     m.UpstreamRequests.WithLabelValues(name, string(contracts.ReasonAuth)),
		other:    func(code string) counter { return m.UpstreamRequests.WithLabelValues(name, code) },
		duration: m.UpstreamDuration.WithLabelValues(name),
	}
	for _, code := range []int{200, 201, 204, 400, 404, 429, 500, 502, 503, 504} {
		u.codes.byCode[code] = m.UpstreamRequests.WithLabelValues(name, strconv.Itoa(code))
	}
	return u
}

func (c *upstreamCodes) count(code int) {
	if ctr, ok := c.byCode[code]; ok {
		ctr.Inc()
		return
	}
	c.other(strconv.Itoa(code)).Inc()
}

// hostPort is a plain-HTTP URL's address to dial.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// closeIdle closes the upstream's idle connections.
func (u *upstream) closeIdle() {
	u.client.CloseIdleConnections()
	if u.direct != nil {
		u.direct.CloseIdleConnections()
	}
	u.auth.closeIdle()
}

func sameTransport(a, b *policy.Upstream) bool {
	return a.URL.String() == b.URL.String() && a.MaxConcurrent == b.MaxConcurrent && a.TLS.Equal(b.TLS)
}

// newTransport is an upstream's pooled transport; tlsConfig is nil for
// Go's defaults.
func newTransport(cfg *policy.Upstream, tlsConfig *tls.Config) *http.Transport {
	return &http.Transport{
		Proxy: nil, // a sidecar talks to its backend directly, never through HTTP_PROXY
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          cfg.MaxConcurrent,
		MaxIdleConnsPerHost:   cfg.MaxConcurrent,
		MaxConnsPerHost:       0,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		TLSClientConfig:       tlsConfig,
		ExpectContinueTimeout: 0,
		ForceAttemptHTTP2:     cfg.URL.Scheme == "https",
		DisableCompression:    true, // bodies are bounded by max_response_bytes as sent
		ResponseHeaderTimeout: 0,    // the call's deadline bounds everything
		// HTTP/1 and HTTP/2 alike; the number of fields is checked on the
		// answer (checkHeader).
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
}

// send performs one attempt of toolgate's own send. It never returns an
// error: every failure is classified into the attempt's outcome
// (classify.go).
//
// A request written whole goes out a second time within the attempt (a
// reused connection that closed before any answer) only when acting twice
// is harmless: the tool is read-only, or the backend dedupes on the key
// forwarded to it. Whatever the HTTP method: a side-effecting tool bound to
// GET acts as surely as one bound to POST.
func (u *upstream) send(ctx context.Context, req *http.Request, maxBody int64, sideEffect, dedupes bool, now func() time.Time, a *attempt) {
	cred, ok := u.authorize(ctx, req, a)
	if !ok {
		return
	}
	start := time.Now()
	resend := !sideEffect || dedupes
	buf := bodyPool.Get().(*[]byte)
	var ex exchange
	if u.direct != nil {
		u.direct.exchange(ctx, req, maxBody, buf, resend, &ex)
	} else {
		u.roundTrip(ctx, req, maxBody, buf, resend, &ex)
	}
	u.codes.duration.Observe(time.Since(start).Seconds())
	if ex.err != nil {
		putBody(buf)
		u.failed(ctx, &ex, sideEffect, dedupes, a)
		return
	}
	u.auth.answered(cred, ex.resp.StatusCode)
	ans := answer{code: ex.resp.StatusCode, header: ex.resp.Header, body: ex.body, bodyErr: ex.readErr, writes: ex.writes}
	u.answered(ctx, &ans, sideEffect, dedupes, now, a)
	a.buf = buf
}

// roundTrip sends req through the upstream's http.RoundTripper: HTTPS
// backends, or a transport a test or an embedder set. resend is as for
// h1Client.exchange; so is ex.
func (u *upstream) roundTrip(ctx context.Context, req *http.Request, maxBody int64, buf *[]byte, resend bool, ex *exchange) {
	if err := validRequest(req); err != nil {
		*ex = exchange{err: err}
		return
	}
	if !resend {
		noReplay(req)
	}
	if !u.traced {
		*ex = untracedRoundTrip(u.client.Transport, req.WithContext(ctx), maxBody, buf)
		return
	}
	// net/http resends a written request by itself when a reused
	// connection breaks before the answer, if the request is replayable
	// (noReplay says when it is not); writes counts every whole write, so
	// a resend that does happen is seen.
	var gotConn atomic.Bool
	var writes atomic.Int32
	trace := &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				writes.Add(1)
			}
		},
	}
	req = req.WithContext(httptrace.WithClientTrace(ctx, trace))
	// The transport is called directly: no redirect is ever followed (an
	// answer to classify, not to chase), so http.Client would add nothing
	// but allocations.
	resp, err := u.client.Transport.RoundTrip(req)
	*ex = readRoundTrip(resp, err, maxBody, buf)
	ex.gotConn, ex.writes = gotConn.Load(), int(writes.Load())
}

// untracedRoundTrip sends req through a round tripper that may report
// nothing of its connections and writes: only a dial error proves that
// nothing was sent, so any other failure counts as after a write.
func untracedRoundTrip(rt http.RoundTripper, req *http.Request, maxBody int64, buf *[]byte) exchange {
	resp, err := rt.RoundTrip(req)
	ex := readRoundTrip(resp, err, maxBody, buf)
	if err == nil || !isDialError(err) {
		ex.gotConn, ex.writes = true, 1
	}
	return ex
}

// readRoundTrip reads what a round tripper returned: the body, within
// maxBody, of an answer whose header is within bounds.
func readRoundTrip(resp *http.Response, err error, maxBody int64, buf *[]byte) exchange {
	if err != nil {
		return exchange{err: err}
	}
	if err := checkHeader(resp.Header); err != nil {
		resp.Body.Close()
		return exchange{err: err}
	}
	ex := exchange{resp: resp}
	ex.body, ex.readErr = readAnswerBody(resp.Body, maxBody, resp.ContentLength, buf)
	resp.Body.Close()
	return ex
}

// checkHeader refuses an answer whose header is over the bounds. The
// plain-HTTP client and net/http's transport bound the bytes as they read;
// a round tripper toolgate did not make is held to the same bounds here.
func checkHeader(h http.Header) error {
	if err := checkHeaderCount(h); err != nil {
		return err
	}
	size := 0
	for k, vs := range h {
		for _, v := range vs {
			size += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	if size > maxResponseHeaderBytes {
		return errHeaderTooLarge
	}
	return nil
}

// errInvalidRequest is a backend request net/http refuses to write before
// it dials (a header value with a line break, from a value toolgate
// forwards). The fault is toolgate's, the request never left, and the same
// call would fail the same way.
var errInvalidRequest = errors.New("invalid backend request")

// validRequest applies net/http's checks on header names and values, so a
// request it would refuse is known as toolgate's fault rather than taken
// for a failure to connect.
func validRequest(req *http.Request) error {
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("%w: header name %q", errInvalidRequest, k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				// The value is not repeated: it may be a secret.
				return fmt.Errorf("%w: value of header %s", errInvalidRequest, k)
			}
		}
	}
	return nil
}

// noReplay makes req one net/http's transports never send twice by
// themselves. After a reused connection breaks, HTTP/1 resends a request
// it deems replayable (Request.isReplayable: a GET, HEAD, OPTIONS or
// TRACE, or one with an Idempotency-Key or X-Idempotency-Key header,
// whose body it can rewind), and HTTP/2 resends after some stream errors
// any request whose body it can rewind. A body without GetBody cannot be
// rewound, so neither resends it. A request without a body gets an empty
// one when net/http would otherwise deem it replayable: for GET, HEAD and
// OPTIONS net/http probes the body, finds it empty and writes it as if
// there were none (no Content-Length, no chunking); HTTP/2 ends the stream
// with an empty DATA frame.
func noReplay(req *http.Request) {
	req.GetBody = nil
	if req.Body != nil && req.Body != http.NoBody {
		return
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, "":
	default:
		_, key := req.Header["Idempotency-Key"]
		_, xkey := req.Header["X-Idempotency-Key"]
		if !key && !xkey {
			return // not replayable: it keeps no body at all
		}
	}
	req.Body = emptyBody{}
}

// emptyBody is a request body of no bytes that net/http cannot rewind.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// transportFailure maps a transport error to a failure class. Each branch
// says why.
func transportFailure(ctx context.Context, err error, gotConn bool) contracts.Failure {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		// The agent hung up: not the backend's fault, not a breaker failure.
		return contracts.FailCanceled
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		// Our deadline passed, whatever the transport was doing.
		return contracts.FailDeadline
	case isTLSTrust(err):
		// A certificate we do not trust is a configuration fault.
		return contracts.FailTLS
	case isDialError(err) || !gotConn:
		// No connection was made, so nothing was sent.
		return contracts.FailConnect
	default:
		// The connection broke after it was made: reset, EOF, malformed answer.
		return contracts.FailReset
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isDialError(err error) bool {
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

func isTLSTrust(err error) bool {
	var (
		unknownAuth x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		verify      *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownAuth) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify)
}

// maxRetryAfter bounds a backend's Retry-After, whichever form it takes:
// a day is longer than any agent will wait, and far longer waits (or a
// date centuries away) are a backend's mistake, not advice.
const maxRetryAfter = 24 * time.Hour

// retryAfter parses a Retry-After header (seconds or an HTTP date),
// clamped to maxRetryAfter.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
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
