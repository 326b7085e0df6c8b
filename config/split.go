package config

import (
	"bytes"
	"maps"
	"reflect"

	"go.yaml.in/yaml/v3"
)

// This file decodes a policy file one tool at a time, so that loading a
// large policy does not hold the YAML nodes of every tool at once.
//
// yaml.v3 builds the node tree of a whole document before any of it can be
// decoded (yaml.Unmarshal, Decoder.Decode and Unmarshaler all hand out
// parts of a finished tree), and its parser's events are not exported. A
// file of 1,000 tools is a tree of 14-17 MiB, most of the peak heap of
// loading it. So the file is cut instead, by its lines, into the tools
// section's entries and the rest (the skeleton), and each is parsed alone.
//
// The cut is conservative: it is tried only on a file in plain block style
// at the levels it cuts (one document, a `tools:` line of its own, each
// entry a plain or quoted key at one indentation), and anything it did not
// expect makes it give up, before or after parsing: any syntax error, any
// decoding error, a piece that is not exactly one entry. The file is then
// decoded whole, as before, so every error a user reads (its text and its
// file:line:column) comes from the whole-document decoder. A file that
// decodes without error through the pieces decodes to the same spec, the
// same positions and the same warnings as the whole file; the differential
// tests and FuzzSplitMatchesWhole hold the two equal.
//
// Why the pieces parse as the whole does: the prefix up to the `tools:`
// line is the same in both, and the skeleton's parse shows that line is a
// key of the document's block mapping, so in the whole file the lines after
// it, all indented, are its value until the next line at column 1. An entry
// parsed alone starts at its indentation as it does in the whole file, and
// every construct that could run on into the next entry's line (a quoted
// scalar, a flow collection) leaves its piece unterminated, a syntax error.
// Line breaks other than \n and \r\n, which would move the line numbers,
// tabs in indentation, directives and document markers make it give up.
// Anchors are resolved within a piece; an alias to an anchor of another
// piece is an unknown anchor there, except that the skeleton's aliases after
// the tools section would see an anchor of the tools redefined, so a file
// with both is decoded whole.

// toolsCut is a policy file cut at its tools section: the skeleton (the
// file with the section's lines emptied, so that the rest keeps its line
// numbers) and the byte ranges of the section's entries.
type toolsCut struct {
	skeleton []byte
	// line is the 1-based line of the `tools:` key.
	line int
	// indent is the column, 0-based, of every entry's key.
	indent  int
	entries []entryRange
}

// entryRange is one entry of the tools section: data[start:end], whose
// first line is line (1-based) of the file.
type entryRange struct {
	start, end int
	line       int
}

// cutTools cuts data at its tools section, or reports false when data is
// not written in the plain block style the cut understands.
func cutTools(data []byte) (toolsCut, bool) {
	if bytes.HasPrefix(data, []byte{0xef, 0xbb, 0xbf}) || bytes.HasPrefix(data, []byte{0xfe, 0xff}) || bytes.HasPrefix(data, []byte{0xff, 0xfe}) {
		return toolsCut{}, false
	}
	// YAML breaks lines at \r, NEL, LS and PS too; the cut counts \n only.
	for _, br := range [][]byte{{0xc2, 0x85}, {0xe2, 0x80, 0xa8}, {0xe2, 0x80, 0xa9}} {
		if bytes.Contains(data, br) {
			return toolsCut{}, false
		}
	}
	for i := bytes.IndexByte(data, '\r'); i >= 0; {
		if i+1 >= len(data) || data[i+1] != '\n' {
			return toolsCut{}, false
		}
		j := bytes.IndexByte(data[i+1:], '\r')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	cut := toolsCut{indent: -1}
	// The section runs from the line after `tools:` (regionStart) to the
	// next line that starts a key at column 1 (regionEnd).
	regionStart, regionEnd, regionLines := -1, len(data), 0
	inRegion := false
	line := 0
	for off := 0; off < len(data); {
		line++
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end < 0 {
			end = len(data)
		} else {
			end += off
			next = end + 1
		}
		text := bytes.TrimSuffix(data[off:end], []byte{'\r'})
		lineStart := off
		off = next
		if len(text) > 0 && (text[0] == '\t' || text[0] == '%' || bytes.HasPrefix(text, []byte("---")) || bytes.HasPrefix(text, []byte("..."))) {
			return toolsCut{}, false
		}
		indent := 0
		for indent < len(text) && text[indent] == ' ' {
			indent++
		}
		blank := indent == len(text)
		topLevel := !blank && indent == 0 && text[0] != '#'
		if topLevel {
			if inRegion {
				regionEnd, inRegion = lineStart, false
			}
			if isToolsKeyLine(text) {
				if cut.line != 0 {
					return toolsCut{}, false // tools written twice: the whole decoder reports it
				}
				cut.line, regionStart, inRegion = line, next, true
			}
			continue
		}
		if !inRegion {
			continue
		}
		regionLines++
		if blank || text[indent] == '#' || indent > cut.indent && cut.indent >= 0 {
			continue // a comment, or a line of the current entry
		}
		if text[indent] == '\t' {
			return toolsCut{}, false
		}
		if cut.indent < 0 {
			cut.indent = indent
		}
		if indent < cut.indent || !startsPlainKey(text[indent]) {
			return toolsCut{}, false
		}
		if n := len(cut.entries); n > 0 {
			cut.entries[n-1].end = lineStart
		}
		cut.entries = append(cut.entries, entryRange{start: lineStart, line: line})
	}
	if len(cut.entries) == 0 {
		return toolsCut{}, false
	}
	cut.entries[len(cut.entries)-1].end = regionEnd
	skeleton := make([]byte, 0, regionStart+regionLines+len(data)-regionEnd)
	skeleton = append(skeleton, data[:regionStart]...)
	for range regionLines {
		skeleton = append(skeleton, '\n')
	}
	cut.skeleton = append(skeleton, data[regionEnd:]...)
	return cut, true
}

// isToolsKeyLine reports whether text is `tools:` alone on its line, or
// followed by a comment: the tools section's value on the lines below.
func isToolsKeyLine(text []byte) bool {
	rest, ok := bytes.CutPrefix(text, []byte("tools:"))
	if !ok {
		return false
	}
	if len(rest) == 0 {
		return true
	}
	if rest[0] != ' ' {
		return false
	}
	rest = bytes.TrimLeft(rest, " ")
	return len(rest) == 0 || rest[0] == '#'
}

// startsPlainKey reports whether an entry's line may start with c: a plain
// or quoted key, not an indicator (a sequence entry, an explicit key, an
// anchor, a tag, a flow collection), which the cut leaves to the whole
// decoder.
func startsPlainKey(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '"' || c == '\''
}

// decodeByTool decodes src as decodeFile does, parsing the tools section one
// entry at a time (see the top of this file). It reports false, having
// changed nothing in c, when the file is not cut or any part of it fails:
// the caller then decodes the whole file, which reports the errors.
func (c *compiler) decodeByTool(src source, lookup func(string) (string, bool)) (*fileSpec, bool) {
	cut, ok := cutTools(src.data)
	if !ok {
		return nil, false
	}
	var doc yaml.Node
	if yaml.Unmarshal(cut.skeleton, &doc) != nil || len(doc.Content) == 0 {
		return nil, false
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode || root.Style&yaml.FlowStyle != 0 || !emptyToolsKeyAt(root, cut.line) {
		return nil, false
	}
	skeletonAliases := walkNodes(root, 0)&hasAlias != 0
	pos, envValues := map[string]nodePos{}, map[string][]string{}
	d := &decoder{file: src.name, env: lookup, pos: pos, expand: true, envValues: envValues, keysOnly: "tools"}
	spec := &fileSpec{}
	d.decode(root, "", reflect.ValueOf(spec).Elem())
	if len(d.errs) > 0 || spec.Version != 1 {
		return nil, false
	}
	tools := reflect.ValueOf(&spec.Tools).Elem()
	for i, e := range cut.entries {
		var piece yaml.Node
		if yaml.Unmarshal(src.data[e.start:e.end], &piece) != nil || len(piece.Content) == 0 {
			return nil, false
		}
		m := piece.Content[0]
		if walkNodes(m, e.line-1)&hasAnchor != 0 && skeletonAliases {
			return nil, false
		}
		if m.Kind != yaml.MappingNode || m.Style&yaml.FlowStyle != 0 || len(m.Content) != 2 ||
			m.Content[0].Line != e.line || m.Content[0].Column != cut.indent+1 {
			return nil, false
		}
		if i == 0 {
			// The tools mapping starts where its first key does; the
			// skeleton recorded its own (empty) value.
			d.record(m, "tools")
		}
		d.decodeMap(m, "tools", tools)
		if len(d.errs) > 0 {
			return nil, false
		}
	}
	maps.Copy(c.pos, pos)
	maps.Copy(c.envValues, envValues)
	c.warns = append(c.warns, d.warns...)
	return spec, true
}

// emptyToolsKeyAt reports whether the block mapping root has a plain key
// tools at column 1 of line, with an empty value: the skeleton's parse
// agrees with the cut about where the tools section is.
func emptyToolsKeyAt(root *yaml.Node, line int) bool {
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "tools" {
			continue
		}
		return k.Kind == yaml.ScalarNode && k.Style == 0 && k.Line == line && k.Column == 1 &&
			v.Kind == yaml.ScalarNode && v.Style == 0 && v.Tag == "!!null" && v.Value == "" && v.Anchor == ""
	}
	return false
}

// What walkNodes found in a tree.
const (
	hasAnchor = 1 << iota
	hasAlias
)

// walkNodes moves every node of the tree n down by shift lines (a piece's
// lines are numbered from its own start) and reports whether the tree
// defines anchors or holds aliases. An alias's target is a node of the tree
// too, so only Content is walked, and each node is moved once.
func walkNodes(n *yaml.Node, shift int) int {
	found := 0
	stack := []*yaml.Node{n}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n.Line += shift
		if n.Anchor != "" {
			found |= hasAnchor
		}
		if n.Kind == yaml.AliasNode {
			found |= hasAlias
		}
		stack = append(stack, n.Content...)
	}
	return found
}
