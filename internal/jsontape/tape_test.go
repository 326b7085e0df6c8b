package jsontape

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func mustParse(t testing.TB, src string) Tape {
	t.Helper()
	tape, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	t.Cleanup(tape.Release)
	return tape
}

func TestParseAgreesWithEncodingJSON(t *testing.T) {
	docs := []string{
		`{"results":[{"id":1,"title":"t"}],"total":1}`,
		` { "a" : [ 1 , 2.5e3 , -0 , true , false , null , "x\"y\u00e9" ] , "b" : { } } `,
		`[]`, `""`, `0`, `-1.5E-7`, `"\ud83d\ude00"`, `{"dup":1,"dup":2}`,
		`{"a":`, `[1,]`, `{"a" 1}`, `01`, `1.`, `.5`, `"\x"`, "\"\x01\"", `tru`, `{"a":1}x`, `[`, `{,}`,
	}
	for _, src := range docs {
		tape, err := Parse([]byte(src))
		if valid := json.Valid([]byte(src)); valid != (err == nil) {
			t.Errorf("%q: parse error %v, encoding/json valid=%v", src, err, valid)
			continue
		}
		if err != nil {
			continue
		}
		var want any
		_ = json.Unmarshal([]byte(src), &want)
		if got := tape.Root().Native(); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: native = %#v, want %#v", src, got, want)
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, []byte(src))
		if got := tape.Root().AppendCompact(nil); string(got) != compact.String() {
			t.Errorf("%q: compact = %s, want %s", src, got, compact.String())
		}
		if got, want := tape.Root().AppendRaw(nil), bytes.TrimSpace([]byte(src)); !bytes.Equal(got, want) {
			t.Errorf("%q: raw = %s, want %s", src, got, want)
		}
		tape.Release()
	}
}

func TestValueReaders(t *testing.T) {
	tape := mustParse(t, `{"z":1,"results":[{"id":9007199254740993,"t":"a"},{"id":2}],"total":2,"ratio":0.5,"code":null,"k\u0065y":"v","k":1,"k":2,"big":1e400,"s":""}`)
	root := tape.Root()
	if root.Kind() != Object || root.Len() != 10 {
		t.Fatalf("root kind %v len %d", root.Kind(), root.Len())
	}
	t.Run("lookup finds escaped keys and takes the last of repeated ones", func(t *testing.T) {
		if v, ok := root.Lookup("key"); !ok || v.Text() != "v" {
			t.Errorf("escaped key: %q %v", v.Text(), ok)
		}
		if v, ok := root.Lookup("k"); !ok || v.Literal() != "2" {
			t.Errorf("repeated key: %q %v", v.Literal(), ok)
		}
		if _, ok := root.Lookup("missing"); ok {
			t.Error("found a missing key")
		}
		results, _ := root.Lookup("results")
		if _, ok := results.Lookup("id"); ok {
			t.Error("lookup in an array found a key")
		}
	})
	t.Run("numbers read as ints only when written as ints that fit", func(t *testing.T) {
		results, _ := root.Lookup("results")
		var ids []int64
		for c := results.Cursor(); c.More(); {
			id, _ := c.Element().Lookup("id")
			n, ok := id.Int()
			if !ok {
				t.Fatalf("id %s is not an int", id.Literal())
			}
			ids = append(ids, n)
		}
		if !reflect.DeepEqual(ids, []int64{9007199254740993, 2}) {
			t.Errorf("ids = %v (precision lost?)", ids)
		}
		ratio, _ := root.Lookup("ratio")
		if _, ok := ratio.Int(); ok {
			t.Error("0.5 read as an int")
		}
		if f, err := ratio.Float(); err != nil || f != 0.5 {
			t.Errorf("ratio = %v, %v", f, err)
		}
		big, _ := root.Lookup("big")
		if _, err := big.Float(); err == nil {
			t.Error("1e400 read as a float without an error")
		}
	})
	t.Run("members come in document order", func(t *testing.T) {
		var keys []string
		for c := root.Cursor(); c.More(); {
			k, _ := c.Member()
			keys = append(keys, k.Text())
		}
		if strings.Join(keys, ",") != "z,results,total,ratio,code,key,k,k,big,s" {
			t.Errorf("keys = %v", keys)
		}
	})
	t.Run("readers of another kind return their zero", func(t *testing.T) {
		code, _ := root.Lookup("code")
		if code.Text() != "" || code.Literal() != "" || code.Equals("") || code.Len() != 0 {
			t.Error("null read as a string, number or container")
		}
		c := code.Cursor()
		if c.More() {
			t.Error("a cursor over null has something left")
		}
	})
}

// TestReleasedTapeIsDead: the pooled node buffer goes back on Release, so
// every later use of the tape or of a value read from it panics rather than
// read another document's nodes; what was read before stays valid.
func TestReleasedTapeIsDead(t *testing.T) {
	uses := map[string]func(Tape, Value){
		"Root":          func(tp Tape, _ Value) { tp.Root() },
		"Kind":          func(_ Tape, v Value) { v.Kind() },
		"Len":           func(_ Tape, v Value) { v.Len() },
		"Lookup":        func(_ Tape, v Value) { v.Lookup("a") },
		"Text":          func(_ Tape, v Value) { v.Text() },
		"Native":        func(_ Tape, v Value) { v.Native() },
		"AppendCompact": func(_ Tape, v Value) { v.AppendCompact(nil) },
		"Cursor":        func(_ Tape, v Value) { v.Cursor() },
		"Release":       func(tp Tape, _ Value) { tp.Release(); tp.Root() },
	}
	for name, use := range uses {
		t.Run(name+" after Release panics", func(t *testing.T) {
			tape, err := Parse([]byte(`{"a":"x"}`))
			if err != nil {
				t.Fatal(err)
			}
			v := tape.Root()
			tape.Release()
			// Another document takes the pooled buffer meanwhile.
			other, err := Parse([]byte(`{"a":"y","b":[1,2,3]}`))
			if err != nil {
				t.Fatal(err)
			}
			defer other.Release()
			defer func() {
				if r := recover(); r != ErrReleased {
					t.Fatalf("recovered %v, want ErrReleased", r)
				}
			}()
			use(tape, v)
		})
	}
	t.Run("a cursor taken before Release panics after it", func(t *testing.T) {
		tape := mustParse(t, `[1,2]`)
		c := tape.Root().Cursor()
		tape.Release()
		defer func() {
			if r := recover(); r != ErrReleased {
				t.Fatalf("recovered %v, want ErrReleased", r)
			}
		}()
		c.Element()
	})
	t.Run("what was read before Release stays valid, and releasing twice is harmless", func(t *testing.T) {
		src := []byte(`{"a":"x\u00e9","n":12}`)
		tape, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := tape.Root().Lookup("a")
		text, compact, native := a.Text(), tape.Root().AppendCompact(nil), tape.Root().Native()
		tape.Release()
		tape.Release()
		copy(src, `{"b":"zzzzz","m":99}`)
		if text != "xé" || string(compact) != `{"a":"x\u00e9","n":12}` || !reflect.DeepEqual(native, map[string]any{"a": "xé", "n": 12.0}) {
			t.Errorf("values changed after Release: %q %s %v", text, compact, native)
		}
	})
}

// FuzzParse: the tape parser accepts exactly what encoding/json accepts,
// decodes to the same values, and its compact output is valid JSON.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}],"c":"\u00e9\n"}`, `[1e5,-0.0,"x"]`, " [ ] ", `{"a":"\xff"}`, `"\ud800"`, "[\"\xe9\",\"\xa9\"]", "{\"\xe9\u00e9\\n\xe9\":\"0123456789abcdef\xc3\"}", "[\"0123456789ab\u00e9\"]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		tape, err := Parse(src)
		if valid := json.Valid(src); valid != (err == nil) {
			t.Fatalf("parse error %v, encoding/json valid=%v", err, valid)
		}
		if valid, _ := Check(src); valid != (err == nil) {
			t.Fatalf("Check says valid=%v, Parse error %v", valid, err)
		}
		if err != nil {
			return
		}
		defer tape.Release()
		// The parser checks UTF-8 in strings only, the one place the
		// grammar admits bytes past ASCII: it finds what utf8.Valid does.
		if tape.t.valid != utf8.Valid(src) {
			t.Fatalf("tape says valid UTF-8 %v, utf8.Valid %v: %q", tape.t.valid, utf8.Valid(src), src)
		}
		if _, compact := Check(src); compact && !utf8.Valid(src) {
			t.Fatalf("Check says %q is compact valid UTF-8", src)
		}
		raw := tape.Root().AppendCompact(nil)
		if !json.Valid(raw) || !utf8.Valid(raw) {
			t.Fatalf("compact output %q is not valid UTF-8 JSON", raw)
		}
		if _, compact := Check(src); compact && !bytes.Equal(raw, bytes.TrimSpace(src)) {
			t.Fatalf("Check says %q is compact, compacting gives %q", src, raw)
		}
		var a, b any
		if json.Unmarshal(src, &a) != nil {
			return // numbers beyond float64: encoding/json refuses, the tape keeps the literal
		}
		_ = json.Unmarshal(raw, &b)
		if !reflect.DeepEqual(a, b) && utf8.Valid(src) {
			t.Fatalf("compact output changed the value: %#v vs %#v", a, b)
		}
		if !reflect.DeepEqual(tape.Root().Native(), a) && utf8.Valid(src) {
			t.Fatalf("native %#v, want %#v", tape.Root().Native(), a)
		}
	})
}

// FuzzText: a string's value is what encoding/json makes of it, escapes,
// surrogate pairs, broken surrogates and invalid UTF-8 included.
func FuzzText(f *testing.F) {
	for _, s := range []string{`plain`, `a\"b\\c\/d\b\f\n\r\t`, `\u00e9\ud83d\ude00`, `\ud800`, `\ud800\u0041`, `\udc00\ud800\udc00`, "\xff\xfe", `\uD83D\uDE00x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, inner []byte) {
		src := append(append([]byte{'"'}, inner...), '"')
		var want string
		if json.Unmarshal(src, &want) != nil {
			return
		}
		tape, err := Parse(src)
		if err != nil {
			t.Fatalf("encoding/json reads %q, the tape parser refuses it: %v", src, err)
		}
		defer tape.Release()
		if got := tape.Root().Text(); got != want {
			t.Fatalf("Text(%q) = %q, encoding/json %q", src, got, want)
		}
		if !tape.Root().Equals(want) {
			t.Fatalf("Equals(%q) is false on %q", want, src)
		}
	})
}

func TestIsNumber(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "-0": true, "12.5e-3": true, "1E+9": true, "": false, "01": false, "1.": false, ".5": false, "+1": false, "1e": false, "1 ": false, "NaN": false, "-": false} {
		if got := IsNumber(s); got != want {
			t.Errorf("IsNumber(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	for src, want := range map[string][2]bool{
		`{"a":[1,2]}`: {true, true}, ` {"a":1}`: {true, false}, `{"a": 1}`: {true, false}, "\"\xff\"": {true, false},
		`{"a":1}x`: {false, false}, ``: {false, false}, `1 `: {true, false},
	} {
		if valid, compact := Check([]byte(src)); valid != want[0] || compact != want[1] {
			t.Errorf("Check(%q) = %v, %v; want %v", src, valid, compact, want)
		}
	}
}

func TestParseRefusesTooDeep(t *testing.T) {
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, err := Parse([]byte(ok)); err != nil {
		t.Fatalf("nesting %d refused: %v", MaxDepth, err)
	}
	deep := "[" + ok + "]"
	if _, err := Parse([]byte(deep)); !errors.Is(err, ErrSyntax) {
		t.Fatalf("nesting %d: err %v, want ErrSyntax", MaxDepth+1, err)
	}
}

// BenchmarkParse parses a backend answer of about 1 KiB, pretty-printed as
// many backends send it, and reads one member: the tape's own cost per
// call, once its pool is warm.
func BenchmarkParse(b *testing.B) {
	var items []string
	for i := range 8 {
		items = append(items, `{"id": "kb-000`+string(rune('0'+i))+`", "title": "Article about tool calling", "score": 0.5e1, "tags": ["a", "b"], "n": -12}`)
	}
	src := []byte("{\n  \"results\": [" + strings.Join(items, ", ") + "],\n  \"total\": 8\n}")
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		tape, err := Parse(src)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := tape.Root().Lookup("total"); !ok {
			b.Fatal("no total")
		}
		tape.Release()
	}
}

// FuzzSkipValue: on any compact document Parse accepts, SkipValue finds the
// end of every value the tape records, and refuses what nests too deep
// exactly where Parse does.
func FuzzSkipValue(f *testing.F) {
	f.Add([]byte(`{"a":[1,"x\"]",{"b":null}],"c":"\\"}`))
	f.Add([]byte(`[[[]],{},"",-1.5e3,true]`))
	f.Add([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)))
	f.Fuzz(func(t *testing.T, src []byte) {
		if valid, compact := Check(src); !valid || !compact {
			// JSON nested too deep for Parse: SkipValue refuses it too.
			var c bytes.Buffer
			if json.Compact(&c, src) != nil {
				return
			}
			if _, err := Parse(c.Bytes()); err != nil && SkipValue(c.Bytes(), 0, 0) != -1 {
				t.Fatalf("SkipValue accepted %q, which Parse refuses", c.Bytes())
			}
			return
		}
		tape, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		defer tape.Release()
		depths := make([]int, len(tape.t.nodes))
		for i, n := range tape.t.nodes {
			for j := i + 1; j < int(n.next); j++ {
				depths[j]++
			}
			if end := SkipValue(src, int(n.start), depths[i]); end != int(n.end) {
				t.Fatalf("value %d of %q: SkipValue ends at %d, want %d", i, src, end, n.end)
			}
		}
	})
}

// TestPlainWord: the eight-byte test agrees with the byte test for every
// byte value at every position, among plain neighbours and others.
func TestPlainWord(t *testing.T) {
	plainByte := func(c byte) bool { return c >= 0x20 && c != '"' && c != '\\' }
	// check holds plainWord to the byte test, and the lowest byte
	// plainFlags flags to the first byte that is not plain.
	check := func(w [8]byte) {
		t.Helper()
		first := 8
		for i, b := range w {
			if !plainByte(b) {
				first = i
				break
			}
		}
		x := binary.LittleEndian.Uint64(w[:])
		if got := plainWord(x); got != (first == 8) {
			t.Fatalf("plainWord(% x) = %v, want %v", w, got, first == 8)
		}
		if got := bits.TrailingZeros64(plainFlags(x)) >> 3; got != first {
			t.Fatalf("plainFlags(% x) flags byte %d first, want %d", w, got, first)
		}
	}
	for _, fill := range []byte{'a', 0xff, 0x80, ' ', '"', 0x00, '\\', 0x21, 0x1f} {
		for pos := range 8 {
			for c := range 256 {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				check(w)
			}
		}
	}
	// Mixed words: a borrow from one byte must not hide or fake another.
	interesting := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, '"', '"' + 1, '\\', '\\' + 1, 0x7f, 0x80, 0x81, 0xa2, 0xdc, 0xff}
	x := uint64(1)
	for range 200000 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		var w [8]byte
		for i := range w {
			w[i] = interesting[(x>>(i*4))%uint64(len(interesting))]
		}
		check(w)
	}
}

// BenchmarkSkipValue skips a 1 MiB answer of records, as the observation
// skips what it cannot show, next to parsing it into a tape.
func BenchmarkSkipValue(b *testing.B) {
	var doc bytes.Buffer
	doc.WriteString(`{"results":[`)
	for i := 0; doc.Len() < 1<<20; i++ {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"id":"kb-%d","title":"Go concurrency patterns","snippet":"Goroutines, channels and select: pipelines, fan-out and fan-in, and cancellation with context in idiomatic code.","url":"https://kb.example.com/articles/go-concurrency-patterns"}`, i)
	}
	doc.WriteString(`],"total":1}`)
	src := doc.Bytes()
	b.Run("skip", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			if SkipValue(src, 0, 0) != len(src) {
				b.Fatal("not skipped whole")
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			tape, err := Parse(src)
			if err != nil {
				b.Fatal(err)
			}
			tape.Release()
		}
	})
}

// largeAnswer is an answer of records of about size bytes, a quarter of
// its text past ASCII, as examples.PaddedSearchAnswer makes them.
func largeAnswer(size int) []byte {
	var doc bytes.Buffer
	doc.WriteString(`{"results":[`)
	for i := 0; doc.Len() < size; i++ {
		if i > 0 {
			doc.WriteByte(',')
		}
		if i%4 == 3 {
			fmt.Fprintf(&doc, `{"id":"kb-%d","title":"量子计算入门","snippet":"从量子比特、叠加态与纠缠讲起，介绍量子门、量子线路，以及当前量子计算机的能力边界。","url":"https://kb.example.com/articles/quantum-computing-zh"}`, i)
			continue
		}
		fmt.Fprintf(&doc, `{"id":"kb-%d","title":"Go concurrency patterns","snippet":"Goroutines, channels and select: pipelines, fan-out and fan-in, and cancellation with context in idiomatic code.","url":"https://kb.example.com/articles/go-concurrency-patterns"}`, i)
	}
	doc.WriteString(`],"total":1}`)
	return doc.Bytes()
}

// BenchmarkParseLarge parses a 1 MiB answer as Parse does (lazy) and with
// every node made at once (eager), then counts and copies its records as
// the rules and the envelope do.
func BenchmarkParseLarge(b *testing.B) {
	src := largeAnswer(1 << 20)
	for _, c := range []struct {
		name string
		lazy int
	}{{"lazy", lazyDepth}, {"eager", 0}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			dst := make([]byte, 0, len(src))
			for b.Loop() {
				tape, err := parse(src, c.lazy)
				if err != nil {
					b.Fatal(err)
				}
				results, _ := tape.Root().Lookup("results")
				if results.Len() == 0 {
					b.Fatal("no results")
				}
				dst = results.AppendCompact(dst[:0])
				tape.Release()
			}
		})
	}
}

// describe writes down everything the Value API reads of v: its kind and
// length, a string's text, a number's readings, each element or member in
// order and each key's lookup, and the value's compact and raw bytes.
func describe(b *strings.Builder, v Value) { describeAs(b, v, false) }

// describeAs is describe, reading every container through Whole when
// whole is set.
func describeAs(b *strings.Builder, v Value, whole bool) {
	if whole {
		v = v.Whole()
	}
	fmt.Fprintf(b, "(%d %d ", v.Kind(), v.Len())
	switch v.Kind() {
	case String:
		fmt.Fprintf(b, "%q %v", v.Text(), v.Equals(v.Text()))
	case Number:
		n, ok := v.Int()
		f, err := v.Float()
		fmt.Fprintf(b, "%s %d %v %v %v", v.Literal(), n, ok, f, err)
	case Array:
		for c := v.Cursor(); c.More(); {
			describeAs(b, c.Element(), whole)
		}
	case Object:
		for c := v.Cursor(); c.More(); {
			k, e := c.Member()
			describeAs(b, k, whole)
			describeAs(b, e, whole)
			found, ok := v.Lookup(k.Text())
			fmt.Fprintf(b, " lookup %v %d %s", ok, found.Kind(), found.AppendCompact(nil))
		}
	}
	fmt.Fprintf(b, " %s %s %#v)", v.AppendCompact(nil), v.AppendRaw(nil), v.Native())
}

// FuzzLazyTape: a tape whose containers from some depth on are lazy reads,
// through every method, exactly as the tape that has every node, whether
// or not every container is read through Whole, and accepts exactly what
// it accepts.
func FuzzLazyTape(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,2,{"b":null}],"c":"\u00e9\n"}`, `[[1,[2,[3]]],{"k":{"k":{"k":[]}}}]`, ` { "a" : [ { } , [ ] ] } `,
		`{"dup":[1],"dup":{"x":"\ud800"}}`, "[{\"a\":\"\xff\"},[\"\xe9\"]]", `{"a":[1,]}`, `[{"a" 1}]`, `[[["x"]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		eager, eagerErr := parse(src, 0)
		if eagerErr == nil {
			defer eager.Release()
		}
		var want strings.Builder
		if eagerErr == nil {
			describe(&want, eager.Root())
		}
		for _, depth := range []int{1, 2, 3} {
			lazy, err := parse(src, depth)
			if (err == nil) != (eagerErr == nil) {
				t.Fatalf("lazy from depth %d: error %v, eager error %v", depth, err, eagerErr)
			}
			if err != nil {
				continue
			}
			for _, whole := range []bool{false, true} {
				var got strings.Builder
				describeAs(&got, lazy.Root(), whole)
				if got.String() != want.String() {
					t.Fatalf("lazy from depth %d (whole %v) reads\n%s\neager reads\n%s", depth, whole, got.String(), want.String())
				}
			}
			lazy.Release()
		}
	})
}

func TestLazyTape(t *testing.T) {
	src := largeAnswer(lazyFrom)
	tape, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	defer tape.Release()
	results, _ := tape.Root().Lookup("results")
	t.Run("a large answer's records are single nodes", func(t *testing.T) {
		if got, want := len(tape.t.nodes), 5+results.Len(); got != want {
			t.Errorf("%d nodes, want %d (root, two keys, total, results and one per record)", got, want)
		}
		if got := results.AppendCompact(nil); !bytes.Equal(got, src[len(`{"results":`):len(src)-len(`,"total":1}`)]) {
			t.Errorf("the records copied out are not the answer's")
		}
	})
	t.Run("it reads as the eager tape", func(t *testing.T) {
		eager, err := parse(src, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer eager.Release()
		var got, want strings.Builder
		describe(&got, tape.Root())
		describe(&want, eager.Root())
		if got.String() != want.String() {
			t.Error("the lazy tape reads differently")
		}
	})
	t.Run("a record is expanded once", func(t *testing.T) {
		c := results.Cursor()
		first := c.Element()
		a, _ := first.Lookup("id")
		b, _ := first.Lookup("id")
		if a != b || len(tape.t.subs) == 0 {
			t.Errorf("two lookups gave %v and %v, %d expansions", a, b, len(tape.t.subs))
		}
	})
	t.Run("a list read whole is parsed once", func(t *testing.T) {
		other, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release()
		rs, _ := other.Root().Lookup("results")
		whole := rs.Whole()
		var ids []string
		for c := whole.Cursor(); c.More(); {
			id, _ := c.Element().Lookup("id")
			ids = append(ids, id.Text())
		}
		if len(other.t.subs) != 1 || len(ids) != rs.Len() || ids[0] != "kb-0" {
			t.Errorf("%d expansions for %d records (%d read, the first %q), want 1", len(other.t.subs), rs.Len(), len(ids), ids[0])
		}
		if again := rs.Whole(); again != whole || whole.Whole() != whole {
			t.Error("reading the list whole again gave another value")
		}
	})
	t.Run("values of an expanded record die with the tape", func(t *testing.T) {
		other, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		rs, _ := other.Root().Lookup("results")
		c := rs.Cursor()
		id, _ := c.Element().Lookup("id")
		other.Release()
		defer func() {
			if r := recover(); r != ErrReleased {
				t.Fatalf("recovered %v, want ErrReleased", r)
			}
		}()
		id.Text()
	})
}

// FuzzPlainString: the word-at-a-time reading of a string's text stops at
// the first quote, backslash or control character, or within the last eight
// bytes, and finds the bytes past ASCII before it, as reading byte by byte
// does.
func FuzzPlainString(f *testing.F) {
	for _, s := range []string{`abc"def`, `0123456789abcdef"`, "\xe9\xe9\xe9\xe9\xe9\xe9\xe9\"\xff", `abcdefg\"h"`, "abc\x01\"", `"`, "12345678\"\xff\xff\xff\xff\xff\xff\xff", "\xa2!\x1f\xdd\x80\x7f\\x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		for _, start := range []int{0, 1, 7} {
			if start > len(s) {
				return
			}
			end, high := plainRun(s, start)
			if end < start || end > len(s) {
				t.Fatalf("plainRun(%q, %d) = %d, out of the text", s, start, end)
			}
			wantHigh := false
			for _, c := range s[start:end] {
				if c < 0x20 || c == '"' || c == '\\' {
					t.Fatalf("plainRun(%q, %d) = %d, past the special byte %q", s, start, end, c)
				}
				wantHigh = wantHigh || c >= 0x80
			}
			if high != wantHigh {
				t.Fatalf("plainRun(%q, %d): past ASCII %v, byte by byte %v", s, start, high, wantHigh)
			}
			if len(s)-end >= 8 {
				if c := s[end]; c >= 0x20 && c != '"' && c != '\\' {
					t.Fatalf("plainRun(%q, %d) stopped at %d, at the plain byte %q", s, start, end, c)
				}
			}
		}
	})
}
