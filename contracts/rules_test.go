package contracts

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
)

func TestRulesShapeDataKeepingLiteralKeyOrder(t *testing.T) {
	env, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := compileRules(env, RulesSpec{Data: `{"total": body.total, "items": body.results, "q": args.q}`, Empty: `size(body.results) == 0`})
	if err != nil {
		t.Fatal(err)
	}
	in := &RuleInput{Status: 200, Body: mustBody(t, `{"results": [{"b": 1, "a": "x"}], "total": 1}`), Args: map[string]any{"q": "go"}}
	data, _, shaped, err := r.DataMembers(nil, in)
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
	if _, _, _, err := r.DataMembers(nil, in); err == nil {
		t.Error("data over a body without results did not fail")
	}
}

func TestErrorRulesMatchInOrderAndSkipFailingExpressions(t *testing.T) {
	env, _ := NewRuleEnv(RuleOptions{})
	r, err := compileRules(env, RulesSpec{Errors: []ErrorRuleSpec{
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
			m, ok, err := r.MatchError(&tt.in)
			if err != nil || ok != tt.ok || m.Status != tt.want {
				t.Errorf("match = %v %v, want %v %v", m.Status, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestCompileRulesTypeChecks(t *testing.T) {
	env, _ := NewRuleEnv(RuleOptions{})
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
			_, err := compileRules(env, tt.spec)
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
	env, _ := NewRuleEnv(RuleOptions{})
	r, err := compileRules(env, RulesSpec{Data: `{"items": body.results, "total": body.total}`})
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
	tpls, _ := compileTemplates(nil, map[string]string{"ok": "{{.data.total}} found"})
	a, _ := tpls.renderMembers(StatusOK, nil, data, members)
	b, _ := tpls.render(StatusOK, nil, data)
	if a != "7 found" || a != b {
		t.Errorf("with members %q, without %q", a, b)
	}
}

func TestErrorRulesTellAbsentFieldsFromUnreadableAnswers(t *testing.T) {
	env, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type verdict int
	const (
		noMatch verdict = iota
		match
		unreadable
	)
	tests := []struct {
		name string
		when string
		body string // "" for no body (empty, or not JSON)
		want verdict
	}{
		{"a field the body lacks is no match", `body.code == "X"`, `{}`, noMatch},
		{"guarding with has() is the same", `has(body.code) && body.code == "X"`, `{}`, noMatch},
		{"a field of no body is no match", `body.code == "X"`, ``, noMatch},
		{"a field of a string is no match", `body.code == "X"`, `"X"`, noMatch},
		{"a field of a list is no match", `body.code == "X"`, `[1]`, noMatch},
		{"a nested field under null is no match", `body.error.code == "X"`, `{"error":null}`, noMatch},
		{"an element past the end is no match", `body.errors[0].code == "X"`, `{"errors":[]}`, noMatch},
		{"a missing argument is no match", `args.region == "eu"`, `{}`, noMatch},
		{"a missing header is no match", `headers["x-error"] == "1"`, `{}`, noMatch},
		{"an element without the field is no match", `body.items.exists(i, i.code == "X")`, `{"items":[{"a":1}]}`, noMatch},
		{"the field present matches", `body.code == "X"`, `{"code":"X"}`, match},
		{"a value of the wrong type for an operator is unreadable", `body.count > 5`, `{"count":"many"}`, unreadable},
		{"a failed conversion is unreadable", `int(body.count) > 5`, `{"count":"many"}`, unreadable},
		{"a division by zero is unreadable", `body.n / body.d == 1`, `{"n":1,"d":0}`, unreadable},
		{"a number out of range is unreadable", `body.n == 1`, `{"n":1e999}`, unreadable},
		{"a result that is not a bool is unreadable", `body.flag`, `{"flag":"yes"}`, unreadable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := compileRules(env, RulesSpec{Errors: []ErrorRuleSpec{{When: tt.when, Status: StatusForbidden}, {When: `true`, Status: StatusNotFound}}})
			if err != nil {
				t.Fatal(err)
			}
			in := &RuleInput{Status: 200, Header: http.Header{}, Args: map[string]any{}}
			if tt.body != "" {
				in.Body = mustBody(t, tt.body)
			}
			m, ok, err := r.MatchError(in)
			switch tt.want {
			case noMatch:
				// The rule did not match, so the next one did.
				if err != nil || !ok || m.Status != StatusNotFound {
					t.Errorf("match = %v %v %v, want the second rule", m.Status, ok, err)
				}
			case match:
				if err != nil || !ok || m.Status != StatusForbidden {
					t.Errorf("match = %v %v %v, want the first rule", m.Status, ok, err)
				}
			case unreadable:
				if err == nil || !errors.Is(err, errRuleEval) || ok {
					t.Errorf("match = %v %v %v, want an unreadable answer", m.Status, ok, err)
				}
			}
		})
	}
}

// TestEveryRuleRunsUnderTheCostLimit: an error rule, data and empty that
// would run for minutes stop at the cost limit with an error, never a
// verdict.
func TestEveryRuleRunsUnderTheCostLimit(t *testing.T) {
	env, err := NewRuleEnv(RuleOptions{}) // the default limit
	if err != nil {
		t.Fatal(err)
	}
	// A smaller limit, set as a policy would, keeps the test quick.
	small, err := NewRuleEnv(RuleOptions{CostLimit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	// Two thousand elements: a nested comprehension is four million steps.
	items := `{"items":[` + strings.Repeat("1,", 1999) + `2]}`
	const quadratic = `body.items.exists(x, body.items.exists(y, x != y && x + y == 0))`
	spec := RulesSpec{
		Data:   `body.items.map(x, body.items.filter(y, y == x).size())`,
		Empty:  quadratic,
		Errors: []ErrorRuleSpec{{When: quadratic, Status: StatusBadArgs}},
	}
	rules, err := compileRules(env, spec)
	if err != nil {
		t.Fatal(err)
	}
	smallRules, err := compileRules(small, spec)
	if err != nil {
		t.Fatal(err)
	}
	in := func() *RuleInput { return &RuleInput{Ctx: context.Background(), Status: 200, Body: mustBody(t, items)} }
	check := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, errRuleEval) || !strings.Contains(err.Error(), "cost limit exceeded") {
			t.Errorf("err = %v, want the cost limit", err)
		}
	}
	t.Run("an error rule under the default limit", func(t *testing.T) {
		_, ok, err := rules.MatchError(in())
		if ok {
			t.Error("matched")
		}
		check(t, err)
	})
	t.Run("an error rule under the policy's limit", func(t *testing.T) {
		_, ok, err := smallRules.MatchError(in())
		if ok {
			t.Error("matched")
		}
		check(t, err)
	})
	t.Run("data", func(t *testing.T) {
		_, _, _, err := smallRules.DataMembers(nil, in())
		check(t, err)
	})
	t.Run("empty", func(t *testing.T) {
		_, _, err := smallRules.Empty(in())
		check(t, err)
	})
	t.Run("a linear pass over the same list fits the default", func(t *testing.T) {
		r, err := compileRules(env, RulesSpec{Errors: []ErrorRuleSpec{{When: `body.items.exists(x, x == 2)`, Status: StatusBadArgs}}})
		if err != nil {
			t.Fatal(err)
		}
		if m, ok, err := r.MatchError(in()); err != nil || !ok || m.Status != StatusBadArgs {
			t.Errorf("match = %v %v %v", m.Status, ok, err)
		}
	})
}

// TestRulesStopAtTheDeadline: a comprehension past the call's deadline
// ends in an error, even where another error of the same rule would read
// as an absent field.
func TestRulesStopAtTheDeadline(t *testing.T) {
	env, err := NewRuleEnv(RuleOptions{CostLimit: math.MaxUint64})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := `{"items":[` + strings.Repeat("1,", 999) + `2]}`
	for _, when := range []string{
		`body.items.exists(x, x == 3)`,
		`body.missing == 1 || body.items.exists(x, x == 3)`,
	} {
		t.Run(when, func(t *testing.T) {
			r, err := compileRules(env, RulesSpec{Errors: []ErrorRuleSpec{{When: when, Status: StatusBadArgs}}})
			if err != nil {
				t.Fatal(err)
			}
			_, ok, err := r.MatchError(&RuleInput{Ctx: ctx, Status: 200, Body: mustBody(t, body)})
			if ok || !errors.Is(err, errRuleEval) || !strings.Contains(err.Error(), "interrupted") {
				t.Errorf("match = %v, %v; want an interrupted evaluation", ok, err)
			}
		})
	}
}

// TestContractKeepsItsErrorRulesAsWritten: ErrorRules lists the rules in
// the policy's order and words, for the console.
func TestContractKeepsItsErrorRulesAsWritten(t *testing.T) {
	env, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := SideEffectNone
	rules := []ErrorRuleSpec{
		{When: `status == 200 && body.code == "E_NOPERM"`, Status: StatusForbidden},
		{When: `status == 409`, Status: StatusBadArgs, SideEffect: &done},
	}
	c, err := Compile(env, ContractSpec{Name: "t", Upstream: "u", Args: map[string]any{"type": "object"}, Request: BindingSpec{Method: "GET", Path: "/t"}, Response: RulesSpec{Errors: rules}})
	if err != nil {
		t.Fatal(err)
	}
	got := c.ErrorRules()
	if len(got) != 2 || got[0].When != rules[0].When || got[1].Status != StatusBadArgs || *got[1].SideEffect != SideEffectNone {
		t.Errorf("error rules %+v, want %+v", got, rules)
	}
}
