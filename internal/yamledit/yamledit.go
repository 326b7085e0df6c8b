// Package yamledit edits YAML documents as node trees (go.yaml.in/yaml/v3),
// so that what is not changed keeps its comments, key order and quoting.
// toolgate demo edits the example policy with it, and toolgate-kube inject
// edits Kubernetes manifests; neither owns the other, so the helpers live
// here. Only mapping nodes are edited; a function given anything else (or
// nil) finds nothing.
package yamledit

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// MappingValue returns the value node of key in the mapping m, or nil.
func MappingValue(m *yaml.Node, key string) *yaml.Node {
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

// Path follows keys from m through nested mappings; nil when one is
// missing.
func Path(m *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		m = MappingValue(m, k)
	}
	return m
}

// Set sets key in the mapping m to value, in place when the key exists
// (its comments stay) and at the end otherwise.
func Set(m *yaml.Node, key string, value *yaml.Node) {
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

// Ensure returns the mapping or sequence (kind) under key, adding an empty
// one when the key is missing or null.
func Ensure(m *yaml.Node, key string, kind yaml.Kind) *yaml.Node {
	if v := MappingValue(m, key); v != nil && v.Kind == kind {
		return v
	}
	v := &yaml.Node{Kind: kind, Tag: "!!map"}
	if kind == yaml.SequenceNode {
		v.Tag = "!!seq"
	}
	Set(m, key, v)
	return v
}

// String is a plain string scalar; quoted when YAML would read it as
// another type (a number, a bool, null) or differently.
func String(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	var probe any
	if err := yaml.Unmarshal([]byte(s), &probe); err != nil || fmt.Sprint(probe) != s {
		n.Style = yaml.DoubleQuotedStyle
	} else if _, isString := probe.(string); !isString {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// Scalar returns a scalar node's value; "" for nil or another kind.
func Scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}
