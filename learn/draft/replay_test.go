package draft_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/coretest"
	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/learn/draft"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

var update = flag.Bool("update", false, "rewrite testdata/examples.golden.yaml")

// backends are the example backends on test servers, by upstream name.
type backends map[string]string

func startBackends(t *testing.T) backends {
	t.Helper()
	search := httptest.NewServer(examples.NewSearchBackend(examples.SearchOptions{SlowDelay: -1}))
	notify := httptest.NewServer(examples.NewNotifyBackend(examples.NotifyOptions{}))
	faults := httptest.NewServer(examples.NewFaultBackend(examples.FaultOptions{}))
	for _, s := range []*httptest.Server{search, notify, faults} {
		t.Cleanup(s.Close)
	}
	return backends{"search": search.URL, "notify": notify.URL, "faulty": faults.URL}
}

// learningPolicy puts the three backends behind toolgate in transparent
// mode, every route on passthrough, learning.
const learningPolicy = `
version: 1
server:
  transparent: true
  passthrough:
    - {prefix: /api/, upstream: search}
    - {prefix: /health, upstream: search}
    - {prefix: /v1/, upstream: notify}
    - {prefix: /search, upstream: faulty}
    - {prefix: /send, upstream: faulty}
  learn: {}
upstreams:
  search: {url: "{{search}}"}
  notify: {url: "{{notify}}"}
  faulty: {url: "{{faulty}}"}
`

func (b backends) fill(doc string) string {
	return strings.NewReplacer("{{search}}", b["search"], "{{notify}}", b["notify"], "{{faulty}}", b["faulty"],
		"http://127.0.0.1:7001", b["search"], "http://127.0.0.1:7002", b["notify"], "http://127.0.0.1:7003", b["faulty"]).Replace(doc)
}

// serve runs a core for policy text, observed by obs (may be nil).
func serve(t *testing.T, name, doc string, obs proxy.Observer) *httptest.Server {
	t.Helper()
	snap, err := config.CompileSource(name, []byte(doc), config.Options{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatalf("%s does not compile: %v\n%s", name, err, doc)
	}
	srv, _ := coretest.Serve(t, snap, proxy.Options{Observer: obs})
	return srv
}

// recorded is one request of testdata/traffic.jsonl.
type recorded struct {
	Method string            `json:"method"`
	Path   string            `json:"path"`
	Header map[string]string `json:"header"`
	Body   string            `json:"body"`
}

func send(t *testing.T, base string, r recorded) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(r.Method, base+r.Path, strings.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil // a reset the fault backend made; the learner saw it
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// replay sends the recorded traffic through a learning toolgate in front
// of the example backends and returns what it learned.
func replay(t *testing.T, b backends, obs func(*learn.Learner) proxy.Observer) *learn.Summary {
	t.Helper()
	settings := *mustCompile(t, b.fill(learningPolicy)).Server.Learn
	l := learn.New(settings, learn.Options{Now: func() time.Time { return time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC) }})
	var o proxy.Observer = l
	if obs != nil {
		o = obs(l)
	}
	srv := serve(t, "learning.yaml", b.fill(learningPolicy), o)
	f, err := os.Open("testdata/traffic.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r recorded
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		send(t, srv.URL, r)
		n++
	}
	waitLearned(t, l, n)
	sum := l.Summary()
	if sum.Exchanges != int64(n) || sum.Dropped != 0 {
		t.Fatalf("learned %d exchanges (%d dropped), want %d", sum.Exchanges, sum.Dropped, n)
	}
	return sum
}

func mustCompile(t *testing.T, doc string) *policy.Snapshot {
	t.Helper()
	snap, err := config.CompileSource("p.yaml", []byte(doc), config.Options{LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// fixedLatency shows the learner every exchange as taking 3ms, so the
// draft does not depend on the machine.
type fixedLatency struct{ l *learn.Learner }

func (f fixedLatency) Observe(x *learn.Exchange) {
	x.Latency = 3 * time.Millisecond
	f.l.Observe(x)
}

// TestDraftFromExampleTraffic is the draft learned from the recorded
// traffic against the example backends (golden file
// testdata/examples.golden.yaml; -update rewrites it).
func TestDraftFromExampleTraffic(t *testing.T) {
	b := startBackends(t)
	sum := replay(t, b, func(l *learn.Learner) proxy.Observer { return fixedLatency{l} })
	d, err := draft.Write(sum, draft.Options{Source: "learned.json"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.NewReplacer(b["search"], "http://127.0.0.1:7001", b["notify"], "http://127.0.0.1:7002", b["faulty"], "http://127.0.0.1:7003").Replace(string(d.YAML))
	if *update {
		if err := os.WriteFile("testdata/examples.golden.yaml", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/examples.golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("draft differs from testdata/examples.golden.yaml (-update rewrites it):\n%s", got)
	}
	if _, err := config.CompileSource("examples.golden.yaml", want, config.Options{LookupEnv: func(string) (string, bool) { return "", false }}); err != nil {
		t.Errorf("the golden draft does not pass toolgate check: %v", err)
	}
}

// handWritten are the example policies, served in transparent mode on the
// test backends. faults.yaml's notify_dedupe takes notify's route, which
// transparent mode refuses as ambiguous, so it is left out.
func handWritten(t *testing.T, b backends) map[string]*httptest.Server {
	t.Helper()
	transparent := func(doc string) string {
		return strings.Replace(doc, "\nserver:\n", "\nserver:\n  transparent: true\n", 1)
	}
	faults, err := os.ReadFile("../../examples/faults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(faults)
	start, end := strings.Index(doc, "  notify_dedupe:"), strings.Index(doc, "\naccess:")
	if start < 0 || end < start {
		t.Fatal("examples/faults.yaml changed shape")
	}
	doc = doc[:start] + doc[end+1:]
	return map[string]*httptest.Server{
		"examples": serve(t, "policy.yaml", transparent(b.fill(string(examples.Policy()))), nil),
		"faults":   serve(t, "faults.yaml", transparent(b.fill(doc)), nil),
	}
}

// TestLearnedDraftAnswersLikeTheHandWrittenPolicy: the draft learned from
// the recorded traffic passes toolgate check and, served in transparent
// mode, gives every call the envelope the hand-written example policies
// give it (status, side_effect, retryable).
func TestLearnedDraftAnswersLikeTheHandWrittenPolicy(t *testing.T) {
	b := startBackends(t)
	sum := replay(t, b, nil)
	d, err := draft.Write(sum, draft.Options{Source: "learned.json"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.CompileSource("draft.yaml", d.YAML, config.Options{LookupEnv: func(string) (string, bool) { return "", false }}); err != nil {
		t.Fatalf("the draft does not pass toolgate check: %v\n%s", err, d.YAML)
	}
	learned := serve(t, "draft.yaml", "server:\n  transparent: true\n"+string(d.YAML), nil)
	hand := handWritten(t, b)
	key := 0
	for _, c := range []struct {
		name, policy, method, path, body string
		noKey                            bool
		want                             string // status/side_effect/retryable, to read the table
	}{
		{name: "a search with results", policy: "examples", method: "GET", path: "/api/search?q=go&limit=5", want: "ok/none/false"},
		{name: "a search that finds nothing", policy: "examples", method: "GET", path: "/api/search?q=zzzz", want: "empty/none/false"},
		{name: "a search the backend refuses with 200 E_NOPERM", policy: "examples", method: "GET", path: "/api/search?q=secret", want: "forbidden/none/false"},
		{name: "a search that crashes the backend", policy: "examples", method: "GET", path: "/api/search?q=crash", want: "upstream/none/true"},
		{name: "a limit that is not an integer", policy: "examples", method: "GET", path: "/api/search?q=go&limit=abc", want: "bad_args/none/false"},
		{name: "a search without keywords", policy: "examples", method: "GET", path: "/api/search", want: "bad_args/none/false"},
		{name: "a notification", policy: "examples", method: "POST", path: "/v1/users/alice/notifications", body: `{"text":"hi"}`, want: "ok/done/false"},
		{name: "a notification to nobody", policy: "examples", method: "POST", path: "/v1/users/zed/notifications", body: `{"text":"hi"}`, want: "not_found/none/false"},
		{name: "a notification without a key", policy: "examples", method: "POST", path: "/v1/users/bob/notifications", body: `{"text":"hi"}`, noKey: true, want: "bad_args/none/false"},
		{name: "a notification with a field the contract does not know", policy: "examples", method: "POST", path: "/v1/users/bob/notifications", body: `{"text":"hi","urgent":true}`, want: "bad_args/none/false"},
		{name: "a lookup", policy: "faults", method: "GET", path: "/search?q=go&fault=none", want: "ok/none/false"},
		{name: "a lookup without a named fault", policy: "faults", method: "GET", path: "/search?q=go", want: "ok/none/false"},
		{name: "a lookup that finds nothing", policy: "faults", method: "GET", path: "/search?q=go&fault=empty", want: "empty/none/false"},
		{name: "a lookup meeting a 500", policy: "faults", method: "GET", path: "/search?q=go&fault=500", want: "upstream/none/true"},
		{name: "a lookup meeting a 404", policy: "faults", method: "GET", path: "/search?q=go&fault=404", want: "not_found/none/false"},
		{name: "a lookup meeting a 429", policy: "faults", method: "GET", path: "/search?q=go&fault=429", want: "upstream/none/true"},
		{name: "a lookup meeting a 504", policy: "faults", method: "GET", path: "/search?q=go&fault=504", want: "timeout/none/true"},
		{name: "a lookup answered 200 in HTML", policy: "faults", method: "GET", path: "/search?q=go&fault=non_json", want: "upstream/none/false"},
		{name: "a write", policy: "faults", method: "POST", path: "/send", body: `{"nonce":"t-1","text":"hi","fault":"none"}`, want: "ok/done/false"},
		{name: "a write answered 204", policy: "faults", method: "POST", path: "/send", body: `{"nonce":"t-2","text":"hi","fault":"empty"}`, want: "ok/done/false"},
		{name: "a write meeting a 502 after acting", policy: "faults", method: "POST", path: "/send", body: `{"nonce":"t-3","text":"hi","fault":"502"}`, want: "upstream/unknown/false"},
		{name: "a write meeting a 429", policy: "faults", method: "POST", path: "/send", body: `{"nonce":"t-4","text":"hi","fault":"429"}`, want: "upstream/none/true"},
		{name: "a write meeting a 404", policy: "faults", method: "POST", path: "/send", body: `{"nonce":"t-5","text":"hi","fault":"404"}`, want: "not_found/none/false"},
		{name: "a write answered 200 in HTML", policy: "faults", method: "POST", path: "/send", body: `{"nonce":"t-6","text":"hi","fault":"non_json"}`, want: "upstream/done/false"},
	} {
		t.Run(c.name+" gets the same envelope from the draft as from the hand-written policy", func(t *testing.T) {
			var got [2]string
			for i, srv := range []*httptest.Server{hand[c.policy], learned} {
				key++
				r := recorded{Method: c.method, Path: c.path, Body: c.body, Header: map[string]string{}}
				if c.method == http.MethodPost {
					r.Header["Content-Type"] = "application/json"
					if !c.noKey {
						r.Header["Idempotency-Key"] = "table-" + strconv.Itoa(key)
					}
				}
				_, body := send(t, srv.URL, r)
				env, err := contracts.DecodeEnvelope(bytes.TrimSpace(body))
				if err != nil {
					t.Fatalf("not an envelope: %v: %s", err, body)
				}
				got[i] = string(env.Status) + "/" + string(env.SideEffect) + "/" + strconv.FormatBool(env.Retryable)
			}
			if got[0] != c.want {
				t.Errorf("the hand-written policy answers %s, the table says %s", got[0], c.want)
			}
			if got[1] != got[0] {
				t.Errorf("the draft answers %s, the hand-written policy %s", got[1], got[0])
			}
		})
	}
}

// waitUntil polls cond for up to ten seconds.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
