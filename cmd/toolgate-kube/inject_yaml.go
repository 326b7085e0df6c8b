package main

import (
	"bytes"
	"encoding/json"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/internal/yamledit"
)

// The functions here print and shape the YAML nodes inject adds (package
// yamledit edits the input's nodes in place); the typed Kubernetes objects
// are decoded separately for the checks.

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
			n.Style = yamledit.String(n.Value).Style
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
				if name := yamledit.Scalar(yamledit.MappingValue(r, "name")); name != "" && name == yamledit.Scalar(yamledit.MappingValue(item, "name")) {
					match = r
				}
			}
			orderLike(item, match)
		}
	}
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
