package draft_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/learn/draft"
)

// secrets are sent in requests and answers; none may appear in what
// learning mode keeps or drafts. Each is a distinct string, so a hit
// names the leak.
var secrets = map[string]string{
	"query value":           "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
	"query name":            "sk_live_keyAsName123456",
	"authorization header":  "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
	"cookie":                "s3cr3tcookievalue9f8e7d",
	"api key header":        "AKIAIOSFODNN7EXAMPLE",
	"request body value":    "hunter2-correct-horse-battery",
	"request body key":      "xoxb-123456789012-abcdefghij",
	"path segment":          "eyJhbGciOiJIUzI1NiJ9",
	"answer body value":     "tok_9Zx8Yw7Vu6Ts5Rq4Pp3Oo2",
	"answer code value":     "sk_test_51HcodeValueSecret",
	"answer error sentence": "password-hunter3-leaked",
	"answer nested key":     "glpat-xxYYzz0011223344",
	"answer cookie":         "sessionSecretValue77aa",
	"answer location":       "resetToken88bbXYZ",
	"upstream credential":   "static-upstream-secret-0042",
	"tool argument":         "Tr0ub4dor-and-3-more",
}

// privacyBackend answers every request with the answer-side secrets, in
// a code-named field, a value, a key and headers, and with a real error
// code on one route.
func privacyBackend(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Set-Cookie", "session="+secrets["answer cookie"])
	w.Header().Set("Location", "/reset?token="+secrets["answer location"])
	w.Header().Set("Retry-After", "3")
	if strings.HasSuffix(r.URL.Path, "/denied") {
		_, _ = io.WriteString(w, `{"code":"E_NOPERM","msg":"no"}`)
		return
	}
	body, _ := json.Marshal(map[string]any{
		"token":  secrets["answer body value"],
		"code":   secrets["answer code value"],
		"status": "error: " + secrets["answer error sentence"],
		"nested": map[string]any{secrets["answer nested key"]: map[string]any{"x": 1}},
		"items":  []any{map[string]any{"id": 1}},
	})
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

const privacyPolicy = `
version: 1
server:
  transparent: true
  passthrough:
    - {prefix: /api/, upstream: legacy}
  learn: {enum_values: {{enum}}}
upstreams:
  legacy:
    url: "{{url}}"
    headers: {Authorization: "Bearer static-upstream-secret-0042"}
tools:
  lookup:
    description: Look something up.
    upstream: legacy
    args: {type: object, required: [q], properties: {q: {type: string}}}
    request: {method: GET, path: /tool/lookup, query: {q: q}}
access: {shared_credentials: [legacy]} # a test: anyone may use the static credential
`

func TestNothingSecretIsLearned(t *testing.T) {
	for _, enum := range []bool{true, false} {
		name := "with enum_values"
		if !enum {
			name = "with enum_values off"
		}
		t.Run(name+", secrets sent both ways appear neither in the summary nor in the draft", func(t *testing.T) {
			backend := httptest.NewServer(http.HandlerFunc(privacyBackend))
			t.Cleanup(backend.Close)
			doc := strings.NewReplacer("{{url}}", backend.URL, "{{enum}}", map[bool]string{true: "true", false: "false"}[enum]).Replace(privacyPolicy)
			snap, err := config.CompileSource("p.yaml", []byte(doc), config.Options{})
			if err != nil {
				t.Fatal(err)
			}
			settings := *snap.Server.Learn
			settings.File = t.TempDir() + "/learned.json"
			l := learn.New(settings, learn.Options{})
			srv := serve(t, "p.yaml", doc, l)
			n := 0
			for i := range 3 {
				for _, path := range []string{
					"/api/v1/search?q=" + secrets["query value"] + "&" + secrets["query name"] + "=1",
					"/api/v1/reset/" + secrets["path segment"],
					"/api/v1/denied",
				} {
					r := recorded{Method: http.MethodPost, Path: path, Header: map[string]string{
						"Content-Type":  "application/json",
						"Authorization": "Bearer " + secrets["authorization header"],
						"Cookie":        "sid=" + secrets["cookie"],
						"X-Api-Key":     secrets["api key header"],
					}}
					body, _ := json.Marshal(map[string]any{"password": secrets["request body value"], secrets["request body key"]: i, "code": secrets["request body value"]})
					r.Body = string(body)
					send(t, srv.URL, r)
					n++
				}
				send(t, srv.URL, recorded{Method: http.MethodPost, Path: "/v1/tools/lookup", Body: `{"q":"` + secrets["tool argument"] + `"}`})
				n++
			}
			waitLearned(t, l, n)
			if err := l.Save(); err != nil {
				t.Fatal(err)
			}
			saved, err := learn.ReadSummary(settings.File)
			if err != nil {
				t.Fatal(err)
			}
			summary, _ := json.Marshal(saved)
			d, err := draft.Write(l.Summary(), draft.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for what, secret := range secrets {
				for doc, text := range map[string]string{"summary": string(summary), "draft": string(d.YAML)} {
					for _, probe := range []string{secret, secret[:12]} {
						if strings.Contains(text, probe) {
							t.Errorf("the %s holds the %s (%q)", doc, what, probe)
						}
					}
				}
			}
			// What may be kept is kept: the code of the refusal, while
			// enum_values is on, and names that are not data.
			for _, want := range []string{`"password"`, `"token"`, `"Retry-After"`, `/api/v1/reset/{reset_id}`} {
				if !strings.Contains(string(summary), want) {
					t.Errorf("the summary lacks %s", want)
				}
			}
			if got := strings.Contains(string(summary), "E_NOPERM") || strings.Contains(string(d.YAML), "E_NOPERM"); got != enum {
				t.Errorf("E_NOPERM kept: %v, want %v", got, enum)
			}
		})
	}
}

// waitLearned waits until the learner has seen n exchanges: they are
// shown to it after the client has its answer.
func waitLearned(t *testing.T, l *learn.Learner, n int) {
	t.Helper()
	waitUntil(t, func() bool { return l.Summary().Exchanges >= int64(n) })
}
