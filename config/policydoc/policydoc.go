// Package policydoc writes policy documents: the YAML of a policy draft,
// so that the two drafters, the OpenAPI importer (config/openapi) and
// learning mode (learn/draft), write alike: comments wrapped the same way,
// values in the same flow style, the same blank lines, names made by the
// same rules, the same CEL for reading a field, and the same self-check
// before a draft is handed out. It knows nothing of OpenAPI, so learning
// mode links no OpenAPI library.
package policydoc

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// commentWidth is where prose comment lines are wrapped.
const commentWidth = 100

// codeMark starts a comment line that Comment writes as is.
const codeMark = "\x01"

// Code marks a comment line as YAML or an aligned list, which Comment
// writes as is; other comment lines are prose and are wrapped.
func Code(s string) string { return codeMark + s }

// CodeLine reports whether a comment line was marked with Code, and
// returns its text without the mark.
func CodeLine(l string) (string, bool) { return strings.CutPrefix(l, codeMark) }

// Comment joins comment lines for a node at the given indentation: lines
// marked with Code are kept as they are, prose is wrapped at 100 columns,
// and "- " starts a list item whose continuation lines hang under its text.
func Comment(lines []string, indent int) string {
	var out []string
	for _, l := range lines {
		if c, ok := CodeLine(l); ok {
			out = append(out, c)
			continue
		}
		if item, ok := strings.CutPrefix(l, "- "); ok {
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

// String is a YAML string scalar.
func String(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// EscapeEnv protects "${" in a value the policy loader would expand: "$${"
// is a literal "${".
func EscapeEnv(s string) string { return strings.ReplaceAll(s, "${", "$${") }

// An Object is a JSON object that keeps its keys in an order of its own
// (the importer's schemas keep the document's order), so Value writes it
// the same on every run.
type Object interface {
	Keys() []string
	Get(key string) (any, bool)
}

// Value writes a JSON value (an argument schema, a list) as YAML. An
// Object keeps its key order, a map[string]any is written with sorted
// keys. With flow, a mapping whose values are all scalars (or lists of
// scalars) and that fits on a line is written in flow style, as a person
// would write it; a list of scalars always is.
func Value(v any, flow bool) *yaml.Node {
	switch t := v.(type) {
	case Object:
		n := &yaml.Node{Kind: yaml.MappingNode}
		keys := t.Keys()
		for _, k := range keys {
			e, _ := t.Get(k)
			n.Content = append(n.Content, String(k), Value(e, true))
		}
		if flow && len(keys) > 0 && flatWidth(t) <= 90 {
			n.Style = yaml.FlowStyle
		}
		if len(keys) == 0 {
			n.Style = yaml.FlowStyle
		}
		return n
	case map[string]any:
		return Value(sortedObject(t), flow)
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		scalars := true
		for _, e := range t {
			c := Value(e, true)
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
		out := make([]any, len(t))
		for i, s := range t {
			out[i] = s
		}
		return Value(out, flow)
	case string:
		return String(t)
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
		return String(t.String())
	}
	return String(fmt.Sprint(v))
}

// sortedObject is a map[string]any as an Object with sorted keys.
type sortedObject map[string]any

func (m sortedObject) Keys() []string { return slices.Sorted(maps.Keys(m)) }

func (m sortedObject) Get(k string) (any, bool) {
	v, ok := m[k]
	return v, ok
}

func number(f float64) *yaml.Node {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return String(strconv.FormatFloat(f, 'g', -1, 64))
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(f), 10)}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(f, 'g', -1, 64)}
}

// flatWidth estimates the one-line width of an object, or returns a large
// number when it holds nested objects or strings with line breaks.
func flatWidth(m Object) int {
	w := 2
	for _, k := range m.Keys() {
		w += len(k) + 4
		v, _ := m.Get(k)
		switch v := v.(type) {
		case Object, map[string]any:
			return math.MaxInt
		case []any:
			for _, e := range v {
				switch e := e.(type) {
				case Object, map[string]any, []any:
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

// Encode writes a policy document whose top level is the mapping root,
// indented by two, with a blank line between sections and between the
// entries of a section, so the draft reads like a hand-written policy.
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

// spaceOut puts a blank line between top-level sections and between the
// entries of a section. yaml.v3 writes no blank lines of its own except
// after foot comments.
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
