package jsontape

import (
	"strings"
	"testing"
)

// recursiveSkip is the reference for the checker: the parser's own
// recursive reading, recording no nodes, of the value at p.i at nesting
// depth depth, with the number of a container's elements or members.
func recursiveSkip(p *parser, depth int) (int32, error) {
	if p.i < len(p.src) && (p.src[p.i] == '[' || p.src[p.i] == '{') {
		if depth >= MaxDepth {
			return 0, ErrSyntax
		}
		if p.src[p.i] == '[' {
			return p.elements(depth, Array, ']')
		}
		return p.elements(depth, Object, '}')
	}
	return 0, p.value(depth)
}

// FuzzChecker: the checker accepts and refuses exactly what the parser
// does, at any nesting depth, with the same error, and finds the same end,
// count, white space and invalid UTF-8.
func FuzzChecker(f *testing.F) {
	deep := strings.Repeat("[", 5) + strings.Repeat("]", 5)
	for _, s := range []string{
		`{"a":[1,2,{"b":null}],"c":"\u00e9\n"}`, `[[1,[2,[3]]],{"k":{"k":{"k":[]}}}]`, ` { "a" : [ { } , [ ] ] } `,
		`{"dup":[1],"dup":{"x":"\ud800"}}`, "[{\"a\":\"\xff\"},[\"\xe9\"]]", `{"a":[1,]}`, `[{"a" 1}]`, `[[["x"]]`,
		`[-0.5e+3,true,false,null,"x\"y"]`, `{"a":1,}`, `{,}`, `[,1]`, `{"a"}`, `[1 2]`, `[tru]`, `[01]`, `{1:2}`,
		"[\"0123456789abcdef\x01\"]", "[\"0123456789abcde\\", `"abc`, "[ ]", "{ }", "{\"a\":\t[\n]\r}", deep,
	} {
		for _, depth := range []uint16{0, 1, MaxDepth - 6, MaxDepth - 5, MaxDepth} {
			f.Add([]byte(s), depth)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte, depth uint16) {
		d := int(depth) % (MaxDepth + 2)
		ref := parser{src: src, compact: true, validateOnly: true}
		wantCount, wantErr := recursiveSkip(&ref, d)
		got := parser{src: src, compact: true}
		count, err := got.skip(d)
		if err != wantErr {
			t.Fatalf("skip(%q) at depth %d: error %v, the parser's %v", src, d, err, wantErr)
		}
		if err != nil {
			return
		}
		if got.i != ref.i || count != wantCount || got.compact != ref.compact || got.invalid != ref.invalid {
			t.Fatalf("skip(%q) at depth %d: end %d, count %d, compact %v, invalid %v; the parser's %d, %d, %v, %v",
				src, d, got.i, count, got.compact, got.invalid, ref.i, wantCount, ref.compact, ref.invalid)
		}
	})
}

// TestCheckerDepth: the checker refuses a value nested MaxDepth deep, as
// the parser does, and accepts one less.
func TestCheckerDepth(t *testing.T) {
	for _, c := range []struct {
		depth, nest int
		ok          bool
	}{{0, MaxDepth, true}, {0, MaxDepth + 1, false}, {2, MaxDepth - 2, true}, {2, MaxDepth - 1, false}, {MaxDepth, 0, true}, {MaxDepth, 1, false}} {
		src := []byte(strings.Repeat("[", c.nest) + "1" + strings.Repeat("]", c.nest))
		p := parser{src: src}
		if _, err := p.skip(c.depth); (err == nil) != c.ok {
			t.Errorf("%d arrays at depth %d: error %v, want ok %v", c.nest, c.depth, err, c.ok)
		}
	}
}
