package config

import (
	"encoding/json"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestSchemasAndConstantsReadValuesAlike decodes the same YAML as an
// argument schema value (decodeAny) and as a constant (decodeConst): one
// walker reads both, so a number, a boolean or a nested value means the
// same in either place. Only ${VAR} differs: a constant expands it, a
// schema keeps it as written.
func TestSchemasAndConstantsReadValuesAlike(t *testing.T) {
	env := func(k string) (string, bool) { return map[string]string{"HOST": "db.internal"}[k], k == "HOST" }
	tests := []struct {
		name      string
		yaml      string
		wantAny   any
		wantConst any
	}{
		{"a decimal integer is that integer", "10", json.Number("10"), json.Number("10")},
		{"a hexadecimal integer is its value", "0x1F", json.Number("31"), json.Number("31")},
		{"an octal integer is its value", "0o17", json.Number("15"), json.Number("15")},
		{"underscores in a number are separators", "1_000", json.Number("1000"), json.Number("1000")},
		{"a float keeps its shortest form", "2.50", json.Number("2.5"), json.Number("2.5")},
		{"a boolean is a boolean", "true", true, true},
		{"null is nil", "null", nil, nil},
		{"a nested value keeps its shape", "{a: [1, x, {b: false}]}",
			map[string]any{"a": []any{json.Number("1"), "x", map[string]any{"b": false}}},
			map[string]any{"a": []any{json.Number("1"), "x", map[string]any{"b": false}}}},
		{"only a constant expands ${VAR}", "{url: 'http://${HOST}/'}",
			map[string]any{"url": "http://${HOST}/"}, map[string]any{"url": "http://db.internal/"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(tt.yaml), &doc); err != nil {
				t.Fatal(err)
			}
			n := doc.Content[0]
			d := &decoder{file: "t.yaml", env: env, pos: map[string]nodePos{}, expand: true}
			gotAny, ok := d.decodeAny(n, "args")
			if !ok || len(d.errs) > 0 {
				t.Fatalf("decodeAny: %v", d.errs)
			}
			gotConst, ok := d.decodeConst(n, "body.const", 0, nil)
			if !ok || len(d.errs) > 0 {
				t.Fatalf("decodeConst: %v", d.errs)
			}
			if !reflect.DeepEqual(gotAny, tt.wantAny) {
				t.Errorf("decodeAny = %#v, want %#v", gotAny, tt.wantAny)
			}
			if !reflect.DeepEqual(gotConst, tt.wantConst) {
				t.Errorf("decodeConst = %#v, want %#v", gotConst, tt.wantConst)
			}
		})
	}
}
