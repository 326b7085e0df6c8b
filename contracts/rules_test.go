package contracts

import (
	"net/http"
	"strings"
	"testing"
)

func TestRulesShapeDataKeepingLiteralKeyOrder(t *testing.T) {
	env, err := NewRuleEnv()
	if err != nil {
		t.Fatal(err)
	}
	r, err := CompileRules(env, RulesSpec{Data: `{"total": body.total, "items": body.results, "q": args.q}`, Empty: `size(body.results) == 0`})
	if err != nil {
		t.Fatal(err)
	}
	in := &RuleInput{Status: 200, Body: mustBody(t, `{"results": [{"b": 1, "a": "x"}], "total": 1}`), Args: map[string]any{"q": "go"}}
	data, shaped, err := r.Data(nil, in)
	if err != nil || !shaped {
		t.Fatal(err, shaped)
	}
	// The backend's own key order ("b" before "a") survives.
	if want := `{"total":1,"items":[{"b":1,"a":"x"}],"q":"go"}`; string(data) != want {
		t.Errorf("data = %s, want %s", data, want)
	}
	empty, ok, err := r.Empty(in)
	if err != nil || !ok || empty {
		t.Errorf("empty = %v %v %v", empty, ok, err)
	}
	in.Body = mustBody(t, `{"total": 0}`)
	if _, _, err := r.Data(nil, in); err == nil {
		t.Error("data over a body without results did not fail")
	}
}

func TestErrorRulesMatchInOrderAndSkipFailingExpressions(t *testing.T) {
	env, _ := NewRuleEnv()
	r, err := CompileRules(env, RulesSpec{Errors: []ErrorRuleSpec{
		{When: `body.code == "E_NOPERM"`, Status: StatusForbidden},
		{When: `status == 200 && headers["x-legacy-error"] == "throttle"`, Status: StatusUpstream},
		{When: `status == 404`, Status: StatusEmpty},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   RuleInput
		want Status
		ok   bool
	}{
		{"error code in a 200 body", RuleInput{Status: 200, Body: mustBody(t, `{"code":"E_NOPERM"}`)}, StatusForbidden, true},
		{"body without the field does not match", RuleInput{Status: 200, Body: mustBody(t, `{}`)}, "", false},
		{"header rule", RuleInput{Status: 200, Header: http.Header{"X-Legacy-Error": {"throttle"}}}, StatusUpstream, true},
		{"status rule", RuleInput{Status: 404}, StatusEmpty, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := r.MatchError(&tt.in)
			if ok != tt.ok || m.Status != tt.want {
				t.Errorf("match = %v %v, want %v %v", m.Status, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestCompileRulesTypeChecks(t *testing.T) {
	env, _ := NewRuleEnv()
	tests := []struct {
		name string
		spec RulesSpec
		want string
	}{
		{"syntax error", RulesSpec{Data: `body.results +`}, "data: Syntax error"},
		{"empty must be bool", RulesSpec{Empty: `size(body)`}, "empty: must evaluate to bool, not int"},
		{"when must be bool", RulesSpec{Errors: []ErrorRuleSpec{{When: `status + 1`, Status: StatusUpstream}}}, "errors[0].when: must evaluate to bool"},
		{"status compared with string", RulesSpec{Errors: []ErrorRuleSpec{{When: `status == "x"`, Status: StatusUpstream}}}, "no matching overload"},
		{"unknown variable", RulesSpec{Data: `response.body`}, "undeclared reference to 'response'"},
		{"unknown status", RulesSpec{Errors: []ErrorRuleSpec{{When: `true`, Status: "broken"}}}, `errors[0].status: "broken" is not a status`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CompileRules(env, tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func mustBody(t testing.TB, s string) *Body {
	t.Helper()
	b, err := ParseBody([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDataMembersLocateTopLevelValues(t *testing.T) {
	env, _ := NewRuleEnv()
	r, err := CompileRules(env, RulesSpec{Data: `{"items": body.results, "total": body.total}`})
	if err != nil {
		t.Fatal(err)
	}
	in := &RuleInput{Status: 200, Body: mustBody(t, `{"results": [{"b": "}"}], "total": 7}`)}
	data, members, shaped, err := r.DataMembers(nil, in)
	if err != nil || !shaped || len(members) != 2 {
		t.Fatalf("%s %v %v %v", data, members, shaped, err)
	}
	for _, m := range members {
		got := string(data[m.Start:m.End])
		want := map[string]string{"items": `[{"b":"}"}]`, "total": "7"}[m.Key]
		if got != want {
			t.Errorf("member %s = %s, want %s", m.Key, got, want)
		}
	}
	tpls, _ := CompileTemplates(map[string]string{"ok": "{{.data.total}} found"})
	a, _ := tpls.RenderMembers(StatusOK, nil, data, members)
	b, _ := tpls.Render(StatusOK, nil, data)
	if a != "7 found" || a != b {
		t.Errorf("with members %q, without %q", a, b)
	}
}
