package contracts

import (
	"encoding/json"
	"strings"
	"testing"
)

func decodeArgs(t *testing.T, doc string) map[string]any {
	t.Helper()
	var v map[string]any
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

const searchSchema = `{"type":"object","required":["q"],"additionalProperties":false,
 "properties":{"q":{"type":"string","minLength":1,"maxLength":200},
 "limit":{"type":"integer","minimum":1,"maximum":20,"default":10},
 "lang":{"enum":["en","zh"]},
 "opts":{"type":"object","properties":{"fuzzy":{"type":"boolean","default":false}}}}}`

func TestValidateNamesTheArgumentAndWhatWasExpected(t *testing.T) {
	s := mustSchema(t, searchSchema)
	tests := []struct {
		name, args, en, zh string
	}{
		{"missing required argument", `{}`, "argument /q is required but missing", "参数 /q 是必填项，但缺失"},
		{"value above maximum", `{"q":"go","limit":50}`, "argument /limit must be at most 20 (got 50)", "参数 /limit 必须不大于 20（当前为 50）"},
		{"value below minimum", `{"q":"go","limit":0}`, "argument /limit must be at least 1 (got 0)", "必须不小于 1"},
		{"wrong type", `{"q":"go","limit":"3"}`, "argument /limit must be an integer (got a string)", "必须是 an integer"},
		{"unexpected argument", `{"q":"go","page":2}`, "argument /page is not an accepted argument", "不是可接受的参数"},
		{"empty string", `{"q":""}`, "argument /q must have at least 1 characters (got 0)", "长度必须至少为 1"},
		{"enum", `{"q":"go","lang":"fr"}`, `argument /lang must be one of "en", "zh" (got "fr")`, "必须是"},
		{"number beyond int64", `{"q":"go","limit":123456789012345678901234567890}`, "argument /limit must be at most 20", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Validate(decodeArgs(t, tt.args))
			ae, ok := err.(*ArgError)
			if !ok {
				t.Fatalf("error = %v (%T), want *ArgError", err, err)
			}
			if got := ae.Text("en"); !strings.Contains(got, tt.en) {
				t.Errorf("en = %q, want it to contain %q", got, tt.en)
			}
			if got := ae.Text("zh"); !strings.Contains(got, tt.zh) {
				t.Errorf("zh = %q, want it to contain %q", got, tt.zh)
			}
		})
	}
}

func TestValidateAppliesDefaults(t *testing.T) {
	s := mustSchema(t, searchSchema)
	args := decodeArgs(t, `{"q":"go","opts":{}}`)
	if err := s.Validate(args); err != nil {
		t.Fatal(err)
	}
	if args["limit"] != json.Number("10") {
		t.Errorf("limit = %#v, want the default 10", args["limit"])
	}
	if opts := args["opts"].(map[string]any); opts["fuzzy"] != false {
		t.Errorf("nested default not applied: %#v", opts)
	}
	args = decodeArgs(t, `{"q":"go","limit":3}`)
	if err := s.Validate(args); err != nil || args["limit"] != json.Number("3") {
		t.Errorf("given value replaced: %v %#v", err, args["limit"])
	}
}

func TestCompileSchemaRefusesRemoteRefsAndNonObjects(t *testing.T) {
	for name, doc := range map[string]any{
		"remote ref":  map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"$ref": "https://example.com/s.json"}}},
		"file ref":    map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"$ref": "file:///etc/passwd"}}},
		"not object":  map[string]any{"type": "string"},
		"not mapping": []any{},
		"bad keyword": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "strin"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := CompileSchema(doc); err == nil {
				t.Fatal("compiled")
			}
		})
	}
	local := map[string]any{"type": "object", "$defs": map[string]any{"id": map[string]any{"type": "string"}},
		"properties": map[string]any{"a": map[string]any{"$ref": "#/$defs/id"}}}
	if _, err := CompileSchema(local); err != nil {
		t.Fatalf("local $ref refused: %v", err)
	}
}
