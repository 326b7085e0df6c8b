package openapi

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/config/policydoc"
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
		err = policydoc.Check(fileName, text, b.auth.env...)
		if err == nil {
			d := &Draft{YAML: text, Skipped: skipped, Env: b.auth.env}
			for _, t := range tools {
				d.Tools = append(d.Tools, Tool{Name: t.name, OperationID: t.op.op.OperationID, Method: t.op.method, Path: t.op.path, SideEffect: t.sideEffect})
			}
			return d, nil
		}
		kept, dropped, ok := policydoc.DropUncompiled(tools, func(t *toolDraft) string { return t.name }, err)
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

	root.Content = append(root.Content, policydoc.String("version"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "1"})

	upKey, upVal := b.upstreamNode()
	upstreams := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{upKey, upVal}}
	root.Content = append(root.Content, policydoc.String("upstreams"), upstreams)

	toolsKey := policydoc.String("tools")
	if len(skipped) > 0 {
		lines := []string{"Not imported:"}
		for _, s := range skipped {
			id := ""
			if s.OperationID != "" {
				id = " (operationId " + s.OperationID + ")"
			}
			lines = append(lines, fmt.Sprintf("- %s %s%s: %s", s.Method, s.Path, id, oneLine(s.Reason)))
		}
		toolsKey.HeadComment = policydoc.Comment(lines, 0)
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

	if b.auth.any() {
		// toolgate refuses to lend a credential to callers it cannot
		// identify unless the policy says so (docs/policy.md, access).
		accessKey := policydoc.String("access")
		what, them := "the credential", "it"
		if len(b.auth.named) > 0 {
			what, them = "the credentials", "them"
		}
		accessKey.HeadComment = policydoc.Comment([]string{
			fmt.Sprintf("toolgate sends %s of %s in place of any a caller sends, for every caller it serves. TODO: list your callers in access.callers and set access.default: deny, or forward each caller's own credential (forward_headers) instead of auth; until then this line says that anyone who reaches toolgate may use %s:", what, b.upstream, them),
		}, 0)
		shared := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Content: []*yaml.Node{policydoc.String(b.upstream)}}
		root.Content = append(root.Content, accessKey, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{policydoc.String("shared_credentials"), shared}})
	}

	text, err := policydoc.Encode(root)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.spec, err)
	}
	return text, nil
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
	switch {
	case len(b.auth.named) > 0:
		defines = "It defines upstreams, tools and the credentials' access.shared_credentials, so it can join a policy directory whose other files set server, state and the rest of access."
	case b.auth.any():
		defines = "It defines upstreams, tools and the credential's access.shared_credentials, so it can join a policy directory whose other files set server, state and the rest of access."
	}
	return policydoc.Comment([]string{
		fmt.Sprintf("toolgate policy draft imported from %s (%s) by `toolgate import openapi`.", b.spec, about),
		passes + " " + defines + " To finish it, work through the TODO comments:",
		"- response: what the agent sees (data) and what counts as nothing found (empty), CEL over status, headers, body and args; the suggestions under each tool compile as they are.",
		"- errors: rules only where the backend departs from toolgate's default status table, for example a legacy API that answers 200 with an error code:",
		policydoc.Code("    errors:"),
		policydoc.Code("      - when: status == 200 && has(body.code) && body.code == \"E_NOPERM\""),
		policydoc.Code("        status: forbidden"),
		"- cost and timeout of each tool; timeout, retries, breaker and credentials of the upstream.",
		"See docs/policy.md for every key.",
	}, 0)
}

// upstreamNode writes the upstream: servers[0] with its variables' defaults,
// or a placeholder, and hints for timeouts and credentials.
func (b *builder) upstreamNode() (*yaml.Node, *yaml.Node) {
	key := policydoc.String(b.upstream)
	u, urlNote, others := b.serverURL()
	urlKey := policydoc.String("url")
	lines := []string{"TODO: timeout (default 2s), max_concurrent, retries and breaker: see docs/policy.md."}
	if len(others) > 0 {
		lines = append(lines, "The document also lists: "+strings.Join(others, ", "))
	}
	urlKey.HeadComment = policydoc.Comment(lines, 4)
	urlVal := policydoc.String(policydoc.EscapeEnv(u))
	urlVal.LineComment = urlNote
	up := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{urlKey, urlVal}}
	a := b.auth
	if !a.any() {
		if len(a.notes) > 0 {
			// Only comments: they go above the url.
			urlKey.HeadComment = policydoc.Comment(append(lines, a.notes...), 4)
		}
		return key, up
	}
	if c := a.auth; c != nil {
		notes := append([]string{fmt.Sprintf("From the security scheme %s. Set %s in the environment (or use the _file form of each secret, see docs/policy.md).", c.scheme, strings.Join(c.env, ", "))}, c.notes...)
		authKey := policydoc.String("auth")
		authKey.HeadComment = policydoc.Comment(append(notes, a.notes...), 4)
		up.Content = append(up.Content, authKey, policydoc.Value(c.block, false))
		return key, up
	}
	credsKey := policydoc.String("credentials")
	credsKey.HeadComment = policydoc.Comment(append([]string{
		fmt.Sprintf("The operations need different credentials: each tool names the one it sends (credential), from the first scheme of its security requirement toolgate supports; a tool without a requirement sends none. Set %s in the environment (or use the _file form of each secret, see docs/policy.md).", strings.Join(a.env, ", ")),
	}, a.notes...), 4)
	creds := &yaml.Node{Kind: yaml.MappingNode}
	for _, c := range a.named {
		k := policydoc.String(c.name)
		k.HeadComment = policydoc.Comment(append([]string{fmt.Sprintf("From the security scheme %s.", c.scheme)}, c.notes...), 6)
		creds.Content = append(creds.Content, k, policydoc.Value(c.block, false))
	}
	up.Content = append(up.Content, credsKey, creds)
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
	key := policydoc.String(t.name)
	id := "no operationId"
	if t.op.op.OperationID != "" {
		id = "operationId " + t.op.op.OperationID
	}
	head := []string{fmt.Sprintf("%s %s (%s)", t.op.method, t.op.path, id)}
	if t.op.op.Deprecated {
		head = append(head, "The document marks this operation deprecated.")
	}
	key.HeadComment = policydoc.Comment(head, 2)

	m := &yaml.Node{Kind: yaml.MappingNode}
	add := func(k *yaml.Node, v *yaml.Node) { m.Content = append(m.Content, k, v) }
	add(policydoc.String("description"), policydoc.String(policydoc.EscapeEnv(t.description)))
	upKey := policydoc.String("upstream")
	add(upKey, policydoc.String(b.upstream))
	if tc := b.auth.tools[t.op]; tc.name != "" && len(b.auth.named) > 0 {
		k := policydoc.String("credential")
		k.HeadComment = policydoc.Comment(tc.notes, 4)
		add(k, policydoc.String(tc.name))
	} else if len(tc.notes) > 0 && (len(b.auth.named) > 0 || b.auth.auth == nil) {
		upKey.HeadComment = policydoc.Comment(tc.notes, 4)
	}
	if t.writeSideEff {
		v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t.sideEffect)}
		v.LineComment = t.sideEffectNote
		add(policydoc.String("side_effect"), v)
	}
	argsKey := policydoc.String("args")
	argsKey.HeadComment = policydoc.Comment(t.argsNotes, 4)
	add(argsKey, policydoc.Value(t.args, false))

	req := &yaml.Node{Kind: yaml.MappingNode}
	req.Content = append(req.Content, policydoc.String("method"), policydoc.String(t.method), policydoc.String("path"), policydoc.String(policydoc.EscapeEnv(t.path)))
	if t.query.len() > 0 {
		req.Content = append(req.Content, policydoc.String("query"), bindingNode(t.query))
	}
	if t.headers.len() > 0 {
		req.Content = append(req.Content, policydoc.String("headers"), bindingNode(t.headers))
	}
	switch {
	case t.bodyArg != "":
		req.Content = append(req.Content, policydoc.String("body"), policydoc.String(t.bodyArg))
	case t.body.len() > 0:
		req.Content = append(req.Content, policydoc.String("body"), bindingNode(t.body))
	}
	if t.encoding != "" && (t.bodyArg != "" || t.body.len() > 0) {
		req.Content = append(req.Content, policydoc.String("encoding"), policydoc.String(t.encoding))
	}
	reqKey := policydoc.String("request")
	reqKey.HeadComment = policydoc.Comment(t.requestNotes, 4)
	add(reqKey, req)
	last := reqKey
	resp := &yaml.Node{Kind: yaml.MappingNode}
	notes := t.dataNotes
	if t.data != "" {
		// The answer holds credentials: data leaves them out in the
		// draft itself, not only in a suggestion.
		dataKey := policydoc.String("data")
		dataKey.HeadComment = policydoc.Comment(append(notes,
			fmt.Sprintf("Left out of data, as their names look like credentials (data goes to the model): %s.", strings.Join(t.dataLeft, ", "))), 6)
		notes = nil
		resp.Content = append(resp.Content, dataKey, policydoc.String(t.data))
	}
	if t.responseSchema != nil {
		schemaKey := policydoc.String("schema")
		schemaKey.HeadComment = policydoc.Comment(append(notes, "The schema of the answer, from the document: an answer that departs from it counts in toolgate_contract_violations_total."), 6)
		resp.Content = append(resp.Content, schemaKey, policydoc.Value(t.responseSchema, false))
	}
	if len(resp.Content) > 0 {
		resKey := policydoc.String("response")
		add(resKey, resp)
		last = resKey
	}
	last.FootComment = policydoc.Comment(t.responseNotes, 4)
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
			v = policydoc.String(val)
			width += len(k) + len(val) + 4
		case constLeaf:
			v = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{policydoc.String("const"), policydoc.Value(escapeEnvIn(val.v), true)}}
			v.Style = yaml.FlowStyle
			width += len(k) + 12 + len(fmt.Sprint(val.v))
		case *omap:
			v = bindingNode(val)
			width += 1000 // nested shapes read best in block style
		}
		n.Content = append(n.Content, policydoc.String(k), v)
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
		return policydoc.EscapeEnv(t)
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
