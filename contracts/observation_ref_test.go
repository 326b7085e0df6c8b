package contracts

// This file is the observation as it was before the large-answer work
// (main at 7d34f15), kept as the reference the differential tests
// (observation_diff_test.go) compare the live code with: every output must
// stay byte for byte what it was. Only what that work changed is kept as
// it was: the tree builder and the data method of the truncation, and (as
// of main at 4975391) the shrink search and the marker fitting, whose
// rounds now render only the answer they keep. The rest (the tree and its
// nodes, the renderer, lower bounds, escape widths, valuePrefix, the cut
// message) is the live code, which that work left alone.

import (
	"bytes"
	"encoding/json"
	"math"
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

// refTruncation is truncation with the data method of the reference.
type refTruncation truncation

func (t *refTruncation) data(compact []byte) (string, observationCut) {
	head := t.tag + " " + t.m.Text
	headRunes := utf8.RuneCountInString(head)
	fullRoom := t.maxChars - headRunes - 1
	var tree *jsonTree
	if fullRoom >= 1 {
		tree, _ = refParseJSONTree(compact, fullRoom)
	}
	if tree != nil {
		r := jsonRenderer{room: fullRoom, maxStr: math.MaxInt, maxArray: math.MaxInt, maxKeys: math.MaxInt}
		if r.node(&tree.root) {
			return head + "\n" + string(r.buf), cutReencoded
		}
		for _, withHint := range []bool{!t.noHint, false} {
			if s, ok := refDescribed((*truncation)(t), head, tree, fullRoom, withHint); ok {
				return s, cutShrunk
			}
		}
		short := "\n" + shortMarker
		if room := fullRoom - utf8.RuneCountInString(short); room >= 1 {
			if shrunk, ok := refShrink(tree, room); ok {
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
	if dropped := "\n" + t.words.marker(t.words.dropped, (*truncation)(t).hintText()); headRunes+utf8.RuneCountInString(dropped) <= t.maxChars &&
		fullRoom >= 2*utf8.RuneCountInString(dropped) {
		return head + dropped, cutDropped
	}
	if headRunes+utf8.RuneCountInString(short) <= t.maxChars {
		return head + short, cutDropped
	}
	return cutMessageObservation(t.tag, t.m, t.maxChars, true), cutMessage
}

func refParseJSONTree(compact []byte, room int) (*jsonTree, bool) {
	p := refTreeBuilder{
		src:       compact,
		stack:     make([]jsonNode, 0, 64),
		room:      room,
		keepRunes: room + 1,
	}
	root, ok := p.value(0)
	if !ok || p.i != len(compact) {
		return nil, false
	}
	return &jsonTree{root: root, longest: p.longest, widestArray: p.widestArray, widestObject: p.widestObject}, true
}

type refTreeBuilder struct {
	src          []byte
	i            int
	room         int
	keepRunes    int
	longest      int
	widestArray  int
	widestObject int
	stack        []jsonNode
	slab         []jsonNode
	texts        strings.Builder
}

func (p *refTreeBuilder) reserve(k int) []jsonNode {
	if cap(p.slab)-len(p.slab) < k {
		p.slab = make([]jsonNode, 0, max(128, k))
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

func (p *refTreeBuilder) value(depth int) (jsonNode, bool) {
	if p.i >= len(p.src) {
		return jsonNode{}, false
	}
	switch c := p.src[p.i]; c {
	case '[', '{':
		return p.container(depth, c)
	case '"':
		return p.str()
	}
	end := jsontape.SkipValue(p.src, p.i, depth)
	if end < 0 {
		return jsonNode{}, false
	}
	text := string(p.src[p.i:end])
	p.i = end
	return jsonNode{kind: 'l', text: text, least: len(text)}, true
}
func (p *refTreeBuilder) str() (jsonNode, bool) {
	end := jsontape.StringEnd(p.src, p.i+1)
	if end < 0 {
		return jsonNode{}, false
	}
	raw := p.src[p.i+1 : end]
	p.i = end + 1
	n := jsonNode{kind: '"', least: 2}
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
func (p *refTreeBuilder) container(depth int, open byte) (jsonNode, bool) {
	fail := func() (jsonNode, bool) { return jsonNode{}, false }
	if depth >= jsontape.MaxDepth {
		return fail()
	}
	closing := byte(']')
	if open == '{' {
		closing = '}'
	}
	n := jsonNode{kind: open, least: 2}
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
		var key jsonNode
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
	n.least = containerLeast(&n)
	if open == '[' {
		p.widestArray = max(p.widestArray, n.count)
	} else {
		p.widestObject = max(p.widestObject, n.count)
	}
	return n, true
}

// The shrink search and the marker fitting as they were before the search
// stopped rendering the answers of the rounds whose marker does not fit
// (the live code renders only the answer it keeps).

// refDescribed is truncation.described as it was.
func refDescribed(t *truncation, head string, tree *jsonTree, fullRoom int, withHint bool) (string, bool) {
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
		shrunk, cut, ok := refShrinkTracked(tree, fullRoom-reserve)
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
			// The marker took less than was reserved: the data may use
			// the rest.
		}
		reserve = n
	}
	return best, best != ""
}

// refShrinkTracked is jsonTree.shrinkTracked as it was.
func refShrinkTracked(t *jsonTree, room int) ([]byte, shrinkCut, bool) {
	out, ok := refShrink(t, room)
	if !ok {
		return nil, shrinkCut{}, false
	}
	// The search ends having rendered its answer; render it once more
	// noting what it leaves out.
	r := t.last
	r.runes, r.track, r.measure = 0, true, true
	r.node(&t.root)
	return out, r.cut, true
}

// refShrink is jsonTree.shrink as it was.
func refShrink(t *jsonTree, room int) ([]byte, bool) {
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
		r.measure = false
		fits(l, maxStr)
		t.last = jsonRenderer{room: r.room, maxStr: r.maxStr, maxArray: r.maxArray, maxKeys: r.maxKeys}
		return r.buf, true
	}
	return nil, false
}
