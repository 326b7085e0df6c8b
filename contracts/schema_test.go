package contracts

import (
	"encoding/json"
	"errors"
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
		{"missing required argument", `{}`, "Argument q is required", "缺少必填参数 q"},
		{"value above maximum", `{"q":"go","limit":50}`, "Argument limit must be between 1 and 20 (got 50)", "参数 limit 必须在 1 到 20 之间（当前为 50）"},
		{"value below minimum", `{"q":"go","limit":0}`, "Argument limit must be between 1 and 20 (got 0)", "参数 limit 必须在 1 到 20 之间（当前为 0）"},
		{"wrong type", `{"q":"go","limit":"3"}`, `Argument limit must be an integer (got the string "3"; send it without quotes)`, `参数 limit 必须是整数（当前为字符串 "3"，请去掉引号）`},
		{"a value of the wrong kind", `{"q":"go","limit":true}`, `Argument limit must be an integer (got true)`, `参数 limit 必须是整数（当前为布尔值 true）`},
		{"unexpected argument", `{"q":"go","page":2}`, "Argument page is not accepted (accepted: lang, limit, opts, q)", "不接受参数 page（可用参数：lang、limit、opts、q）"},
		{"empty string", `{"q":""}`, "Argument q must have between 1 and 200 characters (got 0)", "参数 q 的长度必须在 1 到 200 个字符之间（当前为 0 个）"},
		{"enum", `{"q":"go","lang":"fr"}`, `Argument lang must be one of "en", "zh" (got "fr")`, `参数 lang 必须是以下值之一："en"、"zh"（当前为 "fr"）`},
		{"number beyond int64", `{"q":"go","limit":123456789012345678901234567890}`, "Argument limit must be between 1 and 20", "参数 limit 必须在 1 到 20 之间"},
		{"a nested argument", `{"q":"go","opts":{"fuzzy":1}}`, "Argument opts.fuzzy must be a boolean (got the number 1)", "参数 opts.fuzzy 必须是布尔值（当前为数字 1）"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Validate(decodeArgs(t, tt.args))
			list, ok := err.(*ArgErrors)
			if !ok || len(list.List) != 1 {
				t.Fatalf("error = %v (%T), want one violation", err, err)
			}
			if got := list.text("en"); got != tt.en && !strings.HasPrefix(got, tt.en) {
				t.Errorf("en = %q, want %q", got, tt.en)
			}
			if got := list.text("zh"); got != tt.zh && !strings.HasPrefix(got, tt.zh) {
				t.Errorf("zh = %q, want %q", got, tt.zh)
			}
		})
	}
}

// TestValidateListsEveryViolationInOrder: every violation is found, sorted
// by argument (array positions in numeric order), the same for the same
// arguments however Go orders their map, and in data.errors with what is
// allowed.
func TestValidateListsEveryViolationInOrder(t *testing.T) {
	s := mustSchema(t, `{"type":"object","required":["q"],"additionalProperties":false,"properties":{
		"q":{"type":"string","minLength":1},"limit":{"type":"integer","minimum":1,"maximum":20},
		"mode":{"enum":["fast","slow"]},"items":{"type":"array","minItems":1,"items":{"type":"object","properties":{"qty":{"type":"integer","exclusiveMinimum":0}}}}}}`)
	args := `{"limit":50,"lim":2,"mode":"turbo","items":[{"qty":1},{"qty":0},{"qty":1},{"qty":1},{"qty":1},{"qty":1},{"qty":1},{"qty":1},{"qty":1},{"qty":1},{"qty":-1}]}`
	wantData := `{"errors":[` +
		`{"argument":"/items/1/qty","problem":"exclusive_minimum","allowed":{"exclusive_minimum":0},"got":0},` +
		`{"argument":"/items/10/qty","problem":"exclusive_minimum","allowed":{"exclusive_minimum":0},"got":-1},` +
		`{"argument":"/lim","problem":"unexpected","accepted":["items","limit","mode","q"]},` +
		`{"argument":"/limit","problem":"maximum","allowed":{"minimum":1,"maximum":20},"got":50},` +
		`{"argument":"/mode","problem":"enum","allowed":["fast","slow"],"got":"turbo"},` +
		`{"argument":"/q","problem":"required"}]}`
	wantEN := `6 arguments are invalid: items[1].qty must be greater than 0 (got 0); items[10].qty must be greater than 0 (got -1); ` +
		`lim is not accepted (accepted: items, limit, mode, q); limit must be between 1 and 20 (got 50); mode must be one of "fast", "slow" (got "turbo"); and 1 more`
	seen := map[string]int{}
	for range 20 {
		err := s.Validate(decodeArgs(t, args))
		list, ok := err.(*ArgErrors)
		if !ok {
			t.Fatalf("error = %v (%T)", err, err)
		}
		if got := string(list.appendJSON(nil)); got != wantData {
			t.Fatalf("data =\n%s\nwant\n%s", got, wantData)
		}
		seen[list.text("en")]++
	}
	if len(seen) != 1 || seen[wantEN] != 20 {
		t.Errorf("20 identical calls gave %d messages: %v", len(seen), seen)
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

// TestSchemaErrorIsTheSameOnEveryCompile compiles a schema with two
// invalid properties, equally deep, many times: the library gathers its
// causes from maps, and the error must still name the same one each time
// (a policy's load error may not change from one reload to the next).
func TestSchemaErrorIsTheSameOnEveryCompile(t *testing.T) {
	doc := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"a": "77B", "b": json.Number("9"), "c": []any{}, "d": "x",
		},
	}
	for i := range 40 {
		_, err := CompileSchema(doc)
		var se *schemaError
		if !errors.As(err, &se) {
			t.Fatalf("compile %d: %v, want a schema error", i, err)
		}
		if got := pointer(se.Location); got != "/properties/a" || se.Msg != "invalid argument schema: got string, want boolean or object" {
			t.Fatalf("compile %d: %q at %s, want the first invalid property, /properties/a", i, se.Msg, got)
		}
	}
}
