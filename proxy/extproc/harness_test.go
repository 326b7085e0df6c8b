package extproc

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testPolicy has a read-only tool with a query binding, one with a path
// placeholder, side-effecting tools with and without a forwarded key, and
// one whose upstream refuses connections. The legacy upstream has a path
// prefix and a static header; /health passes through.
const testPolicy = `
version: 1
server:
  transparent: true
  caller_header: X-Toolgate-Caller
  max_request_bytes: 256
  max_response_bytes: 4096
  observation_max_chars: 400
  passthrough:
    - {prefix: /health, upstream: legacy}
upstreams:
  legacy:
    url: {{legacy}}/base
    timeout: 300ms
    headers: {Authorization: "Bearer s3cret"}
  down:
    url: {{refused}}
    timeout: 300ms
tools:
  search:
    description: Search articles.
    upstream: legacy
    cost: 0.5
    args:
      type: object
      required: [q]
      additionalProperties: false
      properties:
        q: {type: string, minLength: 1}
        limit: {type: integer, minimum: 1, maximum: 20, default: 10}
    request: {method: GET, path: /api/search, query: {q: q, limit: limit}}
    response:
      data: '{"items": body.results, "total": body.total}'
      empty: size(body.results) == 0
  get_doc:
    description: Get a document.
    upstream: legacy
    args: {type: object, required: [id], properties: {id: {type: string}}}
    request: {method: GET, path: "/docs/{id}"}
  send_notification:
    description: Send a notification.
    upstream: legacy
    side_effect: true
    cost: 2
    args:
      type: object
      required: [user_id, text]
      additionalProperties: false
      properties:
        user_id: {type: string, pattern: "^[a-z0-9_-]{1,64}$"}
        text: {type: string, minLength: 1}
    request: {method: POST, path: "/v1/users/{user_id}/notifications", body: {text: text}}
    response:
      data: '{"message_id": body.id}'
  charge:
    description: Charge an amount.
    upstream: legacy
    side_effect: true
    idempotency: {forward_header: Idempotency-Key}
    args: {type: object, required: [amount], properties: {amount: {type: integer}}}
    request: {method: POST, path: /v1/charges, body: {amount: amount}}
  send_down:
    description: Send to a service that is down.
    upstream: down
    side_effect: true
    args: {type: object, required: [user_id], properties: {user_id: {type: string}}}
    request: {method: POST, path: "/v1/down/{user_id}"}
access:
  default: allow
  shared_credentials: [legacy] # the legacy backend's static credential serves anyone
  callers:
    intern: {tools: [search]}
`

// answer is what the backend says, fed to ext_proc as Envoy would and
// served to the HTTP front by a real backend.
type answer struct {
	code   int
	header map[string]string
	body   string
	hang   bool // the HTTP backend never answers
}

// backend serves the current answer and records the last request.
type backend struct {
	mu   sync.Mutex
	ans  *answer
	last *recordedRequest
}

type recordedRequest struct {
	method string
	uri    string
	header http.Header
	body   string
}

func (b *backend) set(a *answer) {
	b.mu.Lock()
	b.ans = a
	b.mu.Unlock()
}

func (b *backend) lastRequest() *recordedRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.last = &recordedRequest{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: string(body)}
	a := b.ans
	b.mu.Unlock()
	if a == nil {
		w.WriteHeader(http.StatusTeapot)
		return
	}
	if a.hang {
		<-r.Context().Done()
		return
	}
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.code)
	_, _ = io.WriteString(w, a.body)
}

// harness runs one policy twice: behind the HTTP front (a real backend)
// and behind the external processor (answers fed as Envoy would).
type harness struct {
	t       *testing.T
	backend *backend
	front   *httptest.Server // the HTTP front
	ext     *proxy.Core
	extReg  *prometheus.Registry
	client  extprocv3.ExternalProcessorClient
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	b := &backend{}
	legacy := httptest.NewServer(b)
	t.Cleanup(legacy.Close)
	doc := strings.NewReplacer("{{legacy}}", legacy.URL, "{{refused}}", proxytest.RefusedURL(t)).Replace(testPolicy)
	// Two cores on the same policy, so idempotency records and metrics of
	// one front never meet the other's.
	compile := func(reg *prometheus.Registry) *proxy.Core {
		core, err := proxy.NewCore(proxytest.Snapshot(t, doc), proxy.Options{Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(core.Close)
		return core
	}
	h := &harness{t: t, backend: b, extReg: prometheus.NewRegistry()}
	h.front = httptest.NewServer(compile(prometheus.NewRegistry()).Handler())
	t.Cleanup(h.front.Close)
	h.ext = compile(h.extReg)
	h.client = serve(t, New(h.ext, Options{}))
	return h
}

// serve runs srv on a loopback gRPC listener and returns a client of it.
func serve(t *testing.T, srv *Server) extprocv3.ExternalProcessorClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(ln)
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
	})
	return extprocv3.NewExternalProcessorClient(conn)
}

// legacyRequest is an agent's request on a legacy route.
type legacyRequest struct {
	method string
	path   string // with the query
	header map[string]string
	body   string
}

// httpMessage is an HTTP request or response as Envoy holds it.
type httpMessage struct {
	method string
	path   string
	code   int
	header http.Header
	body   []byte
}

// viaFront sends req to the HTTP front (transparent mode) with the backend
// answering ans, and returns the answer.
func (h *harness) viaFront(req legacyRequest, ans *answer) *httpMessage {
	h.t.Helper()
	h.backend.set(ans)
	r, err := http.NewRequest(req.method, h.front.URL+req.path, strings.NewReader(req.body))
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range req.header {
		r.Header.Set(k, v)
	}
	resp, err := h.front.Client().Do(r)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Header.Del("Date")
	return &httpMessage{code: resp.StatusCode, header: resp.Header, body: body}
}

// stream is one ext_proc stream, driven the way Envoy drives it.
type stream struct {
	h      *harness
	s      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

func (h *harness) open() *stream {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := h.client.Process(ctx)
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	h.t.Cleanup(cancel)
	return &stream{h: h, s: s, cancel: cancel}
}

// roundTrip sends one message and returns the processor's answer.
func (s *stream) roundTrip(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	s.h.t.Helper()
	if err := s.s.Send(m); err != nil {
		s.h.t.Fatalf("send: %v", err)
	}
	resp, err := s.s.Recv()
	if err != nil {
		s.h.t.Fatalf("recv: %v", err)
	}
	return resp
}

// close ends the stream as Envoy does when the request is over.
func (s *stream) close() {
	_ = s.s.CloseSend()
	for {
		if _, err := s.s.Recv(); err != nil {
			return
		}
	}
}

// run is the result of one request through ext_proc.
type run struct {
	sent     *httpMessage // the backend request Envoy would send; nil if answered locally
	final    *httpMessage // what the agent gets; nil if the response phase did not run
	requests []*extprocv3.ProcessingResponse
}

// viaExtproc drives req through the processor like Envoy (request headers,
// the buffered body, then the answer's headers and body) and applies the
// processor's answers the way Envoy does. A nil ans stops after the
// request phase, leaving the stream open.
func (h *harness) viaExtproc(req legacyRequest, ans *answer, local bool) (*run, *stream) {
	h.t.Helper()
	s := h.open()
	msg := &httpMessage{method: req.method, path: req.path, header: http.Header{}, body: []byte(req.body)}
	msg.header.Set("User-Agent", "curl/8.5.0")
	msg.header.Set("Accept-Encoding", "gzip")
	msg.header.Set("X-Forwarded-Proto", "http")
	if req.body != "" {
		msg.header.Set("Content-Length", strconv.Itoa(len(req.body)))
	}
	for k, v := range req.header {
		msg.header.Set(k, v)
	}
	out := &run{}
	resp := s.roundTrip(requestHeaders(msg, req.body == ""))
	out.requests = append(out.requests, resp)
	if ir := resp.GetImmediateResponse(); ir != nil {
		out.final = immediateAnswer(ir)
		s.close()
		return out, nil
	}
	cr := resp.GetRequestHeaders().GetResponse()
	applyCommon(msg, cr)
	if req.body != "" && cr.GetStatus() != extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
		resp = s.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: []byte(req.body), EndOfStream: true},
		}})
		out.requests = append(out.requests, resp)
		if ir := resp.GetImmediateResponse(); ir != nil {
			out.final = immediateAnswer(ir)
			s.close()
			return out, nil
		}
		applyCommon(msg, resp.GetRequestBody().GetResponse())
	}
	out.sent = msg
	if ans == nil {
		return out, s
	}
	out.final = s.respond(ans, local)
	s.close()
	return out, nil
}

// respond feeds the answer's headers and body as Envoy would and returns
// what reaches the agent. local marks an answer Envoy made itself (no
// upstream service time).
func (s *stream) respond(ans *answer, local bool) *httpMessage {
	s.h.t.Helper()
	msg := &httpMessage{code: ans.code, header: http.Header{}, body: []byte(ans.body)}
	for k, v := range ans.header {
		msg.header.Set(k, v)
	}
	if !local {
		msg.header.Set("X-Envoy-Upstream-Service-Time", "3")
	}
	if ans.body != "" {
		msg.header.Set("Content-Length", strconv.Itoa(len(ans.body)))
	}
	resp := s.roundTrip(responseHeaders(msg, ans.body == ""))
	if ir := resp.GetImmediateResponse(); ir != nil {
		return immediateAnswer(ir)
	}
	cr := resp.GetResponseHeaders().GetResponse()
	applyCommon(msg, cr)
	if ans.body == "" || cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
		return msg
	}
	resp = s.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(ans.body), EndOfStream: true},
	}})
	if ir := resp.GetImmediateResponse(); ir != nil {
		return immediateAnswer(ir)
	}
	applyCommon(msg, resp.GetResponseBody().GetResponse())
	return msg
}

func headerMap(pseudo [][2]string, h http.Header) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for _, p := range pseudo {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: p[0], RawValue: []byte(p[1])})
	}
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range h[k] {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
	return m
}

func requestHeaders(msg *httpMessage, endOfStream bool) *extprocv3.ProcessingRequest {
	pseudo := [][2]string{{":method", msg.method}, {":path", msg.path}, {":authority", "legacy.local"}, {":scheme", "http"}}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(pseudo, msg.header), EndOfStream: endOfStream},
	}}
}

func responseHeaders(msg *httpMessage, endOfStream bool) *extprocv3.ProcessingRequest {
	pseudo := [][2]string{{":status", strconv.Itoa(msg.code)}}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(pseudo, msg.header), EndOfStream: endOfStream},
	}}
}

// applyCommon applies a processor's answer to the message Envoy holds:
// removals, then sets (pseudo-headers included), then the body, and drops
// the Content-Length when the whole message is replaced.
func applyCommon(msg *httpMessage, cr *extprocv3.CommonResponse) {
	if cr == nil {
		return
	}
	for _, name := range cr.GetHeaderMutation().GetRemoveHeaders() {
		msg.header.Del(name)
	}
	for _, o := range cr.GetHeaderMutation().GetSetHeaders() {
		key, val := o.GetHeader().GetKey(), string(o.GetHeader().GetRawValue())
		switch key {
		case ":path":
			msg.path = val
		case ":method":
			msg.method = val
		case ":status":
			msg.code, _ = strconv.Atoi(val)
		default:
			if o.GetAppendAction() == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
				msg.header.Set(key, val)
			} else {
				msg.header.Add(key, val)
			}
		}
	}
	switch m := cr.GetBodyMutation().GetMutation().(type) {
	case *extprocv3.BodyMutation_Body:
		msg.body = m.Body
	case *extprocv3.BodyMutation_ClearBody:
		msg.body = nil
	}
	if cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
		msg.header.Del("Content-Length")
	}
}

// immediateAnswer is Envoy's local reply for an ImmediateResponse: its
// default headers, then the processor's.
func immediateAnswer(ir *extprocv3.ImmediateResponse) *httpMessage {
	msg := &httpMessage{code: int(ir.GetStatus().GetCode()), header: http.Header{}, body: ir.GetBody()}
	msg.header.Set("Content-Type", "text/plain")
	msg.header.Set("Content-Length", strconv.Itoa(len(ir.GetBody())))
	applyCommon(msg, &extprocv3.CommonResponse{HeaderMutation: ir.GetHeaders()})
	return msg
}

// sameAnswer checks that what the agent gets through Envoy is what the HTTP
// front answers: status, headers (Envoy's own aside) and envelope bytes.
func sameAnswer(t *testing.T, got, want *httpMessage) {
	t.Helper()
	if got == nil {
		t.Fatal("no answer through ext_proc")
	}
	if got.code != want.code {
		t.Errorf("status: ext_proc %d, HTTP front %d", got.code, want.code)
	}
	if !bytes.Equal(got.body, want.body) {
		t.Errorf("envelope differs:\next_proc:   %s\nHTTP front: %s", got.body, want.body)
	}
	gh := got.header.Clone()
	for k := range gh {
		if strings.HasPrefix(k, "X-Envoy-") {
			delete(gh, k)
		}
	}
	wh := want.header.Clone()
	if gh.Get("Content-Length") == "" {
		// Envoy drops the length of a replaced message and frames it
		// itself.
		wh.Del("Content-Length")
	}
	if a, b := headerString(gh), headerString(wh); a != b {
		t.Errorf("headers differ:\next_proc:\n%s\nHTTP front:\n%s", a, b)
	}
}

func headerString(h http.Header) string {
	var b strings.Builder
	_ = h.Write(&b)
	return b.String()
}
