package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

// gotifyCredentials is Gotify's two tokens on one upstream: an
// application token to push, a client token to read.
const gotifyCredentials = `version: 1
upstreams:
  gotify:
    url: http://127.0.0.1:7001
    auth:
      bearer: {token: default-token}
    credentials:
      app:
        api_key: {header: X-Gotify-Key, value: "${APP_TOKEN}"}
      client:
        basic: {username: admin, password_file: ../auth/token.txt}
tools:
  send:
    description: Push a message.
    upstream: gotify
    credential: app
    side_effect: true
    args: {type: object}
    request: {method: POST, path: /message}
  read:
    description: Read messages.
    upstream: gotify
    credential: client
    args: {type: object}
    request: {method: GET, path: /message}
  health:
    description: Is Gotify up.
    upstream: gotify
    args: {type: object}
    request: {method: GET, path: /health}
`

// TestNamedCredentialsCompile: upstreams.<name>.credentials compile as
// auth does (secrets, files relative to the policy's directory), each tool
// carries the name it picked, and a tool that names none keeps auth.
func TestNamedCredentialsCompile(t *testing.T) {
	env := func(k string) (string, bool) {
		return map[string]string{"APP_TOKEN": "app-secret-token"}[k], k == "APP_TOKEN"
	}
	snap, err := CompileSource("testdata/invalid/p.yaml", []byte(gotifyCredentials+"access: {default: deny}\n"), Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	up := snap.Upstreams["gotify"]
	if up.Auth == nil || up.Auth.Kind != policy.AuthBearer {
		t.Errorf("auth = %+v, want the bearer default", up.Auth)
	}
	app, client := up.Credentials["app"], up.Credentials["client"]
	if app == nil || app.Kind != policy.AuthAPIKey || app.Header != "X-Gotify-Key" || app.Token.Value != "app-secret-token" {
		t.Errorf("credentials.app = %+v", app)
	}
	if client == nil || client.Kind != policy.AuthBasic || !strings.HasSuffix(client.Password.File, "/testdata/auth/token.txt") {
		t.Errorf("credentials.client = %+v", client)
	}
	for tool, want := range map[string]string{"send": "app", "read": "client", "health": ""} {
		if got := snap.Tools[tool].Credential; got != want {
			t.Errorf("tools.%s.credential = %q, want %q", tool, got, want)
		}
	}
	if up.CredentialOf("app") != app || up.CredentialOf("") != up.Auth || up.CredentialOf("nope") != nil {
		t.Error("CredentialOf does not pick the named credential, or auth for none")
	}
}

// TestNamedCredentialsOpenToUnidentifiedCallers: each credential is judged
// by the requests that carry it. A named credential is refused at its own
// key while a tool naming it serves callers toolgate cannot identify;
// access.shared_credentials opens every credential of the upstream; auth is
// judged by the tools that name no credential and the passthrough routes.
func TestNamedCredentialsOpenToUnidentifiedCallers(t *testing.T) {
	env := func(string) (string, bool) { return "x-token-value", true }
	for _, c := range []struct {
		name, extra string
		want        []string // substrings of the error; none: it loads
		not         []string
	}{
		{
			name:  "default allow: every credential in use is refused at its own key",
			extra: "access: {default: allow}\n",
			want: []string{
				"upstreams.gotify.credentials.app: callers toolgate cannot identify use this credential: access.default is allow, so any caller may call send,",
				"upstreams.gotify.credentials.client: callers toolgate cannot identify use this credential: access.default is allow, so any caller may call read,",
				"upstreams.gotify.auth: callers toolgate cannot identify use this credential: access.default is allow, so any caller may call health,",
			},
		},
		{
			name:  "shared_credentials opens them all",
			extra: "access: {default: allow, shared_credentials: [gotify]}\n",
		},
		{
			name:  "identified callers only: loads",
			extra: "access: {default: deny, callers: {ops: {tools: [send, read, health]}}}\n",
		},
		{
			name:  "a passthrough route carries auth only",
			extra: "server: {transparent: true, passthrough: [{prefix: /raw/, upstream: gotify}]}\naccess: {default: deny}\n",
			want:  []string{"upstreams.gotify.auth: callers toolgate cannot identify use this credential: server.passthrough forwards anyone's requests under /raw/"},
			not:   []string{"credentials.app", "credentials.client"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := CompileSource("testdata/invalid/p.yaml", []byte(gotifyCredentials+c.extra), Options{LookupEnv: env})
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant %q", err, w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("err = %v\nnames %q", err, n)
				}
			}
		})
	}
}

// TestUnusedNamedCredentialIsAWarning: a credential no tool names loads,
// with a warning at its key.
func TestUnusedNamedCredentialIsAWarning(t *testing.T) {
	src := strings.Replace(gotifyCredentials, "    credential: client\n", "", 1) + "access: {default: deny}\n"
	var warns []string
	_, err := CompileSource("testdata/invalid/p.yaml", []byte(src), Options{
		LookupEnv: func(string) (string, bool) { return "x-token-value", true },
		Warn:      func(e *Error) { warns = append(warns, e.Error()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "upstreams.gotify.credentials.client: no tool names this credential") {
		t.Errorf("warnings %q", warns)
	}
}

// TestNamedCredentialsDocExample keeps docs/policy.md's named credentials
// example true: it compiles (its file replaced by a test file) into the
// credentials and choices the page describes.
func TestNamedCredentialsDocExample(t *testing.T) {
	page, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "### Named credentials: `credentials`")
	if !ok {
		t.Fatal("docs/policy.md has no named credentials section")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	block, _, _ := strings.Cut(rest, "```")
	token, err := filepath.Abs("testdata/auth/token.txt")
	if err != nil {
		t.Fatal(err)
	}
	doc := "version: 1\n" + strings.ReplaceAll(block, "/etc/toolgate-secrets/gotify/client-token", token)
	snap, err := CompileSource("policy.md", []byte(doc), Options{LookupEnv: func(k string) (string, bool) { return "app-token-value", k == "GOTIFY_APP_TOKEN" }})
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	up := snap.Upstreams["gotify"]
	if up == nil || up.Auth != nil || len(up.Credentials) != 2 || up.Credentials["client"].Token.File != token {
		t.Fatalf("upstream gotify = %+v", up)
	}
	if snap.Tools["push"].Credential != "app" || snap.Tools["list_messages"].Credential != "client" {
		t.Errorf("credentials picked: push %q, list_messages %q", snap.Tools["push"].Credential, snap.Tools["list_messages"].Credential)
	}
}
