package contracts

import (
	"reflect"
	"testing"
)

// applyDefaults is what Validate did before propertyDefaults: it walks the
// schema document on every call. It is the reference the tests below hold
// propertyDefaults to.
func applyDefaults(schema map[string]any, obj map[string]any) {
	props, _ := schema["properties"].(map[string]any)
	for name, sub := range props {
		subSchema, ok := sub.(map[string]any)
		if !ok {
			continue
		}
		v, present := obj[name]
		if !present {
			if def, ok := subSchema["default"]; ok {
				obj[name] = deepCopyJSON(def)
			}
			continue
		}
		if nested, ok := v.(map[string]any); ok {
			applyDefaults(subSchema, nested)
		}
	}
}

// defaultSchemas declare defaults at the top, in nested objects, of null,
// of an object (copied, never shared), next to properties whose schema is
// a boolean, and none at all.
var defaultSchemas = append([]string{
	`{"type":"object","properties":{
		"limit":{"type":"integer","default":10},
		"none":{"type":"null","default":null},
		"opts":{"type":"object","default":{"a":[1,2],"b":{"c":"d"}}},
		"o":{"type":"object","properties":{
			"x":{"default":"x"},
			"deep":{"type":"object","properties":{"y":{"default":2}}}}},
		"any":true,
		"plain":{"type":"string"}}}`,
	`{"type":"object","properties":{"a":{"type":"string"}}}`,
	`{"type":"object"}`,
}, quickSchemas...)

var defaultArgs = []string{
	`{}`, `{"limit":3}`, `{"none":1}`, `{"opts":{}}`, `{"opts":[1]}`, `{"o":{}}`, `{"o":1}`,
	`{"o":{"x":"y","deep":{}}}`, `{"o":{"deep":{"y":null}}}`, `{"o":{"deep":[]}}`, `{"any":{"limit":1}}`,
	`{"q":"go"}`, `{"q":"go","limit":5}`, `{"plain":{"limit":1}}`,
}

// checkDefaults applies a schema's defaults both ways to copies of args,
// and reports any difference, or a default shared between two calls.
func checkDefaults(t *testing.T, s *Schema, args map[string]any, what string) {
	t.Helper()
	want := deepCopyJSON(args).(map[string]any)
	applyDefaults(s.doc, want)
	got := deepCopyJSON(args).(map[string]any)
	s.defaults.apply(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: defaults applied %v, the document's walk %v", what, got, want)
	}
	if opts, ok := got["opts"].(map[string]any); ok {
		opts["mutated"] = true
		again := map[string]any{}
		s.defaults.apply(again)
		if fresh, ok := again["opts"].(map[string]any); ok && fresh["mutated"] != nil {
			t.Fatalf("%s: a default object is shared between calls", what)
		}
	}
}

func TestPropertyDefaultsApplyAsTheDocument(t *testing.T) {
	for i, doc := range defaultSchemas {
		s := mustSchema(t, doc)
		for _, a := range defaultArgs {
			checkDefaults(t, s, decodeTestArgs(t, a), a)
		}
		if i == 0 && len(s.defaults) == 0 {
			t.Fatal("schema 0: no defaults read")
		}
	}
}

// FuzzPropertyDefaults: for any arguments, the defaults read once apply as
// the walk of the document does.
func FuzzPropertyDefaults(f *testing.F) {
	schemas := make([]*Schema, len(defaultSchemas))
	for i, doc := range defaultSchemas {
		schemas[i] = mustSchema(f, doc)
	}
	for _, a := range defaultArgs {
		f.Add([]byte(a))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		args, ok := fuzzArgs(doc)
		if !ok {
			return
		}
		for _, s := range schemas {
			checkDefaults(t, s, args, string(doc))
		}
	})
}
