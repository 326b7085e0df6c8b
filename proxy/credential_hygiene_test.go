package proxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// The secrets of TestSecretsNeverAppear: distinctive strings, so finding
// one anywhere is a leak.
const (
	hygieneUser     = "user-Zq8c"
	hygienePassword = "pw-Vx71d"
	hygieneFilePass = "filepw-Lr4e"
	hygieneBearer   = "bearer-Kp3sf"
	hygieneQueryKey = "qkey-Wm5tg"
	hygieneHdrKey   = "hkey-Nb2wh"
	hygieneClientID = "client-Jd6ri"
	hygieneSecret   = "csecret-Yt2qj"
	hygieneToken    = "access-Hg7rk"
)

// TestSecretsNeverAppear runs calls through every kind of upstream
// credential, successful and failing (backends that echo what they got in
// their error answers, a token endpoint that echoes the client's secret,
// a secret file rotated to something unusable), and looks for every
// secret in everything toolgate says: envelopes, the log at debug level,
// spans, metrics and error messages.
func TestSecretsNeverAppear(t *testing.T) {
	dir := t.TempDir()
	writeSecret := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	passFile := writeSecret("password", hygieneFilePass)
	bearerFile := writeSecret("token", hygieneBearer)
	secretFile := writeSecret("client-secret", hygieneSecret)

	// The backend echoes its request's header and query in its error
	// answers, as a verbose legacy service would.
	var fail atomic.Bool
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() || r.URL.Query().Get("mode") == "fail" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprintf(w, "denied %v %s", r.Header, r.URL.RawQuery)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer backend.Close()
	var tokenFail atomic.Bool
	var issued atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if tokenFail.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"error":"invalid_request","error_description":"bad request %q"}`, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"access_token":"%s-%d","token_type":"Bearer","expires_in":3600}`, hygieneToken, issued.Add(1))
	}))
	defer idp.Close()

	doc := strings.NewReplacer("{{url}}", backend.URL, "{{idp}}", idp.URL, "{{pass}}", passFile, "{{bearer}}", bearerFile, "{{secret}}", secretFile).Replace(`
version: 1
server:
  transparent: true
  passthrough: [{prefix: /raw, upstream: bearer}]
upstreams:
  basic_env: {url: "{{url}}", auth: {basic: {username: "${USER_NAME}", password: "${PASSWORD}"}}}
  basic_file: {url: "{{url}}", auth: {basic: {username: "${USER_NAME}", password_file: "{{pass}}"}}}
  bearer: {url: "{{url}}", auth: {bearer: {token_file: "{{bearer}}"}}}
  query_key: {url: "{{url}}", auth: {api_key: {query: key, value: "${QUERY_KEY}"}}}
  header_key: {url: "{{url}}", auth: {api_key: {header: X-Api-Key, value: "${HEADER_KEY}"}}}
  oauth2:
    url: "{{url}}"
    auth:
      oauth2: {token_url: "{{idp}}/token", client_id: "${CLIENT_ID}", client_secret_file: "{{secret}}", auth_style: params}
tools:
  t_basic_env: {description: d, upstream: basic_env, args: {type: object, properties: {mode: {type: string}}}, request: {method: GET, path: /a, query: {mode: mode}}}
  t_basic_file: {description: d, upstream: basic_file, args: {type: object, properties: {mode: {type: string}}}, request: {method: GET, path: /b, query: {mode: mode}}}
  t_bearer: {description: d, upstream: bearer, args: {type: object, properties: {mode: {type: string}}}, request: {method: GET, path: /c, query: {mode: mode}}}
  t_query_key: {description: d, upstream: query_key, args: {type: object, properties: {mode: {type: string}}}, request: {method: GET, path: /d, query: {mode: mode}}}
  t_header_key: {description: d, upstream: header_key, args: {type: object, properties: {mode: {type: string}}}, request: {method: GET, path: /e, query: {mode: mode}}}
  t_oauth2: {description: d, upstream: oauth2, side_effect: true, args: {type: object, properties: {mode: {type: string}}}, request: {method: POST, path: /f, query: {mode: mode}}}
access: {shared_credentials: [basic_env, basic_file, bearer, query_key, header_key, oauth2]}
`)
	env := map[string]string{"USER_NAME": hygieneUser, "PASSWORD": hygienePassword, "QUERY_KEY": hygieneQueryKey,
		"HEADER_KEY": hygieneHdrKey, "CLIENT_ID": hygieneClientID}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	a := newAuthCore(t, doc, env, Options{TracerProvider: tp})
	var said strings.Builder // everything toolgate answered
	call := func(tool, args string) {
		resp, env := a.call(t, tool, args, map[string]string{"Idempotency-Key": fmt.Sprintf("k-%d", time.Now().UnixNano())})
		b, _ := json.Marshal(env)
		fmt.Fprintf(&said, "%d %v %s\n", resp.StatusCode, resp.Header, b)
	}
	tools := []string{"t_basic_env", "t_basic_file", "t_bearer", "t_query_key", "t_header_key", "t_oauth2"}
	for _, tool := range tools {
		call(tool, `{"mode":"ok"}`)
		call(tool, `{"mode":"fail"}`)
	}
	// A passthrough answer is the backend's own; only its failure is ours.
	fail.Store(true)
	resp, err := a.server.Client().Get(a.server.URL + "/raw/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	fail.Store(false)

	// The token endpoint fails, echoing the client's secret; a new token
	// is needed (the backend refused the last one).
	tokenFail.Store(true)
	fail.Store(true)
	call("t_oauth2", `{"mode":"ok"}`)
	fail.Store(false)
	a.clock.Add(2 * time.Second)
	call("t_oauth2", `{"mode":"ok"}`)
	res := a.core.Call(context.Background(), &Request{Tool: "t_oauth2", Body: []byte(`{}`), IdempotencyKey: "k-direct"})
	fmt.Fprintf(&said, "%+v %s\n", res, res.Reason)
	_, _, perr := a.passthroughHeader("oauth2", "")
	fmt.Fprintf(&said, "%v\n", perr)

	// A secret file rotated to something unusable: the warning names the
	// file and the problem, never the content.
	if err := os.WriteFile(bearerFile, []byte(hygieneBearer+"\x00more\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.clock.Add(upstream.FileCheckInterval)
	call("t_bearer", `{"mode":"ok"}`)
	if !strings.Contains(a.log(), "credential file unusable") || !strings.Contains(a.log(), "upstream token request failed") {
		t.Fatalf("the warnings this test looks into were not logged:\n%s", a.log())
	}

	// Load errors about a secret value never repeat it.
	for _, bad := range []map[string]string{
		{"PASSWORD": hygienePassword + "\r\nX-Injected: 1"},
		{"USER_NAME": hygieneUser + ":" + hygienePassword},
		{"HEADER_KEY": hygieneHdrKey + "\n"},
		{"QUERY_KEY": hygieneQueryKey + "\x00"},
	} {
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		for k, v := range bad {
			e[k] = v
		}
		_, err := config.CompileSource("auth.yaml", []byte(doc), config.Options{LookupEnv: func(k string) (string, bool) { v, ok := e[k]; return v, ok }})
		var errs config.Errors
		if !errors.As(err, &errs) {
			t.Fatalf("a bad secret loads: %v", err)
		}
		fmt.Fprintf(&said, "%v\n", err)
	}

	var spans strings.Builder
	for _, s := range exp.GetSpans() {
		fmt.Fprintf(&spans, "%+v\n", s)
	}
	families, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var metrics strings.Builder
	for _, f := range families {
		fmt.Fprintf(&metrics, "%v\n", f)
	}
	secrets := []string{hygieneUser, hygienePassword, hygieneFilePass, hygieneBearer, hygieneQueryKey, hygieneHdrKey,
		hygieneClientID, hygieneSecret, hygieneToken,
		base64.StdEncoding.EncodeToString([]byte(hygieneUser + ":" + hygienePassword)),
		base64.StdEncoding.EncodeToString([]byte(hygieneUser + ":" + hygieneFilePass))}
	for what, text := range map[string]string{"answers and errors": said.String(), "log": a.log(), "spans": spans.String(), "metrics": metrics.String()} {
		if len(text) < 100 {
			t.Fatalf("the %s are nearly empty: %q", what, text)
		}
		for _, s := range secrets {
			if i := strings.Index(text, s); i >= 0 {
				t.Errorf("the %s hold the secret %q: …%s…", what, s, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
	if issued.Load() == 0 || !strings.Contains(said.String(), `"status":"ok"`) || !strings.Contains(said.String(), `"status":"forbidden"`) {
		t.Errorf("the calls did not go as planned:\n%s", said.String())
	}
}
