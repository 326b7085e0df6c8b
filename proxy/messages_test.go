package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
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
