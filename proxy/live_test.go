package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/policy"
)

// TestToolStateKeepsTheLastOutcomes: every finished call of a tool lands
// in its ring, newest first, at most RecentCalls of them, and a reload
// that keeps the tool keeps them.
func TestToolStateKeepsTheLastOutcomes(t *testing.T) {
	h := newHarness(t, harnessPolicy)
	for _, mode := range []string{"ok", "empty", "500"} {
		h.call(t, "read", `{"mode":"`+mode+`"}`, map[string]string{"X-Request-Id": "call-" + mode})
	}
	ts, ok := h.core.View().ToolState("read")
	if !ok {
		t.Fatal("no state for tool read")
	}
	var got []string
	for _, c := range ts.Recent {
		got = append(got, fmt.Sprintf("%s %s %s %s", c.CallID, c.Status, c.Reason, c.Front))
	}
	want := []string{"call-500 upstream server_error http", "call-empty empty empty http", "call-ok ok ok http"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("recent calls:\n got %q\nwant %q", got, want)
	}
	if ts.Recent[2].Message == "" || ts.Recent[2].Cost != 0.5 || ts.Recent[2].At.IsZero() {
		t.Errorf("the ok call is kept as %+v", ts.Recent[2])
	}

	t.Run("the ring keeps the last RecentCalls", func(t *testing.T) {
		for i := range RecentCalls + 3 {
			h.call(t, "read", `{"mode":"ok"}`, map[string]string{"X-Request-Id": fmt.Sprintf("n%d", i)})
		}
		ts, _ := h.core.View().ToolState("read")
		if len(ts.Recent) != RecentCalls || ts.Recent[0].CallID != fmt.Sprintf("n%d", RecentCalls+2) || ts.Recent[RecentCalls-1].CallID != "n3" {
			t.Errorf("%d calls kept, newest %q, oldest %q", len(ts.Recent), ts.Recent[0].CallID, ts.Recent[len(ts.Recent)-1].CallID)
		}
	})
	t.Run("a reload that keeps the tool keeps its calls", func(t *testing.T) {
		if err := h.core.Swap(h.core.Snapshot()); err != nil {
			t.Fatal(err)
		}
		if ts, _ := h.core.View().ToolState("read"); len(ts.Recent) != RecentCalls {
			t.Errorf("%d calls after the reload", len(ts.Recent))
		}
	})
	t.Run("an unknown tool has no state", func(t *testing.T) {
		if _, ok := h.core.View().ToolState("nope"); ok {
			t.Error("state for an unknown tool")
		}
	})
}

// TestLiveStateOfCallsInFlight: a side-effecting call waiting on its
// backend holds an idempotency key and a bulkhead slot, and gives both
// back when it ends.
func TestLiveStateOfCallsInFlight(t *testing.T) {
	bb := &blockingBackend{entered: make(chan struct{}), release: make(chan struct{})}
	core := newTestCore(t, `
version: 1
upstreams:
  api: {url: "http://127.0.0.1:1", max_concurrent: 4}
tools:
  write:
    description: Write.
    upstream: api
    side_effect: true
    args: {type: object}
    request: {method: POST, path: /w}
`, Options{Transport: func(*policy.Upstream) http.RoundTripper { return bb }})
	done := make(chan *Result)
	go func() {
		done <- core.Call(context.Background(), &Request{Tool: "write", Body: []byte(`{}`), IdempotencyKey: "k1", Front: "http"})
	}()
	<-bb.entered
	v := core.View()
	if ts, _ := v.ToolState("write"); ts.KeysInFlight != 1 {
		t.Errorf("keys in flight during the call: %d, want 1", ts.KeysInFlight)
	}
	if up := v.Upstreams(); len(up) != 1 || up[0].InFlight != 1 || up[0].MaxConcurrent != 4 {
		t.Errorf("upstreams during the call: %+v", up)
	}
	close(bb.release)
	if res := <-done; res.Envelope.Status != contracts.StatusOK {
		t.Fatalf("the call ended %s", res.Envelope.Status)
	}
	if ts, _ := v.ToolState("write"); ts.KeysInFlight != 0 || len(ts.Recent) != 1 {
		t.Errorf("after the call: %d keys in flight, %d recent calls", ts.KeysInFlight, len(ts.Recent))
	}
	if up := v.Upstreams(); up[0].InFlight != 0 {
		t.Errorf("bulkhead after the call: %d in flight", up[0].InFlight)
	}
}

// TestUpstreamsShowTheBreaker: the breaker's state is the one calls meet.
func TestUpstreamsShowTheBreaker(t *testing.T) {
	b := httptest.NewServer(&testBackend{})
	t.Cleanup(b.Close)
	core := newTestCore(t, `
version: 1
upstreams:
  legacy:
    url: "`+b.URL+`"
    breaker: {consecutive_failures: 2, open_for: 1m}
tools:
  read:
    description: Read.
    upstream: legacy
    args: {type: object, properties: {mode: {type: string}}}
    request: {method: GET, path: "/r/{mode}"}
`, Options{})
	up := core.View().Upstreams()
	if len(up) != 1 || up[0].Breaker != policy.BreakerClosed || up[0].URL != b.URL || up[0].BreakerSettings.ConsecutiveFailures != 2 {
		t.Fatalf("before the faults: %+v", up)
	}
	for range 2 {
		core.Call(context.Background(), &Request{Tool: "read", Body: []byte(`{"mode":"500"}`)})
	}
	if up := core.View().Upstreams(); up[0].Breaker != policy.BreakerOpen {
		t.Errorf("after two failures the breaker is %v, want open", up[0].Breaker)
	}
}

// TestCallersShowRatesAndBudgets: the memory limiter and budget store are
// read without taking anything.
func TestCallersShowRatesAndBudgets(t *testing.T) {
	core := newTestCore(t, `
version: 1
upstreams:
  api: {url: "http://127.0.0.1:1"}
tools:
  read:
    description: Read.
    upstream: api
    cost: 1.5
    args: {type: object}
    request: {method: GET, path: /r}
access:
  default: allow
  callers:
    agent:
      tools: ["*"]
      rate: {rps: 0.001, burst: 5}
      tool_rates: {read: {rps: 0.001, burst: 3}}
      budget: {cost: 10, per: 1h}
    idle: {tools: [read]}
`, Options{Transport: func(*policy.Upstream) http.RoundTripper {
		return proxytest.CannedTransport{Body: proxytest.SearchAnswer()}
	}})
	before := core.View().Callers(context.Background())
	if len(before) != 2 || before[0].Name != "agent" || len(before[0].Rates) != 2 || before[0].Rates[1].Tokens != 3 || before[0].Budget.Spent != 0 {
		t.Fatalf("before any call: %+v", before)
	}
	for range 2 {
		core.Call(context.Background(), &Request{Tool: "read", Body: []byte(`{}`), Caller: "agent"})
	}
	agent := core.View().Callers(context.Background())[0]
	own, read := agent.Rates[0], agent.Rates[1]
	switch {
	case own.Tool != policy.RateAllTools || own.Tokens != 5 || !own.Known:
		t.Errorf("the caller's own bucket: %+v (the calls drew from the tool's)", own)
	case read.Tool != "read" || read.Tokens < 0.99 || read.Tokens > 1.01:
		t.Errorf("the tool's bucket: %+v, want about 1 token left", read)
	case agent.Budget == nil || !agent.Budget.Known || agent.Budget.Spent != 3 || agent.Budget.ResetIn <= 0:
		t.Errorf("the budget: %+v, want 3 spent", agent.Budget)
	}
	if idle := core.View().Callers(context.Background())[1]; idle.Name != "idle" || idle.Rates != nil || idle.Budget != nil {
		t.Errorf("a caller without limits: %+v", idle)
	}
}

// TestViewTryHidesTheRunningSecrets: the console's dry run shows the
// ${VAR} values as *** and the credential masked, and a pasted answer
// that echoes a secret the running tool holds shows [redacted].
func TestViewTryHidesTheRunningSecrets(t *testing.T) {
	env := map[string]string{"TOKEN": "tok-0123456789abcdef", "TENANT": "tenant-secret-42"}
	snap, err := config.CompileSource("policy.yaml", []byte(`
version: 1
upstreams:
  api:
    url: "http://127.0.0.1:1"
    headers: {X-Tenant: "${TENANT}"}
    auth: {bearer: {token: "${TOKEN}"}}
tools:
  read:
    description: Read.
    upstream: api
    args: {type: object, properties: {q: {type: string}}}
    request: {method: GET, path: /r, query: {q: q}}
access: {shared_credentials: [api]}
`), config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	core, err := NewCore(snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Close)
	echo := []byte(`{"token":"tok-0123456789abcdef","tenant":"tenant-secret-42"}`)
	for _, c := range []struct {
		name   string
		answer *Answer
	}{
		{"the request alone", nil},
		{"with a pasted answer", &Answer{Code: 200, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: echo}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := core.View().Try(context.Background(), DryRun{Tool: "read", Args: []byte(`{"q":"go"}`), Answer: c.answer})
			if err != nil {
				t.Fatal(err)
			}
			shown := res.URL + string(res.Request)
			if res.Result != nil {
				shown += string(res.Result.Envelope.AppendJSON(nil))
			}
			for _, secret := range env {
				if strings.Contains(shown, secret) {
					t.Errorf("%s is shown:\n%s", secret, shown)
				}
			}
			if !strings.Contains(string(res.Request), "Authorization: Bearer ***") || !strings.Contains(string(res.Request), "X-Tenant: ***") {
				t.Errorf("the request does not show where the secrets go:\n%s", res.Request)
			}
			if c.answer != nil && strings.Count(string(res.Result.Envelope.Data), "[redacted]") != 2 {
				t.Errorf("the pasted answer's secrets are not redacted: %s", res.Result.Envelope.Data)
			}
		})
	}
}

// BenchmarkRecordRecent is what keeping a call among its tool's last
// outcomes costs the call: one slot of the ring, under the slot's lock
// (in parallel, calls of one tool take turns only on a wrapped slot).
func BenchmarkRecordRecent(b *testing.B) {
	lv := new(toolLive)
	cl := &Call{caller: "agent", req: &Request{Front: "http"}}
	env := &contracts.Envelope{Status: contracts.StatusOK, CallID: "bench", Message: "ok", SideEffect: contracts.SideEffectNone}
	end := time.Now()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			lv.recordRecent(cl, env, contracts.ReasonOK, end, time.Millisecond)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lv.recordRecent(cl, env, contracts.ReasonOK, end, time.Millisecond)
			}
		})
	})
}
