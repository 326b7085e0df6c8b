package openapi

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/config/policydoc"
	"github.com/toolgate/toolgate/policy"
)

// TestGotifyOperationsNameTheirOwnCredential imports Gotify's own document,
// whose operations need an application token to push (createMessage) and
// a client token for the rest: each tool names the credential its
// operation's security requirement asks for, so none is forbidden as
// generated; the operations without a requirement send none.
func TestGotifyOperationsNameTheirOwnCredential(t *testing.T) {
	d := importFile(t, "testdata/gotify-v2.9.1.json", Options{})
	if want := []string{"GOTIFY_REST_CLIENT_TOKEN", "GOTIFY_REST_APP_TOKEN"}; !slices.Equal(d.Env, want) {
		t.Errorf("env %v, want %v", d.Env, want)
	}
	snap, err := config.CompileSource("gotify.yaml", d.YAML, config.Options{LookupEnv: policydoc.PlaceholderEnv(d.Env)})
	if err != nil {
		t.Fatal(err)
	}
	up := snap.Upstreams["gotify_rest-api"]
	if up.Auth != nil {
		t.Errorf("auth = %+v, want none: the operations need different credentials", up.Auth)
	}
	for name, env := range map[string]string{"app_token": "GOTIFY_REST_APP_TOKEN", "client_token": "GOTIFY_REST_CLIENT_TOKEN"} {
		if c := up.Credentials[name]; c == nil || c.Kind != policy.AuthBearer || c.Header != "Authorization" {
			t.Errorf("credentials.%s = %+v, want a bearer token", name, c)
		}
		if !strings.Contains(string(d.YAML), "'${"+env+"}'") {
			t.Errorf("credentials.%s does not read ${%s}", name, env)
		}
	}
	// What the document requires, operation by operation.
	raw, err := os.ReadFile("testdata/gotify-v2.9.1.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string                `json:"operationId"`
			Security    []map[string][]string `json:"security"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, item := range doc.Paths {
		for _, op := range item {
			tool := snap.Tools[op.OperationID]
			if tool == nil {
				continue // not imported (a websocket, an upload)
			}
			n++
			want := ""
			switch {
			case len(op.Security) == 0:
			case slices.ContainsFunc(op.Security, func(r map[string][]string) bool { _, ok := r["appTokenAuthorizationHeader"]; return ok }):
				want = "app_token"
			default:
				want = "client_token"
			}
			if tool.Credential != want {
				t.Errorf("%s: credential %q, want %q (security %v)", op.OperationID, tool.Credential, want, op.Security)
			}
		}
	}
	if n < 25 {
		t.Errorf("only %d tools checked", n)
	}
	for tool, want := range map[string]string{"createMessage": "app_token", "getMessages": "client_token", "getClients": "client_token", "getHealth": "", "getVersion": ""} {
		if got := snap.Tools[tool].Credential; got != want {
			t.Errorf("%s: credential %q, want %q", tool, got, want)
		}
	}
}

// TestOperationSecurityPicksACredential: each operation sends the first
// alternative of its security requirement toolgate supports, says so when
// there were others, and sends none without a requirement; one scheme that
// serves every operation stays the upstream's auth.
func TestOperationSecurityPicksACredential(t *testing.T) {
	const schemes = `components:
  securitySchemes:
    key: {type: apiKey, in: header, name: X-Key}
    other: {type: apiKey, in: query, name: k}
    session: {type: apiKey, in: cookie, name: sid}
    login: {type: http, scheme: basic}
    digest: {type: http, scheme: digest}
    machine: {type: oauth2, flows: {clientCredentials: {tokenUrl: "https://auth.example.com/token", scopes: {read: Read, write: Write}}}}
`
	op := func(id, security string) string {
		s := "    get:\n      operationId: " + id + "\n"
		if security != "" {
			s += "      security: " + security + "\n"
		}
		return s + "      responses: {'200': {description: ok}}\n"
	}
	type want struct {
		credential string // "" for none
		comment    string // a comment the tool's credential (or upstream) carries; "" for none
	}
	for _, c := range []struct {
		name     string
		global   string
		ops      map[string]string // operationId -> its security ("" to inherit)
		want     map[string]want
		auth     string // the upstream's auth kind, when one scheme serves every operation
		named    map[string]string
		env      []string
		contains []string
	}{
		{
			name:   "one scheme for every operation stays auth",
			global: "[{key: []}]",
			ops:    map[string]string{"a": "", "b": ""},
			want:   map[string]want{"a": {}, "b": {}},
			auth:   "api_key",
			env:    []string{"SHOP_API_KEY"},
		},
		{
			name:     "one scheme for every operation, alternatives said once with auth",
			ops:      map[string]string{"a": "[{digest: []}, {key: []}]", "b": "[{key: []}]"},
			want:     map[string]want{"a": {}, "b": {}},
			auth:     "api_key",
			env:      []string{"SHOP_API_KEY"},
			contains: []string{"The operations' security requirements also accept digest; each operation sends the first toolgate supports, key."},
		},
		{
			name:   "a credential every operation makes optional is not sent",
			global: "[{}, {key: []}]",
			ops:    map[string]string{"a": "", "b": ""},
			want:   map[string]want{"a": {comment: "The document lets this operation be called without a credential"}, "b": {}},
		},
		{
			name:   "an operation that opts out of the global requirement sends nothing",
			global: "[{key: []}]",
			ops:    map[string]string{"a": "", "b": "[]"},
			want:   map[string]want{"a": {credential: "key"}, "b": {}},
			named:  map[string]string{"key": "api_key"},
			env:    []string{"SHOP_KEY"},
		},
		{
			name:  "each operation its own scheme, with the variables named from the schemes",
			ops:   map[string]string{"a": "[{login: []}]", "b": "[{machine: [write]}]", "c": "[{session: []}]"},
			want:  map[string]want{"a": {credential: "login"}, "b": {credential: "machine"}, "c": {credential: "session"}},
			named: map[string]string{"login": "basic", "machine": "oauth2", "session": "api_key"},
			env:   []string{"SHOP_LOGIN_USERNAME", "SHOP_LOGIN_PASSWORD", "SHOP_MACHINE_CLIENT_ID", "SHOP_MACHINE_CLIENT_SECRET", "SHOP_SESSION"},
			contains: []string{
				"api_key: {cookie: sid, value: '${SHOP_SESSION}'}",
				"scopes: [write]",
			},
		},
		{
			name: "alternatives: the first supported one, said in a comment",
			ops: map[string]string{
				"a": "[{digest: []}, {key: []}]",
				"b": "[{key: [], other: []}, {other: []}]",
				"c": "[{}, {key: []}]",
				"d": "[{digest: []}]",
			},
			want: map[string]want{
				"a": {credential: "key", comment: "The document accepts any of digest, key; this tool sends the first toolgate supports, key."},
				"b": {credential: "other", comment: "The document accepts any of key + other, other; this tool sends the first toolgate supports, other."},
				"c": {comment: "The document lets this operation be called without a credential (an empty security requirement), so it sends none."},
				"d": {comment: "TODO: the document requires digest (http digest), which toolgate cannot send"},
			},
			named: map[string]string{"key": "api_key", "other": "api_key"},
			env:   []string{"SHOP_KEY", "SHOP_OTHER"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := "openapi: 3.0.3\ninfo: {title: Shop API, version: '1'}\nservers: [{url: 'https://shop.example.com/v1'}]\n" + schemes
			if c.global != "" {
				doc += "security: " + c.global + "\n"
			}
			doc += "paths:\n"
			for _, id := range slices.Sorted(mapsKeys(c.ops)) {
				doc += "  /" + id + ":\n" + op(id, c.ops[id])
			}
			d, err := Import([]byte(doc), Options{})
			if err != nil {
				t.Fatal(err)
			}
			text := string(d.YAML)
			// The comments' words, without their line breaks.
			flat := strings.Join(slices.DeleteFunc(strings.Fields(text), func(f string) bool { return f == "#" }), " ")
			snap, err := config.CompileSource("draft.yaml", d.YAML, config.Options{LookupEnv: policydoc.PlaceholderEnv(d.Env)})
			if err != nil {
				t.Fatalf("%v\n%s", err, text)
			}
			if !slices.Equal(d.Env, c.env) {
				t.Errorf("env %v, want %v", d.Env, c.env)
			}
			up := snap.Upstreams["shop_api"]
			switch {
			case c.auth != "" && (up.Auth == nil || string(up.Auth.Kind) != c.auth || len(up.Credentials) > 0):
				t.Errorf("auth %+v, credentials %v, want %s auth alone:\n%s", up.Auth, up.Credentials, c.auth, text)
			case c.auth == "" && up.Auth != nil:
				t.Errorf("auth %+v, want none:\n%s", up.Auth, text)
			}
			if len(up.Credentials) != len(c.named) {
				t.Errorf("credentials %v, want %v:\n%s", up.Credentials, c.named, text)
			}
			for name, kind := range c.named {
				if cr := up.Credentials[name]; cr == nil || string(cr.Kind) != kind {
					t.Errorf("credentials.%s = %+v, want %s:\n%s", name, cr, kind, text)
				}
			}
			for id, w := range c.want {
				if got := snap.Tools[id].Credential; got != w.credential {
					t.Errorf("%s: credential %q, want %q:\n%s", id, got, w.credential, text)
				}
				if w.comment != "" && !strings.Contains(flat, w.comment) {
					t.Errorf("%s: the draft does not say %q:\n%s", id, w.comment, text)
				}
			}
			for _, s := range c.contains {
				if !strings.Contains(text, s) && !strings.Contains(flat, s) {
					t.Errorf("the draft lacks %q:\n%s", s, text)
				}
			}
		})
	}
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
