package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/policytest"
)

// These tests rewrite the policy file in place while calls run, the way a
// careless writer does: truncate, write part, pause, write the rest. The
// part written first is a valid policy without its access section (or
// without access.default), which means "allow everyone": a caller the
// policy denies must never be let through, whatever toolgate reads when.

// accessSection denies callers the policy does not list; the default
// comes last, so a cut can fall between the callers and it.
const accessSection = `access:
  callers:
    ops-agent: {tools: ["*"]}
  default: deny
`

// effectBackend is a notification backend that counts what it was asked to
// do per text.
type effectBackend struct {
	mu    sync.Mutex
	texts map[string]int
}

func (b *effectBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Text string `json:"text"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	b.mu.Lock()
	b.texts[body.Text]++
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"n1"}`)
}

func (b *effectBackend) count(text string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.texts[text]
}

// accessLoad calls send_notification continuously as an unlisted caller,
// which must always be forbidden, and as ops-agent, which must succeed.
type accessLoad struct {
	unlisted, ops, violations atomic.Int64
	mu                        sync.Mutex
	first                     []string
	stop                      func()
}

func startAccessLoad(ts *testServer) *accessLoad {
	l := &accessLoad{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	fail := func(format string, args ...any) {
		l.violations.Add(1)
		l.mu.Lock()
		if len(l.first) < 5 {
			l.first = append(l.first, fmt.Sprintf(format, args...))
		}
		l.mu.Unlock()
	}
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("u%d-%d", w, i)
				a, err := callTool(client, ts.agentURL, "send_notification", `{"user_id":"bob","text":"unlisted"}`, "Idempotency-Key", key)
				l.unlisted.Add(1)
				if err != nil || a.env.Status != contracts.StatusForbidden || a.env.SideEffect != contracts.SideEffectNone {
					fail("unlisted caller: %v %s", err, a.raw)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			a, err := callTool(client, ts.agentURL, "send_notification", `{"user_id":"bob","text":"ops"}`,
				"Idempotency-Key", fmt.Sprintf("ops-%d", i), "X-Toolgate-Caller", "ops-agent")
			l.ops.Add(1)
			if err != nil || a.env.Status != contracts.StatusOK {
				fail("ops-agent: %v %s", err, a.raw)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	var once sync.Once
	l.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			client.CloseIdleConnections()
		})
	}
	return l
}

// writeInPlace rewrites path in place: truncate, write first, pause, write
// rest.
func writeInPlace(t *testing.T, path, first, rest string, pause time.Duration) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if _, err := f.WriteString(rest); err != nil {
		t.Fatal(err)
	}
}

// TestHalfWrittenPolicyNeverServesACall: the file is cut where the rest
// would deny the caller (before access, or before access.default), the
// writer pauses longer than the old 200ms debounce, then finishes. No
// call of the unlisted caller is ever let through, and the whole file is
// loaded in the end. A pause shorter than the settle window is never read
// at all; a longer one is read, and refused, since it would open access
// without saying so.
func TestHalfWrittenPolicyNeverServesACall(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out settle windows and pauses between writes (about 20s)")
	}
	for _, tc := range []struct {
		name  string
		cut   string // where the first write stops: the text it ends before
		pause time.Duration
	}{
		{"a pause shorter than the settle window, cut before access", "access:", 600 * time.Millisecond},
		{"a pause shorter than the settle window, cut before access.default", "  default: deny", 600 * time.Millisecond},
		{"a pause longer than the settle window, cut before access.default", "  default: deny", 2*config.SettleWindow + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eb := &effectBackend{texts: map[string]int{}}
			notify := httptest.NewServer(eb)
			defer notify.Close()
			b := startBackends(t)
			params := b.params("10s")
			params.Notify = notify.URL
			v1 := testPolicy(params) + accessSection
			params.Extra = true
			v2 := testPolicy(params) + accessSection
			path := filepath.Join(policytest.RealTempDir(t), "policy.yaml")
			policytest.WriteFile(t, path, v1)
			ts := startServer(t, path, serverOptions{watch: true, settle: config.SettleWindow})

			load := startAccessLoad(ts)
			defer load.stop()
			policytest.Eventually(t, "calls before the rewrite", func() bool { return load.unlisted.Load() > 5 && load.ops.Load() > 2 })

			i := strings.Index(v2, tc.cut)
			writeInPlace(t, path, v2[:i], v2[i:], tc.pause)
			policytest.Eventually(t, "the whole new policy loaded", func() bool { return ts.config().Generation == 2 })
			before := load.unlisted.Load()
			policytest.Eventually(t, "calls after the reload", func() bool { return load.unlisted.Load() > before+5 })
			load.stop()

			if n := load.violations.Load(); n > 0 {
				t.Errorf("%d of %d calls broke the policy, first: %q", n, load.unlisted.Load()+load.ops.Load(), load.first)
			}
			if n := eb.count("unlisted"); n > 0 {
				t.Errorf("the backend acted %d times for the unlisted caller", n)
			}
			if c := ts.config(); !strings.Contains(strings.Join(c.Tools, ","), "find_articles") {
				t.Errorf("the whole file was not loaded: tools %v", c.Tools)
			}
			t.Logf("%d unlisted and %d ops-agent calls; %v reload failures", load.unlisted.Load(), load.ops.Load(),
				ts.metric("toolgate_config_reloads_total", "result", "failure"))
		})
	}
}

// TestReloadThatWouldOpenAccessIsRefused: a complete policy that drops the
// access section (or the default deny) is refused on reload, however it was
// written; saying access.default: allow opens access on purpose.
func TestReloadThatWouldOpenAccessIsRefused(t *testing.T) {
	b := startBackends(t)
	params := b.params("10s")
	head := testPolicy(params)
	path := filepath.Join(policytest.RealTempDir(t), "policy.yaml")
	policytest.WriteFile(t, path, head+accessSection)
	ts := startServer(t, path, serverOptions{})
	for _, tc := range []struct {
		name, doc string
	}{
		{"no access section", head},
		{"callers without the default deny", head + "access:\n  callers:\n    ops-agent: {tools: [\"*\"]}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policytest.ReplaceFile(t, path, tc.doc)
			code, body := ts.postReload()
			if code != http.StatusBadRequest || !strings.Contains(body, "access: reload refused") || !strings.Contains(body, "access.default: allow") {
				t.Fatalf("POST /-/reload: %d %s", code, body)
			}
			ts.mustCall("send_notification", `{"user_id":"bob","text":"x"}`, contracts.StatusForbidden, "Idempotency-Key", "k-"+tc.name)
		})
	}
	t.Run("an explicit default allow is taken", func(t *testing.T) {
		policytest.ReplaceFile(t, path, head+"access:\n  default: allow\n")
		if code, body := ts.postReload(); code != http.StatusOK {
			t.Fatalf("POST /-/reload: %d %s", code, body)
		}
		ts.mustCall("send_notification", `{"user_id":"bob","text":"x"}`, contracts.StatusOK, "Idempotency-Key", "k-open")
	})
}

// TestRecoveredReloadIsLoggedAtInfo: after a broken file, the next good
// reload says so at info, even when the good file is the running policy.
func TestRecoveredReloadIsLoggedAtInfo(t *testing.T) {
	b := startBackends(t)
	params := b.params("10s")
	good := testPolicy(params)
	path := filepath.Join(policytest.RealTempDir(t), "policy.yaml")
	policytest.WriteFile(t, path, good)
	ts := startServer(t, path, serverOptions{})
	broken := params
	broken.Broken = true
	for _, tc := range []struct {
		name, fixed string
		want        string
	}{
		{"back to the running policy", good, `"msg":"policy reload recovered`},
		{"on to a new policy", testPolicy(policyParams{Search: params.Search, Notify: params.Notify, SlowTimeout: "9s"}), `"recovered":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policytest.ReplaceFile(t, path, testPolicy(broken))
			if code, _ := ts.postReload(); code != http.StatusBadRequest {
				t.Fatalf("the broken policy: %d", code)
			}
			policytest.ReplaceFile(t, path, tc.fixed)
			if code, body := ts.postReload(); code != http.StatusOK {
				t.Fatalf("the fixed policy: %d %s", code, body)
			}
			var found bool
			for line := range strings.SplitSeq(ts.logs.String(), "\n") {
				if strings.Contains(line, tc.want) && strings.Contains(line, `"level":"INFO"`) {
					found = true
				}
			}
			if !found {
				t.Errorf("no info line with %s in the log", tc.want)
			}
		})
	}
}
