package contracts

import (
	"encoding/json"
	"testing"
)

// TestRuleEnvSharesWhatToolsSpellAlike: rules and message templates that
// several tools spell alike are compiled once per environment, which is
// what keeps a policy of many similar tools small; a different type asked
// of the same expression, or another environment, compiles anew, and a
// failing expression is reported for each tool.
func TestRuleEnvSharesWhatToolsSpellAlike(t *testing.T) {
	env, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := RulesSpec{Data: `{"items": body.results}`, Empty: `size(body.results) == 0`,
		Errors: []ErrorRuleSpec{{When: `status == 404`, Status: StatusNotFound}}}
	a, err := compileRules(env, spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compileRules(env, spec)
	if err != nil {
		t.Fatal(err)
	}
	if a.data != b.data || a.empty != b.empty || a.errors[0].prg.prg != b.errors[0].prg.prg {
		t.Error("two tools' identical rules were compiled twice")
	}
	if p, _, _ := env.compile("x", `size(body.results) == 0`, nil); p == a.empty {
		t.Error("an expression asked for another type shares the program checked for bool")
	}
	other, _ := NewRuleEnv(RuleOptions{})
	if c, _ := compileRules(other, spec); c.empty == a.empty {
		t.Error("two environments share a program")
	}
	for range 2 {
		if _, err := compileRules(env, RulesSpec{Empty: `size(body.results`}); err == nil {
			t.Error("a broken expression compiled")
		}
	}

	msgs := map[string]string{"ok": "Found {{.data.total}}.", "empty": "Nothing for {{.args.q}}."}
	ta, err := compileTemplates(env, msgs)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := compileTemplates(env, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if ta["ok"] != tb["ok"] || ta["empty"] != tb["empty"] {
		t.Error("two tools' identical templates were compiled twice")
	}
	// The name is the template's status: the same text under another
	// status is another template.
	tc, _ := compileTemplates(env, map[string]string{"upstream": "Found {{.data.total}}."})
	if tc["upstream"] == ta["ok"] {
		t.Error("templates of two statuses shared")
	}
}

// TestRuleEnvSharesArgumentSchemasWrittenAlike: tools whose argument
// schemas have the same JSON hold one compiled schema; a schema that
// differs in anything (a number, a string where a number was) gets its
// own, and one that does not compile fails for every tool that has it.
func TestRuleEnvSharesArgumentSchemasWrittenAlike(t *testing.T) {
	env, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Decoded anew for each tool, as the policy decoder does.
	args := func(max any) map[string]any {
		return map[string]any{"type": "object", "required": []any{"q"}, "properties": map[string]any{
			"q":     map[string]any{"type": "string", "minLength": json.Number("1")},
			"limit": map[string]any{"type": "integer", "maximum": max, "default": json.Number("10")},
		}}
	}
	first, err := env.schema(args(json.Number("20")))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		doc     map[string]any
		share   bool
		wantErr bool
	}{
		{"the same schema", args(json.Number("20")), true, false},
		{"another bound", args(json.Number("30")), false, false},
		{"a string where the bound was a number", args("20"), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := env.schema(tt.doc)
			if tt.wantErr {
				if err == nil {
					t.Fatal("compiled")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if shared := s == first; shared != tt.share {
				t.Errorf("shared = %v, want %v", shared, tt.share)
			}
		})
	}
	for range 2 {
		if _, err := env.schema(map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "strng"}}}); err == nil {
			t.Error("a broken schema compiled")
		}
	}
	if _, err := env.schema([]any{"type"}); err == nil || err.Error() != "the argument schema must be a mapping" {
		t.Errorf("a list as the schema: %v", err)
	}
}
