package draft_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/learn/draft"
	"github.com/toolgate/toolgate/policy"
)

// FuzzDraft: whatever a summary file holds, drafting from it does not
// panic, and a draft it returns passes toolgate check.
func FuzzDraft(f *testing.F) {
	l := learn.New(policy.DefaultLearnSettings(), learn.Options{})
	for i, path := range []string{"/api/search", "/v1/users/alice/notify", "/v1/users/bob/notify", "/v1/users/carol/notify", "/items/42"} {
		x := &learn.Exchange{Upstream: "api", UpstreamURL: "http://127.0.0.1:1", Method: http.MethodGet, EscapedPath: path, RawQuery: "q=go&limit=5",
			Status: 200, RequestHeader: http.Header{}, ResponseHeader: http.Header{"Content-Type": {"application/json"}},
			ResponseBody: []byte(`{"results":[{"id":1}],"total":1}`)}
		if i%2 == 1 {
			x.Method, x.RequestBody, x.ResponseBody = http.MethodPost, []byte(`{"text":"hi","n":1.5}`), []byte(`{"code":"E_NOPERM"}`)
			x.RequestHeader.Set("Content-Type", "application/json")
		}
		l.Observe(x)
	}
	seed, _ := json.Marshal(l.Summary())
	f.Add(seed)
	f.Add([]byte(`{"version":1,"upstreams":{"a":"http://x"},"routes":[{"upstream":"a","method":"GET","path":"/{x}/{x}","calls":1,"statuses":{"200":1},"accepted":{"count":1,"query":{"idempotency_key":{"seen":1,"types":{"array":1}}}}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sum, err := learn.DecodeSummary(data)
		if err != nil {
			return
		}
		d, err := draft.Write(sum, draft.Options{})
		if err != nil {
			return
		}
		if _, err := config.CompileSource("draft.yaml", d.YAML, config.Options{LookupEnv: func(string) (string, bool) { return "", false }}); err != nil {
			t.Fatalf("the draft does not compile: %v\n%s", err, d.YAML)
		}
	})
}
