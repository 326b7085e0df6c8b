package extproc

import (
	"context"
	"net/http"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy"
)

// BenchmarkExtprocCall measures one call through the processor as Envoy
// drives it, without gRPC: the request headers (the call begins and the
// request is rewritten), then the answer's headers and body (the call is
// classified, ended and rendered in place of the answer).
func BenchmarkExtprocCall(b *testing.B) {
	doc := strings.NewReplacer("{{legacy}}", "http://127.0.0.1:1", "{{refused}}", "http://127.0.0.1:1").Replace(testPolicy)
	core, err := proxy.NewCore(proxytest.Snapshot(b, doc), proxy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(core.Close)
	srv := New(core, Options{})
	ctx := context.Background()
	req := requestHeaders(&httpMessage{method: "GET", path: "/api/search?q=go&limit=2", header: http.Header{"X-Request-Id": {"bench"}}}, true)
	ans := &httpMessage{code: 200, header: http.Header{"Content-Type": {"application/json"}, "X-Envoy-Upstream-Service-Time": {"3"}}}
	respHeaders := responseHeaders(ans, false)
	respBody := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(`{"results":[{"id":1,"title":"Go"}],"total":1}`), EndOfStream: true},
	}}
	b.ReportAllocs()
	for b.Loop() {
		fl := newBenchFlow(srv)
		for _, m := range []*extprocv3.ProcessingRequest{req, respHeaders, respBody} {
			if _, err := fl.handle(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
		if fl.phase != phaseDone {
			b.Fatalf("phase %d after the answer", fl.phase)
		}
	}
}

func newBenchFlow(srv *Server) *flow { return &flow{s: srv} }
