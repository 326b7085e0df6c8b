package extproc

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy"
)

// TestEchoedSecretsAreRedactedThroughEnvoy: the response phase reads the
// answer Envoy got, so a backend that echoes the request Envoy sent (the
// upstream's bearer token, an API key in the query, the agent's forwarded
// Authorization) in a 4xx body the error detail quotes, or in a 2xx body
// that is the data, gets its secrets replaced before the envelope is
// made, whatever the encoding.
func TestEchoedSecretsAreRedactedThroughEnvoy(t *testing.T) {
	const (
		token = "envoy-tok/en+9Q="
		key   = "envoy-key/Zz+1"
		agent = "agent-envoy/77+x"
	)
	doc := `
version: 1
server:
  transparent: true
upstreams:
  crm:
    url: http://crm.local
    auth: {bearer: {token: "` + token + `"}}
    forward_headers: [X-Agent-Token]
  maps:
    url: http://maps.local
    auth: {api_key: {query: key, value: "` + key + `"}}
access:
  shared_credentials: [crm, maps]
tools:
  customer:
    description: Find a customer.
    upstream: crm
    args: {type: object, required: [id], properties: {id: {type: string}}}
    request: {method: GET, path: "/customers/{id}"}
    response: {error_detail: body.echo}
  geocode:
    description: Geocode an address.
    upstream: maps
    args: {type: object, required: [id], properties: {id: {type: string}}}
    request: {method: GET, path: "/geocode/{id}"}
    response: {error_detail: body.echo}
`
	reg := prometheus.NewRegistry()
	core, err := proxy.NewCore(proxytest.Snapshot(t, doc), proxy.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Close)
	h := &harness{t: t, client: serve(t, New(core, Options{}))}
	encodings := map[string]func(string) string{
		"verbatim":        func(s string) string { return s },
		"escaped slashes": func(s string) string { return strings.ReplaceAll(s, "/", `\/`) },
		"query-escaped":   url.QueryEscape,
		"base64":          func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) },
	}
	secrets := []string{token, key, agent}
	for _, tool := range []string{"customer", "geocode"} {
		for name, enc := range encodings {
			for _, code := range []int{400, 200} {
				t.Run(fmt.Sprintf("%s %s %d", tool, name, code), func(t *testing.T) {
					path := "/customers/c-1"
					if tool == "geocode" {
						path = "/geocode/g-1"
					}
					out, s := h.viaExtproc(legacyRequest{method: "GET", path: path, header: map[string]string{"X-Agent-Token": agent}}, nil, false)
					if s == nil {
						t.Fatalf("answered before the send: %s", out.final.body)
					}
					// The backend echoes the request Envoy sends: decoded in
					// echo, in the encoding under test; as sent in raw.
					_, rawQuery, _ := strings.Cut(out.sent.path, "?")
					q, _ := url.ParseQuery(rawQuery)
					plain := fmt.Sprintf("auth=%s agent=%s key=%s", out.sent.header.Get("Authorization"), out.sent.header.Get("X-Agent-Token"), q.Get("key"))
					if want := map[string]string{"customer": token, "geocode": key}[tool]; !strings.Contains(plain, want) {
						t.Fatalf("the request Envoy sends lacks %q: %s", want, plain)
					}
					body := `{"echo":"` + enc(plain) + `","raw":"` + out.sent.path + `"}`
					before := testutil.ToFloat64(core.Metrics().SecretsRedacted.WithLabelValues(tool))
					final := s.respond(&answer{code: code, header: map[string]string{"Content-Type": "application/json"}, body: body}, false)
					s.close()
					var env map[string]any
					if err := json.Unmarshal(final.body, &env); err != nil {
						t.Fatalf("not an envelope: %s", final.body)
					}
					text := string(final.body) + fmt.Sprint(env["message"]) + fmt.Sprint(env["observation"])
					for _, sec := range secrets {
						for _, form := range []string{sec, url.QueryEscape(sec), strings.ReplaceAll(sec, "/", `\/`), enc(sec)} {
							if strings.Contains(text, form) {
								t.Errorf("the envelope holds %q: %s", form, final.body)
							}
						}
					}
					if !strings.Contains(text, "[redacted]") {
						t.Errorf("nothing redacted: %s", final.body)
					}
					if testutil.ToFloat64(core.Metrics().SecretsRedacted.WithLabelValues(tool)) <= before {
						t.Errorf("toolgate_secrets_redacted_total{tool=%q} did not grow", tool)
					}
				})
			}
		}
	}
}
