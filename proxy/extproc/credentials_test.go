package extproc

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/proxy"
)

// TestCredentialsThroughEnvoy: the request Envoy sends carries the
// upstream's credential, on a tool's route and on a passthrough route
// alike; a passthrough whose credential cannot be had is answered 502
// before anything is sent.
func TestCredentialsThroughEnvoy(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // down
	}))
	defer idp.Close()
	doc := strings.ReplaceAll(`
version: 1
server:
  transparent: true
  passthrough:
    - {prefix: /maps/health, upstream: maps}
    - {prefix: /fcm/health, upstream: fcm}
upstreams:
  maps:
    url: http://maps.local
    auth: {api_key: {query: key, value: map-key}}
  crm:
    url: http://crm.local
    auth: {bearer: {token: crm-token}}
    forward_headers: [X-Tenant]
  fcm:
    url: http://fcm.local
    auth:
      oauth2: {token_url: "{{idp}}/token", client_id: id, client_secret: s}
tools:
  customer:
    description: Find a customer.
    upstream: crm
    args: {type: object, required: [id], properties: {id: {type: string}}}
    request: {method: GET, path: "/customers/{id}"}
access: {shared_credentials: [maps, crm, fcm]}
`, "{{idp}}", idp.URL)
	snap, err := config.CompileSource("extproc.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, err := proxy.NewCore(snap, proxy.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Close)
	h := &harness{t: t, client: serve(t, New(core, Options{}))}

	t.Run("a tool's backend request carries the credential and the forwarded header", func(t *testing.T) {
		s := h.open()
		msg := &httpMessage{method: "GET", path: "/customers/c-1", header: http.Header{
			"Authorization": {"Bearer agent"}, "X-Tenant": {"acme"}, "X-Toolgate-Caller": {"ops"}}}
		resp := s.roundTrip(requestHeaders(msg, true))
		if resp.GetImmediateResponse() != nil {
			t.Fatalf("answered locally: %v", resp.GetImmediateResponse())
		}
		applyCommon(msg, resp.GetRequestHeaders().GetResponse())
		if msg.header.Get("Authorization") != "Bearer crm-token" || msg.header.Get("X-Tenant") != "acme" || msg.header.Get("X-Toolgate-Caller") != "" {
			t.Errorf("backend request header %v", msg.header)
		}
		s.close()
	})
	t.Run("a passthrough request carries the API key in its query", func(t *testing.T) {
		s := h.open()
		msg := &httpMessage{method: "GET", path: "/maps/health?key=agent&v=1", header: http.Header{}}
		resp := s.roundTrip(requestHeaders(msg, true))
		if resp.GetImmediateResponse() != nil {
			t.Fatal("answered locally")
		}
		applyCommon(msg, resp.GetRequestHeaders().GetResponse())
		if msg.path != "/maps/health?v=1&key=map-key" {
			t.Errorf("path %q", msg.path)
		}
		s.close()
	})
	t.Run("a passthrough without its credential is answered 502", func(t *testing.T) {
		s := h.open()
		msg := &httpMessage{method: "GET", path: "/fcm/health", header: http.Header{}}
		resp := s.roundTrip(requestHeaders(msg, true))
		if ir := resp.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != http.StatusBadGateway {
			t.Fatalf("answer %v", resp)
		}
		s.close()
	})
}
