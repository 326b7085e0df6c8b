package proxy

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

func TestBreakerOpensAnswersWithoutCallingAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := &fakeBackend{}
		core, _ := newFakeCore(t, breakerPolicy, fb)
		state := func() float64 { return testutil.ToFloat64(core.Metrics().CircuitState.WithLabelValues("legacy")) }

		fb.fail.Store(true)
		for i := range 3 {
			if res := callRead(core); res.Envelope.Status != contracts.StatusUpstream || res.Reason != contracts.ReasonServerError {
				t.Fatalf("call %d: %s %s", i, res.Envelope.Status, res.Reason)
			}
		}
		if state() != 2 {
			t.Fatalf("circuit_state = %v after 3 failures, want 2 (open)", state())
		}
		before := fb.calls.Load()
		res := callRead(core)
		env := res.Envelope
		if env.Status != contracts.StatusUpstream || !env.Retryable || res.Reason != contracts.ReasonCircuitOpen || !res.RetryLater {
			t.Fatalf("open breaker answered %+v (%s)", env, res.Reason)
		}
		if env.RetryAfterMS != 10000 {
			t.Errorf("retry_after_ms = %d, want the 10s left open", env.RetryAfterMS)
		}
		if fb.calls.Load() != before {
			t.Error("the open breaker called the backend")
		}
		if env.Cost != 0 {
			t.Errorf("cost = %v", env.Cost)
		}
		if got := testutil.ToFloat64(core.Metrics().UpstreamRequests.WithLabelValues("legacy", "circuit_open")); got != 1 {
			t.Errorf("circuit_open count = %v", got)
		}

		time.Sleep(4 * time.Second)
		if res := callRead(core); res.Envelope.RetryAfterMS != 6000 {
			t.Errorf("retry_after_ms after 4s = %d, want 6000", res.Envelope.RetryAfterMS)
		}

		// Half-open: one probe goes through; it fails, so the breaker opens again.
		time.Sleep(6*time.Second + time.Millisecond)
		if res := callRead(core); res.Reason != contracts.ReasonServerError {
			t.Fatalf("half-open probe: %s", res.Reason)
		}
		if res := callRead(core); res.Reason != contracts.ReasonCircuitOpen {
			t.Fatalf("after a failed probe: %s, want circuit_open", res.Reason)
		}

		// The backend recovers; the next probe closes the breaker.
		fb.fail.Store(false)
		time.Sleep(10*time.Second + time.Millisecond)
		if state() != 1 && state() != 2 {
			t.Errorf("circuit_state = %v", state())
		}
		if res := callRead(core); res.Envelope.Status != contracts.StatusOK {
			t.Fatalf("probe after recovery: %s %s", res.Envelope.Status, res.Reason)
		}
		if state() != 0 {
			t.Errorf("circuit_state = %v after a good probe, want 0", state())
		}
		for range 5 {
			if res := callRead(core); res.Envelope.Status != contracts.StatusOK {
				t.Fatalf("closed breaker: %s", res.Reason)
			}
		}
	})
}

func TestBreakerIgnoresClientErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := &fakeBackend{}
		doc := strings.Replace(breakerPolicy, "path: /r}", `path: "/r/{code}"}`, 1)
		doc = strings.Replace(doc, "args: {type: object}", "args: {type: object, properties: {code: {type: string}}}", 1)
		core, _ := newFakeCore(t, doc, fb)
		core.Swap(core.Snapshot()) // a reload keeps the breaker
		for range 10 {
			res := core.Call(context.Background(), &Request{Tool: "read", Body: []byte(`{"code":"x"}`)})
			if res.Envelope.Status != contracts.StatusOK {
				t.Fatal(res.Reason)
			}
		}
		fb.fail.Store(true)
		callRead2 := func() *Result {
			return core.Call(context.Background(), &Request{Tool: "read", Body: []byte(`{"code":"x"}`)})
		}
		callRead2()
		callRead2()
		// Two failures, then a reload: the count must survive it.
		if err := core.Swap(core.Snapshot()); err != nil {
			t.Fatal(err)
		}
		callRead2()
		if res := callRead2(); res.Reason != contracts.ReasonCircuitOpen {
			t.Fatalf("breaker did not survive the reload: %s", res.Reason)
		}
	})
}

func TestBreakerSettingsTripOnRatio(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := policy.NewBreaker("x", policy.BreakerSettings{ConsecutiveFailures: 100, FailureRatio: 0.5, MinRequests: 4, Window: time.Minute, OpenFor: time.Second, HalfOpenRequests: 1}, policy.BreakerOptions{})
		verdicts := []policy.Verdict{policy.VerdictFailure, policy.VerdictSuccess, policy.VerdictIgnored, policy.VerdictFailure, policy.VerdictSuccess, policy.VerdictFailure}
		for i, v := range verdicts {
			done, _, err := b.Allow()
			if err != nil {
				t.Fatalf("refused at %d", i)
			}
			done.Done(v)
		}
		// 5 counted requests, 3 failures: ratio 0.6 >= 0.5 with >= 4 requests.
		if b.State() != policy.BreakerOpen {
			t.Fatalf("state = %v, want open", b.State())
		}
		if _, wait, err := b.Allow(); err == nil || wait != time.Second {
			t.Fatalf("allow = %v %v", wait, err)
		}
	})
}

// TestAgentsThatLeaveDuringTheAnswerDoNotOpenTheBreaker: an agent that
// hangs up while a 2xx answer is being read ends its own call (canceled),
// and is no failure of the backend's. It was counted
// as one (bad_response): agents that left together at the end of a load
// run opened the breaker for every other agent.
func TestAgentsThatLeaveDuringTheAnswerDoNotOpenTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := &fakeBackend{}
		core, _ := newFakeCore(t, breakerPolicy, fb)
		state := func() float64 { return testutil.ToFloat64(core.Metrics().CircuitState.WithLabelValues("legacy")) }

		fb.cut.Store(true)
		for i := range 5 {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(10*time.Millisecond, cancel)
			res := core.Call(ctx, &Request{Tool: "read", Body: []byte(`{}`), Front: "test"})
			cancel()
			env := res.Envelope
			if res.Reason != contracts.ReasonCanceled || env.Status != contracts.StatusUpstream || env.SideEffect != contracts.SideEffectNone || !env.Retryable {
				t.Fatalf("call %d: reason %s, envelope %+v; want canceled, upstream, side_effect none (a read), retryable", i, res.Reason, env)
			}
		}
		if state() != 0 {
			t.Fatalf("circuit_state = %v after 5 agents left during the answer, want 0 (closed)", state())
		}
		fb.cut.Store(false)
		if res := callRead(core); res.Envelope.Status != contracts.StatusOK {
			t.Fatalf("the next call: %s %s", res.Envelope.Status, res.Reason)
		}
	})
}
