package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/policytest"
)

// TestUpstreamCredentialsStayOutOfConfig: with every kind of upstream
// credential (values from the environment and from files), the secrets
// reach the backends and nothing toolgate shows: GET /v1/config, /metrics,
// reload answers, the log.
func TestUpstreamCredentialsStayOutOfConfig(t *testing.T) {
	secrets := map[string]string{
		"TG_BASIC_PASSWORD": "tg-basic-pw-31c8",
		"TG_QUERY_KEY":      "tg-query-key-8e2d",
		"TG_CLIENT_ID":      "tg-client-id-5a1f",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	files := map[string]string{"bearer": "tg-bearer-file-77b0", "client-secret": "tg-client-secret-19fe"}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var seen atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/token":
			_ = r.ParseForm()
			if r.PostForm.Get("client_secret") != files["client-secret"] {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"access_token":"tg-access-token-4411","token_type":"Bearer","expires_in":3600}`))
			return
		case r.Header.Get("Authorization") == "Bearer "+files["bearer"],
			r.Header.Get("Authorization") == "Bearer tg-access-token-4411",
			r.URL.Query().Get("key") == secrets["TG_QUERY_KEY"]:
			seen.Add(1)
		default:
			if u, p, ok := r.BasicAuth(); ok && u == "acct" && p == secrets["TG_BASIC_PASSWORD"] {
				seen.Add(1)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer backend.Close()
	policy := fmt.Sprintf(`version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:00"
upstreams:
  basic: {url: %[1]s, auth: {basic: {username: acct, password: "${TG_BASIC_PASSWORD}"}}}
  bearer: {url: %[1]s, auth: {bearer: {token_file: %[2]s/bearer}}}
  key: {url: %[1]s, auth: {api_key: {query: key, value: "${TG_QUERY_KEY}"}}}
  oauth2:
    url: %[1]s
    auth: {oauth2: {token_url: "%[1]s/token", client_id: "${TG_CLIENT_ID}", client_secret_file: %[2]s/client-secret, auth_style: params}}
tools:
  a: {description: d, upstream: basic, args: {type: object}, request: {method: GET, path: /a}}
  b: {description: d, upstream: bearer, args: {type: object}, request: {method: GET, path: /b}}
  c: {description: d, upstream: key, args: {type: object}, request: {method: GET, path: /c}}
  d: {description: d, upstream: oauth2, args: {type: object}, request: {method: GET, path: /d}}
access: {shared_credentials: [basic, bearer, key, oauth2]}
`, backend.URL, dir)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policytest.WriteFile(t, path, policy)
	ts := startServer(t, path, serverOptions{})
	for _, tool := range []string{"a", "b", "c", "d"} {
		ts.mustCall(tool, `{}`, contracts.StatusOK)
	}
	if seen.Load() != 4 {
		t.Fatalf("%d backend requests carried their credential, want 4", seen.Load())
	}
	// A reload the policy refuses, naming a file that cannot be read.
	policytest.WriteFile(t, path, strings.Replace(policy, dir+"/bearer", dir+"/missing", 1))
	_, reloadBody := ts.postReload()
	if !strings.Contains(reloadBody, "cannot read") {
		t.Errorf("the reload was not refused: %s", reloadBody)
	}
	_, configBody := ts.get("/v1/config")
	_, metricsBody := ts.get("/metrics")
	for what, text := range map[string]string{"/v1/config": configBody, "/metrics": metricsBody, "the reload answer": reloadBody, "the log": ts.logs.String()} {
		for _, s := range []string{secrets["TG_BASIC_PASSWORD"], secrets["TG_QUERY_KEY"], secrets["TG_CLIENT_ID"], files["bearer"], files["client-secret"], "tg-access-token-4411"} {
			if strings.Contains(text, s) {
				t.Errorf("%s holds the secret %q:\n%s", what, s, text)
			}
		}
	}
	if !strings.Contains(configBody, `"tools"`) {
		t.Errorf("/v1/config: %s", configBody)
	}
}
