package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
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
	bound := &cl.bound
	h := make(http.Header, len(t.header)+len(bound.Header)+2+extra)
	for k, v := range t.header {
		h[k] = v
	}
	for k, v := range bound.Header {
		h[k] = v
	}
	t.upstream.forward(h, cl.req.Header)
	h["X-Request-Id"] = []string{cl.callID}
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

// httpRequest is the backend request as toolgate's clients send it. The
// context is set once, with the client trace, in upstream.send.
func (t *tool) httpRequest(b BackendRequest) *http.Request {
	// Opaque carries the path exactly as the binding escaped it.
	u := &url.URL{Scheme: t.baseURL.Scheme, Host: b.Authority, Opaque: b.Path, RawQuery: b.RawQuery}
	req := &http.Request{
		Method:     b.Method,
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     b.Header,
		Host:       u.Host,
	}
	if body := b.Body; body != nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return req
}
