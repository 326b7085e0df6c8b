package contracts

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

func TestCatalogMessages(t *testing.T) {
	for _, lang := range languages() {
		c, err := NewCatalog(lang)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []Outcome{
			{Status: StatusUpstream, Reason: ReasonServerError, HTTPCode: 500, Effect: SideEffectUnknown},
			{Status: StatusUpstream, Reason: ReasonServerError, HTTPCode: 502, Effect: SideEffectUnknown, Retryable: true},
			{Status: StatusUpstream, Reason: ReasonCircuitOpen, RetryAfter: 90 * time.Second, Retryable: true},
			{Status: StatusForbidden, Reason: ReasonBudget, RetryAfter: 3 * time.Hour},
			ArgOutcome(&ArgError{Pointer: "/q", Problem: ProblemRequired}),
			{Status: StatusOK, Reason: ReasonOK, Effect: SideEffectDone},
		} {
			for _, se := range []bool{false, true} {
				msg := c.message("send", se, &o)
				if msg == "" || strings.ContainsAny(msg, "{}\n") {
					t.Errorf("%s %s se=%v: %q", lang, o.Reason, se, msg)
				}
			}
		}
	}
	c, _ := NewCatalog("en")
	o := Outcome{Status: StatusUpstream, Reason: ReasonServerError, HTTPCode: 500, Effect: SideEffectUnknown}
	if msg := c.message("send", true, &o); !strings.Contains(msg, "may or may not") || !strings.Contains(msg, "new idempotency key") {
		t.Errorf("unknown outcome message = %q", msg)
	}
	o.Retryable = true
	if msg := c.message("send", true, &o); !strings.Contains(msg, "same idempotency key") {
		t.Errorf("dedupe message = %q", msg)
	}
	if _, err := NewCatalog("fr"); err == nil {
		t.Error("unknown catalogue accepted")
	}
}

// producedRow is one message the core can produce: an outcome of a
// read-only or side-effecting tool, with what else shapes its message.
type producedRow struct {
	o          Outcome
	sideEffect bool
	dedupes    bool // the backend dedupes on the forwarded key
	attempts   int
	replay     *Envelope // the stored envelope, for a replayed call
}

// producedOutcome is an outcome the core can produce, for a read-only or
// a side-effecting tool, at a backend that dedupes on the forwarded key
// or not.
type producedOutcome struct {
	o          Outcome
	sideEffect bool
	dedupes    bool
}

// sentOf is whether the call of a produced outcome sent its request, as
// the proxy's Call.sent says: an answer came, or the request went out
// whole (an effect other than none).
func sentOf(o *Outcome) bool { return o.HTTPCode != 0 || o.Effect != SideEffectNone }

// waitClass names an outcome's wait for telling rows apart: none, one a
// retry says, or one past longWait.
func waitClass(d time.Duration) string {
	switch {
	case d > longWait:
		return "long"
	case d > 0:
		return "short"
	}
	return "none"
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
		405: true, 408: true, 409: true, 429: true, 500: true, 501: true, 502: true, 503: true, 504: true}
	var out []producedOutcome
	yes, no := true, false
	effects := []*SideEffect{nil, new(SideEffectNone), new(SideEffectDone), new(SideEffectUnknown)}
	for _, se := range []bool{false, true} {
		dedupes := false
		add := func(o Outcome) { out = append(out, producedOutcome{o, se, dedupes}) }
		for _, r := range []struct {
			reason Reason
			wait   time.Duration // what the stage sets
		}{
			{ReasonUnknownTool, 0},
			{ReasonDenied, 0},
			{ReasonBudget, time.Hour},
			{ReasonBudget, 20 * time.Second},
			{ReasonRateLimited, 2 * time.Second},
			{ReasonTooLarge, 0},
			{ReasonKeyMissing, 0},
			{ReasonKeyMalformed, 0},
			{ReasonKeyConflict, 0},
			{ReasonKeyMismatch, 0},
			{ReasonCircuitOpen, 30 * time.Second},
			{ReasonCircuitOpen, 10 * time.Minute},
			{ReasonBulkhead, 0},
			{ReasonStoreUnavailable, 0},
		} {
			o := Reject(r.reason)
			if r.wait > 0 {
				o.RetryAfter = r.wait
			}
			add(o)
		}
		for _, err := range []error{
			&ArgError{Pointer: "/q", Problem: ProblemRequired},
			newArgErrors(&ArgError{Pointer: "/q", Problem: ProblemRequired}, &ArgError{Pointer: "/limit", Problem: ProblemMaximum, Max: "20", Got: "50"}),
			&ArgError{Problem: ProblemDuplicateKey, Got: `"q"`},
			&ArgError{Problem: ProblemIncomplete},
		} {
			add(ArgOutcome(err))
		}
		if se {
			add(Reject(ReasonInFlightTimeout))
			add(Reject(ReasonOutcomeLost))
		}
		for _, d := range []bool{false, true} {
			dedupes = d
			for _, f := range []Failure{FailConnect, FailReset, FailDeadline, FailTLS, FailCanceled} {
				for _, written := range []bool{false, true} {
					add(ClassifyTransport(f, written, se, dedupes))
				}
			}
			for code := 100; code < 600; code++ {
				var answers []Outcome
				if code >= 200 && code < 300 {
					empty := Answered(code)
					empty.Empty()
					answers = []Outcome{Answered(code), empty, BadResponse(code), Unreadable(code, Outcome{}), AnswerCut(code, se),
						AnswerAbandoned(code, se, dedupes)}
				} else {
					for _, wait := range []time.Duration{0, 7 * time.Second, time.Hour} {
						table := ClassifyHTTP(code, se, dedupes, wait)
						answers = append(answers, table, Unreadable(code, table))
						if se && table.Effect == SideEffectNone {
							// The answer to a resend: the first write may have acted.
							table.Effect, table.Retryable = SideEffectUnknown, dedupes
							answers = append(answers, table, Unreadable(code, table))
						}
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
							if code == 429 {
								add(ApplyRule(m, code, se, dedupes, time.Hour))
							}
						}
					}
				}
			}
		}
	}
	return out
}

// producedRows is every produced outcome once per attempt count that
// matters to its message, and, for a side-effecting tool, the replay of
// every envelope the core stores (DESIGN section 8: everything after the
// backend was contacted but a retryable refusal).
func producedRows(c *Catalog) []producedRow {
	seen := map[string]bool{}
	var rows []producedRow
	for _, po := range producedOutcomes() {
		o := po.o
		key := fmt.Sprintf("%s %s %s %v %s %v %v %d", o.Reason, o.Status, o.Effect, o.Retryable, waitClass(o.RetryAfter), po.sideEffect, po.dedupes, o.HTTPCode)
		if seen[key] {
			continue
		}
		seen[key] = true
		for _, attempts := range []int{1, 3} {
			rows = append(rows, producedRow{o: o, sideEffect: po.sideEffect, dedupes: po.dedupes, attempts: attempts})
		}
		stored := po.sideEffect && KeyKept(o.Effect, o.Retryable, sentOf(&o))
		if !stored || o.Reason == ReasonOutcomeLost || o.Reason == ReasonInFlightTimeout {
			continue
		}
		said := &Said{Tool: "send", Contract: &Contract{Name: "send", SideEffect: true, Timeout: 2 * time.Second}, Attempts: 1, Sent: sentOf(&o)}
		env := &Envelope{Status: o.Status, Message: c.Compose(said, &o).Text, Retryable: o.Retryable, SideEffect: o.Effect,
			RetryAfterMS: o.RetryAfterMS(), Data: o.Data}
		replay := Outcome{Status: env.Status, Reason: ReasonReplayed, Retryable: env.Retryable, Effect: env.SideEffect,
			RetryAfter: time.Duration(env.RetryAfterMS) * time.Millisecond, Data: env.Data}
		rows = append(rows, producedRow{o: replay, sideEffect: true, dedupes: po.dedupes, replay: env})
	}
	return rows
}

// messagePhrases are the words that carry each promise, per language.
type messagePhrases struct {
	retrySame     []string // an identical retry
	noRetry       []string // retrying cannot help
	notSent       []string // the request never reached the backend
	otherArgs     []string // try a different call
	performed     []string // the action happened
	doNotRepeat   []string
	mayHave       []string // the action may have happened
	howToCheck    []string // find out whether it happened
	newKey        []string // repeat with a new idempotency key
	sameKey       []string // retry with the same key
	replayed      []string // this call was answered by a stored result
	stop          []string // when to stop and tell the user
	later         []string // a wait without a time
	notRetryable  []string // any words that say the identical call will not do
	tellNow       []string // a long wait: tell the user now if the task cannot wait
	attemptsTried string   // a format with the attempt count
}

var phrasesByLang = map[string]messagePhrases{
	"en": {
		retrySame:   []string{"retry the same call", "retry with the same"},
		noRetry:     []string{"retrying will not help"},
		notSent:     []string{"nothing was sent", "before the call was sent", "before it reached the service"},
		otherArgs:   []string{"different arguments", "change the arguments", "change them", "fix it", "fix them"},
		performed:   []string{"was performed", "performed the action"},
		doNotRepeat: []string{"do not repeat it"},
		mayHave:     []string{"may or may not"},
		howToCheck:  []string{"find out whether"},
		newKey:      []string{"new idempotency key"},
		sameKey:     []string{"same idempotency key"},
		replayed:    []string{"earlier call with this idempotency key"},
		stop:        []string{"tell the user"},
		later:       []string{"later"},
		notRetryable: []string{"will not help", "fix", "change", "check", "new key", "new idempotency key", "send ",
			"do not call", "call one of", "add an idempotency_key", "do not repeat", "different arguments", "use another tool"},
		tellNow:       []string{"tell the user now"},
		attemptsTried: "already tried %d times",
	},
	"zh": {
		retrySame:   []string{"原样重试", "相同的幂等键重试", "相同的幂等键再重试"},
		noRetry:     []string{"重试无用"},
		notSent:     []string{"请求未发送", "请求发送前", "送达服务前"},
		otherArgs:   []string{"换用其他参数", "修改参数", "修正"},
		performed:   []string{"操作已执行", "已成功执行过", "已执行该操作"},
		doNotRepeat: []string{"请勿重复执行"},
		mayHave:     []string{"可能已执行也可能未执行"},
		howToCheck:  []string{"请先确认"},
		newKey:      []string{"新的幂等键"},
		sameKey:     []string{"相同的幂等键"},
		replayed:    []string{"幂等命中"},
		stop:        []string{"告知用户"},
		later:       []string{"稍后"},
		notRetryable: []string{"重试无用", "修正", "修改", "核对", "新的幂等键", "请发送", "请只发送", "请勿调用", "请改用",
			"可用的工具", "已列出的工具", "请添加", "请勿重复", "确认", "换用其他参数", "减少数据量"},
		tellNow:       []string{"请立即告知用户"},
		attemptsTried: "已尝试 %d 次",
	},
}

// TestMessagesAgreeWithTheEnvelope walks every row the core produces and
// checks that its message, in both languages, says what the envelope says,
// with and without the tool's templates:
//
//   - not retryable: never "retry the same call"; in words that the same
//     call will not do (a model reading only the text must know);
//   - retryable: never "retrying will not help"; a real wait when
//     retry_after_ms carries one, no "later", the attempts toolgate made,
//     and when to stop and tell the user;
//   - the request reached the backend: never "nothing was sent";
//   - done or unknown: never "try other arguments"; done says do not
//     repeat; unknown and not retryable says how to check and that a
//     repeat needs a new idempotency key; unknown and retryable names the
//     same key;
//   - the retry rule: on a side-effecting tool, done is never retryable,
//     and unknown is retryable only at a backend that dedupes on the
//     forwarded key (otherwise the retry replays the same unknown record,
//     and the model loops);
//   - a refusal of a side-effecting call that sent its request keeps the
//     key: it says another call needs a new idempotency key, and only such
//     messages (and unknown outcomes) say so;
//   - a wait past longWait says to tell the user now if the task cannot
//     wait; a shorter one does not;
//   - replayed: says so.
func TestMessagesAgreeWithTheEnvelope(t *testing.T) {
	for _, name := range languages() {
		c, err := NewCatalog(name)
		if err != nil {
			t.Fatal(err)
		}
		rows := producedRows(c)
		p := phrasesByLang[name]
		tplText := map[string]string{"en": "Template words.", "zh": "模板文字。"}[name]
		specs := map[string]string{}
		for _, st := range Statuses() {
			specs[string(st)] = tplText
		}
		tpls, err := compileTemplates(nil, specs)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rows {
			for _, withTemplates := range []bool{false, true} {
				ct := &Contract{Name: "send", SideEffect: r.sideEffect, Timeout: 2 * time.Second}
				if withTemplates {
					ct.Templates = tpls
				}
				o := r.o
				m := c.Compose(&Said{Tool: "send", Contract: ct, Attempts: r.attempts, Replay: r.replay, Sent: sentOf(&o)}, &o)
				n++
				for _, w := range checkMessage(c, p, r, m, withTemplates && strings.HasPrefix(m.Text, strings.TrimSuffix(tplText, ".")), tplText) {
					t.Errorf("%s: %s %s/%s retryable=%v wait=%v se=%v dedupes=%v attempts=%d replay=%v templates=%v: %s:\n%q",
						name, o.Reason, o.Status, o.Effect, o.Retryable, o.RetryAfter, r.sideEffect, r.dedupes, r.attempts, r.replay != nil, withTemplates, w, m.Text)
				}
			}
		}
		t.Logf("%s: %d messages", name, n)
	}
}

// checkMessage returns what is wrong with the message of a row.
func checkMessage(c *Catalog, p messagePhrases, r producedRow, m Message, templated bool, tplText string) []string {
	o := &r.o
	msg := m.Text
	effect := SideEffectNone // what the envelope says
	if r.sideEffect {
		effect = o.Effect
	}
	has := func(list []string) string {
		for _, s := range list {
			if strings.Contains(msg, s) {
				return s
			}
		}
		return ""
	}
	var wrong []string
	check := func(bad bool, format string, args ...any) {
		if bad {
			wrong = append(wrong, fmt.Sprintf(format, args...))
		}
	}
	check(msg == "" || strings.ContainsAny(msg, "{}\n"), "empty or unexpanded")
	check(utf8.RuneCountInString(msg) > MaxMessageChars, "longer than %d characters", MaxMessageChars)
	check(m.ActionAt < 0 || m.ActionAt > len(msg), "action offset %d outside the message", m.ActionAt)
	if s := has(p.retrySame); s != "" {
		check(!o.Retryable, "not retryable, yet says %q", s)
	}
	if s := has(p.noRetry); s != "" {
		check(o.Retryable, "retryable, yet says %q", s)
	}
	if s := has(p.notSent); s != "" {
		check(o.Effect != SideEffectNone || r.replay != nil, "the request reached the backend, yet says %q", s)
	}
	if s := has(p.otherArgs); s != "" {
		check(effect != SideEffectNone, "side effect %s, yet says %q", effect, s)
	}
	if s := has(p.performed); s != "" {
		check(effect != SideEffectDone, "side effect %s, yet says %q", effect, s)
	}
	if s := has(p.mayHave); s != "" {
		check(effect != SideEffectUnknown, "side effect %s, yet says %q", effect, s)
	}
	switch {
	case effect == SideEffectDone:
		check(has(p.doNotRepeat) == "", "the action was performed, yet the message does not say not to repeat it")
	case effect == SideEffectUnknown && !o.Retryable:
		check(has(p.mayHave) == "", "side effect unknown, yet the message does not say it may have acted")
		check(has(p.howToCheck) == "", "side effect unknown and not retryable, yet the message does not say how to check")
		check(has(p.newKey) == "", "side effect unknown and not retryable, yet the message does not say a repeat needs a new key")
	case effect == SideEffectUnknown:
		check(has(p.sameKey) == "", "side effect unknown and retryable, yet the message does not name the same key")
	}
	if r.replay != nil || o.Reason == ReasonOutcomeLost {
		check(has(p.replayed) == "" && !strings.Contains(msg, c.entries["replay"]), "replayed, yet the message does not say so")
	}
	// The retry rule (the loop case): the same key must be able to act
	// again, or the retry is only this record once more. Waiting on a call
	// still in flight fetches its result, which is no resend.
	if r.sideEffect && o.Retryable && o.Reason != ReasonInFlightTimeout {
		check(effect == SideEffectDone, "the action was performed, yet the envelope says retryable")
		check(effect == SideEffectUnknown && !r.dedupes, "unknown and retryable at a backend that does not dedupe: the retry with the same key would only replay this unknown record")
	}
	// A key that keeps a refusal: another call needs a new one.
	spent := r.sideEffect && r.replay == nil && sentOf(o) && effect == SideEffectNone && !o.Retryable && o.Status != StatusOK
	if spent {
		check(has(p.newKey) == "", "the key keeps this refusal, yet the message does not say another call needs a new idempotency key")
	}
	if s := has(p.newKey); s != "" && r.replay == nil && o.Reason != ReasonKeyMismatch {
		check(!spent && !(effect == SideEffectUnknown && !o.Retryable), "the key was not spent, yet the message says %q", s)
	}
	if o.Retryable && effect != SideEffectDone && r.replay == nil && o.Reason != ReasonInFlightTimeout {
		check(has(p.stop) == "", "retryable, yet the message does not say when to stop")
		if o.RetryAfter > 0 {
			check(!strings.Contains(msg, c.wait(o.RetryAfter)), "retry_after_ms is set, yet the message does not state the wait %q", c.wait(o.RetryAfter))
		} else {
			check(regexp.MustCompile(`in \d+ second|\d+ 秒后`).MatchString(msg), "no retry_after_ms, yet the message states a wait")
		}
		if r.attempts >= 2 {
			check(!strings.Contains(msg, fmt.Sprintf(p.attemptsTried, r.attempts)), "toolgate made %d attempts, yet the message does not say so", r.attempts)
		}
		if o.RetryAfter > longWait {
			check(has(p.tellNow) == "", "a wait of %v, yet the message does not say to tell the user now if the task cannot wait", o.RetryAfter)
		}
	}
	if s := has(p.tellNow); s != "" {
		check(!o.Retryable || o.RetryAfter <= longWait, "says %q without a long wait", s)
	}
	if s := has(p.later); s != "" {
		check(true, "says %q without a time", s)
	}
	if !o.Retryable && !o.Status.Success() && !templated {
		check(has(p.notRetryable) == "", "not retryable, yet the message does not say the identical call will not do")
	}
	// A template speaks only for what its status normally means.
	if templated {
		row, _ := rowOf(o.Reason)
		check(row.Gateway, "a status template spoke for the gateway reason %s", o.Reason)
		check(!o.Status.Success() && o.Retryable != statusRetryable(o.Status), "a status template spoke for an outcome its status does not usually mean")
		check(effect == SideEffectUnknown, "a status template spoke for an unknown outcome")
		check(effect == SideEffectDone && o.Status != StatusOK, "a status template spoke for a performed action its status %s cannot describe", o.Status)
	}
	return wrong
}

// TestTheShippedTemplatesDoNotSpeakForGatewayReasons: with the example
// policy's Chinese templates, a spent budget keeps its reset time, the
// caller's own rate limit keeps its cause and wait, and outcomes that may
// not be retried are never told to retry (the review's false rows).
func TestTheShippedTemplatesDoNotSpeakForGatewayReasons(t *testing.T) {
	raw, err := os.ReadFile("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tools map[string]struct {
			Messages map[string]string `yaml:"messages"`
		} `yaml:"tools"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	tpls, err := compileTemplates(nil, doc.Tools["search_articles"].Messages)
	if err != nil || len(tpls) == 0 {
		t.Fatalf("templates: %v (%d)", err, len(tpls))
	}
	ct := &Contract{Name: "search_articles", Timeout: 500 * time.Millisecond, Templates: tpls}
	zh, _ := NewCatalog("zh")
	budget := Reject(ReasonBudget)
	budget.RetryAfter = 52 * time.Minute
	rate := Reject(ReasonRateLimited)
	rate.RetryAfter = 20 * time.Second
	circuit := Reject(ReasonCircuitOpen)
	circuit.RetryAfter = 30 * time.Second
	tests := []struct {
		name    string
		o       Outcome
		want    []string
		notWant []string
	}{
		{"a spent budget says when it resets", budget, []string{"52 分钟后重置", "请勿调用"}, []string{"重试无用", "数据源"}},
		{"the caller's rate limit names its cause and wait", rate, []string{"当前身份调用过于频繁", "20 秒后原样重试"}, []string{"搜索服务"}},
		{"an open circuit keeps its wait", circuit, []string{"30 秒后原样重试"}, []string{"搜索服务"}},
		{"an unreadable answer is not retried", BadResponse(200), []string{"重试无用"}, []string{"原样重试", "搜索服务"}},
		{"a backend 501 is not retried", ClassifyHTTP(501, false, false, 0), []string{"重试无用"}, []string{"原样重试"}},
		{"a backend 302 is not retried", ClassifyHTTP(302, false, false, 0), []string{"重试无用"}, []string{"原样重试"}},
		{"an untrusted certificate is not retried", ClassifyTransport(FailTLS, false, false, false), []string{"重试无用"}, []string{"原样重试", "搜索服务"}},
		{"a backend 500 uses the template and a real next step", ClassifyHTTP(500, false, false, 0), []string{"搜索服务暂时出错", "可原样重试，若仍失败请告知用户"}, []string{"稍后"}},
		{"a backend 429 uses the template and keeps its wait", ClassifyHTTP(429, false, false, 7*time.Second), []string{"搜索服务暂时出错", "7 秒后原样重试"}, nil},
		{"a timeout uses the template", ClassifyTransport(FailDeadline, true, false, false), []string{"查询超时", "原样重试"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			msg := zh.Compose(&Said{Tool: ct.Name, Contract: ct, Attempts: 1}, &o).Text
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q: %s", w, msg)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(msg, w) {
					t.Errorf("message says %q: %s", w, msg)
				}
			}
		})
	}
}

// TestTemplatesNamedAfterAReason: a policy that names a reason speaks for
// it, gateway reason or not, and the fields still choose what to do.
func TestTemplatesNamedAfterAReason(t *testing.T) {
	tpls, err := compileTemplates(nil, map[string]string{"budget": "The research budget is used up.", "upstream": "Search is down."})
	if err != nil {
		t.Fatal(err)
	}
	ct := &Contract{Name: "search", Templates: tpls}
	en, _ := NewCatalog("en")
	budget := Reject(ReasonBudget)
	budget.RetryAfter = 2 * time.Hour
	if msg := en.Compose(&Said{Contract: ct}, &budget).Text; msg != "The research budget is used up; do not call this tool before then, and tell the user if the task cannot wait." {
		t.Errorf("budget: %q", msg)
	}
	rate := Reject(ReasonRateLimited)
	rate.RetryAfter = time.Second
	if msg := en.Compose(&Said{Contract: ct}, &rate).Text; strings.Contains(msg, "Search is down") {
		t.Errorf("the upstream template spoke for the rate limit: %q", msg)
	}
	if _, err := compileTemplates(nil, map[string]string{"budgte": "x"}); err == nil || !strings.Contains(err.Error(), `"budgte" is not a status or a reason`) {
		t.Errorf("a misspelt reason: %v", err)
	}
	for _, name := range []string{"rule", "replayed", "unknown_tool"} {
		if _, err := compileTemplates(nil, map[string]string{name: "x"}); err == nil {
			t.Errorf("a template named %s was accepted", name)
		}
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

// zhAllowed are the ASCII words a Chinese message may hold beside argument
// names and values: protocol names, units and literal values.
var zhAllowed = regexp.MustCompile(`application/json|Content-Type|HTTP|JSON|ASCII|UTF-8|Idempotency-Key|idempotency_key|UUID|null|true|false|\d+(\.\d+)?e-?\d+`)

// TestChineseMessagesHaveNoEnglish: outside argument names, values and
// units, no Chinese message holds an ASCII letter — argument errors of every
// kind included.
func TestChineseMessagesHaveNoEnglish(t *testing.T) {
	zh, _ := NewCatalog("zh")
	s := mustSchema(t, `{"type":"object","required":["q"],"additionalProperties":false,"properties":{
		"q":{"type":"string","minLength":1,"maxLength":20},"limit":{"type":["integer","null"],"minimum":1,"exclusiveMaximum":20},
		"mode":{"enum":["fast","slow"]},"one":{"const":"x"},"id":{"type":"string","pattern":"^[a-z]+$"},
		"tags":{"type":"array","minItems":1,"maxItems":2,"uniqueItems":true},"step":{"type":"number","multipleOf":5},
		"flag":{"type":"boolean"},"obj":{"type":"object"}}}`)
	argSets := []string{
		`{"q":"","limit":"5","lim":1,"mode":"turbo","one":"y","id":"Alice","tags":[],"step":7,"flag":"yes","obj":[1]}`,
		`{"q":"` + strings.Repeat("x", 30) + `","limit":25,"tags":["a","a","b"]}`,
		`{"limit":1e999}`,
	}
	var outcomes []Outcome
	for _, args := range argSets {
		outcomes = append(outcomes, ArgOutcome(s.Validate(decodeArgs(t, args))))
	}
	for _, body := range []string{`{"a":1,"a":2}`, `[1]`, `{"a":`, "\xff", strings.Repeat(`{"a":`, 80) + "1" + strings.Repeat("}", 80)} {
		_, err := DecodeArgs([]byte(body), 64)
		outcomes = append(outcomes, ArgOutcome(err))
	}
	outcomes = append(outcomes, ArgOutcome(&ArgError{Problem: ProblemMediaType, Got: `"text/plain"`}), ArgOutcome(&ArgError{Problem: ProblemMediaType, Got: `""`}))
	for _, p := range []Problem{ProblemIncomplete, ProblemQuery, ProblemScalar, ProblemSegment, ProblemRepeated, ProblemInvalid} {
		outcomes = append(outcomes, ArgOutcome(&ArgError{Pointer: "/q", Problem: p, Got: "3"}))
	}
	// A legacy route's body (legacy_body.go).
	outcomes = append(outcomes,
		ArgOutcome(&ArgError{Problem: ProblemMediaType, Got: `"text/plain"`, Values: []string{`"application/json"`, `"multipart/form-data"`}}),
		ArgOutcome(&ArgError{Problem: ProblemFormFields, Max: "1000"}), ArgOutcome(&ArgError{Problem: ProblemFormBoundary}),
		ArgOutcome(&ArgError{Problem: ProblemFormSyntax, Got: `"multipart/form-data"`}), ArgOutcome(&ArgError{Problem: ProblemPartHeader, Max: "8192"}),
		ArgOutcome(&ArgError{Pointer: "/q", Problem: ProblemNotText, Got: `"a"`}))
	// Argument names and values of the cases above, and the media types
	// and header words a legacy body's problems name.
	names := regexp.MustCompile(`text/plain|application/json|multipart/form-data|Content-Type|\bboundary\b|\b(q|limit|lim|mode|one|id|tags|step|flag|obj|fast|slow|turbo|x+|y|Alice|yes|a|b|send|search)\b|\^\[a-z\]\+\$`)
	rows := producedRows(zh)
	for _, r := range rows {
		outcomes = append(outcomes, r.o)
	}
	for i, o := range outcomes {
		var replay *Envelope
		if i >= len(outcomes)-len(rows) {
			replay = rows[i-(len(outcomes)-len(rows))].replay
		}
		ct := &Contract{Name: "send", SideEffect: true, Timeout: 1500 * time.Millisecond}
		msg := zh.Compose(&Said{Tool: "send", Contract: ct, Attempts: 2, Replay: replay, Tools: []string{"search"}, Sent: sentOf(&o)}, &o).Text
		rest := names.ReplaceAllString(zhAllowed.ReplaceAllString(msg, ""), "")
		if i := strings.IndexFunc(rest, func(r rune) bool { return r < utf8.RuneSelf && (r|0x20) >= 'a' && (r|0x20) <= 'z' }); i >= 0 {
			t.Errorf("%s: English in a Chinese message at %q: %s", o.Reason, rest[i:min(len(rest), i+20)], msg)
		}
	}
}

// TestMinObservationMaxCharsKeepsEveryAction: at the smallest bound a
// policy may set, the whole action clause of every message survives, with
// the tag and the truncation marker, however long what happened is.
func TestMinObservationMaxCharsKeepsEveryAction(t *testing.T) {
	long := newArgErrors()
	for i := range 30 {
		long.List = append(long.List, &ArgError{Pointer: "/argument_with_a_long_name_" + strconv.Itoa(i), Problem: ProblemRequired})
	}
	long.Total = len(long.List)
	for _, lang := range languages() {
		c, _ := NewCatalog(lang)
		for _, r := range producedRows(c) {
			o := r.o
			if o.Status == StatusBadArgs && o.Reason == ReasonSchema {
				o.Args = long
			}
			tools := make([]string, 25)
			for i := range tools {
				tools[i] = strings.Repeat("t", 60) + strconv.Itoa(i)
			}
			ct := &Contract{Name: "send", SideEffect: r.sideEffect, Timeout: time.Second}
			m := c.Compose(&Said{Tool: "send", Contract: ct, Attempts: 12, Replay: r.replay, Tools: tools, Sent: sentOf(&o)}, &o)
			action := m.Text[m.ActionAt:]
			for _, data := range []string{"", `{"items":["` + strings.Repeat("x", 900) + `"]}`} {
				got := EnvelopeObservation(StatusNotFound, m, []byte(data), ObservationOptions{MaxChars: MinObservationMaxChars, Lang: lang})
				if n := utf8.RuneCountInString(got); n > MinObservationMaxChars {
					t.Fatalf("%d characters: %q", n, got)
				}
				if !strings.HasPrefix(got, StatusNotFound.Tag()+" ") || !strings.Contains(got, action) {
					t.Errorf("%s %s: the action %q does not survive: %q", lang, o.Reason, action, got)
				}
			}
		}
	}
}

// TestReasonTable: every reason has one row, words in every catalogue, and
// a producer; the HTTP column and the waits read as DESIGN section 7 says.
func TestReasonTable(t *testing.T) {
	declared := declaredReasons(t)
	rows := reasonTable[:]
	seen := map[Reason]bool{}
	for _, r := range rows {
		if seen[r.Reason] {
			t.Errorf("%s has two rows", r.Reason)
		}
		seen[r.Reason] = true
		if !slices.Contains(declared, r.Reason) {
			t.Errorf("row %s is not a declared reason", r.Reason)
		}
	}
	for _, r := range declared {
		if !seen[r] {
			t.Errorf("reason %s has no row", r)
		}
	}
	produced := producedReasons(t)
	for _, lang := range languages() {
		c, _ := NewCatalog(lang)
		for _, r := range rows {
			var keys []string
			switch r.Reason {
			case ReasonRule:
				for _, st := range Statuses() {
					keys = append(keys, "rule:"+string(st))
				}
			case ReasonReplayed:
				keys = []string{"replay", "replay:done", "replay:ok:done", "replay:unknown"}
			default:
				keys = []string{string(r.Reason)}
			}
			for _, k := range keys {
				if c.entries[k] == "" {
					t.Errorf("%s: reason %s has no words (%s)", lang, r.Reason, k)
				}
			}
		}
	}
	for _, r := range rows {
		if !produced[r.Reason] {
			t.Errorf("nothing produces reason %s", r.Reason)
		}
	}
	for _, tt := range []struct {
		reason     Reason
		status     Status
		retryLater bool
		code       int
	}{
		{ReasonOK, StatusOK, false, 200},
		{ReasonSchema, StatusBadArgs, false, 400},
		{ReasonTooLarge, StatusBadArgs, false, 413},
		{ReasonDenied, StatusForbidden, false, 403},
		{ReasonUnknownTool, StatusNotFound, false, 404},
		{ReasonGatewayTimeout, StatusTimeout, false, 504},
		{ReasonRateLimited, StatusUpstream, true, 503},
		{ReasonServerError, StatusUpstream, false, 502},
		{ReasonRule, StatusUpstream, true, 503},
		{ReasonReplayed, StatusNotFound, false, 404},
	} {
		// Retry-After is no longer the status's: it follows the
		// envelope's retry_after_ms (proxy TestRetryAfterIsTheEnvelopesWait).
		if code := MappedHTTP(tt.reason, tt.status, tt.retryLater); code != tt.code {
			t.Errorf("%s %s retryLater=%v: HTTP %d, want %d", tt.reason, tt.status, tt.retryLater, code, tt.code)
		}
	}
	for ms, want := range map[int64]string{0: "1", 1: "1", 1000: "1", 1001: "2", 30000: "30"} {
		if got := RetryAfterHeader(ms); got != want {
			t.Errorf("RetryAfterHeader(%d) = %s, want %s", ms, got, want)
		}
	}
	// DESIGN section 7: 1000 for connect failures and a full bulkhead.
	if o := ClassifyTransport(FailConnect, false, true, false); o.RetryAfterMS() != 1000 {
		t.Errorf("connect: retry_after_ms %d", o.RetryAfterMS())
	}
	if o := Reject(ReasonBulkhead); o.RetryAfterMS() != 1000 || !o.Retryable || !o.RetryLater() {
		t.Errorf("bulkhead: %+v", o)
	}
	budget := Reject(ReasonBudget)
	budget.RetryAfter = time.Hour
	if budget.Retryable || budget.RetryAfterMS() != 3600000 {
		t.Errorf("budget: retryable %v retry_after_ms %d", budget.Retryable, budget.RetryAfterMS())
	}
}

func BenchmarkCompose(b *testing.B) {
	en, _ := NewCatalog("en")
	ro := &Said{Tool: "search", Contract: &Contract{Name: "search", Timeout: time.Second}, Attempts: 1}
	se := &Said{Tool: "send", Contract: &Contract{Name: "send", SideEffect: true, Timeout: time.Second}, Attempts: 1}
	ok := Answered(200)
	b.Run("a read-only success", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			o := ok
			en.Compose(ro, &o)
		}
	})
	b.Run("a side effect performed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			o := ok
			en.Compose(se, &o)
		}
	})
	b.Run("a retryable failure", func(b *testing.B) {
		b.ReportAllocs()
		fail := ClassifyHTTP(503, false, false, 7*time.Second)
		for b.Loop() {
			o := fail
			en.Compose(ro, &o)
		}
	})
}
