package proxy

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/policy"
)

func TestOneCallerCannotTakeTheWholeBulkhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bb := &blockingBackend{entered: make(chan struct{}, 8), release: make(chan struct{})}
		doc := strings.Replace(breakerPolicy, "timeout: 1s", "timeout: 1s\n    max_concurrent: 4\n    max_concurrent_per_caller: 2", 1) +
			"access:\n  default: allow\n  callers:\n    greedy: {tools: [\"*\"]}\n    polite: {tools: [\"*\"]}\n"
		core, err := NewCore(proxytest.Snapshot(t, doc), Options{Transport: func(*policy.Upstream) http.RoundTripper { return bb }})
		if err != nil {
			t.Fatal(err)
		}
		call := func(caller string) *Result {
			return core.Call(context.Background(), &Request{Tool: "read", Body: []byte(`{}`), Caller: caller, Front: "test"})
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { call("greedy") })
		}
		<-bb.entered
		<-bb.entered
		res := call("greedy")
		if res.Reason != contracts.ReasonBulkhead || !res.Envelope.Retryable || res.Envelope.SideEffect != contracts.SideEffectNone {
			t.Fatalf("a third call of the greedy caller answered %+v (%s)", res.Envelope, res.Reason)
		}
		// The upstream has room, and another caller gets it.
		for range 2 {
			wg.Go(func() {
				if res := call("polite"); res.Envelope.Status != contracts.StatusOK {
					t.Errorf("polite caller: %+v (%s)", res.Envelope, res.Reason)
				}
			})
		}
		<-bb.entered
		<-bb.entered
		if res := call("polite"); res.Reason != contracts.ReasonBulkhead {
			t.Fatalf("the bulkhead is full, yet a fifth call answered %+v (%s)", res.Envelope, res.Reason)
		}
		close(bb.release)
		wg.Wait()
		if res := call("greedy"); res.Envelope.Status != contracts.StatusOK {
			t.Fatalf("after release: %+v (%s)", res.Envelope, res.Reason)
		}
	})
}
