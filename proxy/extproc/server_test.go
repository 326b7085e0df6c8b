package extproc

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

const htmlError = "<html>java.lang.IllegalStateException at db-7.internal:5432</html>"

var (
	jsonType = map[string]string{"Content-Type": "application/json", "X-Powered-By": "legacy/1.0"}
	htmlType = map[string]string{"Content-Type": "text/html", "Retry-After": "7"}
)

// TestEnvelopesMatchTheHTTPFront runs each call through the processor the
// way Envoy drives it and through the HTTP front against a backend giving
// the same answer: the agent must get the same status, headers and
// envelope bytes.
func TestEnvelopesMatchTheHTTPFront(t *testing.T) {
	longText := strings.Repeat("x", 300)
	cases := []struct {
		name string
		req  legacyRequest
		// ans is the answer fed through Envoy and served to the HTTP front;
		// nil when the call must be answered before the backend.
		ans *answer
		// local says ans is Envoy's own local reply; httpAns is then what
		// the HTTP front meets instead (nil: nothing answers).
		local      bool
		httpAns    *answer
		wantStatus contracts.Status
		wantCode   int
	}{
		{
			name:       "ok",
			req:        legacyRequest{method: "GET", path: "/api/search?q=go&limit=2"},
			ans:        &answer{code: 200, header: jsonType, body: `{"results":[{"id":1,"title":"Go"}],"total":1}`},
			wantStatus: contracts.StatusOK, wantCode: 200,
		},
		{
			name:       "empty",
			req:        legacyRequest{method: "GET", path: "/api/search?q=nothing"},
			ans:        &answer{code: 200, header: jsonType, body: `{"results":[],"total":0}`},
			wantStatus: contracts.StatusEmpty, wantCode: 200,
		},
		{
			name:       "bad_args from the schema is an immediate response",
			req:        legacyRequest{method: "GET", path: "/api/search?q=go&limit=50"},
			wantStatus: contracts.StatusBadArgs, wantCode: 400,
		},
		{
			name:       "bad_args from a query value of the wrong type is an immediate response",
			req:        legacyRequest{method: "GET", path: "/api/search?q=go&limit=abc"},
			wantStatus: contracts.StatusBadArgs, wantCode: 400,
		},
		{
			name:       "bad_args for a side effect without a key",
			req:        legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: `{"text":"hi"}`},
			wantStatus: contracts.StatusBadArgs, wantCode: 400,
		},
		{
			name: "a body of a type the route does not read is a 415 immediate response",
			req: legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: "text=hi",
				header: map[string]string{"Idempotency-Key": "k-plain", "Content-Type": "text/plain"}},
			wantStatus: contracts.StatusBadArgs, wantCode: 415,
		},
		{
			name: "forbidden is an immediate response",
			req: legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: `{"text":"hi"}`,
				header: map[string]string{"X-Toolgate-Caller": "intern", "Idempotency-Key": "k-forbidden"}},
			wantStatus: contracts.StatusForbidden, wantCode: 403,
		},
		{
			name:       "an unknown route is not_found",
			req:        legacyRequest{method: "GET", path: "/nope/at/all"},
			wantStatus: contracts.StatusNotFound, wantCode: 404,
		},
		{
			name: "a declared body over max_request_bytes is bad_args at the headers",
			req: legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: `{"text":"` + longText + `"}`,
				header: map[string]string{"Idempotency-Key": "k-large"}},
			wantStatus: contracts.StatusBadArgs, wantCode: 413,
		},
		{
			name: "a side effect done",
			req: legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: `{"text":"hi"}`,
				header: map[string]string{"Idempotency-Key": "k-done", "X-Toolgate-Caller": "ops"}},
			ans:        &answer{code: 201, header: jsonType, body: `{"id":"m-1"}`},
			wantStatus: contracts.StatusOK, wantCode: 200,
		},
		{
			name: "an encoded answer nobody asked for is unreadable",
			req:  legacyRequest{method: "GET", path: "/api/search?q=zip"},
			ans: &answer{code: 200, header: map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"},
				body: gzipped(`{"results":[{"id":2}],"total":1}`)},
			wantStatus: contracts.StatusUpstream, wantCode: 502,
		},
		{
			name:       "backend 500",
			req:        legacyRequest{method: "GET", path: "/api/search?q=go"},
			ans:        &answer{code: 500, header: htmlType, body: htmlError},
			wantStatus: contracts.StatusUpstream, wantCode: 502,
		},
		{
			name: "backend 503 with Retry-After",
			req:  legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: `{"text":"hi"}`, header: map[string]string{"Idempotency-Key": "k-503"}},
			ans:  &answer{code: 503, header: htmlType, body: htmlError}, wantStatus: contracts.StatusUpstream, wantCode: 503,
		},
		{
			name: "Envoy's 503 overflow is nothing sent",
			req:  legacyRequest{method: "POST", path: "/v1/down/u1", header: map[string]string{"Idempotency-Key": "k-overflow"}},
			ans: &answer{code: 503, header: map[string]string{"X-Envoy-Overloaded": "true", "Content-Type": "text/plain"},
				body: "upstream connect error or disconnect/reset before headers. reset reason: overflow"},
			local:      true,
			wantStatus: contracts.StatusUpstream, wantCode: 503,
		},
		{
			name: "Envoy's connect failure is nothing sent",
			req:  legacyRequest{method: "POST", path: "/v1/down/u2", header: map[string]string{"Idempotency-Key": "k-connect"}},
			ans: &answer{code: 503, header: map[string]string{"Content-Type": "text/plain"},
				body: "upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111"},
			local:      true,
			wantStatus: contracts.StatusUpstream, wantCode: 503,
		},
		{
			name:       "Envoy's route timeout is a timeout after sending",
			req:        legacyRequest{method: "POST", path: "/v1/users/u3/notifications", body: `{"text":"hi"}`, header: map[string]string{"Idempotency-Key": "k-504"}},
			ans:        &answer{code: 504, header: map[string]string{"Content-Type": "text/plain"}, body: "upstream request timeout"},
			local:      true,
			httpAns:    &answer{hang: true},
			wantStatus: contracts.StatusTimeout, wantCode: 504,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			tc.req.header = withRequestID(tc.req.header, "req-"+strings.ReplaceAll(tc.name, " ", "-"))
			httpAns := tc.ans
			if tc.local {
				httpAns = tc.httpAns
			}
			want := h.viaFront(tc.req, httpAns)
			got, _ := h.viaExtproc(tc.req, tc.ans, tc.local)
			if tc.ans == nil && got.sent != nil {
				t.Fatalf("the request went on to the backend: %+v", got.sent)
			}
			sameAnswer(t, got.final, want)
			var env struct {
				Status contracts.Status `json:"status"`
			}
			if err := json.Unmarshal(got.final.body, &env); err != nil {
				t.Fatalf("envelope: %v: %s", err, got.final.body)
			}
			if env.Status != tc.wantStatus || got.final.code != tc.wantCode {
				t.Errorf("got %s %d, want %s %d", env.Status, got.final.code, tc.wantStatus, tc.wantCode)
			}
			if strings.Contains(string(got.final.body), "db-7.internal") {
				t.Errorf("the envelope repeats the backend's body: %s", got.final.body)
			}
		})
	}
}

func gzipped(s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return b.String()
}

func withRequestID(h map[string]string, id string) map[string]string {
	out := map[string]string{"X-Request-Id": id}
	for k, v := range h {
		out[k] = v
	}
	return out
}

// TestReplayIsAnImmediateResponse: the second stream with the same key is
// answered by the stored envelope, without the backend.
func TestReplayIsAnImmediateResponse(t *testing.T) {
	h := newHarness(t)
	first := legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: `{"text":"hi"}`,
		header: map[string]string{"Idempotency-Key": "k-replay", "X-Request-Id": "first"}}
	second := first
	second.header = map[string]string{"Idempotency-Key": "k-replay", "X-Request-Id": "second"}
	ans := &answer{code: 201, header: jsonType, body: `{"id":"m-7"}`}

	h.viaFront(first, ans)
	want := h.viaFront(second, ans)
	if _, got := h.viaExtproc(first, ans, false); got != nil {
		t.Fatal("first call left open")
	}
	got, _ := h.viaExtproc(second, ans, false)
	if got.sent != nil {
		t.Fatal("the replay went on to the backend")
	}
	if got.requests[len(got.requests)-1].GetImmediateResponse() == nil {
		t.Fatal("the replay is not an immediate response")
	}
	sameAnswer(t, got.final, want)
	if got.final.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(got.final.body), `"replayed":true`) {
		t.Errorf("not marked replayed: %v %s", got.final.header, got.final.body)
	}
}

// TestCancelledStreamLeavesTheKeyUnknown: a stream that ends after the
// request phase abandons the call; a retry with the same key gets the
// unknown outcome replayed, exactly as after a timeout behind the HTTP
// front, and is never sent again.
func TestCancelledStreamLeavesTheKeyUnknown(t *testing.T) {
	h := newHarness(t)
	first := legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: `{"text":"hi"}`,
		header: map[string]string{"Idempotency-Key": "k-lost", "X-Request-Id": "first"}}
	retry := first
	retry.header = map[string]string{"Idempotency-Key": "k-lost", "X-Request-Id": "retry"}

	h.viaFront(first, &answer{hang: true})
	want := h.viaFront(retry, &answer{code: 201, header: jsonType, body: `{"id":"m-8"}`})

	run, s := h.viaExtproc(first, nil, false)
	if run.sent == nil {
		t.Fatal("the request phase did not let the call go on")
	}
	s.cancel() // the client is gone, Envoy resets the stream
	got, _ := h.viaExtproc(retry, nil, false)
	if got.sent != nil {
		t.Fatal("the retry of an unknown outcome was sent again")
	}
	sameAnswer(t, got.final, want)
	for _, field := range []string{`"status":"timeout"`, `"side_effect":"unknown"`, `"replayed":true`} {
		if !strings.Contains(string(got.final.body), field) {
			t.Errorf("retry envelope lacks %s: %s", field, got.final.body)
		}
	}
}

// TestToolTimeoutAnswersInPlaceOfTheBackend: no answer within the tool's
// timeout ends the call as a timeout, told to Envoy unasked.
func TestToolTimeoutAnswersInPlaceOfTheBackend(t *testing.T) {
	h := newHarness(t)
	req := legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: `{"text":"hi"}`,
		header: map[string]string{"Idempotency-Key": "k-slow", "X-Request-Id": "slow"}}
	want := h.viaFront(req, &answer{hang: true})
	run, s := h.viaExtproc(req, nil, false)
	if run.sent == nil {
		t.Fatal("the call did not go on")
	}
	start := time.Now()
	resp, err := s.s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("timeout answer after %v", waited)
	}
	ir := resp.GetImmediateResponse()
	if ir == nil {
		t.Fatalf("want an immediate response, got %v", resp)
	}
	sameAnswer(t, immediateAnswer(ir), want)
	s.close()
}

// TestRequestRewrite: the backend request Envoy sends is the one the HTTP
// front sends for the same call: path (escaped, with the upstream's
// prefix), query, body, the contract's headers, the forwarded key; the
// caller's identity headers and other client headers stay behind.
func TestRequestRewrite(t *testing.T) {
	cases := []struct {
		name string
		req  legacyRequest
		path string
		body string
	}{
		{
			name: "a path placeholder keeps its escaping and unknown query parameters go",
			req:  legacyRequest{method: "GET", path: "/docs/a%2Fb%20c?cachebust=1"},
			path: "/base/docs/a%2Fb%20c",
		},
		{
			name: "query parameters are rebound with defaults",
			req:  legacyRequest{method: "GET", path: "/api/search?q=caf%C3%A9+bar"},
			path: "/base/api/search?q=caf%C3%A9+bar&limit=10",
		},
		{
			name: "a body is rebound and the key forwarded",
			req:  legacyRequest{method: "POST", path: "/v1/charges", body: `{"amount": 12}`, header: map[string]string{"Idempotency-Key": `"k-charge"`}},
			path: "/base/v1/charges",
			body: `{"amount":12}`,
		},
		{
			name: "a form body is read as the tool's fields and rebound as its JSON",
			req: legacyRequest{method: "POST", path: "/v1/charges", body: "amount=12",
				header: map[string]string{"Idempotency-Key": "k-form", "Content-Type": "application/x-www-form-urlencoded"}},
			path: "/base/v1/charges",
			body: `{"amount":12}`,
		},
		{
			name: "a multipart body is read as the tool's fields and rebound as its JSON",
			req: legacyRequest{method: "POST", path: "/v1/charges",
				body:   "--b1\r\nContent-Disposition: form-data; name=\"amount\"\r\n\r\n12\r\n--b1--\r\n",
				header: map[string]string{"Idempotency-Key": "k-multipart", "Content-Type": "multipart/form-data; boundary=b1"}},
			path: "/base/v1/charges",
			body: `{"amount":12}`,
		},
		{
			name: "a tool without body fields sends none",
			req:  legacyRequest{method: "POST", path: "/v1/down/u9", header: map[string]string{"Idempotency-Key": "k-nobody"}},
			path: "/v1/down/u9",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			tc.req.header = withRequestID(tc.req.header, "rw-1")
			tc.req.header["X-Toolgate-Caller"] = "ops"
			tc.req.header["X-Forwarded-Client-Cert"] = `By=spiffe://a;URI=spiffe://cluster.local/ns/agents/sa/ops`
			tc.req.header["Cookie"] = "session=secret"
			run, s := h.viaExtproc(tc.req, nil, false)
			if run.sent == nil {
				t.Fatalf("the call did not go on: %v", run.requests)
			}
			s.cancel()
			sent := run.sent
			if sent.path != tc.path || sent.method != tc.req.method || string(sent.body) != tc.body {
				t.Errorf("sent %s %s %q, want %s %s %q", sent.method, sent.path, sent.body, tc.req.method, tc.path, tc.body)
			}
			for _, name := range []string{"X-Toolgate-Caller", "X-Forwarded-Client-Cert", "Cookie", "Accept-Encoding"} {
				if v := sent.header.Get(name); v != "" {
					t.Errorf("%s reached the backend: %q", name, v)
				}
			}
			if sent.header.Get("X-Forwarded-Proto") != "http" {
				t.Error("X-Forwarded-Proto was dropped")
			}
			if strings.HasPrefix(tc.path, "/base") {
				// The same call through the HTTP front, seen by the backend.
				h.viaFront(tc.req, &answer{code: 204})
				front := h.backend.lastRequest()
				if front.uri != sent.path || front.body != string(sent.body) {
					t.Errorf("HTTP front sent %s %q, ext_proc %s %q", front.uri, front.body, sent.path, sent.body)
				}
				for _, name := range []string{"Authorization", "User-Agent", "Accept", "Content-Type", "X-Request-Id", "Idempotency-Key", "Content-Length"} {
					if sent.header.Get(name) != front.header.Get(name) {
						t.Errorf("%s: ext_proc %q, HTTP front %q", name, sent.header.Get(name), front.header.Get(name))
					}
				}
			}
		})
	}
}

// TestPassthrough: a request under a passthrough prefix goes through
// untouched but for the identity headers, with no response phase.
func TestPassthrough(t *testing.T) {
	h := newHarness(t)
	s := h.open()
	msg := &httpMessage{method: "GET", path: "/health/ready?verbose=1", header: http.Header{}}
	msg.header.Set("X-Toolgate-Caller", "ops")
	msg.header.Set("X-Forwarded-Client-Cert", "URI=spiffe://x")
	msg.header.Set("Accept", "text/plain")
	resp := s.roundTrip(requestHeaders(msg, true))
	if resp.GetImmediateResponse() != nil {
		t.Fatal("passthrough answered locally")
	}
	applyCommon(msg, resp.GetRequestHeaders().GetResponse())
	if msg.path != "/health/ready?verbose=1" || msg.header.Get("Accept") != "text/plain" {
		t.Errorf("passthrough request changed: %s %v", msg.path, msg.header)
	}
	if msg.header.Get("X-Toolgate-Caller") != "" || msg.header.Get("X-Forwarded-Client-Cert") != "" {
		t.Errorf("identity headers passed through: %v", msg.header)
	}
	if msg.header.Get("Authorization") != "Bearer s3cret" {
		t.Errorf("the upstream's static header is missing: %v", msg.header)
	}
	mode := resp.GetModeOverride()
	if mode.GetResponseHeaderMode().String() != "SKIP" || mode.GetResponseBodyMode().String() != "NONE" || mode.GetRequestBodyMode().String() != "NONE" {
		t.Errorf("mode override %v", mode)
	}
	// Without mode overrides Envoy still sends the answer: it goes on.
	back := &httpMessage{code: 200, header: http.Header{"Content-Type": {"text/plain"}}}
	resp = s.roundTrip(responseHeaders(back, false))
	if cr := resp.GetResponseHeaders().GetResponse(); cr == nil || cr.GetHeaderMutation() != nil || cr.GetBodyMutation() != nil {
		t.Errorf("passthrough answer changed: %v", resp)
	}
	resp = s.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("ok"), EndOfStream: true}}})
	if cr := resp.GetResponseBody().GetResponse(); cr == nil || cr.GetBodyMutation() != nil {
		t.Errorf("passthrough body changed: %v", resp)
	}
	s.close()
}

// TestEncodedDotSegmentIsNotPassedThrough: a path under a passthrough
// prefix that the backend could resolve elsewhere (Envoy forwards the path
// as it came) is never let through untouched; no tool takes it, so it is
// answered not_found at once.
func TestEncodedDotSegmentIsNotPassedThrough(t *testing.T) {
	h := newHarness(t)
	for _, path := range []string{"/health/%2e%2e/v1/users/u1/notifications", "/health%2f..%2fdocs/x", "/health/..;/docs/x"} {
		t.Run(path, func(t *testing.T) {
			s := h.open()
			defer s.close()
			msg := &httpMessage{method: "POST", path: path, header: http.Header{"Idempotency-Key": {"k-dots"}}}
			resp := s.roundTrip(requestHeaders(msg, true))
			ir := resp.GetImmediateResponse()
			if ir == nil {
				t.Fatalf("the request went on to the backend: %v", resp)
			}
			if ir.GetStatus().GetCode() != http.StatusNotFound || !strings.Contains(string(ir.GetBody()), `"status":"not_found"`) {
				t.Errorf("answer %d %s", ir.GetStatus().GetCode(), ir.GetBody())
			}
		})
	}
}

// TestBufferedBodyOverTheLimit: a body without a declared length that
// turns out too large is bad_args when it is buffered; one Envoy cannot
// buffer (its own 413 comes back before the call began) is the same.
func TestBufferedBodyOverTheLimit(t *testing.T) {
	h := newHarness(t)
	body := `{"text":"` + strings.Repeat("y", 400) + `"}`
	req := legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: body,
		header: map[string]string{"Idempotency-Key": "k-big", "X-Request-Id": "big"}}
	want := h.viaFront(req, nil)

	t.Run("buffered by Envoy", func(t *testing.T) {
		s := h.open()
		msg := &httpMessage{method: "POST", path: req.path, header: http.Header{"Idempotency-Key": {"k-big"}, "X-Request-Id": {"big"}}}
		resp := s.roundTrip(requestHeaders(msg, false))
		if resp.GetRequestHeaders() == nil {
			t.Fatalf("want to wait for the body, got %v", resp)
		}
		resp = s.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}})
		ir := resp.GetImmediateResponse()
		if ir == nil {
			t.Fatalf("want an immediate response, got %v", resp)
		}
		sameAnswer(t, immediateAnswer(ir), want)
		s.close()
	})
	t.Run("over Envoy's buffer limit", func(t *testing.T) {
		s := h.open()
		msg := &httpMessage{method: "POST", path: req.path, header: http.Header{"Idempotency-Key": {"k-big"}, "X-Request-Id": {"big"}}}
		s.roundTrip(requestHeaders(msg, false))
		local := &answer{code: 413, header: map[string]string{"Content-Type": "text/plain"}, body: "Payload Too Large"}
		sameAnswer(t, s.respond(local, true), want)
		s.close()
	})
}

// TestAnswerWithoutBody: an answer whose headers end the stream (204) gets
// the envelope added in place of the body.
func TestAnswerWithoutBody(t *testing.T) {
	h := newHarness(t)
	req := legacyRequest{method: "POST", path: "/v1/charges", body: `{"amount":3}`,
		header: map[string]string{"Idempotency-Key": "k-204", "X-Request-Id": "nobody"}}
	ans := &answer{code: 204}
	want := h.viaFront(req, ans)
	got, _ := h.viaExtproc(req, ans, false)
	sameAnswer(t, got.final, want)
}

// TestMetricsCountExtprocCalls: the processor's calls are counted by the
// core like the HTTP front's.
func TestMetricsCountExtprocCalls(t *testing.T) {
	h := newHarness(t)
	ok := &answer{code: 200, header: jsonType, body: `{"results":[{"id":1}],"total":1}`}
	h.viaExtproc(legacyRequest{method: "GET", path: "/api/search?q=a"}, ok, false)
	h.viaExtproc(legacyRequest{method: "GET", path: "/nope"}, nil, false)
	calls, err := h.extReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"search/ok": 1, "unknown/not_found": 1}
	got := map[string]float64{}
	for _, mf := range calls {
		if mf.GetName() != "toolgate_tool_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["tool"]+"/"+labels["status"]] += m.GetCounter().GetValue()
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("toolgate_tool_calls_total %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if n := testutil.CollectAndCount(h.extReg, "toolgate_upstream_requests_total"); n == 0 {
		t.Error("no upstream requests counted")
	}
}

// TestAReloadMidCallKeepsTheCallsSnapshot: a call runs on the snapshot that
// was current when its request headers came, to the end. A reload between
// the request and the answer (here to http_status always_200, and without
// the tool) changes neither the classification nor the rendering of the
// answer: the backend's 404 stays not_found with HTTP 404.
func TestAReloadMidCallKeepsTheCallsSnapshot(t *testing.T) {
	h := newHarness(t)
	run, s := h.viaExtproc(legacyRequest{method: "GET", path: "/docs/d-1", header: map[string]string{"X-Request-Id": "reloaded"}}, nil, false)
	if run.sent == nil {
		t.Fatal("the request phase did not let the call go on")
	}
	doc := strings.NewReplacer("{{legacy}}", "http://127.0.0.1:1", "{{refused}}", "http://127.0.0.1:1").Replace(testPolicy)
	doc = strings.Replace(doc, "server:\n", "server:\n  http_status: always_200\n", 1)
	doc = strings.Replace(doc, "  get_doc:\n", "  get_document:\n", 1)
	if err := h.ext.Swap(proxytest.Snapshot(t, doc)); err != nil {
		t.Fatal(err)
	}
	final := s.respond(&answer{code: 404, header: jsonType, body: `{"error":"no such document"}`}, false)
	s.close()
	if final.code != http.StatusNotFound || !strings.Contains(string(final.body), `"status":"not_found"`) || !strings.Contains(string(final.body), `"tool":"get_doc"`) {
		t.Errorf("after a reload mid-call: HTTP %d %s; want 404, not_found, tool get_doc", final.code, final.body)
	}
}
