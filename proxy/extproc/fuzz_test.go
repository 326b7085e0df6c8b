package extproc

import (
	"context"
	"net/http"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/proxy"
)

// FuzzRequestPhase: any request line and body is either answered locally
// or rewritten to a backend request with an absolute path, and every call
// that began can be ended.
func FuzzRequestPhase(f *testing.F) {
	doc := strings.NewReplacer("{{legacy}}", "http://127.0.0.1:1", "{{refused}}", "http://127.0.0.1:2").Replace(testPolicy)
	snap, err := config.CompileSource("extproc.yaml", []byte(doc), config.Options{})
	if err != nil {
		f.Fatal(err)
	}
	core, err := proxy.NewCore(snap, proxy.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(core.Close)
	srv := New(core, Options{})
	f.Add("GET", "/api/search?q=go&limit=3", "")
	f.Add("GET", "/docs/a%2Fb%zz?x", "")
	f.Add("POST", "/v1/users/u1/notifications", `{"text":"hi","idempotency_key":"k"}`)
	f.Add("POST", "/v1/charges?amount=1", `{"amount":"x"}`)
	f.Add("GET", "/health/../api/search?q=%", "")
	f.Fuzz(func(t *testing.T, method, path, body string) {
		fl := &flow{s: srv}
		defer fl.abandon()
		msg := &httpMessage{method: method, path: path, header: http.Header{"Idempotency-Key": {"k"}}}
		resp, err := fl.handle(context.Background(), requestHeaders(msg, body == ""))
		if err != nil || resp == nil {
			t.Fatalf("request headers: %v %v", resp, err)
		}
		if resp.GetImmediateResponse() == nil && fl.phase == phaseRequestBody {
			resp, err = fl.handle(context.Background(), &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true},
			}})
			if err != nil || resp == nil {
				t.Fatalf("request body: %v %v", resp, err)
			}
		}
		if fl.call == nil {
			return
		}
		b := fl.call.Backend()
		if !strings.HasPrefix(b.Path, "/") {
			t.Errorf("backend path %q", b.Path)
		}
	})
}
