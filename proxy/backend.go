package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"sync"
)

// BackendRequest is a call's backend request as the contract binds it, for
// whichever client sends it: toolgate's own (Core.attempt) or Envoy
// (Call.Backend).
type BackendRequest struct {
	Upstream string
	Method   string
	// Path is the escaped path, with the upstream URL's path prefix.
	Path     string
	RawQuery string
	// Authority is the upstream URL's host:port.
	Authority string
	Header    http.Header
	Body      []byte
}

// backendRequest builds the call's backend request. It is the one place
// that decides what a backend request carries, for toolgate's send and
// Envoy's alike: the contract's method, path, query and body as bound; the
// static headers (toolgate's defaults, under the upstream's, under the
// tool's: tool.header); the headers bound for this call; the call id; and
// the forwarded idempotency key. Decoration of the request by its upstream
// (authentication) belongs here as well, after the headers, so that both
// sends carry it. extra is room in the header for what the sender adds
// (the trace context).
//
// The header's value slices are shared, never copied: the senders only
// read them, and Set replaces a slice rather than writing into it.
func (cl *Call) backendRequest(extra int) BackendRequest {
	t := cl.tool
	h := make(http.Header, len(t.header)+len(cl.bound.Header)+2+extra)
	return cl.backendRequestIn(h, make([]string, 1))
}

// backendRequestIn is backendRequest into the empty header h, with id (of
// length 1) for the call id's header value.
func (cl *Call) backendRequestIn(h http.Header, id []string) BackendRequest {
	t := cl.tool
	bound := &cl.bound
	for k, v := range t.header {
		h[k] = v
	}
	for k, v := range bound.Header {
		h[k] = v
	}
	t.upstream.forward(h, cl.req.Header)
	id[0] = cl.callID
	h["X-Request-Id"] = id
	if name := t.contract.Idempotency.ForwardHeader; name != "" && cl.forwardKey != "" {
		h.Set(name, cl.forwardKey)
	}
	// The upstream's credential is added where the request is sent:
	// upstream.send for toolgate's own send, Call.Backend for Envoy's.
	return BackendRequest{
		Upstream:  t.contract.Upstream,
		Method:    t.contract.Binding.Method(),
		Path:      t.prefix + bound.Path,
		RawQuery:  bound.Query,
		Authority: t.baseURL.Host,
		Header:    h,
		Body:      bound.Body,
	}
}

// pooledRequest is a backend request reused by toolgate's own HTTP/1
// client (h1Client), which is done with a request when it returns.
// net/http's transports are not: a request's header may still be written
// after the answer came.
type pooledRequest struct {
	out     outRequest
	h       http.Header
	id      [1]string
	body    []byte
	getBody func() (io.ReadCloser, error) // reads body afresh
}

var requestPool = sync.Pool{New: func() any {
	p := &pooledRequest{h: make(http.Header, 8)}
	p.getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(p.body)), nil }
	return p
}}

// httpRequest is the call's backend request as an http.Request of its
// own, with room for the trace context an attempt's span adds. Out of
// line: the BackendRequest it builds would otherwise take room on the
// stack of every attempt.
//
//go:noinline
func (cl *Call) httpRequest() *http.Request {
	return cl.tool.httpRequest(cl.backendRequest(2))
}

// pooledHTTPRequest is the call's backend request from the pool, for
// toolgate's HTTP/1 client; putRequest gives it back after the attempt.
func (cl *Call) pooledHTTPRequest() (*pooledRequest, *http.Request) {
	p := requestPool.Get().(*pooledRequest)
	b := cl.backendRequestIn(p.h, p.id[:])
	cl.tool.fillRequest(&p.out, b)
	if b.Body != nil {
		p.body = b.Body
		p.out.req.GetBody = p.getBody
	}
	return p, &p.out.req
}

func putRequest(p *pooledRequest) {
	clear(p.h)
	p.id[0] = ""
	p.body = nil
	p.out = outRequest{}
	requestPool.Put(p)
}

// outRequest is a backend request as toolgate's clients send it, with its
// URL and body reader, in one allocation.
type outRequest struct {
	req  http.Request
	url  url.URL
	body nopReader
}

// nopReader is a request body read from memory; closing it does nothing.
type nopReader struct{ bytes.Reader }

func (*nopReader) Close() error { return nil }

// httpRequest is the backend request as toolgate's clients send it. The
// context is set once, with the client trace, in upstream.send.
func (t *tool) httpRequest(b BackendRequest) *http.Request {
	o := new(outRequest)
	t.fillRequest(o, b)
	if body := b.Body; body != nil {
		// A resend reads a reader of its own: the first one may still be
		// in a transport's hands.
		o.req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return &o.req
}

// fillRequest makes o the request b, but for its GetBody.
func (t *tool) fillRequest(o *outRequest, b BackendRequest) {
	// Opaque carries the path exactly as the binding escaped it.
	o.url = url.URL{Scheme: t.baseURL.Scheme, Host: b.Authority, Opaque: b.Path, RawQuery: b.RawQuery}
	o.req = http.Request{
		Method:     b.Method,
		URL:        &o.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     b.Header,
		Host:       b.Authority,
	}
	if body := b.Body; body != nil {
		o.body.Reset(body)
		o.req.Body = &o.body
		o.req.ContentLength = int64(len(body))
	}
}
