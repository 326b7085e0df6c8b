package console

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/toolgate/toolgate/contracts"
)

// formContract is a tool with one argument of each kind the form makes.
func formContract(t testing.TB) *contracts.Contract {
	t.Helper()
	env, err := contracts.NewRuleEnv(contracts.RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ct, err := contracts.Compile(env, contracts.ContractSpec{Name: "t", Upstream: "u", Request: contracts.BindingSpec{Method: "GET", Path: "/t"},
		Args: map[string]any{"type": "object", "required": []any{"s"}, "properties": map[string]any{
			"s": map[string]any{"type": "string"}, "i": map[string]any{"type": "integer"}, "n": map[string]any{"type": "number"},
			"b": map[string]any{"type": "boolean"}, "e": map[string]any{"enum": []any{"x", 1}}, "o": map[string]any{"type": "object"},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

// TestFormMakesTheArguments: each kind of field becomes its JSON value,
// an empty field is left out, and what cannot be a value is refused.
func TestFormMakesTheArguments(t *testing.T) {
	ct := formContract(t)
	for _, c := range []struct {
		name   string
		values url.Values
		want   string
		bad    bool
	}{
		{"every kind", url.Values{"arg.s": {`a "b"`}, "arg.i": {"3"}, "arg.n": {"-1.5e3"}, "arg.b": {"false"}, "arg.e": {`"x"`}, "arg.o": {`{"k":[1]}`}},
			`{"s":"a \"b\"","b":false,"e":"x","i":3,"n":-1.5e3,"o":{"k":[1]}}`, false},
		{"empty fields are absent", url.Values{"arg.s": {""}, "arg.i": {" "}}, `{}`, false},
		{"raw JSON wins", url.Values{"arg.s": {"x"}, "args_json": {` [1] `}}, `[1]`, false},
		{"not a number", url.Values{"arg.i": {"NaN"}}, "", true},
		{"not a boolean", url.Values{"arg.b": {"yes"}}, "", true},
		{"not JSON", url.Values{"arg.o": {"{"}}, "", true},
		{"raw JSON that is not", url.Values{"args_json": {"{"}}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := readForm(ct, c.values)
			got, err := f.args()
			if (err != nil) != c.bad || string(got) != c.want {
				t.Errorf("args() = %s, %v; want %s (error: %v)", got, err, c.want, c.bad)
			}
		})
	}
}

// FuzzFormArgs: whatever the fields hold, the form either refuses them
// or makes one JSON object of them.
func FuzzFormArgs(f *testing.F) {
	ct := formContract(f)
	f.Add("go", "3", "1.5", "true", `"x"`, `{"a":1}`)
	f.Add("\x00\"\\", "1e999", "-0", "false", "1", "[")
	f.Fuzz(func(t *testing.T, s, i, n, b, e, o string) {
		form := readForm(ct, url.Values{"arg.s": {s}, "arg.i": {i}, "arg.n": {n}, "arg.b": {b}, "arg.e": {e}, "arg.o": {o}})
		args, err := form.args()
		if err != nil {
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(args, &obj); err != nil {
			t.Fatalf("the arguments %q are not a JSON object: %v", args, err)
		}
	})
}
