package contracts

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"cel.dev/cel-go/common/types"
)

func TestParseJSONDocAgreesWithEncodingJSON(t *testing.T) {
	docs := []string{
		`{"results":[{"id":1,"title":"t"}],"total":1}`,
		` { "a" : [ 1 , 2.5e3 , -0 , true , false , null , "x\"y\u00e9" ] , "b" : { } } `,
		`[]`, `""`, `0`, `-1.5E-7`, `"\ud83d\ude00"`, `{"dup":1,"dup":2}`,
		`{"a":`, `[1,]`, `{"a" 1}`, `01`, `1.`, `.5`, `"\x"`, "\"\x01\"", `tru`, `{"a":1}x`, `[`, `{,}`,
	}
	for _, src := range docs {
		doc, err := parseJSONDoc([]byte(src))
		if valid := json.Valid([]byte(src)); valid != (err == nil) {
			t.Errorf("%q: parse error %v, encoding/json valid=%v", src, err, valid)
			continue
		}
		if err != nil {
			continue
		}
		var want any
		_ = json.Unmarshal([]byte(src), &want)
		if got := doc.native(0); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: native = %#v, want %#v", src, got, want)
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, []byte(src))
		if got := doc.appendRaw(nil, 0); string(got) != compact.String() {
			t.Errorf("%q: raw = %s, want %s", src, got, compact.String())
		}
	}
}

func TestJSONViewsInCEL(t *testing.T) {
	doc, err := parseJSONDoc([]byte(`{"z":1,"results":[{"id":9007199254740993,"t":"a"},{"id":2}],"total":2,"ratio":0.5,"code":null,"k\u0065y":"v"}`))
	if err != nil {
		t.Fatal(err)
	}
	m := doc.celValue(0).(*celJSONMap)
	if m.Size() != types.Int(6) {
		t.Errorf("size = %v", m.Size())
	}
	if v, ok := m.Find(types.String("key")); !ok || v != types.String("v") {
		t.Errorf("escaped key: %v %v", v, ok)
	}
	if _, ok := m.Find(types.String("missing")); ok {
		t.Error("found a missing key")
	}
	results := m.Get(types.String("results")).(*celJSONList)
	if results.Size() != types.Int(2) {
		t.Errorf("results size = %v", results.Size())
	}
	first := results.Get(types.Int(0)).(*celJSONMap)
	if id := first.Get(types.String("id")); id != types.Int(9007199254740993) {
		t.Errorf("big id = %v (precision lost?)", id)
	}
	if r := m.Get(types.String("ratio")); r != types.Double(0.5) {
		t.Errorf("ratio = %v", r)
	}
	var keys []string
	for it := m.Iterator(); it.HasNext() == types.True; {
		keys = append(keys, string(it.Next().(types.String)))
	}
	if strings.Join(keys, ",") != "z,results,total,ratio,code,key" {
		t.Errorf("keys = %v", keys)
	}
	if results.Get(types.Int(5)).Type() != types.ErrType {
		t.Error("index out of range did not fail")
	}
	if eq := first.Equal(types.DefaultTypeAdapter.NativeToValue(map[string]any{"id": 9007199254740993.0, "t": "a"})); eq != types.True {
		t.Errorf("equal = %v", eq)
	}
}

// FuzzJSONDoc: the tape parser accepts exactly what encoding/json accepts,
// decodes to the same values, and its raw output is compact, valid JSON.
func FuzzJSONDoc(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}],"c":"\u00e9\n"}`, `[1e5,-0.0,"x"]`, " [ ] ", `{"a":"\xff"}`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		doc, err := parseJSONDoc(src)
		if valid := json.Valid(src); valid != (err == nil) {
			t.Fatalf("parse error %v, encoding/json valid=%v", err, valid)
		}
		if err != nil {
			return
		}
		raw := doc.appendRaw(nil, 0)
		if !json.Valid(raw) || !utf8.Valid(raw) {
			t.Fatalf("raw output %q is not valid UTF-8 JSON", raw)
		}
		var a, b any
		if json.Unmarshal(src, &a) != nil {
			return // numbers beyond float64: encoding/json refuses, the tape keeps the literal
		}
		_ = json.Unmarshal(raw, &b)
		if !reflect.DeepEqual(a, b) && utf8.Valid(src) {
			t.Fatalf("raw output changed the value: %#v vs %#v", a, b)
		}
		if !reflect.DeepEqual(doc.native(0), a) && utf8.Valid(src) {
			t.Fatalf("native %#v, want %#v", doc.native(0), a)
		}
	})
}

func TestTopLevelMembersDecodesOnlyWhatIsAsked(t *testing.T) {
	src := []byte(` {"items":[{"total":99}],"t\u006ftal":3,"x":{"a":[1,2]},"s":"v"} `)
	got, ok := topLevelMembers(src, []string{"total", "x", "missing"})
	if !ok {
		t.Fatal("not an object?")
	}
	if !reflect.DeepEqual(got, map[string]any{"total": 3.0, "x": map[string]any{"a": []any{1.0, 2.0}}}) {
		t.Errorf("members = %#v", got)
	}
	for _, bad := range []string{`[1]`, `{"a":}`, `{"a":1`, `"s"`, ``} {
		if _, ok := topLevelMembers([]byte(bad), []string{"a"}); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestIsJSONNumber(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "-0": true, "12.5e-3": true, "1E+9": true, "": false, "01": false, "1.": false, ".5": false, "+1": false, "1e": false, "1 ": false, "NaN": false, "-": false} {
		if got := IsJSONNumber(s); got != want {
			t.Errorf("IsJSONNumber(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzUnescapeJSON: a string's value is what encoding/json makes of it,
// escapes, surrogate pairs, broken surrogates and invalid UTF-8 included.
func FuzzUnescapeJSON(f *testing.F) {
	for _, s := range []string{`plain`, `a\"b\\c\/d\b\f\n\r\t`, `\u00e9\ud83d\ude00`, `\ud800`, `\ud800\u0041`, `\udc00\ud800\udc00`, "\xff\xfe", `\uD83D\uDE00x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, inner []byte) {
		src := append(append([]byte{'"'}, inner...), '"')
		var want string
		if json.Unmarshal(src, &want) != nil {
			return
		}
		doc, err := parseJSONDoc(src)
		if err != nil {
			t.Fatalf("encoding/json reads %q, the tape parser refuses it: %v", src, err)
		}
		if got := doc.str(0); got != want {
			t.Fatalf("str(%q) = %q, encoding/json %q", src, got, want)
		}
	})
}
