package upstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/toolgate/toolgate/policy"
)

// NetHTTPClient sends through an http.RoundTripper: net/http's Transport
// for HTTPS backends (TLS, HTTP/2), for plain HTTP where the fast client
// is off (server.upstream_client: nethttp) or cannot run, or a round
// tripper a test or an embedder set.
//
// net/http's own Transport reports through httptrace exactly when a
// connection was made and a request written. Any other round tripper may
// report neither, so for it only a dial error proves nothing was sent: any
// other failure is reported as after a whole write.
type NetHTTPClient struct {
	rt     http.RoundTripper
	traced bool // rt is an *http.Transport, whose httptrace events are exact
}

// NewNetHTTPClient is a client over rt.
func NewNetHTTPClient(rt http.RoundTripper) *NetHTTPClient {
	_, traced := rt.(*http.Transport)
	return &NetHTTPClient{rt: rt, traced: traced}
}

// New makes the client of an upstream's tool calls over rt (its
// transport, NewTransport): toolgate's HTTP/1.1 client for a plain-HTTP
// backend when fast is true and this system can peek at a socket
// (H1Supported), net/http's over rt otherwise.
func New(cfg *policy.Upstream, rt http.RoundTripper, fast bool) Client {
	if fast && H1Supported && cfg.URL.Scheme == "http" {
		return NewH1Client(H1Options{Addr: hostPort(cfg.URL), MaxIdle: cfg.MaxConcurrent})
	}
	return NewNetHTTPClient(rt)
}

// hostPort is a plain-HTTP URL's address to dial.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// NewTransport is an upstream's pooled transport, with the TLS settings of
// its tls block (Go's defaults without one); env serves the files they
// name. It is the transport of the upstream's passthrough routes and of
// its NetHTTPClient.
func NewTransport(cfg *policy.Upstream, env Env) *http.Transport {
	return newTransport(cfg, newTLSConfig(cfg.TLS, cfg.URL.Hostname(), env, "upstream "+cfg.Name))
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

// Send implements Client. The transport is called directly: no redirect is
// ever followed (an answer to classify, not to chase; following one could
// resend a side effect somewhere else), so http.Client would add nothing
// but allocations.
func (c *NetHTTPClient) Send(ctx context.Context, req *http.Request, o SendOptions, r *Report) {
	*r = Report{}
	if err := validRequest(req); err != nil {
		r.Err = err
		return
	}
	if !o.Resend {
		noReplay(req)
	}
	if !c.traced {
		resp, err := c.rt.RoundTrip(req.WithContext(ctx))
		r.read(resp, err, o.MaxBody)
		if err == nil || !DialFailed(err) {
			r.Connected, r.Writes = true, 1
		}
		return
	}
	// net/http resends a written request by itself when a reused
	// connection breaks before the answer, if the request is replayable
	// (noReplay says when it is not); Writes counts every whole write, so
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
	resp, err := c.rt.RoundTrip(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
	r.read(resp, err, o.MaxBody)
	r.Connected, r.Writes = gotConn.Load(), int(writes.Load())
}

// CloseIdleConnections implements Client, for a round tripper that has
// idle connections.
func (c *NetHTTPClient) CloseIdleConnections() {
	if ci, ok := c.rt.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// read reads what a round tripper returned into r: the body, within
// maxBody, of an answer whose header is within bounds.
func (r *Report) read(resp *http.Response, err error, maxBody int64) {
	if err != nil {
		r.Err = err
		return
	}
	if err := checkHeader(resp.Header); err != nil {
		resp.Body.Close()
		r.Err = err
		return
	}
	r.Status, r.Header = resp.StatusCode, resp.Header
	r.readAnswerBody(resp.Body, maxBody, resp.ContentLength)
	resp.Body.Close()
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

// validRequest applies net/http's checks on header names and values, so a
// request it would refuse is known as toolgate's fault rather than taken
// for a failure to connect.
func validRequest(req *http.Request) error {
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("%w: header name %q", ErrInvalidRequest, k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				// The value is not repeated: it may be a secret.
				return fmt.Errorf("%w: value of header %s", ErrInvalidRequest, k)
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
