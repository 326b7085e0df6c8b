package jsontape

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestAppendCanonical(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string // JSON text, decoded with UseNumber
		want string
	}{
		{"object keys are sorted at every depth", `{"b":1,"a":{"d":[3,{"z":0,"y":1}],"c":null}}`, `{"a":{"c":null,"d":[3,{"y":1,"z":0}]},"b":1}`},
		{"white space is dropped", " { \"a\" : [ 1 , 2 ] , \"b\" : true } ", `{"a":[1,2],"b":true}`},
		{"numbers are kept verbatim", `[1,1.0,1e3,-0,0.10,12345678901234567890123]`, `[1,1.0,1e3,-0,0.10,12345678901234567890123]`},
		{"HTML characters are not escaped", `{"q":"<a href=\"x\">&amp;</a>"}`, `{"q":"<a href=\"x\">&amp;</a>"}`},
		{"unicode is written as is, but U+2028 escaped", `{"q":"量子 \u00e9 \u2028"}`, `{"q":"量子 é \u2028"}`},
		{"control characters are escaped", `{"q":"a\nb\tc\u0001\u001f\"\\/"}`, `{"q":"a\nb\tc\u0001\u001f\"\\/"}`},
		{"keys sort by their bytes", `{"é":1,"z":2,"Z":3,"":4}`, `{"":4,"Z":3,"z":2,"é":1}`},
		{"scalars stand alone", `"x"`, `"x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := json.NewDecoder(strings.NewReader(tc.in))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			got, err := AppendCanonical(nil, v)
			if err != nil {
				t.Fatalf("AppendCanonical: %v", err)
			}
			if string(got) != tc.want {
				t.Fatalf("AppendCanonical = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestAppendCanonicalOfGoValues(t *testing.T) {
	type args struct {
		Text string `json:"text"`
		N    int    `json:"n"`
	}
	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"nil is null", nil, `null`},
		{"integers", []any{int(-1), int64(1 << 62), int32(7), uint64(math.MaxUint64), uint(3)}, `[-1,4611686018427387904,7,18446744073709551615,3]`},
		{"floats as encoding/json writes them", []any{1.5, 100.0, 1e21, 1e-7, float32(0.1), 0.0}, `[1.5,100,1e+21,1e-7,0.1,0]`},
		{"other maps go through encoding/json", map[string]int{"b": 2, "a": 1}, `{"a":1,"b":2}`},
		{"structs go through encoding/json", args{Text: "<hi>", N: 2}, `{"n":2,"text":"<hi>"}`},
		{"raw JSON is canonicalised", json.RawMessage(`{"b":1, "a":2}`), `{"a":2,"b":1}`},
		{"invalid UTF-8 becomes U+FFFD", "a\xffb", `"a\ufffdb"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AppendCanonical(nil, tc.in)
			if err != nil {
				t.Fatalf("AppendCanonical: %v", err)
			}
			if string(got) != tc.want {
				t.Fatalf("AppendCanonical = %s, want %s", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		in   any
	}{
		{"NaN", math.NaN()},
		{"infinity", map[string]any{"x": math.Inf(1)}},
		{"a malformed json.Number", []any{json.Number("1.")}},
		{"an empty json.Number", json.Number("")},
		{"a channel", make(chan int)},
		{"raw JSON with trailing data", json.RawMessage(`1 2`)},
	} {
		t.Run(tc.name+" is an error", func(t *testing.T) {
			if got, err := AppendCanonical(nil, tc.in); err == nil {
				t.Fatalf("AppendCanonical = %s, want an error", got)
			}
		})
	}
}

// FuzzAppendCanonical checks that the canonical form of any JSON document is
// valid JSON, means the same document, and is a fixed point.
func FuzzAppendCanonical(f *testing.F) {
	for _, seed := range []string{
		`{"b":1,"a":[true,null,"x"]}`,
		`{"q":"量子 <&> \u2028 \ud83d\ude00","n":-1.5e-300}`,
		`[[],{},"",0]`,
		"\"\xff\"",
		`{"a":1,"a":2}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decodeUseNumber(data)
		if err != nil {
			return
		}
		c1, err := AppendCanonical(nil, v)
		if err != nil {
			t.Fatalf("AppendCanonical of a decoded document: %v", err)
		}
		if !json.Valid(c1) {
			t.Fatalf("canonical form %q is not valid JSON", c1)
		}
		v2, err := decodeUseNumber(c1)
		if err != nil {
			t.Fatalf("decode canonical form %q: %v", c1, err)
		}
		if !reflect.DeepEqual(v, v2) {
			t.Fatalf("canonical form %q means %#v, the input %#v", c1, v2, v)
		}
		c2, err := AppendCanonical(nil, v2)
		if err != nil || !bytes.Equal(c1, c2) {
			t.Fatalf("canonical form is not a fixed point: %q then %q (%v)", c1, c2, err)
		}
	})
}

func decodeUseNumber(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	return v, nil
}
