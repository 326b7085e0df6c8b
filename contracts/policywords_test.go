package contracts

import (
	"strings"
	"testing"
	"time"
)

// TestPolicyWordsAreHeldToTheEnvelope has a row, in each language, for
// every way a policy's words could make toolgate lie to the model (issue
// 30): the message of each, whole, with the envelope's fields it must
// agree with. The rows pin what the model reads.
func TestPolicyWordsAreHeldToTheEnvelope(t *testing.T) {
	yes := true
	unknown, done := SideEffectUnknown, SideEffectDone
	env := newRuleEnv(t)
	emptyTpl, err := compileTemplates(env, map[string]string{"empty": "Try broader keywords."})
	if err != nil {
		t.Fatal(err)
	}
	countTpl, err := compileTemplates(env, map[string]string{"ok": "命中 {{.data.total}} 条。"})
	if err != nil {
		t.Fatal(err)
	}
	send := &Contract{Name: "send", SideEffect: true, Timeout: 2 * time.Second}
	search := &Contract{Name: "search", Timeout: 2 * time.Second}
	emptied := Answered(200)
	emptied.Empty()
	counted := Answered(200)
	counted.Data = []byte(`{"items":[]}`)
	tests := []struct {
		name      string
		contract  *Contract
		o         Outcome
		retryable bool
		effect    SideEffect // as the envelope shows it
		en, zh    string
	}{
		{
			name:     "an errors rule's unknown outcome at a backend that does not dedupe is not retryable",
			contract: send, o: ApplyRule(MatchedRule{Status: StatusUpstream, SideEffect: &unknown}, 200, true, false, 0),
			effect: SideEffectUnknown,
			en:     "The service reported a failure; the action may or may not have happened: find out whether it did (or ask the user), and only if it did not, repeat it with a new idempotency key.",
			zh:     "服务报告了错误，操作可能已执行也可能未执行；请先确认是否已生效（或询问用户），确认未生效后再用新的幂等键重新调用。",
		},
		{
			name:     "a retryable unknown rule that reaches the runtime at a backend that does not dedupe is not retryable",
			contract: send, o: ApplyRule(MatchedRule{Status: StatusUpstream, Retryable: &yes, SideEffect: &unknown}, 200, true, false, 0),
			effect: SideEffectUnknown,
			en:     "The service reported a failure; the action may or may not have happened: find out whether it did (or ask the user), and only if it did not, repeat it with a new idempotency key.",
			zh:     "服务报告了错误，操作可能已执行也可能未执行；请先确认是否已生效（或询问用户），确认未生效后再用新的幂等键重新调用。",
		},
		{
			name:      "a retryable unknown rule at a backend that dedupes is retried with the same key",
			contract:  &Contract{Name: "send", SideEffect: true, Idempotency: IdempotencySpec{ForwardHeader: "Idempotency-Key"}},
			o:         ApplyRule(MatchedRule{Status: StatusUpstream, Retryable: &yes, SideEffect: &unknown}, 200, true, true, 0),
			retryable: true, effect: SideEffectUnknown,
			en: "The service reported a failure; the action may or may not have happened, so retry with the same idempotency key, which cannot act twice, and if it fails again, tell the user.",
			zh: "服务报告了错误，操作可能已执行也可能未执行；请使用相同的幂等键重试（不会重复执行），若仍失败请告知用户。",
		},
		{
			name:     "a done rule is never retryable",
			contract: send, o: ApplyRule(MatchedRule{Status: StatusUpstream, Retryable: &yes, SideEffect: &done}, 200, true, false, 0),
			effect: SideEffectDone,
			en:     "The action was performed but the service reported a failure; do not repeat it.",
			zh:     "操作已执行，但服务报告了错误；请勿重复执行。",
		},
		{
			name:     "an empty template does not speak for a performed action",
			contract: &Contract{Name: "send", SideEffect: true, Templates: emptyTpl}, o: emptied,
			effect: SideEffectDone,
			en:     "The action was performed and the service returned no data; do not repeat it.",
			zh:     "操作已执行，服务未返回数据；请勿重复执行。",
		},
		{
			name:     "a template whose field is missing falls back to the catalogue",
			contract: &Contract{Name: "search", Templates: countTpl}, o: counted,
			effect: SideEffectNone,
			en:     "The call succeeded.",
			zh:     "调用成功。",
		},
		{
			name:     "a side effect's backend 400 says to call again with a new key",
			contract: send, o: ClassifyHTTP(400, true, false, 0),
			effect: SideEffectNone,
			en:     "The service rejected the arguments (HTTP 400); change the arguments and call again with a new idempotency key (this one is used up).",
			zh:     "服务拒绝了这些参数（HTTP 400）；请修改参数，并使用新的幂等键再调用（当前键已用过）。",
		},
		{
			name:     "a side effect's backend 404 says to call again with a new key",
			contract: send, o: ClassifyHTTP(404, true, false, 0),
			effect: SideEffectNone,
			en:     "The service found nothing at the requested identifiers (HTTP 404); check the identifiers, and call again with a new idempotency key (this one is used up).",
			zh:     "服务未找到所请求的对象（HTTP 404）；请核对标识，并使用新的幂等键再调用（当前键已用过）。",
		},
		{
			name:     "a side effect's backend 409 says a new call needs a new key",
			contract: send, o: ClassifyHTTP(409, true, false, 0),
			effect: SideEffectNone,
			en:     "The service reports a conflict with its current state (HTTP 409), for example that the item already exists; check the current state before changing anything, and call again only with a new idempotency key (this one is used up).",
			zh:     "服务报告与当前状态冲突（HTTP 409），例如对象已存在；请先确认当前状态，再决定是否修改；如需再次调用，须使用新的幂等键（当前键已用过）。",
		},
		{
			name:     "a side effect's backend 403 says a new call needs a new key",
			contract: send, o: ClassifyHTTP(403, true, false, 0),
			effect: SideEffectNone,
			en:     "The service refused this call (HTTP 403); retrying will not help, so tell the user this tool cannot be used right now (any new call needs a new idempotency key).",
			zh:     "服务拒绝了此次调用（HTTP 403），重试无用；请告知用户该工具暂时无法使用（再次调用须使用新的幂等键）。",
		},
		{
			name:     "a read-only tool's backend 400 keeps no key",
			contract: search, o: ClassifyHTTP(400, false, false, 0),
			effect: SideEffectNone,
			en:     "The service rejected the arguments (HTTP 400); change the arguments before calling again.",
			zh:     "服务拒绝了这些参数（HTTP 400）；请修改参数后再调用。",
		},
		{
			name:     "a wait of an hour says to tell the user now if the task cannot wait",
			contract: search, o: ClassifyHTTP(429, false, false, time.Hour),
			retryable: true, effect: SideEffectNone,
			en: "The service is rate limiting calls (HTTP 429); if the task can wait that long, retry the same call in 60 minutes, and if it fails again, tell the user; if it cannot wait, tell the user now.",
			zh: "服务正在限流（HTTP 429）；如任务可以等待，请在 60 分钟后原样重试，若仍失败请告知用户；如任务无法等待，请立即告知用户。",
		},
		{
			name:     "a wait of two minutes is not long",
			contract: search, o: ClassifyHTTP(429, false, false, 2*time.Minute),
			retryable: true, effect: SideEffectNone,
			en: "The service is rate limiting calls (HTTP 429); retry the same call in 2 minutes, and if it fails again, tell the user.",
			zh: "服务正在限流（HTTP 429）；请在 2 分钟后原样重试，若仍失败请告知用户。",
		},
		{
			name:     "a 429 without Retry-After states no wait",
			contract: search, o: ClassifyHTTP(429, false, false, 0),
			retryable: true, effect: SideEffectNone,
			en: "The service is rate limiting calls (HTTP 429); retry the same call, and if it fails again, tell the user.",
			zh: "服务正在限流（HTTP 429）；可原样重试，若仍失败请告知用户。",
		},
	}
	for _, tt := range tests {
		for _, lang := range languages() {
			t.Run(lang+"/"+tt.name, func(t *testing.T) {
				c, _ := NewCatalog(lang)
				o := tt.o
				effect := SideEffectNone
				if tt.contract.SideEffect {
					effect = o.Effect
				}
				if o.Retryable != tt.retryable || effect != tt.effect {
					t.Errorf("retryable %v side_effect %s, want %v %s", o.Retryable, effect, tt.retryable, tt.effect)
				}
				want := map[string]string{"en": tt.en, "zh": tt.zh}[lang]
				if got := c.Compose(&Said{Tool: tt.contract.Name, Contract: tt.contract, Attempts: 1, Sent: true}, &o).Text; got != want {
					t.Errorf("message\n got %q\nwant %q", got, want)
				}
			})
		}
	}
}

// TestRulesThatContradictTheRetryRuleDoNotCompile: a contract whose errors
// rule says done and retryable, or unknown and retryable at a backend that
// does not dedupe on the forwarded key, does not compile, wherever it
// comes from (check, serve, a reload, a draft all compile through here);
// the same rule at a deduping backend, or on a read-only tool, does.
func TestRulesThatContradictTheRetryRuleDoNotCompile(t *testing.T) {
	yes, no := true, false
	unknown, done, none := SideEffectUnknown, SideEffectDone, SideEffectNone
	env := newRuleEnv(t)
	tests := []struct {
		name       string
		sideEffect bool
		forward    string
		rule       ErrorRuleSpec
		want       string // the error's start, "" when it compiles
	}{
		{"done and retryable", true, "", ErrorRuleSpec{Status: StatusUpstream, Retryable: &yes, SideEffect: &done}, "errors[1].retryable: retryable: true contradicts side_effect: done"},
		{"unknown and retryable at a backend that does not dedupe", true, "", ErrorRuleSpec{Status: StatusUpstream, Retryable: &yes, SideEffect: &unknown}, "errors[1].retryable: retryable: true contradicts side_effect: unknown on a backend that does not dedupe"},
		{"unknown and retryable at a backend that dedupes", true, "Idempotency-Key", ErrorRuleSpec{Status: StatusUpstream, Retryable: &yes, SideEffect: &unknown}, ""},
		{"unknown and retryable on a read-only tool", false, "", ErrorRuleSpec{Status: StatusUpstream, Retryable: &yes, SideEffect: &unknown}, ""},
		{"unknown, retryable left to the rule", true, "", ErrorRuleSpec{Status: StatusUpstream, SideEffect: &unknown}, ""},
		{"done and not retryable", true, "", ErrorRuleSpec{Status: StatusUpstream, Retryable: &no, SideEffect: &done}, ""},
		{"nothing done and retryable", true, "", ErrorRuleSpec{Status: StatusUpstream, Retryable: &yes, SideEffect: &none}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rule.When = "status == 200"
			spec := ContractSpec{
				Name: "send", SideEffect: tt.sideEffect, Args: map[string]any{"type": "object"},
				Request:     BindingSpec{Method: "POST", Path: "/send"},
				Response:    RulesSpec{Errors: []ErrorRuleSpec{{When: "status == 418", Status: StatusBadArgs}, tt.rule}},
				Idempotency: IdempotencySpec{ForwardHeader: tt.forward},
			}
			if !tt.sideEffect {
				spec.Request.Method = "GET"
			}
			_, err := Compile(env, spec)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestErrorDetailIsNeverMarkup: the fallback the docs once recommended
// (`… : text`) on an HTML or XML error page gives no detail, so the
// message never carries markup, a stack trace or an internal host; a
// field of a JSON answer, or a plain-text answer, still does.
func TestErrorDetailIsNeverMarkup(t *testing.T) {
	const page = "<html><body><h1>500</h1><pre>java.lang.NullPointerException at db-7.internal:5432</pre></body></html>"
	r, err := compileRules(newRuleEnv(t), RulesSpec{ErrorDetail: `has(body.message) ? body.message : text`})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, contentType, body, want string
	}{
		{"an HTML page", "text/html; charset=utf-8", page, ""},
		{"an XHTML page", "application/xhtml+xml", page, ""},
		{"an XML fault", "application/soap+xml", `<?xml version="1.0"?><Fault><faultstring>db-7.internal down</faultstring></Fault>`, ""},
		{"markup sent as plain text", "text/plain", "\n  " + page, ""},
		{"markup with no type", "", page, ""},
		{"a JSON answer's field", "application/json", `{"message":"invalid To address"}`, "invalid To address"},
		{"a plain-text answer", "text/plain", "ERR: invalid number", "ERR: invalid number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := RuleInput{Status: 500, Header: map[string][]string{"Content-Type": {tt.contentType}}, Text: []byte(tt.body)}
			if b, err := ParseBody([]byte(tt.body)); err == nil {
				in.Body = b
				defer b.Release()
			}
			got, err := r.ErrorDetail(&in)
			if err != nil || got != tt.want {
				t.Fatalf("detail %q, %v; want %q", got, err, tt.want)
			}
			for _, lang := range languages() {
				c, _ := NewCatalog(lang)
				o := ClassifyHTTP(500, false, false, 0)
				o.ErrorDetail = got
				msg := c.Compose(&Said{Tool: "search", Contract: &Contract{Name: "search"}, Attempts: 1, Sent: true}, &o).Text
				if strings.ContainsAny(msg, "<>") || strings.Contains(msg, "internal") {
					t.Errorf("%s: markup in the message: %q", lang, msg)
				}
			}
		})
	}
}

// TestShrunkDataKeepsIdentifiersWhole: at the smallest observation bound,
// a Twilio-like answer keeps its message SID whole (it was cut to
// "SM1f0e8a4c2b3d4e5f…", which identifies nothing) and shortens the text
// instead, in both languages.
func TestShrunkDataKeepsIdentifiersWhole(t *testing.T) {
	const sid = "SM1f0e8a4c2b3d4e5f60718293a4b5c6d7"
	data := []byte(`{"sid":"` + sid + `","status":"queued","to":"+15558675310","body":"Your order 4711 has shipped and will arrive on Tuesday between 9am and 5pm. Reply STOP to opt out. Track it at any time on the order page, where you can also change the delivery address."}`)
	for _, lang := range languages() {
		t.Run(lang, func(t *testing.T) {
			c, _ := NewCatalog(lang)
			o := Answered(201)
			m := c.Compose(&Said{Tool: "send_sms", Contract: &Contract{Name: "send_sms", SideEffect: true}, Sent: true}, &o)
			got := EnvelopeObservation(StatusOK, m, data, ObservationOptions{MaxChars: MinObservationMaxChars, Lang: lang})
			for _, want := range []string{`"sid":"` + sid + `"`, `"status":"queued"`, `"to":"+15558675310"`, `"body":"`} {
				if !strings.Contains(got, want) {
					t.Errorf("observation lacks %s:\n%s", want, got)
				}
			}
			if !strings.Contains(got, "…") {
				t.Errorf("nothing was shortened: %s", got)
			}
		})
	}
}
