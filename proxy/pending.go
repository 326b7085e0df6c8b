package proxy

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/toolgate/toolgate/contracts"
)

// Pending is a call whose backend request someone else sends: Envoy, when
// toolgate runs as an external processor. Begin runs the request half of
// the pipeline; the adapter sends what Backend describes and hands the
// answer to Finish (or a transport failure to Fail). The envelope, metrics,
// log line and idempotency record come from the same code as any other call.
type Pending struct {
	c      *Core
	cl     *call
	ctx    context.Context
	cancel context.CancelFunc
	bound  contracts.Bound

	once   sync.Once
	result *Result
}

// Begin runs access, validation, idempotency and binding for req. It
// returns either a Pending to send, or the Result that answers the call
// without sending (a rejection, a replay).
func (c *Core) Begin(ctx context.Context, req *Request) (*Pending, *Result) {
	st := c.state.Load()
	cl := &call{st: st, req: req, start: c.now(), callID: callID(req.CallID)}
	cl.caller = st.snap.Access.CallerLabel(req.Caller)
	cl.tool = st.tools[req.Tool]
	if cl.tool == nil {
		return nil, c.finish(ctx, cl, contracts.Reject(contracts.ReasonUnknownTool))
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cl.tool.contract.Timeout+leaseMargin)
	bound, o, ok := c.begin(ctx, cl)
	if !ok {
		defer cancel()
		return nil, c.end(ctx, cl, o)
	}
	return &Pending{c: c, cl: cl, ctx: ctx, cancel: cancel, bound: bound}, nil
}

// end finishes a call: the envelope, then the idempotency record and the
// budget refund.
func (c *Core) end(ctx context.Context, cl *call, o contracts.Outcome) *Result {
	res := c.finish(ctx, cl, o)
	if cl.claim != nil {
		c.settle(ctx, cl, res, res.Envelope.AppendJSON(nil))
	}
	c.refund(ctx, cl)
	return res
}

// BackendRequest is the request a Pending call sends.
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

// Backend describes the backend request as the contract binds it.
func (p *Pending) Backend() BackendRequest {
	t := p.cl.tool
	h := t.backendHeader(p.cl, p.bound, 0)
	return BackendRequest{
		Upstream:  t.contract.Upstream,
		Method:    t.contract.Binding.Method(),
		Path:      t.prefix + p.bound.Path,
		RawQuery:  p.bound.Query,
		Authority: t.baseURL.Host,
		Header:    h,
		Body:      p.bound.Body,
	}
}

// Timeout is the tool's deadline, for the adapter to enforce on the send.
func (p *Pending) Timeout() time.Duration { return p.cl.tool.contract.Timeout }

// Tool is the contract of the pending call.
func (p *Pending) Tool() *contracts.Contract { return p.cl.tool.contract }

// Answer is the backend's answer to a call someone else sent.
type Answer struct {
	Code   int
	Header http.Header
	// Body is the answer's body, read with ReadBody (or AppendBody)
	// within server.max_response_bytes.
	Body []byte
	// BodyTooLarge says the body went past server.max_response_bytes;
	// Body is then not the answer's.
	BodyTooLarge bool
}

// Finish classifies the backend's answer. Only the first of Finish, Fail
// and Abandon counts; later calls return the same result.
func (p *Pending) Finish(ans Answer) *Result {
	p.once.Do(func() {
		cl := p.cl
		t := cl.tool
		ct := t.contract
		code, header, body := ans.Code, ans.Header, ans.Body
		cl.sent = true
		cl.attempts = 1
		cl.upCode = strconv.Itoa(code)
		t.upstream.codes.count(code)
		a := attempt{code: code, header: header, body: body, sent: true}
		success := code >= 200 && code < 300
		if ans.BodyTooLarge || int64(len(body)) > cl.st.snap.Server.MaxResponseBytes {
			if success {
				p.result = p.c.end(p.ctx, cl, contracts.BadResponse(code))
				return
			}
			a.body = nil
		}
		if !success {
			a.outcome = contracts.ClassifyHTTP(code, ct.SideEffect, ct.Idempotency.ForwardHeader != "", retryAfter(header, p.c.now()))
		}
		o, _ := p.c.classify(p.ctx, cl, &a)
		p.result = p.c.end(p.ctx, cl, o)
	})
	p.cancel()
	return p.result
}

// Fail records a call whose backend request failed before an answer: a
// connect failure (nothing sent), a reset or a timeout after the request
// was written.
func (p *Pending) Fail(f contracts.Failure, written bool) *Result {
	p.once.Do(func() {
		cl := p.cl
		ct := cl.tool.contract
		cl.sent = written
		cl.attempts = 1
		o := contracts.ClassifyTransport(f, written, ct.SideEffect, ct.Idempotency.ForwardHeader != "")
		cl.upCode = string(o.Reason)
		switch f {
		case contracts.FailConnect:
			cl.tool.upstream.codes.connect.Inc()
		case contracts.FailDeadline:
			cl.tool.upstream.codes.timeout.Inc()
		default:
			cl.tool.upstream.codes.reset.Inc()
		}
		p.result = p.c.end(p.ctx, cl, o)
	})
	p.cancel()
	return p.result
}

// Abandon ends a call whose answer will never come (the stream ended:
// client gone, proxy timeout). The request may have reached the backend,
// so a side-effecting call's key is kept as unknown, never left in flight.
func (p *Pending) Abandon() *Result {
	return p.Fail(contracts.FailDeadline, true)
}
