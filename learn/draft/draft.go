// Package draft writes a toolgate policy draft from what learning mode
// observed (a learn.Summary): one tool per learned route, with
//
//   - arguments from the requests the backend accepted (2xx): path
//     placeholders, query parameters and the top-level fields of JSON
//     object bodies, typed by what was sent (integer, number, boolean,
//     string, array), required when present in at least 99 % of them;
//   - response.data from the fields present in at least 99 % of the 2xx
//     answers that carried no error code (those under 100 % read with
//     has(), so an answer without one still renders), and response.empty
//     from the answer's list field, for read-only tools;
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
// The draft passes `toolgate check` as written, and its routes are not
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
		text, err := render(sum, opts, tools, skipped)
		if err != nil {
			return nil, err
		}
		err = check(text)
		if err == nil {
			d := &Draft{YAML: text, Skipped: skipped}
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
func check(text []byte) error {
	if err := policydoc.Check("draft.yaml", text); err != nil {
		return err
	}
	return policydoc.Check("draft.yaml", append(slices.Clip(text), "server:\n  transparent: true\n"...))
}

func render(sum *learn.Summary, opts Options, tools []*toolDraft, skipped []Skipped) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	root.HeadComment = header(sum, opts)
	root.Content = append(root.Content, policydoc.String("version"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: "1"})

	used := map[string]bool{}
	for _, t := range tools {
		used[t.route.Upstream] = true
	}
	ups := &yaml.Node{Kind: yaml.MappingNode}
	for _, name := range slices.Sorted(maps.Keys(used)) {
		urlKey := policydoc.String("url")
		urlKey.HeadComment = policydoc.Comment([]string{"TODO: timeout (default 2s), max_concurrent, retries, breaker and credentials (headers): see docs/policy.md."}, 4)
		u, ok := sum.Upstreams[name]
		urlVal := policydoc.String(policydoc.EscapeEnv(u))
		if !ok || u == "" {
			urlVal = policydoc.String(placeholderURL)
			urlVal.LineComment = "TODO: the summary does not hold this upstream's URL"
		}
		ups.Content = append(ups.Content, policydoc.String(name), &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{urlKey, urlVal}})
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
	return policydoc.Encode(root)
}

func header(sum *learn.Summary, opts Options) string {
	values := "No request or answer value was kept, except the error codes the rules name."
	if !sum.EnumValues {
		values = "No request or answer value was kept (enum_values was off, so error codes are not known either)."
	}
	return policydoc.Comment([]string{
		fmt.Sprintf("toolgate policy draft learned from traffic by `toolgate learn report` (%s: %s).", opts.Source, sum),
		"It passes `toolgate check` as written, in transparent mode too. It defines only upstreams and tools, so it can join the policy directory whose other files set server, state and access; remove the passthrough prefixes that would take these routes before the tools can. " + values + " To finish it, work through the TODO comments:",
		"- description: what each tool does and when to use it, for the agent.",
		"- errors: each rule's status is guessed from the code's name; confirm it.",
		"- response: data keeps the fields present in at least 99% of the successful answers; trim it to what the agent needs.",
		"- timeout: four times the p99 latency observed, at least 1s; cost; and the upstream's retries, breaker and credentials.",
		"See docs/policy.md for every key.",
	}, 0)
}
