package extproc

import (
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/contracts"
)

func TestClassifyReply(t *testing.T) {
	const served = "X-Envoy-Upstream-Service-Time"
	nothingSent := reply{local: true, failure: contracts.FailConnect}
	resetAfterSend := reply{local: true, failure: contracts.FailReset, written: true}
	timeoutAfterSend := reply{local: true, failure: contracts.FailDeadline, written: true}
	cases := []struct {
		name    string
		code    int
		header  map[string]string
		body    string
		details string
		want    reply
	}{
		// Without response code details: headers and Envoy's texts.
		{name: "a backend's 503 carries the upstream service time", code: 503, header: map[string]string{served: "12"}, body: "<html>down</html>", want: backendAnswer},
		{name: "a backend's 503 mimicking Envoy's text is still the backend's", code: 503, header: map[string]string{served: "12"}, body: "upstream connect error or disconnect/reset before headers. reset reason: overflow", want: backendAnswer},
		{name: "overflow is nothing sent", code: 503, header: map[string]string{"X-Envoy-Overloaded": "true"}, body: "upstream connect error or disconnect/reset before headers. reset reason: overflow", want: nothingSent},
		{name: "the overloaded header alone is nothing sent", code: 503, header: map[string]string{"X-Envoy-Overloaded": "true"}, body: "envoy overloaded", want: nothingSent},
		{name: "overflow without Envoy headers is nothing sent", code: 503, body: "upstream connect error or disconnect/reset before headers. reset reason: overflow", want: nothingSent},
		{name: "a connection failure is nothing sent", code: 503, body: "upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111", want: nothingSent},
		{name: "a remote connection failure is nothing sent", code: 503, body: "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused", want: nothingSent},
		{name: "a connect timeout is nothing sent", code: 503, body: "upstream connect error or disconnect/reset before headers. reset reason: connection timeout", want: nothingSent},
		{name: "a failure after retries reads the latest reason", code: 503, body: "upstream connect error or disconnect/reset before headers. retried and the latest reset reason: connection failure", want: nothingSent},
		{name: "a refused HTTP/2 stream is nothing sent", code: 503, body: "upstream connect error or disconnect/reset before headers. reset reason: remote refused stream reset", want: nothingSent},
		{name: "a terminated connection may have been acted on", code: 503, body: "upstream connect error or disconnect/reset before headers. reset reason: connection termination", want: resetAfterSend},
		{name: "a remote reset may have been acted on", code: 503, body: "upstream connect error or disconnect/reset before headers. reset reason: remote reset", want: resetAfterSend},
		{name: "a protocol error may have been acted on", code: 502, body: "upstream connect error or disconnect/reset before headers. reset reason: protocol error", want: resetAfterSend},
		{name: "an unknown reset reason may have been acted on", code: 503, body: "upstream connect error or disconnect/reset before headers. reset reason: something new", want: resetAfterSend},
		{name: "the route timeout is a timeout after sending", code: 504, body: "upstream request timeout", want: timeoutAfterSend},
		{name: "no healthy upstream is nothing sent", code: 503, body: "no healthy upstream", want: nothingSent},
		{name: "another filter's 429 is read by its status", code: 429, body: "rate limited", want: backendAnswer},
		{name: "a 504 with another text is read by its status", code: 504, body: "gateway timeout", want: backendAnswer},

		// With response code details, they decide.
		{name: "details via_upstream is the backend even with Envoy's text", code: 503, body: "no healthy upstream", details: "via_upstream", want: backendAnswer},
		{name: "details overflow is nothing sent", code: 503, details: "upstream_reset_before_response_started{overflow}", want: nothingSent},
		{name: "details connection failure is nothing sent", code: 503, details: "upstream_reset_before_response_started{connection_failure,delayed_connect_error:_111}", want: nothingSent},
		{name: "details remote connection failure is nothing sent", code: 503, details: "upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused}", want: nothingSent},
		{name: "details connection termination may have been acted on", code: 503, details: "upstream_reset_before_response_started{connection_termination}", want: resetAfterSend},
		{name: "details reset after the answer started may have been acted on", code: 200, details: "upstream_reset_after_response_started{remote_reset}", want: resetAfterSend},
		{name: "details response timeout is a timeout after sending", code: 504, details: "response_timeout", want: timeoutAfterSend},
		{name: "details per-try timeout is a timeout after sending", code: 504, details: "upstream_per_try_timeout", want: timeoutAfterSend},
		{name: "details no healthy upstream is nothing sent", code: 503, details: "no_healthy_upstream", want: nothingSent},
		{name: "details overload is nothing sent", code: 503, details: "overload", want: nothingSent},
		{name: "details of another filter read by status", code: 403, details: "rbac_access_denied_matched_policy[none]", want: backendAnswer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			if got := classifyReply(tc.code, h, []byte(tc.body), tc.details); got != tc.want {
				t.Errorf("classifyReply = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzClassifyReply: any answer classifies without panicking, and an
// answer the router stamped as the upstream's is never read as Envoy's.
func FuzzClassifyReply(f *testing.F) {
	f.Add(503, "upstream connect error or disconnect/reset before headers. reset reason: overflow", "", true)
	f.Add(504, "upstream request timeout", "", false)
	f.Add(503, "", "upstream_reset_before_response_started{connection_failure}", false)
	f.Add(200, "{}", "via_upstream", true)
	f.Fuzz(func(t *testing.T, code int, body, details string, served bool) {
		h := http.Header{}
		if served {
			h.Set("X-Envoy-Upstream-Service-Time", "1")
		}
		r := classifyReply(code, h, []byte(body), details)
		if served && details == "" && r.local {
			t.Errorf("an upstream answer read as a local reply: %+v", r)
		}
		if r.local && r.failure == 0 {
			t.Errorf("a local reply without a failure: %+v", r)
		}
	})
}
