package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The functions here edit YAML documents as node trees, so what is not
// changed keeps its comments, key order and quoting. inject and demo use
// them; the typed Kubernetes objects are decoded separately for the checks.

// mappingValue returns the value node of key in the mapping m, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// path follows keys from m through nested mappings; nil when one is missing.
func path(m *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		m = mappingValue(m, k)
	}
	return m
}

// setValue sets key in the mapping m to value, in place when the key exists
// (its comments stay) and at the end otherwise.
func setValue(m *yaml.Node, key string, value *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			old := m.Content[i+1]
			if value.LineComment == "" {
				value.LineComment = old.LineComment
			}
			m.Content[i+1] = value
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, value)
}

// ensure returns the mapping or sequence (kind) under key, adding an empty
// one when the key is missing or null.
func ensure(m *yaml.Node, key string, kind yaml.Kind) *yaml.Node {
	if v := mappingValue(m, key); v != nil && v.Kind == kind {
		return v
	}
	v := &yaml.Node{Kind: kind, Tag: "!!map"}
	if kind == yaml.SequenceNode {
		v.Tag = "!!seq"
	}
	setValue(m, key, v)
	return v
}

// stringNode is a plain string scalar; quoted when YAML would read it as
// another type.
func stringNode(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	var probe any
	if err := yaml.Unmarshal([]byte(s), &probe); err != nil || fmt.Sprint(probe) != s {
		n.Style = yaml.DoubleQuotedStyle
	} else if _, isString := probe.(string); !isString {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// toNode converts a value (a Kubernetes API object or part of one) to a
// YAML node through its JSON form, so the API's field names and omitempty
// rules apply. Keys come out in the struct's field order.
func toNode(v any) (*yaml.Node, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(js, &doc); err != nil {
		return nil, err
	}
	n := doc.Content[0]
	blockStyle(n)
	return n, nil
}

// blockStyle clears the flow style JSON input leaves on every collection,
// and the quotes on strings that need none, so the node prints like
// hand-written YAML.
func blockStyle(n *yaml.Node) {
	switch n.Kind {
	case yaml.DocumentNode, yaml.MappingNode, yaml.SequenceNode:
		n.Style = 0
		for _, c := range n.Content {
			blockStyle(c)
		}
	case yaml.ScalarNode:
		if n.Style == yaml.DoubleQuotedStyle && n.Tag == "!!str" {
			n.Style = stringNode(n.Value).Style
		}
	}
}

// encodeYAML prints a document node with two-space indentation; compact
// writes sequences under a key at the key's own indentation, as kubectl
// does.
func encodeYAML(doc *yaml.Node, compact bool) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if compact {
		enc.CompactSeqIndent()
	}
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// compactSequences reports whether a document writes the items of a
// sequence under a key at the key's indentation ("key:\n- a"), the style
// of kubectl's output, rather than indented ("key:\n  - a").
func compactSequences(doc []byte) bool {
	lines := strings.Split(string(doc), "\n")
	for i := 1; i < len(lines); i++ {
		item := strings.TrimLeft(lines[i], " ")
		if !strings.HasPrefix(item, "- ") && item != "-" {
			continue
		}
		prev := lines[i-1]
		if !strings.HasSuffix(strings.TrimRight(prev, " "), ":") {
			continue
		}
		// The key's column: its indentation, plus "- " for a key that
		// starts an item itself ("- ports:").
		key := strings.TrimLeft(prev, " ")
		keyCol := len(prev) - len(key)
		for strings.HasPrefix(key, "- ") {
			key = strings.TrimLeft(key[2:], " ")
			keyCol = len(prev) - len(key)
		}
		return len(lines[i])-len(item) == keyCol
	}
	return false
}

// orderLike reorders the keys of the mapping n, and of the mappings in it,
// to follow the reference ref: keys ref has come first, in its order, the
// others after them in their own. Sequence items follow the reference's
// item with the same name, or else its first item. Values are not
// touched: ref only says how a person would write the object.
func orderLike(n, ref *yaml.Node) {
	if n == nil || ref == nil {
		return
	}
	switch {
	case n.Kind == yaml.MappingNode && ref.Kind == yaml.MappingNode:
		var ordered []*yaml.Node
		taken := make([]bool, len(n.Content)/2)
		for j := 0; j+1 < len(ref.Content); j += 2 {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if !taken[i/2] && n.Content[i].Value == ref.Content[j].Value {
					taken[i/2] = true
					orderLike(n.Content[i+1], ref.Content[j+1])
					ordered = append(ordered, n.Content[i], n.Content[i+1])
				}
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !taken[i/2] {
				ordered = append(ordered, n.Content[i], n.Content[i+1])
			}
		}
		n.Content = ordered
	case n.Kind == yaml.SequenceNode && ref.Kind == yaml.SequenceNode && len(ref.Content) > 0:
		for _, item := range n.Content {
			match := ref.Content[0]
			for _, r := range ref.Content {
				if name := scalarOf(mappingValue(r, "name")); name != "" && name == scalarOf(mappingValue(item, "name")) {
					match = r
				}
			}
			orderLike(item, match)
		}
	}
}

func scalarOf(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// wrapComment breaks a comment into lines of at most width characters, at
// spaces.
func wrapComment(s string, width int) string {
	var lines []string
	for para := range strings.SplitSeq(s, "\n") {
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && len(line)+1+len(w) > width {
				lines = append(lines, line)
				line = ""
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
