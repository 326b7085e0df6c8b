package toolformats

import (
	"bytes"
	"encoding/json"
	"testing"
)

const nullArgsSchema = `{"type":"object","required":["q"],"$defs":{"person":{"type":"object","required":["email"],
"properties":{"email":{"type":"string"},"name":{"type":"string"}}}},"properties":{"q":{"type":"string"},
"limit":{"type":"integer"},"note":{"type":["string","null"]},"any":{},"who":{"$ref":"#/$defs/person"},
"people":{"type":"array","items":{"$ref":"#/$defs/person"}},"room":{"type":"object","properties":{"floor":{"type":"integer"}}}}}`

func TestNullArgumentsAreReadAsAbsent(t *testing.T) {
	schema, err := decodeSchema([]byte(nullArgsSchema))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, in, want string }{
		{"an optional argument given as null is dropped", `{"q":"go","limit":null}`, `{"q":"go"}`},
		{"a required argument given as null stays (the schema refuses it)", `{"q":null,"limit":null}`, `{"q":null}`},
		{"an argument whose schema takes null keeps it", `{"q":"go","note":null}`, `{"q":"go","note":null}`},
		{"an argument without a schema type keeps null", `{"q":"go","any":null}`, `{"q":"go","any":null}`},
		{"an unknown argument keeps null (the schema decides)", `{"q":"go","extra":null}`, `{"q":"go","extra":null}`},
		{"nested through a reference", `{"q":"go","who":{"email":"a@x","name":null}}`, `{"q":"go","who":{"email":"a@x"}}`},
		{"a null reference is dropped", `{"q":"go","who":null}`, `{"q":"go"}`},
		{"inside array items", `{"q":"go","people":[{"email":"a@x","name":null},{"email":"b@x"}]}`, `{"q":"go","people":[{"email":"a@x"},{"email":"b@x"}]}`},
		{"inside a nested object", `{"room":{"floor":null},"q":"go"}`, `{"room":{},"q":"go"}`},
		{"other bytes are kept as sent", `{ "q" : "g\u006f", "limit":null , "n":1.50e0}`, `{"q":"g\u006f","n":1.50e0}`},
		{"a key given twice is left to the core", `{"q":"go","limit":null,"limit":null}`, `{"q":"go","limit":null,"limit":null}`},
		{"a broken body is left to the core", `{"q":"go","limit":null`, `{"q":"go","limit":null`},
		{"not an object", `[null]`, `[null]`},
		{"the word null inside a string", `{"q":"null"}`, `{"q":"null"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(dropNullArgs([]byte(tc.in), schema)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// FuzzNullArgs: the rewrite keeps valid JSON valid, never adds a key, and
// is idempotent.
func FuzzNullArgs(f *testing.F) {
	schema, err := decodeSchema([]byte(nullArgsSchema))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{`{"q":"go","limit":null}`, `{"who":{"name":null},"people":[{"name":null}]}`, `{"room":{"floor":null}}`, `{"q":"\"null\""}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := dropNullArgs(in, schema)
		if bytes.Equal(out, in) {
			return
		}
		if !json.Valid(in) || !json.Valid(out) {
			t.Fatalf("rewrote %q into %q", in, out)
		}
		if again := dropNullArgs(out, schema); !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
		}
		if len(out) >= len(bytes.TrimSpace(in)) {
			t.Fatalf("a rewrite that drops nothing: %q -> %q", in, out)
		}
	})
}
