package contracts

import "testing"

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
