package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

// answersPolicy fronts answersBackend with tools that read its answers in
// the ways legacy APIs need: text bodies, error words in 4xx bodies and in
// 2xx bodies, a response schema, and a contract that is wrong.
const answersPolicy = `
version: 1
server:
  messages: {{lang}}
upstreams:
  zoo: {url: "{{zoo}}"}
tools:
  read:
    description: Read an answer.
    upstream: zoo
    args: {type: object, properties: {case: {type: string}}}
    request: {method: GET, path: "/answer/{case}"}
  write:
    description: Act and read the answer.
    upstream: zoo
    side_effect: true
    args: {type: object, properties: {case: {type: string}}}
    request: {method: POST, path: "/answer/{case}"}
  sms:
    description: Send a text message through a plain-text gateway.
    upstream: zoo
    side_effect: true
    args: {type: object, properties: {case: {type: string}}}
    request: {method: POST, path: "/answer/{case}"}
    errors:
      - when: 'text.startsWith("ERR")'
        status: bad_args
    response:
      error_detail: text
  mail:
    description: Send an email.
    upstream: zoo
    side_effect: true
    args: {type: object, properties: {case: {type: string}}}
    request: {method: POST, path: "/answer/{case}"}
    response:
      error_detail: body.message
  mail_worded:
    description: Send an email, in the tool's own words.
    upstream: zoo
    side_effect: true
    args: {type: object, properties: {case: {type: string}}}
    request: {method: POST, path: "/answer/{case}"}
    response:
      error_detail: body.message
    messages:
      bad_args: 'Mail refused: {{.detail}}.'
  search:
    description: Search, with the answer's schema.
    upstream: zoo
    args: {type: object, properties: {case: {type: string}}}
    request: {method: GET, path: "/answer/{case}"}
    response:
      schema:
        type: object
        required: [total]
        properties:
          total: {type: integer}
  broken:
    description: A contract that does not fit the answer.
    upstream: zoo
    args: {type: object, properties: {case: {type: string}}}
    request: {method: GET, path: "/answer/{case}"}
    errors:
      - when: status == 599
        status: upstream
      - when: body.total > 5
        status: upstream
    response:
      data: body.hits.total
      error_detail: body.error.reason
`

// answersBackend answers GET and POST /answer/{case} with the answer the
// case names.
func answersBackend(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	type answer struct {
		code        int
		contentType string
		body        string
	}
	answers := map[string]answer{
		"empty-object":  {200, "application/json", `{}`},
		"queued":        {200, "text/plain; charset=utf-8", "OK: queued\n"},
		"blank":         {200, "text/plain", " \r\n"},
		"err":           {200, "text/plain", "ERR: bad number +1555"},
		"latin1":        {200, "text/plain; charset=iso-8859-1", "caf\xe9"},
		"invalid-to":    {400, "application/json", `{"message":"invalid To address"}`},
		"no-message":    {400, "application/json", `{"error":"E_TO"}`},
		"multiline":     {400, "application/json", `{"message":"line one\r\nline two\t\u0007 end ` + strings.Repeat("x", 1000) + `"}`},
		"total-string":  {200, "application/json", `{"total":"many-secret-value"}`},
		"total-integer": {200, "application/json", `{"total":3}`},
		"hits":          {200, "application/json", `{"hits":{"total":7}}`},
	}
	a, ok := answers[r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]]
	if !ok {
		a = answer{404, "application/json", `{}`}
	}
	w.Header().Set("Content-Type", a.contentType)
	w.WriteHeader(a.code)
	_, _ = io.WriteString(w, a.body)
}

type answersHarness struct {
	server *httptest.Server
	reg    *prometheus.Registry
	logs   *proxytest.LogBuffer
}

func newAnswersHarness(t *testing.T, lang string) *answersHarness {
	t.Helper()
	zoo := httptest.NewServer(http.HandlerFunc(answersBackend))
	t.Cleanup(zoo.Close)
	doc := strings.NewReplacer("{{zoo}}", zoo.URL, "{{lang}}", lang).Replace(answersPolicy)
	h := &answersHarness{reg: prometheus.NewRegistry(), logs: &proxytest.LogBuffer{}}
	core := newTestCore(t, doc, Options{Registry: h.reg, Logger: slog.New(slog.NewJSONHandler(h.logs, nil))})
	h.server = serveCore(t, core)
	return h
}

func (h *answersHarness) call(t *testing.T, tool, kase, key string) *contracts.Envelope {
	t.Helper()
	var header map[string]string
	if key != "" {
		header = map[string]string{"Idempotency-Key": key}
	}
	_, env := postCall(t, h.server, tool, `{"case":"`+kase+`"}`, header)
	return env
}

// logLine is the call log line of the tool's last call.
func (h *answersHarness) logLine(t *testing.T, tool string) map[string]any {
	t.Helper()
	var last map[string]any
	for _, l := range h.logs.Lines(t) {
		if l["msg"] == "call" && l["tool"] == tool {
			last = l
		}
	}
	if last == nil {
		t.Fatalf("no log line for %s in %s", tool, h.logs.String())
	}
	return last
}

// TestAnswersAreReadAsTheBackendMeantThem: text answers are data, a side
// effect that answered 2xx is done (never "found nothing"), and rules read
// a text body.
func TestAnswersAreReadAsTheBackendMeantThem(t *testing.T) {
	h := newAnswersHarness(t, "en")
	tests := []struct {
		name, tool, kase string
		status           contracts.Status
		effect           contracts.SideEffect
		data             string
		message          []string // words the message holds
	}{
		{"a side effect answered 200 {} is ok and done", "write", "empty-object", contracts.StatusOK, contracts.SideEffectDone, `{}`, []string{"was performed", "do not repeat it"}},
		{"a side effect's 2xx text answer is ok and done, the text its data", "write", "queued", contracts.StatusOK, contracts.SideEffectDone, `"OK: queued"`, []string{"was performed"}},
		{"a side effect's blank 2xx text answer is ok and done", "write", "blank", contracts.StatusOK, contracts.SideEffectDone, ``, []string{"was performed"}},
		{"a read-only 2xx text answer is ok, the text its data", "read", "queued", contracts.StatusOK, contracts.SideEffectNone, `"OK: queued"`, []string{"succeeded"}},
		{"a read-only blank 2xx text answer found nothing", "read", "blank", contracts.StatusEmpty, contracts.SideEffectNone, ``, []string{"found nothing"}},
		{"a read-only 2xx {} found nothing", "read", "empty-object", contracts.StatusEmpty, contracts.SideEffectNone, `{}`, []string{"found nothing"}},
		{"invalid UTF-8 in a text answer is replaced", "read", "latin1", contracts.StatusOK, contracts.SideEffectNone, `"caf` + "\ufffd" + `"`, nil},
		{"a rule reads the text of a 2xx answer, and its detail is the text", "sms", "err", contracts.StatusBadArgs, contracts.SideEffectNone, ``,
			[]string{`The service rejected the arguments. The backend said: "ERR: bad number +1555"; change the arguments and call again with a new idempotency key (this one is used up).`}},
		{"a text answer the rules do not match is ok, with no detail", "sms", "queued", contracts.StatusOK, contracts.SideEffectDone, `"OK: queued"`, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := h.call(t, tt.tool, tt.kase, "k-"+string(rune('a'+i)))
			if env.Status != tt.status || env.SideEffect != tt.effect {
				t.Fatalf("envelope %s %s, want %s %s (%s)", env.Status, env.SideEffect, tt.status, tt.effect, env.Message)
			}
			if string(env.Data) != tt.data {
				t.Errorf("data = %s, want %s", env.Data, tt.data)
			}
			for _, w := range tt.message {
				if !strings.Contains(env.Message, w) {
					t.Errorf("message %q lacks %q", env.Message, w)
				}
			}
			if tt.status.Success() && strings.Contains(env.Message, "said") {
				t.Errorf("a success repeats the backend's words: %q", env.Message)
			}
		})
	}
}

// TestErrorDetailReachesTheMessageOnly: response.error_detail puts the
// backend's words for a failure in the message, in both languages, one
// line and bounded, never in data; a template reads it as .detail.
func TestErrorDetailReachesTheMessageOnly(t *testing.T) {
	t.Run("en", func(t *testing.T) {
		h := newAnswersHarness(t, "en")
		env := h.call(t, "mail", "invalid-to", "k1")
		want := `The service rejected the arguments (HTTP 400). The backend said: "invalid To address"; change the arguments and call again with a new idempotency key (this one is used up).`
		if env.Status != contracts.StatusBadArgs || env.Message != want {
			t.Fatalf("%s %q, want bad_args %q", env.Status, env.Message, want)
		}
		if strings.Contains(string(env.Data), "invalid To") {
			t.Errorf("data repeats the detail: %s", env.Data)
		}
		if !strings.HasPrefix(env.Observation, "[BAD_ARGS] "+want) {
			t.Errorf("observation %q does not open with the message", env.Observation)
		}
		if env := h.call(t, "mail_worded", "invalid-to", "k2"); env.Message != "Mail refused: invalid To address; another call needs a new idempotency key (this one is used up)." {
			t.Errorf("template message = %q", env.Message)
		}
		if env := h.call(t, "mail", "no-message", "k3"); strings.Contains(env.Message, "said") || env.Status != contracts.StatusBadArgs {
			t.Errorf("without a detail: %s %q", env.Status, env.Message)
		}
	})
	t.Run("zh", func(t *testing.T) {
		h := newAnswersHarness(t, "zh")
		env := h.call(t, "mail", "invalid-to", "k1")
		if !strings.Contains(env.Message, "「invalid To address」") {
			t.Fatalf("message %q lacks the detail", env.Message)
		}
		rest := strings.NewReplacer("invalid To address", "", "HTTP", "").Replace(env.Message)
		if latin := regexp.MustCompile(`[A-Za-z]+`).FindString(rest); latin != "" {
			t.Errorf("zh message holds the English word %q besides the detail: %q", latin, env.Message)
		}
	})
	t.Run("a multi-line, long detail is one bounded line", func(t *testing.T) {
		h := newAnswersHarness(t, "en")
		env := h.call(t, "mail", "multiline", "k1")
		_, quoted, ok := strings.Cut(env.Message, `The backend said: "`)
		if !ok {
			t.Fatalf("no detail in %q", env.Message)
		}
		detail, _, _ := strings.Cut(quoted, `";`)
		if !strings.HasPrefix(detail, "line one line two end xxx") || !strings.HasSuffix(detail, "x…") {
			t.Errorf("detail = %q", detail)
		}
		if n := utf8.RuneCountInString(detail); n != contracts.MaxErrorDetailChars {
			t.Errorf("detail has %d code points, want %d", n, contracts.MaxErrorDetailChars)
		}
		if strings.ContainsAny(env.Message, "\r\n\t\a") {
			t.Errorf("message is not one line: %q", env.Message)
		}
		if !strings.HasSuffix(env.Message, "; change the arguments and call again with a new idempotency key (this one is used up).") {
			t.Errorf("the action clause is lost: %q", env.Message)
		}
	})
}

// TestResponseSchemaIsObservedOnly: an answer that breaks response.schema
// is counted as a response violation and logged at warn without its
// values; the envelope is what it would be without the schema.
func TestResponseSchemaIsObservedOnly(t *testing.T) {
	h := newAnswersHarness(t, "en")
	count := func() float64 {
		t.Helper()
		mfs, err := h.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "toolgate_contract_violations_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["tool"] == "search" && labels["kind"] == "response" {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatal("no toolgate_contract_violations_total{tool=search,kind=response}")
		return 0
	}
	env := h.call(t, "search", "total-integer", "")
	if env.Status != contracts.StatusOK || count() != 0 {
		t.Fatalf("a conforming answer: %s, %v violations", env.Status, count())
	}
	if lvl := h.logLine(t, "search")["level"]; lvl != "INFO" {
		t.Errorf("a conforming answer is logged at %v", lvl)
	}
	env = h.call(t, "search", "total-string", "")
	if env.Status != contracts.StatusOK || string(env.Data) != `{"total":"many-secret-value"}` || env.Message != "The call succeeded." {
		t.Errorf("envelope changed by the schema: %s %s %q", env.Status, env.Data, env.Message)
	}
	if got := count(); got != 1 {
		t.Errorf("violations = %v, want 1", got)
	}
	line := h.logLine(t, "search")
	for k, want := range map[string]any{"level": "WARN", "expression": "response.schema", "schema_location": "/total", "schema_keyword": "type",
		"backend_status": float64(200), "content_type": "application/json"} {
		if line[k] != want {
			t.Errorf("log %s = %v, want %v", k, line[k], want)
		}
	}
	if strings.Contains(h.logs.String(), "many-secret-value") {
		t.Error("the log repeats a value of the answer")
	}
}

// TestFailingContractsAreLogged: a response expression that fails names
// itself, as the policy spells it, on the call's log line at warn, with
// the backend's status and content type and never the body.
func TestFailingContractsAreLogged(t *testing.T) {
	h := newAnswersHarness(t, "en")
	tests := []struct {
		name, kase string
		status     contracts.Status
		expr       string
		backend    float64
	}{
		{"a data expression naming a missing field", "total-integer", contracts.StatusUpstream, "response.data", 200},
		{"an error rule comparing a string with a number", "total-string", contracts.StatusUpstream, "errors[1].when", 200},
		{"an error detail naming a missing field", "no-message", contracts.StatusBadArgs, "response.error_detail", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := h.call(t, "broken", tt.kase, "")
			if env.Status != tt.status {
				t.Fatalf("status %s, want %s (%s)", env.Status, tt.status, env.Message)
			}
			line := h.logLine(t, "broken")
			for k, want := range map[string]any{"level": "WARN", "expression": tt.expr, "backend_status": tt.backend, "content_type": "application/json"} {
				if line[k] != want {
					t.Errorf("log %s = %v, want %v", k, line[k], want)
				}
			}
			if e, _ := line["error"].(string); e == "" {
				t.Errorf("log line has no error: %v", line)
			}
		})
	}
	if env := h.call(t, "broken", "hits", ""); env.Status != contracts.StatusOK || string(env.Data) != "7" {
		t.Errorf("a fitting answer: %s %s", env.Status, env.Data)
	}
	if lvl := h.logLine(t, "broken")["level"]; lvl != "INFO" {
		t.Errorf("a fitting answer is logged at %v", lvl)
	}
	if strings.Contains(h.logs.String(), "many-secret-value") {
		t.Error("the log repeats a value of the answer")
	}
}
