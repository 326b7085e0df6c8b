package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// A backend's answer is parsed once, into a flat tape of nodes that point
// back into the raw bytes. CEL rules read it through lazy values (see
// celjson.go), and data that passes through whole is copied from the raw
// bytes: nothing is decoded into Go maps and re-encoded, and the backend's
// key order and number literals survive.

type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonFalse
	jsonTrue
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

// tapeNode is one value. Nodes are in document order; an object's children
// are key (a string node), value, key, value...; next skips the subtree.
type tapeNode struct {
	start, end int32 // raw bytes src[start:end]
	next       int32 // index of the first node after this subtree
	count      int32 // elements of an array, members of an object
	kind       jsonKind
	escaped    bool // a string that holds escapes
}

// jsonDoc is a parsed JSON document.
type jsonDoc struct {
	src   []byte
	nodes []tapeNode
	// compact: no insignificant whitespace anywhere and valid UTF-8, so
	// any subtree can be copied out verbatim.
	compact bool
}

// maxJSONDepth bounds nesting of backend answers. Deeper documents are
// refused as unreadable rather than risking the stack.
const maxJSONDepth = 512

var errJSONSyntax = errors.New("invalid JSON")

// parseJSONDoc parses src (one JSON value, surrounding whitespace allowed).
func parseJSONDoc(src []byte) (*jsonDoc, error) {
	d := &jsonDoc{nodes: make([]tapeNode, 0, 16+len(src)/24)}
	if err := d.parse(src); err != nil {
		return nil, err
	}
	return d, nil
}

// parse parses src into d, reusing d's tape.
func (d *jsonDoc) parse(src []byte) error {
	if len(src) > 1<<30 {
		return errors.New("JSON document too large")
	}
	p := jsonParser{src: src, compact: true, nodes: d.nodes[:0]}
	p.skipSpaceOuter()
	err := p.value(0)
	if err == nil {
		p.skipSpaceOuter()
		if p.i != len(src) {
			err = errJSONSyntax
		}
	}
	d.nodes = p.nodes // kept for reuse even on failure
	if err != nil {
		return err
	}
	if p.compact && !utf8.Valid(src) {
		p.compact = false
	}
	d.src, d.compact = src, p.compact
	return nil
}

type jsonParser struct {
	src          []byte
	i            int
	nodes        []tapeNode
	compact      bool
	validateOnly bool // check the syntax, record nothing
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpaceOuter skips whitespace around the top-level value, which does
// not make the document non-compact (the root's range excludes it).
func (p *jsonParser) skipSpaceOuter() {
	for p.i < len(p.src) && isJSONSpace(p.src[p.i]) {
		p.i++
	}
}

func (p *jsonParser) skipSpace() {
	start := p.i
	for p.i < len(p.src) && isJSONSpace(p.src[p.i]) {
		p.i++
	}
	if p.i != start {
		p.compact = false
	}
}

func (p *jsonParser) value(depth int) error {
	if p.i >= len(p.src) {
		return errJSONSyntax
	}
	switch c := p.src[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == 't':
		return p.literal("true", jsonTrue)
	case c == 'f':
		return p.literal("false", jsonFalse)
	case c == 'n':
		return p.literal("null", jsonNull)
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return errJSONSyntax
}

func (p *jsonParser) push(kind jsonKind) int {
	if p.validateOnly {
		return 0
	}
	p.nodes = append(p.nodes, tapeNode{start: int32(p.i), kind: kind})
	return len(p.nodes) - 1
}

func (p *jsonParser) close(idx int) {
	if p.validateOnly {
		return
	}
	n := &p.nodes[idx]
	n.end = int32(p.i)
	n.next = int32(len(p.nodes))
}

// validCompactJSON reports whether src is one valid JSON value, and
// whether it is already compact valid UTF-8 (nothing to rewrite), without
// building a tape.
func validCompactJSON(src []byte) (valid, compact bool) {
	p := jsonParser{src: src, compact: true, validateOnly: true}
	p.skipSpaceOuter()
	if p.i != 0 {
		p.compact = false
	}
	if err := p.value(0); err != nil {
		return false, false
	}
	if p.i != len(src) {
		p.skipSpaceOuter()
		return p.i == len(src), false
	}
	return true, p.compact && utf8.Valid(src)
}

func (p *jsonParser) literal(word string, kind jsonKind) error {
	if len(p.src)-p.i < len(word) || string(p.src[p.i:p.i+len(word)]) != word {
		return errJSONSyntax
	}
	idx := p.push(kind)
	p.i += len(word)
	p.close(idx)
	return nil
}

func (p *jsonParser) number() error {
	idx := p.push(jsonNumber)
	s, i := p.src, p.i
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return errJSONSyntax
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return errJSONSyntax
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return errJSONSyntax
		}
	}
	p.i = i
	p.close(idx)
	return nil
}

func (p *jsonParser) str() error {
	idx := p.push(jsonString)
	s := p.src
	i := p.i + 1
	for {
		// Plain string bytes are the common case: skip them in a tight loop.
		for i < len(s) && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\' {
			i++
		}
		if i >= len(s) {
			return errJSONSyntax
		}
		c := s[i]
		switch {
		case c == '"':
			p.i = i + 1
			p.close(idx)
			return nil
		case c == '\\':
			if !p.validateOnly {
				p.nodes[idx].escaped = true
			}
			if i+1 >= len(s) {
				return errJSONSyntax
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s) {
					return errJSONSyntax
				}
				for _, h := range s[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return errJSONSyntax
					}
				}
				i += 6
			default:
				return errJSONSyntax
			}
		case c < 0x20:
			return errJSONSyntax
		default:
			i++
		}
	}
}

func (p *jsonParser) array(depth int) error {
	if depth >= maxJSONDepth {
		return errJSONSyntax
	}
	idx := p.push(jsonArray)
	p.i++
	p.skipSpace()
	if p.i < len(p.src) && p.src[p.i] == ']' {
		p.i++
		p.close(idx)
		return nil
	}
	for {
		if err := p.value(depth + 1); err != nil {
			return err
		}
		if done, err := p.member(idx, ']'); done || err != nil {
			return err
		}
	}
}

// member counts the element or member just parsed into node idx and takes
// what follows it: a comma (more to come) or closer (done; the node is
// closed).
func (p *jsonParser) member(idx int, closer byte) (done bool, err error) {
	if !p.validateOnly {
		p.nodes[idx].count++
	}
	p.skipSpace()
	if p.i >= len(p.src) {
		return false, errJSONSyntax
	}
	switch p.src[p.i] {
	case ',':
		p.i++
		p.skipSpace()
		return false, nil
	case closer:
		p.i++
		p.close(idx)
		return true, nil
	}
	return false, errJSONSyntax
}

func (p *jsonParser) object(depth int) error {
	if depth >= maxJSONDepth {
		return errJSONSyntax
	}
	idx := p.push(jsonObject)
	p.i++
	p.skipSpace()
	if p.i < len(p.src) && p.src[p.i] == '}' {
		p.i++
		p.close(idx)
		return nil
	}
	for {
		if p.i >= len(p.src) || p.src[p.i] != '"' {
			return errJSONSyntax
		}
		if err := p.str(); err != nil {
			return err
		}
		p.skipSpace()
		if p.i >= len(p.src) || p.src[p.i] != ':' {
			return errJSONSyntax
		}
		p.i++
		p.skipSpace()
		if err := p.value(depth + 1); err != nil {
			return err
		}
		if done, err := p.member(idx, '}'); done || err != nil {
			return err
		}
	}
}

// raw returns a node's bytes.
func (d *jsonDoc) raw(i int32) []byte {
	n := &d.nodes[i]
	return d.src[n.start:n.end]
}

// readString, readBool, readInt and readFloat set *dst from node i as
// encoding/json sets a field of that type: a null leaves it as it is, and
// a value of another type is an error.
func (d *jsonDoc) readString(i int32, dst *string) error {
	switch d.nodes[i].kind {
	case jsonNull:
	case jsonString:
		*dst = d.str(i)
	default:
		return errors.New("not a string")
	}
	return nil
}

func (d *jsonDoc) readBool(i int32, dst *bool) error {
	switch d.nodes[i].kind {
	case jsonNull:
	case jsonTrue, jsonFalse:
		*dst = d.nodes[i].kind == jsonTrue
	default:
		return errors.New("not a boolean")
	}
	return nil
}

func (d *jsonDoc) readInt(i int32, dst *int64) error {
	switch d.nodes[i].kind {
	case jsonNull:
		return nil
	case jsonNumber:
		n, err := strconv.ParseInt(string(d.raw(i)), 10, 64)
		if err == nil {
			*dst = n
		}
		return err
	}
	return errors.New("not a number")
}

func (d *jsonDoc) readFloat(i int32, dst *float64) error {
	switch d.nodes[i].kind {
	case jsonNull:
		return nil
	case jsonNumber:
		f, err := strconv.ParseFloat(string(d.raw(i)), 64)
		if err == nil {
			*dst = f
		}
		return err
	}
	return errors.New("not a number")
}

// str returns a string node's value.
func (d *jsonDoc) str(i int32) string {
	n := &d.nodes[i]
	raw := d.src[n.start+1 : n.end-1]
	if !n.escaped && (d.compact || utf8.Valid(raw)) {
		return string(raw)
	}
	return unescapeJSON(raw)
}

// unescapeJSON decodes the inside of a JSON string the parser has checked,
// as encoding/json does: a lone or broken surrogate escape and an invalid
// UTF-8 byte each become U+FFFD.
func unescapeJSON(s []byte) string {
	b := make([]byte, 0, len(s))
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\' && r+1 < len(s):
			r++
			switch e := s[r]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := hex4(s[r+1:])
				r += 5
				if utf16.IsSurrogate(rr) {
					if r+1 < len(s) && s[r] == '\\' && s[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(s[r+2:])); dec != utf8.RuneError {
							b = utf8.AppendRune(b, dec)
							r += 6
							continue
						}
					}
					rr = utf8.RuneError
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // " \ /
				b = append(b, e)
			}
			r++
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			b = utf8.AppendRune(b, rr)
			r += size
		}
	}
	return string(b)
}

// hex4 reads four hex digits; -1 when they are not.
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// keyEquals reports whether string node i holds key, without allocating
// for keys that have no escapes.
func (d *jsonDoc) keyEquals(i int32, key string) bool {
	n := &d.nodes[i]
	if !n.escaped {
		return string(d.src[n.start+1:n.end-1]) == key
	}
	return d.str(i) == key
}

// member finds the value of key in object node i; the last of duplicate
// keys wins, as in encoding/json.
func (d *jsonDoc) member(i int32, key string) (int32, bool) {
	n := d.nodes[i]
	found, at := false, int32(0)
	k := i + 1
	for range n.count {
		v := k + 1
		if d.keyEquals(k, key) {
			found, at = true, v
		}
		k = d.nodes[v].next
	}
	return at, found
}

// elements returns the node indices of array node i's elements.
func (d *jsonDoc) elements(i int32) []int32 {
	n := d.nodes[i]
	out := make([]int32, 0, n.count)
	e := i + 1
	for range n.count {
		out = append(out, e)
		e = d.nodes[e].next
	}
	return out
}

// isEmpty reports whether node i is null, "", [] or {}.
func (d *jsonDoc) isEmpty(i int32) bool {
	n := &d.nodes[i]
	switch n.kind {
	case jsonNull:
		return true
	case jsonString:
		return n.end-n.start == 2
	case jsonArray, jsonObject:
		return n.count == 0
	}
	return false
}

// native decodes node i into Go values as encoding/json would (numbers as
// float64), for the rare operations that need them.
func (d *jsonDoc) native(i int32) any {
	n := &d.nodes[i]
	switch n.kind {
	case jsonNull:
		return nil
	case jsonFalse:
		return false
	case jsonTrue:
		return true
	case jsonNumber:
		f, _ := strconv.ParseFloat(string(d.raw(i)), 64)
		return f
	case jsonString:
		return d.str(i)
	case jsonArray:
		out := make([]any, 0, n.count)
		for _, e := range d.elements(i) {
			out = append(out, d.native(e))
		}
		return out
	default:
		out := make(map[string]any, n.count)
		k := i + 1
		for range n.count {
			v := k + 1
			out[d.str(k)] = d.native(v)
			k = d.nodes[v].next
		}
		return out
	}
}

// appendRaw appends node i as compact, valid-UTF-8 JSON, in the source's
// key order and number spelling.
func (d *jsonDoc) appendRaw(dst []byte, i int32) []byte {
	raw := d.raw(i)
	if d.compact {
		return append(dst, raw...)
	}
	return appendCompactJSON(dst, raw)
}

// appendCompactJSON copies valid JSON without insignificant whitespace,
// replacing invalid UTF-8 inside strings with U+FFFD.
func appendCompactJSON(dst, src []byte) []byte {
	inString := false
	for i := 0; i < len(src); {
		c := src[i]
		if !inString {
			if !isJSONSpace(c) {
				dst = append(dst, c)
				if c == '"' {
					inString = true
				}
			}
			i++
			continue
		}
		switch {
		case c == '\\':
			dst = append(dst, c, src[i+1])
			i += 2
		case c == '"':
			dst = append(dst, c)
			inString = false
			i++
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, "\ufffd"...)
			} else {
				dst = append(dst, src[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}

// argsDocs recycles the tapes DecodeArgs parses into.
var argsDocs = sync.Pool{New: func() any { return &jsonDoc{nodes: make([]tapeNode, 0, 64)} }}

// DecodeArgs decodes a JSON object of call arguments strictly: numbers stay
// json.Number (no precision is lost before the schema sees them; reading
// one costs its length, and Schema.Validate refuses those beyond the
// argument bounds of numbers.go before anything computes with them), duplicate
// keys are refused (two readers could disagree on which one counts), as are
// invalid UTF-8, nesting deeper than maxDepth, and anything after the
// object. The error is an *ArgError naming the problem.
func DecodeArgs(src []byte, maxDepth int) (map[string]any, error) {
	if !utf8.Valid(src) {
		return nil, &ArgError{Problem: ProblemNotUTF8}
	}
	// The tape lives only while the arguments are copied out of it.
	doc := argsDocs.Get().(*jsonDoc)
	defer func() {
		if cap(doc.nodes) <= 1<<12 {
			doc.src = nil
			argsDocs.Put(doc)
		}
	}()
	if err := doc.parse(src); err != nil {
		return nil, &ArgError{Problem: ProblemNotJSON}
	}
	if doc.nodes[0].kind != jsonObject {
		return nil, &ArgError{Problem: ProblemNotObject}
	}
	v, err := doc.args(0, 0, maxDepth)
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

func (d *jsonDoc) args(i int32, depth, maxDepth int) (any, error) {
	n := &d.nodes[i]
	switch n.kind {
	case jsonNull:
		return nil, nil
	case jsonFalse:
		return false, nil
	case jsonTrue:
		return true, nil
	case jsonNumber:
		return json.Number(d.raw(i)), nil
	case jsonString:
		return d.str(i), nil
	}
	if depth >= maxDepth {
		return nil, &ArgError{Problem: ProblemTooDeep, Max: strconv.Itoa(maxDepth)}
	}
	if n.kind == jsonArray {
		out := make([]any, 0, n.count)
		for _, e := range d.elements(i) {
			v, err := d.args(e, depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	out := make(map[string]any, n.count)
	k := i + 1
	for range n.count {
		v := k + 1
		key := d.str(k)
		if _, dup := out[key]; dup {
			if len(key) > 40 {
				key = key[:40]
			}
			return nil, &ArgError{Problem: ProblemDuplicateKey, Got: quoteShort(key)}
		}
		val, err := d.args(v, depth+1, maxDepth)
		if err != nil {
			return nil, err
		}
		out[key] = val
		k = d.nodes[v].next
	}
	return out, nil
}

// topLevelMembers decodes only the named members of a JSON object (as
// encoding/json would, numbers as float64), skipping the rest without
// building a tape. ok is false when src is not a valid JSON object.
func topLevelMembers(src []byte, keys []string) (map[string]any, bool) {
	p := jsonParser{src: src, validateOnly: true}
	p.skipSpaceOuter()
	if p.i >= len(src) || src[p.i] != '{' {
		return nil, false
	}
	out := make(map[string]any, len(keys))
	p.i++
	p.skipSpace()
	if p.i < len(src) && src[p.i] == '}' {
		return out, true
	}
	for {
		if p.i >= len(src) || src[p.i] != '"' {
			return nil, false
		}
		kStart := p.i
		if err := p.str(); err != nil {
			return nil, false
		}
		kEnd := p.i
		p.skipSpace()
		if p.i >= len(src) || src[p.i] != ':' {
			return nil, false
		}
		p.i++
		p.skipSpace()
		vStart := p.i
		if err := p.value(1); err != nil {
			return nil, false
		}
		raw := src[vStart:p.i]
		for _, k := range keys {
			if keyMatches(src[kStart:kEnd], k) {
				if doc, err := parseJSONDoc(raw); err == nil {
					out[k] = doc.native(0)
				}
			}
		}
		if done, err := p.member(0, '}'); err != nil {
			return nil, false
		} else if done {
			return out, true
		}
	}
}

// keyMatches compares a raw JSON string (with quotes) to key.
func keyMatches(raw []byte, key string) bool {
	inner := raw[1 : len(raw)-1]
	if !bytes.ContainsRune(inner, '\\') {
		return string(inner) == key
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == key
}

// IsJSONNumber reports whether s is exactly one number in JSON's grammar.
func IsJSONNumber(s string) bool {
	if s == "" || s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return false
	}
	p := jsonParser{src: []byte(s), validateOnly: true}
	return p.number() == nil && p.i == len(s)
}
