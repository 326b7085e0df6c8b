package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/redisstate"
	"github.com/toolgate/toolgate/proxy/toolformats"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Add(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

const accessPolicy = `
version: 1
server:
  caller_from: {{from}}
upstreams:
  svc: {url: "{{url}}", timeout: 2s}
tools:
  search:
    description: Search.
    upstream: svc
    cost: 1
    args: {type: object}
    request: {method: GET, path: /search}
  send:
    description: Send.
    upstream: svc
    side_effect: true
    cost: 1
    args: {type: object}
    request: {method: POST, path: /send}
  free:
    description: Free.
    upstream: svc
    args: {type: object}
    request: {method: GET, path: /free}
access:
  default: {{default}}
  identities:
    spiffe://cluster.local/ns/agents/sa/research: research-agent
  callers:
    research-agent: {tools: [search]}
    ops-agent:
      tools: ["*"]
      rate: {rps: 1, burst: 2}
      tool_rates: {free: {rps: 100, burst: 100}}
    budget-agent:
      tools: ["*"]
      budget: {cost: 2, per: 1h}
`

type accessHarness struct {
	core    *Core
	front   *httptest.Server
	backend *proxytest.HeaderRecorder
	clock   *fakeClock
}

func newAccessHarness(t *testing.T, from, deflt string, budgets policy.BudgetStore, backendURL string) *accessHarness {
	t.Helper()
	rec := &proxytest.HeaderRecorder{}
	if backendURL == "" {
		srv := httptest.NewServer(rec)
		t.Cleanup(srv.Close)
		backendURL = srv.URL
	}
	doc := strings.NewReplacer("{{url}}", backendURL, "{{from}}", from, "{{default}}", deflt).Replace(accessPolicy)
	clock := newFakeClock()
	core := newTestCore(t, doc, Options{Now: clock.Now, Budgets: budgets})
	return &accessHarness{core: core, front: serveCore(t, core), backend: rec, clock: clock}
}

func (h *accessHarness) call(t *testing.T, tool string, hdr map[string]string) (*http.Response, *contracts.Envelope) {
	t.Helper()
	return postCall(t, h.front, tool, `{}`, hdr)
}

func TestAccessControl(t *testing.T) {
	tests := []struct {
		name, deflt, caller, tool string
		want                      contracts.Status
	}{
		{"a listed caller may call its tool", "deny", "research-agent", "search", contracts.StatusOK},
		{"a listed caller may not call another tool", "deny", "research-agent", "send", contracts.StatusForbidden},
		{"a wildcard allows every tool", "deny", "ops-agent", "send", contracts.StatusOK},
		{"an unlisted caller gets default deny", "deny", "stranger", "search", contracts.StatusForbidden},
		{"an unlisted caller gets default allow", "allow", "stranger", "search", contracts.StatusOK},
		{"no caller identity gets the default", "deny", "", "search", contracts.StatusForbidden},
		{"default allow does not widen a listed caller", "allow", "research-agent", "send", contracts.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newAccessHarness(t, "header", tt.deflt, nil, "")
			hdr := map[string]string{"Idempotency-Key": "k"}
			if tt.caller != "" {
				hdr["X-Toolgate-Caller"] = tt.caller
			}
			resp, env := h.call(t, tt.tool, hdr)
			if env.Status != tt.want {
				t.Fatalf("status = %s (%s), want %s", env.Status, env.Message, tt.want)
			}
			if tt.want == contracts.StatusForbidden {
				if env.Retryable || resp.StatusCode != 403 || env.SideEffect != contracts.SideEffectNone || env.Cost != 0 {
					t.Errorf("denied envelope = %+v", env)
				}
				if len(h.backend.Headers()) != 0 {
					t.Error("a denied call reached the backend")
				}
				label := tt.caller
				if label != "research-agent" && label != "ops-agent" {
					label = "unknown"
				}
				if got := testutil.ToFloat64(h.core.Metrics().AccessRejections.WithLabelValues(label, tt.tool, RejectDenied)); got != 1 {
					t.Errorf("rejections{%s,%s,denied} = %v", label, tt.tool, got)
				}
			}
		})
	}
}

func TestCallerHeadersNeverReachTheBackend(t *testing.T) {
	for _, from := range []string{"header", "xfcc"} {
		t.Run(from, func(t *testing.T) {
			h := newAccessHarness(t, from, "allow", nil, "")
			_, env := h.call(t, "search", map[string]string{
				"X-Toolgate-Caller":       "ops-agent",
				"X-Forwarded-Client-Cert": `By=spiffe://cluster.local/ns/legacy/sa/search;URI=spiffe://cluster.local/ns/agents/sa/research`,
				"X-Toolgate-Caller-Spoof": "x",
				"Authorization":           "Bearer agent-token",
			})
			if env.Status != contracts.StatusOK {
				t.Fatalf("%+v", env)
			}
			got := h.backend.Headers()[0]
			for _, name := range []string{"X-Toolgate-Caller", "X-Forwarded-Client-Cert", "Authorization"} {
				if v := got.Values(name); len(v) != 0 {
					t.Errorf("backend received %s: %q", name, v)
				}
			}
			want := "ops-agent"
			if from == "xfcc" {
				want = "research-agent" // the caller header is ignored; the SPIFFE ID decides
			}
			if got := testutil.ToFloat64(h.core.Metrics().ToolCalls.WithLabelValues("search", "ok", want)); got != 1 {
				t.Errorf("calls by %s = %v", want, got)
			}
		})
	}
}

func TestXFCCIdentityDecidesAccess(t *testing.T) {
	h := newAccessHarness(t, "xfcc", "deny", nil, "")
	tests := []struct {
		name, xfcc, tool string
		want             contracts.Status
	}{
		{"the mapped SPIFFE ID of the last certificate", `URI=spiffe://cluster.local/ns/x/sa/other,By=a;URI=spiffe://cluster.local/ns/agents/sa/research`, "search", contracts.StatusOK},
		{"an earlier certificate does not count", `URI=spiffe://cluster.local/ns/agents/sa/research,URI=spiffe://cluster.local/ns/x/sa/other`, "search", contracts.StatusForbidden},
		{"a malformed value is an unknown caller", `URI="spiffe://cluster.local/ns/agents/sa/research`, "search", contracts.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, env := h.call(t, tt.tool, map[string]string{"X-Forwarded-Client-Cert": tt.xfcc, "X-Toolgate-Caller": "ops-agent"})
			if env.Status != tt.want {
				t.Errorf("status = %s, want %s", env.Status, tt.want)
			}
		})
	}
}

func TestToolListIsFilteredByCaller(t *testing.T) {
	h := newAccessHarness(t, "header", "deny", nil, "")
	list := func(caller string) []string {
		req, _ := http.NewRequest(http.MethodGet, h.front.URL+"/v1/tools", nil)
		if caller != "" {
			req.Header.Set("X-Toolgate-Caller", caller)
		}
		resp, err := h.front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Tools []toolformats.Info `json:"tools"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range out.Tools {
			names = append(names, tool.Name)
		}
		return names
	}
	if got := strings.Join(list("research-agent"), ","); got != "search" {
		t.Errorf("research-agent sees %s", got)
	}
	if got := strings.Join(list("ops-agent"), ","); got != "free,search,send" {
		t.Errorf("ops-agent sees %s", got)
	}
	if got := list(""); len(got) != 0 {
		t.Errorf("an unlisted caller under default deny sees %v", got)
	}
}

func TestRateLimitWithInjectedClock(t *testing.T) {
	h := newAccessHarness(t, "header", "deny", nil, "")
	hdr := map[string]string{"X-Toolgate-Caller": "ops-agent"}
	for i := range 2 {
		if _, env := h.call(t, "search", hdr); env.Status != contracts.StatusOK {
			t.Fatalf("call %d within the burst: %+v", i, env)
		}
	}
	resp, env := h.call(t, "search", hdr)
	if env.Status != contracts.StatusUpstream || !env.Retryable || env.SideEffect != contracts.SideEffectNone || env.RetryAfterMS != 1000 {
		t.Fatalf("over the limit: %+v", env)
	}
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("HTTP %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(env.Message, "in 1 second") {
		t.Errorf("message does not say when to retry: %q", env.Message)
	}
	// A per-tool override has its own bucket.
	if _, env := h.call(t, "free", hdr); env.Status != contracts.StatusOK {
		t.Errorf("per-tool override: %+v", env)
	}
	h.clock.Add(time.Second)
	if _, env := h.call(t, "search", hdr); env.Status != contracts.StatusOK {
		t.Errorf("after a second: %+v", env)
	}
	if got := testutil.ToFloat64(h.core.Metrics().AccessRejections.WithLabelValues("ops-agent", "search", RejectRate)); got != 1 {
		t.Errorf("rate rejections = %v", got)
	}
	// State survives a reload.
	if err := h.core.Swap(h.core.Snapshot()); err != nil {
		t.Fatal(err)
	}
	h.call(t, "search", hdr)
	if _, env := h.call(t, "search", hdr); env.Status != contracts.StatusUpstream {
		t.Errorf("the bucket was reset by a reload: %+v", env)
	}
}

func TestBudgetWindowsAcrossAReset(t *testing.T) {
	h := newAccessHarness(t, "header", "deny", nil, "")
	hdr := map[string]string{"X-Toolgate-Caller": "budget-agent", "Idempotency-Key": "b-1"}
	if _, env := h.call(t, "send", hdr); env.Status != contracts.StatusOK || env.Cost != 1 {
		t.Fatalf("first: %+v", env)
	}
	// A replay costs nothing, so it does not count toward the budget.
	for range 3 {
		if _, env := h.call(t, "send", hdr); !env.Replayed {
			t.Fatalf("replay: %+v", env)
		}
	}
	if _, env := h.call(t, "search", hdr); env.Status != contracts.StatusOK {
		t.Fatalf("second unit: %+v", env)
	}
	resp, env := h.call(t, "search", hdr)
	if env.Status != contracts.StatusForbidden || env.Retryable || resp.StatusCode != 403 {
		t.Fatalf("over budget: %+v", env)
	}
	if !strings.Contains(env.Message, "resets in 60 minutes") || env.RetryAfterMS != 3600000 {
		t.Errorf("message = %q, retry_after_ms = %d", env.Message, env.RetryAfterMS)
	}
	// Free tools still run.
	if _, env := h.call(t, "free", hdr); env.Status != contracts.StatusOK {
		t.Errorf("zero-cost call: %+v", env)
	}
	h.clock.Add(time.Hour)
	if _, env := h.call(t, "search", hdr); env.Status != contracts.StatusOK {
		t.Errorf("after the window reset: %+v", env)
	}
	m := h.core.Metrics()
	if got := testutil.ToFloat64(m.ToolCost.WithLabelValues("send", "budget-agent")); got != 1 {
		t.Errorf("cost of send = %v", got)
	}
	if got := testutil.ToFloat64(m.AccessRejections.WithLabelValues("budget-agent", "search", RejectBudget)); got != 1 {
		t.Errorf("budget rejections = %v", got)
	}
}

func TestBudgetsSharedByTwoInstancesOnOneRedis(t *testing.T) {
	srv := redistest.Start(t)
	rec := &proxytest.HeaderRecorder{}
	backend := httptest.NewServer(rec)
	t.Cleanup(backend.Close)
	newBudgets := func() policy.BudgetStore {
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { client.Close() })
		return redisstate.NewBudgets(client, redisstate.BudgetOptions{})
	}
	a := newAccessHarness(t, "header", "deny", newBudgets(), backend.URL)
	b := newAccessHarness(t, "header", "deny", newBudgets(), backend.URL)
	hdr := map[string]string{"X-Toolgate-Caller": "budget-agent"}
	if _, env := a.call(t, "search", hdr); env.Status != contracts.StatusOK {
		t.Fatal(env)
	}
	if _, env := b.call(t, "search", hdr); env.Status != contracts.StatusOK {
		t.Fatal(env)
	}
	for _, h := range []*accessHarness{a, b} {
		if _, env := h.call(t, "search", hdr); env.Status != contracts.StatusForbidden {
			t.Errorf("the shared budget was not enforced: %+v", env)
		}
	}
}

func TestReplayComesBeforeRateAndBudget(t *testing.T) {
	t.Run("a caller whose own call spent its budget gets the replay, not forbidden", func(t *testing.T) {
		h := newAccessHarness(t, "header", "deny", nil, "")
		hdr := map[string]string{"X-Toolgate-Caller": "budget-agent", "Idempotency-Key": "spend-all"}
		// Two units: the side effect spends one, a search the other.
		if _, env := h.call(t, "send", hdr); env.Status != contracts.StatusOK || env.SideEffect != contracts.SideEffectDone {
			t.Fatalf("first send: %+v", env)
		}
		if _, env := h.call(t, "search", hdr); env.Status != contracts.StatusOK {
			t.Fatalf("search: %+v", env)
		}
		if _, env := h.call(t, "search", hdr); env.Status != contracts.StatusForbidden {
			t.Fatalf("the budget is not spent: %+v", env)
		}
		_, env := h.call(t, "send", hdr)
		if !env.Replayed || env.Status != contracts.StatusOK || env.SideEffect != contracts.SideEffectDone || env.Cost != 0 {
			t.Fatalf("the retry of a performed action must be its replay: %+v", env)
		}
		if n := len(h.backend.Headers()); n != 2 {
			t.Errorf("backend calls = %d, want 2 (the send and one search)", n)
		}
		// A new key is a new action: the spent budget refuses it, and the
		// refusal is not stored against the key.
		hdr["Idempotency-Key"] = "spend-more"
		if _, env := h.call(t, "send", hdr); env.Status != contracts.StatusForbidden || env.SideEffect != contracts.SideEffectNone {
			t.Fatalf("new key over budget: %+v", env)
		}
		h.clock.Add(time.Hour)
		if _, env := h.call(t, "send", hdr); env.Status != contracts.StatusOK || env.Replayed {
			t.Fatalf("after the reset the refused key runs: %+v", env)
		}
	})
	t.Run("a replay is not rate limited", func(t *testing.T) {
		h := newAccessHarness(t, "header", "deny", nil, "")
		hdr := map[string]string{"X-Toolgate-Caller": "ops-agent", "Idempotency-Key": "rate-1"}
		for i := range 2 {
			if _, env := h.call(t, "send", hdr); env.Status != contracts.StatusOK {
				t.Fatalf("call %d: %+v", i, env)
			}
		}
		// The replay took no token: one of the burst of 2 is left.
		hdr2 := map[string]string{"X-Toolgate-Caller": "ops-agent"}
		if _, env := h.call(t, "search", hdr2); env.Status != contracts.StatusOK {
			t.Fatalf("the replay took a rate token: %+v", env)
		}
		if _, env := h.call(t, "search", hdr2); env.Status != contracts.StatusUpstream {
			t.Fatalf("the burst is not spent: %+v", env)
		}
		for range 3 {
			if _, env := h.call(t, "send", hdr); !env.Replayed || env.Status != contracts.StatusOK {
				t.Fatalf("replay under a spent rate: %+v", env)
			}
		}
	})
	t.Run("access is still checked before the replay", func(t *testing.T) {
		h := newAccessHarness(t, "header", "deny", nil, "")
		hdr := map[string]string{"X-Toolgate-Caller": "research-agent", "Idempotency-Key": "k"}
		if _, env := h.call(t, "send", hdr); env.Status != contracts.StatusForbidden {
			t.Fatalf("a caller without access: %+v", env)
		}
	})
}
