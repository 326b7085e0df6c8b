// Package jsontape reads and writes JSON text for toolgate's fast paths.
//
// Reading: Parse checks a document once and records it as a flat tape of
// nodes that point back into the source bytes. A Value is a node of the
// tape: its kind, its members or elements, its scalar as Go values. Nothing
// is decoded into Go maps unless asked (Value.Native), and a subtree can be
// copied out as written or compacted, so an answer's key order and number
// literals survive. The parser accepts exactly what encoding/json accepts
// (FuzzParse compares them), nesting up to MaxDepth. The tape of a large
// document is lazy: it checks every byte at once, but the records deep in
// it get nodes only when something reads into them (see Parse), and reads
// exactly as the tape that has them all (FuzzLazyTape).
//
// Writing: AppendString, AppendFloat and AppendCanonical write the bytes
// encoding/json would for a string, a float and a decoded document (the
// last with sorted keys), without reflection. They live here so that every
// JSON toolgate writes by hand comes from one place, fuzzed against
// encoding/json.
//
// Lifetime: tapes are pooled, so parsing allocates nothing once the pool is
// warm. Release hands a tape back, after which the Tape and every Value
// read from it are dead: each carries the generation of the tape it was
// issued for, Release moves the tape to the next one, and any later use
// panics (ErrReleased), in every build, instead of reading nodes that may
// by then describe another document. Nothing a Value returns aliases the
// tape or the source (strings, literals and appended bytes are copies), so
// results stay valid after Release. A Tape that is never released is
// collected as any other value; releasing only saves the next parse its
// allocations.
package jsontape

import (
	"errors"
	"sync"
)

// Kind is the JSON type of a value.
type Kind uint8

// The kinds of JSON values.
const (
	Null Kind = iota
	False
	True
	Number
	String
	Array
	Object
)

// MaxDepth bounds the nesting of a document. Deeper documents are refused
// as invalid rather than risking the stack.
const MaxDepth = 512

// maxSource is the largest document Parse reads: node offsets are int32.
const maxSource = 1 << 30

var (
	// ErrSyntax is returned for a document that is not one JSON value.
	ErrSyntax = errors.New("invalid JSON")
	// ErrNotObject is returned by ParseObject for a valid document that is
	// not an object.
	ErrNotObject = errors.New("not a JSON object")
	// ErrReleased is the panic value of any use of a Tape, or of a Value
	// read from it, after the Tape was released.
	ErrReleased = errors.New("jsontape: tape used after Release")
	errTooLarge = errors.New("JSON document too large")
)

// node is one value. Nodes are in document order; an object's children are
// key (a string node), value, key, value...; next skips the subtree.
type node struct {
	start, end int32 // raw bytes src[start:end]
	next       int32 // index of the first node after this subtree
	count      int32 // elements of an array, members of an object
	kind       Kind
	escaped    bool // a string that holds escapes
	// lazy: an array or object whose elements or members have no nodes
	// here (next is the node after it); reading into it parses its bytes
	// into a tape of its own (tape.expand).
	lazy bool
}

// Tape is a parsed JSON document: a handle to a pooled tape, stamped with
// the generation of the tape it was issued for. It is safe for concurrent
// reads until it is released. The zero Tape is not a document.
type Tape struct {
	t   *tape
	gen uint32
}

// tape is the pooled storage of a document. Release bumps gen, which kills
// every handle and Value stamped with the old one.
type tape struct {
	src   []byte
	nodes []node
	gen   uint32
	// valid: the source is valid UTF-8, so a string without escapes is
	// its own text. compact: also no insignificant white space anywhere,
	// so any subtree can be copied out verbatim.
	valid, compact bool
	// subs holds the tapes of the lazy containers read into so far, by
	// node; mu guards it, so that concurrent readers expand a container
	// once.
	mu   sync.Mutex
	subs map[int32]*tape
}

// maxPooledNodes is the largest node buffer Release keeps for reuse
// (20 bytes a node, 1.3 MB in all): room for the tape of a document up to
// about 1.5 MiB, so that an answer as large as the default
// server.max_response_bytes (1 MiB) does not allocate and clear its tape
// anew on every call. Larger ones go to the collector.
const maxPooledNodes = 1 << 16

// lazyFrom is the size from which a document's tape is lazy: containers
// nested lazyDepth deep or more are checked and counted but get no nodes
// of their own until something reads into them. A large answer is mostly
// such containers (the records of a list), which the rules and the
// observation count and copy whole but rarely enter, so its tape costs a
// check of those bytes instead of a node for every value in them.
// Smaller documents, which rules walk freely, get every node at once.
const (
	lazyFrom  = 16 << 10
	lazyDepth = 2
)

// tapes recycles tapes, node buffers included.
var tapes = sync.Pool{New: func() any { return &tape{nodes: make([]node, 0, 64)} }}

// ParseObject parses src as Parse does and returns its root, which must be
// an object: any other value is ErrNotObject (and the tape is already
// released). On success the caller releases the tape.
func ParseObject(src []byte) (Tape, Value, error) {
	t, err := Parse(src)
	if err != nil {
		return Tape{}, Value{}, err
	}
	root := t.Root()
	if root.Kind() != Object {
		t.Release()
		return Tape{}, Value{}, ErrNotObject
	}
	return t, root, nil
}

// Parse parses src, one JSON value with white space around it allowed.
// The tape reads src in place: src must not change while the tape lives.
//
// A document of lazyFrom bytes or more is checked whole, exactly as a
// small one, but its containers from lazyDepth down are recorded as
// single nodes (their kind, extent and length); the first read into one
// (a Cursor, and what uses it: Lookup, Native) parses that container's
// bytes into a tape of its own, once. Kind, Len, AppendCompact and
// AppendRaw of such a container need no expansion.
func Parse(src []byte) (Tape, error) {
	depth := 0
	if len(src) >= lazyFrom {
		depth = lazyDepth
	}
	return parse(src, depth)
}

// parse is Parse with containers from lazy deep recorded lazily; 0 makes
// every node at once.
func parse(src []byte, lazy int) (Tape, error) {
	t, err := parseTape(src, lazy)
	if err != nil {
		return Tape{}, err
	}
	return Tape{t: t, gen: t.gen}, nil
}

// parseTape parses src into a pooled tape (see parse).
func parseTape(src []byte, lazy int) (*tape, error) {
	if len(src) > maxSource {
		return nil, errTooLarge
	}
	t := tapes.Get().(*tape)
	nodes := t.nodes[:0]
	want := 16 + len(src)/24
	if lazy > 0 {
		// Most of a large document is in lazy containers.
		want = 64
	}
	if cap(nodes) < want {
		nodes = make([]node, 0, want)
	}
	p := parser{src: src, compact: true, nodes: nodes, lazyDepth: lazy}
	p.skipSpaceOuter()
	err := p.value(0)
	if err == nil {
		p.skipSpaceOuter()
		if p.i != len(src) {
			err = ErrSyntax
		}
	}
	t.nodes = p.nodes
	if err != nil {
		t.release()
		return nil, err
	}
	// Only strings may hold bytes past ASCII, and str checks those.
	t.src, t.valid = src, !p.invalid
	t.compact = p.compact && t.valid
	return t, nil
}

// expand returns the tape of the lazy container at node i, parsing its
// bytes the first time: the container is its root, and the containers
// lazyDepth below it are lazy again when it is large. The bytes were
// checked when the document was parsed, so this cannot fail.
func (t *tape) expand(i int32) *tape {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sub, ok := t.subs[i]; ok {
		return sub
	}
	n := &t.nodes[i]
	raw := t.src[n.start:n.end]
	lazy := 0
	if len(raw) >= lazyFrom {
		lazy = lazyDepth
	}
	sub, err := parseTape(raw, lazy)
	if err != nil {
		// The document's parse checked these bytes: this is a bug.
		panic("jsontape: lazy container does not parse: " + err.Error())
	}
	if t.subs == nil {
		t.subs = make(map[int32]*tape)
	}
	t.subs[i] = sub
	return sub
}

// Release hands the tape back for reuse. The Tape, its copies and its
// Values must not be used after: any use panics with ErrReleased, even once
// the tape holds another document. What was read from them (strings,
// literals, appended bytes, Native values) stays valid. Releasing twice, or
// the zero Tape, does nothing.
func (h Tape) Release() {
	t := h.t
	if t == nil || t.gen != h.gen {
		return
	}
	t.release()
}

// release kills every handle and Value of the tape and of the tapes of
// its expanded containers, and hands them back.
func (t *tape) release() {
	t.gen++
	t.src = nil
	if cap(t.nodes) > maxPooledNodes {
		t.nodes = nil
	}
	t.nodes = t.nodes[:0]
	for _, sub := range t.subs {
		sub.release()
	}
	clear(t.subs)
	tapes.Put(t)
}

// Root returns the document's value.
func (h Tape) Root() Value {
	h.t.check(h.gen)
	return Value{t: h.t, i: 0, gen: h.gen}
}

// check panics with ErrReleased unless the tape still holds generation gen.
func (t *tape) check(gen uint32) {
	if t.gen != gen {
		panic(ErrReleased)
	}
}

// Check reports whether src is one valid JSON value, and whether it is
// already compact valid UTF-8 (nothing to rewrite), without building a
// tape.
func Check(src []byte) (valid, compact bool) {
	p := parser{src: src, compact: true}
	p.skipSpaceOuter()
	if p.i != 0 {
		p.compact = false
	}
	if _, err := p.skip(0); err != nil {
		return false, false
	}
	if p.i != len(src) {
		p.skipSpaceOuter()
		return p.i == len(src), false
	}
	return true, p.compact && !p.invalid
}

// IsNumber reports whether s is exactly one number in JSON's grammar.
func IsNumber(s string) bool {
	if s == "" || s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return false
	}
	return numberEnd([]byte(s), 0) == len(s)
}

type parser struct {
	src     []byte
	i       int
	nodes   []node
	compact bool
	// validateOnly: check the syntax, record nothing. The checker
	// (skip) does this in one loop; this recursive reading is what
	// FuzzChecker holds it to.
	validateOnly bool
	// lazyDepth: containers this deep or deeper are lazy nodes (see
	// Parse); 0 for none.
	lazyDepth int
	// invalid: some string holds invalid UTF-8. Outside strings the
	// grammar admits only ASCII, so a document is valid UTF-8 exactly
	// when every string is.
	invalid bool
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpaceOuter skips white space around the top-level value, which does
// not make the document non-compact (the root's range excludes it).
func (p *parser) skipSpaceOuter() {
	for p.i < len(p.src) && isSpace(p.src[p.i]) {
		p.i++
	}
}

func (p *parser) skipSpace() {
	// Compact JSON has no white space between tokens: the common case
	// is one comparison.
	if p.i < len(p.src) && p.src[p.i] > ' ' {
		return
	}
	start := p.i
	for p.i < len(p.src) && isSpace(p.src[p.i]) {
		p.i++
	}
	if p.i != start {
		p.compact = false
	}
}

func (p *parser) value(depth int) error {
	if p.i >= len(p.src) {
		return ErrSyntax
	}
	switch c := p.src[p.i]; {
	case c == '{':
		return p.container(depth, Object, '}')
	case c == '[':
		return p.container(depth, Array, ']')
	case c == '"':
		return p.str()
	case c == 't':
		return p.literal("true", True)
	case c == 'f':
		return p.literal("false", False)
	case c == 'n':
		return p.literal("null", Null)
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return ErrSyntax
}

func (p *parser) push(kind Kind) int {
	if p.validateOnly {
		return 0
	}
	p.nodes = append(p.nodes, node{start: int32(p.i), kind: kind})
	return len(p.nodes) - 1
}

func (p *parser) close(idx int) {
	if p.validateOnly {
		return
	}
	n := &p.nodes[idx]
	n.end = int32(p.i)
	n.next = int32(len(p.nodes))
}

func (p *parser) literal(word string, kind Kind) error {
	end := literalEnd(p.src, p.i, word)
	if end < 0 {
		return ErrSyntax
	}
	idx := p.push(kind)
	p.i = end
	p.close(idx)
	return nil
}

func (p *parser) number() error {
	idx := p.push(Number)
	end := numberEnd(p.src, p.i)
	if end < 0 {
		return ErrSyntax
	}
	p.i = end
	p.close(idx)
	return nil
}

// digits returns the index after the run of decimal digits at s[i:].
func digits(s []byte, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

func (p *parser) str() error {
	idx := p.push(String)
	s := p.src
	start := p.i + 1
	end, high := plainRun(s, start)
	if end >= len(s) || s[end] != '"' {
		// An escape, a control character, or the last bytes of the
		// document: the rest of the text a byte at a time.
		var high8, escaped bool
		if end, high8, escaped = stringEnd(s, end); end < 0 {
			return ErrSyntax
		}
		high = high || high8
		if escaped && !p.validateOnly {
			p.nodes[idx].escaped = true
		}
	}
	// Only a string with a byte past ASCII needs the UTF-8 check; a
	// sequence cannot span its quotes.
	if high && !p.invalid && !validUTF8(s[start:end]) {
		p.invalid = true
	}
	p.i = end + 1
	p.close(idx)
	return nil
}

// plainWord reports whether none of the eight bytes of x is a control
// character, a quote or a backslash: the bytes a string holds as they are.
func plainWord(x uint64) bool { return plainFlags(x) == 0 }

// container parses an array (kind Array, closer ']') or an object (kind
// Object, closer '}'): its elements, or its members (a key, a colon, a
// value), separated by commas. A container lazyDepth deep is read by the
// checker (skip), which records nothing inside it.
func (p *parser) container(depth int, kind Kind, closer byte) error {
	if depth >= MaxDepth {
		return ErrSyntax
	}
	idx := p.push(kind)
	if p.validateOnly || p.lazyDepth == 0 || depth < p.lazyDepth {
		count, err := p.elements(depth, kind, closer)
		if err == nil && !p.validateOnly {
			p.nodes[idx].count = count
			p.close(idx)
		}
		return err
	}
	count, err := p.skip(depth)
	if err == nil {
		n := &p.nodes[idx]
		n.count, n.lazy = count, true
		p.close(idx)
	}
	return err
}

// elements parses what is inside a container, its closer included, and
// counts its elements or members.
func (p *parser) elements(depth int, kind Kind, closer byte) (int32, error) {
	p.i++
	p.skipSpace()
	if p.i < len(p.src) && p.src[p.i] == closer {
		p.i++
		return 0, nil
	}
	var count int32
	for {
		if kind == Object {
			if err := p.key(); err != nil {
				return 0, err
			}
		}
		if err := p.value(depth + 1); err != nil {
			return 0, err
		}
		count++
		if done, err := p.member(closer); done || err != nil {
			return count, err
		}
	}
}

// key parses an object's key and the colon after it.
func (p *parser) key() error {
	if p.i >= len(p.src) || p.src[p.i] != '"' {
		return ErrSyntax
	}
	if err := p.str(); err != nil {
		return err
	}
	p.skipSpace()
	if p.i >= len(p.src) || p.src[p.i] != ':' {
		return ErrSyntax
	}
	p.i++
	p.skipSpace()
	return nil
}

// member takes what follows an element or member: a comma (more to come)
// or closer (done).
func (p *parser) member(closer byte) (done bool, err error) {
	p.skipSpace()
	if p.i >= len(p.src) {
		return false, ErrSyntax
	}
	switch p.src[p.i] {
	case ',':
		p.i++
		p.skipSpace()
		return false, nil
	case closer:
		p.i++
		return true, nil
	}
	return false, ErrSyntax
}
