package contracts

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestTemplatesReadOnlyWhatTheyUse(t *testing.T) {
	tpls, err := CompileTemplates(map[string]string{
		"ok":      "Found {{.data.total}} for {{.args.q}}.",
		"empty":   "Nothing: {{.data}}",
		"timeout": `{{with .data.items}}{{len .}} items{{end}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := tpls[StatusOK].dataKeys; len(got) != 1 || got[0] != "total" || tpls[StatusOK].whole {
		t.Errorf("ok template keys = %v whole=%v", got, tpls[StatusOK].whole)
	}
	if !tpls[StatusEmpty].whole {
		t.Error("{{.data}} must decode all data")
	}
	data := []byte(`{"items":[1,2,3],"total":3}`)
	for st, want := range map[Status]string{StatusOK: "Found 3 for go.", StatusEmpty: "Nothing: map[items:[1 2 3] total:3]", StatusTimeout: "3 items"} {
		got, ok := tpls.Render(st, map[string]any{"q": "go"}, data)
		if !ok || got != want {
			t.Errorf("%s: %q %v, want %q", st, got, ok, want)
		}
	}
	if _, ok := tpls.Render(StatusUpstream, nil, data); ok {
		t.Error("rendered a status without a template")
	}
}

func TestCatalogMessages(t *testing.T) {
	for _, lang := range Languages() {
		c, err := NewCatalog(lang)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []Outcome{
			{Status: StatusUpstream, Reason: ReasonServerError, HTTPCode: 500, Effect: SideEffectUnknown},
			{Status: StatusUpstream, Reason: ReasonServerError, HTTPCode: 502, Effect: SideEffectUnknown, Retryable: true},
			{Status: StatusUpstream, Reason: ReasonCircuitOpen, RetryAfter: 90 * time.Second, Retryable: true},
			{Status: StatusForbidden, Reason: ReasonBudget, RetryAfter: 3 * time.Hour},
			{Status: StatusBadArgs, Reason: ReasonSchema, Arg: &ArgError{Pointer: "/q", Problem: ProblemRequired}},
			{Status: StatusOK, Reason: ReasonOK, Effect: SideEffectDone},
		} {
			for _, se := range []bool{false, true} {
				msg := c.Message("send", se, &o)
				if msg == "" || strings.ContainsAny(msg, "{}\n") {
					t.Errorf("%s %s se=%v: %q", lang, o.Reason, se, msg)
				}
			}
		}
	}
	c, _ := NewCatalog("en")
	o := Outcome{Status: StatusUpstream, Reason: ReasonServerError, HTTPCode: 500, Effect: SideEffectUnknown}
	if msg := c.Message("send", true, &o); !strings.Contains(msg, "may or may not") {
		t.Errorf("unknown outcome message = %q", msg)
	}
	o.Retryable = true
	if msg := c.Message("send", true, &o); !strings.Contains(msg, "same idempotency key") {
		t.Errorf("dedupe message = %q", msg)
	}
	if _, err := NewCatalog("fr"); err == nil {
		t.Error("unknown catalogue accepted")
	}
}

func TestTemplatesRenderMissingValuesEmpty(t *testing.T) {
	tpls, err := CompileTemplates(map[string]string{
		"ok":    "q={{.args.q}} missing={{.args.nope}} deep={{.data.x.y}} n={{.data.n}}",
		"empty": `{{if .args.q}}q={{.args.q}}{{end}} missing={{.args.nope}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tpls[StatusOK].fast == nil || tpls[StatusEmpty].fast != nil {
		t.Fatal("fast path chosen wrongly")
	}
	got, ok := tpls.Render(StatusOK, map[string]any{"q": "go"}, []byte(`{"n":1.5,"x":{"y":true}}`))
	if !ok || got != "q=go missing= deep=true n=1.5" {
		t.Errorf("fast: %q", got)
	}
	got, ok = tpls.Render(StatusEmpty, map[string]any{"q": "go"}, nil)
	if !ok || got != "q=go missing=" {
		t.Errorf("slow: %q", got)
	}
	// Without data, a data field renders empty rather than failing.
	got, ok = tpls.Render(StatusOK, map[string]any{"q": "go"}, nil)
	if !ok || got != "q=go missing= deep= n=" {
		t.Errorf("no data: %q", got)
	}
}

// TestFastTemplatesMatchTextTemplate: the direct renderer writes what
// text/template writes for the same template, arguments and data, with the
// data's members located or not.
func TestFastTemplatesMatchTextTemplate(t *testing.T) {
	tpls, err := CompileTemplates(map[string]string{
		"ok": "a={{.args.q}} n={{.args.n}} b={{.args.b}} o={{.args.o}} t={{.data.t}} s={{.data.s}} e={{.data.e}} " +
			"z={{.data.z}} f={{.data.f}} neg={{.data.neg}} l={{.data.l}} m={{.data.m}} d={{.data.m.k}} none={{.data.none}}  \t end ",
	})
	if err != nil {
		t.Fatal(err)
	}
	mt := tpls[StatusOK]
	if mt.fast == nil {
		t.Fatal("no fast path")
	}
	args := decodeTestArgs(t, `{"q":"日本 go","n":1e3,"b":false,"o":{"x":[1,"y"]}}`)
	for _, data := range []string{
		`{"t":true,"s":"plain","e":"esc\"aped\\n\u00e9","z":null,"f":-1.5e-3,"neg":-0,"l":[1,{"a":2}],"m":{"k":"v"}}`,
		`{"t":false,"s":"","e":"\u2028","f":1234567,"neg":100000,"z":1e21,"l":3.0,"m":{"k":12345678901234567890}}`,
		`{"t":1e-7,"s":0.0001,"e":123456,"f":-2.5E+3,"neg":99999999999999999999999,"z":"","l":"x","m":{"k":null}}`,
	} {
		// Every template path is present: text/template fails on a
		// missing one where the renderer prints nothing (tested above).
		var want strings.Builder
		var decoded any
		if data != "" {
			doc, err := parseJSONDoc([]byte(data))
			if err != nil {
				t.Fatal(err)
			}
			decoded = doc.native(0)
		}
		if err := mt.tpl.Execute(&want, map[string]any{"args": args, "data": decoded}); err != nil {
			t.Fatal(err)
		}
		wantText := oneLine(strings.ReplaceAll(want.String(), "<no value>", ""))
		var members []Member
		if data != "" {
			members = testMembers(t, data)
		}
		for _, m := range [][]Member{members, nil} {
			got, ok := tpls.RenderMembers(StatusOK, args, []byte(data), m)
			if !ok || got != wantText {
				t.Errorf("data %s (members %v):\n got %q\nwant %q", data, m != nil, got, wantText)
			}
		}
	}
}

// testMembers locates the top-level members of a compact JSON object.
func testMembers(t *testing.T, data string) []Member {
	t.Helper()
	doc, err := parseJSONDoc([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	var out []Member
	for i := int32(1); i < int32(len(doc.nodes)); {
		key, val := &doc.nodes[i], &doc.nodes[i+1]
		out = append(out, Member{Key: doc.str(i), Start: int(val.start), End: int(val.end)})
		_ = key
		i = val.next
	}
	return out
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "a b": "a b", " a": "a", "a ": "a", "a  b": "a b", "a\tb": "a b", "a\nb\n": "a b",
		"命中 3 条。": "命中 3 条。", "a\u3000b": "a b", "a\u00a0b": "a b", "  ": "",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

// producedOutcome is an outcome the core can produce, for a read-only or
// a side-effecting tool.
type producedOutcome struct {
	o          Outcome
	sideEffect bool
}

// producedOutcomes lists every (reason, status, side effect, retryable)
// combination the core produces: the rejections it builds itself (proxy's
// access.go, core.go, idempotency.go, upstream.go), and everything the
// classification functions make of every answer code, transport failure
// and error rule.
func producedOutcomes() []producedOutcome {
	// Error rules are applied to one code of each class ClassifyHTTP
	// tells apart (a rule's outcome depends on the class alone).
	ruleCodes := map[int]bool{100: true, 200: true, 204: true, 302: true, 400: true, 401: true, 404: true,
		405: true, 408: true, 429: true, 500: true, 501: true, 502: true, 503: true, 504: true}
	var out []producedOutcome
	yes, no := true, false
	effects := []*SideEffect{nil, new(SideEffectNone), new(SideEffectDone), new(SideEffectUnknown)}
	for _, se := range []bool{false, true} {
		add := func(o Outcome) { out = append(out, producedOutcome{o, se}) }
		for _, r := range []struct {
			status    Status
			reason    Reason
			retryable bool
			wait      time.Duration
		}{
			{StatusNotFound, ReasonUnknownTool, false, 0},
			{StatusForbidden, ReasonDenied, false, 0},
			{StatusForbidden, ReasonBudget, false, time.Hour},
			{StatusUpstream, ReasonRateLimited, true, 2 * time.Second},
			{StatusBadArgs, ReasonSchema, false, 0},
			{StatusBadArgs, ReasonBadJSON, false, 0},
			{StatusBadArgs, ReasonTooLarge, false, 0},
			{StatusBadArgs, ReasonKeyMissing, false, 0},
			{StatusBadArgs, ReasonKeyMalformed, false, 0},
			{StatusBadArgs, ReasonKeyConflict, false, 0},
			{StatusBadArgs, ReasonKeyMismatch, false, 0},
			{StatusUpstream, ReasonCircuitOpen, true, 30 * time.Second},
			{StatusUpstream, ReasonBulkhead, true, time.Second},
			{StatusUpstream, ReasonStoreUnavailable, true, time.Second},
		} {
			o := Reject(r.status, r.reason)
			o.Retryable, o.RetryAfter = r.retryable, r.wait
			add(o)
		}
		if se {
			add(Outcome{Status: StatusTimeout, Reason: ReasonInFlightTimeout, Retryable: true, Effect: SideEffectUnknown})
			add(Outcome{Status: StatusTimeout, Reason: ReasonOutcomeLost, Effect: SideEffectUnknown})
		}
		for _, dedupes := range []bool{false, true} {
			for _, f := range []Failure{FailConnect, FailReset, FailDeadline, FailTLS, FailCanceled} {
				for _, written := range []bool{false, true} {
					add(ClassifyTransport(f, written, se, dedupes))
				}
			}
			for code := 100; code < 600; code++ {
				var answers []Outcome
				if code >= 200 && code < 300 {
					answers = []Outcome{
						{Status: StatusOK, Reason: ReasonOK, Effect: SideEffectDone, HTTPCode: code},
						{Status: StatusEmpty, Reason: ReasonEmpty, Effect: SideEffectDone, HTTPCode: code},
						BadResponse(code),
						Unreadable(code, Outcome{}),
						// An answer that began and was cut at the deadline.
						{Status: StatusTimeout, Reason: ReasonDeadline, Effect: SideEffectDone, Retryable: !se, HTTPCode: code},
					}
				} else {
					table := ClassifyHTTP(code, se, dedupes, 2*time.Second)
					answers = []Outcome{table, Unreadable(code, table)}
					if se && table.Effect == SideEffectNone {
						// The answer to a resend: the first write may have acted.
						table.Effect, table.Retryable = SideEffectUnknown, dedupes
						answers = append(answers, table, Unreadable(code, table))
					}
				}
				for _, a := range answers {
					add(a)
				}
				if !ruleCodes[code] {
					continue
				}
				for _, st := range Statuses() {
					for _, retryable := range []*bool{nil, &yes, &no} {
						for _, effect := range effects {
							m := MatchedRule{Status: st, Retryable: retryable, SideEffect: effect}
							add(ApplyRule(m, code, se, dedupes, 2*time.Second))
						}
					}
				}
			}
		}
	}
	return out
}

// TestMessagesAgreeWithTheEnvelope walks every outcome the core produces
// and checks that its message, in both languages, never contradicts the
// envelope: a call that must not be retried is not told to retry the same
// call, one that may be retried is not told that retrying will not help,
// and a request that reached the backend is not said to have been unsent.
func TestMessagesAgreeWithTheEnvelope(t *testing.T) {
	type phrases struct {
		retrySame, noRetry, notSent, performed, mayHave []string
	}
	lang := map[string]phrases{
		"en": {
			retrySame: []string{"retry the same call", "retry with the same"},
			noRetry:   []string{"retrying will not help"},
			notSent:   []string{"nothing was sent", "before the call was sent"},
			performed: []string{"was performed"},
			mayHave:   []string{"may or may not"},
		},
		"zh": {
			retrySame: []string{"原样重试", "相同的幂等键重试", "相同的键重试"},
			noRetry:   []string{"重试无用"},
			notSent:   []string{"请求未发送", "请求发送前"},
			performed: []string{"操作已执行"},
			mayHave:   []string{"可能已执行也可能未执行"},
		},
	}
	outcomes := producedOutcomes()
	for _, name := range Languages() {
		c, err := NewCatalog(name)
		if err != nil {
			t.Fatal(err)
		}
		p := lang[name]
		seen := map[string]bool{}
		for _, po := range outcomes {
			o := po.o
			if o.Reason == ReasonDeadline {
				o.Detail = "2s" // as the core sets it
			}
			effect := SideEffectNone // what the envelope says
			if po.sideEffect {
				effect = o.Effect
			}
			combo := fmt.Sprintf("%s %s %s/%s side_effect=%s retryable=%v se=%v", name, o.Reason, o.Status, o.Effect, effect, o.Retryable, po.sideEffect)
			if seen[combo] {
				continue
			}
			seen[combo] = true
			msg := c.Message("send", po.sideEffect, &o)
			has := func(list []string) string {
				for _, s := range list {
					if strings.Contains(msg, s) {
						return s
					}
				}
				return ""
			}
			var wrong []string
			if s := has(p.retrySame); s != "" && !o.Retryable {
				wrong = append(wrong, "not retryable, yet says "+s)
			}
			if s := has(p.noRetry); s != "" && o.Retryable {
				wrong = append(wrong, "retryable, yet says "+s)
			}
			if s := has(p.notSent); s != "" && o.Effect != SideEffectNone {
				wrong = append(wrong, "the request reached the backend, yet says "+s)
			}
			if s := has(p.performed); s != "" && effect != SideEffectDone {
				wrong = append(wrong, "side effect "+string(effect)+", yet says "+s)
			}
			if s := has(p.mayHave); s != "" && effect != SideEffectUnknown {
				wrong = append(wrong, "side effect "+string(effect)+", yet says "+s)
			}
			if effect == SideEffectUnknown && !o.Retryable && has(p.mayHave) == "" {
				wrong = append(wrong, "side effect unknown and not retryable, yet the message does not say it may have acted")
			}
			if msg == "" || strings.ContainsAny(msg, "{}\n") {
				wrong = append(wrong, "empty or unexpanded")
			}
			for _, w := range wrong {
				t.Errorf("%s: %s: %q", combo, w, msg)
			}
		}
		t.Logf("%s: %d combinations", name, len(seen))
	}
}

// TestCataloguesHaveTheSameEntries: every entry exists in both languages,
// with the same placeholders.
func TestCataloguesHaveTheSameEntries(t *testing.T) {
	en, zh := catalogEN(), catalogZH()
	placeholders := func(s string) []string {
		var out []string
		for _, f := range strings.Split(s, "{")[1:] {
			out = append(out, f[:strings.IndexByte(f, '}')])
		}
		sort.Strings(out)
		return out
	}
	for k, v := range en {
		w, ok := zh[k]
		if !ok {
			t.Errorf("%s: no zh entry", k)
			continue
		}
		if a, b := placeholders(v), placeholders(w); !slices.Equal(a, b) {
			t.Errorf("%s: placeholders en %v, zh %v", k, a, b)
		}
	}
	for k := range zh {
		if _, ok := en[k]; !ok {
			t.Errorf("%s: no en entry", k)
		}
	}
}

// TestMessagesAreBounded: however much a template or the catalogue would
// write, a message is at most MaxMessageChars code points of valid UTF-8,
// cut at a character boundary and marked with "…".
func TestMessagesAreBounded(t *testing.T) {
	text := strings.Repeat("量子 ", 100_000) // 700 KB, three-byte characters
	items := make([]string, 2000)
	for i := range items {
		items[i] = `"` + strings.Repeat("é", 7) + `"`
	}
	data := []byte(`{"text":"` + text + `","items":[` + strings.Join(items, ",") + `]}`)
	tests := []struct {
		name string
		tpl  string
	}{
		{"a field holding a long string", `Found: {{.data.text}}`},
		{"a range over the data", `{{range .data.items}}{{.}}, {{end}}`},
		// Four million iterations: stopped once the output passes the
		// bound, not run to the end.
		{"a nested range", `{{range .data.items}}{{range $.data.items}}{{.}}{{end}}{{end}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpls, err := CompileTemplates(map[string]string{"ok": tt.tpl})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			msg, ok := tpls.Render(StatusOK, nil, data)
			if !ok {
				t.Fatal("not rendered")
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("rendering took %v", took)
			}
			checkBounded(t, msg)
		})
	}
	t.Run("a catalogue message with a long detail", func(t *testing.T) {
		c, _ := NewCatalog("zh")
		o := Reject(StatusBadArgs, ReasonBadJSON)
		o.Detail = text
		checkBounded(t, c.Message("send", false, &o))
	})
	t.Run("a short message is left as it is", func(t *testing.T) {
		tpls, _ := CompileTemplates(map[string]string{"ok": "Found {{.data.n}}."})
		if msg, _ := tpls.Render(StatusOK, nil, []byte(`{"n":3}`)); msg != "Found 3." {
			t.Errorf("message = %q", msg)
		}
	})
}

func checkBounded(t *testing.T, msg string) {
	t.Helper()
	if n := utf8.RuneCountInString(msg); n > MaxMessageChars || n < MaxMessageChars/2 {
		t.Errorf("message has %d characters, want at most %d (and not cut short)", n, MaxMessageChars)
	}
	if !utf8.ValidString(msg) || strings.ContainsRune(msg, utf8.RuneError) {
		t.Errorf("message is not clean UTF-8: %q", msg[len(msg)-20:])
	}
	if !strings.HasSuffix(msg, "…") {
		t.Errorf("a cut message does not end with an ellipsis: %q", msg[len(msg)-20:])
	}
}
