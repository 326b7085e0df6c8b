package proxy

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/policy"
)

func TestHangingBackendTimesOutWithinTheDeadlineAndLeaksNothing(t *testing.T) {
	// Registered first, so it runs after the harness's own cleanups have
	// closed its servers and connections.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	h := newHarness(t, harnessPolicy)
	start := time.Now()
	_, env := h.call(t, "read", `{"mode":"hang"}`, nil)
	elapsed := time.Since(start)
	if env.Status != contracts.StatusTimeout || !env.Retryable {
		t.Fatalf("envelope = %+v", env)
	}
	// The tool's deadline is 300ms; the margin only absorbs scheduling on a
	// loaded machine, it is not a performance bound.
	if elapsed > 300*time.Millisecond+3*time.Second {
		t.Errorf("timeout took %v, deadline 300ms", elapsed)
	}
	if !strings.Contains(env.Message, "300ms") {
		t.Errorf("message does not name the deadline: %q", env.Message)
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name       string
		tool       string
		backend    *scriptedBackend
		wantStatus contracts.Status
		wantCalls  int
	}{
		{"a read-only tool resends a 500", "read", &scriptedBackend{script: []int{500, 502}}, contracts.StatusOK, 3},
		{"attempts bound the resends", "read", &scriptedBackend{script: []int{500, 500, 500, 500}}, contracts.StatusUpstream, 3},
		{"a side-effecting tool never resends what may have run", "write", &scriptedBackend{script: []int{500}}, contracts.StatusUpstream, 1},
		{"a side-effecting call that never left is resent", "write", &scriptedBackend{connErr: 2}, contracts.StatusOK, 3},
		{"a 503 is resent after its Retry-After", "read", &scriptedBackend{script: []int{503}, retryAfter: "2"}, contracts.StatusOK, 2},
		{"a side-effecting tool never resends a 503: the agent's retry does", "write", &scriptedBackend{script: []int{503}, retryAfter: "2"}, contracts.StatusUpstream, 1},
		{"a Retry-After past the deadline ends the call", "read", &scriptedBackend{script: []int{429}, retryAfter: "30"}, contracts.StatusUpstream, 1},
		{"client errors are not resent", "read", &scriptedBackend{script: []int{400}}, contracts.StatusBadArgs, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sb := tt.backend
				core := newScriptedCore(t, sb)
				start := time.Now()
				res := core.Call(context.Background(), &Request{Tool: tt.tool, Body: []byte(`{}`), IdempotencyKey: "retry-1"})
				if res.Envelope.Status != tt.wantStatus {
					t.Errorf("status = %s (%s), want %s", res.Envelope.Status, res.Reason, tt.wantStatus)
				}
				if sb.calls != tt.wantCalls {
					t.Errorf("backend calls = %d, want %d", sb.calls, tt.wantCalls)
				}
				if elapsed := time.Since(start); elapsed > 5*time.Second {
					t.Errorf("the call took %v, past its 5s deadline", elapsed)
				}
				if tt.backend.retryAfter == "30" && res.Envelope.RetryAfterMS != 30000 {
					t.Errorf("retry_after_ms = %d, want 30000", res.Envelope.RetryAfterMS)
				}
			})
		})
	}
}

// TestRetryWaitsTheBackoffOrTheBackendsRetryAfter: between attempts the
// call waits the upstream's retries.backoff, or the backend's Retry-After
// when that is longer. The 1 s retry_after_ms a connect failure tells the
// agent is not a wait of the call's own: with it, the example's
// search_articles (timeout 500ms, 2 attempts, backoff 100ms) could never
// retry. Time is the synctest bubble's, so the waits are exact.
func TestRetryWaitsTheBackoffOrTheBackendsRetryAfter(t *testing.T) {
	const policyDoc = `
version: 1
upstreams:
  legacy:
    url: http://legacy.invalid
    timeout: 500ms
    retries: {attempts: 2, backoff: 100ms, max_backoff: 2s}
  patient:
    url: http://patient.invalid
    timeout: 5s
    retries: {attempts: 2, backoff: 100ms, max_backoff: 2s}
tools:
  search_articles:
    description: Search.
    upstream: legacy
    args: {type: object}
    request: {method: GET, path: /search}
  slow_search:
    description: Search a backend that asks for patience.
    upstream: patient
    args: {type: object}
    request: {method: GET, path: /search}
`
	tests := []struct {
		name     string
		tool     string
		backend  *scriptedBackend
		min, max time.Duration // the wait between the attempts
	}{
		{"a connect failure is retried after the backoff", "search_articles", &scriptedBackend{connErr: 1}, 50 * time.Millisecond, 100 * time.Millisecond},
		{"a 503 is retried after the backoff", "search_articles", &scriptedBackend{script: []int{503}}, 50 * time.Millisecond, 100 * time.Millisecond},
		{"a backend's longer Retry-After wins over the backoff", "slow_search", &scriptedBackend{script: []int{503}, retryAfter: "2"}, 2 * time.Second, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				core, err := NewCore(proxytest.Snapshot(t, policyDoc), Options{Transport: func(*policy.Upstream) http.RoundTripper { return tt.backend }})
				if err != nil {
					t.Fatal(err)
				}
				defer core.Close()
				start := time.Now()
				res := core.Call(context.Background(), &Request{Tool: tt.tool, Body: []byte(`{}`)})
				waited := time.Since(start)
				if res.Envelope.Status != contracts.StatusOK || tt.backend.calls != 2 {
					t.Fatalf("status %s (%s) after %d attempts, want ok after 2", res.Envelope.Status, res.Reason, tt.backend.calls)
				}
				if waited < tt.min || waited > tt.max {
					t.Errorf("waited %v between the attempts, want %v to %v", waited, tt.min, tt.max)
				}
			})
		})
	}
}

func TestRetryDelayIsJitteredExponentialAndCapped(t *testing.T) {
	r := policy.RetrySettings{Attempts: 5, Backoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond}
	for _, tt := range []struct {
		n      int
		jitter float64
		want   time.Duration
	}{
		{2, 0, 50 * time.Millisecond},
		{2, 0.999999, 100 * time.Millisecond},
		{3, 0, 100 * time.Millisecond},
		{4, 0, 150 * time.Millisecond},
		{5, 0.5, 225 * time.Millisecond},
	} {
		got := r.Delay(tt.n, func() float64 { return tt.jitter })
		if got.Round(time.Millisecond) != tt.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", tt.n, tt.jitter, got, tt.want)
		}
	}
}

func TestBulkheadFailsFastWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bb := &blockingBackend{entered: make(chan struct{}, 2), release: make(chan struct{})}
		doc := strings.Replace(breakerPolicy, "timeout: 1s", "timeout: 1s\n    max_concurrent: 2", 1)
		snap := proxytest.Snapshot(t, doc)
		core, err := NewCore(snap, Options{Transport: func(*policy.Upstream) http.RoundTripper { return bb }})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { callRead(core) })
		}
		<-bb.entered
		<-bb.entered
		res := callRead(core)
		if res.Reason != contracts.ReasonBulkhead || res.Envelope.Status != contracts.StatusUpstream || !res.Envelope.Retryable || res.Envelope.RetryAfterMS != 1000 || res.HTTPStatus() != 503 {
			t.Fatalf("full bulkhead answered %+v (%s)", res.Envelope, res.Reason)
		}
		close(bb.release)
		wg.Wait()
		if res := callRead(core); res.Envelope.Status != contracts.StatusOK {
			t.Fatalf("after release: %s", res.Reason)
		}
	})
}

// TestCallerGoneStopsTheBackendCall: an agent that goes away while the
// backend works stops the backend request at once (not at the tool's deadline),
// and the envelope says what is known: nothing for a read, an unknown
// effect for a write that reached the backend.
func TestCallerGoneStopsTheBackendCall(t *testing.T) {
	tests := []struct {
		tool       string
		wantEffect contracts.SideEffect
		wantRetry  bool
	}{
		{"read", contracts.SideEffectNone, true},
		{"write", contracts.SideEffectUnknown, false},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			h := newHarness(t, strings.Replace(harnessPolicy, "timeout: 300ms", "timeout: 1h", 1))
			ctx := h.leaveOnceCalled()
			req := &Request{Tool: tt.tool, Body: []byte(`{"mode":"hang"}`), IdempotencyKey: "k-gone", Front: "http"}
			res := h.core.Call(ctx, req)
			env := res.Envelope
			if res.Reason != contracts.ReasonCanceled || env.Status != contracts.StatusUpstream ||
				env.SideEffect != tt.wantEffect || env.Retryable != tt.wantRetry {
				t.Errorf("reason %s, envelope %+v; want canceled, upstream, side_effect %s, retryable %v",
					res.Reason, env, tt.wantEffect, tt.wantRetry)
			}
		})
	}
}

// TestTheRetryWaitEndsWithTheAgent: the wait before a retry is the only
// place a toolgate send waits on the call's context (Done); an agent that
// leaves during it ends the call then, without the retry, and an agent's
// own deadline shorter than the wait leaves no time for one. Time is the
// synctest bubble's, so the waits are exact.
func TestTheRetryWaitEndsWithTheAgent(t *testing.T) {
	tests := []struct {
		name        string
		agent       func() (context.Context, context.CancelFunc)
		wantElapsed time.Duration
	}{
		{"the agent leaves during the wait", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Second, cancel)
			return ctx, cancel
		}, time.Second},
		{"the agent's deadline comes before the retry", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Second)
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sb := &scriptedBackend{script: []int{503}, retryAfter: "2"}
				core := newScriptedCore(t, sb)
				ctx, cancel := tt.agent()
				defer cancel()
				start := time.Now()
				res := core.Call(ctx, &Request{Tool: "read", Body: []byte(`{}`)})
				if elapsed := time.Since(start); elapsed != tt.wantElapsed {
					t.Errorf("the call took %v, want %v", elapsed, tt.wantElapsed)
				}
				if sb.calls != 1 {
					t.Errorf("backend calls = %d, want 1", sb.calls)
				}
				if env := res.Envelope; env.Status != contracts.StatusUpstream || !env.Retryable {
					t.Errorf("envelope %+v (%s), want the 503's: upstream, retryable", env, res.Reason)
				}
			})
		})
	}
}
