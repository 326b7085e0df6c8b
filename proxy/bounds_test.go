package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

// Bounded cost from one request or one answer (issue 14, DESIGN.md section
// 8 "Bounded everything"): absurd argument numbers, CEL rules past their
// cost limit or the deadline, and messages a template makes huge.

const boundsPolicy = `
version: 1
server:
  transparent: true
  max_response_bytes: 4194304
  cel_cost_limit: 100000 # a tenth of the default: quicker under -race
upstreams:
  legacy: {url: "{{url}}", timeout: 5s}
tools:
  lookup:
    description: Look things up by number.
    upstream: legacy
    args:
      type: object
      additionalProperties: false
      properties:
        ids: {type: array, maxItems: 5, items: {type: integer}}
        x: {type: number}
    request: {method: GET, path: /lookup, query: {id: ids, x: x}}
  put_item:
    description: Store an item by number.
    upstream: legacy
    args: {type: object, required: [n], properties: {n: {type: integer}}}
    request: {method: POST, path: "/items/{n}", query: {q: n}, body: {n: n}}
  costly:
    description: Read a list with a rule that would run for minutes.
    upstream: legacy
    request: {method: GET, path: /big/read}
    errors:
      - when: body.items.exists(x, body.items.exists(y, x != y && x + y == 0))
        status: bad_args
  costly_write:
    description: Write, with a rule that would run for minutes.
    upstream: legacy
    side_effect: true
    request: {method: POST, path: /big/write}
    errors:
      - when: body.items.exists(x, body.items.exists(y, x != y && x + y == 0))
        status: bad_args
  costly_write_500:
    description: Write, failing with a body a rule cannot read in budget.
    upstream: legacy
    side_effect: true
    request: {method: POST, path: /big500}
    errors:
      - when: body.items.exists(x, body.items.exists(y, x != y && x + y == 0))
        status: bad_args
  costly_data:
    description: Shape data with an expression that would run for minutes.
    upstream: legacy
    request: {method: GET, path: /big/data}
    response:
      data: 'body.items.map(x, body.items.filter(y, y == x).size())'
  wordy:
    description: Read text, with a template that repeats all of it.
    upstream: legacy
    request: {method: GET, path: /text}
    messages:
      ok: '{{range .data.items}}{{$.data.text}}{{end}}'
`

// boundsBackend records what it received and answers by path.
type boundsBackend struct {
	mu   sync.Mutex
	seen []string // method, request URI and body of each request
}

func (b *boundsBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.seen = append(b.seen, r.Method+" "+r.URL.RequestURI()+" "+string(body))
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasPrefix(r.URL.Path, "/big"):
		// Two thousand elements: a nested comprehension over them is
		// four million steps.
		if r.URL.Path == "/big500" {
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = io.WriteString(w, `{"items":[`+strings.Repeat("1,", 1999)+`2]}`)
	case r.URL.Path == "/text":
		items := strings.TrimSuffix(strings.Repeat(`1,`, 100), ",")
		_, _ = io.WriteString(w, `{"text":"`+strings.Repeat("量子 ", 3500)+`","items":[`+items+`]}`) // a megabyte rendered
	default:
		_, _ = io.WriteString(w, `{"ok":true}`)
	}
}

func (b *boundsBackend) requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.seen...)
}

func newBoundsHarness(t *testing.T, policyYAML string) (*harness, *boundsBackend) {
	t.Helper()
	b := &boundsBackend{}
	backend := httptest.NewServer(b)
	t.Cleanup(backend.Close)
	core := newTestCore(t, strings.ReplaceAll(policyYAML, "{{url}}", backend.URL), Options{})
	return &harness{core: core, server: serveCore(t, core)}, b
}

// get sends a GET to a transparent route and decodes the envelope.
func (h *harness) get(t *testing.T, uri string) *contracts.Envelope {
	t.Helper()
	resp, err := h.server.Client().Get(h.server.URL + uri)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	env, _, err := proxytest.ReadEnvelope(resp)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestNumberBombsAreBadArgsBeforeValidation(t *testing.T) {
	h, backend := newBoundsHarness(t, boundsPolicy)
	// The bomb: 9 KB of 1e999999 in an integer array with
	// maxItems 5, which cost the schema library half a minute of CPU.
	bomb := `{"ids":[` + strings.Repeat("1e999999,", 999) + `1e999999]}`
	decoded := make([]any, 1000)
	for i := range decoded {
		decoded[i] = json.Number("1e999999")
	}
	tests := []struct {
		name    string
		call    func(t *testing.T) *contracts.Envelope
		pointer string
	}{
		{"a JSON body", func(t *testing.T) *contracts.Envelope {
			_, env := h.call(t, "lookup", bomb, nil)
			return env
		}, "/ids/0"},
		{"arguments handed over already decoded", func(*testing.T) *contracts.Envelope {
			res := h.core.Call(context.Background(), &Request{Tool: "lookup", Args: map[string]any{"ids": decoded}, Front: "embedded"})
			return &res.Envelope
		}, "/ids/0"},
		{"a tiny number in a transparent query value", func(t *testing.T) *contracts.Envelope {
			return h.get(t, "/lookup?x=1e-999999")
		}, "/x"},
		{"a long integer in a transparent query value", func(t *testing.T) *contracts.Envelope {
			return h.get(t, "/lookup?id=1&id="+strings.Repeat("9", 5000))
		}, "/ids/1"},
		{"1e400 for an integer", func(t *testing.T) *contracts.Envelope {
			_, env := h.call(t, "put_item", `{"n":1e400}`, nil)
			return env
		}, "/n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			env := tt.call(t)
			// Generous: the schema library took tens of seconds.
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the call took %v", took)
			}
			if env.Status != contracts.StatusBadArgs || env.Retryable || env.Cost != 0 {
				t.Fatalf("envelope = %s retryable=%v cost=%v (%s)", env.Status, env.Retryable, env.Cost, env.Message)
			}
			if want := " must be a number with at most 100 significant digits"; !strings.Contains(env.Message, want) {
				t.Errorf("message = %q, want it to say %q", env.Message, want)
			}
			if want := `{"errors":[{"argument":"` + tt.pointer + `","problem":"number"`; !strings.HasPrefix(string(env.Data), want) {
				t.Errorf("data = %s, want it to start with %s", env.Data, want)
			}
		})
	}
	if seen := backend.requests(); len(seen) != 0 {
		t.Errorf("the backend was called: %q", seen)
	}
}

func TestLargeIntegersAreForwardedAsDigits(t *testing.T) {
	h, backend := newBoundsHarness(t, boundsPolicy)
	for _, tt := range []struct{ sent, digits string }{
		{"1e20", "100000000000000000000"},
		{"9.99e399", "999" + strings.Repeat("0", 397)},
	} {
		t.Run(tt.sent, func(t *testing.T) {
			_, env := h.call(t, "put_item", `{"n":`+tt.sent+`}`, nil)
			if env.Status != contracts.StatusOK {
				t.Fatalf("envelope = %s (%s)", env.Status, env.Message)
			}
			seen := backend.requests()
			want := "POST /items/" + tt.digits + "?q=" + tt.digits + ` {"n":` + tt.digits + `}`
			if last := seen[len(seen)-1]; last != want {
				t.Errorf("backend saw %.120q, want %.120q", last, want)
			}
		})
	}
}

// TestRulesBeyondTheirBoundsMakeTheAnswerUnreadable: a rule stopped by the
// cost limit or the deadline is never "no match" and never ok.
func TestRulesBeyondTheirBoundsMakeTheAnswerUnreadable(t *testing.T) {
	h, _ := newBoundsHarness(t, boundsPolicy)
	key := map[string]string{"Idempotency-Key": "k-1"}
	tests := []struct {
		name       string
		tool       string
		sideEffect contracts.SideEffect
	}{
		{"an error rule over a 2xx answer of a read-only tool", "costly", contracts.SideEffectNone},
		// The answer was 2xx: the action ran.
		{"an error rule over a 2xx answer of a side-effecting tool", "costly_write", contracts.SideEffectDone},
		// A 500 keeps the default table's side effect.
		{"an error rule over a 500 answer of a side-effecting tool", "costly_write_500", contracts.SideEffectUnknown},
		{"a data expression", "costly_data", contracts.SideEffectNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, env := h.call(t, tt.tool, `{}`, key)
			if env.Status != contracts.StatusUpstream || env.Retryable || env.SideEffect != tt.sideEffect ||
				!strings.Contains(env.Message, "could not be read") {
				t.Errorf("envelope = %s retryable=%v side_effect=%s (%s), want an unreadable answer: upstream, not retryable, %s",
					env.Status, env.Retryable, env.SideEffect, env.Message, tt.sideEffect)
			}
		})
	}
	t.Run("an error rule interrupted at the deadline", func(t *testing.T) {
		// No cost limit to speak of: only the tool's deadline stops it.
		doc := strings.Replace(boundsPolicy, "cel_cost_limit: 100000 ", "cel_cost_limit: 1000000000000000 ", 1)
		doc = strings.Replace(doc, "legacy: {url: \"{{url}}\", timeout: 5s}", "legacy: {url: \"{{url}}\", timeout: 300ms}", 1)
		h, _ := newBoundsHarness(t, doc)
		_, env := h.call(t, "costly", `{}`, nil)
		if env.Status != contracts.StatusUpstream || env.Retryable || !strings.Contains(env.Message, "could not be read") {
			t.Errorf("envelope = %s retryable=%v (%s), want an unreadable answer: upstream, not retryable", env.Status, env.Retryable, env.Message)
		}
	})
}

func TestATemplateCannotMakeTheMessageHuge(t *testing.T) {
	h, _ := newBoundsHarness(t, boundsPolicy)
	_, env := h.call(t, "wordy", `{}`, nil)
	if env.Status != contracts.StatusOK {
		t.Fatalf("envelope = %s (%s)", env.Status, env.Message)
	}
	if n := utf8.RuneCountInString(env.Message); n > contracts.MaxMessageChars || !strings.HasSuffix(env.Message, "…") {
		t.Errorf("message has %d characters, ends %q", n, env.Message[max(0, len(env.Message)-12):])
	}
	if !utf8.ValidString(env.Message) || !utf8.ValidString(env.Observation) {
		t.Error("not valid UTF-8")
	}
	if !strings.HasPrefix(env.Observation, "[OK] "+env.Message) {
		t.Errorf("observation does not start with the bounded message: %.80q", env.Observation)
	}
}
