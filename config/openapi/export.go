package openapi

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/config"
)

// This file exports the importer's rendering helpers to the other policy
// drafter, learning mode's (package learn/draft), so both drafts read the
// same: comments wrapped alike, schemas in the same flow style, the same
// blank lines, names made by the same rules, the same self-check.

// Comment joins comment lines for a node at the given indentation: lines
// marked with Code are kept as they are, prose is wrapped at 100 columns,
// "- " starts a list item.
func Comment(lines []string, indent int) string { return comment(lines, indent) }

// Code marks a comment line as YAML or an aligned list, written as is.
func Code(s string) string { return code(s) }

// String is a YAML string scalar.
func String(s string) *yaml.Node { return str(s) }

// Value writes a JSON value (an argument schema, a list) as YAML; with
// flow, a mapping of scalars that fits on a line is written on one line.
func Value(v any, flow bool) *yaml.Node { return valueNode(v, flow) }

// EscapeEnv protects "${" in a value the policy loader would expand.
func EscapeEnv(s string) string { return escapeEnv(s) }

// Encode writes a policy document whose top level is the mapping root,
// indented by two, with a blank line between sections and entries.
func Encode(root *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, fmt.Errorf("writing the draft: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("writing the draft: %w", err)
	}
	return spaceOut(buf.Bytes()), nil
}

// Namer hands out names that are unique within one scope, sanitized to
// [A-Za-z0-9_.-] and at most 64 characters, as the importer names tools
// and arguments.
type Namer struct{ n *namer }

// NewNamer returns a namer for which the reserved names are taken.
func NewNamer(reserved ...string) *Namer { return &Namer{n: newNamer(reserved...)} }

// Take returns the first free name among candidates, or the first with
// the lowest free suffix _2, _3, ...
func (n *Namer) Take(candidates ...string) string { return n.n.take(candidates...) }

// DerivedName names an operation from its method and path, as the
// importer does for one without an operationId:
// GET /tickets/{id}/comments becomes get_tickets_by_id_comments.
func DerivedName(method, path string) string { return derivedName(method, path) }

// CELGet reads field name of the CEL value v (v.name or v["name"]).
func CELGet(v, name string) string { return celGet(v, name) }

// CELHas tests that the CEL value v has field name.
func CELHas(v, name string) string { return celHas(v, name) }

// DefaultStatus names the status toolgate's default table gives an HTTP
// status code ("404" -> "not_found", "503" -> "upstream, retryable").
func DefaultStatus(code string, sideEffect bool) string { return defaultStatus(code, sideEffect) }

// CheckDraft compiles a draft exactly as `toolgate check` does, without
// reading the environment.
func CheckDraft(name string, yamlText []byte) error { return selfCheck(name, yamlText) }

// Uncompiled is a tool of a draft that does not compile, and why.
type Uncompiled[T any] struct {
	Tool   T
	Reason string
}

// DropUncompiled splits the tools of a draft by err, the draft's compile
// error: the tools no error is about are kept, in order; each tool an
// error is about is dropped, with the first such error as the reason
// ("field: message", or the message alone for an error about the tool as
// a whole). ok is false when err is not a config.Errors or one of its
// errors is about no tool: leaving tools out would not help. name gives a
// tool's name; names may contain dots, so the longest name an error's
// path starts with wins.
func DropUncompiled[T comparable](tools []T, name func(T) string, err error) (kept []T, dropped []Uncompiled[T], ok bool) {
	var errs config.Errors
	if !errors.As(err, &errs) {
		return nil, nil, false
	}
	bad := map[T]string{}
	for _, e := range errs {
		t, found := toolOf(tools, name, e.Path)
		if !found {
			return nil, nil, false
		}
		if _, seen := bad[t]; !seen {
			reason := e.Msg
			if field := strings.TrimPrefix(strings.TrimPrefix(e.Path, "tools."+name(t)), "."); field != "" && !strings.HasPrefix(field, "#") {
				reason = field + ": " + reason
			}
			bad[t] = reason
		}
	}
	kept = tools[:0:0]
	for _, t := range tools {
		if reason, isBad := bad[t]; isBad {
			dropped = append(dropped, Uncompiled[T]{Tool: t, Reason: reason})
			continue
		}
		kept = append(kept, t)
	}
	return kept, dropped, true
}

// toolOf finds the tool an error path ("tools.<name>.request.path") is
// about; tool names may contain dots, so the longest match wins.
func toolOf[T any](tools []T, name func(T) string, path string) (best T, found bool) {
	for _, t := range tools {
		p := "tools." + name(t)
		if (path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"#")) && (!found || len(name(t)) > len(name(best))) {
			best, found = t, true
		}
	}
	return best, found
}
