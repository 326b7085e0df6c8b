package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// namedCredentialsPolicy is one upstream holding three credentials, as
// Gotify does: the default (auth), an application token that pushes and
// a client credential that reads. {{backend}} is its URL; tokens come
// from ${VAR}s.
const namedCredentialsPolicy = `
version: 1
server:
  transparent: true
  passthrough: [{prefix: /raw/, upstream: gotify}]
upstreams:
  gotify:
    url: {{backend}}
    auth:
      bearer: {token: "${DEFAULT_TOKEN}"}
    credentials:
      app:
        api_key: {header: X-Gotify-Key, value: "${APP_TOKEN}"}
      client:
        basic: {username: reader, password: "${CLIENT_PASSWORD}"}
      query:
        api_key: {query: token, value: "${QUERY_TOKEN}"}
      session:
        api_key: {cookie: sid, value: "${SESSION_ID}"}
tools:
  send:
    description: Push a message.
    upstream: gotify
    credential: app
    side_effect: true
    args: {type: object}
    request: {method: POST, path: /message, body: {message: {const: hi}}}
  read:
    description: Read messages.
    upstream: gotify
    credential: client
    args: {type: object}
    request: {method: GET, path: /message}
  read_by_query:
    description: Read messages with a key in the query.
    upstream: gotify
    credential: query
    args: {type: object}
    request: {method: GET, path: /messages}
  read_by_cookie:
    description: Read messages with a session cookie.
    upstream: gotify
    credential: session
    args: {type: object}
    request: {method: GET, path: /session/messages}
  health:
    description: Is Gotify up.
    upstream: gotify
    args: {type: object}
    request: {method: GET, path: /health}
access: {shared_credentials: [gotify]}
`

var namedCredentialsEnv = map[string]string{
	"DEFAULT_TOKEN":   "default-token-0001",
	"APP_TOKEN":       "AppToken-0002",
	"CLIENT_PASSWORD": "client-pass-0003",
	"QUERY_TOKEN":     "query-token-0004",
	"SESSION_ID":      "session-id-0005",
}

func newNamedCredentialsCore(t *testing.T, backend http.Handler) *authCore {
	t.Helper()
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	return newAuthCore(t, strings.ReplaceAll(namedCredentialsPolicy, "{{backend}}", srv.URL), namedCredentialsEnv, Options{})
}

// TestToolSendsTheCredentialItNames: each tool's request carries the
// credential it names and no other; a tool that names none, and a
// passthrough route, carry the upstream's auth; toolgate extproc's
// requests (Call.Backend) carry the same as toolgate's own.
func TestToolSendsTheCredentialItNames(t *testing.T) {
	backend := &seenRequests{}
	a := newNamedCredentialsCore(t, backend)
	type wire struct{ authorization, key, query, cookie string }
	for _, tc := range []struct {
		tool string
		want wire
	}{
		{"send", wire{key: "AppToken-0002"}},
		{"read", wire{authorization: basicHeader("reader", "client-pass-0003")}},
		{"read_by_query", wire{query: "token=query-token-0004"}},
		{"read_by_cookie", wire{cookie: "sid=session-id-0005"}},
		{"health", wire{authorization: "Bearer default-token-0001"}},
	} {
		t.Run(tc.tool+" sends its own credential", func(t *testing.T) {
			_, env := a.call(t, tc.tool, `{}`, map[string]string{"Idempotency-Key": "k-" + tc.tool})
			if env.Status != contracts.StatusOK {
				t.Fatalf("envelope %+v", env)
			}
			r := backend.last(t)
			got := wire{r.Header.Get("Authorization"), r.Header.Get("X-Gotify-Key"), r.URL.RawQuery, r.Header.Get("Cookie")}
			if got != tc.want {
				t.Errorf("on the wire %+v, want %+v", got, tc.want)
			}
		})
		t.Run(tc.tool+" through Envoy sends its own credential", func(t *testing.T) {
			p, res := a.core.View().Begin(context.Background(), &Request{Tool: tc.tool, Front: "extproc", IdempotencyKey: "e-" + tc.tool})
			if res != nil {
				t.Fatalf("%s: %+v", res.Reason, res.Envelope)
			}
			b := p.Backend()
			got := wire{b.Header.Get("Authorization"), b.Header.Get("X-Gotify-Key"), b.RawQuery, b.Header.Get("Cookie")}
			if got != tc.want {
				t.Errorf("Envoy's request %+v, want %+v", got, tc.want)
			}
			p.Finish(Answer{Code: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)})
		})
	}
	t.Run("a passthrough route carries auth", func(t *testing.T) {
		resp, err := http.Get(a.server.URL + "/raw/version")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		r := backend.last(t)
		if r.Header.Get("Authorization") != "Bearer default-token-0001" || r.Header.Get("X-Gotify-Key") != "" || r.URL.RawQuery != "" {
			t.Errorf("passthrough request header %v query %q", r.Header, r.URL.RawQuery)
		}
	})
}

// TestEveryCredentialOfTheUpstreamIsRedacted: a backend that echoes every
// token it knows (Gotify's GET /application lists the application tokens
// to a client) leaves none of the upstream's credentials in the envelope,
// whichever one the call sent.
func TestEveryCredentialOfTheUpstreamIsRedacted(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"apps": []map[string]string{
			{"name": "default", "token": "default-token-0001"},
			{"name": "app", "token": "AppToken-0002"},
			{"name": "client", "password": "client-pass-0003"},
			{"name": "query", "token": "query-token-0004"},
			{"name": "session", "cookie": "session-id-0005"},
		}})
	})
	a := newNamedCredentialsCore(t, echo)
	for _, tool := range []string{"read", "send", "health"} {
		t.Run(tool, func(t *testing.T) {
			resp, env := a.call(t, tool, `{}`, map[string]string{"Idempotency-Key": "k-" + tool})
			if env.Status != contracts.StatusOK {
				t.Fatalf("envelope %+v", env)
			}
			raw, _ := json.Marshal(env)
			for _, v := range namedCredentialsEnv {
				if strings.Contains(string(raw), v) {
					t.Errorf("the envelope holds the credential %q: %s", v, raw)
				}
			}
			_ = resp
			if n := testutil.ToFloat64(a.core.Metrics().SecretsRedacted.WithLabelValues(tool)); n < 4 {
				t.Errorf("toolgate_secrets_redacted_total{tool=%q} = %v, want every credential counted", tool, n)
			}
		})
	}
}

// TestNamedOAuth2CredentialsKeepTheirOwnTokens: two OAuth2 credentials on
// one upstream get and cache their own tokens; one whose token endpoint
// fails ends its tools' calls as auth (counted under code="auth") and
// leaves the other credential's tools working; a reload that keeps a
// credential keeps its token.
func TestNamedOAuth2CredentialsKeepTheirOwnTokens(t *testing.T) {
	var requests [2]atomic.Int32
	var fail atomic.Bool
	tokens := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _, _ := r.BasicAuth()
		i := map[string]int{"pusher": 0, "reader": 1}[id]
		if i == 1 && fail.Load() {
			http.Error(w, `{"error":"temporarily_unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		n := requests[i].Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": fmt.Sprintf("%s-tok-%d", id, n), "token_type": "bearer", "expires_in": 3600})
	})
	ts := httptest.NewServer(tokens)
	defer ts.Close()
	backend := &seenRequests{}
	srv := httptest.NewServer(backend)
	defer srv.Close()
	doc := strings.NewReplacer("{{backend}}", srv.URL, "{{token}}", ts.URL).Replace(`
version: 1
upstreams:
  fcm:
    url: {{backend}}
    credentials:
      push:
        oauth2: {token_url: "{{token}}/token", client_id: pusher, client_secret: s1, auth_style: header}
      read:
        oauth2: {token_url: "{{token}}/token", client_id: reader, client_secret: s2, auth_style: header}
tools:
  send:
    description: Send a message.
    upstream: fcm
    credential: push
    args: {type: object}
    request: {method: POST, path: /send}
  list:
    description: List messages.
    upstream: fcm
    credential: read
    args: {type: object}
    request: {method: GET, path: /list}
access: {shared_credentials: [fcm]}
`)
	a := newAuthCore(t, doc, nil, Options{})
	expect := func(tool, want string) {
		t.Helper()
		_, env := a.call(t, tool, `{}`, nil)
		if env.Status != contracts.StatusOK {
			t.Fatalf("%s: envelope %+v", tool, env)
		}
		if got := backend.last(t).Header.Get("Authorization"); got != "Bearer "+want {
			t.Errorf("%s: Authorization = %q, want Bearer %s", tool, got, want)
		}
	}
	expect("send", "pusher-tok-1")
	expect("list", "reader-tok-1")
	expect("send", "pusher-tok-1")
	expect("list", "reader-tok-1")
	if requests[0].Load() != 1 || requests[1].Load() != 1 {
		t.Errorf("token requests %d and %d, want one each", requests[0].Load(), requests[1].Load())
	}

	t.Run("a reload that keeps the credentials keeps their tokens", func(t *testing.T) {
		snap, err := config.CompileSource("auth.yaml", []byte(strings.Replace(doc, "description: List messages.", "description: List the messages.", 1)), config.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.core.Swap(snap); err != nil {
			t.Fatal(err)
		}
		expect("send", "pusher-tok-1")
		expect("list", "reader-tok-1")
	})

	t.Run("one credential's failing token endpoint fails its tools alone, as auth", func(t *testing.T) {
		fail.Store(true)
		defer fail.Store(false)
		snap, err := config.CompileSource("auth.yaml", []byte(strings.Replace(doc, "client_secret: s2", "client_secret: s3", 1)), config.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.core.Swap(snap); err != nil {
			t.Fatal(err)
		}
		before := backend.count()
		res := a.callDirect("list", `{}`, nil)
		if res.Reason != contracts.ReasonAuth || res.Envelope.Status != contracts.StatusUpstream || !res.Envelope.Retryable || backend.count() != before {
			t.Errorf("reason %s, envelope %+v, %d backend requests (had %d)", res.Reason, res.Envelope, backend.count(), before)
		}
		if a.authCount("fcm") != 1 {
			t.Errorf(`toolgate_upstream_requests_total{code="auth"} = %v, want 1`, a.authCount("fcm"))
		}
		expect("send", "pusher-tok-1")
	})
}

// TestTryMasksTheCredentialTheToolNames: toolgate try shows the named
// credential's mask where it goes, and no secret of the upstream's.
func TestTryMasksTheCredentialTheToolNames(t *testing.T) {
	doc := strings.ReplaceAll(namedCredentialsPolicy, "{{backend}}", "http://gotify.test")
	snap, err := config.CompileSource("auth.yaml", []byte(doc), config.Options{LookupEnv: func(k string) (string, bool) {
		v, ok := namedCredentialsEnv[k]
		return v, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ tool, want, notWant string }{
		{"send", "X-Gotify-Key: ***\n", "Authorization:"},
		{"read", "Authorization: Basic ***\n", "X-Gotify-Key:"},
		{"read_by_query", "GET /messages?token=*** HTTP/1.1\n", "Authorization:"},
		{"read_by_cookie", "Cookie: sid=***\n", "Authorization:"},
		{"health", "Authorization: Bearer ***\n", "X-Gotify-Key:"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			out, err := Try(context.Background(), snap, DryRun{Tool: tc.tool, Args: []byte(`{}`), IdempotencyKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			req := string(out.Request)
			if !strings.Contains(req, tc.want) || strings.Contains(req, tc.notWant) {
				t.Errorf("request:\n%s\nwant %q and no %q", req, tc.want, tc.notWant)
			}
			for _, v := range namedCredentialsEnv {
				if strings.Contains(req, v) {
					t.Errorf("the dry run shows the secret %q:\n%s", v, req)
				}
			}
		})
	}
}

// TestNamedCredentialFileRotatedWhileServing: a named credential's secret
// file is read again when it changes, as auth's is, and the old and new
// values are both redacted from an echoing answer.
func TestNamedCredentialFileRotatedWhileServing(t *testing.T) {
	secret := newK8sSecretDir(t, "token")
	secret.update(map[string]string{"token": "client-token-one\n"})
	var last atomic.Value
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last.Store(r.Header.Get("X-Gotify-Key"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"seen":%q,"older":"client-token-one"}`, r.Header.Get("X-Gotify-Key"))
	})
	srv := httptest.NewServer(echo)
	defer srv.Close()
	doc := fmt.Sprintf(`
version: 1
upstreams:
  gotify:
    url: %s
    credentials:
      client: {api_key: {header: X-Gotify-Key, value_file: %s}}
tools:
  read:
    description: Read messages.
    upstream: gotify
    credential: client
    args: {type: object}
    request: {method: GET, path: /message}
access: {shared_credentials: [gotify]}
`, srv.URL, secret.path("token"))
	a := newAuthCore(t, doc, nil, Options{})
	for _, step := range []struct{ name, want string }{
		{"before the rotation", "client-token-one"},
		{"the next call after the ..data swap", "client-token-two"},
	} {
		if step.want == "client-token-two" {
			secret.update(map[string]string{"token": "client-token-two\n"})
			a.clock.Add(upstream.FileCheckInterval)
		}
		_, env := a.call(t, "read", `{}`, nil)
		if env.Status != contracts.StatusOK {
			t.Fatalf("%s: envelope %+v", step.name, env)
		}
		if got := last.Load(); got != step.want {
			t.Errorf("%s: X-Gotify-Key = %q, want %q", step.name, got, step.want)
		}
		raw, _ := json.Marshal(env)
		if strings.Contains(string(raw), "client-token-") {
			t.Errorf("%s: the envelope holds a token: %s", step.name, raw)
		}
	}
}
