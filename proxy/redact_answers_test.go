package proxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testkit/proxytest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/redacttest"
	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/redact"
)

// The secrets of TestEchoedSecretsAreRedacted, each with characters that
// some encoding escapes. The basic password looks like a code, so that
// learning mode (enum_values) would keep it were it not redacted.
const (
	echoBearer    = "bRr/9k+Qz=x7Lw2"
	echoUser      = "svc-redact-user"
	echoPassword  = "opensesame-42"
	echoHeaderKey = "ak_7Hq/2+zz-hdr"
	echoQueryKey  = "qk-Zw8/+p=1q"
	echoClientID  = "cid-redact-1"
	echoSecret    = "csec/ret+99"
	echoAgent     = "agent-9Xk/p+Lm="
	echoTokenStem = "oa.T0k/3n+"
)

const echoPolicy = `
version: 1
server:
  transparent: true
upstreams:
  bearer: {url: "{{url}}", auth: {bearer: {token: "${BEARER}"}}}
  basic: {url: "{{url}}", auth: {basic: {username: "${USER_NAME}", password: "${PASSWORD}"}}}
  header_key: {url: "{{url}}", auth: {api_key: {header: X-Api-Key, value: "${HEADER_KEY}"}}}
  query_key: {url: "{{url}}", auth: {api_key: {query: key, value: "${QUERY_KEY}"}}}
  oauth2:
    url: "{{url}}"
    auth: {oauth2: {token_url: "{{idp}}/token", client_id: "${CLIENT_ID}", client_secret: "${CLIENT_SECRET}", auth_style: params}}
  forwarded: {url: "{{url}}", forward_headers: [Authorization]}
access:
  shared_credentials: [bearer, basic, header_key, query_key, oauth2]
tools:
{{tools}}`

// echoTool is a tool of upstream name whose backend echoes its request in
// encoding enc, answering status; the error detail quotes the echo.
const echoTool = `  {{name}}:
    description: Echo the request.
    upstream: {{name}}
    args: {type: object, required: [enc, status], properties: {enc: {type: integer}, status: {type: integer}}}
    request: {method: GET, path: "/{{name}}/echo/{enc}", query: {status: status}}
    response: {error_detail: body.echo}
`

var echoUpstreams = []string{"bearer", "basic", "header_key", "query_key", "oauth2", "forwarded"}

// secretEchoBackend answers every request with what it got: the Authorization
// and X-Api-Key headers, the decoded key parameter, the basic credential's
// user and password, and the first OAuth2 token it ever saw, in the
// encoding its path names (an index of redacttest.Encodings), in the JSON
// member echo; and the raw query as it came, the password as a code.
type secretEchoBackend struct {
	mu        sync.Mutex
	firstAuth map[string]string
}

func (b *secretEchoBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(r.URL.Path, "/") // "", upstream, "echo", enc
	var enc, status int
	if len(parts) != 4 {
		http.Error(w, "bad path", http.StatusNotFound)
		return
	}
	fmt.Sscan(parts[3], &enc)
	fmt.Sscan(r.URL.Query().Get("status"), &status)
	b.mu.Lock()
	if b.firstAuth == nil {
		b.firstAuth = map[string]string{}
	}
	if _, ok := b.firstAuth[parts[1]]; !ok {
		b.firstAuth[parts[1]] = r.Header.Get("Authorization")
	}
	first := b.firstAuth[parts[1]]
	b.mu.Unlock()
	echo := fmt.Sprintf("you sent auth=%s first=%s apikey=%s key=%s", r.Header.Get("Authorization"), first,
		r.Header.Get("X-Api-Key"), r.URL.Query().Get("key"))
	code := ""
	if user, pass, ok := r.BasicAuth(); ok {
		echo += " user=" + user + " pass=" + pass
		code = pass
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"echo":"%s","query":%q,"code":%q}`, redacttest.Encodings[enc].Encode(echo), r.URL.RawQuery, code)
}

// TestEchoedSecretsAreRedacted: a backend that echoes its request, in a
// 4xx body the error detail quotes and in a 2xx body that is the data, in
// every encoding of redacttest.Encodings, for every kind of credential (bearer,
// basic, API keys in a header and in the query, an OAuth2 token, current
// and earlier, and the agent's own forwarded Authorization), over the
// tool endpoint and transparent routes: no secret appears in the
// envelope, its message or observation, the log or the learned summary,
// and each call counts in toolgate_secrets_redacted_total.
func TestEchoedSecretsAreRedacted(t *testing.T) {
	backend := httptest.NewServer(&secretEchoBackend{})
	defer backend.Close()
	var issued atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"access_token":"%s%d","token_type":"Bearer","expires_in":3600}`, echoTokenStem, issued.Add(1))
	}))
	defer idp.Close()
	var tools strings.Builder
	for _, name := range echoUpstreams {
		tools.WriteString(strings.ReplaceAll(echoTool, "{{name}}", name))
	}
	doc := strings.NewReplacer("{{url}}", backend.URL, "{{idp}}", idp.URL, "{{tools}}", tools.String()).Replace(echoPolicy)
	env := map[string]string{"BEARER": echoBearer, "USER_NAME": echoUser, "PASSWORD": echoPassword, "HEADER_KEY": echoHeaderKey,
		"QUERY_KEY": echoQueryKey, "CLIENT_ID": echoClientID, "CLIENT_SECRET": echoSecret}
	learner := learn.New(policy.LearnSettings{EnumValues: true}, learn.Options{})
	a := newAuthCore(t, doc, env, Options{Observer: learner})
	secrets := []string{echoBearer, echoUser, echoPassword, echoUser + ":" + echoPassword, echoHeaderKey, echoQueryKey,
		echoClientID, echoSecret, echoAgent, echoTokenStem + "1", echoTokenStem + "2"}
	agent := map[string]string{"Authorization": "Bearer " + echoAgent}

	check := func(t *testing.T, tool string, status int, body []byte, env map[string]any) {
		t.Helper()
		for what, text := range map[string]string{"envelope": string(body), "message": fmt.Sprint(env["message"]),
			"observation": fmt.Sprint(env["observation"])} {
			if f, ok := redacttest.Leaked(text, secrets...); ok {
				t.Errorf("the %s holds %q: %s", what, f, text)
			}
		}
		where := fmt.Sprint(env["message"])
		if status < 300 {
			d, _ := json.Marshal(env["data"])
			where = string(d)
		}
		if !strings.Contains(where, redact.Marker) {
			t.Errorf("%s has no %s: %s", map[bool]string{true: "data", false: "message"}[status < 300], redact.Marker, body)
		}
	}
	redacted := func(tool string) float64 {
		return testutil.ToFloat64(a.core.Metrics().SecretsRedacted.WithLabelValues(tool))
	}
	for _, tool := range echoUpstreams {
		for enc, e := range redacttest.Encodings {
			for _, status := range []int{400, 200} {
				t.Run(fmt.Sprintf("%s %s %d tool endpoint", tool, e.Name, status), func(t *testing.T) {
					before := redacted(tool)
					resp, env := a.call(t, tool, fmt.Sprintf(`{"enc":%d,"status":%d}`, enc, status), agent)
					raw, _ := json.Marshal(env)
					var m map[string]any
					_ = json.Unmarshal(raw, &m)
					if resp.StatusCode >= 500 {
						t.Fatalf("HTTP %d: %s", resp.StatusCode, raw)
					}
					check(t, tool, status, raw, m)
					if redacted(tool) <= before {
						t.Errorf("toolgate_secrets_redacted_total{tool=%q} did not grow", tool)
					}
				})
				t.Run(fmt.Sprintf("%s %s %d transparent", tool, e.Name, status), func(t *testing.T) {
					req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/%s/echo/%d?status=%d", a.server.URL, tool, enc, status), nil)
					req.Header.Set("Authorization", "Bearer "+echoAgent)
					resp, err := a.server.Client().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					raw, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var m map[string]any
					if err := json.Unmarshal(raw, &m); err != nil || m["status"] == nil {
						t.Fatalf("not an envelope (%v): %s", err, raw)
					}
					check(t, tool, status, raw, m)
				})
			}
		}
	}
	t.Run("an OAuth2 token replaced by a new one is still redacted", func(t *testing.T) {
		a.clock.Add(2 * time.Hour) // past the first token's expiry
		_, env := a.call(t, "oauth2", `{"enc":0,"status":200}`, nil)
		raw, _ := json.Marshal(env)
		if issued.Load() < 2 || !strings.Contains(string(raw), "first=Bearer "+redact.Marker) || !strings.Contains(string(raw), "auth=Bearer "+redact.Marker) {
			t.Errorf("tokens issued: %d; envelope: %s", issued.Load(), raw)
		}
		if f, ok := redacttest.Leaked(string(raw), secrets...); ok {
			t.Errorf("the envelope holds %q: %s", f, raw)
		}
	})

	summary, err := json.Marshal(learner.Summary())
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"log": a.log(), "learned summary": string(summary)} {
		if len(text) < 100 {
			t.Fatalf("the %s is nearly empty: %s", what, text)
		}
		if f, ok := redacttest.Leaked(text, secrets...); ok {
			i := strings.Index(text, f)
			t.Errorf("the %s holds %q: …%s…", what, f, text[max(0, i-200):min(len(text), i+100)])
		}
	}
}

// TestVarValuesAndPassthroughsAreRedacted: the ${VAR} values a tool's
// requests carry (the upstream's static headers, the binding's constants)
// are secrets too; and the copy of a passthrough answer learning mode
// keeps is redacted of the upstream's credential and the agent's own.
func TestVarValuesAndPassthroughsAreRedacted(t *testing.T) {
	const (
		headerVar = "legacy-hdr/Secret+1"
		queryVar  = "tenant-key/Q9+z"
		bearer    = "passthrough-tok7" // these two look like codes, which learning mode keeps
		agentTok  = "agent-own-tok8"
		plainWord = "eu-west-1-region" // a ${VAR} value that is no secret: masked all the same
	)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"code":%q,"reason":%q,"echo":%q}`, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.Header.Get("X-Agent-Token"),
			fmt.Sprintf("%s %s %s", r.Header.Get("X-Legacy-Token"), r.URL.Query().Get("tenant"), r.URL.Query().Get("region")))
	}))
	defer backend.Close()
	doc := strings.ReplaceAll(`
version: 1
server:
  transparent: true
  passthrough: [{prefix: /raw, upstream: legacy}]
upstreams:
  legacy:
    url: "{{url}}"
    headers: {X-Legacy-Token: "${LEGACY_TOKEN}"}
    auth: {bearer: {token: "${BEARER}"}}
access:
  shared_credentials: [legacy]
tools:
  lookup:
    description: Look up.
    upstream: legacy
    args: {type: object}
    request: {method: GET, path: /lookup, query: {tenant: "${TENANT_KEY}", region: "${REGION}"}}
`, "{{url}}", backend.URL)
	learner := learn.New(policy.LearnSettings{EnumValues: true}, learn.Options{})
	a := newAuthCore(t, doc, map[string]string{"LEGACY_TOKEN": headerVar, "TENANT_KEY": queryVar, "BEARER": bearer, "REGION": plainWord},
		Options{Observer: learner})
	_, env := a.call(t, "lookup", `{}`, nil)
	raw, _ := json.Marshal(env)
	if f, ok := redacttest.Leaked(string(raw), headerVar, queryVar, bearer, plainWord); ok {
		t.Errorf("the envelope holds %q: %s", f, raw)
	}
	if got := testutil.ToFloat64(a.core.Metrics().SecretsRedacted.WithLabelValues("lookup")); got != 4 {
		t.Errorf("toolgate_secrets_redacted_total{tool=lookup} = %v, want 4: %s", got, raw)
	}

	req, _ := http.NewRequest(http.MethodGet, a.server.URL+"/raw/x", nil)
	req.Header.Set("X-Agent-Token", agentTok)
	resp, err := a.server.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	passed, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(passed), bearer) {
		t.Fatalf("a passthrough answer is the backend's own, as it was: %s", passed)
	}
	// The exchange is shown to learning mode once the handler is done,
	// which may be after the client has the answer.
	counted := func() float64 { return testutil.ToFloat64(a.core.Metrics().SecretsRedacted.WithLabelValues("")) }
	for deadline := time.Now().Add(5 * time.Second); counted() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if counted() == 0 {
		t.Errorf("the passthrough answer's redaction was not counted")
	}
	var summary []byte
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(string(summary), `"/raw`) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		summary, _ = json.Marshal(learner.Summary())
	}
	if !strings.Contains(string(summary), `"/raw`) {
		t.Fatalf("learning mode never saw the passthrough: %s", summary)
	}
	if f, ok := redacttest.Leaked(string(summary), headerVar, queryVar, bearer, agentTok); ok {
		t.Errorf("the learned summary holds %q: %s", f, summary)
	}
}

// BenchmarkAnswerRedaction is the search call of BenchmarkAnswerSize with
// the search upstream holding no secret, a bearer token, and an API key
// while the call also forwards the agent's basic Authorization (four
// secrets, 21 needles): the cost of scanning each answer for them. The answers hold no
// secret, as nearly all do.
func BenchmarkAnswerRedaction(b *testing.B) {
	cases := []struct {
		name, auth string
		header     http.Header
	}{
		{"no secret", "", nil},
		{"a bearer token", "\n    auth: {bearer: {token: bench-token-Zq8c/Kp3sf}}", nil},
		{"an API key and a forwarded basic Authorization", "\n    auth: {api_key: {header: X-Api-Key, value: bench-key/Vx71d}}\n    forward_headers: [Authorization]",
			http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("agent-user:agent-pass/Lr4e"))}}},
	}
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		for _, tc := range cases {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, tc.name), func(b *testing.B) {
				body := examples.PaddedSearchAnswer(size)
				doc := strings.NewReplacer("server:\n", "server:\n  max_response_bytes: 2097152\n", "\naccess:\n", "\naccess:\n  shared_credentials: [search]\n",
					"url: http://127.0.0.1:7001", "url: http://127.0.0.1:7001"+tc.auth).Replace(string(examples.Policy()))
				snap, err := config.CompileSource("policy.yaml", []byte(doc), config.Options{})
				if err != nil {
					b.Fatal(err)
				}
				core, err := NewCore(snap, Options{Registry: prometheus.NewRegistry(), Transport: func(*policy.Upstream) http.RoundTripper { return proxytest.CannedTransport{Body: body} }})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(core.Close)
				args := []byte(`{"q":"go","limit":5}`)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					res := core.Call(context.Background(), &Request{Tool: "search_articles", Body: args, CallID: "bench", Header: tc.header})
					if res.Envelope.Status != "ok" {
						b.Fatal(res.Envelope.Status, res.Envelope.Message)
					}
				}
			})
		}
	}
}
