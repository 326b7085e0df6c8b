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

func TestBulkheadShares(t *testing.T) {
	t.Run("a caller's share defaults to all but an eighth of the bulkhead", func(t *testing.T) {
		for total, want := range map[int]int{1: 1, 4: 4, 8: 7, 256: 224} {
			if got := policy.DefaultMaxConcurrentPerCaller(total); got != want {
				t.Errorf("share of %d = %d, want %d", total, got, want)
			}
		}
	})
	t.Run("slots held across a reload still count", func(t *testing.T) {
		b := newBulkhead(2, 1)
		if !b.acquire("a") {
			t.Fatal("first slot")
		}
		nb := b.resized(2, 2)
		if !nb.acquire("a") {
			t.Fatal("a's share grew to 2")
		}
		if nb.acquire("b") {
			t.Fatal("both slots are held, one of them from before the reload")
		}
		b.release("a")
		if !nb.acquire("b") {
			t.Fatal("a slot released into the old bulkhead frees the shared total")
		}
	})
	t.Run("released shares leave no entries behind", func(t *testing.T) {
		b := newBulkhead(4, 2)
		for _, c := range []string{"a", "b", "a"} {
			if !b.acquire(c) {
				t.Fatalf("acquire %s", c)
			}
		}
		for _, c := range []string{"a", "b", "a"} {
			b.release(c)
		}
		if len(b.held) != 0 || len(b.slots) != 0 {
			t.Errorf("held %v, %d slots in use", b.held, len(b.slots))
		}
	})
}
