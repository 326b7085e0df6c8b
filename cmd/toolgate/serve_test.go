package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/policytest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

func TestMain(m *testing.M) {
	if os.Getenv(runAsToolgate) == "1" {
		// A copy of this test binary runs as toolgate (kube_test.go).
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

// policyParams fill testPolicy.
type policyParams struct {
	Search, Notify string // backend URLs
	// SlowTimeout is slow_search's timeout; the search backend takes
	// slowDelay to answer q=slow.
	SlowTimeout string
	// Extra adds the tool find_articles.
	Extra bool
	// AuthHeader, when set, is the search upstream's Authorization value.
	AuthHeader string
	// Broken appends an unknown key: the file is refused at brokenLine:1.
	Broken bool
}

// slowDelay is how long the test search backend takes to answer q=slow.
const slowDelay = 300 * time.Millisecond

// queryHang is a search the test backend never answers. Its timeout shows
// which timeout a call ran with, whatever the machine's speed: the message
// names it.
const queryHang = "hang"

// mustTimeOutAfter checks that slow_search runs with the given timeout.
func (ts *testServer) mustTimeOutAfter(timeout string) {
	ts.t.Helper()
	a := ts.mustCall("slow_search", `{"q":"`+queryHang+`"}`, contracts.StatusTimeout)
	if !strings.Contains(a.env.Message, "within "+timeout+";") {
		ts.t.Errorf("slow_search did not run with timeout %s: %s", timeout, a.env.Message)
	}
}

// testPolicy is a policy over the example backends, on ephemeral loopback
// ports. (admin_listen is spelled :00 because the policy refuses two equal
// listen strings, though two :0 ports never collide.)
func testPolicy(p policyParams) string {
	var b strings.Builder
	fmt.Fprintf(&b, `version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:00"
upstreams:
  search:
    url: %s
    timeout: 10s
`, p.Search)
	if p.AuthHeader != "" {
		fmt.Fprintf(&b, "    headers: {Authorization: %q}\n", p.AuthHeader)
	}
	fmt.Fprintf(&b, `  notify:
    url: %s
    timeout: 10s
tools:
  search_articles:
    description: Search articles by keyword.
    upstream: search
    args: {type: object, required: [q], properties: {q: {type: string}}}
    request: {method: GET, path: /api/search, query: {q: q}}
    response:
      data: '{"items": body.results, "total": body.total}'
      empty: size(body.results) == 0
  slow_search:
    description: Search articles by keyword, patiently.
    upstream: search
    timeout: %s
    args: {type: object, required: [q], properties: {q: {type: string}}}
    request: {method: GET, path: /api/search, query: {q: q}}
  send_notification:
    description: Send a notification to a user.
    upstream: notify
    side_effect: true
    idempotency: {forward_header: Idempotency-Key}
    args: {type: object, required: [user_id, text], properties: {user_id: {type: string}, text: {type: string}}}
    request: {method: POST, path: "/v1/users/{user_id}/notifications", body: {text: text}}
`, p.Notify, p.SlowTimeout)
	if p.Extra {
		b.WriteString(`  find_articles:
    description: Find articles by keyword.
    upstream: search
    args: {type: object, required: [q], properties: {q: {type: string}}}
    request: {method: GET, path: /api/search, query: {q: q}}
`)
	}
	if p.AuthHeader != "" {
		// The search backend's static credential serves any caller.
		b.WriteString("access: {shared_credentials: [search]}\n")
	}
	if p.Broken {
		b.WriteString("bogus: true\n")
	}
	return b.String()
}

// brokenLine is the line of the unknown key in a Broken policy.
func brokenLine(p policyParams) int {
	p.Broken = false
	return strings.Count(testPolicy(p), "\n") + 1
}

// serverOptions configure startServer.
type serverOptions struct {
	watch             bool
	drainDelay, grace time.Duration
	// settle is the policy loader's settle window; zero means a short one
	// (testSettle), for tests that are not about half-written files.
	settle time.Duration
	// extproc runs the daemon `toolgate extproc` runs (its gRPC front, its
	// loading rule) in place of serve's.
	extproc bool
	// hup, when not nil, stands for SIGHUP.
	hup chan os.Signal
	// listen and admin are the -listen and -admin flags.
	listen, admin string
}

// testSettle is the settle window of tests whose writers are atomic or
// write a file in one go.
const testSettle = 100 * time.Millisecond

// testServer is the daemon `toolgate serve` (or extproc) runs, run
// in-process with a context instead of signals.
type testServer struct {
	*daemon
	t        *testing.T
	opts     serverOptions
	logs     *proxytest.LogBuffer
	client   *http.Client
	agentURL string // serve's agent port; extproc's gRPC address is frontAddr
	adminURL string
	stop     func() error // cancels the context and returns run's error, once
}

func startServer(t *testing.T, path string, opts serverOptions) *testServer {
	t.Helper()
	if opts.grace == 0 {
		opts.grace = 10 * time.Second
	}
	logs := &proxytest.LogBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	flags := daemonFlags{configPath: path, listen: opts.listen, admin: opts.admin}
	name, front := "toolgate", newAgentFront
	if opts.extproc {
		flags.byRoute, flags.listen = true, cmp.Or(opts.listen, "127.0.0.1:0")
		name, front = "toolgate extproc", newExtprocFront
	}
	var watcher *config.Watcher
	if opts.watch {
		w, err := config.NewWatcher(path, logger)
		if err != nil {
			t.Fatal(err)
		}
		watcher = w
	}
	lo := flags.loaderOptions()
	lo.Settle = cmp.Or(opts.settle, testSettle)
	loader := config.NewLoader(path, lo)
	snap, err := loader.Load()
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDaemon(snap, daemonOptions{name: name, logger: logger, source: loader, watcher: watcher, front: front,
		drainDelay: opts.drainDelay, grace: opts.grace})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.run(ctx, opts.hup) }()
	ts := &testServer{
		daemon:   d,
		t:        t,
		opts:     opts,
		logs:     logs,
		client:   &http.Client{Timeout: 30 * time.Second},
		agentURL: "http://" + d.frontAddr(),
		adminURL: "http://" + d.adminAddr(),
	}
	var stopped atomic.Bool
	ts.stop = func() error {
		if stopped.Swap(true) {
			return nil
		}
		cancel()
		err := <-served
		ts.client.CloseIdleConnections()
		return err
	}
	t.Cleanup(func() {
		if err := ts.stop(); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return ts
}

// answer is one call's answer, checked to be a well-formed envelope.
type answer struct {
	code   int
	header http.Header
	env    contracts.Envelope
	raw    string
}

// call posts a tool call. The error says what was wrong with the answer if
// it was not a well-formed envelope for that tool.
func (ts *testServer) call(tool, args string, header ...string) (answer, error) {
	return callTool(ts.client, ts.agentURL, tool, args, header...)
}

func callTool(client *http.Client, agentURL, tool, args string, header ...string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, agentURL+"/v1/tools/"+tool, strings.NewReader(args))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{code: resp.StatusCode, header: resp.Header, raw: string(body)}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a.env); err != nil {
		return a, fmt.Errorf("%s: answer %d is not an envelope: %v: %s", tool, resp.StatusCode, err, body)
	}
	env := &a.env
	switch {
	case resp.Header.Get("Content-Type") != "application/json":
		return a, fmt.Errorf("%s: content type %q", tool, resp.Header.Get("Content-Type"))
	case resp.Header.Get("Toolgate-Status") != string(env.Status):
		return a, fmt.Errorf("%s: Toolgate-Status %q, envelope %q", tool, resp.Header.Get("Toolgate-Status"), env.Status)
	case env.Tool != tool:
		return a, fmt.Errorf("%s: envelope names tool %q", tool, env.Tool)
	case env.CallID == "" || env.Message == "":
		return a, fmt.Errorf("%s: envelope lacks call_id or message: %s", tool, body)
	case !strings.HasPrefix(env.Observation, "["+strings.ToUpper(string(env.Status))+"] "):
		return a, fmt.Errorf("%s: observation %q does not start with the status", tool, env.Observation)
	}
	return a, nil
}

// mustCall makes a call that must answer with status want.
func (ts *testServer) mustCall(tool, args string, want contracts.Status, header ...string) answer {
	ts.t.Helper()
	a, err := ts.call(tool, args, header...)
	if err != nil {
		ts.t.Fatal(err)
	}
	if a.env.Status != want {
		ts.t.Fatalf("%s %s: status %s, want %s: %s", tool, args, a.env.Status, want, a.raw)
	}
	return a
}

// get fetches an admin path.
func (ts *testServer) get(path string) (int, string) {
	ts.t.Helper()
	resp, err := ts.client.Get(ts.adminURL + path)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// postReload is POST /-/reload.
func (ts *testServer) postReload() (int, string) {
	ts.t.Helper()
	resp, err := ts.client.Post(ts.adminURL+"/-/reload", "", nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// configView is the body of GET /v1/config.
type configView struct {
	Generation int64    `json:"generation"`
	Checksum   string   `json:"checksum"`
	Tools      []string `json:"tools"`
	Sources    []string `json:"sources"`
}

func (ts *testServer) config() configView {
	ts.t.Helper()
	code, body := ts.get("/v1/config")
	if code != http.StatusOK {
		ts.t.Fatalf("GET /v1/config: %d %s", code, body)
	}
	var v configView
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		ts.t.Fatalf("GET /v1/config: %v: %s", err, body)
	}
	return v
}

// metric reads one sample from the server's registry: a counter or gauge
// whose labels include the given name, value pairs.
func (ts *testServer) metric(name string, labels ...string) float64 {
	ts.t.Helper()
	families, err := ts.registry.Gather()
	if err != nil {
		ts.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	ts.t.Fatalf("no sample %s%v", name, labels)
	return 0
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// backends are the example search and notification services.
type backends struct {
	search, notify *httptest.Server
	authSeen       atomic.Value // the last Authorization header the search backend got
}

func startBackends(t *testing.T) *backends {
	b := &backends{}
	search := examples.NewSearchBackend(examples.SearchOptions{SlowDelay: slowDelay})
	b.search = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.authSeen.Store(r.Header.Get("Authorization"))
		if r.URL.Query().Get("q") == queryHang {
			<-r.Context().Done()
			return
		}
		search.ServeHTTP(w, r)
	}))
	b.notify = httptest.NewServer(examples.NewNotifyBackend(examples.NotifyOptions{}))
	t.Cleanup(func() {
		b.search.Close()
		b.notify.Close()
	})
	return b
}

func (b *backends) params(slowTimeout string) policyParams {
	return policyParams{Search: b.search.URL, Notify: b.notify.URL, SlowTimeout: slowTimeout}
}

// loadGenerator calls tools continuously from several goroutines and keeps
// every answer that was not what the policy promises.
type loadGenerator struct {
	calls    atomic.Int64
	mu       sync.Mutex
	failures []string
	stop     func()
}

func startLoad(ts *testServer, workers int) *loadGenerator {
	g := &loadGenerator{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for w := range workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				g.check(callTool(client, ts.agentURL, "search_articles", `{"q":"go"}`))
				key := fmt.Sprintf("load-%d-%d", w, i)
				a, err := callTool(client, ts.agentURL, "send_notification", `{"user_id":"alice","text":"hi"}`, "Idempotency-Key", key)
				if err == nil && a.env.SideEffect != contracts.SideEffectDone {
					err = fmt.Errorf("send_notification: side_effect %s: %s", a.env.SideEffect, a.raw)
				}
				g.check(a, err)
			}
		})
	}
	g.stop = func() {
		cancel()
		wg.Wait()
		client.CloseIdleConnections()
	}
	return g
}

func (g *loadGenerator) check(a answer, err error) {
	g.calls.Add(1)
	if err == nil && (a.code != http.StatusOK || a.env.Status != contracts.StatusOK) {
		err = fmt.Errorf("%s: %d %s", a.env.Tool, a.code, a.raw)
	}
	if err != nil {
		g.mu.Lock()
		g.failures = append(g.failures, err.Error())
		g.mu.Unlock()
	}
}

// policyWriter publishes a new version of the policy.
type policyWriter interface {
	path() string                       // the -config path
	source() string                     // the file name errors are reported against
	write(t *testing.T, content string) // publish a version
}

// fileWriter edits a plain file, alternately in place and by rename.
type fileWriter struct {
	file string
	n    int
}

func (w *fileWriter) path() string   { return w.file }
func (w *fileWriter) source() string { return w.file }
func (w *fileWriter) write(t *testing.T, content string) {
	w.n++
	if w.n%2 == 0 {
		policytest.WriteFile(t, w.file, content)
	} else {
		policytest.ReplaceFile(t, w.file, content)
	}
}

// configMapWriter updates a ConfigMap-style directory as the kubelet does.
type configMapWriter struct{ cm *policytest.ConfigMap }

func (w *configMapWriter) path() string   { return w.cm.Dir }
func (w *configMapWriter) source() string { return filepath.Join(w.cm.Dir, "policy.yaml") }
func (w *configMapWriter) write(t *testing.T, content string) {
	w.cm.Update(t, map[string]string{"policy.yaml": content})
}

// TestReloadUnderLoad changes the policy while calls run continuously: a
// tool is added, a timeout changed, a broken file written, a good one
// restored. No call fails, each change takes effect, the broken file is
// refused and reported, and state survives.
func TestReloadUnderLoad(t *testing.T) {
	writers := map[string]func(t *testing.T, first string) policyWriter{
		"a policy file edited in place and replaced": func(t *testing.T, first string) policyWriter {
			w := &fileWriter{file: filepath.Join(policytest.RealTempDir(t), "policy.yaml")}
			policytest.WriteFile(t, w.file, first)
			return w
		},
		"a ConfigMap directory updated by the kubelet": func(t *testing.T, first string) policyWriter {
			return &configMapWriter{cm: policytest.NewConfigMap(t, map[string]string{"policy.yaml": first})}
		},
	}
	for name, newWriter := range writers {
		t.Run(name, func(t *testing.T) {
			b := startBackends(t)
			v1 := b.params("100ms")
			pw := newWriter(t, testPolicy(v1))
			ts := startServer(t, pw.path(), serverOptions{watch: true})

			// Before any change.
			ts.mustTimeOutAfter("100ms")
			ts.mustCall("find_articles", `{"q":"go"}`, contracts.StatusNotFound)
			ts.mustCall("send_notification", `{"user_id":"bob","text":"before"}`, contracts.StatusOK, "Idempotency-Key", "before-reloads")
			if c := ts.config(); c.Generation != 1 || !slices.Equal(c.Sources, []string{pw.source()}) {
				t.Fatalf("initial /v1/config: %+v", c)
			}

			load := startLoad(ts, 4)
			defer load.stop()

			waitGeneration := func(gen int64) configView {
				t.Helper()
				var c configView
				policytest.Eventually(t, fmt.Sprintf("generation %d", gen), func() bool {
					c = ts.config()
					return c.Generation >= gen
				})
				if c.Generation != gen {
					t.Fatalf("generation %d, want %d", c.Generation, gen)
				}
				if g := ts.metric("toolgate_config_generation"); g != float64(gen) {
					t.Errorf("toolgate_config_generation %v, want %d", g, gen)
				}
				if ok := ts.metric("toolgate_config_last_reload_successful"); ok != 1 {
					t.Errorf("toolgate_config_last_reload_successful %v after a good reload", ok)
				}
				return c
			}

			// A tool added.
			v2 := v1
			v2.Extra = true
			pw.write(t, testPolicy(v2))
			c := waitGeneration(2)
			if !slices.Contains(c.Tools, "find_articles") {
				t.Errorf("tools after adding one: %v", c.Tools)
			}
			ts.mustCall("find_articles", `{"q":"go"}`, contracts.StatusOK)
			ts.mustTimeOutAfter("100ms")

			// A timeout changed: the slow search now has time to answer.
			v3 := v2
			v3.SlowTimeout = "10s"
			pw.write(t, testPolicy(v3))
			waitGeneration(3)
			ts.mustCall("slow_search", `{"q":"slow"}`, contracts.StatusOK)

			// A reload of an unchanged policy succeeds and changes nothing.
			successes := ts.metric("toolgate_config_reloads_total", "result", "success")
			if code, body := ts.postReload(); code != http.StatusOK {
				t.Fatalf("POST /-/reload of an unchanged policy: %d %s", code, body)
			}
			if got := ts.metric("toolgate_config_reloads_total", "result", "success"); got != successes+1 {
				t.Errorf("reloads_total{success} %v, want %v", got, successes+1)
			}
			waitGeneration(3)

			// A broken file: refused, reported, the last good policy stays.
			failures := ts.metric("toolgate_config_reloads_total", "result", "failure")
			broken := v3
			broken.Broken = true
			pw.write(t, testPolicy(broken))
			policytest.Eventually(t, "the broken policy refused", func() bool {
				return ts.metric("toolgate_config_reloads_total", "result", "failure") > failures
			})
			if ok := ts.metric("toolgate_config_last_reload_successful"); ok != 0 {
				t.Errorf("toolgate_config_last_reload_successful %v after a refused policy", ok)
			}
			code, body := ts.postReload()
			want := fmt.Sprintf("%s:%d:1: bogus: unknown key", pw.source(), brokenLine(broken))
			if code != http.StatusBadRequest || !strings.HasPrefix(body, want) {
				t.Errorf("POST /-/reload of a broken policy: %d %q, want 400 %q…", code, body, want)
			}
			if !strings.Contains(ts.logs.String(), want) {
				t.Errorf("the log does not report %q", want)
			}
			if c := ts.config(); c.Generation != 3 {
				t.Errorf("generation %d after a refused policy, want 3", c.Generation)
			}
			ts.mustCall("slow_search", `{"q":"slow"}`, contracts.StatusOK)
			ts.mustCall("find_articles", `{"q":"go"}`, contracts.StatusOK)

			// Fixed: the tool's timeout is short again.
			pw.write(t, testPolicy(v2))
			waitGeneration(4)
			ts.mustTimeOutAfter("100ms")

			load.stop()
			if n := load.calls.Load(); n < 8 {
				t.Errorf("only %d calls ran during the reloads", n)
			}
			for i, f := range load.failures {
				if i == 10 {
					t.Errorf("… and %d more", len(load.failures)-10)
					break
				}
				t.Errorf("call failed during reloads: %s", f)
			}
			t.Logf("%d calls during the reloads", load.calls.Load())

			// Idempotency state lives in the core, across reloads.
			a := ts.mustCall("send_notification", `{"user_id":"bob","text":"before"}`, contracts.StatusOK, "Idempotency-Key", "before-reloads")
			if !a.env.Replayed || a.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("a key used before the reloads was not replayed: %s", a.raw)
			}
		})
	}
}

// gatedBackend holds the requests it is told to until released, and counts
// them as they arrive.
type gatedBackend struct {
	next    http.Handler
	hold    func(*http.Request) bool
	arrived atomic.Int64
	release chan struct{}
}

func newGatedBackend(next http.Handler, hold func(*http.Request) bool) *gatedBackend {
	return &gatedBackend{next: next, hold: hold, release: make(chan struct{})}
}

func (g *gatedBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.hold(r) {
		g.arrived.Add(1)
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// TestCallInFlightFinishesOnItsSnapshot: a reload that moves a tool to
// another upstream and shortens its timeout does not touch the call that
// started before it.
func TestCallInFlightFinishesOnItsSnapshot(t *testing.T) {
	answerAs := func(id string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("q") == queryHang {
				<-r.Context().Done()
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"results":[{"id":%q}],"total":1}`, id)
		})
	}
	old := newGatedBackend(answerAs("old"), func(r *http.Request) bool { return r.URL.Query().Get("q") == "held" })
	oldSrv := httptest.NewServer(old)
	defer oldSrv.Close()
	defer close(old.release)
	newSrv := httptest.NewServer(answerAs("new"))
	defer newSrv.Close()
	notify := httptest.NewServer(examples.NewNotifyBackend(examples.NotifyOptions{}))
	defer notify.Close()

	path := filepath.Join(t.TempDir(), "policy.yaml")
	policytest.WriteFile(t, path, testPolicy(policyParams{Search: oldSrv.URL, Notify: notify.URL, SlowTimeout: "10s"}))
	ts := startServer(t, path, serverOptions{})

	held := make(chan answer, 1)
	go func() {
		a, err := ts.call("slow_search", `{"q":"held"}`)
		if err != nil {
			t.Error(err)
		}
		held <- a
	}()
	policytest.Eventually(t, "the call to reach the old backend", func() bool { return old.arrived.Load() == 1 })

	policytest.WriteFile(t, path, testPolicy(policyParams{Search: newSrv.URL, Notify: notify.URL, SlowTimeout: "100ms"}))
	if code, body := ts.postReload(); code != http.StatusOK {
		t.Fatalf("reload: %d %s", code, body)
	}
	// New calls run on the new policy: the new upstream, the short timeout.
	if a := ts.mustCall("slow_search", `{"q":"x"}`, contracts.StatusOK); !strings.Contains(string(a.env.Data), `"new"`) {
		t.Errorf("a new call answered from %s", a.env.Data)
	}
	ts.mustTimeOutAfter("100ms")
	// The held call has now outlived the new timeout; it finishes on the
	// old one, from the old upstream.
	time.Sleep(300 * time.Millisecond)
	old.release <- struct{}{}
	a := <-held
	if a.env.Status != contracts.StatusOK || !strings.Contains(string(a.env.Data), `"old"`) {
		t.Errorf("the call in flight answered %s", a.raw)
	}
}

// TestSecretsStayOutOfConfigLogsAndMetrics: a ${VAR} secret in an upstream
// header reaches the backend and nothing else.
func TestSecretsStayOutOfConfigLogsAndMetrics(t *testing.T) {
	const secret = "tg-secret-7f3a9c1e5b"
	t.Setenv("TOOLGATE_TEST_TOKEN", secret)
	b := startBackends(t)
	p := b.params("10s")
	p.AuthHeader = "Bearer ${TOOLGATE_TEST_TOKEN}"
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policytest.WriteFile(t, path, testPolicy(p))
	ts := startServer(t, path, serverOptions{watch: true})

	var seen []string
	record := func(a answer) { seen = append(seen, a.raw) }
	record(ts.mustCall("search_articles", `{"q":"go"}`, contracts.StatusOK))
	record(ts.mustCall("search_articles", `{"q":"crash"}`, contracts.StatusUpstream))
	if got, _ := b.authSeen.Load().(string); got != "Bearer "+secret {
		t.Fatalf("the backend got Authorization %q", got)
	}
	// A good reload and a refused one, both logged.
	p.Extra = true
	policytest.WriteFile(t, path, testPolicy(p))
	policytest.Eventually(t, "the reload", func() bool { return ts.config().Generation == 2 })
	p.Broken = true
	policytest.WriteFile(t, path, testPolicy(p))
	policytest.Eventually(t, "the refused reload", func() bool {
		return ts.metric("toolgate_config_reloads_total", "result", "failure") >= 1
	})
	_, reloadBody := ts.postReload()
	seen = append(seen, reloadBody)
	_, configBody := ts.get("/v1/config")
	_, metricsBody := ts.get("/metrics")
	seen = append(seen, configBody, metricsBody, ts.logs.String())
	for _, s := range seen {
		if strings.Contains(s, secret) {
			t.Errorf("the secret leaked into:\n%s", s)
		}
	}
	if !strings.Contains(ts.logs.String(), "policy reloaded") || !strings.Contains(ts.logs.String(), "bogus: unknown key") {
		t.Errorf("the log lacks the reloads:\n%s", ts.logs.String())
	}
}

// TestShutdownCancelsCallsLeftAfterGrace: calls still running when the
// grace period ends are cancelled, answer with their envelope and mark
// their idempotency records unknown.
func TestShutdownCancelsCallsLeftAfterGrace(t *testing.T) {
	var arrived atomic.Int64
	hang := func(w http.ResponseWriter, r *http.Request) {
		// Reading the body to its end lets the server notice when the
		// client goes away.
		_, _ = io.Copy(io.Discard, r.Body)
		arrived.Add(1)
		<-r.Context().Done()
	}
	search := httptest.NewServer(http.HandlerFunc(hang))
	defer search.Close()
	notify := httptest.NewServer(http.HandlerFunc(hang))
	defer notify.Close()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policytest.WriteFile(t, path, testPolicy(policyParams{Search: search.URL, Notify: notify.URL, SlowTimeout: "1m"}))
	ts := startServer(t, path, serverOptions{grace: 200 * time.Millisecond})

	type result struct {
		a   answer
		err error
	}
	readOnly, sideEffect := make(chan result, 1), make(chan result, 1)
	go func() {
		a, err := ts.call("slow_search", `{"q":"go"}`)
		readOnly <- result{a, err}
	}()
	go func() {
		a, err := ts.call("send_notification", `{"user_id":"alice","text":"hi"}`, "Idempotency-Key", "cut-off")
		sideEffect <- result{a, err}
	}()
	policytest.Eventually(t, "both calls at their backends", func() bool { return arrived.Load() == 2 })
	if err := ts.stop(); err == nil {
		t.Error("serve returned nil after cutting calls off")
	}
	ro := <-readOnly
	if ro.err != nil {
		t.Fatal(ro.err)
	}
	if ro.a.env.Status != contracts.StatusUpstream || !ro.a.env.Retryable || ro.a.env.SideEffect != contracts.SideEffectNone {
		t.Errorf("read-only call cut off: %s", ro.a.raw)
	}
	se := <-sideEffect
	if se.err != nil {
		t.Fatal(se.err)
	}
	if se.a.env.SideEffect != contracts.SideEffectUnknown {
		t.Errorf("side-effecting call cut off: %s", se.a.raw)
	}
	if n := ts.metric("toolgate_idempotency_events_total", "tool", "send_notification", "event", "unknown_kept"); n != 1 {
		t.Errorf("unknown_kept events %v, want 1", n)
	}
}
