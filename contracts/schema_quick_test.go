package contracts

import (
	"encoding/json"
	"strings"
	"testing"
)

// quickSchemas are schemas the quick check applies, from the example policy
// and beyond it; each test and the fuzz target compare its verdicts with
// the library's.
var quickSchemas = []string{
	// search_articles
	`{"type":"object","required":["q"],"additionalProperties":false,"properties":{
		"q":{"type":"string","minLength":1,"maxLength":200,"description":"Keywords."},
		"limit":{"type":"integer","minimum":1,"maximum":20,"default":10}}}`,
	// send_notification
	`{"type":"object","required":["user_id","text"],"additionalProperties":false,"properties":{
		"user_id":{"type":"string","pattern":"^[a-z0-9_-]{1,64}$"},
		"text":{"type":"string","minLength":1,"maxLength":2000}}}`,
	// open objects, arrays, nested objects, exclusive limits, several types
	`{"type":"object","properties":{
		"tags":{"type":"array","minItems":1,"maxItems":3,"items":{"type":"string","maxLength":4}},
		"n":{"type":"number","exclusiveMinimum":-5,"exclusiveMaximum":5},
		"opt":{"type":["string","null","boolean"]},
		"any":{"description":"anything"},
		"o":{"type":"object","required":["a"],"additionalProperties":true,"properties":{"a":{"type":"integer"}}}}}`,
}

func TestQuickSchemaApplies(t *testing.T) {
	for i, doc := range quickSchemas {
		if mustSchema(t, doc).quick == nil {
			t.Errorf("schema %d: no quick check", i)
		}
	}
	notQuick := map[string]string{
		"enum":                        `{"type":"object","properties":{"a":{"enum":["x","y"]}}}`,
		"a combinator":                `{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`,
		"a format, which may assert":  `{"type":"object","properties":{"a":{"type":"string","format":"email"}}}`,
		"a reference":                 `{"type":"object","$defs":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/s"}}}`,
		"multipleOf":                  `{"type":"object","properties":{"a":{"type":"number","multipleOf":2}}}`,
		"a fractional limit":          `{"type":"object","properties":{"a":{"type":"number","minimum":0.5}}}`,
		"a limit past int64":          `{"type":"object","properties":{"a":{"type":"integer","maximum":1e30}}}`,
		"a schema for the others":     `{"type":"object","additionalProperties":{"type":"string"}}`,
		"a boolean property schema":   `{"type":"object","properties":{"a":false}}`,
		"tuple items":                 `{"type":"object","properties":{"a":{"type":"array","prefixItems":[{"type":"string"}]}}}`,
		"uniqueItems":                 `{"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}}`,
		"a nested unknown keyword":    `{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"const":1}}}}}`,
		"dependentRequired on top":    `{"type":"object","dependentRequired":{"a":["b"]}}`,
		"patternProperties on top":    `{"type":"object","patternProperties":{"^x":{"type":"string"}}}`,
		"unevaluatedProperties (top)": `{"type":"object","unevaluatedProperties":false}`,
	}
	for name, doc := range notQuick {
		t.Run(name, func(t *testing.T) {
			if mustSchema(t, doc).quick != nil {
				t.Errorf("quick check built for %s", doc)
			}
		})
	}
}

// TestQuickSchemaAgreesWithLibrary: whatever the quick check vouches for,
// the library accepts; and it vouches for the ordinary valid calls, or it
// would save nothing.
func TestQuickSchemaAgreesWithLibrary(t *testing.T) {
	tests := []struct {
		schema int
		args   string
		quick  bool // the quick check vouches for it
		valid  bool // the library accepts it
	}{
		{0, `{"q":"go","limit":5}`, true, true},
		{0, `{"q":"go"}`, true, true},
		{0, `{"q":"日本語"}`, true, true},
		{0, `{"q":"go","limit":20}`, true, true},
		{0, `{"q":"go","limit":21}`, false, false},
		{0, `{"q":"go","limit":0}`, false, false},
		{0, `{"q":"go","limit":5.0}`, false, true}, // an integer the library recognizes, not vouched for
		{0, `{"q":"go","limit":5e0}`, false, true},
		{0, `{"q":"go","limit":"5"}`, false, false},
		{0, `{"q":""}`, false, false},
		{0, `{"q":"` + strings.Repeat("語", 200) + `"}`, true, true},
		{0, `{"q":"` + strings.Repeat("語", 201) + `"}`, false, false},
		{0, `{"limit":5}`, false, false},
		{0, `{"q":"go","extra":1}`, false, false},
		{0, `{"q":"go","limit":123456789012345678901234567890}`, false, false},
		{1, `{"user_id":"alice","text":"hi"}`, true, true},
		{1, `{"user_id":"Alice","text":"hi"}`, false, false},
		{1, `{"user_id":"alice","text":""}`, false, false},
		{2, `{}`, true, true},
		{2, `{"tags":["a","bcd"],"n":4,"opt":null,"any":[1,{"x":2}],"o":{"a":1,"b":"x"},"other":true}`, true, true},
		{2, `{"tags":[]}`, false, false},
		{2, `{"tags":["a","b","c","d"]}`, false, false},
		{2, `{"tags":["abcde"]}`, false, false},
		{2, `{"n":5}`, false, false},
		{2, `{"n":-5}`, false, false},
		{2, `{"n":-4}`, true, true},
		{2, `{"n":4.5}`, false, true},
		{2, `{"opt":1}`, false, false},
		{2, `{"opt":false}`, true, true},
		{2, `{"o":{}}`, false, false},
		{2, `{"o":{"a":1.5}}`, false, false},
	}
	schemas := make([]*Schema, len(quickSchemas))
	for i, doc := range quickSchemas {
		schemas[i] = mustSchema(t, doc)
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			s := schemas[tt.schema]
			args := decodeTestArgs(t, tt.args)
			applyDefaults(s.doc, args)
			if got := s.quick.accepts(args); got != tt.quick {
				t.Errorf("quick check = %v, want %v", got, tt.quick)
			}
			if err := s.compiled.Validate(args); (err == nil) != tt.valid {
				t.Errorf("library: %v, want valid=%v", err, tt.valid)
			}
			if err := s.Validate(decodeTestArgs(t, tt.args)); (err == nil) != tt.valid {
				t.Errorf("Validate: %v, want valid=%v", err, tt.valid)
			}
		})
	}
}

func decodeTestArgs(t testing.TB, doc string) map[string]any {
	t.Helper()
	args, err := DecodeArgs([]byte(doc), 64)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// fuzzArgs decodes a fuzzed document the way a front end hands arguments
// over (numbers as json.Number); ok is false unless it is a JSON object.
func fuzzArgs(doc []byte) (map[string]any, bool) {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return nil, false
	}
	args, ok := v.(map[string]any)
	return args, ok
}

// FuzzQuickSchema: the quick check never vouches for arguments the library
// rejects.
func FuzzQuickSchema(f *testing.F) {
	schemas := make([]*Schema, len(quickSchemas))
	for i, doc := range quickSchemas {
		schemas[i] = mustSchema(f, doc)
	}
	for _, seed := range []string{
		`{"q":"go","limit":5}`, `{"q":"","limit":-0}`, `{"user_id":"a_b","text":"x"}`,
		`{"tags":["a"],"n":-4,"opt":"s","o":{"a":-0}}`, `{"n":4999999999999999999}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		v, ok := fuzzArgs(doc)
		if !ok {
			return
		}
		for i, s := range schemas {
			// Each schema gets its own copy: defaults are applied in place.
			args := deepCopyJSON(v).(map[string]any)
			applyDefaults(s.doc, args)
			if s.quick.accepts(args) {
				if err := s.compiled.Validate(args); err != nil {
					t.Fatalf("schema %d: quick check accepted %s, the library says %v", i, doc, err)
				}
			}
		}
	})
}
