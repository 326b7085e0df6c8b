package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/contracts"
)

// boundedPolicy keeps idempotency records in a memory store of 64 KiB.
const boundedPolicy = `
version: 1
state: {backend: memory, max_keys: 100000, max_bytes: 65536}
upstreams:
  svc: {url: {{url}}, timeout: 1s}
tools:
  send:
    description: Send something.
    upstream: svc
    side_effect: true
    args: {type: object, required: [nonce], properties: {nonce: {type: string}}}
    request: {method: POST, path: /w, body: {nonce: nonce}}
access: {default: allow}
`

func TestMemoryStoreBoundsComeFromThePolicy(t *testing.T) {
	// Every answer carries 4 KiB, so 64 KiB holds about a dozen records.
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"pad":%q}`, strings.Repeat("x", 4096))
	}))
	t.Cleanup(backend.Close)
	h := newIdemHarnessDoc(t, strings.ReplaceAll(boundedPolicy, "{{url}}", backend.URL), nil)
	call := func(caller, key string) *contracts.Envelope {
		_, env := postCall(t, h.front, "send", `{"nonce":"`+key+`"}`,
			map[string]string{"Idempotency-Key": key, "X-Toolgate-Caller": caller})
		return env
	}
	if env := call("payments-agent", "pay-1"); env.Status != contracts.StatusOK {
		t.Fatalf("first call: %+v", env)
	}
	for i := range 100 {
		call("flooder", "f-"+strconv.Itoa(i))
	}
	evicted := testutil.ToFloat64(h.core.Metrics().IdempotencyEvents.WithLabelValues("send", EventEvicted))
	if evicted < 80 {
		t.Fatalf("%v records evicted from a 64 KiB store after 101 records of 4 KiB, want most of the flood", evicted)
	}
	if env := call("payments-agent", "pay-1"); !env.Replayed {
		t.Fatalf("the other caller's record was evicted by the flood: %+v", env)
	}
}
