package extproc

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/proxy"
)

// TestForwardedIdentityScopesTheKeyThroughEnvoy: under ext_proc, two end
// users behind one caller, with the same key and arguments and their own
// forwarded credential, each get their request sent by Envoy and their own
// answer; a user's own retry is answered locally with their stored answer.
func TestForwardedIdentityScopesTheKeyThroughEnvoy(t *testing.T) {
	doc := `
version: 1
server:
  transparent: true
upstreams:
  shop:
    url: http://shop.local
    forward_headers: [Authorization]
tools:
  place_order:
    description: Place an order for the signed-in user.
    upstream: shop
    side_effect: true
    args: {type: object, required: [item], properties: {item: {type: string}}}
    request: {method: POST, path: /orders, body: {item: item}}
`
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
	order := func(token, answerBody string) (*run, *contracts.Envelope) {
		t.Helper()
		req := legacyRequest{method: "POST", path: "/orders", body: `{"item":"book"}`, header: map[string]string{
			"Authorization": token, "X-Toolgate-Caller": "shop-agent", "Idempotency-Key": "order-1", "Content-Type": "application/json"}}
		r, _ := h.viaExtproc(req, &answer{code: 200, header: map[string]string{"Content-Type": "application/json"}, body: answerBody}, false)
		env, err := contracts.DecodeEnvelope(r.final.body)
		if err != nil {
			t.Fatalf("answer %q: %v", r.final.body, err)
		}
		return r, env
	}
	alice, env := order("Bearer alice-s3cret", `{"order":"alice-1"}`)
	if alice.sent == nil || env.Replayed || string(env.Data) != `{"order":"alice-1"}` {
		t.Fatalf("alice: sent %v, envelope %+v", alice.sent != nil, env)
	}
	if got := alice.sent.header.Get("Authorization"); got != "Bearer alice-s3cret" {
		t.Fatalf("the backend request carries Authorization %q", got)
	}
	bob, env := order("Bearer bob-s3cret", `{"order":"bob-1"}`)
	if bob.sent == nil || env.Replayed || string(env.Data) != `{"order":"bob-1"}` {
		t.Fatalf("bob, same caller, key and arguments: sent %v, envelope %+v; want his own call sent", bob.sent != nil, env)
	}
	again, env := order("Bearer alice-s3cret", `{"order":"never sent"}`)
	if again.sent != nil || !env.Replayed || string(env.Data) != `{"order":"alice-1"}` {
		t.Errorf("alice's retry: sent %v, envelope %+v; want her stored answer, answered locally", again.sent != nil, env)
	}
	if !strings.Contains(string(again.final.body), "alice-1") {
		t.Errorf("alice's retry answered %s", again.final.body)
	}
}
