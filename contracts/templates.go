package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/template/parse"
	"unicode"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
	template "github.com/toolgate/toolgate/internal/texttemplate"
)

// maxTemplateBytes is how much a message template may write before it is
// stopped: far more than a message keeps (MaxMessageChars, after white
// space is collapsed), and a bound on the work a template does writing.
const maxTemplateBytes = 64 << 10

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

// Templates are a tool's own words for what happened, one Go text/template
// (internal/texttemplate: text/template without method calls)
// per status or per reason, executed with .args (the arguments), .data
// (the envelope data), .detail (the backend's words for a failure, from
// response.error_detail) and .text (the answer as text). What to do next
// is not theirs to say: the catalogue adds it from the envelope's fields
// (Catalog.Compose).
//
// A template named after a reason ("budget", "throttled") speaks for that
// reason wherever it occurs. A template named after a status ("ok" and
// "empty" are reasons too, and count as statuses) speaks only for what the
// status normally means and a side effect it can describe (see
// Templates.forOutcome): never for a gateway reason of the table (access,
// budget, rate limit, circuit, bulkhead, connect, TLS, store, key, schema),
// nor for an outcome whose retryability differs from the status's usual
// one, nor for an unknown side effect, nor for a performed action unless
// the status is ok.
//
// A template that prints a value the call does not have (an argument or
// data member that is absent or null, .detail or .text when empty) is not
// used: the catalogue speaks instead, rather than "Found  results".
type Templates map[string]*messageTemplate

type messageTemplate struct {
	tpl *template.Template
	// The template reads only these top-level keys of .data (or all of it
	// when whole is set): only they are decoded per call.
	dataKeys []string
	whole    bool
	// readsText: the template reads .text (or may: whole), so the call
	// keeps the answer's text for it.
	readsText bool
	// argKeys are the top-level arguments it reads; readsDetail says it
	// reads .detail. Only `check` looks at them (Contract.TemplateWarnings).
	argKeys     []string
	readsDetail bool
	// fast holds the template as text and field references when that is
	// all it is (the common case), rendered without reflection.
	fast []templatePart
}

// templatePart is literal text, or a field path such as .args.q.
type templatePart struct {
	text string
	path []string
}

// compileTemplates parses message templates keyed by status or reason.
// Templates run with missingkey=zero, so a missing argument renders empty
// instead of failing.
func compileTemplates(re *RuleEnv, specs map[string]string) (Templates, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	t := make(Templates, len(specs))
	names := make([]string, 0, len(specs))
	for name := range specs {
		names = append(names, name)
	}
	slices.Sort(names) // the first error is the same on every load
	for _, name := range names {
		text := specs[name]
		if msg := templateName(name); msg != "" {
			return nil, &ruleError{Field: name, Msg: msg}
		}
		mt, err := re.template(name, text)
		if err != nil {
			return nil, err
		}
		t[name] = mt
	}
	return t, nil
}

// templateKey is a template's name (its status or reason) and text.
type templateKey struct{ name, text string }

// template returns the compiled message template name of text, compiled
// once per environment (each time without one).
func (re *RuleEnv) template(name, text string) (*messageTemplate, error) {
	if re == nil {
		return compileTemplate(name, text)
	}
	key := templateKey{name, text}
	re.mu.Lock()
	mt := re.templates[key]
	re.mu.Unlock()
	if mt != nil {
		return mt, nil
	}
	mt, err := compileTemplate(name, text)
	if err != nil {
		return nil, err
	}
	re.mu.Lock()
	re.templates[key] = mt
	re.mu.Unlock()
	return mt, nil
}

// compileTemplate parses one message template and notes what it reads.
func compileTemplate(name, text string) (*messageTemplate, error) {
	tpl, err := template.New(name).Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, &ruleError{Field: name, Msg: strings.TrimPrefix(err.Error(), "template: ")}
	}
	mt := &messageTemplate{tpl: tpl, fast: simpleTemplate(tpl)}
	keys, args := map[string]bool{}, map[string]bool{}
	walkTemplate(tpl.Tree.Root, func(ident []string) {
		switch {
		case len(ident) >= 1 && ident[0] == "$":
			mt.whole = true
		case len(ident) == 1 && ident[0] == "data":
			mt.whole = true
		case len(ident) >= 1 && ident[0] == "text":
			mt.readsText = true
		case len(ident) >= 1 && ident[0] == "detail":
			mt.readsDetail = true
		case len(ident) >= 2 && ident[0] == "data" && !keys[ident[1]]:
			keys[ident[1]] = true
			mt.dataKeys = append(mt.dataKeys, ident[1])
		case len(ident) >= 2 && ident[0] == "args" && !args[ident[1]]:
			args[ident[1]] = true
			mt.argKeys = append(mt.argKeys, ident[1])
		}
	})
	mt.readsText = mt.readsText || mt.whole
	return mt, nil
}

// ReadText reports whether any template reads the answer's text (.text),
// which the call then keeps in Outcome.Text.
func (t Templates) ReadText() bool {
	for _, mt := range t {
		if mt.readsText {
			return true
		}
	}
	return false
}

// answerWords are what a template reads of the answer besides its data:
// the backend's error detail and the answer's text.
type answerWords struct {
	detail, text string
}

// root is the value a full template runs on. An empty .detail or .text is
// absent (nil), as a missing argument is, so printing it is noticed.
func (mt *messageTemplate) root(args map[string]any, data json.RawMessage, members []Member, w answerWords) map[string]any {
	root := map[string]any{"args": args, "data": mt.decodeData(data, members)}
	if w.detail != "" {
		root["detail"] = w.detail
	}
	if w.text != "" {
		root["text"] = w.text
	}
	return root
}

// templateName says why a template may not be named name, or "" when it
// may: a status, or a reason other than rule and replayed (which have no
// words of their own: a rule's outcome speaks through its status, a replay
// through the stored result).
func templateName(name string) string {
	if _, ok := parseStatus(name); ok {
		return ""
	}
	switch r, ok := parseReason(name); {
	case !ok:
		return fmt.Sprintf("%q is not a status or a reason", name)
	case r == ReasonRule:
		return `"rule" has no template of its own: a rule's outcome takes the template of its status`
	case r == ReasonReplayed:
		return `"replayed" has no template of its own: a replay repeats the stored result's message`
	case r == ReasonUnknownTool:
		return `"unknown_tool" has no template: a call of a tool that does not exist reaches no tool's messages`
	}
	return ""
}

// forOutcome returns the template that speaks for an outcome, or nil. effect is
// the side effect the envelope shows (none for a read-only tool).
func (t Templates) forOutcome(o *Outcome, effect SideEffect) *messageTemplate {
	if len(t) == 0 {
		return nil
	}
	if _, isStatus := parseStatus(string(o.Reason)); !isStatus && o.Reason != ReasonRule {
		if mt := t[string(o.Reason)]; mt != nil {
			return mt
		}
	}
	row, ok := rowOf(o.Reason)
	if !ok || row.Gateway {
		return nil
	}
	mt := t[string(o.Status)]
	switch {
	case mt == nil:
		return nil
	case !o.Status.Success() && o.Retryable != statusRetryable(o.Status):
		return nil
	case effect == SideEffectUnknown:
		return nil
	case effect == SideEffectDone && o.Status != StatusOK:
		// "Nothing matched; try broader keywords" was written for a
		// search, not for an action that was performed.
		return nil
	}
	return mt
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

// render executes the template named after status, if any. A template that
// fails at run time yields ok=false so the catalogue message is used
// instead.
func (t Templates) render(status Status, args map[string]any, data json.RawMessage) (string, bool) {
	return t.renderMembers(status, args, data, nil)
}

// renderMembers is render with the data's top-level members already
// located (see Rules.DataMembers), so the data is not scanned again.
func (t Templates) renderMembers(status Status, args map[string]any, data json.RawMessage, members []Member) (string, bool) {
	mt := t[string(status)]
	if mt == nil {
		return "", false
	}
	return mt.render(args, data, members, answerWords{})
}

// render executes the template. members, when not nil, locate the data's
// top-level members (see Rules.DataMembers), so the data is not scanned
// again. ok is false when the template failed, or printed a value the call
// does not have: the catalogue then speaks instead.
func (mt *messageTemplate) render(args map[string]any, data json.RawMessage, members []Member, w answerWords) (string, bool) {
	if mt.fast != nil {
		return mt.renderFast(args, data, members, w)
	}
	root := mt.root(args, data, members, w)
	buf := cappedBuffer{b: make([]byte, 0, 128), limit: maxTemplateBytes}
	if err := mt.tpl.Execute(&buf, root); err != nil && !errors.Is(err, errTemplateFull) {
		return "", false
	}
	// A missing value prints as Go's "<no value>" (missingkey=zero over
	// maps of any): the template printed something the call lacks.
	if bytes.Contains(buf.b, []byte("<no value>")) {
		return "", false
	}
	return finishRendered(buf.b, buf.full), true
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
				if v, ok := decodeJSON(raw); ok {
					m[k] = v
				}
			}
		}
		return m
	case !mt.whole:
		// Only the keys the template reads are decoded into Go values;
		// the rest of the data stays on the tape.
		if m, ok := dataMembers(data, mt.dataKeys); ok {
			return m
		}
	}
	v, _ := decodeJSON(data)
	return v
}

// decodeJSON decodes JSON text as encoding/json decodes it into an any;
// ok is false when it is not one JSON value.
func decodeJSON(raw []byte) (any, bool) {
	tape, err := jsontape.Parse(raw)
	if err != nil {
		return nil, false
	}
	defer tape.Release()
	return tape.Root().Native(), true
}

// dataMembers decodes only the named members of a JSON object (as
// encoding/json would, numbers as float64; of repeated keys the last
// counts). ok is false when data is not a valid JSON object.
func dataMembers(data []byte, keys []string) (map[string]any, bool) {
	tape, root, err := jsontape.ParseObject(data)
	if err != nil {
		return nil, false
	}
	defer tape.Release()
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		if v, ok := root.Lookup(k); ok {
			out[k] = v.Native()
		}
	}
	return out, true
}

// renderFast renders a template of text and field references. An
// argument, or a top-level data member that is a scalar, is written
// directly; any other value is decoded as for a full template. ok is false
// when a reference has no value (absent, null, or an empty .detail or
// .text), as for a full template.
func (mt *messageTemplate) renderFast(args map[string]any, data json.RawMessage, members []Member, w answerWords) (string, bool) {
	b := make([]byte, 0, 128)
	var root map[string]any // built only for a part that needs it
	for _, p := range mt.fast {
		if len(b) > maxTemplateBytes {
			return finishRendered(b[:maxTemplateBytes], true), true
		}
		var v any
		switch {
		case p.path == nil:
			b = append(b, p.text...)
			continue
		case len(p.path) >= 2 && p.path[0] == "args":
			v = lookupPath(args, p.path[1:])
		case len(p.path) == 1 && (p.path[0] == "detail" || p.path[0] == "text"):
			word := w.detail
			if p.path[0] == "text" {
				word = w.text
			}
			if word == "" {
				return "", false
			}
			b = append(b, word...)
			continue
		case len(p.path) == 2 && p.path[0] == "data" && !mt.whole && members != nil:
			raw, ok := memberValue(data, members, p.path[1])
			if !ok || string(raw) == "null" {
				return "", false
			}
			if out, ok := appendScalar(b, raw); ok {
				b = out
				continue
			}
			fallthrough
		default:
			if root == nil {
				root = mt.root(args, data, members, w)
			}
			v = lookupPath(root, p.path)
		}
		if v == nil {
			return "", false
		}
		b = appendTemplateValue(b, v)
	}
	if len(b) > maxTemplateBytes {
		return finishRendered(b[:maxTemplateBytes], true), true
	}
	return finishRendered(b, false), true
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

// TemplateWarnings lists the values the tool's message templates print
// that its calls can never have, one *FieldError per template and value
// (Field "messages.<name>"), in name order. Such a template is not wrong,
// but where it speaks the catalogue is used instead (a template that
// prints a missing value falls back), so it is most likely a mistake:
// a data key that response.data does not build, data in a template of an
// outcome that carries none, .detail without response.error_detail or
// where no failure is described, an argument the schema does not allow.
func (c *Contract) TemplateWarnings() []*FieldError {
	var out []*FieldError
	for _, name := range slices.Sorted(maps.Keys(c.Templates)) {
		mt := c.Templates[name]
		warn := func(format string, args ...any) {
			out = append(out, &FieldError{Field: "messages." + name, Msg: fmt.Sprintf(format, args...)})
		}
		keys, described := c.templateData(name)
		for _, k := range mt.dataKeys {
			switch {
			case !described:
			case keys == nil:
				warn("{{.data.%s}} never has a value: a %s outcome carries no data, so the catalogue's message is used", k, name)
			case !slices.Contains(keys, k):
				warn("{{.data.%s}} never has a value: the data has no key %s (it has %s)", k, k, strings.Join(keys, ", "))
			}
		}
		if closed, props := c.Schema.closedProperties(); closed {
			for _, k := range mt.argKeys {
				if !slices.Contains(props, k) {
					warn("{{.args.%s}} never has a value: %s is not an argument of this tool", k, k)
				}
			}
		}
		if mt.readsDetail {
			row, isReason := rowOf(Reason(name))
			switch {
			case c.Rules == nil || c.Rules.detail == nil:
				warn("{{.detail}} never has a value: the tool has no response.error_detail")
			case name == string(StatusOK) || name == string(StatusEmpty):
				warn("{{.detail}} never has a value: error_detail describes failures, not %s outcomes", name)
			case isReason && row.Gateway:
				warn("{{.detail}} never has a value: toolgate decides %s itself, without a backend answer", name)
			}
		}
	}
	return out
}

// templateData says what data the outcomes a template named name speaks
// for carry: described is false when that cannot be told (the backend's
// body as it comes); otherwise keys are the top-level keys the data can
// have, nil when it has none.
func (c *Contract) templateData(name string) (keys []string, described bool) {
	switch name {
	case string(StatusOK), string(StatusEmpty):
		if c.Rules != nil && c.Rules.dataOrder != nil {
			return c.Rules.dataOrder, true
		}
		return nil, false
	case string(ReasonSchema), string(ReasonBadJSON):
		return []string{"errors"}, true
	}
	return nil, true
}
