// Package extproc is toolgate's Envoy external processor: a gRPC
// envoy.service.ext_proc.v3.ExternalProcessor that runs every call on a
// tool's legacy route through the same proxy.Core as the HTTP front, with
// Envoy sending the backend request. It is the only package that imports
// go-control-plane.
//
// One gRPC stream is one HTTP request. The request phase identifies the
// tool by :method and :path (the routes of transparent mode), resolves the
// caller, extracts the arguments (waiting for the buffered body when the
// tool binds body fields) and begins the call (proxy.View.Begin): access,
// validation, idempotency and binding. A call that must not go on is
// answered with an ImmediateResponse carrying the envelope; otherwise the
// request is rewritten to the backend request the contract binds
// (proxy.Call.Backend) and Envoy sends it. The response phase hands the
// backend's answer (or Envoy's own local reply in its place, see
// classify.go) to the call (proxy.Call.Finish or Fail) and replaces the
// answer with the envelope. Statuses, headers and bodies are byte for byte
// what the HTTP front writes for the same call, and the spans and the log
// line are the same as well. The whole stream runs on the one policy
// snapshot (proxy.View) that was current when its request headers came.
//
// Guarantees and limits:
//   - Every call that began ends exactly once: with the answer, with a
//     failure, or, when the stream ends without a response phase (client
//     gone, Envoy's message timeout, a broken stream), abandoned, so a
//     side-effecting call's idempotency key reads as unknown, never stuck
//     in flight.
//   - The tool's timeout is enforced here too: if no complete answer came
//     within it, the call ends as a timeout and Envoy is told to answer the
//     envelope in place of the backend.
//   - The backend request carries what the HTTP front would send (the
//     contract's path, query, body and headers) plus Envoy's own headers
//     (x-envoy-*), tracing context and X-Forwarded-For/-Proto; the
//     client's other headers, the caller header and
//     x-forwarded-client-cert never reach the backend.
//   - Bodies must be buffered (request_body_mode and response_body_mode
//     BUFFERED, or BUFFERED_PARTIAL for requests): the envelope depends on
//     the whole answer. A request body over server.max_request_bytes, or
//     one Envoy could not buffer (its 413), ends as bad_args.
//   - Requests under a server.passthrough prefix go through untouched but
//     for the identity headers, and, when the filter allows mode overrides,
//     skip the response phase.
package extproc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/proxy"
)

// Options are the server's collaborators. Zero values: a discarding logger
// and time.Now.
type Options struct {
	// Logger receives protocol problems (messages out of order, a body
	// mode the processor cannot work with). Calls are logged by the core.
	Logger *slog.Logger
	// Now is the clock of the tool deadline.
	Now func() time.Time
}

// Server is the external processor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	core   *proxy.Core
	logger *slog.Logger
	now    func() time.Time
}

// New returns an external processor serving calls on core.
func New(core *proxy.Core, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Server{core: core, logger: opts.Logger, now: opts.Now}
}

// Register adds the processor's service to a gRPC server, so that callers
// need not import go-control-plane.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	extprocv3.RegisterExternalProcessorServer(g, s)
}

// PassthroughMode is the processing mode override the processor sends for
// a request under a server.passthrough prefix: no request body, no response
// phase. When the filter sets allowed_override_modes, it must list exactly
// this mode.
func PassthroughMode() *extprocfilterv3.ProcessingMode {
	return &extprocfilterv3.ProcessingMode{
		RequestBodyMode:    extprocfilterv3.ProcessingMode_NONE,
		ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP,
		ResponseBodyMode:   extprocfilterv3.ProcessingMode_NONE,
	}
}

// Process serves one HTTP request's stream. Messages are handled one at a
// time in the order Envoy sends them; every answer is sent from this
// goroutine, including the timeout answer when the tool's deadline passes
// first.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	msgs := make(chan *extprocv3.ProcessingRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	fl := &flow{s: s}
	// A call that began and got no answer ends here: the stream is gone.
	defer fl.abandon()
	var timer *time.Timer
	var expired <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case m := <-msgs:
			resp, err := fl.handle(ctx, m)
			if err != nil {
				s.logger.Warn("ext_proc stream broke the protocol", "err", err.Error())
				return status.Error(codes.FailedPrecondition, err.Error())
			}
			if resp != nil {
				if err := stream.Send(resp); err != nil {
					return err
				}
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-expired:
			expired = nil
			if resp := fl.expire(); resp != nil {
				if err := stream.Send(resp); err != nil {
					return err
				}
			}
		case <-ctx.Done():
			return nil
		}
		// The deadline runs while a sent call waits for its answer.
		if fl.waiting() && timer == nil {
			timer = time.NewTimer(max(fl.deadline.Sub(s.now()), 0))
			expired = timer.C
		} else if !fl.waiting() && timer != nil {
			timer.Stop()
			timer, expired = nil, nil
		}
	}
}

// phase is where a flow stands.
type phase int

const (
	phaseRequestHeaders phase = iota // waiting for the request headers
	phaseRequestBody                 // the tool binds body fields: waiting for the buffered body
	phaseSent                        // Envoy is sending the backend request: waiting for the answer
	phaseResponseBody                // the answer's headers came: waiting for its body
	phasePassthrough                 // not a call: everything goes through untouched
	phaseDone                        // answered
)

// flow is one HTTP request going through the processor: the state of its
// ext_proc stream, from the request headers to the answer.
type flow struct {
	s     *Server
	view  proxy.View // the snapshot the request runs on, from its headers on
	phase phase

	// The request.
	header      http.Header // canonical keys, pseudo-headers left out
	names       []string    // the request's header names as Envoy sent them
	escapedPath string
	rawQuery    string
	route       proxy.Route
	tooLarge    bool
	body        []byte

	// The call, once it began.
	call     *proxy.Call
	ended    bool
	deadline time.Time

	// The answer.
	code         int
	respHeader   http.Header
	respNames    []string
	respBody     []byte
	respTooLarge bool // the body went past server.max_response_bytes
	details      string
}

func (fl *flow) waiting() bool {
	return fl.call != nil && !fl.ended && (fl.phase == phaseSent || fl.phase == phaseResponseBody)
}

// handle answers one message from Envoy; nil means no answer is due.
func (fl *flow) handle(ctx context.Context, m *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	switch r := m.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if fl.phase != phaseRequestHeaders {
			return nil, errors.New("request headers twice")
		}
		return fl.requestHeaders(ctx, r.RequestHeaders), nil
	case *extprocv3.ProcessingRequest_RequestBody:
		switch fl.phase {
		case phaseRequestBody:
			return fl.requestBody(ctx, r.RequestBody), nil
		case phaseRequestHeaders:
			return nil, errors.New("request body before request headers")
		case phaseDone:
			return nil, nil
		}
		// The request was decided at its headers (passthrough, or Envoy
		// was not told the body is replaced): it goes on as it is.
		return respond(requestBodyMsg, pass(nil)), nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		// Trailers are not asked for; if a filter sends them, they go on.
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}, nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return fl.responseHeaders(ctx, r.ResponseHeaders, codeDetails(m.Attributes)), nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		return fl.responseBody(r.ResponseBody), nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}, nil
	}
	return nil, errors.New("empty processing request")
}

// requestHeaders starts a flow: passthrough, an unknown route, a call
// decided now, or a call waiting for its body.
func (fl *flow) requestHeaders(ctx context.Context, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	fl.view = fl.s.core.View()
	pseudo := fl.readRequestHeaders(h.GetHeaders())
	method := pseudo[":method"]
	fl.escapedPath, fl.rawQuery, _ = strings.Cut(pseudo[":path"], "?")
	if p, ok := fl.view.Passthrough(fl.escapedPath); ok {
		fl.phase = phasePassthrough
		return fl.passthrough(ctx, p)
	}
	route, ok := fl.view.MatchRoute(method, fl.escapedPath)
	if !ok {
		// No tool's route: a not_found envelope, as the HTTP front
		// answers an unknown route.
		path, err := url.PathUnescape(fl.escapedPath)
		if err != nil {
			path = fl.escapedPath
		}
		return fl.immediate(fl.view.NoRoute(ctx, fl.request(""), method, path))
	}
	fl.route = route
	// A declared length over the limit is refused without reading, as
	// the HTTP front does.
	if n, err := strconv.ParseInt(fl.header.Get("Content-Length"), 10, 64); err == nil && n > fl.view.Policy().Server.MaxRequestBytes {
		fl.tooLarge = true
		return fl.decide(ctx, nil, headersStage(h.EndOfStream))
	}
	if route.HasBody && !h.EndOfStream {
		fl.phase = phaseRequestBody
		// Envoy holds the headers while it buffers the body; they are
		// rewritten with the body's answer.
		return respond(requestHeadersMsg, pass(nil))
	}
	return fl.decide(ctx, nil, headersStage(h.EndOfStream))
}

// requestBody decides a call of a tool with body fields.
func (fl *flow) requestBody(ctx context.Context, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if !fl.tooLarge {
		if _, err := boundedio.AppendBody(b.GetBody(), fl.view.Policy().Server.MaxRequestBytes, &fl.body); err != nil {
			fl.tooLarge, fl.body = true, nil
		}
	}
	if !b.GetEndOfStream() {
		// Only BUFFERED_PARTIAL sends part of a body, and only once Envoy's
		// buffer is full: the body is larger than Envoy can hold, so it is
		// too large for the call as well.
		fl.tooLarge, fl.body = true, nil
	}
	return fl.decide(ctx, fl.body, bodyStage)
}

// stage is the message a request decision answers.
type stage int

const (
	headersWithBody stage = iota // the request headers; a body follows
	headersOnly                  // the request headers; no body follows
	bodyStage                    // the buffered request body
)

func headersStage(endOfStream bool) stage {
	if endOfStream {
		return headersOnly
	}
	return headersWithBody
}

// decide runs the request half of the call and answers: the envelope, or
// the rewritten request.
func (fl *flow) decide(ctx context.Context, body []byte, st stage) *extprocv3.ProcessingResponse {
	req := fl.request(fl.route.Tool)
	req.BodyTooLarge = fl.tooLarge
	if !fl.tooLarge {
		args, err := fl.route.Args(fl.rawQuery, fl.header, body)
		if err != nil {
			req.Invalid = err
		}
		req.Args = args
	}
	start := fl.s.now()
	call, res := fl.view.Begin(ctx, req)
	if res != nil {
		return fl.immediate(res)
	}
	fl.call, fl.deadline, fl.phase = call, start.Add(call.Timeout()), phaseSent
	return fl.rewrite(call.Backend(), st)
}

// request is the call as the core takes it, from the request headers.
func (fl *flow) request(tool string) *proxy.Request {
	return &proxy.Request{
		Tool:           tool,
		Caller:         fl.view.Identify(fl.header),
		CallID:         fl.header.Get("X-Request-Id"),
		IdempotencyKey: fl.header.Get("Idempotency-Key"),
		Front:          "extproc",
		TraceParent:    fl.header.Get("Traceparent"),
		TraceState:     fl.header.Get("Tracestate"),
		Header:         fl.header,
	}
}

// keptRequestHeaders are client headers the backend request keeps besides
// the ones the contract sets: hop context that belongs to the mesh, not to
// the caller.
var keptRequestHeaders = map[string]bool{
	"host": true, "x-request-id": true, "x-forwarded-for": true, "x-forwarded-proto": true,
	"traceparent": true, "tracestate": true, "baggage": true, "b3": true, "x-ot-span-context": true,
	"x-cloud-trace-context": true, "grpc-trace-bin": true, "sw8": true,
}

func keepRequestHeader(name string) bool {
	return strings.HasPrefix(name, ":") || strings.HasPrefix(name, "x-envoy-") ||
		strings.HasPrefix(name, "x-b3-") || keptRequestHeaders[name]
}

// rewrite turns the request Envoy holds into the backend request b.
func (fl *flow) rewrite(b proxy.BackendRequest, st stage) *extprocv3.ProcessingResponse {
	mut := &extprocv3.HeaderMutation{}
	path := b.Path
	if b.RawQuery != "" {
		path += "?" + b.RawQuery
	}
	setHeader(mut, ":path", path)
	// The route matched the method, so it is the contract's already;
	// :authority stays the one Envoy routes on to the cluster.
	for _, name := range fl.names {
		if keepRequestHeader(name) {
			continue
		}
		if _, set := b.Header[http.CanonicalHeaderKey(name)]; set && name != "content-length" {
			continue // overwritten below
		}
		mut.RemoveHeaders = append(mut.RemoveHeaders, name)
	}
	setHeaders(mut, b.Header)
	switch {
	case st == bodyStage:
		// Envoy checks a Content-Length against the replaced body; it is
		// set to exactly the body sent.
		setHeader(mut, "content-length", strconv.Itoa(len(b.Body)))
		return respond(requestBodyMsg, withBody(mut, b.Body))
	case st == headersOnly && b.Body == nil:
		return respond(requestHeadersMsg, pass(mut))
	default:
		// The body is decided at the headers: the contract's body replaces
		// whatever the client sends, or adds one where it sent none.
		return respond(requestHeadersMsg, replaceMessage(mut, b.Body))
	}
}

// passthrough lets a request under a passthrough prefix through as
// transparent mode forwards it (proxy.Passthrough: minus the identity
// headers, plus the upstream's static headers), and skips the response
// phase.
func (fl *flow) passthrough(ctx context.Context, p proxy.Passthrough) *extprocv3.ProcessingResponse {
	add, rawQuery, err := p.Decorate(ctx, fl.rawQuery)
	if err != nil {
		// Without its credential the request does not go on: 502, as
		// transparent mode answers.
		fl.phase = phaseDone
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadGateway}, Details: "toolgate_upstream_auth"},
		}}
	}
	mut := &extprocv3.HeaderMutation{}
	for _, name := range fl.names {
		if p.Strips(name) {
			mut.RemoveHeaders = append(mut.RemoveHeaders, name)
		}
	}
	setHeaders(mut, add)
	if rawQuery != fl.rawQuery {
		setHeader(mut, ":path", fl.escapedPath+"?"+rawQuery)
	}
	resp := respond(requestHeadersMsg, pass(mut))
	resp.ModeOverride = PassthroughMode()
	return resp
}

// responseHeaders takes the answer's headers; the envelope waits for its
// body unless there is none.
func (fl *flow) responseHeaders(ctx context.Context, h *extprocv3.HttpHeaders, details string) *extprocv3.ProcessingResponse {
	switch fl.phase {
	case phasePassthrough:
		return respond(responseHeadersMsg, pass(nil))
	case phaseRequestBody:
		return fl.localReplyBeforeCall(ctx, h)
	case phaseSent:
	default:
		return nil // answered already; Envoy ignores the stream now
	}
	fl.respHeader = http.Header{}
	pseudo := readHeaders(h.GetHeaders(), fl.respHeader, &fl.respNames)
	fl.code, _ = strconv.Atoi(pseudo[":status"])
	fl.details = details
	if h.GetEndOfStream() {
		return fl.finish(headersOnly)
	}
	fl.phase = phaseResponseBody
	// Envoy holds the headers while it buffers the body; they are
	// replaced with the body's answer.
	return respond(responseHeadersMsg, pass(nil))
}

// localReplyBeforeCall answers an answer that came while the request body
// was still buffering, before the call began: Envoy's own reply. Its 413,
// for a body over the buffer limit, is the call's bad_args, as for any body
// over max_request_bytes; anything else (the client's request timeout)
// goes through as it is.
func (fl *flow) localReplyBeforeCall(ctx context.Context, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	pseudo := readHeaders(h.GetHeaders(), nil, &fl.respNames)
	if pseudo[":status"] != strconv.Itoa(http.StatusRequestEntityTooLarge) {
		fl.phase = phasePassthrough
		return respond(responseHeadersMsg, pass(nil))
	}
	fl.tooLarge = true
	req := fl.request(fl.route.Tool)
	req.BodyTooLarge = true
	call, res := fl.view.Begin(ctx, req)
	if call != nil {
		// Begin refuses a body it is told is too large; were it ever to
		// accept one, the call still ends here, unsent.
		res = call.Fail(contracts.FailConnect, false)
	}
	return fl.replace(res, headersOnly)
}

// responseBody takes the answer's body and answers the envelope.
func (fl *flow) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	switch fl.phase {
	case phasePassthrough:
		return respond(responseBodyMsg, pass(nil))
	case phaseResponseBody:
	default:
		return nil
	}
	// Past max_response_bytes the size is all that matters.
	if !fl.respTooLarge {
		if _, err := boundedio.AppendBody(b.GetBody(), fl.view.Policy().Server.MaxResponseBytes, &fl.respBody); err != nil {
			fl.respTooLarge, fl.respBody = true, nil
		}
	}
	if !b.GetEndOfStream() {
		// A streamed chunk (the body is not buffered): kept for the
		// envelope, dropped from the answer.
		return respond(responseBodyMsg, withBody(nil, nil))
	}
	return fl.finish(bodyStage)
}

// finish classifies the answer, completes the call and answers the
// envelope in its place.
func (fl *flow) finish(st stage) *extprocv3.ProcessingResponse {
	// The body is read as it came: the request asked for no content
	// encoding, as the HTTP front does not, and an answer encoded all the
	// same is unreadable behind either front.
	body := fl.respBody
	var res *proxy.Result
	if r := classifyReply(fl.code, fl.respHeader, body, fl.details); r.local {
		res = fl.call.Fail(r.failure, r.written)
	} else {
		res = fl.call.Finish(proxy.Answer{Code: fl.code, Header: fl.respHeader, Body: body, BodyTooLarge: fl.respTooLarge})
	}
	fl.ended = true
	return fl.replace(res, st)
}

// expire ends a sent call whose answer did not come within the tool's
// timeout, and tells Envoy to answer the envelope in place of the backend.
func (fl *flow) expire() *extprocv3.ProcessingResponse {
	if !fl.waiting() {
		return nil
	}
	fl.ended = true
	return fl.immediate(fl.call.Fail(contracts.FailDeadline, true))
}

// abandon ends a call whose stream ended before its answer.
func (fl *flow) abandon() {
	if fl.call != nil && !fl.ended {
		fl.ended = true
		fl.call.Abandon()
	}
}

// immediate answers the envelope without (or instead of) the backend.
func (fl *flow) immediate(res *proxy.Result) *extprocv3.ProcessingResponse {
	fl.phase = phaseDone
	r := res.Render()
	mut := &extprocv3.HeaderMutation{}
	r.Header.Del("Content-Length") // Envoy sets it for the body it sends
	setHeaders(mut, r.Header)
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.Code)},
			Headers: mut,
			Body:    r.Body,
			Details: "toolgate_" + string(res.Envelope.Status),
		},
	}}
}

// replace answers the response message with the envelope in place of the
// answer: its status and headers, none of the backend's (Envoy's own
// x-envoy-* stay), and its body.
func (fl *flow) replace(res *proxy.Result, st stage) *extprocv3.ProcessingResponse {
	fl.phase = phaseDone
	r := res.Render()
	mut := &extprocv3.HeaderMutation{}
	setHeader(mut, ":status", strconv.Itoa(r.Code))
	for _, name := range fl.respNames {
		if strings.HasPrefix(name, ":") || strings.HasPrefix(name, "x-envoy-") {
			continue
		}
		if _, set := r.Header[http.CanonicalHeaderKey(name)]; set {
			continue
		}
		mut.RemoveHeaders = append(mut.RemoveHeaders, name)
	}
	setHeaders(mut, r.Header)
	if st == bodyStage {
		return respond(responseBodyMsg, withBody(mut, r.Body))
	}
	// Answered at the headers: the envelope is added in place of the body
	// (Envoy drops the Content-Length when it replaces a message).
	return respond(responseHeadersMsg, replaceMessage(mut, r.Body))
}

// readRequestHeaders keeps the request's headers and returns its
// pseudo-headers.
func (fl *flow) readRequestHeaders(m *corev3.HeaderMap) map[string]string {
	fl.header = http.Header{}
	return readHeaders(m, fl.header, &fl.names)
}

// readHeaders splits Envoy's header map into pseudo-headers (returned) and
// regular headers (added to h with canonical keys, names listed lower case
// once each). A value comes in raw_value, or in value from older Envoys.
func readHeaders(m *corev3.HeaderMap, h http.Header, names *[]string) map[string]string {
	pseudo := map[string]string{}
	seen := map[string]bool{}
	for _, hv := range m.GetHeaders() {
		key := strings.ToLower(hv.GetKey())
		val := hv.GetValue()
		if raw := hv.GetRawValue(); len(raw) > 0 {
			val = string(raw)
		}
		if strings.HasPrefix(key, ":") {
			pseudo[key] = val
			continue
		}
		if h != nil {
			h.Add(key, val)
		}
		if names != nil && !seen[key] {
			seen[key] = true
			*names = append(*names, key)
		}
	}
	return pseudo
}

// codeDetails returns Envoy's response code details from the response
// attributes, whatever filter name they are keyed by.
func codeDetails(attrs map[string]*structpb.Struct) string {
	for _, st := range attrs {
		if v, ok := st.GetFields()["response.code_details"]; ok {
			return v.GetStringValue()
		}
	}
	return ""
}

// setHeaders replaces the headers of h, in name order.
func setHeaders(mut *extprocv3.HeaderMutation, h http.Header) {
	for _, name := range slices.Sorted(maps.Keys(h)) {
		setValues(mut, strings.ToLower(name), h[name])
	}
}

// setValues replaces a header with vals: the first overwrites, the others
// append.
func setValues(mut *extprocv3.HeaderMutation, name string, vals []string) {
	for i, v := range vals {
		action := corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		if i == 0 {
			action = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		}
		mut.SetHeaders = append(mut.SetHeaders, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: name, RawValue: []byte(v)},
			AppendAction: action,
		})
	}
}

func setHeader(mut *extprocv3.HeaderMutation, name, value string) {
	setValues(mut, name, []string{value})
}

// message is the kind of message an answer is for.
type message int

const (
	requestHeadersMsg message = iota
	requestBodyMsg
	responseHeadersMsg
	responseBodyMsg
)

// respond wraps cr as the answer to a message of kind msg.
func respond(msg message, cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	switch msg {
	case requestHeadersMsg:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: cr}}}
	case requestBodyMsg:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: cr}}}
	case responseHeadersMsg:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{Response: cr}}}
	default:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: cr}}}
	}
}

// pass lets a message go on with the header changes in mut (nil: none).
func pass(mut *extprocv3.HeaderMutation) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{HeaderMutation: mut}
}

// withBody lets a message go on with its body replaced by body (nil
// clears it).
func withBody(mut *extprocv3.HeaderMutation, body []byte) *extprocv3.CommonResponse {
	cr := pass(mut)
	if body == nil {
		cr.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
	} else {
		cr.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: body}}
	}
	return cr
}

// replaceMessage answers headers with the whole message replaced: a body
// mutation in an answer to headers takes effect only so, and Envoy then
// drops the body that follows and the Content-Length.
func replaceMessage(mut *extprocv3.HeaderMutation, body []byte) *extprocv3.CommonResponse {
	cr := withBody(mut, body)
	cr.Status = extprocv3.CommonResponse_CONTINUE_AND_REPLACE
	return cr
}
