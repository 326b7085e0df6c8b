package console

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	template "github.com/toolgate/toolgate/internal/htmltemplate"
	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

// The secrets of the test policy: none of them may appear on any page.
const (
	secretToken  = "tok-0123456789abcdef"
	secretTenant = "tenant-secret-42"
)

// testPolicy has a read-only and a side-effecting tool on one backend
// whose credential and header come from ${VAR}s; {{backend}} and
// {{console}} are filled in.
const testPolicy = `version: 1
server:
  console: {{console}}
upstreams:
  api:
    url: "{{backend}}"
    headers: {X-Tenant: "${TENANT}"}
    auth: {bearer: {token: "${TOKEN}"}}
    breaker: {consecutive_failures: 2, open_for: 1m}
tools:
  search:
    description: Search the articles of tenant ${TENANT}.
    upstream: api
    cost: 0.5
    args:
      type: object
      required: [q]
      additionalProperties: false
      properties:
        q: {type: string, minLength: 1, description: "Keywords."}
        limit: {type: integer, minimum: 1, maximum: 20}
        mode: {enum: [fast, slow]}
    request: {method: GET, path: /search, query: {q: q, limit: limit}}
    response: {data: 'body'}
    errors:
      - when: status == 200 && has(body.code) && body.code == "E_NOPERM"
        status: forbidden
  notify:
    description: Send a notification.
    upstream: api
    side_effect: true
    args: {type: object, required: [text], properties: {text: {type: string}}}
    request: {method: POST, path: /notify, body: {text: text}}
access:
  shared_credentials: [api]
  callers:
    ops: {tools: ["*"], rate: {rps: 1, burst: 5}, budget: {cost: 10, per: 1h}}
`

// fixture is a console over a core whose backend counts its calls and
// answers 500 to q=crash.
type fixture struct {
	core    *proxy.Core
	console http.Handler // the admin handler, the console behind its guard
	calls   atomic.Int64
	path    string // the policy file
	reload  *config.Reloader
}

func newFixture(t *testing.T, consoleSettings string) *fixture {
	t.Helper()
	f := &fixture{}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("q") == "crash" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, `{"results":[{"id":1}],"echo":"`+r.Header.Get("Authorization")+`"}`)
	}))
	t.Cleanup(backend.Close)
	doc := strings.NewReplacer("{{backend}}", backend.URL, "{{console}}", consoleSettings).Replace(testPolicy)
	f.path = filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(f.path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOKEN": secretToken, "TENANT": secretTenant}
	loader := config.NewLoader(f.path, config.LoaderOptions{Settle: time.Nanosecond, Options: config.Options{
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}})
	snap, err := loader.Load()
	if err != nil {
		t.Fatal(err)
	}
	learner := learn.New(policy.DefaultLearnSettings(), learn.Options{})
	f.core, err = proxy.NewCore(snap, proxy.Options{Observer: learner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.core.Close)
	f.reload = config.NewReloader(snap, config.ReloaderOptions{Source: loader, Swap: f.core.Swap})
	f.console = proxy.AdminHandler(proxy.AdminOptions{
		Console: New(Options{Core: f.core, Reloader: f.reload, Learner: learner}),
		Server:  func() *policy.Server { return &f.core.Snapshot().Server },
	})
	return f
}

// get fetches a console page as a person's browser opening it does.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9090"+path, nil)
	r.Header.Set("Sec-Fetch-Site", "none")
	return f.serve(r)
}

// post submits a form of the tool's page, with the page's own token
// unless the form sets one, as a same-origin page does.
func (f *fixture) post(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	if !form.Has("token") {
		form.Set("token", f.token(t, strings.Split(path, "/")[3]))
	}
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:9090"+path, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", "http://127.0.0.1:9090")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	return f.serve(r)
}

func (f *fixture) serve(r *http.Request) (int, string) {
	w := httptest.NewRecorder()
	f.console.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

var tokenRE = regexp.MustCompile(`name="token" value="([^"]+)"`)

// token is the form token of a tool's page.
func (f *fixture) token(t *testing.T, tool string) string {
	t.Helper()
	_, page := f.get(t, "/ui/tools/"+tool)
	m := tokenRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no token on the page of %s", tool)
	}
	return m[1]
}

// noSecret fails when a page shows a secret the policy holds.
func noSecret(t *testing.T, page string) {
	t.Helper()
	for _, s := range []string{secretToken, secretTenant} {
		if strings.Contains(page, s) {
			t.Errorf("the page shows the secret %s", s)
		}
	}
}

// TestPagesShowEveryToolAndItsContract: the overview lists every tool,
// upstream and caller; a tool's page shows its whole contract, where it
// is defined and its errors rules; all of it without JavaScript.
func TestPagesShowEveryToolAndItsContract(t *testing.T) {
	f := newFixture(t, "{}")
	code, page := f.get(t, "/ui/")
	if code != http.StatusOK {
		t.Fatalf("GET /ui/: %d\n%s", code, page)
	}
	for _, want := range []string{`id="tool-search"`, `id="tool-notify"`, "Search the articles of tenant ***.", `id="upstream-api" data-breaker="closed"`,
		`id="caller-ops"`, "5.00 tokens left", "0 spent", "none since the start", "generation 1"} {
		if !strings.Contains(page, want) {
			t.Errorf("the overview does not show %q", want)
		}
	}
	noSecret(t, page)
	code, page = f.get(t, "/ui/tools/search")
	if code != http.StatusOK {
		t.Fatalf("GET /ui/tools/search: %d", code)
	}
	if !regexp.MustCompile(`/policy.yaml:11</code>`).MatchString(page) {
		t.Errorf("the tool page does not say where the tool is defined:\n%s", page[strings.Index(page, `id="origin"`):][:200])
	}
	for _, want := range []string{"Search the articles of tenant ***.", `&#34;minLength&#34;: 1`, `has(body.code) &amp;&amp; body.code == &#34;E_NOPERM&#34;`,
		"<td>forbidden</td>", "read-only", `name="arg.q"`, `type="number" step="1"`, `<option value="&#34;fast&#34;">`, "Live calls are off"} {
		if !strings.Contains(page, want) {
			t.Errorf("the tool page does not show %q", want)
		}
	}
	noSecret(t, page)
	if _, page := f.get(t, "/ui/tools/notify"); !strings.Contains(page, "idempotency_key") || strings.Contains(page, `id="live-call"`) {
		t.Errorf("the side-effecting tool's page has no idempotency key field, or a live call button")
	}
	if code, _ := f.get(t, "/ui/tools/nope"); code != http.StatusNotFound {
		t.Errorf("an unknown tool's page: %d, want 404", code)
	}
}

// TestDryRunShowsTheRequestAndWhatTheModelReads: the dry run shows the
// request with every secret masked and, given a pasted answer, the
// message and observation; a pasted answer that echoes a secret shows it
// redacted. Nothing reaches the backend.
func TestDryRunShowsTheRequestAndWhatTheModelReads(t *testing.T) {
	f := newFixture(t, "{}")
	for _, c := range []struct {
		name string
		form url.Values
		want []string
		not  []string
	}{
		{"the request alone", url.Values{"arg.q": {"go"}, "arg.limit": {"3"}},
			[]string{"GET /search?q=go&amp;limit=3 HTTP/1.1", "Authorization: Bearer ***", "X-Tenant: ***", `id="no-answer"`}, []string{`id="observation"`}},
		{"with a pasted answer", url.Values{"arg.q": {"go"}, "answer_status": {"200"}, "answer_headers": {"Content-Type: application/json"},
			"answer_body": {`{"results":[1],"leak":"` + secretToken + `"}`}},
			[]string{`id="observation">[OK]`, "[redacted]", `id="result-status">ok`}, nil},
		{"raw JSON arguments win over the fields", url.Values{"arg.q": {"fields"}, "args_json": {`{"q":"raw"}`}},
			[]string{"q=raw"}, []string{"q=fields"}},
		{"arguments the schema refuses", url.Values{"arg.limit": {"50"}, "answer_status": {"200"}, "answer_no_body": {"1"}},
			[]string{`id="not-sent"`, `id="result-status">bad_args`}, nil},
		{"a pasted answer the rules classify", url.Values{"arg.q": {"go"}, "answer_status": {"200"}, "answer_body": {`{"code":"E_NOPERM"}`}},
			[]string{`id="result-status">forbidden`}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, page := f.post(t, "/ui/tools/search/try", c.form)
			if code != http.StatusOK {
				t.Fatalf("%d\n%s", code, page)
			}
			for _, want := range c.want {
				if !strings.Contains(page, want) {
					t.Errorf("the page does not show %q:\n%s", want, page)
				}
			}
			for _, not := range c.not {
				if strings.Contains(page, not) {
					t.Errorf("the page shows %q", not)
				}
			}
			noSecret(t, page)
		})
	}
	t.Run("a side-effecting tool gets a key of the console's", func(t *testing.T) {
		_, page := f.post(t, "/ui/tools/notify/try", url.Values{"arg.text": {"hi"}})
		if !strings.Contains(page, "POST /notify HTTP/1.1") || !regexp.MustCompile(`Idempotency key <code>console-[0-9a-f]{16}</code>`).MatchString(page) {
			t.Errorf("the dry run of notify:\n%s", page)
		}
	})
	t.Run("input that is not a call is said so", func(t *testing.T) {
		for _, form := range []url.Values{{"args_json": {"{"}}, {"arg.limit": {"many"}}, {"answer_body": {"x"}, "answer_status": {"99"}}, {"answer_body": {"x"}, "answer_headers": {"no colon"}}} {
			if code, page := f.post(t, "/ui/tools/search/try", form); code != http.StatusBadRequest || !strings.Contains(page, `id="result-error"`) {
				t.Errorf("%v: %d", form, code)
			}
		}
	})
	if n := f.calls.Load(); n != 0 {
		t.Errorf("the dry runs called the backend %d times", n)
	}
}

// TestLiveCallsOnlyForReadOnlyToolsTheOperatorAllows: the server refuses
// a live call of a side-effecting tool, and any live call while the
// policy does not allow them; an allowed one runs through the pipeline
// (its outcome among the tool's last, the breaker counting it).
func TestLiveCallsOnlyForReadOnlyToolsTheOperatorAllows(t *testing.T) {
	for _, c := range []struct {
		name, settings, tool string
		form                 url.Values
		code                 int
		calls                int64
		want                 string
	}{
		{"off by default", "{}", "search", url.Values{"arg.q": {"go"}}, http.StatusForbidden, 0, "live calls are off"},
		{"never a side-effecting tool", "{live_calls: true}", "notify", url.Values{"arg.text": {"hi"}, "arg.idempotency_key": {"k1"}}, http.StatusForbidden, 0, "never called from the console"},
		{"a read-only tool when allowed", "{live_calls: true}", "search", url.Values{"arg.q": {"go"}}, http.StatusOK, 1, `id="result-status">ok`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.settings)
			code, page := f.post(t, "/ui/tools/"+c.tool+"/call", c.form)
			if code != c.code || !strings.Contains(page, c.want) {
				t.Errorf("%d, want %d and %q:\n%s", code, c.code, c.want, page)
			}
			if n := f.calls.Load(); n != c.calls {
				t.Errorf("the backend was called %d times, want %d", n, c.calls)
			}
			noSecret(t, page)
		})
	}
	t.Run("faults open the breaker the page shows", func(t *testing.T) {
		f := newFixture(t, "{live_calls: true}")
		for range 2 {
			f.post(t, "/ui/tools/search/call", url.Values{"arg.q": {"crash"}})
		}
		_, page := f.get(t, "/ui/")
		if !strings.Contains(page, `id="upstream-api" data-breaker="open"`) || !strings.Contains(page, "server_error") {
			t.Errorf("the overview after two faults:\n%s", page)
		}
	})
}

// TestFormsNeedTheConsolesToken: a post without the token of the tool's
// page runs nothing.
func TestFormsNeedTheConsolesToken(t *testing.T) {
	f := newFixture(t, "{live_calls: true}")
	for _, c := range []struct{ name, token string }{
		{"no token", ""},
		{"another tool's token", f.token(t, "notify")},
		{"a made-up token", "x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _ := f.post(t, "/ui/tools/search/call", url.Values{"arg.q": {"go"}, "token": {c.token}})
			if code != http.StatusForbidden {
				t.Errorf("%d, want 403", code)
			}
		})
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("the backend was called %d times", n)
	}
}

// TestConsoleSitsBehindTheAdminGuard: the admin port's Host and
// cross-site rules hold for every console route, the POSTs included.
func TestConsoleSitsBehindTheAdminGuard(t *testing.T) {
	f := newFixture(t, "{live_calls: true}")
	token := f.token(t, "search")
	for _, c := range []struct {
		name, method, host string
		header             map[string]string
	}{
		{"a rebinding page's Host", http.MethodGet, "evil.example:9090", nil},
		{"a cross-site POST", http.MethodPost, "127.0.0.1:9090", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"a same-site POST", http.MethodPost, "127.0.0.1:9090", map[string]string{"Sec-Fetch-Site": "same-site"}},
		{"a POST from another origin", http.MethodPost, "127.0.0.1:9090", map[string]string{"Origin": "http://evil.example"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, "http://"+c.host+"/ui/tools/search/call", strings.NewReader(url.Values{"token": {token}, "arg.q": {"go"}}.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range c.header {
				r.Header.Set(k, v)
			}
			if code, body := f.serve(r); code != http.StatusForbidden || !strings.HasPrefix(body, "forbidden: ") {
				t.Errorf("%d %q, want the guard's 403", code, body)
			}
		})
	}
	if n := f.calls.Load(); n != 0 {
		t.Errorf("the backend was called %d times", n)
	}
	code, _ := f.get(t, "/ui/")
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9090/ui/", nil)
	w := httptest.NewRecorder()
	f.console.ServeHTTP(w, r)
	if code != http.StatusOK || w.Header().Get("X-Frame-Options") != "DENY" || !strings.Contains(w.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("a page opened by its owner: %d, headers %v", code, w.Header())
	}
}

// TestConsoleTurnedOff: server.console.enabled: false leaves no page.
func TestConsoleTurnedOff(t *testing.T) {
	f := newFixture(t, "{enabled: false}")
	for _, path := range []string{"/ui/", "/ui/tools/search", "/ui/static/console.js"} {
		if code, _ := f.get(t, path); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
}

// TestOverviewShowsAFailedReload: the last reload's failure and why are
// on the overview, and the running policy's checksum stays.
func TestOverviewShowsAFailedReload(t *testing.T) {
	f := newFixture(t, "{}")
	before := f.core.Snapshot().Checksum
	if err := os.WriteFile(f.path, []byte("version: 1\nbogus: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.reload.Reload(); err == nil {
		t.Fatal("the broken policy reloaded")
	}
	_, page := f.get(t, "/ui/")
	if !strings.Contains(page, "failed") || !strings.Contains(page, "bogus: unknown key") || !strings.Contains(page, before) {
		t.Errorf("the overview after a failed reload:\n%s", page)
	}
}

// TestLearnPageShowsTheSummaryAndTheDraft: what learning mode saw of
// the calls, and the draft from it.
func TestLearnPageShowsTheSummaryAndTheDraft(t *testing.T) {
	f := newFixture(t, "{live_calls: true}")
	f.post(t, "/ui/tools/search/call", url.Values{"arg.q": {"go"}})
	code, page := f.get(t, "/ui/learn")
	if code != http.StatusOK || !strings.Contains(page, `id="learn-routes"`) || !strings.Contains(page, "<code>/search</code>") || !strings.Contains(page, `id="learn-draft"`) {
		t.Errorf("%d:\n%s", code, page)
	}
	noSecret(t, page)
}

// TestAFailingTemplateIsAnError: a page whose template fails (one that
// calls a method of its data, which internal/htmltemplate refuses) is
// answered with a 500 and the error, not half a page with a 200.
func TestAFailingTemplateIsAnError(t *testing.T) {
	f := newFixture(t, "{}")
	var logs strings.Builder
	h := New(Options{Core: f.core, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	h.pages = template.Must(template.New("console").Funcs(funcs()).Parse(`{{define "overview.html"}}<p>{{.Title}}</p>{{.Policy.Now.IsZero}}{{end}}`))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9090/ui/", nil))
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), "<p>") || !strings.Contains(w.Body.String(), "IsZero") {
		t.Errorf("%d %q, want a 500 naming the template's error", w.Code, w.Body.String())
	}
	if !strings.Contains(logs.String(), "console page failed") {
		t.Errorf("nothing logged: %q", logs.String())
	}
}
