package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/contracts"
)

// messagesPolicy has the tools the model-facing review found false or
// unhelpful messages on, against the harness backend ({{legacy}}) and a
// backend of this file ({{lists}}): it answers POST with 200 {} and GET
// with a list of as many items as ?n= asks.
const messagesPolicy = `
version: 1
server:
  observation_max_chars: 400
upstreams:
  legacy:
    url: {{legacy}}
    timeout: 300ms
    breaker: {consecutive_failures: 1000, min_requests: 1000, open_for: 1s, half_open_requests: 1}
    retries: {attempts: 2, backoff: 1ms, max_backoff: 1ms}
  lists:
    url: {{lists}}
    timeout: 2s
tools:
  read:
    description: Read something.
    upstream: legacy
    args: {type: object, required: [mode], properties: {mode: {type: string}}}
    request: {method: GET, path: "/r/{mode}"}
    response:
      data: '{"items": body.results, "total": body.total}'
  read_final:
    description: Read something whose business errors are final.
    upstream: legacy
    args: {type: object, required: [mode], properties: {mode: {type: string}}}
    request: {method: GET, path: "/r/{mode}"}
    errors:
      - when: status == 200 && has(body.code)
        status: upstream
        retryable: false
  write:
    description: Write something.
    upstream: legacy
    side_effect: true
    args: {type: object, required: [mode], properties: {mode: {type: string}}}
    request: {method: POST, path: "/w/{mode}", body: {mode: mode}}
  write_rule:
    description: Write something whose 502 a rule classifies.
    upstream: legacy
    side_effect: true
    args: {type: object, required: [mode], properties: {mode: {type: string}}}
    request: {method: POST, path: "/w/{mode}"}
    errors:
      - when: status == 502
        status: upstream
  write_blank:
    description: Write something to a backend that answers 200 {}.
    upstream: lists
    side_effect: true
    args: {type: object}
    request: {method: POST, path: /write}
  search:
    description: Search with a strict schema.
    upstream: lists
    args:
      type: object
      required: [q]
      additionalProperties: false
      properties:
        q: {type: string, minLength: 1}
        limit: {type: integer, minimum: 1, maximum: 20}
        mode: {enum: [fast, slow]}
        n: {type: integer}
    request: {method: GET, path: /list, query: {n: n}}
    truncation_hint: ask for fewer items with a smaller n
`

// listsBackend answers POST with 200 {} (a common legacy success body) and
// GET /list?n= with n items.
func listsBackend(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPost {
		_, _ = io.WriteString(w, `{}`)
		return
	}
	var n int
	_, _ = fmt.Sscan(r.URL.Query().Get("n"), &n)
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"id":"item-%d","title":"Item number %d, with a title long enough to take room"}`, i+1, i+1)
	}
	_, _ = io.WriteString(w, `{"items":[`+strings.Join(items, ",")+`],"total":`+fmt.Sprint(n)+`}`)
}

func newMessagesHarness(t *testing.T) *harness {
	t.Helper()
	lists := httptest.NewServer(http.HandlerFunc(listsBackend))
	t.Cleanup(lists.Close)
	return newHarness(t, strings.ReplaceAll(messagesPolicy, "{{lists}}", lists.URL))
}

// messageCheck says what a message must and must not say.
type messageCheck struct {
	want, notWant []string
}

func (c messageCheck) check(t *testing.T, env *contracts.Envelope) {
	t.Helper()
	for _, w := range c.want {
		if !strings.Contains(env.Message, w) {
			t.Errorf("message lacks %q: %s", w, env.Message)
		}
	}
	for _, w := range c.notWant {
		if strings.Contains(env.Message, w) {
			t.Errorf("message says %q: %s", w, env.Message)
		}
	}
	// The observation, all many MCP clients show the model, opens with
	// the message.
	if first, _, _ := strings.Cut(env.Observation, "\n"); !strings.Contains(first, env.Message) {
		t.Errorf("the observation's first line %q does not carry the message", first)
	}
}

// TestMessagesTellTheTruth reproduces, over HTTP, each message the
// model-facing review found false to its own envelope, and the unhelpful
// ones the issue names, and checks what they say now.
func TestMessagesTellTheTruth(t *testing.T) {
	h := newMessagesHarness(t)
	key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	tests := []struct {
		name   string
		tool   string
		args   string
		header map[string]string
		envelope
		messageCheck
	}{
		{
			name: "a side effect answered 200 {} was performed and must not be repeated with other arguments",
			tool: "write_blank", args: `{}`, header: key("blank-1"),
			envelope:     envelope{contracts.StatusOK, false, contracts.SideEffectDone},
			messageCheck: messageCheck{want: []string{"was performed", "do not repeat it"}, notWant: []string{"different arguments", "found nothing"}},
		},
		{
			name: "an errors rule on a side effect's 502 is not retryable and says how to check",
			tool: "write_rule", args: `{"mode":"502"}`, header: key("rule-1"),
			envelope: envelope{contracts.StatusUpstream, false, contracts.SideEffectUnknown},
			messageCheck: messageCheck{want: []string{"may or may not", "find out whether", "new idempotency key"},
				notWant: []string{"retry the same call", "later"}},
		},
		{
			name: "an errors rule that says retryable: false is not told to retry",
			tool: "read_final", args: `{"mode":"nocode"}`,
			envelope:     envelope{contracts.StatusUpstream, false, contracts.SideEffectNone},
			messageCheck: messageCheck{want: []string{"retrying will not help", "tell the user"}, notWant: []string{"retry the same call"}},
		},
		{
			name: "a side effect's 502 says a repeat needs a new key",
			tool: "write", args: `{"mode":"502"}`, header: key("w-502"),
			envelope:     envelope{contracts.StatusUpstream, false, contracts.SideEffectUnknown},
			messageCheck: messageCheck{want: []string{"new idempotency key", "find out whether"}, notWant: []string{"retry the same call"}},
		},
		{
			name: "a read-only 500 says the attempts made and when to stop, not later",
			tool: "read", args: `{"mode":"500"}`,
			envelope:     envelope{contracts.StatusUpstream, true, contracts.SideEffectNone},
			messageCheck: messageCheck{want: []string{"already tried 2 times", "tell the user"}, notWant: []string{"later"}},
		},
		{
			name: "a read-only 503 states the backend's wait",
			tool: "read", args: `{"mode":"503"}`,
			envelope:     envelope{contracts.StatusUpstream, true, contracts.SideEffectNone},
			messageCheck: messageCheck{want: []string{"in 7 seconds", "tell the user"}, notWant: []string{"later"}},
		},
		{
			name: "a 404 names the values that went into the path",
			tool: "read", args: `{"mode":"404"}`,
			envelope:     envelope{contracts.StatusNotFound, false, contracts.SideEffectNone},
			messageCheck: messageCheck{want: []string{`found nothing for mode "404" (HTTP 404)`, "check the identifiers"}},
		},
		{
			name: "a 409 is a conflict to look into, not arguments to force through",
			tool: "read", args: `{"mode":"409"}`,
			envelope:     envelope{contracts.StatusBadArgs, false, contracts.SideEffectNone},
			messageCheck: messageCheck{want: []string{"conflict with its current state", "check the current state"}, notWant: []string{"change them"}},
		},
		{
			name: "an unknown tool lists the tools the caller may use",
			tool: "nope", args: `{}`,
			envelope:     envelope{contracts.StatusNotFound, false, contracts.SideEffectNone},
			messageCheck: messageCheck{want: []string{"There is no tool named nope; call one of: read, read_final, search, write, write_blank, write_rule."}},
		},
		{
			name: "a read-only call that broke after it was sent is not said to be unsent",
			tool: "read", args: `{"mode":"reset"}`,
			envelope:     envelope{contracts.StatusUpstream, true, contracts.SideEffectNone},
			messageCheck: messageCheck{want: []string{"after the call was sent"}, notWant: []string{"before the call was sent", "nothing was sent"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, env := h.call(t, tt.tool, tt.args, tt.header)
			tt.envelope.check(t, env)
			tt.messageCheck.check(t, env)
		})
	}
}

// envelope is the fields a message must agree with.
type envelope struct {
	status     contracts.Status
	retryable  bool
	sideEffect contracts.SideEffect
}

func (e envelope) check(t *testing.T, env *contracts.Envelope) {
	t.Helper()
	if env.Status != e.status || env.Retryable != e.retryable || env.SideEffect != e.sideEffect {
		t.Fatalf("envelope %s retryable=%v side_effect=%s, want %s %v %s (%s)",
			env.Status, env.Retryable, env.SideEffect, e.status, e.retryable, e.sideEffect, env.Message)
	}
}

// TestReplaysSayTheyAreReplays: the replay of a side effect, and of a call
// the agent abandoned after it reached the backend, say in words that the
// call was not sent again, and what to do.
func TestReplaysSayTheyAreReplays(t *testing.T) {
	h := newMessagesHarness(t)
	t.Run("a performed action", func(t *testing.T) {
		hdr := map[string]string{"Idempotency-Key": "replay-ok"}
		_, first := h.call(t, "write", `{"mode":"ok"}`, hdr)
		_, again := h.call(t, "write", `{"mode":"ok"}`, hdr)
		if first.Replayed || !again.Replayed {
			t.Fatalf("replayed %v then %v", first.Replayed, again.Replayed)
		}
		if again.Message == first.Message {
			t.Errorf("the replay reads exactly like the original: %s", again.Message)
		}
		messageCheck{want: []string{"earlier call with this idempotency key", "not sent again", "do not repeat it"}}.check(t, again)
	})
	t.Run("a call cancelled after it reached the backend", func(t *testing.T) {
		ctx := h.leaveOnceCalled()
		res := h.core.Call(ctx, &Request{Tool: "write", Body: []byte(`{"mode":"hang"}`), IdempotencyKey: "replay-gone", Front: "http"})
		envelope{contracts.StatusUpstream, false, contracts.SideEffectUnknown}.check(t, &res.Envelope)
		messageCheck{want: []string{"cancelled after it reached the service", "may or may not", "new idempotency key"},
			notWant: []string{"before the service answered"}}.check(t, &res.Envelope)
		_, again := h.call(t, "write", `{"mode":"hang"}`, map[string]string{"Idempotency-Key": "replay-gone"})
		if !again.Replayed || again.SideEffect != contracts.SideEffectUnknown || again.Retryable {
			t.Fatalf("the retry: %+v", again)
		}
		messageCheck{want: []string{"earlier call with this idempotency key", "unknown outcome", "new idempotency key"}}.check(t, again)
	})
}

// TestBadArgsListsEveryViolation: the same call always gets the same
// message (the schema library visits arguments in map order), every
// violation is named, and data.errors holds them in order with what is
// allowed.
func TestBadArgsListsEveryViolation(t *testing.T) {
	h := newMessagesHarness(t)
	args := `{"q":"","limit":50,"mode":"turbo"}`
	messages := map[string]int{}
	var env *contracts.Envelope
	for range 20 {
		var resp *http.Response
		resp, env = h.call(t, "search", args, nil)
		if env.Status != contracts.StatusBadArgs || resp.StatusCode != 400 {
			t.Fatalf("HTTP %d %+v", resp.StatusCode, env)
		}
		messages[env.Message]++
	}
	if len(messages) != 1 {
		t.Fatalf("20 identical calls gave %d messages: %v", len(messages), messages)
	}
	want := `3 arguments are invalid: limit must be between 1 and 20 (got 50); mode must be one of "fast", "slow" (got "turbo"); q must have at least 1 character (got 0); fix them all and call again.`
	if env.Message != want {
		t.Errorf("message =\n%s\nwant\n%s", env.Message, want)
	}
	var data struct {
		Errors []struct {
			Argument string          `json:"argument"`
			Problem  string          `json:"problem"`
			Allowed  json.RawMessage `json:"allowed"`
			Got      json.RawMessage `json:"got"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(env.Data, &data); err != nil {
		t.Fatalf("data %s: %v", env.Data, err)
	}
	wantErrors := []string{
		`/limit maximum {"minimum":1,"maximum":20} 50`,
		`/mode enum ["fast","slow"] "turbo"`,
		`/q min_length {"minimum":1} 0`,
	}
	if len(data.Errors) != len(wantErrors) {
		t.Fatalf("data.errors has %d entries, want %d: %s", len(data.Errors), len(wantErrors), env.Data)
	}
	for i, e := range data.Errors {
		if got := fmt.Sprintf("%s %s %s %s", e.Argument, e.Problem, e.Allowed, e.Got); got != wantErrors[i] {
			t.Errorf("data.errors[%d] = %s, want %s", i, got, wantErrors[i])
		}
	}
	// An unknown argument names the accepted ones.
	_, env = h.call(t, "search", `{"q":"go","lim":5}`, nil)
	if !strings.Contains(env.Message, "lim is not accepted (accepted: limit, mode, n, q)") {
		t.Errorf("unknown argument: %s", env.Message)
	}
}

// TestTruncatedObservationsSayWhatWasCut: the marker names the array it
// cut and how many items it shows, and gives the tool's truncation_hint.
func TestTruncatedObservationsSayWhatWasCut(t *testing.T) {
	h := newMessagesHarness(t)
	_, env := h.call(t, "search", `{"q":"go","n":14}`, nil)
	if env.Status != contracts.StatusOK {
		t.Fatalf("%+v", env)
	}
	_, marker, ok := strings.Cut(env.Observation, "\n…[truncated: ")
	if !ok || !strings.HasSuffix(marker, "; ask for fewer items with a smaller n]") {
		t.Fatalf("observation does not end with a marker giving the hint: %q", env.Observation)
	}
	if !strings.HasPrefix(marker, "items shows ") || !strings.Contains(marker, " of 14") {
		t.Errorf("marker does not say what was cut: %q", marker)
	}
}

// TestTheExamplePolicysTemplatesKeepGatewayReasons runs the shipped
// example policy (Chinese templates on search_articles) against a backend
// of this test: a spent budget keeps its reset time, the caller's own rate
// limit its cause and wait, and an answer that cannot be read is not
// called a transient search error to retry.
func TestTheExamplePolicysTemplatesKeepGatewayReasons(t *testing.T) {
	search := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("q") {
		case "html":
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>maintenance</html>")
		case "crash":
			w.WriteHeader(500)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"results":[{"id":"kb-1"}],"total":1}`)
		}
	}))
	t.Cleanup(search.Close)
	raw, err := os.ReadFile("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.NewReplacer("http://127.0.0.1:7001", search.URL, "http://127.0.0.1:7002", search.URL,
		"  callers:\n", "  callers:\n    rate-agent: {tools: [\"*\"], rate: {rps: 0.001, burst: 1}}\n    budget-agent: {tools: [\"*\"], budget: {cost: 0.001, per: 1h}}\n",
	).Replace(string(raw))
	core := newTestCore(t, doc, Options{})
	h := &harness{core: core, server: serveCore(t, core)}
	as := func(caller string) map[string]string { return map[string]string{"X-Toolgate-Caller": caller} }
	for _, caller := range []string{"rate-agent", "budget-agent"} {
		if _, env := h.call(t, "search_articles", `{"q":"go"}`, as(caller)); env.Status != contracts.StatusOK {
			t.Fatalf("%s's first call: %+v", caller, env)
		}
	}
	tests := []struct {
		name, args, caller string
		envelope
		messageCheck
	}{
		{"a spent budget says when it resets", `{"q":"go"}`, "budget-agent",
			envelope{contracts.StatusForbidden, false, contracts.SideEffectNone},
			messageCheck{want: []string{"当前身份的费用预算已用完", "后重置", "请勿调用该工具"}, notWant: []string{"重试无用", "数据源"}}},
		{"the caller's rate limit keeps its cause and wait", `{"q":"go"}`, "rate-agent",
			envelope{contracts.StatusUpstream, true, contracts.SideEffectNone},
			messageCheck{want: []string{"当前身份调用过于频繁", "后原样重试"}, notWant: []string{"搜索服务"}}},
		{"an unreadable answer is not retried", `{"q":"html"}`, "",
			envelope{contracts.StatusUpstream, false, contracts.SideEffectNone},
			messageCheck{want: []string{"重试无用"}, notWant: []string{"原样重试", "搜索服务"}}},
		{"a search failure speaks the template, then what to do", `{"q":"crash"}`, "",
			envelope{contracts.StatusUpstream, true, contracts.SideEffectNone},
			messageCheck{want: []string{"搜索服务暂时出错", "已尝试 2 次", "告知用户"}, notWant: []string{"稍后"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, env := h.call(t, "search_articles", tt.args, as(tt.caller))
			tt.envelope.check(t, env)
			tt.messageCheck.check(t, env)
		})
	}
}

// wordsPolicy has a tool for each way a policy's words could make toolgate
// lie to the model (issue 30), against wordsBackend ({{svc}}), in the
// language {{lang}}, at the smallest observation bound.
const wordsPolicy = `
version: 1
server:
  messages: {{lang}}
  observation_max_chars: 256
upstreams:
  svc:
    url: {{svc}}
    timeout: 2s
    retries: {attempts: 1}
tools:
  send:
    description: Send a text message.
    upstream: svc
    side_effect: true
    args: {type: object, required: [to], additionalProperties: false, properties: {to: {type: string}}}
    request: {method: POST, path: "/send/{to}"}
    response:
      error_detail: 'has(body.message) ? body.message : ""'
  clear:
    description: Clear a mailbox; the backend answers 200 with nothing.
    upstream: svc
    side_effect: true
    args: {type: object}
    request: {method: POST, path: /clear}
    response: {empty: 'true'}
    messages: {empty: 'Nothing matched; try broader keywords.'}
  deliver:
    description: Deliver through a mailer whose 200 may say the outcome is lost, or that it acted with a warning.
    upstream: svc
    side_effect: true
    args: {type: object, required: [state], properties: {state: {type: string}}}
    request: {method: POST, path: "/deliver/{state}"}
    errors:
      - when: status == 200 && body.state == "lost"
        status: upstream
        side_effect: unknown
      - when: status == 200 && body.state == "warned"
        status: upstream
        side_effect: done
  busy:
    description: Ask a rate-limited service.
    upstream: svc
    args: {type: object, properties: {after: {type: string}}}
    request: {method: GET, path: /busy, query: {after: after}}
  page:
    description: Read a page whose errors are HTML.
    upstream: svc
    args: {type: object}
    request: {method: GET, path: /page}
    response:
      error_detail: 'has(body.message) ? body.message : text'
  count:
    description: Count things.
    upstream: svc
    args: {type: object}
    request: {method: GET, path: /count}
    messages: {ok: '命中 {{.data.total}} 条。'}
`

// wordsSID is the message SID wordsBackend gives a sent message.
const wordsSID = "SM1f0e8a4c2b3d4e5f60718293a4b5c6d7"

// wordsBackend answers the tools of wordsPolicy.
func wordsBackend(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch p := r.URL.Path; {
	case p == "/send/bad":
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"message":"invalid To address"}`)
	case p == "/send/gone":
		w.WriteHeader(404)
		_, _ = io.WriteString(w, `{"message":"no such mailbox"}`)
	case strings.HasPrefix(p, "/send/"):
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"sid":"`+wordsSID+`","status":"queued","body":"Your order 4711 has shipped and will arrive on Tuesday between 9am and 5pm. Track it at any time on the order page, where you can also change the delivery address."}`)
	case p == "/clear":
		_, _ = io.WriteString(w, `{}`)
	case strings.HasPrefix(p, "/deliver/"):
		_, _ = io.WriteString(w, `{"state":"`+strings.TrimPrefix(p, "/deliver/")+`"}`)
	case p == "/busy":
		if after := r.URL.Query().Get("after"); after != "" {
			w.Header().Set("Retry-After", after)
		}
		w.WriteHeader(429)
	case p == "/page":
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(500)
		_, _ = io.WriteString(w, "<html><body><h1>Internal Server Error</h1><pre>java.lang.NullPointerException at "+secretHost+"</pre></body></html>")
	case p == "/count":
		_, _ = io.WriteString(w, `{"items":[{"id":"a"}]}`)
	}
}

// TestServedEnvelopesAgreeWithTheirWordsAndHeaders runs each case of issue
// 30 over HTTP, in both languages: the envelope's fields, its message, and
// the HTTP answer's Retry-After (the envelope's wait, or absent) agree.
func TestServedEnvelopesAgreeWithTheirWordsAndHeaders(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(wordsBackend))
	t.Cleanup(svc.Close)
	type step struct {
		name, tool, args, key string
		envelope
		retryAfter  string              // the Retry-After header, "" when absent
		want        map[string][]string // in the message, by language
		observation []string            // in the observation
		notWant     []string            // in neither
	}
	steps := []step{
		{name: "a side effect's 400 says to call again with a new key", tool: "send", args: `{"to":"bad"}`, key: "k-1",
			envelope: envelope{contracts.StatusBadArgs, false, contracts.SideEffectNone},
			want: map[string][]string{"en": {`The backend said: "invalid To address"; change the arguments and call again with a new idempotency key`},
				"zh": {"「invalid To address」；请修改参数，并使用新的幂等键再调用"}}},
		{name: "the corrected call with the same key is refused, as the message said", tool: "send", args: `{"to":"ok"}`, key: "k-1",
			envelope: envelope{contracts.StatusBadArgs, false, contracts.SideEffectNone},
			want:     map[string][]string{"en": {"already used with different arguments"}, "zh": {"已被用于不同的参数"}}},
		{name: "the corrected call with a new key is sent, and its SID is kept whole at the smallest bound", tool: "send", args: `{"to":"ok"}`, key: "k-2",
			envelope: envelope{contracts.StatusOK, false, contracts.SideEffectDone},
			want:     map[string][]string{"en": {"do not repeat it"}, "zh": {"请勿重复执行"}}, observation: []string{`"sid":"` + wordsSID + `"`, `"status":"queued"`}},
		{name: "a side effect's 404 says to call again with a new key", tool: "send", args: `{"to":"gone"}`, key: "k-3",
			envelope: envelope{contracts.StatusNotFound, false, contracts.SideEffectNone},
			want:     map[string][]string{"en": {"check the identifiers, and call again with a new idempotency key"}, "zh": {"请核对标识，并使用新的幂等键再调用"}}},
		{name: "an empty template does not speak for a performed action", tool: "clear", args: `{}`, key: "k-4",
			envelope: envelope{contracts.StatusEmpty, false, contracts.SideEffectDone},
			want:     map[string][]string{"en": {"The action was performed and the service returned no data; do not repeat it."}, "zh": {"操作已执行，服务未返回数据；请勿重复执行。"}},
			notWant:  []string{"broader"}},
		{name: "a rule's unknown outcome at a backend that does not dedupe is not retryable", tool: "deliver", args: `{"state":"lost"}`, key: "k-5",
			envelope: envelope{contracts.StatusUpstream, false, contracts.SideEffectUnknown},
			want:     map[string][]string{"en": {"find out whether it did", "new idempotency key"}, "zh": {"请先确认是否已生效", "新的幂等键"}},
			notWant:  []string{"same idempotency key", "相同的幂等键"}},
		{name: "its retry with the same key is the stored record, not a loop", tool: "deliver", args: `{"state":"lost"}`, key: "k-5",
			envelope: envelope{contracts.StatusUpstream, false, contracts.SideEffectUnknown},
			want:     map[string][]string{"en": {"not sent again", "new idempotency key"}, "zh": {"本次未重新发送", "新的幂等键"}},
			notWant:  []string{"same idempotency key", "相同的幂等键"}},
		{name: "a rule's performed action is not retryable", tool: "deliver", args: `{"state":"warned"}`, key: "k-6",
			envelope: envelope{contracts.StatusUpstream, false, contracts.SideEffectDone},
			want:     map[string][]string{"en": {"The action was performed but the service reported a failure; do not repeat it."}, "zh": {"操作已执行，但服务报告了错误；请勿重复执行。"}}},
		{name: "a 429 without Retry-After has no wait, in the envelope or the header", tool: "busy", args: `{}`,
			envelope: envelope{contracts.StatusUpstream, true, contracts.SideEffectNone},
			want:     map[string][]string{"en": {"retry the same call, and if it fails again"}, "zh": {"可原样重试"}}},
		{name: "a 429 with Retry-After has that wait in both", tool: "busy", args: `{"after":"30"}`, retryAfter: "30",
			envelope: envelope{contracts.StatusUpstream, true, contracts.SideEffectNone},
			want:     map[string][]string{"en": {"retry the same call in 30 seconds"}, "zh": {"30 秒后原样重试"}}},
		{name: "a wait of an hour says to tell the user now if the task cannot wait", tool: "busy", args: `{"after":"3600"}`, retryAfter: "3600",
			envelope: envelope{contracts.StatusUpstream, true, contracts.SideEffectNone},
			want:     map[string][]string{"en": {"if the task can wait that long, retry the same call in 60 minutes", "if it cannot wait, tell the user now"}, "zh": {"如任务可以等待，请在 60 分钟后原样重试", "如任务无法等待，请立即告知用户"}}},
		{name: "an HTML error page gives no detail", tool: "page", args: `{}`,
			envelope: envelope{contracts.StatusUpstream, true, contracts.SideEffectNone},
			want:     map[string][]string{"en": {"The service failed (HTTP 500)"}, "zh": {"服务出错（HTTP 500）"}},
			notWant:  []string{"said", "后端返回", "<", "java.lang", secretHost}},
		{name: "a template whose field is missing falls back to the catalogue", tool: "count", args: `{}`,
			envelope: envelope{contracts.StatusOK, false, contracts.SideEffectNone},
			want:     map[string][]string{"en": {"The call succeeded."}, "zh": {"调用成功。"}},
			notWant:  []string{"命中"}},
	}
	for _, lang := range []string{"en", "zh"} {
		t.Run(lang, func(t *testing.T) {
			core := newTestCore(t, strings.NewReplacer("{{svc}}", svc.URL, "{{lang}}", lang).Replace(wordsPolicy), Options{})
			front := serveCore(t, core)
			for _, s := range steps {
				t.Run(s.name, func(t *testing.T) {
					var hdr map[string]string
					if s.key != "" {
						hdr = map[string]string{"Idempotency-Key": lang + "-" + s.key}
					}
					resp, env := postCall(t, front, s.tool, s.args, hdr)
					s.envelope.check(t, env)
					for _, w := range s.want[lang] {
						if !strings.Contains(env.Message, w) {
							t.Errorf("message lacks %q: %s", w, env.Message)
						}
					}
					for _, w := range s.observation {
						if !strings.Contains(env.Observation, w) {
							t.Errorf("observation lacks %q: %s", w, env.Observation)
						}
					}
					for _, w := range s.notWant {
						if strings.Contains(env.Message, w) || strings.Contains(env.Observation, w) {
							t.Errorf("message or observation says %q: %s\n%s", w, env.Message, env.Observation)
						}
					}
					// The action clause, what the model acts on, survives
					// the smallest bound.
					if i := strings.IndexAny(env.Message, ";；，"); i >= 0 && !strings.Contains(env.Observation, env.Message[i:]) {
						t.Errorf("the observation lost the action clause %q: %s", env.Message[i:], env.Observation)
					}
					if got := resp.Header.Get("Retry-After"); got != s.retryAfter {
						t.Errorf("Retry-After %q, want %q", got, s.retryAfter)
					}
					wantMS := int64(0)
					if s.retryAfter != "" {
						secs, _ := strconv.Atoi(s.retryAfter)
						wantMS = int64(secs) * 1000
					}
					if env.RetryAfterMS != wantMS {
						t.Errorf("retry_after_ms %d, want %d", env.RetryAfterMS, wantMS)
					}
				})
			}
		})
	}
}

// TestRetryAfterIsTheEnvelopesWait: in either http_status mode, and
// whatever the status, the answer's Retry-After is the envelope's
// retry_after_ms in whole seconds, and absent when the envelope has no wait
// (a 429 without Retry-After once got "Retry-After: 1").
func TestRetryAfterIsTheEnvelopesWait(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(wordsBackend))
	t.Cleanup(svc.Close)
	for _, mode := range []string{"mapped", "always_200"} {
		t.Run(mode, func(t *testing.T) {
			doc := strings.NewReplacer("{{svc}}", svc.URL, "{{lang}}", "en", "server:\n", "server:\n  http_status: "+mode+"\n").Replace(wordsPolicy)
			front := serveCore(t, newTestCore(t, doc, Options{}))
			for _, tt := range []struct {
				args, header string
				code         int // in mapped mode
			}{
				{`{}`, "", 503},
				{`{"after":"7"}`, "7", 503},
				{`{"after":"3600"}`, "3600", 503},
			} {
				resp, env := postCall(t, front, "busy", tt.args, nil)
				wantCode := tt.code
				if mode == "always_200" {
					wantCode = 200
				}
				if got := resp.Header.Get("Retry-After"); got != tt.header || resp.StatusCode != wantCode {
					t.Errorf("%s: HTTP %d Retry-After %q, want %d %q", tt.args, resp.StatusCode, got, wantCode, tt.header)
				}
				if want := tt.header; want != "" && contracts.RetryAfterHeader(env.RetryAfterMS) != want || want == "" && env.RetryAfterMS != 0 {
					t.Errorf("%s: retry_after_ms %d, Retry-After %q", tt.args, env.RetryAfterMS, tt.header)
				}
			}
		})
	}
}
