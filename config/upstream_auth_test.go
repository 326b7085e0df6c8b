package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

// authPolicy names every kind of upstream credential; files are relative
// to the policy file's directory.
const authPolicy = `
version: 1
upstreams:
  twilio:
    url: https://api.twilio.com
    auth:
      basic: {username: "${SID}", password_file: ../auth/token.txt}
  stripe:
    url: https://api.stripe.com
    auth:
      basic: {username: "${STRIPE_KEY}"}
  slack:
    url: https://slack.com/api
    auth:
      bearer: {token: "${SLACK_TOKEN}"}
    forward_headers: [x-tenant, Accept-Language]
  maps:
    url: https://maps.googleapis.com
    auth:
      api_key: {query: key, value_file: ../auth/token.txt}
  drf:
    url: https://api.example.com
    auth:
      api_key: {header: authorization, scheme: Token, value: "${DRF_KEY}"}
  fcm:
    url: https://fcm.googleapis.com
    auth:
      oauth2:
        token_url: https://oauth2.example.com/token
        client_id: fcm-client
        client_secret_file: /abs/never/read/because/value/used
        scopes: [https://www.googleapis.com/auth/firebase.messaging]
        params: {audience: "https://fcm.googleapis.com/"}
        auth_style: params
        tls: {ca_file: ../auth/ca.pem}
  internal:
    url: https://billing.internal:8443
    tls: {ca_file: ../auth/ca.pem, cert_file: ../auth/client.pem, key_file: ../auth/client-key.pem, server_name: billing.internal}
tools:
  notify:
    description: Notify.
    upstream: slack
    request: {method: POST, path: /chat.postMessage}
# toolgate's credentials serve identified callers only.
access:
  default: deny
  callers: {notifier: {tools: [notify]}}
`

func TestUpstreamAuthCompiles(t *testing.T) {
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policy")
	authDir := filepath.Join(dir, "auth")
	for _, d := range []string{policyDir, authDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"token.txt", "ca.pem", "client.pem", "client-key.pem"} {
		b, err := os.ReadFile(filepath.Join("testdata/auth", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(authDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	secretFile := filepath.Join(authDir, "client-secret")
	if err := os.WriteFile(secretFile, []byte("fcm-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(authPolicy, "/abs/never/read/because/value/used", secretFile, 1)
	file := filepath.Join(policyDir, "policy.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SID": "AC123", "STRIPE_KEY": "sk_test_1", "SLACK_TOKEN": "xoxb-1", "DRF_KEY": "drf-1"}
	snap, err := Load(file, Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(authDir, "token.txt")
	ca := filepath.Join(authDir, "ca.pem")
	want := map[string]*policy.Upstream{
		"twilio": {Auth: &policy.UpstreamAuth{Kind: policy.AuthBasic, Header: "Authorization", Scheme: "Basic",
			Username: policy.Secret{Value: "AC123"}, Password: policy.Secret{File: token}}},
		"stripe": {Auth: &policy.UpstreamAuth{Kind: policy.AuthBasic, Header: "Authorization", Scheme: "Basic",
			Username: policy.Secret{Value: "sk_test_1"}}},
		"slack": {Auth: &policy.UpstreamAuth{Kind: policy.AuthBearer, Header: "Authorization", Scheme: "Bearer",
			Token: policy.Secret{Value: "xoxb-1"}}, ForwardHeaders: []string{"X-Tenant", "Accept-Language"}},
		"maps": {Auth: &policy.UpstreamAuth{Kind: policy.AuthAPIKey, Query: "key", Token: policy.Secret{File: token}}},
		"drf": {Auth: &policy.UpstreamAuth{Kind: policy.AuthAPIKey, Header: "Authorization", Scheme: "Token",
			Token: policy.Secret{Value: "drf-1"}}},
		"fcm": {Auth: &policy.UpstreamAuth{Kind: policy.AuthOAuth2, Header: "Authorization", OAuth2: &policy.OAuth2Settings{
			TokenURL: "https://oauth2.example.com/token", ClientID: policy.Secret{Value: "fcm-client"}, ClientSecret: policy.Secret{File: secretFile},
			Scopes: []string{"https://www.googleapis.com/auth/firebase.messaging"}, Params: map[string]string{"audience": "https://fcm.googleapis.com/"},
			AuthStyle: policy.OAuth2AuthParams, TLS: &policy.TLSSettings{CAFile: ca}}}},
		"internal": {TLS: &policy.TLSSettings{CAFile: ca, CertFile: filepath.Join(authDir, "client.pem"),
			KeyFile: filepath.Join(authDir, "client-key.pem"), ServerName: "billing.internal"}},
	}
	for name, w := range want {
		t.Run("upstream "+name+" has its credentials", func(t *testing.T) {
			got := snap.Upstreams[name]
			if got == nil {
				t.Fatal("missing")
			}
			if !reflect.DeepEqual(got.Auth, w.Auth) {
				t.Errorf("auth = %#v\nwant %#v", got.Auth, w.Auth)
			}
			if !got.TLS.Equal(w.TLS) {
				t.Errorf("tls = %+v, want %+v", got.TLS, w.TLS)
			}
			if !reflect.DeepEqual(got.ForwardHeaders, w.ForwardHeaders) {
				t.Errorf("forward_headers = %v, want %v", got.ForwardHeaders, w.ForwardHeaders)
			}
		})
	}
	t.Run("printing the snapshot shows no secret", func(t *testing.T) {
		var out strings.Builder
		for _, name := range snap.ToolNames {
			fmt.Fprintf(&out, "%v %+v %#v", snap.Tools[name], snap.Tools[name], snap.Tools[name])
		}
		for _, up := range snap.Upstreams {
			fmt.Fprintf(&out, "%v %+v %#v %v\n", up, up, up.Auth, up.Auth)
			b, _ := json.Marshal(up.Auth)
			out.Write(b)
			if up.Auth != nil {
				slog.New(slog.NewTextHandler(&out, nil)).Info("auth", "auth", up.Auth, "user", up.Auth.Username, "oauth2", up.Auth.OAuth2)
			}
		}
		for _, secret := range []string{"AC123", "sk_test_1", "xoxb-1", "drf-1", "s3cr3t-from-file", "fcm-secret"} {
			if strings.Contains(out.String(), secret) {
				t.Errorf("%q is printed:\n%s", secret, out.String())
			}
		}
	})
}

// TestUpstreamAuthDocExample keeps the upstream credentials example of
// docs/policy.md true: it compiles (its files replaced by test files) into
// the credentials the page describes.
func TestUpstreamAuthDocExample(t *testing.T) {
	page, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "Twilio (basic auth")
	if !ok {
		t.Fatal("docs/policy.md has no upstream credentials example")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	block, _, _ := strings.Cut(rest, "```")
	abs := func(name string) string {
		p, err := filepath.Abs(filepath.Join("testdata/auth", name))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	doc := "version: 1\n" + strings.NewReplacer(
		"/etc/toolgate-secrets/twilio/auth-token", abs("token.txt"),
		"/etc/toolgate-secrets/fcm/client-secret", abs("token.txt"),
		"/etc/toolgate-secrets/billing/ca.crt", abs("ca.pem"),
		"/etc/toolgate-secrets/billing/tls.crt", abs("client.pem"),
		"/etc/toolgate-secrets/billing/tls.key", abs("client-key.pem"),
	).Replace(block)
	env := map[string]string{"TWILIO_ACCOUNT_SID": "AC1", "SLACK_BOT_TOKEN": "xoxb-1", "FCM_CLIENT_ID": "fcm", "MAPS_API_KEY": "k"}
	snap, err := CompileSource("policy.md", []byte(doc), Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	for name, kind := range map[string]policy.AuthKind{"twilio": policy.AuthBasic, "slack": policy.AuthBearer, "fcm": policy.AuthOAuth2, "maps": policy.AuthAPIKey} {
		if up := snap.Upstreams[name]; up == nil || up.Auth == nil || up.Auth.Kind != kind {
			t.Errorf("upstream %s: %+v, want %s auth", name, up, kind)
		}
	}
	if up := snap.Upstreams["billing"]; up == nil || up.TLS == nil || up.TLS.CertFile == "" {
		t.Errorf("billing: %+v", up)
	}
	if up := snap.Upstreams["crm"]; up == nil || len(up.ForwardHeaders) != 2 {
		t.Errorf("crm: %+v", up)
	} else if !reflect.DeepEqual(up.IdentityHeaders, []string{"Authorization"}) {
		t.Errorf("crm identity headers = %q, want Authorization only", up.IdentityHeaders)
	}
}

// TestIdentityHeaders: the forwarded headers that scope an idempotency key
// are every forwarded header but those non_identifying_headers lists.
func TestIdentityHeaders(t *testing.T) {
	tests := []struct {
		name, upstream string
		want           []string
	}{
		{"every forwarded header identifies by default", "forward: [X-Tenant, authorization]", []string{"X-Tenant", "Authorization"}},
		{"a header marked not identifying is left out", "forward: [Authorization, Accept-Language, X-Tenant]\n    non_identifying_headers: [accept-language]", []string{"Authorization", "X-Tenant"}},
		{"every header may be marked but a credential or a session", "forward: [Accept-Language]\n    non_identifying_headers: [Accept-Language]", nil},
		{"nothing forwarded is nothing to scope by", "timeout: 1s", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := `
version: 1
upstreams:
  crm:
    url: http://127.0.0.1:7001
    ` + strings.Replace(tt.upstream, "forward:", "forward_headers:", 1) + `
tools:
  find:
    description: Find.
    upstream: crm
    request: {method: GET, path: /c}
`
			snap, err := CompileSource("policy.yaml", []byte(doc), Options{LookupEnv: noEnv})
			if err != nil {
				t.Fatal(err)
			}
			if got := snap.Upstreams["crm"].IdentityHeaders; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("identity headers = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestScopeKeyIsASecret: state.scope_key is read from the environment and
// never printed.
func TestScopeKeyIsASecret(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef-scope"
	doc := `
version: 1
state: {scope_key: "${SCOPE_KEY}"}
upstreams:
  crm: {url: "http://127.0.0.1:7001"}
tools:
  find: {description: Find., upstream: crm, request: {method: GET, path: /c}}
`
	snap, err := CompileSource("policy.yaml", []byte(doc), Options{LookupEnv: func(k string) (string, bool) { return key, k == "SCOPE_KEY" }})
	if err != nil {
		t.Fatal(err)
	}
	if snap.State.ScopeKey.Value != key {
		t.Fatalf("scope key = %q", snap.State.ScopeKey.Value)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%v %+v %#v", snap.State, snap.State, snap.State)
	b, _ := json.Marshal(snap.State)
	out.Write(b)
	slog.New(slog.NewTextHandler(&out, nil)).Info("state", "state", snap.State, "key", snap.State.ScopeKey)
	if strings.Contains(out.String(), key) {
		t.Errorf("the scope key is printed:\n%s", out.String())
	}
}
