package contracts

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func newRuleEnv(t *testing.T) *RuleEnv {
	t.Helper()
	env, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestOneLineDetail(t *testing.T) {
	long := strings.Repeat("é", 300)
	tests := []struct {
		name, in, want string
	}{
		{"a plain detail is kept", "invalid To address", "invalid To address"},
		{"line breaks, tabs and control characters become one space", " a\r\n\tb\x00\x07c  d \n", "a b c d"},
		{"invalid UTF-8 is replaced", "caf\xe9", "caf\ufffd"},
		{"blank says nothing", " \r\n\t", ""},
		{"exactly the bound is kept whole", long[:2*MaxErrorDetailChars], long[:2*MaxErrorDetailChars]},
		{"longer is cut and marked", long, long[:2*(MaxErrorDetailChars-1)] + "…"},
		{"a cut drops the space before the mark", strings.Repeat("x", MaxErrorDetailChars-2) + " y" + "zzz", strings.Repeat("x", MaxErrorDetailChars-2) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := OneLineDetail(tt.in)
			if got != tt.want {
				t.Errorf("OneLineDetail(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if n := utf8.RuneCountInString(got); n > MaxErrorDetailChars || !utf8.ValidString(got) {
				t.Errorf("%d code points, valid %v", n, utf8.ValidString(got))
			}
		})
	}
}

func TestErrorDetailAndTextInRules(t *testing.T) {
	env := newRuleEnv(t)
	r, err := compileRules(env, RulesSpec{ErrorDetail: `has(body.message) ? body.message : text`})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ body, want string }{
		{`{"message":"invalid\nTo address"}`, "invalid To address"},
		{"ERR: bad\r\nnumber", "ERR: bad number"},
	} {
		in := RuleInput{Status: 400, Text: []byte(tt.body)}
		if b, err := ParseBody([]byte(tt.body)); err == nil {
			in.Body = b
			defer b.Release()
		}
		if got, err := r.ErrorDetail(&in); err != nil || got != tt.want {
			t.Errorf("detail of %q = %q, %v; want %q", tt.body, got, err, tt.want)
		}
	}
	r, err = compileRules(env, RulesSpec{ErrorDetail: `body.message`})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.ErrorDetail(&RuleInput{Status: 400, Text: []byte("<html>")})
	if ee, ok := err.(*EvalError); !ok || ee.Expr != "response.error_detail" {
		t.Errorf("error = %v, want an EvalError of response.error_detail", err)
	}
	for spec, want := range map[string]string{
		`status`:     "error_detail: must evaluate to string, not int",
		`text + 1`:   "error_detail: found no matching overload",
		`text.size(`: "error_detail: Syntax error",
	} {
		_, err := compileRules(env, RulesSpec{ErrorDetail: spec})
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", spec, err, want)
		}
	}
}

func TestResponseSchema(t *testing.T) {
	env := newRuleEnv(t)
	schema := map[string]any{
		"type":     "object",
		"required": []any{"items"},
		"properties": map[string]any{
			"items": map[string]any{"type": "array", "items": map[string]any{
				"type": "object", "properties": map[string]any{"id": map[string]any{"type": "integer"}},
			}},
		},
	}
	r, err := compileRules(env, RulesSpec{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]*SchemaViolation{
		`{"items":[{"id":1},{"id":2}]}`:   nil,
		`{"items":[{"id":1},{"id":"x"}]}`: {Location: "/items/1/id", Keyword: "type"},
		`{"total":1}`:                     {Location: "", Keyword: "required"},
		`[1]`:                             {Location: "", Keyword: "type"},
	} {
		b, err := ParseBody([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		got := r.CheckSchema(b)
		b.Release()
		if (got == nil) != (want == nil) || got != nil && *got != *want {
			t.Errorf("%s: violation %+v, want %+v", body, got, want)
		}
	}
	for doc, want := range map[string]any{
		"schema: must be a mapping (a JSON Schema of the answer)":                            true,
		"schema.properties.id.type: invalid response schema: value must be one of":           map[string]any{"properties": map[string]any{"id": map[string]any{"type": "int"}}},
		"schema: invalid response schema: $ref \"https://example.com/s\" cannot be resolved": map[string]any{"$ref": "https://example.com/s"},
	} {
		_, err := compileRules(env, RulesSpec{Schema: want})
		if err == nil {
			t.Errorf("%s: compiled", doc)
			continue
		}
		if re := err.(*ruleError); !strings.HasPrefix(re.Field+": "+re.Msg, doc) {
			t.Errorf("error %q, want %q", re.Field+": "+re.Msg, doc)
		}
	}
}

func TestTemplatesReadDetailAndText(t *testing.T) {
	tpls, err := compileTemplates(nil, map[string]string{
		"bad_args": "Refused: {{.detail}}",
		"upstream": `{{if eq .text "down"}}Gateway down{{else}}{{.detail}}{{end}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !tpls.ReadText() || tpls["bad_args"].readsText {
		t.Errorf("ReadText %v, bad_args reads text %v", tpls.ReadText(), tpls["bad_args"].readsText)
	}
	if got, _ := tpls["bad_args"].render(nil, nil, nil, answerWords{detail: "invalid To address"}); got != "Refused: invalid To address" {
		t.Errorf("bad_args = %q", got)
	}
	if got, _ := tpls["upstream"].render(nil, nil, nil, answerWords{text: "down"}); got != "Gateway down" {
		t.Errorf("upstream = %q", got)
	}
}

func TestComposedMessageQuotesTheDetail(t *testing.T) {
	for lang, want := range map[string]string{
		"en": `The service rejected the arguments (HTTP 400). The backend said: "invalid To address"; change the arguments before calling again.`,
		"zh": "服务拒绝了这些参数（HTTP 400）。后端返回：「invalid To address」；请修改参数后再调用。",
	} {
		c, err := NewCatalog(lang)
		if err != nil {
			t.Fatal(err)
		}
		o := ClassifyHTTP(400, true, false, 0)
		o.ErrorDetail = "invalid To address"
		if got := c.message("send", true, &o); got != want {
			t.Errorf("%s: %q, want %q", lang, got, want)
		}
	}
}
