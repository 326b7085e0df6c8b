package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/internal/yamledit"
)

// inject changes a document in two forms at once: its node tree (which
// the checks read, and which is printed again when the text cannot be
// edited) and its text, where each change is an insertion or a
// replacement at the position the parser gave the nodes. Printing the
// edited text keeps every line inject does not change byte for byte: the
// input's indentation (mixed within one document too), quoting, comments
// and line endings; -dry-run then shows exactly the lines inject adds or
// replaces. A change the text cannot take (JSON, flow style, YAML aliases
// and merge keys on the way) marks the document for printing from its
// node tree, as a whole.

// textEdit replaces text[start:end] of a document with text.
type textEdit struct {
	start, end int
	text       string
}

// editedText applies the edits to the document's text.
func (d *document) editedText() string {
	edits := slices.Clone(d.edits)
	slices.SortStableFunc(edits, func(a, b textEdit) int { return cmp.Compare(a.start, b.start) })
	var b strings.Builder
	at := 0
	for _, e := range edits {
		b.WriteString(d.text[at:e.start])
		b.WriteString(e.text)
		at = e.end
	}
	b.WriteString(d.text[at:])
	return b.String()
}

// edit records a text edit; a document printed from its node tree needs
// none.
func (d *document) edit(start, end int, text string) {
	if d.reencode {
		return
	}
	for _, e := range d.edits {
		// Two replacements of one span would contradict each other.
		if start < e.end && e.start < end {
			d.reencode = true
			return
		}
	}
	d.edits = append(d.edits, textEdit{start: start, end: end, text: text})
}

// lineStart is the offset of a line (1-based) in the document's text; the
// text's length past its last line.
func (d *document) lineStart(line int) int {
	if d.lines == nil {
		d.lines = []int{0}
		for i := 0; i < len(d.text); i++ {
			if d.text[i] == '\n' {
				d.lines = append(d.lines, i+1)
			}
		}
	}
	if line < 1 {
		return 0
	}
	if line > len(d.lines) {
		return len(d.text)
	}
	return d.lines[line-1]
}

// lineCount is the number of lines of the text.
func (d *document) lineCount() int {
	d.lineStart(1)
	return len(d.lines)
}

// line returns a line's text without its line break.
func (d *document) line(n int) string {
	s, e := d.lineStart(n), d.lineStart(n+1)
	return strings.TrimSuffix(d.text[s:e], "\n")
}

// lineEnd is the offset just past a line's line break (or the end of the
// text).
func (d *document) lineEnd(n int) int { return d.lineStart(n + 1) }

// offset converts the parser's line and column (1-based, in characters)
// to an offset in the text.
func (d *document) offset(line, col int) int {
	s := d.lineStart(line)
	l := d.line(line)
	i := 0
	for c := 1; c < col && i < len(l); c++ {
		_, size := utf8.DecodeRuneInString(l[i:])
		i += size
	}
	return s + i
}

// indentation is the number of spaces a line starts with.
func indentation(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// isComment reports whether a line holds only a comment.
func isComment(line string) bool { return strings.HasPrefix(strings.TrimSpace(line), "#") }

// isBlank reports whether a line holds only spaces.
func isBlank(line string) bool { return strings.TrimSpace(line) == "" }

// startsLine reports whether a key node is the first thing on its line,
// so that text can go in before that line.
func (d *document) startsLine(n *yaml.Node) bool {
	return n != nil && n.Line > 0 && indentation(d.line(n.Line)) == n.Column-1
}

// above is the first line of the comment lines right above line n (and
// below the line stop): a key's or an item's head comment, which must stay
// with it when text goes in before it.
func (d *document) above(n, stop int) int {
	for n-1 > stop && isComment(d.line(n-1)) {
		n--
	}
	return n
}

// blockEnd is the offset past the last line of the block that starts on
// line start, at column col: the lines after it that are indented deeper
// belong to it (and with dashes, lines starting with "-" at col itself:
// the items of a sequence written at its key's indentation). Blank lines
// and comments neither end the block (a comment may sit between two
// items) nor belong to its end: those after its last line go with what
// comes next.
func (d *document) blockEnd(start, col int, dashes bool) int {
	end := d.lineEnd(start)
	for l := start + 1; l <= d.lineCount(); l++ {
		s := d.line(l)
		if isBlank(s) || isComment(s) {
			continue
		}
		ind := indentation(s)
		inside := ind > col-1
		if dashes && ind == col-1 && (strings.HasPrefix(s[ind:], "- ") || s[ind:] == "-") {
			inside = true
		}
		if !inside {
			break
		}
		end = d.lineEnd(l)
	}
	return end
}

// keyNode returns the key node of key in the mapping m.
func keyNode(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i]
		}
	}
	return nil
}

// blockSequence reports whether n is a sequence written in block style
// with at least one item.
func blockSequence(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.SequenceNode && n.Style&yaml.FlowStyle == 0 && len(n.Content) > 0
}

// emptyValue reports whether a value is written as nothing, null or an
// empty flow collection: a key that holds no items.
func emptyValue(n *yaml.Node) bool {
	switch {
	case n == nil:
		return true
	case n.Kind == yaml.ScalarNode:
		return n.Tag == "!!null"
	case n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode:
		return len(n.Content) == 0
	}
	return false
}

// render prints a node at an indentation: an item of a sequence, or a
// key with its value; compact writes sequences under a key at the key's
// indentation.
func render(n *yaml.Node, indent int, compact bool) (string, error) {
	out, err := encodeYAML(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{n}}, compact)
	if err != nil {
		return "", err
	}
	pad := strings.Repeat(" ", indent)
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimSuffix(string(out), "\n"), "\n") {
		if line != "" {
			b.WriteString(pad)
		}
		b.WriteString(line)
		b.WriteString("\n")
	}
	return b.String(), nil
}

// seqOf is a block sequence of the items.
func seqOf(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items}
}

// mapOf is a block mapping of one key and its value.
func mapOf(key string, value *yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, value}}
}

// compactUnder reports whether the block sequence under key k is written
// at the key's own indentation; dflt when it is not a block sequence.
func compactUnder(k, v *yaml.Node, dflt bool) bool {
	if k == nil || !blockSequence(v) {
		return dflt
	}
	return v.Column == k.Column
}

// insertKeyBefore writes key: value as text before the key anchor of the
// block mapping m (and anchor's head comment).
func (d *document) insertKeyBefore(m *yaml.Node, anchor string, key string, value *yaml.Node, compact bool) {
	k := keyNode(m, anchor)
	if m.Style&yaml.FlowStyle != 0 || !d.startsLine(k) {
		d.reencode = true
		return
	}
	text, err := render(mapOf(key, value), k.Column-1, compact)
	if err != nil {
		d.reencode = true
		return
	}
	at := d.lineStart(d.above(k.Line, 0))
	d.edit(at, at, text)
}

// insertKeyAfter writes key: value as text after the block of the key
// anchor of the block mapping m.
func (d *document) insertKeyAfter(m *yaml.Node, anchor string, key string, value *yaml.Node, compact bool) {
	k := keyNode(m, anchor)
	if m.Style&yaml.FlowStyle != 0 || !d.startsLine(k) {
		d.reencode = true
		return
	}
	text, err := render(mapOf(key, value), k.Column-1, compact)
	if err != nil {
		d.reencode = true
		return
	}
	at := d.blockEnd(k.Line, k.Column, true)
	if at == len(d.text) && !strings.HasSuffix(d.text, "\n") {
		text = "\n" + text
	}
	d.edit(at, at, text)
}

// replaceEmptyKey writes key: value over a key of m whose value is empty
// (null, [], {}), line and all; a line that holds more (a comment, another
// key) is left to the node tree.
func (d *document) replaceEmptyKey(m *yaml.Node, key string, value *yaml.Node, compact bool) {
	k, v := keyNode(m, key), yamledit.MappingValue(m, key)
	if m.Style&yaml.FlowStyle != 0 || !d.startsLine(k) || k.LineComment != "" || (v != nil && v.LineComment != "") {
		d.reencode = true
		return
	}
	rest := strings.TrimSpace(d.line(k.Line)[k.Column-1+len(key):])
	rest = strings.TrimSpace(strings.TrimPrefix(rest, ":"))
	if (rest != "" && rest != "[]" && rest != "{}" && rest != "null" && rest != "~") || (v != nil && v.Line != k.Line && v.Tag != "!!null") {
		d.reencode = true
		return
	}
	text, err := render(mapOf(key, value), k.Column-1, compact)
	if err != nil {
		d.reencode = true
		return
	}
	d.edit(d.lineStart(k.Line), d.lineEnd(k.Line), text)
}

// prependItem makes item the first item of the sequence under key in the
// block mapping m, adding the key before the key anchor when it is
// missing.
func (d *document) prependItem(m *yaml.Node, key string, item *yaml.Node, anchor string) {
	k, v := keyNode(m, key), yamledit.MappingValue(m, key)
	compact := compactUnder(k, v, compactUnder(keyNode(m, anchor), yamledit.MappingValue(m, anchor), d.compact))
	switch {
	case blockSequence(v) && d.startsLine(k):
		text, err := render(seqOf(item), v.Column-1, compact)
		if err != nil {
			d.reencode = true
			break
		}
		first := v.Line
		if v.Content[0].Line < first {
			first = v.Content[0].Line
		}
		at := d.lineStart(d.above(first, k.Line))
		d.edit(at, at, text)
	case k == nil:
		d.insertKeyBefore(m, anchor, key, seqOf(item), compact)
	case emptyValue(v):
		d.replaceEmptyKey(m, key, seqOf(item), compact)
	default:
		d.reencode = true
	}
	seq := yamledit.Ensure(m, key, yaml.SequenceNode)
	seq.Content = append([]*yaml.Node{item}, seq.Content...)
}

// appendItems adds items at the end of the sequence under key in the block
// mapping m, adding the key after the block of the key anchor when it is
// missing.
func (d *document) appendItems(m *yaml.Node, key string, items []*yaml.Node, anchor string) {
	if len(items) == 0 {
		return
	}
	k, v := keyNode(m, key), yamledit.MappingValue(m, key)
	compact := compactUnder(k, v, compactUnder(keyNode(m, anchor), yamledit.MappingValue(m, anchor), d.compact))
	switch {
	case blockSequence(v) && d.startsLine(k):
		text, err := render(seqOf(items...), v.Column-1, compact)
		if err != nil {
			d.reencode = true
			break
		}
		last := v.Content[len(v.Content)-1]
		at := d.blockEnd(last.Line, v.Column, false)
		if at == len(d.text) && !strings.HasSuffix(d.text, "\n") {
			text = "\n" + text
		}
		d.edit(at, at, text)
	case k == nil:
		d.insertKeyAfter(m, anchor, key, seqOf(items...), compact)
	case emptyValue(v):
		d.replaceEmptyKey(m, key, seqOf(items...), compact)
	default:
		d.reencode = true
	}
	seq := yamledit.Ensure(m, key, yaml.SequenceNode)
	seq.Content = append(seq.Content, items...)
}

// setScalar sets key in the block mapping m to the scalar value: over
// the old value's text when there is one (the line's comment stays; the
// value's own comment goes in when there is none), or as a new line
// before (or after) the key anchor.
func (d *document) setScalar(m *yaml.Node, key string, value *yaml.Node, anchor string, after bool) {
	k, v := keyNode(m, key), yamledit.MappingValue(m, key)
	switch {
	case k != nil && v != nil && v.Kind == yaml.ScalarNode && v.Line == k.Line && m.Style&yaml.FlowStyle == 0:
		start := d.offset(v.Line, v.Column)
		token := scalarToken(d.text[start:d.lineEnd(v.Line)], v)
		if token == "" {
			d.reencode = true
			break
		}
		text := value.Value
		if v.LineComment == "" && k.LineComment == "" && value.LineComment != "" {
			text += " # " + value.LineComment
		}
		d.edit(start, start+len(token), text)
		value.LineComment = cmp.Or(v.LineComment, value.LineComment)
	case k == nil:
		line := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, value}}
		a := keyNode(m, anchor)
		if m.Style&yaml.FlowStyle != 0 || a == nil || (!after && !d.startsLine(a)) {
			d.reencode = true
			break
		}
		text, err := render(line, a.Column-1, d.compact)
		if err != nil {
			d.reencode = true
			break
		}
		if after {
			av := yamledit.MappingValue(m, anchor)
			if av == nil || av.Kind != yaml.ScalarNode || av.Line != a.Line {
				d.reencode = true
				break
			}
			at := d.lineEnd(a.Line)
			if at == len(d.text) && !strings.HasSuffix(d.text, "\n") {
				text = "\n" + text
			}
			d.edit(at, at, text)
		} else {
			at := d.lineStart(d.above(a.Line, 0))
			d.edit(at, at, text)
		}
	default:
		d.reencode = true
	}
	yamledit.Set(m, key, value)
}

// scalarToken finds a scalar's text at the start of rest: plain, or quoted
// with ' or ". It is "" when the text does not read as the node's value.
func scalarToken(rest string, v *yaml.Node) string {
	switch v.Style {
	case 0:
		if strings.HasPrefix(rest, v.Value) {
			return v.Value
		}
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		q := rest[:1]
		if q != `"` && q != "'" {
			return ""
		}
		for i := 1; i < len(rest); i++ {
			switch {
			case q == `"` && rest[i] == '\\':
				i++
			case q == "'" && rest[i] == '\'' && i+1 < len(rest) && rest[i+1] == '\'':
				i++
			case rest[i:i+1] == q:
				var got string
				if err := yaml.Unmarshal([]byte(rest[:i+1]), &got); err != nil || got != v.Value {
					return ""
				}
				return rest[:i+1]
			}
		}
	}
	return ""
}

// The functions below make the parts of a document inject edits local:
// YAML lets a mapping take keys from elsewhere (an alias *name, or a
// merge key <<), and a key added next to a merged one hides it. Edits
// through such a part copy it in place first, and the document is printed
// from its node tree.

// maxExpandedNodes bounds the copies of aliased nodes: a few aliases
// nested can stand for billions of nodes.
const maxExpandedNodes = 1 << 20

// expand returns a deep copy of n with every alias replaced by a copy of
// what it names, and no anchors; false when the copy would pass
// maxExpandedNodes.
func expand(n *yaml.Node) (*yaml.Node, bool) {
	budget := maxExpandedNodes
	var walk func(n *yaml.Node) *yaml.Node
	walk = func(n *yaml.Node) *yaml.Node {
		if budget--; budget < 0 {
			return nil
		}
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		c := *n
		c.Anchor = ""
		c.Content = nil
		for _, ch := range n.Content {
			e := walk(ch)
			if e == nil {
				return nil
			}
			c.Content = append(c.Content, e)
		}
		return &c
	}
	c := walk(n)
	return c, c != nil
}

// flattenMerges rewrites, in a tree without aliases (expand's), every
// mapping with merge keys as the mapping a YAML reader sees: its own keys,
// then the merged keys it does not set itself. Strict readers then see a
// key a mapping overrides once, as the merge means it.
func flattenMerges(n *yaml.Node) {
	for _, c := range n.Content {
		flattenMerges(c)
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	var own, merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Tag != "!!merge" {
			own = append(own, n.Content[i], n.Content[i+1])
			continue
		}
		src := n.Content[i+1]
		sources := []*yaml.Node{src}
		if src.Kind == yaml.SequenceNode {
			sources = src.Content
		}
		for _, s := range sources {
			if s.Kind == yaml.MappingNode {
				merged = append(merged, s.Content...)
			}
		}
	}
	if merged == nil {
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(own); i += 2 {
		seen[own[i].Value] = true
	}
	for i := 0; i+1 < len(merged); i += 2 {
		if !seen[merged[i].Value] {
			seen[merged[i].Value] = true
			own = append(own, merged[i], merged[i+1])
		}
	}
	n.Content = own
}

// unalias replaces every alias of the document by a copy of what it
// names, before inject edits anything in it: an edit of an anchored node
// must not reach the places that name it, and an edit through an alias
// must not reach the anchored node. The document is then printed from its
// node tree.
func (d *document) unalias() error {
	if d.root == nil || d.unaliased {
		return nil
	}
	var err error
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		for i, c := range n.Content {
			if c.Kind == yaml.AliasNode && c.Alias != nil {
				e, ok := expand(c.Alias)
				if !ok {
					err = fmt.Errorf("YAML aliases that expand to more than %d nodes", maxExpandedNodes)
					return
				}
				n.Content[i] = e
				d.reencode = true
				continue
			}
			walk(c)
		}
	}
	walk(d.root)
	d.unaliased = err == nil
	return err
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// mergedValue looks key up in the mapping m as a YAML reader does: m's
// own keys first, then the mappings its merge keys name, in order.
func mergedValue(m *yaml.Node, key string, depth int) *yaml.Node {
	m = resolve(m)
	if m == nil || m.Kind != yaml.MappingNode || depth > 32 {
		return nil
	}
	if v := yamledit.MappingValue(m, key); v != nil {
		return v
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Tag != "!!merge" {
			continue
		}
		src := resolve(m.Content[i+1])
		var sources []*yaml.Node
		switch {
		case src == nil:
		case src.Kind == yaml.MappingNode:
			sources = []*yaml.Node{src}
		case src.Kind == yaml.SequenceNode:
			sources = src.Content
		}
		for _, s := range sources {
			if v := mergedValue(s, key, depth+1); v != nil {
				return v
			}
		}
	}
	return nil
}

// localMapping returns the mapping under key in m as one that can be
// edited in place (see localKey); nil when there is no mapping there.
func (d *document) localMapping(m *yaml.Node, key string) (*yaml.Node, error) {
	if err := d.localKey(m, key); err != nil {
		return nil, err
	}
	v := yamledit.MappingValue(m, key)
	if v == nil || v.Kind != yaml.MappingNode {
		return nil, nil
	}
	return v, nil
}

// localKey makes the value of key in the mapping m its own: an alias
// becomes a copy of what it names, and a value merged in from elsewhere
// (<<) moves into m, so that changing it neither changes the original nor
// leaves the merged value beside it (strict readers refuse a key both
// merged and set). The merged mappings are the document's own copies by
// then (unalias).
func (d *document) localKey(m *yaml.Node, key string) error {
	own := yamledit.MappingValue(m, key)
	if own != nil && own.Kind != yaml.AliasNode {
		return nil
	}
	v := own
	if v == nil {
		v = mergedValue(m, key, 0)
	}
	if v == nil {
		return nil
	}
	c, ok := expand(v)
	if !ok {
		return fmt.Errorf("%s: its YAML aliases expand to more than %d nodes", key, maxExpandedNodes)
	}
	removeMerged(m, key, 0)
	yamledit.Set(m, key, c)
	d.reencode = true
	return nil
}

// removeMerged deletes key from the mappings the merge keys of m name.
func removeMerged(m *yaml.Node, key string, depth int) {
	m = resolve(m)
	if m == nil || m.Kind != yaml.MappingNode || depth > 32 {
		return
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Tag != "!!merge" {
			continue
		}
		src := resolve(m.Content[i+1])
		sources := []*yaml.Node{src}
		if src != nil && src.Kind == yaml.SequenceNode {
			sources = src.Content
		}
		for _, s := range sources {
			s = resolve(s)
			if s == nil || s.Kind != yaml.MappingNode {
				continue
			}
			for j := 0; j+1 < len(s.Content); j += 2 {
				if s.Content[j].Value == key && s.Content[j].Tag != "!!merge" {
					s.Content = append(s.Content[:j], s.Content[j+2:]...)
					break
				}
			}
			removeMerged(s, key, depth+1)
		}
	}
}
