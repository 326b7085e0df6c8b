// Package apifakes_test runs the cases of make e2e-apis (test/apis)
// against fakes of the same APIs, written from their public documentation
// and sources, so that make test covers the logic without the real
// servers: a PocketBase filter built from free text (the filter language
// as PocketBase's parser reads it), a draft learned in front of
// json-server with json-server-auth, and Gotify's own document imported
// and served in front of a fake Gotify.
package apifakes_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/config/policydoc"
	"github.com/toolgate/toolgate/internal/testkit/coretest"
	"github.com/toolgate/toolgate/proxy"
)

// serve compiles a policy with env (NAME=value) and serves it.
func serve(t *testing.T, policy string, obs proxy.Observer, env ...string) *httptest.Server {
	t.Helper()
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	snap, err := config.CompileSource("policy.yaml", []byte(policy), config.Options{LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }})
	if err != nil {
		t.Fatalf("%v\n%s", err, policy)
	}
	srv, _ := coretest.Serve(t, snap, proxy.Options{Observer: obs})
	return srv
}

// check compiles a draft as toolgate check does, its variables set to
// placeholders.
func check(t *testing.T, text []byte, env []string) {
	t.Helper()
	if err := policydoc.Check("draft.yaml", text, env...); err != nil {
		t.Fatalf("the draft does not pass toolgate check: %v\n%s", err, text)
	}
}

// send sends a request with a JSON body (none when nil) and headers.
func send(t *testing.T, method, url string, body any, headers ...string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// envelope is what a tool call answers.
type envelope struct {
	Status     string          `json:"status"`
	Message    string          `json:"message"`
	Retryable  bool            `json:"retryable"`
	SideEffect string          `json:"side_effect"`
	Data       json.RawMessage `json:"data"`
	raw        []byte
}

// tool calls a tool on srv; key, when set, is the idempotency key.
func tool(t *testing.T, srv *httptest.Server, name string, args any, key string) envelope {
	t.Helper()
	var headers []string
	if key != "" {
		headers = []string{"Idempotency-Key", key}
	}
	_, out := send(t, "POST", srv.URL+"/v1/tools/"+name, args, headers...)
	var e envelope
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("%s: %v: %s", name, err, out)
	}
	e.raw = out
	return e
}

// waitUntil polls cond for up to 10 seconds.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out")
}

// writeJSON answers a JSON value.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
