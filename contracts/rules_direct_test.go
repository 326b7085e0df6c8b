package contracts

import (
	"bytes"
	"testing"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/traits"
)

// directBoolRules are rule expressions compared between the direct
// evaluator and CEL; the ones marked direct must take the direct path.
var directBoolRules = []struct {
	expr   string
	direct bool
}{
	{`status == 200 && has(body.code) && body.code == "E_NOPERM"`, true},
	{`size(body.results) == 0`, true},
	{`body.results.size() > 2`, true},
	{`has(body.a) || body.b == 1`, true},
	{`!has(body.a.b)`, true},
	{`body.n < 5 && body.n >= -3`, true},
	{`body.s != "x"`, true},
	{`body.a.b.c == "deep"`, true},
	{`status != 404 || size(body) == 0`, true},
	{`body.n <= 7 || body.n > 100`, true},
	{`size(body.s) == 2`, true}, // a string's size is CEL's to count
	{`body.flag == true`, true}, // booleans are CEL's to compare
	{`body.s < "m"`, true},      // so is string order
	{`body == null`, false},
	{`body.results.exists(r, r == 1)`, false},
	{`headers["x"] == "y"`, false},
	{`args.q == "go"`, false},
	{`double(status) > 1.5`, false},
}

var directDataRules = []string{
	`{"items": body.results, "total": body.total}`,
	`{"a": body.a, "n": 1, "s": "lit", "st": status, "b": true, "deep": body.a.b, "str": body.s}`,
}

func compileTestRule(t testing.TB, env *RuleEnv, expr string) (*program, []directEntry) {
	t.Helper()
	p, ast, err := env.compile("test", expr, nil)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return p, compileDirectMap(ast)
}

func TestDirectRulesTakeTheCommonShapes(t *testing.T) {
	env, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range directBoolRules {
		if p, _ := compileTestRule(t, env, r.expr); (p.direct != nil) != r.direct {
			t.Errorf("%s: direct=%v, want %v", r.expr, p.direct != nil, r.direct)
		}
	}
	for _, expr := range directDataRules {
		if _, entries := compileTestRule(t, env, expr); entries == nil {
			t.Errorf("%s: no direct map", expr)
		}
	}
	for _, expr := range []string{`{"a": body.a, "a": body.b}`, `{"a": body.a.filter(x, x > 1)}`, `body.results`, `{1: body.a}`} {
		if _, entries := compileTestRule(t, env, expr); entries != nil {
			t.Errorf("%s: took the direct map", expr)
		}
	}
	// The example policy's search rules all run directly on its answer.
	in := &RuleInput{Status: 200, Body: mustBody(t, `{"results":[{"id":1}],"total":1}`)}
	p, entries := compileTestRule(t, env, `{"items": body.results, "total": body.total}`)
	if _, _, ok := appendDirectMap(nil, entries, in.activation()); !ok || p == nil {
		t.Error("the search data did not run directly")
	}
	for _, expr := range directBoolRules[:2] {
		p, _ := compileTestRule(t, env, expr.expr)
		if _, ok := p.direct(in.activation()); !ok {
			t.Errorf("%s did not run directly", expr.expr)
		}
	}
}

// FuzzDirectRules: whatever the direct evaluator answers, CEL answers the
// same, for every rule above and any answer.
func FuzzDirectRules(f *testing.F) {
	env, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		f.Fatal(err)
	}
	type boolRule struct {
		expr string
		p    *program
	}
	var bools []boolRule
	for _, r := range directBoolRules {
		p, _ := compileTestRule(f, env, r.expr)
		bools = append(bools, boolRule{r.expr, p})
	}
	type dataRule struct {
		expr    string
		p       *program
		entries []directEntry
	}
	var datas []dataRule
	for _, expr := range directDataRules {
		p, entries := compileTestRule(f, env, expr)
		datas = append(datas, dataRule{expr, p, entries})
	}
	for _, seed := range []string{
		`{"code":"E_NOPERM","results":[]}`, `{"results":[1,2,3],"total":3}`, `{"a":{"b":{"c":"deep"}},"b":1,"n":4}`,
		`{"a":1,"n":5.0,"s":"x","flag":true}`, `{"n":"4","s":"\u00e9","results":{"k":1}}`, `[1,2]`, `"s"`, `null`,
		`{"n":99999999999999999999,"s":"ab","code":null}`, `{"a":{"b":[1,{"x":"\ud800"}]},"total":-0,"s":"m"}`,
		`{"code":"E_NOPERM","code":"other"}`, `{"n":5,"b":1}`, `{"n":-3,"s":"m"}`, `{"n":7,"results":[1,2]}`,
		`{"n":101,"a":{}}`, `{"n":-4,"a":{"b":{}}}`,
	} {
		f.Add([]byte(seed), int16(200))
	}
	f.Add([]byte(`{}`), int16(404))
	f.Fuzz(func(t *testing.T, body []byte, status int16) {
		b, err := ParseBody(body)
		if err != nil {
			return
		}
		defer b.Release()
		for _, r := range bools {
			if r.p.direct == nil {
				continue
			}
			in := &RuleInput{Status: int(status), Body: b}
			got, ok := r.p.direct(in.activation())
			if !ok || got.kind != dBool {
				continue
			}
			in = &RuleInput{Status: int(status), Body: b}
			want, _, _ := r.p.prg.Eval(in.activation())
			if wb, isBool := want.(types.Bool); !isBool || bool(wb) != got.b {
				t.Fatalf("%s on %s (status %d): direct %v, CEL %v", r.expr, body, status, got.b, want)
			}
		}
		for _, r := range datas {
			in := &RuleInput{Status: int(status), Body: b}
			got, members, ok := appendDirectMap([]byte("x"), r.entries, in.activation())
			if !ok {
				continue
			}
			in = &RuleInput{Status: int(status), Body: b}
			out, _, err := r.p.prg.Eval(in.activation())
			m, isMap := out.(traits.Mapper)
			if err != nil || !isMap {
				t.Fatalf("%s on %s: direct %s, CEL %v %v", r.expr, body, got, out, err)
			}
			var wantMembers []Member
			want, err := appendOrderedMap([]byte("x"), m, entryKeys(r.entries), &wantMembers, 0)
			if err != nil || !bytes.Equal(got, want) || len(members) != len(wantMembers) {
				t.Fatalf("%s on %s:\n direct %s %v\n CEL    %s %v (%v)", r.expr, body, got, members, want, wantMembers, err)
			}
			for i := range members {
				if members[i] != wantMembers[i] {
					t.Fatalf("%s on %s: members %v, CEL %v", r.expr, body, members, wantMembers)
				}
			}
		}
	})
}

func entryKeys(entries []directEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.key
	}
	return out
}
