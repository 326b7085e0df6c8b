package contracts

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxMessageChars bounds an envelope's message, in Unicode code points, as
// observation_max_chars bounds the observation: a template can render a
// whole backend answer into it. A longer message loses the end of what
// happened, marked "…"; its action clause is kept whole.
const MaxMessageChars = 500

// boundMessage makes s valid UTF-8 and cuts it to MaxMessageChars.
func boundMessage(s string) string {
	if len(s) <= MaxMessageChars && utf8.ValidString(s) {
		return s // bytes bound code points
	}
	return shorten(strings.ToValidUTF8(s, "\ufffd"), MaxMessageChars)
}

// languages are the built-in message catalogues.
func languages() []string { return []string{"en", "zh"} }

// Catalog renders the built-in messages in one language.
//
// A message says what happened, then what to do. What happened comes from
// the outcome's reason (or the tool's template); what to do is chosen from
// the envelope's fields alone — retryable, side_effect, retry_after_ms,
// replayed — and the attempts toolgate made, so the two never disagree
// (TestMessagesAgreeWithTheEnvelope walks every outcome the core produces).
// A message never contains a backend host, port, URL or body: its inputs
// are the tool name, the status, the HTTP code, a wait, argument errors
// built from the caller's own arguments, operator-written words, and the
// words of the answer the operator's response.error_detail picks (one
// bounded line, quoted as the backend's).
type Catalog struct {
	lang    string
	entries map[string]string
	// joined holds every message made of two entries without
	// placeholders, so the common messages cost no allocation.
	joined map[[2]string]Message
}

// NewCatalog returns the catalogue for lang ("en" or "zh").
func NewCatalog(lang string) (*Catalog, error) {
	var c *Catalog
	switch lang {
	case "", "en":
		c = &Catalog{lang: "en", entries: catalogEN()}
	case "zh":
		c = &Catalog{lang: "zh", entries: catalogZH()}
	default:
		return nil, fmt.Errorf("unknown message catalogue %q (want en or zh)", lang)
	}
	c.joined = map[[2]string]Message{}
	for hk, h := range c.entries {
		if strings.HasPrefix(hk, "act:") || strings.IndexByte(h, '{') >= 0 {
			continue
		}
		for ak, a := range c.entries {
			if strings.HasPrefix(ak, "act:") && strings.IndexByte(a, '{') < 0 {
				c.joined[[2]string{hk, ak}] = c.join(h, a)
			}
		}
	}
	return c, nil
}

// Lang is the catalogue's language.
func (c *Catalog) Lang() string { return c.lang }

// Message is a composed message: its text, and the byte offset in it where
// the action clause begins (len(Text) when there is none). An observation
// that must cut the message keeps the action clause whole.
type Message struct {
	Text     string
	ActionAt int
}

// Said is what a message is composed from besides the outcome.
type Said struct {
	// Tool is the tool's name as safe to repeat.
	Tool string
	// Contract is the tool's contract; nil for an unknown tool.
	Contract *Contract
	// Args are the call's arguments, for templates and for naming the
	// values that went into the backend's path.
	Args map[string]any
	// Attempts counts the backend attempts toolgate made.
	Attempts int
	// Sent says the request may have reached the backend. A side-effecting
	// call that sent its request holds its idempotency key's record from
	// then on (KeyKept): a refusal the key keeps tells the model that
	// another call needs a new key.
	Sent bool
	// Replay is the stored envelope that answers a replayed call.
	Replay *Envelope
	// Tools are the tools the caller may use, for an unknown tool.
	Tools []string
}

// message renders the catalogue's message for an outcome of a tool, with
// no template, bounded to MaxMessageChars. sideEffect says the tool has
// side effects.
func (c *Catalog) message(tool string, sideEffect bool, o *Outcome) string {
	var ct *Contract
	if sideEffect {
		ct = &Contract{SideEffect: true}
	}
	return c.Compose(&Said{Tool: tool, Contract: ct}, o).Text
}

// action is the kind of what-to-do clause an outcome gets, chosen from the
// envelope's fields. The first four are soft: what a status usually asks
// for, which a tool's template may say in its own words instead. The
// others carry a field the model must act on, and follow any template.
type action uint8

const (
	actOK      action = iota // a read-only success
	actEmpty                 // nothing found
	actFix                   // change the arguments
	actCheck                 // check the identifiers
	actFinal                 // not retryable and nothing happened
	actRetry                 // retryable, nothing happened (or read-only)
	actDone                  // the action was performed
	actUnknown               // the action may have happened; not retryable
	actSameKey               // the action may have happened; the backend dedupes
)

func (a action) soft() bool { return a <= actCheck }

// longWait is the wait past which a retry is advice the task may not be
// able to follow: the message says to tell the user now if it cannot wait,
// rather than have the model sit idle for an hour.
const longWait = 2 * time.Minute

// KeyKept reports whether a side-effecting call's idempotency key keeps
// the call's envelope once the call ends, from the envelope's side_effect
// and retryable: sent says the request may have reached the backend. A
// call that sent nothing, or whose backend refused without acting and
// invites the identical retry (429, 503, 408), releases its key so that
// retry runs; any other envelope is stored (done, unknown, or a refusal),
// so the same key only replays it, and a corrected call needs a new key
// (the same key with other arguments is key_mismatch).
func KeyKept(effect SideEffect, retryable, sent bool) bool {
	return sent && !(effect == SideEffectNone && retryable)
}

// keySpent reports whether a message must say that another call needs a
// new idempotency key: the tool's key now holds a refusal in which nothing
// was done, which the fields alone do not tell (done says do not repeat
// it; unknown says how to find out and which key to use).
func keySpent(s *Said, o *Outcome, effect SideEffect) bool {
	return s.Contract != nil && s.Contract.SideEffect && s.Replay == nil && s.Sent &&
		effect == SideEffectNone && !o.Retryable && o.Status != StatusOK && KeyKept(effect, o.Retryable, true)
}

// actionOf chooses what to do from the envelope's fields: effect is the
// side effect the envelope shows. The reason never overrides it; it may
// only refine the words within the kind (see Compose).
func actionOf(o *Outcome, effect SideEffect) action {
	switch {
	case effect == SideEffectDone:
		return actDone
	case effect == SideEffectUnknown && o.Retryable:
		return actSameKey
	case effect == SideEffectUnknown:
		return actUnknown
	case o.Retryable:
		return actRetry
	}
	switch o.Status {
	case StatusOK:
		return actOK
	case StatusEmpty:
		return actEmpty
	case StatusBadArgs:
		return actFix
	case StatusNotFound:
		return actCheck
	}
	return actFinal
}

// Compose renders the message for an outcome: what happened, from a
// template of the tool that speaks for the outcome (Templates.forOutcome) or from
// the catalogue, then what to do, chosen from the envelope's fields. A
// template stands alone where the fields ask nothing more than its status
// usually does (a read-only success, bad arguments, nothing found); where
// they do (retry, and when; do not repeat; find out whether it happened)
// the catalogue's clause follows it.
func (c *Catalog) Compose(s *Said, o *Outcome) Message {
	sideEffect := s.Contract != nil && s.Contract.SideEffect
	effect := SideEffectNone
	if sideEffect {
		effect = o.Effect
	}
	if s.Replay != nil {
		return c.replayed(s, o, effect)
	}
	act := actionOf(o, effect)
	spent := keySpent(s, o, effect)
	if s.Contract != nil {
		if mt := s.Contract.Templates.forOutcome(o, effect); mt != nil {
			if text, ok := mt.render(s.Args, o.Data, o.Members, answerWords{detail: o.ErrorDetail, text: o.Text}); ok && text != "" {
				switch {
				case act.soft() && spent:
					// The template's own advice stands; the key it
					// cannot know about is added.
					return c.join(trimSentence(text), c.entries["act:new_key"])
				case act.soft():
					return Message{Text: text, ActionAt: len(text)}
				}
				return c.join(trimSentence(text), c.expand(c.entries[c.actionKey(s, o, act, spent)], s, o))
			}
		}
	}
	hk := c.happenedKey(s, o, sideEffect)
	ak := c.actionKey(s, o, act, spent)
	if o.ErrorDetail != "" {
		// The backend's words end what happened, quoted as theirs.
		said := strings.Replace(c.entries["said"], "{said}", o.ErrorDetail, 1)
		return c.join(c.expand(c.entries[hk], s, o)+said, c.expand(c.entries[ak], s, o))
	}
	if m, ok := c.joined[[2]string{hk, ak}]; ok {
		return m
	}
	return c.join(c.expand(c.entries[hk], s, o), c.expand(c.entries[ak], s, o))
}

// replayed composes the message of a stored result returned again: it
// says so first, then what the stored fields ask for.
func (c *Catalog) replayed(s *Said, o *Outcome, effect SideEffect) Message {
	var key string
	switch {
	case effect == SideEffectDone && o.Status == StatusOK:
		key = "replay:ok:done"
	case effect == SideEffectDone:
		key = "replay:done"
	case effect == SideEffectUnknown:
		key = "replay:unknown"
	default:
		// Nothing was done: the stored message still says what happened
		// and what to do.
		text := boundMessage(c.entries["replay"] + s.Replay.Message)
		return Message{Text: text, ActionAt: len(text)}
	}
	return c.join(c.expand(c.entries[key], s, o), c.expand(c.entries[c.actionKey(s, o, actionOf(o, effect), false)], s, o))
}

// happenedKey picks the catalogue's what-happened entry. Keys are put
// together only when they are the answer, so the common ones cost nothing.
func (c *Catalog) happenedKey(s *Said, o *Outcome, sideEffect bool) string {
	base := string(o.Reason)
	if o.Reason == ReasonRule {
		base = "rule:" + string(o.Status)
	}
	key := base
	switch {
	case sideEffect && o.Effect == SideEffectDone:
		if k, ok := c.variant(base, ":done"); ok {
			return k
		}
		key = "status:" + string(o.Status) + ":done"
	case o.Reason == ReasonRule && o.Retryable && !statusRetryable(o.Status):
		if k, ok := c.variant(base, ":retry"); ok {
			key = k
		}
	case o.Effect != SideEffectNone:
		// The request reached the backend: never the words for a call
		// that was not sent.
		if k, ok := c.variant(base, ":sent"); ok {
			key = k
		}
	case o.Reason == ReasonMissing && len(c.pathValues(s)) > 0:
		key = "missing:path"
	}
	if _, ok := c.entries[key]; !ok {
		key = "status:" + string(o.Status)
	}
	return key
}

// variant returns base+suffix when the catalogue has that entry.
func (c *Catalog) variant(base, suffix string) (string, bool) {
	if _, ok := c.entries[base+suffix]; !ok {
		return "", false
	}
	return base + suffix, true
}

// actionKeys are the what-to-do entries of each kind: plain, ":wait",
// ":tried", ":tried:wait", and for a wait past longWait ":long" and
// ":tried:long".
var actionKeys = [...][6]string{
	actOK:      {"act:ok"},
	actEmpty:   {"act:empty"},
	actFix:     {"act:fix"},
	actCheck:   {"act:check"},
	actFinal:   {"act:final"},
	actRetry:   {"act:retry", "act:retry:wait", "act:retry:tried", "act:retry:tried:wait", "act:retry:long", "act:retry:tried:long"},
	actDone:    {"act:done"},
	actUnknown: {"act:unknown"},
	actSameKey: {"act:same_key", "act:same_key:wait", "act:same_key:tried", "act:same_key:tried:wait", "act:same_key:long", "act:same_key:tried:long"},
}

// actionKey picks the what-to-do entry of a kind. The reason may refine
// the words ("act:fix:key_missing"), a retry says when, and how many
// attempts were made, and a refusal whose key is spent says that another
// call needs a new key ("act:fix:new_key"); none of it changes the kind
// the fields chose.
func (c *Catalog) actionKey(s *Said, o *Outcome, act action, spent bool) string {
	i := 0
	if act == actRetry || act == actSameKey {
		tried := 0
		if s.Attempts >= 2 {
			tried = 1
		}
		switch {
		case o.RetryAfter > longWait:
			i = 4 + tried
		case o.RetryAfter > 0:
			i = 1 | tried<<1
		default:
			i = tried << 1
		}
	}
	base := actionKeys[act][i]
	if spent {
		if k, ok := c.variant(base, ":new_key"); ok {
			base = k
		}
	}
	refined := ":" + string(o.Reason)
	switch {
	case o.Reason == ReasonSchema && o.Args != nil && o.Args.Total > 1:
		refined += ":all"
	case o.Reason == ReasonUnknownTool && len(s.Tools) > 0:
		refined += ":list"
	}
	if k, ok := c.variant(base, refined); ok {
		return k
	}
	return base
}

// join puts what happened and what to do together within MaxMessageChars:
// when they do not fit, what happened is cut (marked "…") and the action
// clause kept whole.
func (c *Catalog) join(happened, action string) Message {
	happened, action = validUTF8(happened), validUTF8(action)
	if n := utf8.RuneCountInString(happened) + utf8.RuneCountInString(action); n > MaxMessageChars {
		room := MaxMessageChars - utf8.RuneCountInString(action) - 1
		if room < 0 {
			text := boundMessage(happened + action)
			return Message{Text: text, ActionAt: len(text)}
		}
		happened = prefixRunes(happened, room) + "…"
	}
	return Message{Text: happened + action, ActionAt: len(happened)}
}

// trimSentence readies a template's words for the action clause that
// follows them: one final full stop goes, since the clause brings its own.
func trimSentence(s string) string {
	s = strings.TrimRight(s, " ")
	for _, stop := range []string{".", "。", "!", "！"} {
		if strings.HasSuffix(s, stop) {
			return s[:len(s)-len(stop)]
		}
	}
	return s
}

// expand fills an entry's placeholders.
func (c *Catalog) expand(msg string, s *Said, o *Outcome) string {
	if strings.IndexByte(msg, '{') < 0 {
		return msg
	}
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
			b.WriteString(s.Tool)
		case "code":
			b.WriteString(strconv.Itoa(o.HTTPCode))
		case "retry":
			b.WriteString(c.wait(o.RetryAfter))
		case "attempts":
			b.WriteString(strconv.Itoa(s.Attempts))
		case "args":
			if o.Args != nil {
				b.WriteString(o.Args.text(c.lang))
			} else {
				b.WriteString(c.entries["args:none"])
			}
		case "timeout":
			if s.Contract != nil {
				b.WriteString(c.duration(s.Contract.Timeout))
			}
		case "tools":
			b.WriteString(c.list(s.Tools))
		case "path":
			b.WriteString(c.list(c.pathValues(s)))
		case "detail":
			b.WriteString(o.Detail)
		default:
			b.WriteString(msg[i : i+j+1])
		}
		msg = msg[i+j+1:]
	}
}

// pathValues names the arguments that went into the backend's path, with
// their values: `user_id "zed"`.
func (c *Catalog) pathValues(s *Said) []string {
	if s.Contract == nil || s.Contract.Binding == nil {
		return nil
	}
	var out []string
	for _, name := range s.Contract.Binding.pathArgs() {
		if v, ok := s.Args[name]; ok {
			if text, ok := scalarString(v); ok {
				out = append(out, name+" "+quoteShort(text))
			}
		}
	}
	return out
}

// list joins names as the language does, at most 20 of them.
func (c *Catalog) list(names []string) string {
	more := ""
	if len(names) > 20 {
		more = c.entries["list:more"]
		names = names[:20]
	}
	sep := ", "
	if c.lang == "zh" {
		sep = "、"
	}
	return strings.Join(names, sep) + more
}

// wait renders a wait time a model can act on ("in 30 seconds").
func (c *Catalog) wait(d time.Duration) string {
	secs := max(int64(math.Ceil(d.Seconds())), 1)
	if c.lang == "zh" {
		if secs >= 120 {
			return strconv.FormatInt((secs+59)/60, 10) + " 分钟后"
		}
		return strconv.FormatInt(secs, 10) + " 秒后"
	}
	switch {
	case secs >= 120:
		return "in " + strconv.FormatInt((secs+59)/60, 10) + " minutes"
	case secs == 1:
		return "in 1 second"
	}
	return "in " + strconv.FormatInt(secs, 10) + " seconds"
}

// duration renders a deadline: Go's notation in English ("500ms", "2s"),
// seconds in Chinese ("0.5 秒").
func (c *Catalog) duration(d time.Duration) string {
	if c.lang == "zh" {
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " 秒"
	}
	return d.String()
}

// The catalogues. Keys:
//
//   - "<reason>": what happened, for an outcome where nothing happened at
//     the backend, or for a read-only tool; "<reason>:sent" where the
//     request reached the backend and the plain words would say it did
//     not; "<reason>:done" where a side-effecting tool's action ran;
//     "rule:<status>" for a matched errors rule ("rule:<status>:retry" when
//     the rule made a status retryable that usually is not);
//     "status:<status>" and "status:<status>:done" for any other case.
//   - "replay…": what happened to a call answered by a stored result.
//   - "act:<kind>": what to do, by the kind actionOf chose from the fields;
//     "act:<kind>:<reason>" refines the words for one reason; a retry has
//     ":tried" (toolgate made several attempts), ":wait" (a wait is known)
//     and ":long" (a wait past longWait) variants; a refusal whose
//     idempotency key is spent has ":new_key" ones, and "act:new_key"
//     follows a template that stands for a soft kind.
//
// What-happened entries have no final punctuation; action entries bring
// their own connector (";", "；", "，") and full stop.
func catalogEN() map[string]string {
	return map[string]string{
		"ok":                    "The call succeeded",
		"ok:done":               "The call succeeded and the action was performed",
		"empty":                 "The call succeeded but found nothing",
		"empty:done":            "The action was performed and the service returned no data",
		"schema":                "{args}",
		"args:none":             "The arguments do not match the contract",
		"bad_json":              "The request body must be one JSON object of arguments, but {args}",
		"too_large":             "The arguments are larger than the allowed {detail} bytes",
		"key_missing":           "This tool has side effects and needs an idempotency key",
		"key_malformed":         "The idempotency key must be 1 to 255 printable ASCII characters",
		"key_conflict":          "The Idempotency-Key header and the idempotency_key argument differ",
		"key_mismatch":          "This idempotency key was already used with different arguments",
		"unknown_tool":          "There is no tool named {tool}",
		"denied":                "You are not allowed to use {tool}",
		"budget":                "Your cost budget is spent and resets {retry}",
		"rate_limited":          "You are sending calls too fast",
		"rejected":              "The service rejected the arguments (HTTP {code})",
		"conflict":              "The service reports a conflict with its current state (HTTP {code}), for example that the item already exists",
		"unauthorized":          "The service refused this call (HTTP {code})",
		"missing":               "The service found nothing at the requested identifiers (HTTP {code})",
		"missing:path":          "The service found nothing for {path} (HTTP {code})",
		"request_timeout":       "The service timed out reading the request (HTTP 408)",
		"throttled":             "The service is rate limiting calls (HTTP 429)",
		"unavailable":           "The service is temporarily unavailable (HTTP 503)",
		"server_error":          "The service failed (HTTP {code})",
		"gateway_timeout":       "The service timed out (HTTP 504)",
		"not_implemented":       "The service does not support this call (HTTP {code})",
		"unexpected":            "The service gave an unexpected answer (HTTP {code})",
		"bad_response":          "The service's answer (HTTP {code}) could not be read",
		"bad_response:done":     "The action was performed but the service's answer (HTTP {code}) could not be read",
		"connect":               "The service could not be reached, so nothing was sent",
		"reset":                 "The connection to the service broke before the call was sent",
		"reset:sent":            "The connection to the service broke after the call was sent, before an answer came",
		"deadline":              "The service did not answer within {timeout}",
		"deadline:sent":         "The service received the call but did not answer within {timeout}",
		"deadline:done":         "The action was performed but its answer did not arrive within {timeout}",
		"tls":                   "The service's certificate is not trusted (a configuration fault)",
		"auth":                  "The credential for the service could not be obtained, so nothing was sent",
		"invalid_request":       "The request to the service could not be built from these values, so nothing was sent",
		"circuit_open":          "The service is failing and calls to it are paused",
		"bulkhead":              "Too many calls to this service are in progress",
		"canceled":              "The call was cancelled before it reached the service",
		"canceled:sent":         "The call was cancelled after it reached the service",
		"store_unavailable":     "The idempotency key cannot be checked right now, so nothing was sent",
		"in_flight_timeout":     "An earlier call with this idempotency key is still running",
		"outcome_lost":          "An earlier call with this idempotency key was interrupted, and this call was not sent again",
		"rule:ok":               "The call succeeded",
		"rule:empty":            "The call succeeded but found nothing",
		"rule:bad_args":         "The service rejected the arguments",
		"rule:forbidden":        "The service refused this call for lack of permission",
		"rule:not_found":        "The service found nothing at the requested identifiers",
		"rule:timeout":          "The service timed out",
		"rule:upstream":         "The service reported a failure",
		"rule:bad_args:retry":   "The service turned the call down for now",
		"rule:forbidden:retry":  "The service refused this call for now",
		"rule:not_found:retry":  "The service found nothing yet",
		"status:ok":             "The call succeeded",
		"status:empty":          "The call succeeded but found nothing",
		"status:bad_args":       "The arguments were refused",
		"status:forbidden":      "This call is not allowed",
		"status:not_found":      "Nothing was found",
		"status:timeout":        "The call timed out",
		"status:upstream":       "The service failed",
		"status:ok:done":        "The call succeeded and the action was performed",
		"status:empty:done":     "The action was performed and the service returned no data",
		"status:bad_args:done":  "The service reported a problem with the arguments, but the action was performed",
		"status:forbidden:done": "The service reported a refusal, but the action was performed",
		"status:not_found:done": "The service reported that something was not found, but the action was performed",
		"status:timeout:done":   "The action was performed but its answer did not arrive in time",
		"status:upstream:done":  "The action was performed but the service reported a failure",
		"replay":                "Result of an earlier call with this idempotency key (this call was not sent again): ",
		"replay:ok:done":        "An earlier call with this idempotency key already succeeded and performed the action; this call was not sent again",
		"replay:done":           "An earlier call with this idempotency key already performed the action; this call was not sent again",
		"replay:unknown":        "An earlier call with this idempotency key ended with an unknown outcome, and this call was not sent again",
		"list:more":             ", …",
		"said":                  `. The backend said: "{said}"`,

		"act:ok":                         ".",
		"act:empty":                      "; try broader or different arguments, or tell the user nothing matched.",
		"act:empty:new_key":              "; try broader or different arguments with a new idempotency key (this one is used up), or tell the user nothing matched.",
		"act:fix":                        "; change the arguments before calling again.",
		"act:fix:schema":                 "; fix it and call again.",
		"act:fix:schema:all":             "; fix them all and call again.",
		"act:fix:bad_json":               "; send one valid JSON object.",
		"act:fix:too_large":              "; send less data.",
		"act:fix:key_missing":            "; add an idempotency_key argument (or an Idempotency-Key header) with a new unique value, such as a UUID, and call again.",
		"act:fix:key_malformed":          "; send a valid key.",
		"act:fix:key_conflict":           "; send one key.",
		"act:fix:key_mismatch":           "; use a new key for these arguments.",
		"act:fix:conflict":               "; check the current state before changing anything.",
		"act:fix:new_key":                "; change the arguments and call again with a new idempotency key (this one is used up).",
		"act:fix:new_key:conflict":       "; check the current state before changing anything, and call again only with a new idempotency key (this one is used up).",
		"act:check":                      "; check the identifiers before calling again.",
		"act:check:new_key":              "; check the identifiers, and call again with a new idempotency key (this one is used up).",
		"act:check:unknown_tool":         "; call one of the listed tools.",
		"act:check:unknown_tool:list":    "; call one of: {tools}.",
		"act:final":                      "; retrying will not help, so tell the user this tool cannot be used right now.",
		"act:final:denied":               "; retrying will not help: use another tool, or tell the user.",
		"act:final:budget":               "; do not call this tool before then, and tell the user if the task cannot wait.",
		"act:final:new_key":              "; retrying will not help, so tell the user this tool cannot be used right now (any new call needs a new idempotency key).",
		"act:new_key":                    "; another call needs a new idempotency key (this one is used up).",
		"act:retry":                      "; retry the same call, and if it fails again, tell the user.",
		"act:retry:wait":                 "; retry the same call {retry}, and if it fails again, tell the user.",
		"act:retry:tried":                "; toolgate already tried {attempts} times, so retry the same call only once more, and if it fails again, tell the user.",
		"act:retry:tried:wait":           "; toolgate already tried {attempts} times, so retry the same call only once more, {retry}, and if it fails again, tell the user.",
		"act:retry:long":                 "; if the task can wait that long, retry the same call {retry}, and if it fails again, tell the user; if it cannot wait, tell the user now.",
		"act:retry:tried:long":           "; toolgate already tried {attempts} times: if the task can wait that long, retry the same call once more {retry}, and if it fails again, tell the user; if it cannot wait, tell the user now.",
		"act:done":                       "; do not repeat it.",
		"act:unknown":                    "; the action may or may not have happened: find out whether it did (or ask the user), and only if it did not, repeat it with a new idempotency key.",
		"act:same_key":                   "; the action may or may not have happened, so retry with the same idempotency key, which cannot act twice, and if it fails again, tell the user.",
		"act:same_key:wait":              "; the action may or may not have happened, so retry with the same idempotency key {retry}, which cannot act twice, and if it fails again, tell the user.",
		"act:same_key:tried":             "; the action may or may not have happened; toolgate already tried {attempts} times, so retry with the same idempotency key only once more (it cannot act twice), and if it fails again, tell the user.",
		"act:same_key:tried:wait":        "; the action may or may not have happened; toolgate already tried {attempts} times, so retry with the same idempotency key only once more, {retry} (it cannot act twice), and if it fails again, tell the user.",
		"act:same_key:long":              "; the action may or may not have happened: if the task can wait that long, retry with the same idempotency key {retry} (it cannot act twice), and if it fails again, tell the user; if it cannot wait, tell the user now.",
		"act:same_key:tried:long":        "; the action may or may not have happened; toolgate already tried {attempts} times: if the task can wait, retry once more with the same idempotency key {retry} (it cannot act twice); if not, or if it fails again, tell the user now.",
		"act:same_key:in_flight_timeout": "; retry with the same idempotency key to get its result once it finishes.",
	}
}

func catalogZH() map[string]string {
	return map[string]string{
		"ok":                    "调用成功",
		"ok:done":               "调用成功，操作已执行",
		"empty":                 "调用成功，但没有找到结果",
		"empty:done":            "操作已执行，服务未返回数据",
		"schema":                "{args}",
		"args:none":             "参数不符合约定",
		"bad_json":              "请求体必须是一个 JSON 参数对象，但{args}",
		"too_large":             "参数超过了允许的 {detail} 字节",
		"key_missing":           "该工具有副作用，必须提供幂等键",
		"key_malformed":         "幂等键必须是 1 到 255 个可打印 ASCII 字符",
		"key_conflict":          "Idempotency-Key 请求头与 idempotency_key 参数不一致",
		"key_mismatch":          "该幂等键已被用于不同的参数",
		"unknown_tool":          "不存在名为 {tool} 的工具",
		"denied":                "当前身份无权使用 {tool}",
		"budget":                "当前身份的费用预算已用完，将在 {retry}重置",
		"rate_limited":          "当前身份调用过于频繁",
		"rejected":              "服务拒绝了这些参数（HTTP {code}）",
		"conflict":              "服务报告与当前状态冲突（HTTP {code}），例如对象已存在",
		"unauthorized":          "服务拒绝了此次调用（HTTP {code}）",
		"missing":               "服务未找到所请求的对象（HTTP {code}）",
		"missing:path":          "服务未找到 {path} 对应的对象（HTTP {code}）",
		"request_timeout":       "服务读取请求超时（HTTP 408）",
		"throttled":             "服务正在限流（HTTP 429）",
		"unavailable":           "服务暂时不可用（HTTP 503）",
		"server_error":          "服务出错（HTTP {code}）",
		"gateway_timeout":       "服务超时（HTTP 504）",
		"not_implemented":       "服务不支持此调用（HTTP {code}）",
		"unexpected":            "服务返回了意外的响应（HTTP {code}）",
		"bad_response":          "服务的响应（HTTP {code}）无法读取",
		"bad_response:done":     "操作已执行，但服务的响应（HTTP {code}）无法读取",
		"connect":               "无法连接到服务，请求未发送",
		"reset":                 "请求发送前与服务的连接中断",
		"reset:sent":            "请求发送后、收到响应前与服务的连接中断",
		"deadline":              "服务在 {timeout}内没有响应",
		"deadline:sent":         "服务收到请求后在 {timeout}内没有响应",
		"deadline:done":         "操作已执行，但响应未能在 {timeout}内到达",
		"tls":                   "服务的证书不受信任（配置问题）",
		"auth":                  "无法获取访问该服务的凭据，请求未发送",
		"invalid_request":       "无法用这些值构造发往服务的请求，请求未发送",
		"circuit_open":          "服务持续出错，调用已暂停",
		"bulkhead":              "对该服务的并发调用过多",
		"canceled":              "调用在送达服务前被取消",
		"canceled:sent":         "调用在送达服务后被取消",
		"store_unavailable":     "暂时无法校验幂等键，请求未发送",
		"in_flight_timeout":     "使用该幂等键的上一次调用仍在进行",
		"outcome_lost":          "使用该幂等键的上一次调用被中断，本次未重新发送（幂等命中）",
		"rule:ok":               "调用成功",
		"rule:empty":            "调用成功，但没有找到结果",
		"rule:bad_args":         "服务拒绝了这些参数",
		"rule:forbidden":        "服务以权限不足为由拒绝了此次调用",
		"rule:not_found":        "服务未找到所请求的对象",
		"rule:timeout":          "服务超时",
		"rule:upstream":         "服务报告了错误",
		"rule:bad_args:retry":   "服务暂时拒绝了此次调用",
		"rule:forbidden:retry":  "服务暂时拒绝了此次调用",
		"rule:not_found:retry":  "服务暂未找到所请求的对象",
		"status:ok":             "调用成功",
		"status:empty":          "调用成功，但没有找到结果",
		"status:bad_args":       "参数被拒绝",
		"status:forbidden":      "此调用不被允许",
		"status:not_found":      "未找到所请求的对象",
		"status:timeout":        "调用超时",
		"status:upstream":       "服务出错",
		"status:ok:done":        "调用成功，操作已执行",
		"status:empty:done":     "操作已执行，服务未返回数据",
		"status:bad_args:done":  "服务报告参数有问题，但操作已执行",
		"status:forbidden:done": "服务报告拒绝，但操作已执行",
		"status:not_found:done": "服务报告未找到对象，但操作已执行",
		"status:timeout:done":   "操作已执行，但响应未能及时到达",
		"status:upstream:done":  "操作已执行，但服务报告了错误",
		"replay":                "幂等命中，返回上一次调用的结果（本次未重新发送）：",
		"replay:ok:done":        "该请求此前已成功执行过，本次未重复发送（幂等命中）",
		"replay:done":           "使用该幂等键的上一次调用已执行该操作，本次未重复发送（幂等命中）",
		"replay:unknown":        "使用该幂等键的上一次调用结果未知，本次未重新发送（幂等命中）",
		"list:more":             "等",
		"said":                  "。后端返回：「{said}」",

		"act:ok":                         "。",
		"act:empty":                      "；可放宽条件或换用其他参数，或告知用户没有匹配的内容。",
		"act:empty:new_key":              "；可放宽条件或换用其他参数，并使用新的幂等键再调用（当前键已用过），或告知用户没有匹配的内容。",
		"act:fix":                        "；请修改参数后再调用。",
		"act:fix:schema":                 "；请修正后再调用。",
		"act:fix:schema:all":             "；请全部修正后再调用。",
		"act:fix:bad_json":               "；请发送一个有效的 JSON 对象。",
		"act:fix:too_large":              "；请减少数据量后再调用。",
		"act:fix:key_missing":            "；请添加 idempotency_key 参数（或 Idempotency-Key 请求头），取一个新的唯一值（如 UUID）后再调用。",
		"act:fix:key_malformed":          "；请改用有效的键后再调用。",
		"act:fix:key_conflict":           "；请只发送一个键。",
		"act:fix:key_mismatch":           "；请为这些参数使用新的幂等键。",
		"act:fix:conflict":               "；请先确认当前状态，再决定是否修改。",
		"act:fix:new_key":                "；请修改参数，并使用新的幂等键再调用（当前键已用过）。",
		"act:fix:new_key:conflict":       "；请先确认当前状态，再决定是否修改；如需再次调用，须使用新的幂等键（当前键已用过）。",
		"act:check":                      "；请核对标识后再调用。",
		"act:check:new_key":              "；请核对标识，并使用新的幂等键再调用（当前键已用过）。",
		"act:check:unknown_tool":         "；请调用已列出的工具。",
		"act:check:unknown_tool:list":    "；可用的工具有：{tools}。",
		"act:final":                      "，重试无用；请告知用户该工具暂时无法使用。",
		"act:final:denied":               "，重试无用；请改用其他工具或告知用户。",
		"act:final:budget":               "；在此之前请勿调用该工具，如任务无法等待请告知用户。",
		"act:final:new_key":              "，重试无用；请告知用户该工具暂时无法使用（再次调用须使用新的幂等键）。",
		"act:new_key":                    "；再次调用须使用新的幂等键（当前键已用过）。",
		"act:retry":                      "；可原样重试，若仍失败请告知用户。",
		"act:retry:wait":                 "；请在 {retry}原样重试，若仍失败请告知用户。",
		"act:retry:tried":                "（已尝试 {attempts} 次）；可再原样重试一次，若仍失败请告知用户。",
		"act:retry:tried:wait":           "（已尝试 {attempts} 次）；可在 {retry}再原样重试一次，若仍失败请告知用户。",
		"act:retry:long":                 "；如任务可以等待，请在 {retry}原样重试，若仍失败请告知用户；如任务无法等待，请立即告知用户。",
		"act:retry:tried:long":           "（已尝试 {attempts} 次）；如任务可以等待，可在 {retry}再原样重试一次，若仍失败请告知用户；如任务无法等待，请立即告知用户。",
		"act:done":                       "；请勿重复执行。",
		"act:unknown":                    "，操作可能已执行也可能未执行；请先确认是否已生效（或询问用户），确认未生效后再用新的幂等键重新调用。",
		"act:same_key":                   "，操作可能已执行也可能未执行；请使用相同的幂等键重试（不会重复执行），若仍失败请告知用户。",
		"act:same_key:wait":              "，操作可能已执行也可能未执行；请在 {retry}使用相同的幂等键重试（不会重复执行），若仍失败请告知用户。",
		"act:same_key:tried":             "（已尝试 {attempts} 次），操作可能已执行也可能未执行；可使用相同的幂等键再重试一次（不会重复执行），若仍失败请告知用户。",
		"act:same_key:tried:wait":        "（已尝试 {attempts} 次），操作可能已执行也可能未执行；可在 {retry}使用相同的幂等键再重试一次（不会重复执行），若仍失败请告知用户。",
		"act:same_key:long":              "，操作可能已执行也可能未执行；如任务可以等待，请在 {retry}使用相同的幂等键重试（不会重复执行），若仍失败请告知用户；如任务无法等待，请立即告知用户。",
		"act:same_key:tried:long":        "（已尝试 {attempts} 次），操作可能已执行也可能未执行；如任务可以等待，可在 {retry}使用相同的幂等键再重试一次（不会重复执行），若仍失败请告知用户；如任务无法等待，请立即告知用户。",
		"act:same_key:in_flight_timeout": "；请使用相同的幂等键重试，以在其完成后获取结果。",
	}
}
