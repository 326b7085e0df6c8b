package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxMessageChars bounds an envelope's message, in Unicode code points, as
// observation_max_chars bounds the observation: a template can render a
// whole backend answer into it. A longer message is cut at a character
// boundary and ends with "…".
const MaxMessageChars = 500

// maxTemplateBytes is how much a message template may write before it is
// stopped: far more than a message keeps (MaxMessageChars, after white
// space is collapsed), and a bound on the work a template does writing.
const maxTemplateBytes = 64 << 10

// boundMessage makes s valid UTF-8 and cuts it to MaxMessageChars.
func boundMessage(s string) string {
	if len(s) <= MaxMessageChars && utf8.ValidString(s) {
		return s // bytes bound code points
	}
	return shorten(strings.ToValidUTF8(s, "\ufffd"), MaxMessageChars)
}

// cappedBuffer collects a template's output up to a limit; the write that
// would pass it fails with errTemplateFull, which stops the template.
type cappedBuffer struct {
	b     []byte
	limit int
	full  bool
}

var errTemplateFull = errors.New("message template output too long")

func (w *cappedBuffer) Write(p []byte) (int, error) {
	if room := w.limit - len(w.b); len(p) > room {
		w.b = append(w.b, p[:room]...)
		w.full = true
		return room, errTemplateFull
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// finishRendered turns a template's raw output into the message: white
// space collapsed to one line, a cut (full) marked with "…", and the whole
// bounded to MaxMessageChars. A cut never splits a character.
func finishRendered(raw []byte, full bool) string {
	if full {
		raw = trimPartialRune(raw)
	}
	msg := oneLine(string(raw))
	if full && utf8.RuneCountInString(msg) < MaxMessageChars {
		msg += "…"
	}
	return boundMessage(msg)
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// Languages are the built-in message catalogues.
func Languages() []string { return []string{"en", "zh"} }

// Catalog renders the built-in one-sentence messages in one language.
//
// A message tells the model what happened and what to do. It never contains
// a backend host, port, URL or body: the only inputs are the tool name, the
// status, the HTTP code, a wait time, an argument error built from the
// caller's own arguments, and operator-written detail.
type Catalog struct {
	lang    string
	entries map[string]string
}

// NewCatalog returns the catalogue for lang ("en" or "zh").
func NewCatalog(lang string) (*Catalog, error) {
	switch lang {
	case "", "en":
		return &Catalog{lang: "en", entries: catalogEN()}, nil
	case "zh":
		return &Catalog{lang: "zh", entries: catalogZH()}, nil
	}
	return nil, fmt.Errorf("unknown message catalogue %q (want en or zh)", lang)
}

// Lang is the catalogue's language.
func (c *Catalog) Lang() string { return c.lang }

// Message renders the message for an outcome of tool, bounded to
// MaxMessageChars. sideEffect says the tool has side effects, which changes
// what the model is told to do after an outcome that did or may have acted.
func (c *Catalog) Message(tool string, sideEffect bool, o *Outcome) string {
	msg := c.entries[c.key(sideEffect, o)]
	if strings.IndexByte(msg, '{') >= 0 {
		msg = c.expand(msg, tool, o)
	}
	return boundMessage(msg)
}

// key picks the catalogue entry for an outcome, so that what the message
// says agrees with the envelope (TestMessagesAgreeWithTheEnvelope walks
// every outcome the core produces).
//
// An entry is keyed by the reason ("rule:<status>" for a matched error
// rule), with a suffix naming the kind of outcome it was written for; a
// key without a suffix was written for an outcome where nothing happened
// at the backend, or for a read-only tool, and with the reason's usual
// retryability. The suffixes:
//
//   - ":done", ":unknown", ":unknown_dedupe": a side-effecting tool's
//     action happened, may have happened, or may have happened at a
//     backend that dedupes on the key (so the retry is safe). When the
//     reason has no such entry, "status:<status>" and then "effect" with
//     the suffix say it in general words; a side-effecting outcome never
//     falls back to an entry written for "nothing happened".
//   - ":sent": a read-only tool's request reached the backend, for the
//     reasons whose plain entry says it did not.
//   - ":retry", ":final": a rule made the outcome retryable, or not,
//     against its status's usual retryability.
func (c *Catalog) key(sideEffect bool, o *Outcome) string {
	base := string(o.Reason)
	if o.Reason == ReasonRule {
		base = "rule:" + string(o.Status)
	}
	// Keys are concatenated where they are looked up, so that one only
	// allocates when it is the answer.
	if sideEffect {
		if suffix := effectSuffix(o); suffix != "" {
			if _, ok := c.entries[base+suffix]; ok {
				return base + suffix
			}
			if _, ok := c.entries["status:"+string(o.Status)+suffix]; ok {
				return "status:" + string(o.Status) + suffix
			}
			return "effect" + suffix
		}
	} else if o.Effect != SideEffectNone {
		if _, ok := c.entries[base+":sent"]; ok {
			return base + ":sent"
		}
	}
	if o.Reason == ReasonRule && o.Retryable != defaultRetryable(o.Status) {
		suffix := ":final"
		if o.Retryable {
			suffix = ":retry"
		}
		if _, ok := c.entries[base+suffix]; ok {
			return base + suffix
		}
	}
	if _, ok := c.entries[base]; ok {
		return base
	}
	return "status:" + string(o.Status)
}

// effectSuffix names the side effect of a side-effecting tool's outcome.
func effectSuffix(o *Outcome) string {
	switch {
	case o.Effect == SideEffectUnknown && o.Retryable:
		return ":unknown_dedupe"
	case o.Effect == SideEffectUnknown:
		return ":unknown"
	case o.Effect == SideEffectDone:
		return ":done"
	}
	return ""
}

func (c *Catalog) expand(msg, tool string, o *Outcome) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '{')
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		j := strings.IndexByte(msg[i:], '}')
		if j < 0 {
			b.WriteString(msg)
			return b.String()
		}
		b.WriteString(msg[:i])
		switch msg[i+1 : i+j] {
		case "tool":
			b.WriteString(tool)
		case "code":
			b.WriteString(strconv.Itoa(o.HTTPCode))
		case "retry":
			b.WriteString(c.wait(o.RetryAfter))
		case "arg":
			if o.Arg != nil {
				b.WriteString(o.Arg.Text(c.lang))
			} else if c.lang == "zh" {
				b.WriteString("参数不符合约定")
			} else {
				b.WriteString("the arguments do not match the contract")
			}
		case "detail":
			b.WriteString(o.Detail)
		default:
			b.WriteString(msg[i : i+j+1])
		}
		msg = msg[i+j+1:]
	}
}

// wait renders a wait time a model can act on ("in 30 seconds").
func (c *Catalog) wait(d time.Duration) string {
	secs := int64(math.Ceil(d.Seconds()))
	if secs < 1 {
		secs = 1
	}
	if c.lang == "zh" {
		if secs >= 120 {
			return strconv.FormatInt((secs+59)/60, 10) + " 分钟后"
		}
		return strconv.FormatInt(secs, 10) + " 秒后"
	}
	if secs >= 120 {
		return "in " + strconv.FormatInt((secs+59)/60, 10) + " minutes"
	}
	if secs == 1 {
		return "in 1 second"
	}
	return "in " + strconv.FormatInt(secs, 10) + " seconds"
}

func catalogEN() map[string]string {
	return map[string]string{
		"ok":                               "The call succeeded.",
		"ok:done":                          "The call succeeded and the action was performed; do not repeat it.",
		"empty":                            "The call succeeded but found nothing; try broader or different arguments.",
		"schema":                           "Invalid arguments: {arg}; fix it and call again.",
		"bad_json":                         "The arguments must be one JSON object ({detail}); send a valid JSON object.",
		"too_large":                        "The arguments are larger than the allowed {detail} bytes; send less data.",
		"key_missing":                      "This tool has side effects and needs an idempotency key (Idempotency-Key header or idempotency_key argument); add a new unique key and call again.",
		"key_malformed":                    "The idempotency key must be 1 to 255 printable ASCII characters; send a valid key.",
		"key_conflict":                     "The Idempotency-Key header and the idempotency_key argument differ; send one key.",
		"key_mismatch":                     "This idempotency key was already used with different arguments; use a new key.",
		"unknown_tool":                     "There is no tool named {tool}; call one of the listed tools.",
		"denied":                           "This caller is not allowed to use {tool}; do not retry, use another tool.",
		"budget":                           "This caller's cost budget is spent; it resets {retry}, do not retry before then.",
		"rate_limited":                     "This caller is sending calls too fast; retry the same call {retry}.",
		"rejected":                         "The service rejected the arguments (HTTP {code}); change them before calling again.",
		"unauthorized":                     "The service refused this call (HTTP {code}); retrying will not help.",
		"missing":                          "The service found nothing at the requested identifiers (HTTP {code}); check them before calling again.",
		"request_timeout":                  "The service timed out reading the request; retry the same call.",
		"throttled":                        "The service is rate limiting calls; retry the same call {retry}.",
		"unavailable":                      "The service is temporarily unavailable; retry the same call {retry}.",
		"server_error":                     "The service failed (HTTP {code}); retry the same call later.",
		"server_error:unknown":             "The service failed (HTTP {code}) after receiving the call, so it may or may not have acted; check before repeating it.",
		"server_error:unknown_dedupe":      "The service failed (HTTP {code}) after receiving the call; retry with the same idempotency key, which cannot act twice.",
		"gateway_timeout":                  "The service timed out (HTTP 504); retry the same call later.",
		"gateway_timeout:unknown":          "The service timed out (HTTP 504) after receiving the call, so it may or may not have acted; check before repeating it.",
		"gateway_timeout:unknown_dedupe":   "The service timed out (HTTP 504) after receiving the call; retry with the same idempotency key, which cannot act twice.",
		"not_implemented":                  "The service does not support this call (HTTP {code}); retrying will not help.",
		"unexpected":                       "The service gave an unexpected answer (HTTP {code}); retrying will not help.",
		"unexpected:unknown":               "The service gave an unexpected answer (HTTP {code}), so it may or may not have acted; check before repeating it.",
		"bad_response":                     "The service answered but its response could not be read; retrying will not help.",
		"bad_response:done":                "The action was performed but its response could not be read; do not repeat it.",
		"bad_response:unknown":             "The service's answer (HTTP {code}) could not be read, so it may or may not have acted; check before repeating it.",
		"connect":                          "The service could not be reached and nothing was sent; retry the same call {retry}.",
		"reset":                            "The connection to the service broke before the call was sent; retry the same call.",
		"reset:sent":                       "The connection to the service broke after the call was sent; retry the same call.",
		"reset:unknown":                    "The connection to the service broke after the call was sent, so it may or may not have acted; check before repeating it.",
		"reset:unknown_dedupe":             "The connection to the service broke after the call was sent; retry with the same idempotency key, which cannot act twice.",
		"deadline":                         "The service did not answer within {detail}; retry the same call.",
		"deadline:unknown":                 "The service did not answer within {detail} after receiving the call, so it may or may not have acted; check before repeating it.",
		"deadline:unknown_dedupe":          "The service did not answer within {detail}; retry with the same idempotency key, which cannot act twice.",
		"deadline:done":                    "The action was performed but its answer did not arrive within {detail}; do not repeat it.",
		"tls":                              "The service's certificate is not trusted (a configuration fault); retrying will not help.",
		"circuit_open":                     "The service is failing and calls to it are paused; retry the same call {retry}.",
		"bulkhead":                         "Too many calls to this service are in progress; retry the same call {retry}.",
		"canceled":                         "The call was cancelled before the service answered.",
		"canceled:unknown":                 "The call was cancelled after it was sent, so the service may or may not have acted; check before repeating it.",
		"canceled:unknown_dedupe":          "The call was cancelled after it was sent; retry with the same idempotency key, which cannot act twice.",
		"store_unavailable":                "The idempotency store is unavailable, so nothing was sent; retry the same call {retry}.",
		"in_flight_timeout:unknown_dedupe": "An earlier call with this idempotency key is still running; retry with the same key later to get its result.",
		"outcome_lost:unknown":             "An earlier call with this idempotency key was interrupted, so it may or may not have acted; check before repeating it with a new key.",
		"retry_after_long":                 "The service asked to wait longer than this call may take; retry the same call {retry}.",
		"rule:ok":                          "The call succeeded.",
		"rule:empty":                       "The call succeeded but found nothing; try broader or different arguments.",
		"rule:bad_args":                    "The service rejected the arguments; change them before calling again.",
		"rule:forbidden":                   "The service refused this call for lack of permission; retrying will not help.",
		"rule:not_found":                   "The service found nothing at the requested identifiers; check them before calling again.",
		"rule:timeout":                     "The service timed out; retry the same call later.",
		"rule:upstream":                    "The service reported a failure; retry the same call later.",
		"rule:bad_args:retry":              "The service rejected the call for now; retry the same call later.",
		"rule:forbidden:retry":             "The service refused this call for lack of permission for now; retry the same call later.",
		"rule:not_found:retry":             "The service found nothing at the requested identifiers for now; retry the same call later.",
		"rule:timeout:final":               "The service timed out; retrying will not help.",
		"rule:upstream:final":              "The service reported a failure; retrying will not help.",
		"status:ok":                        "The call succeeded.",
		"status:empty":                     "The call succeeded but found nothing.",
		"status:bad_args":                  "The arguments were rejected; change them before calling again.",
		"status:forbidden":                 "This call is not allowed; retrying will not help.",
		"status:not_found":                 "Nothing was found; check the identifiers.",
		"status:timeout":                   "The call timed out.",
		"status:upstream":                  "The service failed.",
		"status:ok:done":                   "The call succeeded and the action was performed; do not repeat it.",
		"status:empty:done":                "The call succeeded and the action was performed, but it found nothing; do not repeat it.",
		"status:timeout:done":              "The action was performed but its answer did not arrive in time; do not repeat it.",
		"status:upstream:done":             "The action was performed but the service reported a failure; do not repeat it.",
		"effect:done":                      "The action was performed; do not repeat it.",
		"effect:unknown":                   "The service may or may not have acted on this call; check before repeating it.",
		"effect:unknown_dedupe":            "The service may or may not have acted on this call; retry with the same idempotency key, which cannot act twice.",
	}
}

func catalogZH() map[string]string {
	return map[string]string{
		"ok":                               "调用成功。",
		"ok:done":                          "调用成功，操作已执行；请勿重复执行。",
		"empty":                            "调用成功，但没有找到结果；请尝试更宽泛或不同的参数。",
		"schema":                           "参数错误：{arg}；请修正后重试。",
		"bad_json":                         "参数必须是一个 JSON 对象（{detail}）；请发送有效的 JSON 对象。",
		"too_large":                        "参数超过了允许的 {detail} 字节；请减少数据量。",
		"key_missing":                      "该工具有副作用，必须提供幂等键（Idempotency-Key 请求头或 idempotency_key 参数）；请添加一个新的唯一键后重试。",
		"key_malformed":                    "幂等键必须是 1 到 255 个可打印 ASCII 字符；请发送有效的键。",
		"key_conflict":                     "Idempotency-Key 请求头与 idempotency_key 参数不一致；请只发送一个键。",
		"key_mismatch":                     "该幂等键已被用于不同的参数；请使用新的键。",
		"unknown_tool":                     "不存在名为 {tool} 的工具；请调用已列出的工具。",
		"denied":                           "当前身份无权使用 {tool}，重试无用；请改用其他工具。",
		"budget":                           "当前身份的费用预算已用完；预算将在 {retry}重置，在此之前不要重试。",
		"rate_limited":                     "当前身份调用过于频繁；请在 {retry}原样重试。",
		"rejected":                         "服务拒绝了这些参数（HTTP {code}）；请修改参数后再调用。",
		"unauthorized":                     "服务拒绝了此次调用（HTTP {code}），重试无用。",
		"missing":                          "服务未找到所请求的对象（HTTP {code}）；请检查标识后再调用。",
		"request_timeout":                  "服务读取请求超时；这是瞬时问题，可原样重试。",
		"throttled":                        "服务正在限流；请在 {retry}原样重试。",
		"unavailable":                      "服务暂时不可用；请在 {retry}原样重试。",
		"server_error":                     "服务出错（HTTP {code}）；请稍后原样重试。",
		"server_error:unknown":             "服务在收到请求后出错（HTTP {code}），操作可能已执行也可能未执行；重复之前请先确认。",
		"server_error:unknown_dedupe":      "服务在收到请求后出错（HTTP {code}）；请使用相同的幂等键重试，不会重复执行。",
		"gateway_timeout":                  "服务超时（HTTP 504）；请稍后原样重试。",
		"gateway_timeout:unknown":          "服务在收到请求后超时（HTTP 504），操作可能已执行也可能未执行；重复之前请先确认。",
		"gateway_timeout:unknown_dedupe":   "服务在收到请求后超时（HTTP 504）；请使用相同的幂等键重试，不会重复执行。",
		"not_implemented":                  "服务不支持此调用（HTTP {code}），重试无用。",
		"unexpected":                       "服务返回了意外的应答（HTTP {code}），重试无用。",
		"unexpected:unknown":               "服务返回了意外的应答（HTTP {code}），操作可能已执行也可能未执行；重复之前请先确认。",
		"bad_response":                     "服务已应答，但应答内容无法读取，重试无用。",
		"bad_response:done":                "操作已执行，但应答内容无法读取；不要重复执行。",
		"bad_response:unknown":             "服务的应答（HTTP {code}）无法读取，操作可能已执行也可能未执行；重复之前请先确认。",
		"connect":                          "无法连接到服务，请求未发送；请在 {retry}原样重试。",
		"reset":                            "请求发送前与服务的连接中断；可原样重试。",
		"reset:sent":                       "请求发送后与服务的连接中断；可原样重试。",
		"reset:unknown":                    "请求发送后与服务的连接中断，操作可能已执行也可能未执行；重复之前请先确认。",
		"reset:unknown_dedupe":             "请求发送后与服务的连接中断；请使用相同的幂等键重试，不会重复执行。",
		"deadline":                         "服务在 {detail} 内没有应答，这是瞬时问题，可原样重试。",
		"deadline:unknown":                 "服务收到请求后在 {detail} 内没有应答，操作可能已执行也可能未执行；重复之前请先确认。",
		"deadline:unknown_dedupe":          "服务在 {detail} 内没有应答；请使用相同的幂等键重试，不会重复执行。",
		"deadline:done":                    "操作已执行，但应答未能在 {detail} 内到达；请勿重复执行。",
		"tls":                              "服务的证书不受信任（配置问题），重试无用。",
		"circuit_open":                     "服务持续出错，调用已暂停；请在 {retry}原样重试。",
		"bulkhead":                         "对该服务的并发调用过多；请在 {retry}原样重试。",
		"canceled":                         "调用在服务应答前被取消。",
		"canceled:unknown":                 "调用在请求发送后被取消，操作可能已执行也可能未执行；重复之前请先确认。",
		"canceled:unknown_dedupe":          "调用在请求发送后被取消；请使用相同的幂等键重试，不会重复执行。",
		"store_unavailable":                "幂等存储不可用，请求未发送；请在 {retry}原样重试。",
		"in_flight_timeout:unknown_dedupe": "使用该幂等键的上一次调用仍在进行；请稍后用相同的键重试以获取结果。",
		"outcome_lost:unknown":             "使用该幂等键的上一次调用被中断，操作可能已执行也可能未执行；请先确认，再用新的键重复。",
		"retry_after_long":                 "服务要求等待的时间超过了本次调用的时限；请在 {retry}原样重试。",
		"rule:ok":                          "调用成功。",
		"rule:empty":                       "调用成功，但没有找到结果。",
		"rule:bad_args":                    "服务拒绝了这些参数；请修改后再调用。",
		"rule:forbidden":                   "当前身份无权访问该数据源，重试无用。",
		"rule:not_found":                   "服务未找到所请求的对象；请检查标识。",
		"rule:timeout":                     "服务超时，这是瞬时问题，可稍后原样重试。",
		"rule:upstream":                    "服务报告了错误；请稍后原样重试。",
		"rule:bad_args:retry":              "服务暂时拒绝了此次调用；请稍后原样重试。",
		"rule:forbidden:retry":             "服务暂时以权限不足拒绝了此次调用；请稍后原样重试。",
		"rule:not_found:retry":             "服务暂未找到所请求的对象；请稍后原样重试。",
		"rule:timeout:final":               "服务超时，重试无用。",
		"rule:upstream:final":              "服务报告了错误，重试无用。",
		"status:ok":                        "调用成功。",
		"status:empty":                     "调用成功，但没有找到结果。",
		"status:bad_args":                  "参数被拒绝；请修改后再调用。",
		"status:forbidden":                 "此调用不被允许，重试无用。",
		"status:not_found":                 "未找到；请检查标识。",
		"status:timeout":                   "调用超时。",
		"status:upstream":                  "服务出错。",
		"status:ok:done":                   "调用成功，操作已执行；请勿重复执行。",
		"status:empty:done":                "调用成功，操作已执行，但没有找到结果；请勿重复执行。",
		"status:timeout:done":              "操作已执行，但应答未能及时到达；请勿重复执行。",
		"status:upstream:done":             "操作已执行，但服务报告了错误；请勿重复执行。",
		"effect:done":                      "操作已执行；请勿重复执行。",
		"effect:unknown":                   "服务可能已执行也可能未执行此次调用；重复之前请先确认。",
		"effect:unknown_dedupe":            "服务可能已执行也可能未执行此次调用；请使用相同的幂等键重试，不会重复执行。",
	}
}

// Templates are a tool's own messages, one Go text/template per status,
// executed with .args (the arguments) and .data (the envelope data).
type Templates map[Status]*messageTemplate

type messageTemplate struct {
	tpl *template.Template
	// The template reads only these top-level keys of .data (or all of it
	// when whole is set): only they are decoded per call.
	dataKeys []string
	whole    bool
	// fast holds the template as text and field references when that is
	// all it is (the common case), rendered without reflection.
	fast []templatePart
}

// templatePart is literal text, or a field path such as .args.q.
type templatePart struct {
	text string
	path []string
}

// CompileTemplates parses per-status message templates. Templates run with
// missingkey=zero, so a missing argument renders empty instead of failing.
func CompileTemplates(specs map[string]string) (Templates, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	t := make(Templates, len(specs))
	for name, text := range specs {
		st, ok := ParseStatus(name)
		if !ok {
			return nil, &RuleError{Field: name, Msg: fmt.Sprintf("%q is not a status", name)}
		}
		tpl, err := template.New(name).Option("missingkey=zero").Parse(text)
		if err != nil {
			return nil, &RuleError{Field: name, Msg: strings.TrimPrefix(err.Error(), "template: ")}
		}
		mt := &messageTemplate{tpl: tpl, fast: simpleTemplate(tpl)}
		keys := map[string]bool{}
		walkTemplate(tpl.Tree.Root, func(ident []string) {
			switch {
			case len(ident) >= 1 && ident[0] == "$":
				mt.whole = true
			case len(ident) == 1 && ident[0] == "data":
				mt.whole = true
			case len(ident) >= 2 && ident[0] == "data" && !keys[ident[1]]:
				keys[ident[1]] = true
				mt.dataKeys = append(mt.dataKeys, ident[1])
			}
		})
		t[st] = mt
	}
	return t, nil
}

// walkTemplate calls visit with the identifier chain of every field and
// variable reference in a template.
func walkTemplate(n parse.Node, visit func([]string)) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			walkTemplate(c, visit)
		}
	case *parse.ActionNode:
		walkTemplate(n.Pipe, visit)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, c := range n.Cmds {
			walkTemplate(c, visit)
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			walkTemplate(a, visit)
		}
	case *parse.FieldNode:
		visit(n.Ident)
	case *parse.VariableNode:
		visit(n.Ident)
	case *parse.ChainNode:
		visit([]string{"$"}) // (expr).field: cannot tell what it reads
	case *parse.IfNode:
		walkBranch(&n.BranchNode, visit)
	case *parse.RangeNode:
		walkBranch(&n.BranchNode, visit)
	case *parse.WithNode:
		walkBranch(&n.BranchNode, visit)
	case *parse.TemplateNode:
		visit([]string{"$"})
	}
}

func walkBranch(b *parse.BranchNode, visit func([]string)) {
	walkTemplate(b.Pipe, visit)
	walkTemplate(b.List, visit)
	walkTemplate(b.ElseList, visit)
}

// Render executes the template for status, if any. A template that fails at
// run time yields ok=false so the catalogue message is used instead.
func (t Templates) Render(status Status, args map[string]any, data json.RawMessage) (string, bool) {
	return t.RenderMembers(status, args, data, nil)
}

// RenderMembers is Render with the data's top-level members already
// located (see Rules.DataMembers), so the data is not scanned again.
func (t Templates) RenderMembers(status Status, args map[string]any, data json.RawMessage, members []Member) (string, bool) {
	mt := t[status]
	if mt == nil {
		return "", false
	}
	if mt.fast != nil {
		return mt.renderFast(args, data, members), true
	}
	root := map[string]any{"args": args, "data": mt.decodeData(data, members)}
	buf := cappedBuffer{b: make([]byte, 0, 128), limit: maxTemplateBytes}
	if err := mt.tpl.Execute(&buf, root); err != nil && !errors.Is(err, errTemplateFull) {
		return "", false
	}
	// A missing value renders empty, as on the fast path, not as Go's
	// "<no value>", which means nothing to a model.
	return finishRendered(bytes.ReplaceAll(buf.b, []byte("<no value>"), nil), buf.full), true
}

// decodeData decodes the part of data the template reads: the top-level
// members it names, or all of it.
func (mt *messageTemplate) decodeData(data json.RawMessage, members []Member) any {
	switch {
	case len(data) == 0 || !mt.whole && len(mt.dataKeys) == 0:
		return nil
	case !mt.whole && members != nil:
		m := make(map[string]any, len(mt.dataKeys))
		for _, k := range mt.dataKeys {
			if raw, ok := memberValue(data, members, k); ok {
				if doc, err := parseJSONDoc(raw); err == nil {
					m[k] = doc.native(0)
				}
			}
		}
		return m
	case !mt.whole:
		// Only the keys the template reads are decoded; the rest of the
		// data is skipped, not parsed into a tree.
		if m, ok := topLevelMembers(data, mt.dataKeys); ok {
			return m
		}
	}
	if doc, err := parseJSONDoc(data); err == nil {
		return doc.native(0)
	}
	return nil
}

// renderFast renders a template of text and field references. An
// argument, or a top-level data member that is a scalar, is written
// directly; any other value is decoded as for a full template.
func (mt *messageTemplate) renderFast(args map[string]any, data json.RawMessage, members []Member) string {
	b := make([]byte, 0, 128)
	var root map[string]any // built only for a part that needs it
	for _, p := range mt.fast {
		if len(b) > maxTemplateBytes {
			return finishRendered(b[:maxTemplateBytes], true)
		}
		switch {
		case p.path == nil:
			b = append(b, p.text...)
			continue
		case len(p.path) >= 2 && p.path[0] == "args":
			b = appendTemplateValue(b, lookupPath(args, p.path[1:]))
			continue
		case len(p.path) == 2 && p.path[0] == "data" && !mt.whole && members != nil:
			raw, ok := memberValue(data, members, p.path[1])
			if !ok {
				continue // a missing value renders empty
			}
			if out, ok := appendScalar(b, raw); ok {
				b = out
				continue
			}
		}
		if root == nil {
			root = map[string]any{"args": args, "data": mt.decodeData(data, members)}
		}
		b = appendTemplateValue(b, lookupPath(root, p.path))
	}
	if len(b) > maxTemplateBytes {
		return finishRendered(b[:maxTemplateBytes], true)
	}
	return finishRendered(b, false)
}

// memberValue is the raw value of the top-level data member key.
func memberValue(data json.RawMessage, members []Member, key string) ([]byte, bool) {
	for _, m := range members {
		if m.Key == key && m.End <= len(data) && m.Start <= m.End {
			return data[m.Start:m.End], true
		}
	}
	return nil, false
}

// appendScalar writes a compact JSON scalar as a template prints its
// decoded value: a number as a float64, a string without its quotes, null
// as nothing. ok is false for objects, arrays and escaped strings.
func appendScalar(b []byte, raw []byte) ([]byte, bool) {
	if len(raw) == 0 {
		return b, false
	}
	switch c := raw[0]; {
	case c == '-' || c >= '0' && c <= '9':
		// Decoded data holds numbers as float64, which a template
		// prints as fmt's %v does.
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			return b, false
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64), true
	case c == 't', c == 'f':
		return append(b, raw...), true
	case c == 'n':
		return b, true
	case c == '"' && len(raw) >= 2 && bytes.IndexByte(raw, '\\') < 0:
		return append(b, raw[1:len(raw)-1]...), true
	}
	return b, false
}

// appendTemplateValue prints a decoded value as text/template does; a
// missing one (nil) prints nothing.
func appendTemplateValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return b
	case string:
		return append(b, v...)
	case json.Number:
		return append(b, v...)
	case bool:
		return strconv.AppendBool(b, v)
	default:
		return fmt.Append(b, v)
	}
}

// oneLine collapses white space runs into single spaces and trims the
// ends; a message that needs none of it is returned as is.
func oneLine(s string) string {
	space := true // a leading space goes
	for _, r := range s {
		isSpace := unicode.IsSpace(r)
		if isSpace && (r != ' ' || space) {
			return strings.Join(strings.Fields(s), " ")
		}
		space = isSpace
	}
	if space && s != "" {
		return strings.Join(strings.Fields(s), " ")
	}
	return s
}

// simpleTemplate returns a template as parts when it is only text and
// plain field references ({{.args.q}}), nil otherwise.
func simpleTemplate(tpl *template.Template) []templatePart {
	var parts []templatePart
	for _, n := range tpl.Tree.Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			parts = append(parts, templatePart{text: string(n.Text)})
		case *parse.ActionNode:
			if len(n.Pipe.Decl) > 0 || len(n.Pipe.Cmds) != 1 || len(n.Pipe.Cmds[0].Args) != 1 {
				return nil
			}
			f, ok := n.Pipe.Cmds[0].Args[0].(*parse.FieldNode)
			if !ok {
				return nil
			}
			parts = append(parts, templatePart{path: f.Ident})
		default:
			return nil
		}
	}
	if parts == nil {
		parts = []templatePart{}
	}
	return parts
}

// lookupPath follows a field path through nested maps; nil when any step
// is missing.
func lookupPath(v any, path []string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = m[k]; !ok {
			return nil
		}
	}
	return v
}
