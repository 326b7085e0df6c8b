package contracts

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// defaultObservationMaxChars is the bound an observation has when it is
// given none, the default of observation_max_chars.
const defaultObservationMaxChars = 1800

// MinObservationMaxChars is the smallest observation_max_chars a policy may
// set: at it, an observation of any status keeps its whole status tag and
// the whole action clause of any catalogue message (what to do next: the
// part of a message a model acts on), and still ends with a truncation
// marker when data is cut (TestMinObservationMaxCharsKeepsEveryAction).
// Below it the bound still holds, but the tag, the action or the marker may
// be cut.
const MinObservationMaxChars = 256

// shortMarker ends an observation whose message had to be cut, or whose data
// does not leave room for the longer marker that gives the data's size. It
// begins with the ellipsis so a cut message reads "…" then "[truncated]".
const shortMarker = "…[truncated]"

// ObservationOptions are what an envelope's observation knows beyond its
// status, message and data.
type ObservationOptions struct {
	// MaxChars bounds the observation in code points; zero or less means
	// defaultObservationMaxChars.
	MaxChars int
	// Lang is the language of the truncation marker: "en" or "zh".
	Lang string
	// Hint says how to get what was cut, in the operator's words (a tool's
	// truncation_hint); empty for the catalogue's generic words. Only data
	// of a success (ok, empty) gets a hint: the data of a failure is not
	// what a smaller query would shorten.
	Hint string
	// Members are where the data's top-level members lie (Outcome.Members),
	// when known: an array among them whose Elements are counted is
	// stepped over once past what could be shown, not scanned to its end.
	// They must describe the data given; nil knows nothing.
	Members []Member
}

// EnvelopeObservation is the observation of an envelope: its data is
// compact, valid UTF-8 JSON. When the data is cut, the marker says what was
// cut ("items shows 8 of 14, long strings shortened") and how to get more;
// when the message itself does not fit, what happened is cut and its action
// clause (from m.ActionAt) is kept whole. How data is shrunk to fit, and
// what the bound promises, is said at observe.
func EnvelopeObservation(status Status, m Message, data json.RawMessage, opt ObservationOptions) string {
	s, _ := observeKnown(status, m, data, opt.MaxChars, true, markerWordsFor(opt.Lang), opt.Hint, opt.Members)
	return s
}

// observationCut says which path produced an observation, so tests can check
// each path's promises (the shrunk data is valid JSON, for instance).
type observationCut int

const (
	cutNone      observationCut = iota // everything fit as compacted
	cutReencoded                       // the data fit only re-encoded, with escapes like \u91cf decoded; nothing is missing
	cutShrunk                          // the data was shrunk by structure and is valid JSON
	cutHard                            // the compact data was cut at a rune boundary
	cutDropped                         // no data fit; the marker stands in for it
	cutMessage                         // the message was cut and any data dropped
)

// observation is observe for a message without an action clause, with the
// English marker and no hint.
func observation(status Status, message string, data json.RawMessage, maxChars int, trusted bool) (string, observationCut) {
	return observe(status, Message{Text: message, ActionAt: len(message)}, data, maxChars, trusted, markerWordsFor("en"), "")
}

// observe renders the string fed back to the model: the status tag, a
// space and the message, then, when there is data, a newline and the data as
// compact JSON. Key order and number literals are kept as the backend sent
// them. A data value of JSON null is left out, and data that is not valid JSON
// is shown as a JSON string rather than dropped, since it is still what the
// backend said.
//
// maxChars bounds the whole string in Unicode code points; zero or less means
// defaultObservationMaxChars. The result is always valid UTF-8 (invalid bytes
// become U+FFFD) and is never cut inside a rune.
//
// When the data does not fit, observe shrinks it by structure rather than
// by bytes, so the model can still tell what it holds: long strings are
// shortened with "…", arrays keep their first elements and end with an
// element "…(+N more)", and objects keep their first keys and end with a key
// "…" whose value counts the keys left out. The shrunk data is valid JSON and
// is followed by the marker "\n…[truncated: full data is N chars]", N counted
// in code points of the compact data, or by "\n…[truncated]" where the longer
// marker would take more room than it leaves. Only when no shrunk form fits is
// the compact JSON cut at a rune boundary, followed by the marker. When the
// message itself does not fit, it is cut and the string ends with
// "…[truncated]". At bounds below MinObservationMaxChars the bound wins over
// the tag and the marker.
//
// Data that fits costs one compaction pass; only data that does not is parsed.
// trusted says data is compact, valid UTF-8 JSON, as an envelope's data
// always is: the common path skips re-validating it, and trusted data too
// long to fit is neither copied nor counted whole. Shrinking costs one scan
// of the data, the values past what could be shown only skipped, and a
// search that measures its candidates in a tree bounded by the room (see
// parseJSONTree and shrink). words and hint are the marker's language and
// the tool's truncation hint.
func observe(status Status, m Message, data json.RawMessage, maxChars int, trusted bool, words *markerWords, hint string) (string, observationCut) {
	return observeKnown(status, m, data, maxChars, trusted, words, hint, nil)
}

// observeKnown is observe with the data's members, when known (see
// ObservationOptions.Members): they change what it costs, never what it
// returns.
func observeKnown(status Status, m Message, data json.RawMessage, maxChars int, trusted bool, words *markerWords, hint string, members []Member) (string, observationCut) {
	if maxChars <= 0 {
		maxChars = defaultObservationMaxChars
	}
	tag := validUTF8(status.Tag())
	message := m.Text
	if m.ActionAt < 0 || m.ActionAt > len(message) {
		m.ActionAt = len(message)
	}
	if !utf8.ValidString(message) {
		// An action offset is kept only while the bytes before it stay.
		message = validUTF8(message)
		m.ActionAt = len(message)
	}
	m.Text = message

	// The most common path: trusted data (compact, valid UTF-8) that fits
	// is joined straight into the string.
	// Data that does not fit goes straight to the truncation, uncopied.
	if trusted && len(data) > 0 && string(data) != "null" {
		headRunes := utf8.RuneCountInString(tag) + 1 + utf8.RuneCountInString(message)
		if !fitsRunes(data, maxChars-headRunes-1) {
			t := truncation{tag: tag, m: m, maxChars: maxChars, words: words, hint: hint, noHint: !status.Success()}
			return t.data(data, members)
		}
		var b strings.Builder
		b.Grow(len(tag) + 1 + len(message) + 1 + len(data))
		b.WriteString(tag)
		b.WriteByte(' ')
		b.WriteString(message)
		b.WriteByte('\n')
		b.Write(data)
		return b.String(), cutNone
	}

	// The common path: build the full string in one buffer with one
	// compaction pass and keep it if it fits.
	headLen := len(tag) + 1 + len(message)
	out := bytes.NewBuffer(make([]byte, 0, headLen+1+len(data)))
	out.WriteString(tag)
	out.WriteByte(' ')
	out.WriteString(message)
	hasData := len(bytes.Trim(data, " \t\r\n")) > 0 // JSON's whitespace
	if hasData {
		out.WriteByte('\n')
		// Envelope data is already compact, valid UTF-8 JSON: one
		// validating pass, no rewrite.
		if trusted {
			out.Write(data)
		} else if valid, compact := jsontape.Check(data); valid && compact {
			out.Write(data)
		} else if err := json.Compact(out, data); err != nil {
			// Not JSON: show it as a string. Compact has already
			// taken back anything it wrote.
			out.Truncate(headLen + 1)
			out.Write(jsontape.AppendString(out.AvailableBuffer(), string(data)))
		}
		compact := out.Bytes()[headLen+1:]
		switch {
		case string(compact) == "null":
			out.Truncate(headLen)
			hasData = false
		case !utf8.Valid(compact):
			// The JSON scanner accepts any bytes inside strings;
			// outside them it accepts only ASCII, so replacing
			// invalid bytes keeps the JSON valid.
			fixed := validUTF8(string(compact))
			out.Truncate(headLen + 1)
			out.WriteString(fixed)
		}
	}
	full := out.Bytes()
	if fitsRunes(full, maxChars) {
		return string(full), cutNone
	}
	if !hasData {
		return cutMessageObservation(tag, m, maxChars, false), cutMessage
	}
	t := truncation{tag: tag, m: m, maxChars: maxChars, words: words, hint: hint, noHint: !status.Success()}
	return t.data(full[headLen+1:], nil)
}

// fitsRunes reports whether b holds at most room runes, counting them only
// when its length leaves the answer open: a rune takes one to four bytes.
func fitsRunes(b []byte, room int) bool {
	switch {
	case len(b) <= room:
		return true
	case room < 0 || len(b) > 4*room:
		return false
	}
	return utf8.RuneCount(b) <= room
}

// truncation bounds an observation whose data does not fit as compacted.
type truncation struct {
	tag      string
	m        Message
	maxChars int
	words    *markerWords
	hint     string
	noHint   bool
}

// data renders the observation with as much of the data as fits, and the
// marker that says what was cut and how to get more. members are the
// data's, when known (trusted data only).
func (t *truncation) data(compact []byte, members []Member) (string, observationCut) {
	head := t.tag + " " + t.m.Text
	headRunes := utf8.RuneCountInString(head)
	fullRoom := t.maxChars - headRunes - 1
	var tree *jsonTree
	if fullRoom >= 1 {
		tree, _ = parseJSONTreeKnown(compact, fullRoom, members)
	}
	if tree != nil {
		defer tree.release()
		// Backends that escape every non-ASCII character (Python's
		// json.dumps does by default) send six characters per CJK
		// character; decoded, the data may fit whole. Without an escape
		// in what the tree keeps, it cannot: re-encoding writes the
		// same or more, and what the tree leaves out is past the room.
		if tree.escaped {
			r := jsonRenderer{room: fullRoom, maxStr: math.MaxInt, maxArray: math.MaxInt, maxKeys: math.MaxInt}
			if r.node(&tree.root) {
				return head + "\n" + string(r.buf), cutReencoded
			}
		}
		// The marker that says what was cut, with the hint and then
		// without; a marker is worth its length only while it leaves the
		// data at least as much room as it takes.
		for _, withHint := range []bool{!t.noHint, false} {
			if s, ok := t.described(head, tree, fullRoom, withHint); ok {
				return s, cutShrunk
			}
		}
		short := "\n" + shortMarker
		if room := fullRoom - utf8.RuneCountInString(short); room >= 1 {
			if shrunk, ok := tree.shrink(room); ok {
				return head + "\n" + string(shrunk) + short, cutShrunk
			}
		}
	}
	// No shrunk form fits: the data is cut after a whole value, never
	// inside one, or left out.
	short := "\n" + shortMarker
	if room := fullRoom - utf8.RuneCountInString(short); room >= 1 {
		if prefix := valuePrefix(compact, room); prefix != "" {
			return head + "\n" + prefix + short, cutHard
		}
	}
	if dropped := "\n" + t.words.marker(t.words.dropped, t.hintText()); headRunes+utf8.RuneCountInString(dropped) <= t.maxChars &&
		fullRoom >= 2*utf8.RuneCountInString(dropped) {
		return head + dropped, cutDropped
	}
	if headRunes+utf8.RuneCountInString(short) <= t.maxChars {
		return head + short, cutDropped
	}
	return cutMessageObservation(t.tag, t.m, t.maxChars, true), cutMessage
}

func (t *truncation) hintText() string {
	if t.noHint {
		return ""
	}
	if t.hint != "" {
		return t.hint
	}
	return t.words.hint
}

// described shrinks the data into the room its marker leaves, the marker
// naming what was cut. The marker depends on what the shrink cut, which
// depends on the room the marker leaves: the room is guessed, and guessed
// again from the marker it gave, until the marker fits the room reserved.
func (t *truncation) described(head string, tree *jsonTree, fullRoom int, withHint bool) (string, bool) {
	hint := ""
	if withHint {
		hint = t.hintText()
	}
	// The least a description takes; the loop grows the room to fit.
	reserve := utf8.RuneCountInString(t.words.marker(t.words.shows("x", 1, 2, false), hint)) + 1
	var best string
	for range 4 {
		if fullRoom-reserve < reserve {
			break
		}
		cut, ok := tree.searchTracked(fullRoom - reserve)
		if !ok {
			break
		}
		marker := "\n" + t.words.marker(t.words.describe(cut), hint)
		n := utf8.RuneCountInString(marker)
		if n <= reserve {
			// Only a round whose marker fits renders its data.
			best = head + "\n" + string(tree.render()) + marker
			if n == reserve {
				break
			}
			// The marker took less than was reserved: the data may use
			// the rest.
		}
		reserve = n
	}
	return best, best != ""
}

// valuePrefix returns the longest prefix of compact JSON, at most room
// runes, that ends after a whole value or an opening bracket (a trailing
// comma dropped): never inside a string, a number or a literal. "" when no
// such prefix fits.
func valuePrefix(compact []byte, room int) string {
	best, runes := 0, 0
	inString, escaped := false, false
	for i, c := range compact {
		if runes >= room {
			break
		}
		if c < utf8.RuneSelf || utf8.RuneStart(c) {
			runes++
		}
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{' || c == ']' || c == '}':
			best = i + 1
		case c == ',':
			best = i // the values before it are whole
		}
	}
	return string(compact[:best])
}

// cutMessageObservation renders an observation whose message does not fit:
// what happened is cut and marked "…", the action clause kept whole; any
// data is dropped (a model acts on the message first), and then the string
// ends with the marker. Where even the action clause does not fit, the
// message is cut at the end instead.
func cutMessageObservation(tag string, m Message, maxChars int, hadData bool) string {
	marker := ""
	if hadData {
		marker = "\n" + shortMarker
	}
	if action := m.Text[m.ActionAt:]; action != "" {
		keep := maxChars - utf8.RuneCountInString(tag) - 1 - 1 - utf8.RuneCountInString(action) - utf8.RuneCountInString(marker)
		if keep >= 0 {
			return tag + " " + prefixRunes(m.Text[:m.ActionAt], keep) + "…" + action + marker
		}
	}
	keep := maxChars - utf8.RuneCountInString(tag) - 1 - utf8.RuneCountInString(shortMarker)
	if keep < 0 {
		return prefixRunes(tag+" "+shortMarker, maxChars)
	}
	return tag + " " + prefixRunes(m.Text, keep) + shortMarker
}

// markerWords are the truncation marker's words in one language. The
// marker always contains "truncated" (DESIGN section 7), so a client can
// find it in any language.
type markerWords struct {
	open    string // the marker's start, up to what was cut
	sep     string // between what was cut and the hint
	and     string // between the things cut
	more    string // after the things cut, when more were
	strings string // "long strings shortened"
	dropped string // no data fit at all
	hint    string // how to get more, when the tool does not say
	root    string // the data as a whole, as a path
	// shows says an array or object shows some of its elements or keys.
	shows func(path string, shown, total int, keys bool) string
}

func markerWordsFor(lang string) *markerWords {
	if lang == "zh" {
		return &markerWords{
			open: "…[truncated 已截断：", sep: "；", and: "，", more: "等",
			strings: "长文本已缩短", dropped: "数据过长，未能显示",
			hint: "如需其余内容，请缩小查询范围或减少返回数量", root: "数据",
			shows: func(path string, shown, total int, keys bool) string {
				if keys {
					return path + " 仅显示 " + strconv.Itoa(total) + " 个键中的 " + strconv.Itoa(shown) + " 个"
				}
				return path + " 仅显示 " + strconv.Itoa(total) + " 项中的 " + strconv.Itoa(shown) + " 项"
			},
		}
	}
	return &markerWords{
		open: "…[truncated: ", sep: "; ", and: ", ", more: ", and more",
		strings: "long strings shortened", dropped: "the data did not fit",
		hint: "ask for fewer or narrower results to see the rest", root: "the data",
		shows: func(path string, shown, total int, keys bool) string {
			s := path + " shows " + strconv.Itoa(shown) + " of " + strconv.Itoa(total)
			if keys {
				s += " keys"
			}
			return s
		},
	}
}

// marker assembles the marker from what was cut and the hint ("" for none).
func (w *markerWords) marker(what, hint string) string {
	if hint != "" {
		what += w.sep + hint
	}
	return w.open + what + "]"
}

// describe says what a shrink cut: the first two arrays or objects that
// show only some of their elements, and whether strings were shortened.
func (w *markerWords) describe(cut shrinkCut) string {
	var parts []string
	for _, c := range cut.containers {
		path := c.path
		if path == "" {
			path = w.root
		}
		parts = append(parts, w.shows(path, c.shown, c.total, c.keys))
	}
	s := strings.Join(parts, w.and)
	if cut.more {
		s += w.more
	}
	if cut.strings {
		if s != "" {
			s += w.and
		}
		s += w.strings
	}
	return s
}

// shrinkCut is what a shrunk rendering left out.
type shrinkCut struct {
	containers []containerCut // the first two
	more       bool           // more containers were cut
	strings    bool           // some string was shortened
}

type containerCut struct {
	path         string
	shown, total int
	keys         bool
}

// searchTracked is search that also says what the rendering of its answer
// cuts, without writing it: the marker fitting renders only the answer of
// the round it keeps.
func (t *jsonTree) searchTracked(room int) (shrinkCut, bool) {
	if !t.search(room) {
		return shrinkCut{}, false
	}
	r := t.last
	r.runes, r.track, r.measure = 0, true, true
	r.node(&t.root)
	return r.cut, true
}

// jsonNode is one value of the data, kept only on the truncation path.
// Strings and containers may be stored partly: no more of them than could
// ever fit in the room is kept, while the totals stay exact.
type jsonNode struct {
	kind  byte       // '"' string, 'l' literal (number, true, false, null), '[' array, '{' object
	text  string     // the string's leading runes, or the literal as sent
	runes int        // the string's length in runes
	wide  bool       // some rune of the kept text is written as an escape (see escapesWide)
	keys  []jsonNode // an object's keys, parallel to kids
	kids  []jsonNode // the leading elements or values
	count int        // the number of elements or keys, including those not kept
	least int        // a lower bound of the node's rendered length under any limits
}

// jsonTree is the parsed data with what the shrink search needs to know
// about its shape.
type jsonTree struct {
	root         jsonNode
	longest      int          // the longest kept string or key, in runes
	widestArray  int          // the most elements in one array
	widestObject int          // the most keys in one object
	escaped      bool         // some kept string or key holds an escape
	last         jsonRenderer // the limits of search's last answer
	arena        *treeArena   // where the nodes are, until release
}

// parseJSONTree parses valid compact JSON for a room of the given size:
// object keys keep their order and numbers their literal form. It reads
// the data once and lazily: a value past what could ever be shown is
// skipped and only counted, so a large answer costs one scan for the
// extent of what is not kept (jsontape.SkipValue), never a tape of it. It
// refuses what jsontape.Parse refuses among compact documents (nesting
// deeper than jsontape.MaxDepth).
func parseJSONTree(compact []byte, room int) (*jsonTree, bool) {
	return parseJSONTreeKnown(compact, room, nil)
}

// parseJSONTreeKnown is parseJSONTree with the data's top-level members
// where known: an array among them with its Elements counted is not
// scanned past the room, its count and end being known. The tree is the
// same as parseJSONTree's, members or not (members must describe compact).
func parseJSONTreeKnown(compact []byte, room int, members []Member) (*jsonTree, bool) {
	a := treeArenas.Get().(*treeArena)
	p := treeBuilder{
		known: members,
		src:   compact,
		arena: a,
		stack: a.stack[:0],
		room:  room,
		// Rendering room+1 runes of a string cannot fit, so nothing
		// beyond that needs keeping.
		keepRunes: room + 1,
	}
	root, ok := p.value(0)
	a.stack = p.stack[:0]
	if !ok || p.i != len(compact) {
		a.put()
		return nil, false
	}
	return &jsonTree{root: root, longest: p.longest, widestArray: p.widestArray, widestObject: p.widestObject, escaped: p.escaped, arena: a}, true
}

// release hands the tree's nodes back for the next tree; the tree and its
// nodes must not be used after. Strings read from it stay valid.
func (t *jsonTree) release() {
	if t.arena != nil {
		t.arena.put()
		t.arena = nil
	}
}

// treeArena holds the nodes of shrink trees from one tree to the next: a
// large answer's tree has hundreds of nodes, and allocating them anew for
// every observation was most of what the observation allocated.
type treeArena struct {
	stack  []jsonNode   // the builder's stack
	blocks [][]jsonNode // the blocks nodes are taken from, the first used of them in use
	used   int
}

var treeArenas = sync.Pool{New: func() any { return &treeArena{stack: make([]jsonNode, 0, 64)} }}

// maxArenaNodes bounds the nodes an arena keeps for reuse; the rare tree
// that needs more leaves its arena to the collector.
const maxArenaNodes = 1 << 12

// block returns an empty block of room for at least n nodes.
func (a *treeArena) block(n int) []jsonNode {
	for a.used < len(a.blocks) {
		b := a.blocks[a.used]
		a.used++
		if cap(b) >= n {
			return b[:0]
		}
	}
	b := make([]jsonNode, 0, n)
	a.blocks = append(a.blocks, b)
	a.used = len(a.blocks)
	return b
}

// put hands the arena back to treeArenas, unless it grew too large. The
// nodes it holds are overwritten by the next tree, not cleared: what they
// point to (kept text, at most about a room's worth) waits for that.
func (a *treeArena) put() {
	n := cap(a.stack)
	for _, b := range a.blocks {
		n += cap(b)
	}
	if n > maxArenaNodes {
		return
	}
	a.used = 0
	treeArenas.Put(a)
}

// treeBuilder copies the part of compact JSON that can be shown into a
// jsonNode tree.
type treeBuilder struct {
	known        []Member // the data's top-level members, when known
	src          []byte
	i            int
	room         int
	keepRunes    int
	longest      int
	widestArray  int
	widestObject int
	escaped      bool // some kept string or key holds an escape
	// whole is the least the value just read renders to where every
	// object shows all its keys, as any rendering that shows two or
	// more elements of an array does (see shrink): for an object, its
	// delimiters, commas, and its kept keys and values at their whole;
	// for anything else, its least.
	whole int

	// The tree is allocated in blocks, not node by node: a container's
	// kept values gather on stack and move to slab once it closes, and
	// kept text is written to texts, whose strings share its buffers.
	arena *treeArena
	stack []jsonNode
	slab  []jsonNode
	texts strings.Builder
}

// reserve returns k nodes of the slab.
func (p *treeBuilder) reserve(k int) []jsonNode {
	if cap(p.slab)-len(p.slab) < k {
		p.slab = p.arena.block(max(128, k))
	}
	start := len(p.slab)
	p.slab = p.slab[:start+k]
	return p.slab[start : start+k : start+k]
}

// keepText returns b as a string in the shared text buffers.
func (p *treeBuilder) keepText(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if p.texts.Cap()-p.texts.Len() < len(b) {
		// A new buffer: the strings already given keep the old one.
		p.texts = strings.Builder{}
		p.texts.Grow(max(2048, len(b)))
	}
	start := p.texts.Len()
	p.texts.Write(b)
	return p.texts.String()[start:]
}

func (p *treeBuilder) value(depth int) (jsonNode, bool) {
	if p.i >= len(p.src) {
		return jsonNode{}, false
	}
	switch c := p.src[p.i]; c {
	case '[', '{':
		return p.container(depth, c)
	case '"':
		return p.str()
	}
	// A number or keyword, as sent.
	end := jsontape.SkipValue(p.src, p.i, depth)
	if end < 0 {
		return jsonNode{}, false
	}
	text := string(p.src[p.i:end])
	p.i = end
	p.whole = len(text)
	return jsonNode{kind: 'l', text: text, least: len(text)}, true
}

// str reads the string at p.i, keeping its first keepRunes runes.
func (p *treeBuilder) str() (jsonNode, bool) {
	end := jsontape.StringEnd(p.src, p.i+1)
	if end < 0 {
		return jsonNode{}, false
	}
	raw := p.src[p.i+1 : end]
	p.i = end + 1
	n := jsonNode{kind: '"', least: 2}
	switch {
	case jsontape.PlainASCII(raw):
		// The common case: a byte a rune, none written as an escape.
		n.text, n.runes = p.keepText(raw[:max(0, min(len(raw), p.keepRunes))]), len(raw)
	case bytes.IndexByte(raw, '\\') >= 0:
		p.escaped = true
		text := jsontape.Unescape(raw)
		n.text, n.runes = prefixRunes(text, p.keepRunes), utf8.RuneCountInString(text)
		n.wide = escapesWide(n.text)
	default:
		// Valid UTF-8 without escapes is its own text.
		n.text, n.runes = p.keepText(prefixRunesOf(raw, p.keepRunes)), utf8.RuneCount(raw)
		n.wide = escapesWide(n.text)
	}
	n.least = stringLeast(n.runes)
	p.whole = n.least
	p.longest = max(p.longest, min(n.runes, p.keepRunes))
	return n, true
}

// container copies an array or object. The rendering keeps at least one
// element or key of every container, so a container takes at least its
// delimiters and its first element. An element can only be shown after all
// those before it, so once their lower bounds fill the room, the rest are
// only counted.
func (p *treeBuilder) container(depth int, open byte) (jsonNode, bool) {
	fail := func() (jsonNode, bool) { return jsonNode{}, false }
	if depth >= jsontape.MaxDepth {
		return fail()
	}
	closing := byte(']')
	if open == '{' {
		closing = '}'
	}
	n := jsonNode{kind: open, least: 2}
	// An array whose elements and end are known is not scanned past the
	// room: what SkipValue would step over is only counted.
	knownEnd, knownElements := -1, 0
	if open == '[' {
		for _, m := range p.known {
			if m.Start == p.i && m.Elements > 0 && m.End <= len(p.src) && m.End > m.Start {
				knownEnd, knownElements = m.End-1, m.Elements
			}
		}
	}
	p.i++
	used := 0
	whole := 0 // an object's kept keys and values at their least where every key is shown
	// Kept keys and values alternate on the stack from base.
	base := len(p.stack)
	for p.i < len(p.src) && p.src[p.i] != closing {
		if n.count > 0 {
			if p.src[p.i] != ',' {
				return fail()
			}
			p.i++
		}
		var key jsonNode
		if open == '{' {
			// Every key counts toward the longest string, shown or not.
			var ok bool
			if p.i >= len(p.src) || p.src[p.i] != '"' {
				return fail()
			}
			if key, ok = p.str(); !ok || p.i >= len(p.src) || p.src[p.i] != ':' {
				return fail()
			}
			p.i++
		}
		n.count++
		if used > p.room && knownEnd >= 0 {
			n.count, p.i = knownElements, knownEnd
			break
		}
		if used > p.room {
			if p.i = jsontape.SkipValue(p.src, p.i, depth+1); p.i < 0 {
				return fail()
			}
			continue
		}
		kid, ok := p.value(depth + 1)
		if !ok {
			return fail()
		}
		least := kid.least
		switch {
		case open == '{':
			least += keyLeast(key.runes) + 1 // and the colon
			whole += keyLeast(key.runes) + 1 + p.whole
		case n.count > 1:
			// An element after the first is shown only where arrays
			// show two or more, and there every object shows all its
			// keys (see shrink).
			least = p.whole
		}
		used += least + 1 // and the comma
		if open == '{' {
			p.stack = append(p.stack, key)
		}
		p.stack = append(p.stack, kid)
	}
	if p.i >= len(p.src) {
		return fail()
	}
	p.i++
	if kept := p.stack[base:]; len(kept) > 0 {
		block := p.reserve(len(kept))
		if open == '{' {
			pairs := len(kept) / 2
			for i := range pairs {
				block[i], block[pairs+i] = kept[2*i], kept[2*i+1]
			}
			n.keys, block = block[:pairs:pairs], block[pairs:]
		} else {
			copy(block, kept)
		}
		n.kids = block
	}
	p.stack = p.stack[:base]
	n.least = containerLeast(&n)
	if open == '[' {
		p.widestArray = max(p.widestArray, n.count)
		p.whole = n.least
	} else {
		p.widestObject = max(p.widestObject, n.count)
		// Members the object does not keep lie past the room, so the
		// sum without them is still a lower bound.
		p.whole = 2 + whole + max(n.count-1, 0)
	}
	return n, true
}

// stringLeast is the least a string value of the given length renders to:
// its quotes and one character or the ellipsis.
func stringLeast(runes int) int {
	if runes > 0 {
		return 3
	}
	return 2
}

// keyLeast is the least a key of the given length renders to: keys keep
// minKeyRunes runes whatever the string limit.
func keyLeast(runes int) int {
	if runes > minKeyRunes {
		return minKeyRunes + 3 // and the ellipsis
	}
	return runes + 2
}

// containerLeast is a lower bound of the rendered length of a container
// under any limits: its delimiters and, for some s of at least one, its
// first s elements or members, commas between, and the note that counts
// the rest when s is short of them all. Elements not kept lie past the
// room, and so does any s that reaches them.
func containerLeast(n *jsonNode) int {
	if n.count == 0 {
		return 2
	}
	best, sum := math.MaxInt, 0
	for s := 1; s <= len(n.kids); s++ {
		sum += n.kids[s-1].least
		if n.kind == '{' {
			sum += keyLeast(n.keys[s-1].runes) + 1 // and the colon
		}
		if s > 1 {
			sum++ // the comma
		}
		b := sum
		if omitted := n.count - s; omitted > 0 {
			b += 1 + noteLeast(n.kind == '{', omitted)
		}
		best = min(best, b)
	}
	return 2 + best
}

// noteLeast is the length of the note that counts omitted elements or
// keys, as jsonRenderer.node writes it.
func noteLeast(keys bool, omitted int) int {
	digits := 1
	for d := omitted; d >= 10; d /= 10 {
		digits++
	}
	if !keys {
		return 2 + len("…(+ more)") - len("…") + 1 + digits // "…(+N more)"
	}
	n := 3 + 1 + 2 + len("(+ more keys)") + digits // "…":"(+N more keys)"
	if omitted == 1 {
		n-- // "(+1 more key)"
	}
	return n
}

// shrink returns the most informative rendering within room runes (see
// search), or reports that none fits.
func (t *jsonTree) shrink(room int) ([]byte, bool) {
	if !t.search(room) {
		return nil, false
	}
	return t.render(), true
}

// render writes the tree under the limits of the last search.
func (t *jsonTree) render() []byte {
	r := t.last
	r.node(&t.root)
	return r.buf
}

// search finds the limits of the most informative rendering within room
// runes and keeps them in t.last, or reports that none fits. It measures
// its candidates and writes nothing.
//
// Arrays are cut before objects: an array's elements usually repeat one
// shape, so its first few show what the rest hold, while every key of an
// object says something different. So the search first walks the array
// limits from generous to tight with every key kept and, for each, finds the
// longest string limit that fits by binary search. It takes an array limit at
// once when strings keep at least 32 runes, since a few readable records tell
// more than many illegible ones; failing that it settles for 8 runes, then
// for any string limit. Only then does it cut keys, with one element per
// array. Every container keeps at least one element or key: a rendering of
// counts alone tells less than the hard cut of the compact JSON.
func (t *jsonTree) search(room int) bool {
	type limits struct{ array, keys, floor int }
	var steps []limits
	for _, floor := range [...]int{32, 8, 0} {
		for _, array := range [...]int{math.MaxInt, 64, 32, 16, 8, 4, 2, 1} {
			steps = append(steps, limits{array, math.MaxInt, floor})
		}
	}
	for _, keys := range [...]int{16, 8, 4, 2, 1} {
		steps = append(steps, limits{1, keys, 0})
	}

	// The search measures; only its answer is rendered.
	r := jsonRenderer{room: room, measure: true}
	fits := func(l limits, maxStr int) bool {
		r.buf, r.runes = r.buf[:0], 0
		r.maxArray, r.maxKeys, r.maxStr = l.array, l.keys, maxStr
		return r.node(&t.root)
	}
	longest := min(t.longest, room)
	prev := limits{-1, -1, -1}
	for _, l := range steps {
		// Limits at or above the widest container all give the same
		// rendering; try it once.
		l = limits{min(l.array, t.widestArray), min(l.keys, t.widestObject), min(l.floor, longest)}
		if l == prev {
			continue
		}
		prev = l
		if !fits(l, l.floor) {
			continue
		}
		// The rendering only grows with the string limit.
		lo, hi := l.floor, longest
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if fits(l, mid) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		maxStr := lo
		if l.keys == t.widestObject {
			// The array limits halve at each step; the room left over
			// may hold more elements than this step's limit.
			lo, hi = l.array, min(2*l.array-1, t.widestArray)
			for lo < hi {
				mid := lo + (hi-lo+1)/2
				if fits(limits{mid, l.keys, 0}, maxStr) {
					lo = mid
				} else {
					hi = mid - 1
				}
			}
			l.array = lo
		}
		t.last = jsonRenderer{room: room, maxStr: maxStr, maxArray: l.array, maxKeys: l.keys}
		return true
	}
	return false
}

// jsonRenderer writes a jsonNode tree as compact JSON under limits, and stops
// as soon as the output exceeds its room. With measure set it only counts
// the runes it would write: a string's length is its rune count, known
// from the tree, unless some of its runes are written as escapes.
type jsonRenderer struct {
	buf      []byte
	runes    int
	room     int
	measure  bool
	maxStr   int // strings longer than this are cut to it and end with "…"
	maxArray int // elements kept per array
	maxKeys  int // keys kept per object

	// With track set, the renderer notes what it leaves out in cut; path
	// is where it is, as tokens ("items", "[0]", ".tags").
	track bool
	path  []string
	cut   shrinkCut
}

// minKeyRunes keeps object keys readable even when values are cut hard: a
// key is what tells the reader what a value was.
const minKeyRunes = 16

// raw writes ASCII JSON syntax.
func (r *jsonRenderer) raw(s string) bool {
	if !r.measure {
		r.buf = append(r.buf, s...)
	}
	r.runes += len(s)
	return r.runes <= r.room
}

// literal writes a number or keyword as the backend sent it.
func (r *jsonRenderer) literal(s string) bool {
	if !r.measure {
		r.buf = append(r.buf, s...)
	}
	r.runes += utf8.RuneCountInString(s)
	return r.runes <= r.room
}

// str writes a string of the given full length, cut to limit runes; wide
// says some rune of text is written as an escape.
func (r *jsonRenderer) str(text string, runes int, wide bool, limit int) bool {
	cut := runes > limit
	if cut {
		r.cut.strings = r.cut.strings || r.track
	}
	if r.measure {
		// Where the tree keeps only a prefix of text, runes is over
		// the room, and so is the rendering of the prefix.
		switch {
		case !cut && !wide:
			r.runes += runes + 2
		case !cut:
			r.runes += jsonWidth(text) + 2
		case !wide:
			r.runes += limit + 3 // and the ellipsis
		default:
			r.runes += jsonWidth(prefixRunes(text, limit)) + 3
		}
		return r.runes <= r.room
	}
	start := len(r.buf)
	if !cut {
		r.buf = jsontape.AppendString(r.buf, text)
	} else {
		r.buf = jsontape.AppendString(r.buf, prefixRunes(text, limit))
		r.buf = append(r.buf[:len(r.buf)-1], `…"`...)
	}
	r.runes += utf8.RuneCount(r.buf[start:])
	return r.runes <= r.room
}

func (r *jsonRenderer) node(n *jsonNode) bool {
	switch n.kind {
	case '"':
		limit := r.maxStr
		if n.runes > limit && identifierLike(n) {
			limit = n.runes // kept whole: "msg_999…" identifies nothing
		}
		return r.str(n.text, n.runes, n.wide, limit)
	case 'l':
		return r.literal(n.text)
	}
	open, closing := "{", "}"
	if n.kind == '[' {
		open, closing = "[", "]"
	}
	if !r.raw(open) {
		return false
	}
	shown := min(len(n.kids), r.maxArray)
	if n.kind == '{' {
		shown = min(len(n.kids), r.maxKeys)
	}
	if r.track && shown < n.count {
		r.noteCut(shown, n.count, n.kind == '{')
	}
	for i := range shown {
		if i > 0 && !r.raw(",") {
			return false
		}
		if n.kind == '{' {
			k := &n.keys[i]
			if !r.str(k.text, k.runes, k.wide, max(r.maxStr, minKeyRunes)) || !r.raw(":") {
				return false
			}
		}
		if r.track {
			r.push(n, i)
		}
		if !r.node(&n.kids[i]) {
			return false
		}
		if r.track {
			r.path = r.path[:len(r.path)-1]
		}
	}
	if omitted := n.count - shown; omitted > 0 {
		if shown > 0 && !r.raw(",") {
			return false
		}
		var ok bool
		if n.kind == '[' {
			ok = r.note("…(+" + strconv.Itoa(omitted) + " more)")
		} else {
			keys := " more keys)"
			if omitted == 1 {
				keys = " more key)"
			}
			ok = r.note("…") && r.raw(":") && r.note("(+"+strconv.Itoa(omitted)+keys)
		}
		if !ok {
			return false
		}
	}
	return r.raw(closing)
}

// maxIdentifierRunes bounds the strings the shrink keeps whole as
// identifiers: an id, a UUID, a SID, a timestamp, a short URL or address.
const maxIdentifierRunes = 64

// identifierLike reports whether a string value reads as an identifier,
// which a shortened rendering would make useless: at most
// maxIdentifierRunes printable ASCII characters, kept whole in the tree,
// without white space or characters that need escaping. Shrinking cuts
// arrays and objects, and longer or wordier strings, instead.
func identifierLike(n *jsonNode) bool {
	if n.runes > maxIdentifierRunes || len(n.text) != n.runes || n.wide {
		return false
	}
	for i := 0; i < len(n.text); i++ {
		if c := n.text[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// push enters the i-th element or value of a container, for the path.
func (r *jsonRenderer) push(n *jsonNode, i int) {
	switch {
	case n.kind == '[':
		r.path = append(r.path, "["+strconv.Itoa(i)+"]")
	case len(r.path) == 0:
		r.path = append(r.path, n.keys[i].text)
	default:
		r.path = append(r.path, "."+n.keys[i].text)
	}
}

// noteCut records a container that shows only some of its elements.
func (r *jsonRenderer) noteCut(shown, total int, keys bool) {
	if len(r.cut.containers) == 2 {
		r.cut.more = true
		return
	}
	r.cut.containers = append(r.cut.containers, containerCut{path: strings.Join(r.path, ""), shown: shown, total: total, keys: keys})
}

// note writes a string of the renderer's own, never cut. Its runes are
// never escaped.
func (r *jsonRenderer) note(s string) bool {
	return r.str(s, utf8.RuneCountInString(s), false, math.MaxInt)
}

// escapesWide reports whether jsontape.AppendString writes some rune of s
// as more than one character: a quote, a backslash, a control character,
// U+2028, U+2029 or an invalid byte.
func escapesWide(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			return true
		}
		i += size
	}
	return false
}

// jsonWidth is the length in runes of s as jsontape.AppendString writes it,
// without the quotes.
func jsonWidth(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20:
				n += 6 // \u00XX
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n++
		}
		i += size
	}
	return n
}

// prefixRunes returns the first n runes of s, or all of s.
func prefixRunes(s string, n int) string {
	for i := range s {
		if n <= 0 {
			return s[:i]
		}
		n--
	}
	return s
}

// prefixRunesOf returns the first n runes of valid UTF-8 b, or all of b.
func prefixRunesOf(b []byte, n int) []byte {
	if n >= len(b) {
		return b
	}
	i := 0
	for ; i < len(b) && n > 0; n-- {
		if b[i] < utf8.RuneSelf {
			i++
		} else {
			_, size := utf8.DecodeRune(b[i:])
			i += size
		}
	}
	return b[:i]
}

// validUTF8 replaces each invalid byte of s with U+FFFD, as encoding/json
// does, and returns valid strings without copying.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for _, r := range s {
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}
