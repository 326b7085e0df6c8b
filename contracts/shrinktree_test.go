package contracts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"unicode/utf8"
)

// FuzzShrinkTreeMatchesTokenStream: the shrink tree built from the tape
// is the one encoding/json's token stream gave, for any compact data and
// room: the same kept strings and literals, counts, lower bounds and
// widths, so every shrunk observation stays as it was.
func FuzzShrinkTreeMatchesTokenStream(f *testing.F) {
	f.Add([]byte(`{"items":[{"id":"kb-1","title":"Tool calling"},{"id":"kb-2"}],"total":2}`), 20)
	f.Add([]byte(`{"a":"\u91cf\u5b50","b":[true,false,null,1e9,-0.5E-3]}`), 5)
	f.Add([]byte(`["`+string(bytes.Repeat([]byte("量"), 50))+`",{"k\"ey":{}}]`), 3)
	f.Add([]byte(`{"":[[[]]],"x":"\ud800"}`), 0)
	f.Fuzz(func(t *testing.T, data []byte, room int) {
		room %= 2000
		if room < 0 {
			room = -room
		}
		var compact bytes.Buffer
		if json.Compact(&compact, data) != nil || !utf8.Valid(compact.Bytes()) {
			return
		}
		want, wantOK := parseJSONTreeStd(compact.Bytes(), room)
		got, gotOK := parseJSONTree(compact.Bytes(), room)
		if gotOK != wantOK {
			t.Fatalf("tape ok=%v, token stream ok=%v on %s", gotOK, wantOK, compact.Bytes())
		}
		if gotOK {
			// The token stream does not say which strings held escapes
			// (escaped only spares a re-encoding that cannot fit; the
			// observation's differential tests cover it), nor does its
			// tree come from an arena.
			got.arena, want.escaped = nil, got.escaped
		}
		if gotOK && !reflect.DeepEqual(got, want) {
			t.Fatalf("trees differ on %s (room %d):\n tape  %+v\n token %+v", compact.Bytes(), room, got, want)
		}
	})
}

// parseJSONTreeStd is the shrink tree built from encoding/json's token
// stream, as observation.go built it before the tape: the reference
// parseJSONTree must agree with.
func parseJSONTreeStd(compact []byte, room int) (*jsonTree, bool) {
	dec := json.NewDecoder(bytes.NewReader(compact))
	dec.UseNumber()
	p := stdTreeParser{
		dec:  dec,
		room: room,
		// Rendering room+1 runes of a string cannot fit, so nothing
		// beyond that needs keeping.
		keepRunes: room + 1,
	}
	root, err := p.value()
	if err != nil {
		return nil, false
	}
	return &jsonTree{root: root, longest: p.longest, widestArray: p.widestArray, widestObject: p.widestObject}, true
}

// stdTreeParser builds a jsonNode tree from a token stream.
type stdTreeParser struct {
	dec          *json.Decoder
	room         int
	keepRunes    int
	skipped      json.RawMessage
	whole        int // as treeBuilder.whole
	longest      int
	widestArray  int
	widestObject int
}

func (p *stdTreeParser) value() (jsonNode, error) {
	tok, err := p.dec.Token()
	if err != nil {
		return jsonNode{}, err
	}
	switch t := tok.(type) {
	case json.Delim:
		return p.container(byte(t))
	case string:
		return p.str(t), nil
	case json.Number:
		p.whole = len(t)
		return jsonNode{kind: 'l', text: string(t), least: len(t)}, nil
	case bool:
		text := strconv.FormatBool(t)
		p.whole = len(text)
		return jsonNode{kind: 'l', text: text, least: len(text)}, nil
	case nil:
		p.whole = 4
		return jsonNode{kind: 'l', text: "null", least: 4}, nil
	}
	// With UseNumber, Token returns no other type.
	return jsonNode{}, fmt.Errorf("unexpected JSON token %T", tok)
}

func (p *stdTreeParser) str(s string) jsonNode {
	n := jsonNode{kind: '"', text: prefixRunes(s, p.keepRunes), runes: utf8.RuneCountInString(s), least: 2}
	n.wide = escapesWide(n.text)
	n.least = stringLeast(n.runes)
	p.whole = n.least
	p.longest = max(p.longest, min(n.runes, p.keepRunes))
	return n
}

// container parses an array or object. The rendering keeps at least one
// element or key of every container, so a container takes at least its
// delimiters and its first element. An element can only be shown after all
// those before it, so once their lower bounds fill the room, the rest are
// only counted.
func (p *stdTreeParser) container(open byte) (jsonNode, error) {
	n := jsonNode{kind: open, least: 2}
	used, whole := 0, 0
	for p.dec.More() {
		var key jsonNode
		if open == '{' {
			tok, err := p.dec.Token()
			if err != nil {
				return jsonNode{}, err
			}
			k, ok := tok.(string)
			if !ok {
				return jsonNode{}, fmt.Errorf("object key is %T, not a string", tok)
			}
			key = p.str(k)
		}
		if used <= p.room {
			kid, err := p.value()
			if err != nil {
				return jsonNode{}, err
			}
			least := kid.least
			switch {
			case open == '{':
				least += keyLeast(key.runes) + 1 // and the colon
				whole += keyLeast(key.runes) + 1 + p.whole
			case n.count > 0:
				// A later element is shown only with every key.
				least = p.whole
			}
			used += least + 1 // and the comma
			n.kids = append(n.kids, kid)
			if open == '{' {
				n.keys = append(n.keys, key)
			}
		} else if err := p.skip(); err != nil {
			return jsonNode{}, err
		}
		n.count++
	}
	if _, err := p.dec.Token(); err != nil { // the closing delimiter
		return jsonNode{}, err
	}
	n.least = containerLeast(&n)
	if open == '[' {
		p.widestArray = max(p.widestArray, n.count)
		p.whole = n.least
	} else {
		p.widestObject = max(p.widestObject, n.count)
		p.whole = 2 + whole + max(n.count-1, 0)
	}
	return n, nil
}

// skip consumes one value without keeping it. Decoding into a reused
// RawMessage scans the value in one call instead of one call per token.
func (p *stdTreeParser) skip() error {
	return p.dec.Decode(&p.skipped)
}

// FuzzShrinkMeasureMatchesRendering: the shrink search measures its
// candidates instead of rendering them; for any data and limits, the
// measure says fit exactly when the rendering fits, and counts the runes
// the rendering writes. What fits is never shorter than the tree's lower
// bound, by which it keeps no more than can be shown.
func FuzzShrinkMeasureMatchesRendering(f *testing.F) {
	f.Add([]byte(`{"items":[{"id":"kb-1","title":"Tool\ncalling"},{"id":"kb-2"}],"total":2}`), 60, 5, 1, 8)
	f.Add([]byte(`{"a":"\u91cf\u5b50\u2028\u0001","b":[true,false,null,1e9,-0.5E-3]}`), 30, 2, 3, 1)
	f.Add([]byte(`["`+string(bytes.Repeat([]byte("量\""), 50))+`",{"k\"ey":{}}]`), 40, 10, 2, 2)
	f.Fuzz(func(t *testing.T, data []byte, room, maxStr, maxArray, maxKeys int) {
		var compact bytes.Buffer
		if json.Compact(&compact, data) != nil || !utf8.Valid(compact.Bytes()) {
			return
		}
		room, maxStr, maxArray, maxKeys = room%3000, maxStr%3000, maxArray%100, maxKeys%100
		// The search keeps at least one element or key of every
		// container.
		if room < 0 || maxStr < 0 || maxArray < 1 || maxKeys < 1 {
			return
		}
		tree, ok := parseJSONTree(compact.Bytes(), room)
		if !ok {
			return
		}
		render := jsonRenderer{room: room, maxStr: maxStr, maxArray: maxArray, maxKeys: maxKeys}
		measure := render
		measure.measure = true
		fits, measured := render.node(&tree.root), measure.node(&tree.root)
		if fits != measured {
			t.Fatalf("rendering fits %v, measure %v: %s", fits, measured, render.buf)
		}
		if n := utf8.RuneCount(render.buf); fits && (n != measure.runes || n != render.runes) {
			t.Fatalf("rendered %d runes (counted %d), measured %d: %s", n, render.runes, measure.runes, render.buf)
		}
		if fits && render.runes < tree.root.least {
			t.Fatalf("rendered %d runes, under the lower bound %d: %s", render.runes, tree.root.least, render.buf)
		}
	})
}
