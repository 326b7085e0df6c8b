package contracts

import (
	"encoding/json"
	"errors"
	"maps"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRuleFunctionsWorkInEveryExpression: the extension libraries' string,
// list, math and base64 functions are there in response.data, empty,
// error_detail, errors rules and request shapes alike.
func TestRuleFunctionsWorkInEveryExpression(t *testing.T) {
	env := mustEnv(t, 0)
	body := mustBody(t, `{"items":[{"title":"  Hello  "},{"title":"World"}],"error":{"message":"bad\tthing"},"tags":["b","a","b"]}`)
	args := map[string]any{"q": `say "hi" \ o/`, "n": json.Number("3")}
	tests := []struct {
		name string
		expr string
		want string
	}{
		{"replace escapes quotes", `args.q.replace('"', '\\"')`, `"say \\\"hi\\\" \\ o/"`},
		{"split and join", `"a,b,,c".split(",").filter(s, s != "").join("|")`, `"a|b|c"`},
		{"trim, lowerAscii and upperAscii", `body.items.map(i, i.title.trim().lowerAscii())`, `["hello","world"]`},
		{"strings.quote", `strings.quote(args.q)`, `"\"say \\\"hi\\\" \\\\ o/\""`},
		{"indexOf, substring and charAt", `[args.q.indexOf("hi"), args.q.substring(0, 3), args.q.charAt(4)]`, `[5,"say","\""]`},
		{"format", `"%s of %d".format([args.q.split(" ")[0], args.n])`, `"say of 3"`},
		{"distinct and sort over the answer", `body.tags.distinct().sort()`, `["a","b"]`},
		{"slice, reverse, flatten and lists.range", `[[1, 2], [3]].flatten().reverse().slice(0, 2) + lists.range(2)`, `[3,2,0,1]`},
		{"math", `[math.greatest(1, 5, 3), math.least([4, 2]), math.round(2.5), math.abs(-2)]`, `[5,2,3,2]`},
		{"base64", `[base64.encode(b"hi"), string(base64.decode("aGk="))]`, `["aGk=","hi"]`},
		{"hasAll", `body.tags.hasAll(["a"])`, `true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := compileRules(env, RulesSpec{Data: tt.expr})
			if err != nil {
				t.Fatal(err)
			}
			got, _, _, err := r.DataMembers(nil, &RuleInput{Status: 200, Body: body, Args: args})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("data = %s, want %s", got, tt.want)
			}
		})
	}
	t.Run("empty, error_detail and errors rules", func(t *testing.T) {
		r, err := compileRules(env, RulesSpec{
			Empty:       `body.items.map(i, i.title.trim()).join("") == ""`,
			ErrorDetail: `body.error.message.replace("\t", " ").upperAscii()`,
			Errors:      []ErrorRuleSpec{{When: `body.error.message.lowerAscii().startsWith("bad")`, Status: StatusBadArgs}},
		})
		if err != nil {
			t.Fatal(err)
		}
		in := &RuleInput{Status: 200, Body: body, Args: args}
		if empty, _, err := r.Empty(in); err != nil || empty {
			t.Errorf("empty = %v, %v", empty, err)
		}
		if d, err := r.ErrorDetail(in); err != nil || d != "BAD THING" {
			t.Errorf("detail = %q, %v", d, err)
		}
		if m, ok, err := r.MatchError(in); err != nil || !ok || m.Status != StatusBadArgs {
			t.Errorf("match = %v %v %v", m, ok, err)
		}
	})
	t.Run("a request shape", func(t *testing.T) {
		b := mustBinding(t, env, BindingSpec{Query: obj("filter", expr(`'title ~ "' + args.q.replace('"', '\\"') + '"'`))})
		got, err := b.Bind(args)
		if err != nil {
			t.Fatal(err)
		}
		// As docs/policy.md shows it.
		if want := `filter=title+~+%22say+%5C%22hi%5C%22+%5C+o%2F%22`; got.Query != want {
			t.Errorf("query = %s, want %s", got.Query, want)
		}
		v, _ := url.ParseQuery(got.Query)
		if want := `title ~ "say \"hi\" \ o/"`; v.Get("filter") != want {
			t.Errorf("filter = %s, want %s", v.Get("filter"), want)
		}
	})
}

// TestRuleFunctionsStayUnderTheCostLimit: a function whose work grows
// faster than its arguments (a replace of every position, a join or format
// of a list that repeats one long argument, the pairwise comparisons of
// distinct and the set tests, a flatten of repeated lists) fails on the
// cost limit before it builds its result: a hostile argument cannot make a
// rule allocate past the limit, let alone run long.
func TestRuleFunctionsStayUnderTheCostLimit(t *testing.T) {
	env := mustEnv(t, 0) // the default limit, a million
	long := strings.Repeat("x", 30_000)
	var items []string
	for i := range 20_000 {
		items = append(items, strconv.Itoa(i))
	}
	many := `{"items":[` + strings.Join(items, ",") + `]}`
	tests := []struct {
		name, expr string
		body       string
	}{
		{"a replace at every position", `args.q.replace("", args.q)`, `{}`},
		{"a replace of every character", `args.q.replace("x", args.q)`, `{}`},
		{"a join of a list repeating an argument", `lists.range(100).map(i, args.q).join()`, `{}`},
		{"a join whose separator is an argument", `args.q.split("").join(args.q)`, `{}`},
		{"a format of a list repeating an argument", `"%s".format([lists.range(100).map(i, args.q)])`, `{}`},
		{"distinct over a long answer", `body.items.distinct()`, many},
		{"a set test over a long answer", `body.items.hasAll(body.items)`, many},
		{"a flatten of repeated lists", `lists.range(200).map(i, body.items).flatten()`, many},
		{"lists.range past the limit", `lists.range(2000000)`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := compileRules(env, RulesSpec{Data: tt.expr})
			if err != nil {
				t.Fatal(err)
			}
			in := &RuleInput{Status: 200, Body: mustBody(t, tt.body), Args: map[string]any{"q": long}}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, _, _, err = r.DataMembers(nil, in)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, errRuleEval) || !strings.Contains(err.Error(), "limit exceeded") && !strings.Contains(err.Error(), "exceeds maximum allowed") {
				t.Errorf("err = %v, want the cost limit", err)
			}
			// The default limit is a million units; the result the
			// expression asks for is 30 MB and more.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("allocated %d MB before failing", grew>>20)
			}
			// Pairwise comparisons of 20 000 elements take seconds; the
			// guard refuses them at once (the bound is generous for a
			// loaded machine and the race detector).
			if took > 2*time.Second {
				t.Errorf("took %v before failing", took)
			}
		})
	}
	t.Run("the same functions within the limit", func(t *testing.T) {
		r, err := compileRules(env, RulesSpec{Data: `[args.q.replace("x", "yy").size(), lists.range(10).map(i, args.q).join(",").size()]`})
		if err != nil {
			t.Fatal(err)
		}
		got, _, _, err := r.DataMembers(nil, &RuleInput{Status: 200, Args: map[string]any{"q": long}})
		if err != nil || string(got) != `[60000,300009]` {
			t.Errorf("data = %s, %v", got, err)
		}
	})
}

// TestDataMapLiteralsKeepTheirKeyOrder: every map literal of response.data
// comes out in the order written, at any depth, also inside map().
func TestDataMapLiteralsKeepTheirKeyOrder(t *testing.T) {
	env := mustEnv(t, 0)
	body := mustBody(t, `{"items":[{"id":1,"title":"a","zeta":true},{"id":2,"title":"b","zeta":false}]}`)
	tests := []struct {
		name, expr, want string
	}{
		{"a literal inside map()", `body.items.map(i, {"title": i.title, "id": i.id})`, `[{"title":"a","id":1},{"title":"b","id":2}]`},
		{"nested literals", `{"z": {"y": 1, "b": {"k": 2, "a": 3}}, "a": [{"m": 1, "c": 2}]}`, `{"z":{"y":1,"b":{"k":2,"a":3}},"a":[{"m":1,"c":2}]}`},
		{"a constant literal", `[{"zz": 1, "aa": 2}]`, `[{"zz":1,"aa":2}]`},
		{"a literal with a computed key is sorted", `[{"z": 1, "a" + "b": 2}]`, `[{"ab":2,"z":1}]`},
		{"a literal that is compared is still a map", `[{"b": 1, "a": 2} == {"a": 2, "b": 1}, {"b": 1, "a": 2}.b]`, `[true,1]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := compileRules(env, RulesSpec{Data: tt.expr})
			if err != nil {
				t.Fatal(err)
			}
			got, _, _, err := r.DataMembers(nil, &RuleInput{Status: 200, Body: body})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("data = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestRuleFunctionsAreDocumented holds docs/policy.md's list of functions
// to the rule environment: every function and macro CEL offers there is
// listed, and nothing else.
func TestRuleFunctionsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "#### Functions")
	if start < 0 {
		t.Fatal(`docs/policy.md has no "#### Functions" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	// The list's entries are the names in backquotes that start each
	// cell of its first column.
	documented := map[string]bool{}
	row := regexp.MustCompile(`(?m)^\| ([^|]+) \|`)
	name := regexp.MustCompile("`([a-zA-Z_][a-zA-Z0-9_.]*)")
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			documented[n[1]] = true
		}
	}
	env := mustEnv(t, 0)
	offered := map[string]bool{}
	for n, fn := range env.env.Functions() {
		if fn.IsDeclarationDisabled() || !regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.]*$`).MatchString(n) {
			continue // operators, and hidden helpers (math.@max)
		}
		offered[n] = true
	}
	for _, m := range env.env.Macros() {
		n := m.Function()
		if m.IsReceiverStyle() && m.ArgCount() == 0 {
			// The math library's variadic macros, called on its
			// namespace: math.greatest(a, b, …).
			n = "math." + n
		}
		offered[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(offered)) {
		if !documented[n] {
			t.Errorf("%s is offered but not in docs/policy.md's list of functions", n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(documented)) {
		if !offered[n] {
			t.Errorf("docs/policy.md lists %s, which rules do not offer", n)
		}
	}
}
