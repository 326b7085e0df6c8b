package draft_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/config/policydoc"
	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/learn/draft"
	"github.com/toolgate/toolgate/policy"
)

// ex is an exchange with a JSON answer.
func ex(method, path, query string, status int, answer string) *learn.Exchange {
	x := &learn.Exchange{Upstream: "api", UpstreamURL: "http://127.0.0.1:8000", Method: method, EscapedPath: path, RawQuery: query,
		Status: status, RequestHeader: http.Header{}, ResponseHeader: http.Header{}, Latency: 2 * time.Millisecond}
	if answer != "" {
		x.ResponseHeader.Set("Content-Type", "application/json")
		x.ResponseBody = []byte(answer)
	}
	return x
}

func withHeader(x *learn.Exchange, name, value string) *learn.Exchange {
	x.RequestHeader.Set(name, value)
	return x
}

func withBody(x *learn.Exchange, contentType, body string) *learn.Exchange {
	x.RequestHeader.Set("Content-Type", contentType)
	x.RequestBody = []byte(body)
	return x
}

func TestDraftingRules(t *testing.T) {
	for _, c := range []struct {
		name      string
		enumOff   bool
		exchanges []*learn.Exchange
		want      []string // in the draft
		not       []string // not in the draft
	}{
		{
			name: "a numeric code in successful answers gets a suggestion, not a rule",
			exchanges: []*learn.Exchange{
				ex("GET", "/orders", "", 200, `{"errcode":0,"data":[]}`),
				ex("GET", "/orders", "", 200, `{"errcode":40001,"errmsg":"bad"}`),
			},
			want: []string{"body.errcode is a number", "#   - when: status == 200 && has(body.errcode) && body.errcode != 0"},
			not:  []string{"\n    errors:"},
		},
		{
			name: "an error object gets a suggestion on its presence",
			exchanges: []*learn.Exchange{
				ex("GET", "/orders", "", 200, `{"items":[]}`),
				ex("GET", "/orders", "", 200, `{"error":{"message":"bad"}}`),
			},
			want: []string{"carried an error in body.error (object)", "#   - when: status == 200 && has(body.error)"},
			not:  []string{"\n    errors:"},
		},
		{
			name:    "with enum_values off, codes are not known and no rule names one",
			enumOff: true,
			exchanges: []*learn.Exchange{
				ex("GET", "/orders", "", 200, `{"items":[]}`),
				ex("GET", "/orders", "", 200, `{"code":"E_NOPERM"}`),
			},
			want: []string{"carried an error code in body.code", `body.code == "E_..."`, "enum_values was off"},
			not:  []string{"E_NOPERM", "\n    errors:"},
		},
		{
			name: "codes get rules with statuses guessed from their names",
			exchanges: []*learn.Exchange{
				ex("GET", "/orders", "", 200, `{"items":[]}`),
				ex("GET", "/orders", "", 200, `{"code":"RATE_LIMITED"}`),
				ex("GET", "/orders", "", 200, `{"code":"ORDER_NOT_FOUND"}`),
				ex("GET", "/orders", "", 200, `{"code":"WEIRD"}`),
			},
			want: []string{
				"body.code == \"RATE_LIMITED\"\n        status: upstream\n",
				"body.code == \"ORDER_NOT_FOUND\"\n        status: not_found\n",
				"body.code == \"WEIRD\"\n        status: upstream\n        retryable: false\n",
			},
		},
		{
			name: "a route the backend never accepted takes its arguments from the refused calls",
			exchanges: []*learn.Exchange{
				ex("GET", "/orders", "q=x", 400, `{"error":"bad"}`),
			},
			want: []string{"the backend accepted no call (2xx)", "q: {type: string} # query; 100% of the calls"},
		},
		{
			name: "path ids that are numbers make integer arguments; repeated parameters arrays",
			exchanges: []*learn.Exchange{
				ex("GET", "/orders/1234", "tag=a&tag=b", 200, `{"id":1}`),
				ex("GET", "/orders/5678", "tag=c", 200, `{"id":2}`),
			},
			want: []string{"path: /orders/{order_id}", "order_id: {type: integer} # path segment", "items: {type: string}", "type: array"},
		},
		{
			name: "a form body is not bound, with a TODO",
			exchanges: []*learn.Exchange{
				withBody(ex("POST", "/orders", "", 201, `{"id":1}`), "application/x-www-form-urlencoded", "a=1"),
			},
			want: []string{"not JSON objects", "side_effect: true"},
			not:  []string{"body: {"},
		},
		{
			name: "JSON bodies bind their fields, an idempotency_key field included under another name",
			exchanges: []*learn.Exchange{
				withBody(ex("POST", "/orders", "", 201, `{"id":1}`), "application/json", `{"amount":5,"idempotency_key":"k","note":null}`),
				withBody(ex("POST", "/orders", "", 201, `{"id":2}`), "application/json", `{"amount":7.5,"idempotency_key":"k2","note":"x"}`),
			},
			want: []string{"amount: {type: number}", "body_idempotency_key: {type: string}", `note: {type: [string, "null"]}`, "body: {amount: amount, idempotency_key: body_idempotency_key, note: note}"},
		},
		{
			name: "answers that are arrays are data as they come",
			exchanges: []*learn.Exchange{
				ex("GET", "/orders", "", 200, `[{"id":1}]`),
				ex("GET", "/orders", "", 200, `[]`),
			},
			want: []string{"are JSON arrays"},
			not:  []string{"data:"},
		},
		{
			name: "a field missing from some answers is read with has()",
			exchanges: func() []*learn.Exchange {
				var out []*learn.Exchange
				for range 198 {
					out = append(out, ex("GET", "/orders", "", 200, `{"items":[1],"next":"x"}`))
				}
				out = append(out, ex("GET", "/orders", "", 200, `{"items":[]}`), ex("GET", "/orders", "", 200, `{"items":[],"rare":1}`))
				return out
			}(),
			want: []string{`data: '{"items": body.items, "next": has(body.next) ? body.next : null}'`, "empty: size(body.items) == 0", "rare (<1%)"},
		},
		{
			name: "requests refused without a credential draft the upstream's auth, with the opt-in to share it",
			exchanges: []*learn.Exchange{
				withHeader(ex("GET", "/apps", "", 200, `[{"id":1}]`), "Authorization", "Bearer s3cr3t-t0ken-value"),
				withHeader(ex("GET", "/apps", "", 200, `[{"id":2}]`), "Authorization", "Bearer s3cr3t-t0ken-value"),
				ex("GET", "/apps", "", 401, `{"message":"missing token"}`),
			},
			want: []string{
				"auth:\n      bearer: {token: '${API_TOKEN}'}",
				"Learned: 1 request without a credential were answered 401 or 403 (GET /apps).",
				"Learned: requests carried Authorization: Bearer (names only: no value was kept).",
				"access:\n  shared_credentials: [api]",
				"once API_TOKEN are set",
				"Credentials: requests carried Authorization: Bearer ×2",
			},
			not: []string{"s3cr3t"},
		},
		{
			name: "a credential in the query is the upstream's, not an argument",
			exchanges: []*learn.Exchange{
				ex("POST", "/message", "token=AbCdEf.12345", 200, `{"id":1}`),
				ex("POST", "/message", "", 401, `{"error":"Unauthorized","errorCode":401,"errorDescription":"you need to provide a valid access token"}`),
			},
			want: []string{"auth:\n      api_key: {query: token, value: '${API_API_KEY}'}", "error_detail: 'type(body) == map && has(body.errorDescription) ? body.errorDescription : \"\"'"},
			not:  []string{"AbCdEf", "token: {type"},
		},
		{
			name: "error answers that share a message draft error_detail",
			exchanges: []*learn.Exchange{
				ex("GET", "/orders", "q=a", 200, `{"items":[]}`),
				ex("GET", "/orders", "", 400, `{"error":{"message":"q is required","code":7}}`),
				ex("GET", "/orders", "q=b", 404, `{"error":{"message":"no such shop"}}`),
			},
			want: []string{`error_detail: 'type(body) == map && has(body.error) && type(body.error) == map && has(body.error.message) ? body.error.message : ""'`},
		},
		{
			name: "error answers that are JSON strings draft error_detail",
			exchanges: []*learn.Exchange{
				ex("POST", "/login", "", 200, `{"accessToken":"x"}`),
				ex("POST", "/login", "", 400, `"Email and password are required"`),
			},
			want: []string{`error_detail: 'type(body) == string ? body : ""'`},
		},
		{
			name: "an argument always sent is optional until a call without it is refused as invalid",
			exchanges: []*learn.Exchange{
				ex("GET", "/search", "q=a&lang=en", 200, `{"items":[]}`),
				ex("GET", "/search", "q=b&lang=de", 200, `{"items":[]}`),
				ex("GET", "/search", "lang=en", 400, `{"message":"q is required"}`),
			},
			want: []string{"required: [q]", "q: {type: string} # query; 100% of accepted calls; required: a call without it was refused (400/422)",
				"lang: {type: string} # query; 100% of accepted calls; optional: no call without it was refused"},
		},
		{
			name: "an array answer's credentials stay out of data",
			exchanges: []*learn.Exchange{
				ex("GET", "/client", "", 200, `[{"id":1,"name":"phone","token":"CXkq8u0kWbz6wLT"}]`),
				ex("GET", "/client", "", 200, `[{"id":2,"name":"laptop","token":"Cq2z1xPL0PaWd3s"}]`),
			},
			want: []string{`data: 'body.map(x1, {"id": x1.id, "name": x1.name})'`, "Left out of data, as their names look like credentials (data goes to the model): [].token."},
			not:  []string{"x1.token"},
		},
		{
			name: "nested credentials stay out of an object answer's data",
			exchanges: []*learn.Exchange{
				ex("GET", "/apps", "", 200, `{"apps":[{"id":1,"app":{"name":"a","apiKey":"k1"}}],"total":1}`),
			},
			want: []string{`data: '{"apps": dyn(body.apps.map(x1, {"app": dyn({"name": x1.app.name}), "id": x1.id})), "total": body.total}'`, "apps[].app.apiKey"},
			not:  []string{"apiKey\""},
		},
		{
			name: "a side-effecting route answered 204 has no data and is ok",
			exchanges: []*learn.Exchange{
				ex("DELETE", "/orders/1234", "", 204, ""),
			},
			want: []string{"had no JSON body"},
			not:  []string{"data:"},
		},
		{
			name: "a route that never answered is left out",
			exchanges: []*learn.Exchange{
				{Upstream: "api", Method: "GET", EscapedPath: "/down", Failure: "connect", RequestHeader: http.Header{}, ResponseHeader: http.Header{}},
				ex("GET", "/up", "", 200, `{"a":1}`),
			},
			want: []string{"GET /down (api): no answer was ever received"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := policy.DefaultLearnSettings()
			s.EnumValues = !c.enumOff
			l := learn.New(s, learn.Options{})
			for _, x := range c.exchanges {
				l.Observe(x)
			}
			d, err := draft.Write(l.Summary(), draft.Options{})
			if err != nil {
				t.Fatal(err)
			}
			text := string(d.YAML)
			if _, err := config.CompileSource("draft.yaml", d.YAML, config.Options{LookupEnv: policydoc.PlaceholderEnv(d.Env)}); err != nil {
				t.Fatalf("does not compile: %v\n%s", err, text)
			}
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("the draft lacks %q:\n%s", w, text)
				}
			}
			for _, w := range c.not {
				if strings.Contains(text, w) {
					t.Errorf("the draft holds %q:\n%s", w, text)
				}
			}
		})
	}
}

func TestToolsTheDraftCannotHoldAreLeftOutWithAReason(t *testing.T) {
	l := learn.New(policy.DefaultLearnSettings(), learn.Options{})
	for _, tool := range []string{"notify", "notify_dedupe"} {
		x := ex("POST", "/send", "", 201, `{"id":1}`)
		x.Tool, x.Route = tool, "/send"
		l.Observe(x)
	}
	d, err := draft.Write(l.Summary(), draft.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tools) != 1 || len(d.Skipped) != 1 || !strings.Contains(d.Skipped[0].Reason, "ambiguous") {
		t.Errorf("tools %+v, skipped %+v", d.Tools, d.Skipped)
	}
	if !strings.Contains(string(d.YAML), "# - POST /send (api): the drafted tool does not compile") {
		t.Errorf("the draft does not say why:\n%s", d.YAML)
	}
}
