package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/redact"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// This file is the pipeline: begin → send → end, for every front.
//
//	begin (View.begin, below): the call's span, then prepare:
//	  1. access                   access.go        Core.allow
//	  2. arguments and key        args.go          Core.validate (decodes, checks the schema and
//	                                               the key, binds the backend request)
//	  3. idempotency claim        idempotency.go   Core.claimKey (a replay or a refusal ends here)
//	  4. rate and budget          access.go        Core.charge
//	send, by toolgate (View.Call) or by Envoy (View.Begin, then Call.Finish/Fail):
//	  5. breaker and bulkhead     send.go          Core.attempt
//	  6. the backend request      backend.go       Call.backendRequest, the same for both sends
//	  7. send, deadline, retries  send.go          Core.send; upstream.go upstreamRuntime.send:
//	                                               the credential (auth.go), then the
//	                                               upstream's client (package upstream),
//	                                               which reports what happened
//	  8. classify                 classify.go      upstreamRuntime.answered / failed (the
//	                                               report's code, size and read errors), then
//	                              secrets.go       Core.redactAnswer (the call's secrets out of
//	                                               the answer, before anything reads it), then
//	                              classify.go      Core.classify (the contract's rules)
//	end (Call.end, below):
//	  9. finish                   finish.go        Core.finish: the envelope, metrics, log line
//	 10. settle                   idempotency.go   Core.settle: the key's record; access.go
//	                                               Core.refund: the budget of a call that cost nothing
//
// Binding (2) is pure and runs with the arguments, so a value the binding
// refuses is bad_args before a key is claimed or a rate token taken.

// Request is one tool call as a front end decoded it.
type Request struct {
	Tool string
	// Body holds the arguments as a JSON object (HTTP, MCP). When nil,
	// Args is used (transparent routes and ext_proc hand over arguments
	// read from a legacy request).
	Body []byte
	Args map[string]any
	// BodyTooLarge says the front end stopped reading a body over
	// server.max_request_bytes.
	BodyTooLarge bool
	// Invalid says the front end could not extract the arguments (a query
	// value that does not fit its type, in transparent mode).
	Invalid error
	// Caller is the caller's identity as the front end resolved it
	// (View.Identify); empty for none.
	Caller string
	// CallID is the request's X-Request-Id, or empty for a fresh id.
	CallID string
	// IdempotencyKey is the raw Idempotency-Key header, if any.
	IdempotencyKey string
	// Front names the front end for the log line: http, mcp, transparent,
	// extproc.
	Front string
	// LogAttrs are extra fields for the log line (the MCP method).
	LogAttrs []slog.Attr
	// TraceParent and TraceState are the agent's W3C trace context (HTTP
	// headers, or MCP _meta).
	TraceParent string
	TraceState  string
	// Header is the agent's request header; only the names an upstream's
	// forward_headers lists are read from it. Nil for none.
	Header http.Header
}

// Result is a finished call.
type Result struct {
	Envelope contracts.Envelope
	Reason   contracts.Reason
	// RetryLater: nothing happened at the backend and a retry may succeed
	// (503 in mapped mode).
	RetryLater bool
	// always200 is server.http_status always_200 in the call's snapshot:
	// the answer is rendered (render.go) as the call ran, whatever a
	// reload changed since.
	always200 bool
	// unsupportedMedia: the call was refused for its body's media type,
	// a 415 in mapped mode (finish.go).
	unsupportedMedia bool
}

// HTTPStatus is the result's HTTP status in mapped mode, by the reason
// table (contracts.MappedHTTP), or 415 for a body of a media type the
// front does not read.
func (r *Result) HTTPStatus() int {
	if r.unsupportedMedia {
		return http.StatusUnsupportedMediaType
	}
	return contracts.MappedHTTP(r.Reason, r.Envelope.Status, r.RetryLater)
}

// Call is one tool call in flight: begun on a View, sent by toolgate or by
// Envoy, ended once. A front end that sends the backend request itself
// (the Envoy external processor) gets it from View.Begin and ends it with
// exactly one of Finish, Fail or Abandon; later calls return the same
// Result.
type Call struct {
	c    *Core
	st   *state
	tool *tool // nil for an unknown tool
	req  *Request
	// ctx bounds the call: the tool's timeout when toolgate sends, a
	// margin more when Envoy does (begin). callCtx is the same context when
	// the call has a tool (deadline.go); end ends it.
	ctx     context.Context
	callCtx *callContext

	args     map[string]any
	bound    contracts.Bound // the backend request as the binding bound it
	callID   string
	caller   string // the caller's metric label
	start    time.Time
	attempts int
	sent     bool // the backend may have received the request
	upCode   string
	diags    []diagnostic // the contract failed on an answer (finish.go)

	// Idempotency of side-effecting calls.
	forwardKey string              // sent in the contract's forward header
	claim      *claim              // this call owns its key; settle after finish
	replay     *contracts.Envelope // a stored envelope answers this call
	// stored is the envelope JSON of the record that answers this call,
	// until Call.end decodes it into replay (Core.replay).
	stored     []byte
	replayLost bool // the key's earlier call died mid-call

	charge *policy.BudgetCharge // cost taken from the caller's budget

	// out is how the call ended: the send's stages (send, attempt,
	// conclude, classify) write it in place, and end renders it. Kept
	// here rather than returned, so that it takes no room on the stack of
	// the agent's connection, once per stage.
	out contracts.Outcome
	// att is the attempt under way (Core.attempt), and rep what its
	// client reported (package upstream), for the same reason.
	att attempt
	rep upstream.Report
	// ruleIn is the input of the contract's rules while an answer is
	// classified (Core.classify).
	ruleIn contracts.RuleInput

	// cred is the upstream's credential for a request Envoy sends: had
	// before the request is described (Begin), applied in Backend.
	cred upstream.Credential

	// identity finds the credentials this call forwards
	// (Call.identityMatcher), made once identityDone.
	identity     *redact.Matcher
	identityDone bool

	span trace.Span // the call's span, when tracing

	once   sync.Once // Finish, Fail, Abandon: the first ends the call
	result *Result
}

// newCall is a call of req on the view, before any stage ran.
func (v View) newCall(req *Request) *Call {
	cl := &Call{}
	v.initCall(cl, req)
	return cl
}

// initCall starts cl, a zero Call (new, or reset as it went back to its
// pool), as a call of req on the view. It sets the fields one by one:
// assigning a whole Call copies all of its kilobyte, and while the
// collector runs, every pointer among them through a write barrier.
func (v View) initCall(cl *Call, req *Request) {
	cl.c = v.c
	cl.st = v.st
	cl.req = req
	cl.start = v.c.now()
	cl.callID = callID(req.CallID)
	cl.caller = v.st.snap.Access.CallerLabel(req.Caller)
}

// Call runs one tool call through the whole pipeline, toolgate sending the
// backend request itself, and always returns a result.
func (v View) Call(ctx context.Context, req *Request) *Result {
	// The call comes from a pool, not the stack: nothing keeps it past its
	// end, and its kilobyte on the stack of the agent's connection would
	// take that goroutine's stack past 8 KiB, doubling it for every call
	// in flight.
	cl := calls.Get().(*Call)
	res := v.run(ctx, cl, req)
	*cl = Call{}
	calls.Put(cl)
	return res
}

// calls are the pooled Calls of View.Call.
var calls = sync.Pool{New: func() any { return new(Call) }}

func (v View) run(ctx context.Context, cl *Call, req *Request) *Result {
	if v.begin(ctx, cl, req, false) {
		v.c.send(cl.ctx, cl)
	}
	return cl.end()
}

// Call runs one tool call on the current snapshot (View.Call).
func (c *Core) Call(ctx context.Context, req *Request) *Result {
	return c.View().Call(ctx, req)
}

// Begin runs the stages before the send for a call whose backend request
// the caller sends (Call.Backend). It returns either the Call, to be
// ended with Finish, Fail or Abandon, or the Result that answers it without
// sending (a rejection, a replay).
func (v View) Begin(ctx context.Context, req *Request) (*Call, *Result) {
	cl := new(Call)
	if !v.begin(ctx, cl, req, true) {
		return nil, cl.end()
	}
	return cl, nil
}

// begin starts the call's span, then runs the stages before the send
// (prepare). It reports whether the call goes on to the send; when it does
// not (refused, replayed, an unknown tool), cl.out holds the outcome that
// ends it, and the caller ends it (Call.end): on the caller's smaller
// frame, not under begin's, since ending a call writes its log line, whose
// handler is deep (TestACallStaysWithinASmallStack). external
// says Envoy sends: the adapter enforces the tool's timeout, and the
// call's context outlives the gRPC message that began it by a margin, so
// that classifying an answer that came just in time, and settling its key,
// still run.
func (v View) begin(ctx context.Context, cl *Call, req *Request, external bool) bool {
	c := v.c
	v.initCall(cl, req)
	cl.tool = v.st.tools[req.Tool]
	ctx, cl.span = c.tr.startCall(ctx, req)
	cl.ctx = ctx
	if cl.tool == nil {
		cl.out = contracts.Reject(contracts.ReasonUnknownTool)
		return false
	}
	timeout := cl.tool.contract.Timeout
	if external {
		cl.callCtx = newCallContext(context.WithoutCancel(ctx), timeout+leaseMargin)
	} else {
		cl.callCtx = newCallContext(ctx, timeout)
	}
	cl.ctx = cl.callCtx
	if o, ok := c.prepare(cl.ctx, cl); !ok {
		cl.out = o
		return false
	}
	if external {
		// toolgate's own send gets the credential as it sends
		// (upstream.send); Envoy's needs it in the request described.
		cred, o, ok := c.credential(cl.ctx, cl)
		if !ok {
			cl.out = o
			return false
		}
		cl.cred = cred
	}
	return true
}

// prepare runs the stages before the send, in order. Every stage either
// passes or returns the outcome that ends the call without sending; a
// claim already taken is released when the call ends unsent.
func (c *Core) prepare(ctx context.Context, cl *Call) (contracts.Outcome, bool) {
	if o, ok := c.allow(cl); !ok {
		return o, false
	}
	key, o, ok := c.validate(ctx, cl)
	if !ok {
		return o, false
	}
	if cl.tool.contract.SideEffect {
		if o, ok := c.claimKey(ctx, cl, key); !ok {
			return o, false
		}
	}
	return c.charge(ctx, cl)
}

// end ends the call: the envelope, metrics and log line (finish), then the
// idempotency record and the budget refund, then the span.
func (cl *Call) end() *Result {
	c := cl.c
	if cl.stored != nil {
		// The key's record answers the call: decoded here, on the frame
		// of the call's caller, not under the claim's deep one.
		c.replay(cl)
	}
	res := c.finish(cl.ctx, cl, &cl.out)
	if cl.claim != nil {
		c.settle(cl.ctx, cl, res, res.Envelope.AppendJSON(nil))
	}
	c.refund(cl.ctx, cl)
	c.tr.endCall(cl.span, cl, res)
	if cl.callCtx != nil {
		cl.callCtx.end()
	}
	return res
}

// Backend is the call's backend request, for the front end to send
// (backend.go).
func (cl *Call) Backend() BackendRequest {
	b := cl.backendRequest(0)
	b.RawQuery = cl.cred.Apply(b.Header, b.RawQuery)
	return b
}

// Timeout is the tool's deadline, for the front end to enforce on the
// send.
func (cl *Call) Timeout() time.Duration { return cl.tool.contract.Timeout }

// Answer is the backend's answer to a call the front end sent.
type Answer struct {
	Code   int
	Header http.Header
	// Body is the answer's body, read with boundedio.ReadBody (or
	// AppendBody) within server.max_response_bytes.
	Body []byte
	// BodyTooLarge says the body went past server.max_response_bytes;
	// Body is then not the answer's.
	BodyTooLarge bool
}

// Finish ends the call with the backend's answer, classified as toolgate
// classifies the answers it reads itself.
func (cl *Call) Finish(ans Answer) *Result {
	cl.once.Do(func() {
		// What Envoy read, as a client would report it: one whole write.
		r := upstream.Report{Status: ans.Code, Header: ans.Header, Body: ans.Body, Connected: true, Writes: 1}
		if ans.BodyTooLarge || int64(len(ans.Body)) > cl.st.snap.Server.MaxResponseBytes {
			r.Body, r.BodyErr = nil, boundedio.ErrBodyTooLarge
		}
		ct := cl.tool.contract
		cl.tool.auth.Answered(cl.cred, ans.Code)
		var at attempt
		cl.tool.upstream.answered(cl.ctx, &r, ct.SideEffect, ct.Idempotency.ForwardHeader != "", cl.c.now, &at)
		cl.c.redactAnswer(cl, &at)
		cl.attempts = 1
		cl.c.conclude(cl.ctx, cl, &at)
		cl.result = cl.end()
	})
	return cl.result
}

// Fail ends the call whose backend request failed before an answer: a
// connect failure (nothing sent), a reset or a timeout after the request
// was written.
func (cl *Call) Fail(f contracts.Failure, written bool) *Result {
	cl.once.Do(func() {
		ct := cl.tool.contract
		at := cl.tool.upstream.failure(f, written, ct.SideEffect, ct.Idempotency.ForwardHeader != "")
		cl.attempts = 1
		cl.c.conclude(cl.ctx, cl, &at)
		cl.result = cl.end()
	})
	return cl.result
}

// Abandon ends a call whose answer will never come (the stream ended:
// client gone, proxy timeout). The request may have reached the backend,
// so a side-effecting call's key is kept as unknown, never left in flight.
func (cl *Call) Abandon() *Result {
	return cl.Fail(contracts.FailDeadline, true)
}
