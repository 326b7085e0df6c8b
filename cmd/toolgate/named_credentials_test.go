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

// TestNamedCredentialsStayOutOfConfig: an upstream holding two named
// credentials (one from the environment, one from a file) sends each
// tool's own to the backend, and neither shows in GET /v1/config,
// /metrics, the answer to a reload refused for a credential name no
// upstream holds, or the log.
func TestNamedCredentialsStayOutOfConfig(t *testing.T) {
	const appToken, clientPass = "tg-app-token-6c3e", "tg-client-pass-0b9a"
	t.Setenv("TG_APP_TOKEN", appToken)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "client-pass"), []byte(clientPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var right atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, basic := r.BasicAuth()
		switch {
		case r.URL.Path == "/push" && r.Header.Get("X-Gotify-Key") == appToken && !basic,
			r.URL.Path == "/read" && basic && u == "reader" && p == clientPass && r.Header.Get("X-Gotify-Key") == "":
			right.Add(1)
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
  gotify:
    url: %[1]s
    credentials:
      app: {api_key: {header: X-Gotify-Key, value: "${TG_APP_TOKEN}"}}
      client: {basic: {username: reader, password_file: %[2]s/client-pass}}
tools:
  push: {description: d, upstream: gotify, credential: app, args: {type: object}, request: {method: GET, path: /push}}
  read: {description: d, upstream: gotify, credential: client, args: {type: object}, request: {method: GET, path: /read}}
access: {shared_credentials: [gotify]}
`, backend.URL, dir)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policytest.WriteFile(t, path, policy)
	ts := startServer(t, path, serverOptions{})
	ts.mustCall("push", `{}`, contracts.StatusOK)
	ts.mustCall("read", `{}`, contracts.StatusOK)
	if right.Load() != 2 {
		t.Fatalf("%d backend requests carried their tool's credential alone, want 2", right.Load())
	}
	policytest.WriteFile(t, path, strings.Replace(policy, "credential: client,", "credential: clients,", 1))
	_, reloadBody := ts.postReload()
	if !strings.Contains(reloadBody, `tools.read.credential: upstream gotify has no credential "clients" (it has app, client)`) {
		t.Errorf("the reload was not refused at the credential's name: %s", reloadBody)
	}
	ts.mustCall("read", `{}`, contracts.StatusOK) // the last good policy serves on
	_, configBody := ts.get("/v1/config")
	_, metricsBody := ts.get("/metrics")
	for what, text := range map[string]string{"/v1/config": configBody, "/metrics": metricsBody, "the reload answer": reloadBody, "the log": ts.logs.String()} {
		for _, s := range []string{appToken, clientPass} {
			if strings.Contains(text, s) {
				t.Errorf("%s holds the secret %q:\n%s", what, s, text)
			}
		}
	}
}
