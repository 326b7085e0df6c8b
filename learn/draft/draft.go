// Package draft writes a toolgate policy draft from what learning mode
// observed (a learn.Summary): one tool per learned route, with
//
//   - arguments from the requests the backend accepted (2xx): path
//     placeholders, query parameters and the top-level fields of JSON
//     object bodies, typed by what was sent (integer, number, boolean,
//     string, array); required only on evidence (present in at least 99 %
//     of them, and lacking in some call the route refused while it
//     refuses invalid calls with 400 or 422: see refusedWithout), never
//     merely because every call sent it;
//   - response.data from the fields present in at least 99 % of the 2xx
//     answers that carried no error code (those under 100 % read with
//     has(), so an answer without one still renders), leaving out those
//     whose names look like credentials at any depth, and response.empty
//     from the answer's list field, for read-only tools;
//   - response.error_detail when the route's JSON error answers share a
//     shape (all strings, or all with the same string member);
//   - the upstream's auth, with a TODO and access.shared_credentials,
//     from the credentials the requests carried (by name) and the
//     requests without one that were answered 401 or 403;
//   - an errors rule for each error code seen on 2xx answers, with a
//     status guessed from the code's name and a TODO to confirm it;
//   - a timeout of four times the p99 latency (1s at least, rounded up to
//     1, 2, 5, 10, 20, 30 or 60 seconds), and side_effect: true for POST,
//     PUT, PATCH and DELETE;
//   - comments with what was observed: calls, statuses, latency, answer
//     shapes, headers, and what the default table makes of each error
//     status.
//
// Routes whose successful answers are not JSON (a health check, a page)
// are not drafted as read-only tools: toolgate could read them as text,
// but such a route is rarely a tool; the header says to keep them on
// passthrough, or to write the tool by hand.
//
// The draft passes `toolgate check` as written (once the variables of a
// drafted credential, Draft.Env, are set), and its routes are not
// ambiguous in transparent mode: it is compiled both ways before it is
// returned, and a tool that does not compile is left out with a comment
// saying why. It defines only upstreams and tools, so it joins a policy
// directory whose other files set server, state and access.
package draft

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/config/policydoc"
	"github.com/toolgate/toolgate/learn"
)

// Options tune a draft.
type Options struct {
	// Source names the summary in the draft's header comment; empty
	// means "the learning summary".
	Source string
}

// Draft is a policy draft.
type Draft struct {
	// YAML is the policy draft: version, upstreams and tools, with
	// comments.
	YAML []byte
	// Tools are the drafted tools, in the order of YAML.
	Tools []Tool
	// Skipped are the learned routes that did not become a tool.
	Skipped []Skipped
	// Env names the variables the drafted upstream credentials read: the
	// draft passes toolgate check once they are set.
	Env []string
}

// Tool is one drafted tool.
type Tool struct {
	Name       string
	Upstream   string
	Method     string
	Path       string
	SideEffect bool
}

// Skipped is a learned route left out of the draft, and why.
type Skipped struct {
	Upstream, Method, Path, Reason string
}

// placeholderURL stands in for an upstream whose address the summary
// does not hold.
const placeholderURL = "http://127.0.0.1:8000"

// Write drafts a policy from a summary.
func Write(sum *learn.Summary, opts Options) (*Draft, error) {
	if opts.Source == "" {
		opts.Source = "the learning summary"
	}
	names := policydoc.NewNamer()
	var tools []*toolDraft
	var skipped []Skipped
	for _, r := range sum.Routes {
		if reason := skipReason(r); reason != "" {
			skipped = append(skipped, Skipped{Upstream: r.Upstream, Method: r.Method, Path: r.Path, Reason: reason})
			continue
		}
		tools = append(tools, newTool(r, names))
	}
	for range len(tools) + 1 {
		text, env, err := render(sum, opts, tools, skipped)
		if err != nil {
			return nil, err
		}
		err = check(text, env)
		if err == nil {
			d := &Draft{YAML: text, Skipped: skipped, Env: env}
			for _, t := range tools {
				d.Tools = append(d.Tools, Tool{Name: t.name, Upstream: t.route.Upstream, Method: t.route.Method, Path: t.path, SideEffect: t.sideEffect})
			}
			return d, nil
		}
		kept, dropped, ok := policydoc.DropUncompiled(tools, func(t *toolDraft) string { return t.name }, err)
		if !ok {
			return nil, fmt.Errorf("the draft does not compile: %w", err)
		}
		for _, u := range dropped {
			skipped = append(skipped, Skipped{Upstream: u.Tool.route.Upstream, Method: u.Tool.route.Method, Path: u.Tool.route.Path,
				Reason: "the drafted tool does not compile: " + u.Reason})
		}
		tools = kept
	}
	return nil, errors.New("the draft does not compile")
}

// check compiles the draft as `toolgate check` does, and again in
// transparent mode, where two tools must not take the same route.
func check(text []byte, env []string) error {
	if err := policydoc.Check("draft.yaml", text, env...); err != nil {
		return err
	}
	return policydoc.Check("draft.yaml", append(slices.Clip(text), "server:\n  transparent: true\n"...), env...)
}

func render(sum *learn.Summary, opts Options, tools []*toolDraft, skipped []Skipped) ([]byte, []string, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	root.Content = append(root.Content, policydoc.String("version"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "1"})

	used := map[string][]*learn.Route{}
	for _, t := range tools {
		used[t.route.Upstream] = append(used[t.route.Upstream], t.route)
	}
	ups := &yaml.Node{Kind: yaml.MappingNode}
	var env, shared []string
	for _, name := range slices.Sorted(maps.Keys(used)) {
		urlKey := policydoc.String("url")
		urlKey.HeadComment = policydoc.Comment([]string{"TODO: timeout (default 2s), max_concurrent, retries, breaker and credentials (headers): see docs/policy.md."}, 4)
		u, ok := sum.Upstreams[name]
		urlVal := policydoc.String(policydoc.EscapeEnv(u))
		if !ok || u == "" {
			urlVal = policydoc.String(placeholderURL)
			urlVal.LineComment = "TODO: the summary does not hold this upstream's URL"
		}
		up := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{urlKey, urlVal}}
		if a := draftAuth(name, used[name]); a != nil {
			if a.block == nil {
				urlVal.FootComment = policydoc.Comment(a.notes, 4)
			} else {
				authKey := policydoc.String("auth")
				authKey.HeadComment = policydoc.Comment(a.notes, 4)
				up.Content = append(up.Content, authKey, a.block)
				env = append(env, a.env...)
				shared = append(shared, name)
			}
		}
		ups.Content = append(ups.Content, policydoc.String(name), up)
	}
	if len(used) == 0 {
		ups.Style = yaml.FlowStyle
	}
	root.Content = append(root.Content, policydoc.String("upstreams"), ups)

	toolsKey := policydoc.String("tools")
	if len(skipped) > 0 {
		lines := []string{"Not drafted:"}
		for _, s := range skipped {
			lines = append(lines, fmt.Sprintf("- %s %s (%s): %s", s.Method, s.Path, s.Upstream, s.Reason))
		}
		toolsKey.HeadComment = policydoc.Comment(lines, 0)
	}
	toolsVal := &yaml.Node{Kind: yaml.MappingNode}
	if len(tools) == 0 {
		toolsVal.Style = yaml.FlowStyle
	}
	for _, t := range tools {
		k, v := t.node()
		toolsVal.Content = append(toolsVal.Content, k, v)
	}
	root.Content = append(root.Content, toolsKey, toolsVal)
	if len(shared) > 0 {
		// toolgate refuses to lend a credential to callers it cannot
		// identify unless the policy says so (docs/policy.md, access).
		accessKey := policydoc.String("access")
		accessKey.HeadComment = policydoc.Comment([]string{
			fmt.Sprintf("toolgate sends the credential of %s in place of any a caller sends, for every caller it serves. TODO: list your callers in access.callers and set access.default: deny, or forward each caller's own credential (forward_headers) instead of auth; until then this line says that anyone who reaches toolgate may use it:", strings.Join(shared, ", ")),
		}, 0)
		list := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, n := range shared {
			list.Content = append(list.Content, policydoc.String(n))
		}
		root.Content = append(root.Content, accessKey, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{policydoc.String("shared_credentials"), list}})
	}
	root.HeadComment = header(sum, opts, env)
	text, err := policydoc.Encode(root)
	return text, env, err
}

func header(sum *learn.Summary, opts Options, env []string) string {
	values := "No request or answer value was kept, except the error codes the rules name."
	if !sum.EnumValues {
		values = "No request or answer value was kept (enum_values was off, so error codes are not known either)."
	}
	return policydoc.Comment([]string{
		fmt.Sprintf("toolgate policy draft learned from traffic by `toolgate learn report` (%s: %s).", opts.Source, sum),
		passes(env) + " remove the passthrough prefixes that would take these routes before the tools can. " + values + " To finish it, work through the TODO comments:",
		"- description: what each tool does and when to use it, for the agent.",
		"- errors: each rule's status is guessed from the code's name; confirm it.",
		"- response: data keeps the fields present in at least 99% of the successful answers; trim it to what the agent needs.",
		"- timeout: four times the p99 latency observed, at least 1s; cost; and the upstream's retries, breaker and credentials.",
		"See docs/policy.md for every key.",
	}, 0)
}

// passes says when the draft passes toolgate check, and what it defines.
func passes(env []string) string {
	if len(env) == 0 {
		return "It passes `toolgate check` as written, in transparent mode too. It defines only upstreams and tools, so it can join the policy directory whose other files set server, state and access;"
	}
	return fmt.Sprintf("It passes `toolgate check` once %s are set, in transparent mode too. It defines upstreams, tools and the credentials' access.shared_credentials, so it can join the policy directory whose other files set server, state and the rest of access;", strings.Join(env, ", "))
}
