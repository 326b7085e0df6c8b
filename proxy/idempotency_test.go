package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/policytest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/redisstate"
)

func TestReplayReturnsTheStoredEnvelope(t *testing.T) {
	h := newIdemHarness(t, nil, "", nil)
	_, first := h.send(t, "send", "k-1", `{"mode":"ok","nonce":"n1"}`)
	if first.Status != contracts.StatusOK || first.SideEffect != contracts.SideEffectDone || first.Replayed || first.Cost != 0.25 {
		t.Fatalf("first = %+v", first)
	}
	resp, again := h.send(t, "send", `"k-1"`, `{"mode":"ok","nonce":"n1"}`)
	if !again.Replayed || resp.Header.Get("Idempotent-Replayed") != "true" || again.Cost != 0 {
		t.Fatalf("replay = %+v, header %q", again, resp.Header.Get("Idempotent-Replayed"))
	}
	if string(again.Data) != string(first.Data) || again.Status != first.Status || again.SideEffect != contracts.SideEffectDone {
		t.Errorf("replay data %s vs %s", again.Data, first.Data)
	}
	if again.CallID == first.CallID {
		t.Error("a replay must carry its own call_id")
	}
	if n := h.backend.count("n1"); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
	// The key may also come as an argument, on every front end.
	_, viaArg := h.send(t, "send", "", `{"mode":"ok","nonce":"n1","idempotency_key":"k-1"}`)
	if !viaArg.Replayed {
		t.Errorf("idempotency_key argument did not replay: %+v", viaArg)
	}
	if got := testutil.ToFloat64(h.core.Metrics().ToolCost.WithLabelValues("send", "unknown")); got != 0.25 {
		t.Errorf("toolgate_tool_cost_total = %v, want 0.25 (replays cost nothing)", got)
	}
	if got := testutil.ToFloat64(h.core.Metrics().IdempotencyEvents.WithLabelValues("send", EventReplayed)); got != 2 {
		t.Errorf("replayed events = %v", got)
	}
}

func TestKeyRules(t *testing.T) {
	h := newIdemHarness(t, nil, "", nil)
	h.send(t, "send", "k-1", `{"mode":"ok","nonce":"n1"}`)
	tests := []struct {
		name, key, args string
		reason          string
	}{
		{"same key with other arguments", "k-1", `{"mode":"ok","nonce":"n2"}`, "different arguments"},
		{"missing key", "", `{"mode":"ok","nonce":"n3"}`, "idempotency key"},
		{"malformed key", "caf\u00e9", `{"mode":"ok","nonce":"n3"}`, "printable ASCII"},
		{"header and argument differ", "k-9", `{"mode":"ok","nonce":"n3","idempotency_key":"k-8"}`, "differ"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, env := h.send(t, "send", tt.key, tt.args)
			if env.Status != contracts.StatusBadArgs || env.Retryable || env.SideEffect != contracts.SideEffectNone || resp.StatusCode != 400 {
				t.Fatalf("envelope = %+v", env)
			}
			if !strings.Contains(env.Message, tt.reason) {
				t.Errorf("message %q lacks %q", env.Message, tt.reason)
			}
		})
	}
	if n := h.backend.count("n2") + h.backend.count("n3"); n != 0 {
		t.Errorf("rejected calls reached the backend %d times", n)
	}
	m := h.core.Metrics()
	if testutil.ToFloat64(m.IdempotencyEvents.WithLabelValues("send", EventMismatch)) != 1 || testutil.ToFloat64(m.IdempotencyEvents.WithLabelValues("send", EventMissingKey)) != 1 {
		t.Error("mismatch/missing_key events not counted")
	}
	// Read-only calls do not need a key and never touch the store.
	if _, env := h.send(t, "read", "", `{}`); env.Status == contracts.StatusBadArgs {
		t.Errorf("read-only call refused: %+v", env)
	}
}

func TestConcurrentCallsWithOneKeyRunOnce(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var store policy.IdempotencyStore
			if backend == "redis" {
				// The client toolgate serves with, not the quick-failing one
				// of the store-outage tests: 200 claims dial at once.
				opts, err := redisstate.ClientOptions("redis://" + redistest.Start(t).Addr())
				if err != nil {
					t.Fatal(err)
				}
				store = redisstate.NewStore(redis.NewClient(opts), redisstate.StoreOptions{})
			}
			b := newEffectBackend()
			b.hold = make(chan struct{})
			srv := httptest.NewServer(b)
			t.Cleanup(srv.Close)
			// 200 calls pile up as waiters on a shared machine: the tool's
			// deadline is generous so that only the rule under test, one
			// send for one key, can fail the test.
			doc := strings.Replace(strings.ReplaceAll(idemPolicy, "{{url}}", srv.URL), "timeout: 1s", "timeout: 20s", 1)
			h := newIdemHarnessDoc(t, doc, store)
			h.backend = b
			const n = 200
			envs := make([]*contracts.Envelope, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					_, envs[i] = h.send(t, "send", "same-key", `{"mode":"slow","nonce":"c1"}`)
				})
			}
			policytest.Eventually(t, "the first call to reach the backend", func() bool { return b.count("c1") == 1 })
			time.Sleep(50 * time.Millisecond) // let the others pile up as waiters
			close(b.hold)
			wg.Wait()
			replayed := 0
			for i, env := range envs {
				if env.Status != contracts.StatusOK || string(env.Data) != `{"id":"c1-1"}` {
					t.Fatalf("envelope %d = %+v", i, env)
				}
				if env.Replayed {
					replayed++
				}
			}
			if replayed != n-1 {
				t.Errorf("replayed = %d, want %d", replayed, n-1)
			}
			if got := b.count("c1"); got != 1 {
				t.Errorf("effects = %d, want exactly 1", got)
			}
		})
	}
}

func TestPreSendRejectionsAreNotStored(t *testing.T) {
	// A dead backend: nothing is sent, the key is released, a retry runs.
	b := newEffectBackend()
	dead := proxytest.RefusedURL(t)
	h := newIdemHarness(t, nil, dead, b)
	_, env := h.send(t, "send", "k-dead", `{"mode":"ok","nonce":"p1"}`)
	if env.Status != contracts.StatusUpstream || !env.Retryable || env.SideEffect != contracts.SideEffectNone {
		t.Fatalf("dead backend: %+v", env)
	}
	// The backend comes up on the same address; the retry with the same key runs.
	ln, err := net.Listen("tcp", strings.TrimPrefix(dead, "http://"))
	if err != nil {
		t.Skipf("address reused by another process: %v", err)
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	_, env = h.send(t, "send", "k-dead", `{"mode":"ok","nonce":"p1"}`)
	if env.Status != contracts.StatusOK || env.Replayed || b.count("p1") != 1 {
		t.Fatalf("retry after a pre-send failure: %+v (effects %d)", env, b.count("p1"))
	}
}

func TestUnknownOutcomes(t *testing.T) {
	tests := []struct {
		name, tool, mode string
		wantStatus       contracts.Status
		wantEffects      int // after the retry
		retryReplays     bool
	}{
		{"effect then reset is kept unknown and not resent", "send", "reset", contracts.StatusUpstream, 1, true},
		{"effect then hang past the deadline is kept unknown and not resent", "send", "hang", contracts.StatusTimeout, 1, true},
		{"with forward_header the retry is sent and the backend's dedupe holds", "send_dedupe", "reset", contracts.StatusUpstream, 1, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newIdemHarness(t, nil, "", nil)
			nonce := fmt.Sprintf("u%d", i)
			args := fmt.Sprintf(`{"mode":%q,"nonce":%q}`, tt.mode, nonce)
			_, first := h.send(t, tt.tool, "k-u", args)
			if first.Status != tt.wantStatus || first.SideEffect != contracts.SideEffectUnknown {
				t.Fatalf("first = %+v", first)
			}
			if first.Retryable != (tt.tool == "send_dedupe") {
				t.Errorf("retryable = %v", first.Retryable)
			}
			_, again := h.send(t, tt.tool, "k-u", args)
			if tt.retryReplays {
				if !again.Replayed || again.SideEffect != contracts.SideEffectUnknown || again.Status != first.Status {
					t.Errorf("retry = %+v, want the unknown record replayed", again)
				}
			} else if again.Status != contracts.StatusOK || again.Replayed {
				t.Errorf("retry = %+v, want it sent and answered from the backend's dedupe", again)
			}
			if got := h.backend.count(nonce); got != tt.wantEffects {
				t.Errorf("effects = %d, want %d", got, tt.wantEffects)
			}
			if tt.tool == "send_dedupe" {
				h.backend.mu.Lock()
				keys := strings.Join(h.backend.keys, ",")
				h.backend.mu.Unlock()
				if keys != "k-u,k-u" {
					t.Errorf("forwarded keys = %q, want the same key twice", keys)
				}
			}
		})
	}
}

func TestStoreUnavailableFailsClosed(t *testing.T) {
	srv := redistest.Start(t)
	store := newRedisStore(t, srv)
	h := newIdemHarness(t, store, "", nil)
	srv.Stop()
	resp, env := h.send(t, "send", "k-down", `{"mode":"ok","nonce":"s1"}`)
	if env.Status != contracts.StatusUpstream || !env.Retryable || env.SideEffect != contracts.SideEffectNone || resp.StatusCode != 503 {
		t.Fatalf("store down: %d %+v", resp.StatusCode, env)
	}
	if h.backend.count("s1") != 0 {
		t.Error("a side-effecting call ran without the store")
	}
	if err := h.core.Ping(context.Background()); err == nil {
		t.Error("Ping succeeded with the store down")
	}
	// Read-only calls do not touch the store.
	if _, env := h.send(t, "read", "", `{}`); env.Status == contracts.StatusUpstream && env.Message == "" {
		t.Errorf("read-only call: %+v", env)
	}
	srv.Restart()
	policytest.Eventually(t, "the store to come back", func() bool { return h.core.Ping(context.Background()) == nil })
	if _, env := h.send(t, "send", "k-down", `{"mode":"ok","nonce":"s1"}`); env.Status != contracts.StatusOK {
		t.Fatalf("after restart: %+v", env)
	}
}

func TestTwoInstancesOnOneRedisRunOnce(t *testing.T) {
	srv := redistest.Start(t)
	b := newEffectBackend()
	b.hold = make(chan struct{})
	backend := httptest.NewServer(b)
	t.Cleanup(backend.Close)
	a := newIdemHarness(t, newRedisStore(t, srv), backend.URL, b)
	c := newIdemHarness(t, newRedisStore(t, srv), backend.URL, b)
	const n = 40
	envs := make([]*contracts.Envelope, n)
	var wg sync.WaitGroup
	for i := range n {
		h := a
		if i%2 == 1 {
			h = c
		}
		wg.Go(func() { _, envs[i] = h.send(t, "send", "shared", `{"mode":"slow","nonce":"r1"}`) })
	}
	policytest.Eventually(t, "the first call", func() bool { return b.count("r1") == 1 })
	time.Sleep(50 * time.Millisecond)
	close(b.hold)
	wg.Wait()
	for i, env := range envs {
		if env.Status != contracts.StatusOK || string(env.Data) != `{"id":"r1-1"}` {
			t.Fatalf("envelope %d = %+v", i, env)
		}
	}
	if got := b.count("r1"); got != 1 {
		t.Errorf("effects = %d across two instances, want 1", got)
	}
}

func TestInstanceStoppedMidCallResolvesTheKey(t *testing.T) {
	srv := redistest.Start(t)
	b := newEffectBackend()
	b.hold = make(chan struct{})
	backend := httptest.NewServer(b)
	t.Cleanup(backend.Close)
	store := newRedisStore(t, srv)
	a := newIdemHarness(t, store, backend.URL, b)
	c := newIdemHarness(t, newRedisStore(t, srv), backend.URL, b)

	// Instance a claims the key and sends; then it dies: its store
	// connection goes away before it can record the result.
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest(http.MethodPost, a.front.URL+"/v1/tools/send", strings.NewReader(`{"mode":"slow","nonce":"d1"}`))
		req.Header.Set("Idempotency-Key", "dies")
		resp, err := a.front.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	policytest.Eventually(t, "the call to reach the backend", func() bool { return b.count("d1") == 1 })
	store.Close()
	close(b.hold)
	<-done

	// The other instance: the key is held until the lease (1s timeout + 5s
	// margin) runs out, then it resolves as unknown, never as a second send.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, env := c.send(t, "send", "dies", `{"mode":"slow","nonce":"d1"}`)
		if env.Status != contracts.StatusTimeout || env.SideEffect != contracts.SideEffectUnknown {
			t.Fatalf("envelope = %+v", env)
		}
		if env.Replayed {
			break // the record resolved as unknown
		}
		if time.Now().After(deadline) {
			t.Fatal("the key never resolved")
		}
	}
	if got := b.count("d1"); got != 1 {
		t.Errorf("effects = %d, want at most one", got)
	}
}
