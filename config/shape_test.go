package config

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/contracts"
)

// shapePolicy wraps one tool's YAML (indented under tools:) in a policy.
// shapePolicy is a policy of one upstream, api, and the tool given. Its
// tools may write credentials (Slack's Authorization header, Solr's
// apikey), which any caller may use here, as the policy says.
func shapePolicy(tool string) string {
	return "version: 1\nupstreams:\n  api: {url: \"http://127.0.0.1:1\"}\ntools:\n" + strings.TrimRight(tool, "\n") + "\naccess: {shared_credentials: [api]}\n"
}

func compileTool(t *testing.T, tool, name string, env map[string]string) *contracts.Contract {
	t.Helper()
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	snap, err := CompileSource("shape.yaml", []byte(shapePolicy(tool)), Options{LookupEnv: lookup})
	if err != nil {
		t.Fatal(err)
	}
	return snap.Tools[name]
}

// decodeArgs decodes arguments as the tool endpoint does, numbers kept.
func decodeArgs(t *testing.T, doc string) map[string]any {
	t.Helper()
	args, err := contracts.DecodeArgs([]byte(doc), 32)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// TestShapedRequestsOfRealAPIs binds each API's documented request from
// YAML alone and pins the exact bytes sent. The shapes follow each API's
// public documentation:
//   - Elasticsearch _search, query DSL body:
//     https://www.elastic.co/guide/en/elasticsearch/reference/current/search-search.html
//   - SendGrid v3 mail/send, personalizations[].to[]:
//     https://www.twilio.com/docs/sendgrid/api-reference/mail-send/mail-send
//   - Firebase Cloud Messaging HTTP v1 messages:send:
//     https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages/send
//   - Twilio Messages, a form body with repeated MediaUrl:
//     https://www.twilio.com/docs/messaging/api/message-resource#create-a-message-resource
//   - Solr /select with repeated fq and wt=json:
//     https://solr.apache.org/guide/solr/latest/query-guide/common-query-parameters.html
//   - Slack chat.postMessage, thread_ts only when replying in a thread:
//     https://api.slack.com/methods/chat.postMessage
func TestShapedRequestsOfRealAPIs(t *testing.T) {
	env := map[string]string{"TWILIO_SID": "AC0123456789abcdef", "SLACK_TOKEN": "xoxb-s3cret", "SOLR_KEY": "k&y=1"}
	tests := []struct {
		name   string
		tool   string // YAML under tools:
		args   string
		method string
		path   string
		query  string
		body   string
		header http.Header // every header the binding sets, constant or bound
		// encoding is the body's default Content-Type, when checked.
		encoding string
	}{
		{
			name: "an Elasticsearch search nests the query DSL and leaves out an absent filter",
			tool: `
  es_search:
    description: Search articles.
    upstream: api
    args:
      type: object
      required: [q]
      properties:
        q: {type: string}
        lang: {type: string}
        limit: {type: integer, default: 10}
        page: {type: integer, minimum: 1}
    request:
      method: POST
      path: /articles/_search
      body:
        query:
          bool:
            must:
              - match: {title: {query: q, operator: {const: and}}}
            filter:
              - term: {lang: lang}
        size: limit
        from: {expr: '(args.page - 1) * args.limit'}
        _source: {const: [title, url]}
        track_total_hits: false
`,
			args: `{"q":"quantum computing"}`, method: "POST", path: "/articles/_search",
			body:     `{"query":{"bool":{"must":[{"match":{"title":{"query":"quantum computing","operator":"and"}}}]}},"size":10,"_source":["title","url"],"track_total_hits":false}`,
			encoding: "application/json",
		},
		{
			name: "an Elasticsearch search with every argument",
			tool: `
  es_search:
    description: Search articles.
    upstream: api
    args:
      type: object
      required: [q]
      properties:
        q: {type: string}
        lang: {type: string}
        limit: {type: integer, default: 10}
        page: {type: integer, minimum: 1}
    request:
      method: POST
      path: /articles/_search
      body:
        query:
          bool:
            must:
              - match: {title: {query: q, operator: {const: and}}}
            filter:
              - term: {lang: lang}
        size: limit
        from: {expr: '(args.page - 1) * args.limit'}
`,
			args: `{"q":"量子","lang":"zh","limit":5,"page":3}`, method: "POST", path: "/articles/_search",
			body: `{"query":{"bool":{"must":[{"match":{"title":{"query":"量子","operator":"and"}}}],"filter":[{"term":{"lang":"zh"}}]}},"size":5,"from":10}`,
		},
		{
			name: "a SendGrid mail maps a list argument to a list of objects",
			tool: `
  send_mail:
    description: Send an email.
    upstream: api
    side_effect: true
    args:
      type: object
      required: [to, subject, text]
      properties:
        to: {type: array, items: {type: string}, minItems: 1}
        subject: {type: string}
        text: {type: string}
    request:
      method: POST
      path: /v3/mail/send
      body:
        personalizations:
          - to: {expr: 'args.to.map(a, {"email": a})'}
            subject: subject
        from: {email: {const: noreply@example.com}, name: {const: Example Support}}
        content:
          - {type: {const: text/plain}, value: text}
`,
			args: `{"to":["john.doe@example.com","jane@example.com"],"subject":"Hello, World!","text":"Heya!"}`, method: "POST", path: "/v3/mail/send",
			body: `{"personalizations":[{"to":[{"email":"john.doe@example.com"},{"email":"jane@example.com"}],"subject":"Hello, World!"}],"from":{"email":"noreply@example.com","name":"Example Support"},"content":[{"type":"text/plain","value":"Heya!"}]}`,
		},
		{
			name: "a SendGrid mail to one recipient leaves out the absent name",
			tool: `
  send_mail:
    description: Send an email.
    upstream: api
    side_effect: true
    args:
      type: object
      required: [email, text]
      properties:
        email: {type: string}
        name: {type: string}
        text: {type: string}
    request:
      method: POST
      path: /v3/mail/send
      body:
        personalizations: [{to: [{email: email, name: name}]}]
        from: {email: {const: noreply@example.com}}
        subject: {const: Your order}
        content: [{type: {const: text/plain}, value: text}]
`,
			args: `{"email":"john.doe@example.com","text":"Shipped."}`, method: "POST", path: "/v3/mail/send",
			body: `{"personalizations":[{"to":[{"email":"john.doe@example.com"}]}],"from":{"email":"noreply@example.com"},"subject":"Your order","content":[{"type":"text/plain","value":"Shipped."}]}`,
		},
		{
			name: "an FCM v1 message nests the token and the notification",
			tool: `
  push:
    description: Send a push notification.
    upstream: api
    side_effect: true
    args:
      type: object
      required: [token, title, text]
      properties:
        token: {type: string}
        title: {type: string}
        text: {type: string}
        data: {type: object, additionalProperties: {type: string}}
    request:
      method: POST
      path: /v1/projects/my-project/messages:send
      body:
        message:
          token: token
          notification: {title: title, body: text}
          data: data
`,
			args:   `{"token":"bk3RNwTe3H0:CI2k_HHwgIpoDKCIZvvDMExUdFQ3P1","title":"Portugal vs. Denmark","text":"great match!"}`,
			method: "POST", path: "/v1/projects/my-project/messages:send",
			body: `{"message":{"token":"bk3RNwTe3H0:CI2k_HHwgIpoDKCIZvvDMExUdFQ3P1","notification":{"title":"Portugal vs. Denmark","body":"great match!"}}}`,
		},
		{
			name: "a Twilio message is a form body with a repeated MediaUrl",
			tool: `
  send_sms:
    description: Send a text message.
    upstream: api
    side_effect: true
    args:
      type: object
      required: [to, text]
      properties:
        to: {type: string}
        text: {type: string}
        media: {type: array, items: {type: string}}
    request:
      method: POST
      path: /2010-04-01/Accounts/${TWILIO_SID}/Messages.json
      encoding: form
      body:
        To: to
        From: {const: "+15017122661"}
        Body: text
        MediaUrl: media
`,
			args:   `{"to":"+15558675310","text":"Hi there & welcome","media":["https://c1.staticflickr.com/3/2899/14341091933_1e92e62d12_b.jpg","https://demo.twilio.com/owl.png"]}`,
			method: "POST", path: "/2010-04-01/Accounts/AC0123456789abcdef/Messages.json",
			body:     `To=%2B15558675310&From=%2B15017122661&Body=Hi+there+%26+welcome&MediaUrl=https%3A%2F%2Fc1.staticflickr.com%2F3%2F2899%2F14341091933_1e92e62d12_b.jpg&MediaUrl=https%3A%2F%2Fdemo.twilio.com%2Fowl.png`,
			encoding: "application/x-www-form-urlencoded",
		},
		{
			name: "a Solr select repeats fq and adds constants",
			tool: `
  solr_select:
    description: Search products.
    upstream: api
    args:
      type: object
      required: [q]
      properties:
        q: {type: string}
        filters: {type: array, items: {type: string}}
        rows: {type: integer, default: 10}
    request:
      method: GET
      path: /solr/techproducts/select
      query: {q: q, fq: filters, rows: rows, wt: {const: json}, apikey: "${SOLR_KEY}"}
`,
			args: `{"q":"memory","filters":["inStock:true","price:[* TO 100]"]}`, method: "GET", path: "/solr/techproducts/select",
			query: `q=memory&fq=inStock%3Atrue&fq=price%3A%5B%2A+TO+100%5D&rows=10&wt=json&apikey=k%26y%3D1`,
		},
		{
			name: "a Slack message leaves out thread_ts when absent",
			tool: `
  slack_post:
    description: Post to a channel.
    upstream: api
    side_effect: true
    args:
      type: object
      required: [channel, text]
      properties:
        channel: {type: string}
        text: {type: string}
        thread_ts: {type: string}
    request:
      method: POST
      path: /api/chat.postMessage
      headers:
        Authorization: "Bearer ${SLACK_TOKEN}"
        Content-Type: {const: application/json; charset=utf-8}
      body: {channel: channel, text: text, thread_ts: thread_ts}
`,
			args: `{"channel":"C123ABC456","text":"Hello world"}`, method: "POST", path: "/api/chat.postMessage",
			body:   `{"channel":"C123ABC456","text":"Hello world"}`,
			header: http.Header{"Authorization": {"Bearer xoxb-s3cret"}, "Content-Type": {"application/json; charset=utf-8"}},
		},
		{
			name: "a Slack reply in a thread sends thread_ts",
			tool: `
  slack_post:
    description: Post to a channel.
    upstream: api
    side_effect: true
    args:
      type: object
      required: [channel, text]
      properties:
        channel: {type: string}
        text: {type: string}
        thread_ts: {type: string}
    request:
      method: POST
      path: /api/chat.postMessage
      body: {channel: channel, text: text, thread_ts: thread_ts}
`,
			args: `{"channel":"C123ABC456","text":"Hello world","thread_ts":"1405894322.002768"}`, method: "POST", path: "/api/chat.postMessage",
			body: `{"channel":"C123ABC456","text":"Hello world","thread_ts":"1405894322.002768"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := strings.TrimSuffix(strings.Fields(tt.tool)[0], ":")
			ct := compileTool(t, tt.tool, name, env)
			args := decodeArgs(t, tt.args)
			if err := ct.Schema.Validate(args); err != nil {
				t.Fatalf("arguments: %v", err)
			}
			bound, err := ct.Binding.Bind(args)
			if err != nil {
				t.Fatal(err)
			}
			if ct.Binding.Method() != tt.method || bound.Path != tt.path || bound.Query != tt.query || string(bound.Body) != tt.body {
				t.Errorf("request:\n%s %s?%s\n%s\nwant:\n%s %s?%s\n%s", ct.Binding.Method(), bound.Path, bound.Query, bound.Body, tt.method, tt.path, tt.query, tt.body)
			}
			if tt.body != "" && ct.Binding.Encoding() == contracts.EncodingJSON && !json.Valid(bound.Body) {
				t.Errorf("body is not JSON: %s", bound.Body)
			}
			got := http.Header{}
			for k, v := range ct.Binding.StaticHeader() {
				got[k] = v
			}
			for k, v := range bound.Header {
				got[k] = v
			}
			if g, w := headerString(got), headerString(tt.header); g != w {
				t.Errorf("headers = %q, want %q", g, w)
			}
			if tt.encoding != "" && ct.Binding.ContentType() != tt.encoding {
				t.Errorf("content type = %s, want %s", ct.Binding.ContentType(), tt.encoding)
			}
		})
	}
}

func headerString(h http.Header) string {
	var b strings.Builder
	_ = h.WriteSubset(&b, nil)
	return b.String()
}

// TestShapingSecretsAreNeverRepeated: a ${VAR} in a request shape is a
// constant (never taken for an argument's name and repeated as "not an
// argument"), errors about it never carry its value, and the binding
// lists it so a printed request can be masked.
func TestShapingSecretsAreNeverRepeated(t *testing.T) {
	const secret = "topsecret-42"
	env := func(k string) (string, bool) {
		switch k {
		case "KEY":
			return secret, true
		case "BROKEN":
			return secret + "\r\nX-Admin: 1", true
		}
		return "", false
	}
	t.Run("a variable in a query is a constant listed as a secret", func(t *testing.T) {
		snap, err := CompileSource("s.yaml", []byte(shapePolicy(`
  search:
    description: Search.
    upstream: api
    request:
      path: /select
      query: {apikey: "${KEY}", wt: {const: {format: "${KEY}"}}}
      headers: {X-Key: "key ${KEY}"}
`)), Options{LookupEnv: env})
		if err != nil {
			t.Fatal(err)
		}
		b := snap.Tools["search"].Binding
		bound, err := b.Bind(map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		if bound.Query != "apikey=topsecret-42&wt=%7B%22format%22%3A%22topsecret-42%22%7D" || b.StaticHeader()["X-Key"][0] != "key "+secret {
			t.Errorf("query %q, header %q", bound.Query, b.StaticHeader())
		}
		if got := b.Secrets(); len(got) != 3 || got[0] != secret || got[1] != secret || got[2] != secret {
			t.Errorf("secrets = %q", got)
		}
	})
	for _, tt := range []struct{ name, tool string }{
		{"a header value with a line break", `
  search:
    description: Search.
    upstream: api
    request: {path: /x, headers: {X-Key: "${BROKEN}"}}
`},
		{"an expression that does not compile", `
  search:
    description: Search.
    upstream: api
    request: {path: /x, body: {key: {expr: '"${KEY}'}}}
`},
		{"an expression of the wrong type", `
  search:
    description: Search.
    upstream: api
    request: {path: /x, headers: {X-Key: {expr: '{"${KEY}": 1}'}}}
`},
	} {
		t.Run(tt.name+" is refused without repeating the secret", func(t *testing.T) {
			_, err := CompileSource("s.yaml", []byte(shapePolicy(tt.tool)), Options{LookupEnv: env})
			if err == nil {
				t.Fatal("compiled")
			}
			if strings.Contains(err.Error(), "topsecret") {
				t.Errorf("the error repeats the secret: %v", err)
			}
		})
	}
}

// TestPolicyReferenceExamplesCompile keeps the worked examples of
// docs/policy.md true: each tool compiles, and the Elasticsearch one sends
// the body the page shows.
func TestPolicyReferenceExamplesCompile(t *testing.T) {
	page, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)
	start := strings.Index(doc, "#### Worked examples")
	if start < 0 {
		t.Fatal("docs/policy.md has no worked examples")
	}
	doc = doc[start:]
	doc = doc[:strings.Index(doc, "\n### ")]
	var tools []string
	for _, block := range strings.Split(doc, "```yaml\n")[1:] {
		block = block[:strings.Index(block, "```")]
		if strings.HasPrefix(block, "request:") {
			block = "solr_select:\n  description: Search products.\n  upstream: es\n  args: {type: object, properties: {q: {type: string}, filters: {type: array}, rows: {type: integer}}}\n" +
				"  " + strings.ReplaceAll(strings.TrimSpace(block), "\n", "\n  ") + "\n"
		}
		tools = append(tools, "  "+strings.ReplaceAll(strings.TrimRight(block, "\n"), "\n", "\n  "))
	}
	if len(tools) != 4 {
		t.Fatalf("found %d examples, want 4", len(tools))
	}
	// SendGrid's and Solr's keys are constants of their tools: any caller
	// may use them, as the policy says.
	policy := "version: 1\nupstreams:\n  es: {url: \"http://127.0.0.1:1\"}\n  twilio: {url: \"http://127.0.0.1:2\"}\n  sendgrid: {url: \"http://127.0.0.1:3\"}\ntools:\n" + strings.Join(tools, "\n") +
		"\naccess: {shared_credentials: [sendgrid, es]}\n"
	env := map[string]string{"TWILIO_ACCOUNT_SID": "AC1", "TWILIO_FROM": "+15017122661", "SENDGRID_API_KEY": "SG.x", "SOLR_KEY": "k"}
	snap, err := CompileSource("policy.md", []byte(policy), Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("%v\n%s", err, policy)
	}
	search := snap.Tools["search_articles"]
	args := decodeArgs(t, `{"q":"quantum"}`)
	if err := search.Schema.Validate(args); err != nil {
		t.Fatal(err)
	}
	bound, err := search.Binding.Bind(args)
	if err != nil {
		t.Fatal(err)
	}
	if want := "`" + string(bound.Body) + "`"; !strings.Contains(string(page), "`{\"q\": \"quantum\"}` sends\n"+want) {
		t.Errorf("docs/policy.md does not show the body sent: %s", want)
	}
	sms := snap.Tools["send_sms"]
	bound, err = sms.Binding.Bind(map[string]any{"to": "+15558675310", "text": "Hi there", "media": []any{"https://a", "https://b"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(bound.Body), "To=%2B15558675310&From=%2B15017122661&Body=Hi+there&MediaUrl=https%3A%2F%2F") {
		t.Errorf("twilio body = %s", bound.Body)
	}
}

// TestPolicyReferenceFilterExample keeps docs/policy.md's filter built from
// free text true: the tool compiles, the text the page shows sends the
// query it shows, and a text ending in a backslash is refused.
func TestPolicyReferenceFilterExample(t *testing.T) {
	page, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)
	start := strings.Index(doc, "**Building a filter from free text.**")
	if start < 0 {
		t.Fatal("docs/policy.md has no filter example")
	}
	doc = doc[start:]
	block := doc[strings.Index(doc, "```yaml\n")+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	policy := "version: 1\nupstreams:\n  pocketbase: {url: \"http://127.0.0.1:1\"}\ntools:\n  " + strings.ReplaceAll(strings.TrimRight(block, "\n"), "\n", "\n  ") + "\n"
	snap, err := CompileSource("policy.md", []byte(policy), Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, policy)
	}
	tool := snap.Tools["search_notes"]
	args := decodeArgs(t, `{"text": "say \"hi\" \\ o/"}`)
	if err := tool.Schema.Validate(args); err != nil {
		t.Fatal(err)
	}
	bound, err := tool.Binding.Bind(args)
	if err != nil {
		t.Fatal(err)
	}
	if want := "`{\"text\": \"say \\\"hi\\\" \\\\ o/\"}` (the text `say \"hi\" \\ o/`) sends\n`" + strings.SplitN(bound.Query, "&", 2)[0] + "`"; !strings.Contains(string(page), want) {
		t.Errorf("docs/policy.md does not show the query sent: %s", want)
	}
	if err := tool.Schema.Validate(decodeArgs(t, `{"text": "ends in \\"}`)); err == nil {
		t.Error("a text ending in a backslash was accepted")
	}
}
