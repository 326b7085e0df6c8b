package openapi

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxPolicyBytes is the largest policy file toolgate loads (config's
// limit), so a draft over it would not pass toolgate check.
const maxPolicyBytes = 8 << 20

// placeholderURL stands in for a backend whose address the document does
// not give.
const placeholderURL = "http://127.0.0.1:8000"

// finish renders the draft and checks that it compiles. A tool that does
// not compile is left out with a comment naming the error, and the rest is
// rendered again.
func (b *builder) finish(tools []*toolDraft, skipped []Skipped) (*Draft, error) {
	fileName := b.spec + " (draft)"
	for range len(tools) + 1 {
		text, err := b.render(tools, skipped)
		if err != nil {
			return nil, err
		}
		if len(text) > maxPolicyBytes {
			return nil, fmt.Errorf("%s: %w: the draft of %d tools is %.1f MiB, over the %d MiB a policy file may have; select fewer operations (-operations)", b.spec, ErrTooLarge, len(tools), float64(len(text))/(1<<20), maxPolicyBytes>>20)
		}
		err = selfCheck(fileName, text, b.auth.env...)
		if err == nil {
			d := &Draft{YAML: text, Skipped: skipped, Env: b.auth.env}
			for _, t := range tools {
				d.Tools = append(d.Tools, Tool{Name: t.name, OperationID: t.op.op.OperationID, Method: t.op.method, Path: t.op.path, SideEffect: t.sideEffect})
			}
			return d, nil
		}
		kept, dropped, ok := DropUncompiled(tools, func(t *toolDraft) string { return t.name }, err)
		if !ok {
			return nil, fmt.Errorf("%s: the draft does not compile: %w", b.spec, err)
		}
		for _, u := range dropped {
			skipped = append(skipped, Skipped{OperationID: u.Tool.op.op.OperationID, Method: u.Tool.op.method, Path: u.Tool.op.path,
				Reason: "the generated tool does not compile: " + u.Reason})
		}
		tools = kept
	}
	return nil, fmt.Errorf("%s: the draft does not compile", b.spec)
}

func (b *builder) render(tools []*toolDraft, skipped []Skipped) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	root.HeadComment = b.header()

	root.Content = append(root.Content, str("version"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "1"})

	upKey, upVal := b.upstreamNode()
	upstreams := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{upKey, upVal}}
	root.Content = append(root.Content, str("upstreams"), upstreams)

	toolsKey := str("tools")
	if len(skipped) > 0 {
		lines := []string{"Not imported:"}
		for _, s := range skipped {
			id := ""
			if s.OperationID != "" {
				id = " (operationId " + s.OperationID + ")"
			}
			lines = append(lines, fmt.Sprintf("- %s %s%s: %s", s.Method, s.Path, id, oneLine(s.Reason)))
		}
		toolsKey.HeadComment = comment(lines, 0)
	}
	toolsVal := &yaml.Node{Kind: yaml.MappingNode}
	if len(tools) == 0 {
		toolsVal.Style = yaml.FlowStyle
	}
	for _, t := range tools {
		k, v := b.toolNode(t)
		toolsVal.Content = append(toolsVal.Content, k, v)
	}
	root.Content = append(root.Content, toolsKey, toolsVal)

	if b.auth.block != nil {
		// toolgate refuses to lend a credential to callers it cannot
		// identify unless the policy says so (docs/policy.md, access).
		accessKey := str("access")
		accessKey.HeadComment = comment([]string{
			fmt.Sprintf("toolgate sends the credential of %s in place of any a caller sends, for every caller it serves. TODO: list your callers in access.callers and set access.default: deny, or forward each caller's own credential (forward_headers) instead of auth; until then this line says that anyone who reaches toolgate may use it:", b.upstream),
		}, 0)
		shared := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{str(b.upstream)}}
		root.Content = append(root.Content, accessKey, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{str("shared_credentials"), shared}})
	}

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, fmt.Errorf("%s: writing the draft: %w", b.spec, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("%s: writing the draft: %w", b.spec, err)
	}
	return spaceOut(buf.Bytes()), nil
}

func (b *builder) header() string {
	title, version := "", ""
	if b.doc.Info != nil {
		title, version = oneLine(b.doc.Info.Title), oneLine(b.doc.Info.Version)
	}
	about := b.kind
	if title != "" {
		about = strings.TrimSpace(title+" "+version) + ", " + b.kind
	}
	passes := "It passes `toolgate check` as written."
	if len(b.auth.env) > 0 {
		passes = fmt.Sprintf("It passes `toolgate check` as written once %s are set.", strings.Join(b.auth.env, ", "))
	}
	defines := "It defines only upstreams and tools, so it can join a policy directory whose other files set server, state and access."
	if b.auth.block != nil {
		defines = "It defines upstreams, tools and the credential's access.shared_credentials, so it can join a policy directory whose other files set server, state and the rest of access."
	}
	return comment([]string{
		fmt.Sprintf("toolgate policy draft imported from %s (%s) by `toolgate import openapi`.", b.spec, about),
		passes + " " + defines + " To finish it, work through the TODO comments:",
		"- response: what the agent sees (data) and what counts as nothing found (empty), CEL over status, headers, body and args; the suggestions under each tool compile as they are.",
		"- errors: rules only where the backend departs from toolgate's default status table, for example a legacy API that answers 200 with an error code:",
		code("    errors:"),
		code("      - when: status == 200 && has(body.code) && body.code == \"E_NOPERM\""),
		code("        status: forbidden"),
		"- cost and timeout of each tool; timeout, retries, breaker and credentials of the upstream.",
		"See docs/policy.md for every key.",
	}, 0)
}

// upstreamNode writes the upstream: servers[0] with its variables' defaults,
// or a placeholder, and hints for timeouts and credentials.
func (b *builder) upstreamNode() (*yaml.Node, *yaml.Node) {
	key := str(b.upstream)
	u, urlNote, others := b.serverURL()
	urlKey := str("url")
	lines := []string{"TODO: timeout (default 2s), max_concurrent, retries and breaker: see docs/policy.md."}
	if len(others) > 0 {
		lines = append(lines, "The document also lists: "+strings.Join(others, ", "))
	}
	urlKey.HeadComment = comment(lines, 4)
	urlVal := str(escapeEnv(u))
	urlVal.LineComment = urlNote
	up := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{urlKey, urlVal}}
	a := b.auth
	if a.block != nil || len(a.notes) > 0 {
		var notes []string
		if a.block != nil {
			notes = append(notes, fmt.Sprintf("From the security scheme %s. Set %s in the environment (or use the _file form of each secret, see docs/policy.md).", a.scheme, strings.Join(a.env, ", ")))
		}
		notes = append(notes, a.notes...)
		authKey := str("auth")
		if a.block == nil {
			// Only comments: they go above the next entry or at the end.
			up.Content[len(up.Content)-1].LineComment = urlNote
			urlKey.HeadComment = comment(append(lines, notes...), 4)
			return key, up
		}
		authKey.HeadComment = comment(notes, 4)
		up.Content = append(up.Content, authKey, valueNode(a.block, false))
	}
	return key, up
}

// serverURL is the upstream's base URL: servers[0] with the defaults of its
// variables, without a trailing slash. A relative or unusable URL is put on
// the placeholder host, with a TODO.
func (b *builder) serverURL() (u, note string, others []string) {
	servers := b.doc.Servers
	if len(servers) == 0 || servers[0] == nil {
		return placeholderURL, "TODO: the document names no server; set the backend's base URL", nil
	}
	for _, s := range servers[1:] {
		if s != nil {
			others = append(others, s.URL)
		}
	}
	s := servers[0]
	raw := s.URL
	for _, name := range slices.Sorted(maps.Keys(s.Variables)) {
		if v := s.Variables[name]; v != nil {
			raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
		}
	}
	parsed, err := url.Parse(raw)
	switch {
	case err != nil || strings.ContainsAny(raw, "{}"):
		return placeholderURL, fmt.Sprintf("TODO: servers[0] is %q, which is not a usable URL; set the backend's base URL", s.URL), others
	case parsed.Scheme == "" && parsed.Host == "":
		first, _, _ := strings.Cut(strings.TrimPrefix(parsed.Path, "/"), "/")
		if !strings.HasPrefix(parsed.Path, "/") && strings.ContainsAny(first, ".:") {
			// "api.example.com/v1": a host without a scheme.
			if withScheme, err := url.Parse("https://" + raw); err == nil && withScheme.Host != "" && withScheme.User == nil && withScheme.RawQuery == "" && withScheme.Fragment == "" {
				withScheme.Path = strings.TrimRight(withScheme.Path, "/")
				withScheme.RawPath = ""
				return withScheme.String(), fmt.Sprintf("TODO: servers[0] is %q, without a scheme; https is assumed", s.URL), others
			}
		}
		p := strings.TrimRight("/"+strings.TrimPrefix(parsed.EscapedPath(), "/"), "/")
		return placeholderURL + p, fmt.Sprintf("TODO: servers[0] is the relative URL %q; set the backend's host", s.URL), others
	case parsed.Scheme != "http" && parsed.Scheme != "https" || parsed.Host == "" || parsed.User != nil || parsed.RawQuery != "" || parsed.Fragment != "":
		return placeholderURL, fmt.Sprintf("TODO: servers[0] is %q, which toolgate cannot use (want http or https, no credentials, query or fragment); set the backend's base URL", s.URL), others
	}
	parsed.Path = strings.TrimRight(parsed.Path, "/")
	parsed.RawPath = ""
	if s.URL != raw {
		return parsed.String(), "servers[0] with the defaults of its variables", others
	}
	return parsed.String(), "servers[0]", others
}

func (b *builder) toolNode(t *toolDraft) (*yaml.Node, *yaml.Node) {
	key := str(t.name)
	id := "no operationId"
	if t.op.op.OperationID != "" {
		id = "operationId " + t.op.op.OperationID
	}
	head := []string{fmt.Sprintf("%s %s (%s)", t.op.method, t.op.path, id)}
	if t.op.op.Deprecated {
		head = append(head, "The document marks this operation deprecated.")
	}
	key.HeadComment = comment(head, 2)

	m := &yaml.Node{Kind: yaml.MappingNode}
	add := func(k *yaml.Node, v *yaml.Node) { m.Content = append(m.Content, k, v) }
	add(str("description"), str(escapeEnv(t.description)))
	add(str("upstream"), str(b.upstream))
	if t.writeSideEff {
		v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t.sideEffect)}
		v.LineComment = t.sideEffectNote
		add(str("side_effect"), v)
	}
	argsKey := str("args")
	argsKey.HeadComment = comment(t.argsNotes, 4)
	add(argsKey, valueNode(t.args, false))

	req := &yaml.Node{Kind: yaml.MappingNode}
	req.Content = append(req.Content, str("method"), str(t.method), str("path"), str(escapeEnv(t.path)))
	if t.query.len() > 0 {
		req.Content = append(req.Content, str("query"), bindingNode(t.query))
	}
	if t.headers.len() > 0 {
		req.Content = append(req.Content, str("headers"), bindingNode(t.headers))
	}
	switch {
	case t.bodyArg != "":
		req.Content = append(req.Content, str("body"), str(t.bodyArg))
	case t.body.len() > 0:
		req.Content = append(req.Content, str("body"), bindingNode(t.body))
	}
	if t.encoding != "" && (t.bodyArg != "" || t.body.len() > 0) {
		req.Content = append(req.Content, str("encoding"), str(t.encoding))
	}
	reqKey := str("request")
	reqKey.HeadComment = comment(t.requestNotes, 4)
	add(reqKey, req)
	last := reqKey
	if t.responseSchema != nil {
		schemaKey := str("schema")
		schemaKey.HeadComment = comment(append(t.dataNotes, "The schema of the answer, from the document: an answer that departs from it counts in toolgate_contract_violations_total."), 6)
		resKey := str("response")
		add(resKey, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{schemaKey, valueNode(t.responseSchema, false)}})
		last = resKey
	}
	last.FootComment = comment(t.responseNotes, 4)
	return key, m
}

// bindingNode writes a query, headers or body shape (backend name ->
// argument, nested shape or constant), on one line when it is short.
func bindingNode(m *omap) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	width := 0
	for _, k := range m.keys {
		var v *yaml.Node
		switch val := m.vals[k].(type) {
		case string:
			v = str(val)
			width += len(k) + len(val) + 4
		case constLeaf:
			v = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{str("const"), valueNode(escapeEnvIn(val.v), true)}}
			v.Style = yaml.FlowStyle
			width += len(k) + 12 + len(fmt.Sprint(val.v))
		case *omap:
			v = bindingNode(val)
			width += 1000 // nested shapes read best in block style
		}
		n.Content = append(n.Content, str(k), v)
	}
	if width <= 80 {
		n.Style = yaml.FlowStyle
	}
	return n
}

// escapeEnvIn escapes "${" in the strings of a JSON value.
func escapeEnvIn(v any) any {
	switch t := v.(type) {
	case string:
		return escapeEnv(t)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = escapeEnvIn(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = escapeEnvIn(e)
		}
		return out
	}
	return v
}

// valueNode writes a JSON value. A schema whose values are all scalars (or
// lists of scalars) and that fits on a line is written in flow style, as a
// person would write it.
func valueNode(v any, flowOK bool) *yaml.Node {
	switch t := v.(type) {
	case *omap:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for _, k := range t.keys {
			n.Content = append(n.Content, str(k), valueNode(t.vals[k], true))
		}
		if flowOK && len(t.keys) > 0 && flatWidth(t) <= 90 {
			n.Style = yaml.FlowStyle
		}
		if len(t.keys) == 0 {
			n.Style = yaml.FlowStyle
		}
		return n
	case map[string]any:
		m := newOmap()
		for _, k := range slices.Sorted(maps.Keys(t)) {
			m.set(k, t[k])
		}
		return valueNode(m, flowOK)
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		scalars := true
		for _, e := range t {
			c := valueNode(e, true)
			if c.Kind != yaml.ScalarNode {
				scalars = false
			}
			n.Content = append(n.Content, c)
		}
		if scalars {
			n.Style = yaml.FlowStyle
		}
		return n
	case []string:
		return valueNode(stringsToAny(t), flowOK)
	case string:
		return str(t)
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	case float64:
		return number(t)
	case float32:
		return number(float64(t))
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(t)}
	case int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(t, 10)}
	case uint64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(t, 10)}
	case fmt.Stringer: // json.Number and the like
		return str(t.String())
	}
	return str(fmt.Sprint(v))
}

func number(f float64) *yaml.Node {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return str(strconv.FormatFloat(f, 'g', -1, 64))
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(f), 10)}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(f, 'g', -1, 64)}
}

// flatWidth estimates the one-line width of a schema, or returns a large
// number when it holds nested objects or strings with line breaks.
func flatWidth(m *omap) int {
	w := 2
	for _, k := range m.keys {
		w += len(k) + 4
		switch v := m.vals[k].(type) {
		case *omap, map[string]any:
			return math.MaxInt
		case []any:
			for _, e := range v {
				switch e := e.(type) {
				case *omap, map[string]any, []any:
					return math.MaxInt
				case string:
					if strings.ContainsAny(e, "\n\r") {
						return math.MaxInt
					}
					w += len(e) + 4
				default:
					w += len(fmt.Sprint(e)) + 2
				}
			}
		case string:
			if strings.ContainsAny(v, "\n\r") {
				return math.MaxInt
			}
			w += len(v) + 2
		default:
			w += len(fmt.Sprint(v))
		}
	}
	return w
}

// commentWidth is where prose comment lines are wrapped.
const commentWidth = 100

// comment joins comment lines for a node at the given indentation: lines
// marked with code are kept as they are, prose is wrapped at commentWidth.
func comment(lines []string, indent int) string {
	var out []string
	for _, l := range lines {
		if c, ok := strings.CutPrefix(l, codeMark); ok {
			out = append(out, c)
			continue
		}
		if item, ok := strings.CutPrefix(l, "- "); ok {
			// A list item: continuation lines hang under its text.
			for i, w := range wrap(item, commentWidth-indent-4) {
				if i == 0 {
					out = append(out, "- "+w)
				} else {
					out = append(out, "  "+w)
				}
			}
			continue
		}
		out = append(out, wrap(l, commentWidth-indent-2)...)
	}
	return strings.Join(out, "\n")
}

// wrap breaks prose into lines of at most width bytes at spaces; a word
// longer than width stays whole.
func wrap(s string, width int) []string {
	var out []string
	line := ""
	for _, w := range unbreakable(strings.Fields(s)) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) <= width:
			line += " " + w
		default:
			out = append(out, line)
			line = w
		}
	}
	if line != "" || len(out) == 0 {
		out = append(out, line)
	}
	return out
}

// unbreakable joins the words of a `code span` so wrapping keeps it whole.
func unbreakable(words []string) []string {
	var out []string
	open := false
	for _, w := range words {
		if open {
			out[len(out)-1] += " " + w
		} else {
			out = append(out, w)
		}
		if strings.Count(w, "`")%2 == 1 {
			open = !open
		}
	}
	return out
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// escapeEnv protects "${" in values the policy loader expands: "$${" is a
// literal "${".
func escapeEnv(s string) string { return strings.ReplaceAll(s, "${", "$${") }

// spaceOut puts a blank line between top-level sections and between the
// entries of a section, so the draft reads like a hand-written policy.
// yaml.v3 writes no blank lines of its own except after foot comments.
func spaceOut(text []byte) []byte {
	lines := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	var out []string
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if i > 0 && trimmed != "" && !strings.HasPrefix(trimmed, "#") && indent(l) <= 2 {
			// The entry starts at the comment block right above its key.
			start := len(out)
			for start > 0 && strings.HasPrefix(strings.TrimSpace(out[start-1]), "#") && indent(out[start-1]) == indent(l) {
				start--
			}
			if start > 0 {
				prev := out[start-1]
				if strings.TrimSpace(prev) != "" && indent(prev) >= indent(l) {
					out = append(out[:start], append([]string{""}, out[start:]...)...)
				}
			}
		}
		out = append(out, l)
	}
	// A foot comment followed by the next entry leaves two blank lines.
	var dedup []string
	for _, l := range out {
		if l == "" && len(dedup) > 0 && dedup[len(dedup)-1] == "" {
			continue
		}
		dedup = append(dedup, l)
	}
	return []byte(strings.Join(dedup, "\n") + "\n")
}
