package proxy

import (
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/redact"
)

// This file is learning mode's hook (server.learn, package learn): with an
// Options.Observer, every passthrough request and every backend attempt of
// a tool call is shown to it once its answer is over. Without one, the
// only cost is a nil check on each path.

// Observer receives the exchanges toolgate has with backends. Observe runs
// on the request's goroutine after the answer was written to the client
// (passthrough) or read from the backend (tool calls); it must not keep
// the exchange's headers or bodies, whose buffers are reused.
type Observer interface {
	Observe(*learn.Exchange)
}

// observedBodyBytes is how much of each passthrough body is kept for the
// observer without server.learn.max_body_bytes.
const observedBodyBytes = 64 << 10

func observeLimit(snap *policy.Snapshot) int64 {
	if l := snap.Server.Learn; l != nil && l.MaxBodyBytes > 0 {
		return l.MaxBodyBytes
	}
	return observedBodyBytes
}

// servePassthrough forwards a request on a passthrough route, untouched
// and streaming both ways; with an observer, it keeps the first bytes of
// each body as they pass and shows the exchange once it is over.
func (c *Core) servePassthrough(w http.ResponseWriter, r *http.Request, snap *policy.Snapshot, p *passthrough) {
	if c.observer == nil {
		p.proxy.ServeHTTP(w, r)
		return
	}
	limit := observeLimit(snap)
	x := &learn.Exchange{
		Upstream:      p.up.cfg.Name,
		UpstreamURL:   p.up.cfg.URL.String(),
		Method:        r.Method,
		EscapedPath:   r.URL.EscapedPath(),
		RawQuery:      r.URL.RawQuery,
		RequestHeader: r.Header,
	}
	var reqBody *teeBody
	if r.Body != nil && r.Body != http.NoBody {
		reqBody = &teeBody{body: r.Body, limit: limit}
		r = r.WithContext(r.Context()) // a shallow copy: the server's request stays as it was
		r.Body = reqBody
	}
	var respBody *teeBody
	rp := *p.proxy
	rp.ModifyResponse = func(res *http.Response) error {
		if next := p.proxy.ModifyResponse; next != nil {
			if err := next(res); err != nil {
				return err
			}
		}
		x.Status, x.ResponseHeader = res.StatusCode, res.Header
		if res.StatusCode == http.StatusSwitchingProtocols {
			// An upgraded connection's body is the connection itself,
			// which the proxy must get as it is; it is no body to learn.
			return nil
		}
		respBody = &teeBody{body: res.Body, limit: limit}
		res.Body = respBody
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, req *http.Request, err error) {
		if x.Status == 0 {
			x.Failure = failureName(transportFailure(req.Context(), err, true))
		}
		if next := p.proxy.ErrorHandler; next != nil {
			next(w, req, err)
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	start := c.now()
	// Deferred: an answer that breaks off midway aborts the handler with
	// a panic (http.ErrAbortHandler), and is an exchange all the same.
	defer func() {
		x.Latency = c.now().Sub(start)
		if reqBody != nil {
			x.RequestBody, x.RequestTruncated = reqBody.kept()
		}
		if respBody != nil {
			x.ResponseBody, x.ResponseTruncated = respBody.kept()
			if mt := passthroughMatcher(p.up, r.Header); mt != nil {
				var n int
				if x.ResponseBody, n = redact.Bytes(x.ResponseBody, mt, nil); n > 0 {
					c.metrics.SecretsRedacted.WithLabelValues("").Add(float64(n))
				}
			}
		}
		if x.Status == 0 && x.Failure == "" {
			x.Failure = "other"
		}
		c.observer.Observe(x)
	}()
	rp.ServeHTTP(w, r)
}

// failureName names a transport failure as learning mode counts it.
func failureName(f contracts.Failure) string {
	switch f {
	case contracts.FailCanceled:
		return "canceled"
	case contracts.FailDeadline:
		return "timeout"
	case contracts.FailTLS:
		return "tls"
	case contracts.FailConnect:
		return "connect"
	}
	return "reset"
}

// observeStart is when a backend attempt starts, read only with an
// observer.
func (c *Core) observeStart() time.Time {
	if c.observer == nil {
		return time.Time{}
	}
	return c.now()
}

// observeAttempt shows a tool call's backend attempt to the observer: the
// request as bound and the answer as read, before its buffer is reused.
func (c *Core) observeAttempt(cl *Call, req *http.Request, a *attempt, start time.Time) {
	if c.observer == nil {
		return
	}
	t := cl.tool
	// The request as bound may carry the tool's ${VAR} values; the answer
	// was redacted already (Core.redactAnswer).
	reqBody, _ := redact.Bytes(cl.bound.Body, t.redactor().match, nil)
	x := &learn.Exchange{
		Upstream:       t.upstream.cfg.Name,
		UpstreamURL:    t.upstream.cfg.URL.String(),
		Tool:           t.contract.Name,
		Route:          t.contract.Binding.PathTemplate(),
		Method:         req.Method,
		EscapedPath:    cl.bound.Path,
		RawQuery:       cl.bound.Query,
		RequestHeader:  req.Header,
		RequestBody:    reqBody,
		Status:         a.code,
		ResponseHeader: a.header,
		ResponseBody:   a.body,
		Latency:        c.now().Sub(start),
	}
	switch {
	case a.code == 0 && a.outcome.Reason == contracts.ReasonDeadline:
		x.Failure = "timeout"
	case a.code == 0:
		x.Failure = string(a.outcome.Reason)
	case a.body == nil:
		// Oversized, or the answer broke off: not a body to learn from.
		x.ResponseTruncated = true
	}
	c.observer.Observe(x)
}

// teeBody keeps the first limit bytes of a body as it is read. The
// transport may read a request body on its own goroutine, even after the
// exchange is over, hence the lock.
type teeBody struct {
	body  io.ReadCloser
	limit int64
	mu    sync.Mutex
	buf   []byte
	more  bool // bytes past limit were read
	eof   bool
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	t.mu.Lock()
	if n > 0 {
		room := t.limit - int64(len(t.buf))
		if int64(n) > room {
			t.more = true
		}
		if room > 0 {
			t.buf = append(t.buf, p[:min(int64(n), room)]...)
		}
	}
	if err == io.EOF {
		t.eof = true
	}
	t.mu.Unlock()
	return n, err
}

func (t *teeBody) Close() error { return t.body.Close() }

// kept returns a copy of the bytes kept, and whether the body was longer
// or not read to its end.
func (t *teeBody) kept() ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...), t.more || !t.eof
}
