package contracts

// This file is the observation as it was before the large-answer work
// (main at 7d34f15), kept as the reference the differential tests
// (observation_diff_test.go) compare the live code with: every output must
// stay byte for byte what it was. The helpers that work did not change
// (markers, lower bounds, escape widths, valuePrefix, the cut message) are
// the live ones.

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
)

func refEnvelopeObservation(status Status, m Message, data json.RawMessage, opt ObservationOptions) string {
	s, _ := refObserve(status, m, data, opt.MaxChars, true, markerWordsFor(opt.Lang), opt.Hint)
	return s
}
func refObserve(status Status, m Message, data json.RawMessage, maxChars int, trusted bool, words *markerWords, hint string) (string, observationCut) {
	if maxChars <= 0 {
		maxChars = defaultObservationMaxChars
	}
	tag := validUTF8(status.Tag())
	message := m.Text
	if m.ActionAt < 0 || m.ActionAt > len(message) {
		m.ActionAt = len(message)
	}
	if !utf8.ValidString(message) {
		message = validUTF8(message)
		m.ActionAt = len(message)
	}
	m.Text = message
	if trusted && len(data) > 0 && string(data) != "null" {
		headRunes := utf8.RuneCountInString(tag) + 1 + utf8.RuneCountInString(message)
		if !fitsRunes(data, maxChars-headRunes-1) {
			t := refTruncation{tag: tag, m: m, maxChars: maxChars, words: words, hint: hint, noHint: !status.Success()}
			return t.data(data)
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
	headLen := len(tag) + 1 + len(message)
	out := bytes.NewBuffer(make([]byte, 0, headLen+1+len(data)))
	out.WriteString(tag)
	out.WriteByte(' ')
	out.WriteString(message)
	hasData := len(bytes.Trim(data, " \t\r\n")) > 0
	if hasData {
		out.WriteByte('\n')
		if trusted {
			out.Write(data)
		} else if valid, compact := jsontape.Check(data); valid && compact {
			out.Write(data)
		} else if err := json.Compact(out, data); err != nil {
			out.Truncate(headLen + 1)
			out.Write(jsontape.AppendString(out.AvailableBuffer(), string(data)))
		}
		compact := out.Bytes()[headLen+1:]
		switch {
		case string(compact) == "null":
			out.Truncate(headLen)
			hasData = false
		case !utf8.Valid(compact):
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
	t := refTruncation{tag: tag, m: m, maxChars: maxChars, words: words, hint: hint, noHint: !status.Success()}
	return t.data(full[headLen+1:])
}

type refTruncation struct {
	tag      string
	m        Message
	maxChars int
	words    *markerWords
	hint     string
	noHint   bool
}

func (t *refTruncation) data(compact []byte) (string, observationCut) {
	head := t.tag + " " + t.m.Text
	headRunes := utf8.RuneCountInString(head)
	fullRoom := t.maxChars - headRunes - 1
	var tree *refJsonTree
	if fullRoom >= 1 {
		tree, _ = refParseJSONTree(compact, fullRoom)
	}
	if tree != nil {
		r := refJsonRenderer{room: fullRoom, maxStr: math.MaxInt, maxArray: math.MaxInt, maxKeys: math.MaxInt}
		if r.node(&tree.root) {
			return head + "\n" + string(r.buf), cutReencoded
		}
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

func (t *refTruncation) hintText() string {
	if t.noHint {
		return ""
	}
	if t.hint != "" {
		return t.hint
	}
	return t.words.hint
}
func (t *refTruncation) described(head string, tree *refJsonTree, fullRoom int, withHint bool) (string, bool) {
	hint := ""
	if withHint {
		hint = t.hintText()
	}
	reserve := utf8.RuneCountInString(t.words.marker(t.words.shows("x", 1, 2, false), hint)) + 1
	var best string
	for range 4 {
		if fullRoom-reserve < reserve {
			break
		}
		shrunk, cut, ok := tree.shrinkTracked(fullRoom - reserve)
		if !ok {
			break
		}
		marker := "\n" + t.words.marker(t.words.describe(cut), hint)
		n := utf8.RuneCountInString(marker)
		if n <= reserve {
			best = head + "\n" + string(shrunk) + marker
			if n == reserve {
				break
			}
		}
		reserve = n
	}
	return best, best != ""
}
func (t *refJsonTree) shrinkTracked(room int) ([]byte, shrinkCut, bool) {
	out, ok := t.shrink(room)
	if !ok {
		return nil, shrinkCut{}, false
	}
	r := t.last
	r.runes, r.track, r.measure = 0, true, true
	r.node(&t.root)
	return out, r.cut, true
}

type refJsonNode struct {
	kind  byte // '"' string, 'l' literal (number, true, false, null), '[' array, '{' object
	text  string
	runes int
	wide  bool
	keys  []refJsonNode
	kids  []refJsonNode
	count int
	least int
}
type refJsonTree struct {
	root         refJsonNode
	longest      int
	widestArray  int
	widestObject int
	last         refJsonRenderer
}

func refParseJSONTree(compact []byte, room int) (*refJsonTree, bool) {
	p := refTreeBuilder{
		src:       compact,
		stack:     make([]refJsonNode, 0, 64),
		room:      room,
		keepRunes: room + 1,
	}
	root, ok := p.value(0)
	if !ok || p.i != len(compact) {
		return nil, false
	}
	return &refJsonTree{root: root, longest: p.longest, widestArray: p.widestArray, widestObject: p.widestObject}, true
}

type refTreeBuilder struct {
	src          []byte
	i            int
	room         int
	keepRunes    int
	longest      int
	widestArray  int
	widestObject int
	stack        []refJsonNode
	slab         []refJsonNode
	texts        strings.Builder
}

func (p *refTreeBuilder) reserve(k int) []refJsonNode {
	if cap(p.slab)-len(p.slab) < k {
		p.slab = make([]refJsonNode, 0, max(128, k))
	}
	start := len(p.slab)
	p.slab = p.slab[:start+k]
	return p.slab[start : start+k : start+k]
}
func (p *refTreeBuilder) keepText(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if p.texts.Cap()-p.texts.Len() < len(b) {
		p.texts = strings.Builder{}
		p.texts.Grow(max(2048, len(b)))
	}
	start := p.texts.Len()
	p.texts.Write(b)
	return p.texts.String()[start:]
}

func (p *refTreeBuilder) value(depth int) (refJsonNode, bool) {
	if p.i >= len(p.src) {
		return refJsonNode{}, false
	}
	switch c := p.src[p.i]; c {
	case '[', '{':
		return p.container(depth, c)
	case '"':
		return p.str()
	}
	end := jsontape.SkipValue(p.src, p.i, depth)
	if end < 0 {
		return refJsonNode{}, false
	}
	text := string(p.src[p.i:end])
	p.i = end
	return refJsonNode{kind: 'l', text: text, least: len(text)}, true
}
func (p *refTreeBuilder) str() (refJsonNode, bool) {
	end := jsontape.StringEnd(p.src, p.i+1)
	if end < 0 {
		return refJsonNode{}, false
	}
	raw := p.src[p.i+1 : end]
	p.i = end + 1
	n := refJsonNode{kind: '"', least: 2}
	if bytes.IndexByte(raw, '\\') >= 0 {
		text := jsontape.Unescape(raw)
		n.text, n.runes = prefixRunes(text, p.keepRunes), utf8.RuneCountInString(text)
	} else {
		n.text, n.runes = p.keepText(prefixRunesOf(raw, p.keepRunes)), utf8.RuneCount(raw)
	}
	n.wide = escapesWide(n.text)
	n.least = stringLeast(n.runes)
	p.longest = max(p.longest, min(n.runes, p.keepRunes))
	return n, true
}
func (p *refTreeBuilder) container(depth int, open byte) (refJsonNode, bool) {
	fail := func() (refJsonNode, bool) { return refJsonNode{}, false }
	if depth >= jsontape.MaxDepth {
		return fail()
	}
	closing := byte(']')
	if open == '{' {
		closing = '}'
	}
	n := refJsonNode{kind: open, least: 2}
	p.i++
	used := 0
	base := len(p.stack)
	for p.i < len(p.src) && p.src[p.i] != closing {
		if n.count > 0 {
			if p.src[p.i] != ',' {
				return fail()
			}
			p.i++
		}
		var key refJsonNode
		if open == '{' {
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
		if open == '{' {
			least += keyLeast(key.runes) + 1
		}
		used += least + 1
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
	n.least = refContainerLeast(&n)
	if open == '[' {
		p.widestArray = max(p.widestArray, n.count)
	} else {
		p.widestObject = max(p.widestObject, n.count)
	}
	return n, true
}
func refContainerLeast(n *refJsonNode) int {
	if n.count == 0 {
		return 2
	}
	best, sum := math.MaxInt, 0
	for s := 1; s <= len(n.kids); s++ {
		sum += n.kids[s-1].least
		if n.kind == '{' {
			sum += keyLeast(n.keys[s-1].runes) + 1
		}
		if s > 1 {
			sum++
		}
		b := sum
		if omitted := n.count - s; omitted > 0 {
			b += 1 + noteLeast(n.kind == '{', omitted)
		}
		best = min(best, b)
	}
	return 2 + best
}
func (t *refJsonTree) shrink(room int) ([]byte, bool) {
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
	r := refJsonRenderer{room: room, measure: true}
	fits := func(l limits, maxStr int) bool {
		r.buf, r.runes = r.buf[:0], 0
		r.maxArray, r.maxKeys, r.maxStr = l.array, l.keys, maxStr
		return r.node(&t.root)
	}
	longest := min(t.longest, room)
	prev := limits{-1, -1, -1}
	for _, l := range steps {
		l = limits{min(l.array, t.widestArray), min(l.keys, t.widestObject), min(l.floor, longest)}
		if l == prev {
			continue
		}
		prev = l
		if !fits(l, l.floor) {
			continue
		}
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
		r.measure = false
		fits(l, maxStr)
		t.last = refJsonRenderer{room: r.room, maxStr: r.maxStr, maxArray: r.maxArray, maxKeys: r.maxKeys}
		return r.buf, true
	}
	return nil, false
}

type refJsonRenderer struct {
	buf      []byte
	runes    int
	room     int
	measure  bool
	maxStr   int // strings longer than this are cut to it and end with "…"
	maxArray int
	maxKeys  int
	track    bool
	path     []string
	cut      shrinkCut
}

func (r *refJsonRenderer) raw(s string) bool {
	if !r.measure {
		r.buf = append(r.buf, s...)
	}
	r.runes += len(s)
	return r.runes <= r.room
}
func (r *refJsonRenderer) literal(s string) bool {
	if !r.measure {
		r.buf = append(r.buf, s...)
	}
	r.runes += utf8.RuneCountInString(s)
	return r.runes <= r.room
}
func (r *refJsonRenderer) str(text string, runes int, wide bool, limit int) bool {
	cut := runes > limit
	if cut {
		r.cut.strings = r.cut.strings || r.track
	}
	if r.measure {
		switch {
		case !cut && !wide:
			r.runes += runes + 2
		case !cut:
			r.runes += jsonWidth(text) + 2
		case !wide:
			r.runes += limit + 3
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

func (r *refJsonRenderer) node(n *refJsonNode) bool {
	switch n.kind {
	case '"':
		return r.str(n.text, n.runes, n.wide, r.maxStr)
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
func (r *refJsonRenderer) push(n *refJsonNode, i int) {
	switch {
	case n.kind == '[':
		r.path = append(r.path, "["+strconv.Itoa(i)+"]")
	case len(r.path) == 0:
		r.path = append(r.path, n.keys[i].text)
	default:
		r.path = append(r.path, "."+n.keys[i].text)
	}
}
func (r *refJsonRenderer) noteCut(shown, total int, keys bool) {
	if len(r.cut.containers) == 2 {
		r.cut.more = true
		return
	}
	r.cut.containers = append(r.cut.containers, containerCut{path: strings.Join(r.path, ""), shown: shown, total: total, keys: keys})
}
func (r *refJsonRenderer) note(s string) bool {
	return r.str(s, utf8.RuneCountInString(s), false, math.MaxInt)
}
